//! The model-configuration flags shared by `params`, `memory` and `shapes` (a preset
//! and/or single dimensions) and the one-line description of a config.

use crate::commands::numbers::at_least;
use crate::show::count;
use lucent::model::presets::{resolve, ConfigOverrides};
use lucent::model::{ModelConfig, ModelKind};
use lucent::Result;

/// A model configuration from a preset and/or single dimensions (shared by `params`,
/// `memory` and `shapes`).
#[derive(clap::Args, Debug, Clone)]
pub struct ConfigArgs {
    /// Start from a named model: bert-base, gpt2, llama-7b, minilm, smollm2, gemma3,
    /// transformer-base (`lucent params --list`) [default: none: a GPT-2-style decoder].
    #[arg(long, short = 'p', value_name = "NAME")]
    pub preset: Option<String>,
    /// Model width d [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "D", value_parser = at_least::<0, usize>)]
    pub d_model: Option<usize>,
    /// Query heads h (d_k becomes d_model / heads) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "H", value_parser = at_least::<0, usize>)]
    pub heads: Option<usize>,
    /// Key/value heads (1: multi-query; between 1 and heads: grouped-query) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "H_KV", value_parser = at_least::<0, usize>)]
    pub kv_heads: Option<usize>,
    /// Features per head d_k, when it is not d_model / heads (Gemma 3: 256) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "D_K", value_parser = at_least::<0, usize>)]
    pub head_dim: Option<usize>,
    /// Feed-forward hidden width [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "D_FF", value_parser = at_least::<0, usize>)]
    pub d_ff: Option<usize>,
    /// Layers of every stack [default: the preset's, else GPT-2's].
    #[arg(long, short = 'n', value_name = "N", value_parser = at_least::<0, usize>)]
    pub layers: Option<usize>,
    /// Encoder layers (encoder or encoder-decoder configs) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "N", value_parser = at_least::<0, usize>)]
    pub encoder_layers: Option<usize>,
    /// Decoder layers (decoder or encoder-decoder configs) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "N", value_parser = at_least::<0, usize>)]
    pub decoder_layers: Option<usize>,
    /// Vocabulary size V [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "V", value_parser = at_least::<0, usize>)]
    pub vocab: Option<usize>,
    /// Longest sequence (size of a learned position table) [default: the preset's, else GPT-2's].
    #[arg(long, value_name = "T", value_parser = at_least::<0, usize>)]
    pub max_len: Option<usize>,
}

impl ConfigArgs {
    /// The config these flags describe, and a label for it ("gpt2", "gpt2 (modified)",
    /// "custom decoder").
    pub fn config(&self) -> Result<(String, ModelConfig)> {
        let o = ConfigOverrides {
            d_model: self.d_model,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            d_ff: self.d_ff,
            layers: self.layers,
            encoder_layers: self.encoder_layers,
            decoder_layers: self.decoder_layers,
            vocab_size: self.vocab,
            max_positions: self.max_len,
        };
        let cfg = resolve(self.preset.as_deref(), &o)?;
        let label = match (&self.preset, o.is_empty()) {
            (Some(p), true) => p.clone(),
            (Some(p), false) => format!("{p} (modified)"),
            (None, _) => "custom decoder".to_string(),
        };
        Ok((label, cfg))
    }
}

/// One line describing a config's dimensions.
pub fn describe(cfg: &ModelConfig) -> String {
    let kind = match cfg.kind {
        ModelKind::Encoder => format!("encoder, {}", count(cfg.encoder_layers, "layer", "layers")),
        ModelKind::Decoder => format!("decoder, {}", count(cfg.decoder_layers, "layer", "layers")),
        ModelKind::EncoderDecoder => format!(
            "encoder-decoder, {} + {} layers",
            cfg.encoder_layers, cfg.decoder_layers
        ),
    };
    let kv = if cfg.n_kv_heads == cfg.n_heads {
        String::new()
    } else {
        format!(" / {}", count(cfg.n_kv_heads, "kv head", "kv heads"))
    };
    format!(
        "{kind}, d {}, {}{kv} × d_k {}, d_ff {}, V {}",
        cfg.d_model,
        count(cfg.n_heads, "head", "heads"),
        cfg.head_dim,
        cfg.d_ff,
        cfg.vocab_size
    )
}
