//! `lucent export hf RUN_DIR OUT_DIR`: a language model trained by `lucent train lm`
//! written as a Hugging Face GPT-2 folder, so that `transformers` loads it
//! (`GPT2LMHeadModel.from_pretrained(OUT_DIR)`) and a run can go on under PyTorch (DDP,
//! FSDP, on many machines); lucent reads such a folder back (the `gpt2` family).
//!
//! The folder holds:
//!
//! - `config.json`: [`gpt2::hf_config`] of the model's config (`model_type: gpt2`);
//! - `model.safetensors`: the weights under GPT-2's keys and layout
//!   ([`gpt2::export_tensors`]: Conv1D matrices (in, out), Q, K, V fused), f32, metadata
//!   `{"format": "pt"}`; the tied head is not written, as `transformers` saves it;
//! - `tokenizer.json`: the run's byte-level BPE as it is, or for a character model a
//!   BPE with one token per character and no merges, with the `Fuse` decoder (the
//!   characters' ids are the run's: the same ids, the same text).
//!
//! The files are the same bytes for the same run (keys sorted, no time stamps), so a
//! test can hold an export to the reference logits PyTorch computed from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::io::tokenizer::HfTokenizer;
use crate::model::family::gpt2;
use crate::train::checkpoint;
use crate::train::data::{CharTokenizer, TextTokenizer};
use crate::train::TrainedModel;
use crate::{Error, Result};

/// What [`export_hf`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Exported {
    /// The folder.
    pub dir: PathBuf,
    /// The files written, in the folder.
    pub files: Vec<String>,
    /// Tensors in `model.safetensors`.
    pub tensors: usize,
    /// `char` or `bpe`.
    pub tokenizer: String,
}

/// Write the language model trained in `run_dir` into `out_dir` (created if needed) as
/// a Hugging Face GPT-2 folder (module docs). Errors for an encoder-decoder run.
pub fn export_hf(run_dir: &Path, out_dir: &Path) -> Result<Exported> {
    let (model, tokenizer) = match TrainedModel::load(run_dir)? {
        TrainedModel::Lm { model, tokenizer } => (model, tokenizer),
        TrainedModel::Seq2Seq { .. } => {
            return Err(Error::Argument(format!(
                "{} is an encoder-decoder trained on a task; `export hf` writes language models (lucent train lm) as GPT-2",
                run_dir.display()
            )))
        }
    };
    let config = gpt2::hf_config(&model.config)?;
    let tensors = gpt2::export_tensors(&model)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;

    let config_path = out_dir.join("config.json");
    // Keys in sorted order, whatever order serde_json's maps keep (llguidance turns on
    // its `preserve_order`): the same file for the same model, key for key.
    let json = serde_json::to_string_pretty(&sorted_keys(config))
        .map_err(|e| Error::format(&config_path, e.to_string()))?;
    std::fs::write(&config_path, json + "\n").map_err(|e| Error::io(&config_path, e))?;

    let weights_path = out_dir.join("model.safetensors");
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    checkpoint::save(&weights_path, &tensors, meta)?;

    let tokenizer_path = out_dir.join("tokenizer.json");
    hf_tokenizer(&tokenizer)?.save(&tokenizer_path)?;

    Ok(Exported {
        dir: out_dir.to_path_buf(),
        files: vec![
            "config.json".into(),
            "model.safetensors".into(),
            "tokenizer.json".into(),
        ],
        tensors: tensors.len(),
        tokenizer: tokenizer.kind().into(),
    })
}

/// The run's tokenizer as a `tokenizer.json` (module docs).
pub fn hf_tokenizer(tokenizer: &TextTokenizer) -> Result<HfTokenizer> {
    match tokenizer {
        TextTokenizer::Bpe(t) => Ok(t.as_ref().clone()),
        TextTokenizer::Char(c) => char_tokenizer(c),
    }
}

/// One token per character, ids as the run's: a BPE model without merges splits any
/// text into its characters, and the `Fuse` decoder joins them back.
fn char_tokenizer(c: &CharTokenizer) -> Result<HfTokenizer> {
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::models::bpe::{Vocab, BPE};
    let vocab: Vocab = c
        .chars
        .iter()
        .enumerate()
        .map(|(id, ch)| (ch.to_string(), id as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, Vec::new())
        .build()
        .map_err(|e| Error::Tokenizer(format!("cannot build the characters' tokenizer: {e}")))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_decoder(Some(Fuse::new()));
    HfTokenizer::from_tokenizers(tok)
}

/// `v` with every object's keys in sorted order (arrays keep theirs).
fn sorted_keys(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_keys).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::tokenizer::Tokenizer;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn characters_round_trip_through_tokenizer_json() -> TestResult {
        let text = "Call me Ishmael.\nSome years ago — never mind how long";
        let c = CharTokenizer::fit(text);
        let hf = char_tokenizer(&c)?;
        let ids: Vec<u32> = c.encode(text)?.into_iter().map(|i| i as u32).collect();
        assert_eq!(hf.encode_ids(text, false, false)?, ids);
        assert_eq!(hf.decode_ids(&ids, false)?, text);
        // Saved and read back, it is the same tokenizer.
        let dir = std::env::temp_dir().join(format!("lucent-chartok-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("tokenizer.json");
        hf.save(&path)?;
        let back = HfTokenizer::from_file(&path)?;
        assert_eq!(back.encode_ids(text, false, false)?, ids);
        assert_eq!(back.decode_ids(&ids, false)?, text);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
