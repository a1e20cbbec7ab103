//! Memory a model needs at a batch size and sequence length: weights, KV cache and
//! attention score matrices.
//!
//! With s bytes per element (4 for f32, 2 for f16/bf16), batch b, sequence length T,
//! h query heads, h_kv key/value heads of d_k features and L attention layers:
//!
//! - weights: parameters · s;
//! - KV cache: 2 · L_dec · b · h_kv · T · d_k · s (keys and values of every decoder
//!   layer); layers with a sliding window w need only min(T, w) positions;
//! - one head's score matrix: T² · s, which grows as O(T²): doubling T quadruples it;
//! - one layer's scores: b · h · T² · s; all layers at once (training keeps them for the
//!   backward pass): that times the number of attention sub-layers.
//!
//! The guides say "2048 tokens, ~6 MB per head"; the true figure is
//! 2048² · 4 B = 16,777,216 B = 16 MiB per head in f32.

use serde::Serialize;

use crate::model::config::{ModelConfig, ModelKind};
use crate::model::params::ParamCount;
use crate::tensor::Dtype;
use crate::{Error, Result};

/// Byte counts for one config at one (batch, sequence length, dtype).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// Element type of weights, cache and scores.
    pub dtype: String,
    /// Bytes per element.
    pub bytes_per_element: u64,
    /// Batch size b.
    pub batch: usize,
    /// Sequence length T (target length for an encoder-decoder).
    pub seq: usize,
    /// Number of parameters.
    pub parameters: u64,
    /// parameters · bytes.
    pub weights: u64,
    /// Self-attention KV cache of the decoder layers, full length:
    /// 2 · L_dec · b · h_kv · T · d_k · bytes (0 for an encoder, which does not decode).
    pub kv_cache: u64,
    /// The same with local (sliding-window) layers keeping only min(T, window)
    /// positions; equal to `kv_cache` without a window.
    pub kv_cache_windowed: u64,
    /// Encoder-decoder: the cross-attention keys and values of the encoder output, kept
    /// for every decoder layer (source length T): 2 · L_dec · b · h_kv · T · d_k · bytes.
    pub cross_kv: u64,
    /// One head's score matrix: T² · bytes.
    pub scores_per_head: u64,
    /// One layer's scores: b · h · T² · bytes.
    pub scores_per_layer: u64,
    /// Attention sub-layers in the model (encoder self, decoder self, decoder cross).
    pub attention_layers: usize,
    /// Every attention sub-layer's scores kept at once: attention_layers · b · h · T² · bytes.
    pub scores_all_layers: u64,
}

impl MemoryEstimate {
    /// Estimate the memory of `cfg` at `batch` sequences of `seq` tokens in `dtype`.
    /// Zero batch or length is an error.
    pub fn of(cfg: &ModelConfig, batch: usize, seq: usize, dtype: Dtype) -> Result<MemoryEstimate> {
        if batch == 0 {
            return Err(Error::Argument("batch must be > 0, got 0".into()));
        }
        if seq == 0 {
            return Err(Error::Argument(
                "seq (the sequence length T) must be > 0, got 0".into(),
            ));
        }
        let params = ParamCount::of(cfg)?.total();
        let s = dtype.size() as u64;
        let (b, t) = (batch as u64, seq as u64);
        let h = cfg.n_heads as u64;
        let kv_row = mul(&[2, b, cfg.n_kv_heads as u64, cfg.head_dim as u64, s])?; // per layer per position
        let dec_layers = match cfg.kind {
            ModelKind::Encoder => 0,
            _ => cfg.decoder_layers,
        };
        let kv_cache = mul(&[kv_row, dec_layers as u64, t])?;
        let mut kv_cache_windowed = 0u64;
        for i in 0..dec_layers {
            let kept = cfg.window_of_layer(i).map_or(t, |w| t.min(w as u64));
            kv_cache_windowed = add(kv_cache_windowed, mul(&[kv_row, kept])?)?;
        }
        let cross_kv = if cfg.kind == ModelKind::EncoderDecoder {
            kv_cache
        } else {
            0
        };
        let scores_per_head = mul(&[t, t, s])?;
        let scores_per_layer = mul(&[b, h, scores_per_head])?;
        let attention_layers = match cfg.kind {
            ModelKind::Encoder => cfg.encoder_layers,
            ModelKind::Decoder => cfg.decoder_layers,
            ModelKind::EncoderDecoder => cfg.encoder_layers + 2 * cfg.decoder_layers,
        };
        Ok(MemoryEstimate {
            dtype: dtype.to_string(),
            bytes_per_element: s,
            batch,
            seq,
            parameters: params,
            weights: mul(&[params, s])?,
            kv_cache,
            kv_cache_windowed,
            cross_kv,
            scores_per_head,
            scores_per_layer,
            attention_layers,
            scores_all_layers: mul(&[attention_layers as u64, scores_per_layer])?,
        })
    }
}

/// Bytes in the largest binary unit that keeps the number ≥ 1: "16.00 MiB", "512 B".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// `n` with thousands separators: 16777216 → "16,777,216".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn overflow() -> Error {
    Error::Argument("the memory figure does not fit in 64 bits; use a smaller batch or seq".into())
}

fn mul(factors: &[u64]) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |a, &b| a.checked_mul(b))
        .ok_or_else(overflow)
}

fn add(a: u64, b: u64) -> Result<u64> {
    a.checked_add(b).ok_or_else(overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_separators() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(16_777_216), "16.00 MiB");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(6_738_415_616), "6,738,415,616");
    }
}
