//! Activation patching, layer × position ([`Model::patching_sweep`]): which layer and
//! position carry what makes a clean text's answer differ from a corrupted one's.
//!
//! For each layer L and position p, the corrupted text runs with the clean run's vector
//! at `blocks.L.hook_<point>` (the residual stream before block L by default) written
//! at position p (an [`Intervention::set`] at that one position, through
//! [`Model::intervene`]); the cell is the target's log-probability in that run, and the
//! share of the gap it restores:
//!
//! ```text
//! restored[L][p] = (log p_patched − log p_corrupt) / (log p_clean − log p_corrupt)
//! ```
//!
//! 0 = the corrupted run, 1 = the clean run (0 where the two runs agree). One sweep is
//! layers × positions passes. `lucent patch` and the explorer's patching view both call
//! it, so their numbers are one computation.

use crate::api::Model;
use crate::attribution::log_prob;
use crate::model::hooks::Intervention;
use crate::pipeline::generate::argmax;
use crate::{Error, Result, Trace, TraceFilter};

/// The hook points a sweep may patch at each layer (`blocks.L.hook_<name>`).
pub const PATCH_POINTS: [&str; 4] = ["resid_pre", "attn_out", "mlp_out", "resid_post"];

/// What a patching sweep found ([`Model::patching_sweep`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PatchSweep {
    /// The watched next token's id.
    pub target: u32,
    /// The point patched at each layer, as `blocks.L.hook_<point>`.
    pub hook: String,
    /// The clean text's tokens (as text), one per position.
    pub tokens: Vec<String>,
    /// log p(target) after the clean text.
    pub clean_logprob: f64,
    /// log p(target) after the corrupted text.
    pub corrupt_logprob: f64,
    /// log p(target) with layer L's point patched at position p: `[layer][position]`.
    pub logprob: Vec<Vec<f64>>,
    /// The share of the gap each patch restores (see the module docs):
    /// `[layer][position]`.
    pub restored: Vec<Vec<f32>>,
}

impl Model {
    /// Patch the clean text's `blocks.L.hook_<point>` (a name of [`PATCH_POINTS`]) into
    /// the corrupted text's run, one layer and one position at a time (a decoder; the
    /// texts must have as many tokens), watching `target` (default: the clean run's
    /// greedy next token). `progress(done, total)` is called after each of the
    /// layers × positions passes.
    pub fn patching_sweep(
        &self,
        clean: &str,
        corrupt: &str,
        target: Option<u32>,
        point: &str,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<PatchSweep> {
        if !PATCH_POINTS.contains(&point) {
            return Err(Error::Argument(format!(
                "patching point '{point}': give one of {}",
                PATCH_POINTS.join(", ")
            )));
        }
        let cfg = self.config().clone();
        let tokens: Vec<String> = self.tokens(clean)?.into_iter().map(|t| t.text).collect();
        let n_corrupt = self.tokens(corrupt)?.len();
        if tokens.len() != n_corrupt {
            return Err(Error::Argument(format!(
                "the clean text is {} tokens and the corrupted text {n_corrupt}; patching goes position by \
                 position, so give texts of the same number of tokens",
                tokens.len()
            )));
        }
        // The clean run, recording every layer's point.
        let clean_trace = self.trace_with(
            clean,
            Trace::with_filter(TraceFilter {
                leaves: Some(vec!["input".into(), "output".into(), "logits".into()]),
                ..Default::default()
            }),
        )?;
        let plain = self.intervene(&[])?;
        let clean_logits = plain.next_token_logits(clean)?;
        let corrupt_logits = plain.next_token_logits(corrupt)?;
        let target = target.unwrap_or_else(|| argmax(&clean_logits));
        if target as usize >= clean_logits.len() {
            return Err(Error::Argument(format!(
                "target id {target} is outside the vocabulary of {} tokens",
                clean_logits.len()
            )));
        }
        let (lp_clean, lp_corrupt) = (
            log_prob(&clean_logits, target)?,
            log_prob(&corrupt_logits, target)?,
        );
        let points = self.hook_points();
        let (layers, t, d) = (cfg.decoder_layers, tokens.len(), cfg.d_model);
        let total = layers * t;
        let mut logprob = vec![vec![0.0f64; t]; layers];
        let mut restored = vec![vec![0.0f32; t]; layers];
        for l in 0..layers {
            let hook = format!("blocks.{l}.hook_{point}");
            let found = points.iter().find(|p| p.name == hook).ok_or_else(|| {
                Error::Argument(format!("patching point {point}: this model has no {hook}"))
            })?;
            let values = clean_trace.get(&found.trace_name).ok_or_else(|| {
                Error::Argument(format!(
                    "the clean run recorded nothing at {hook} ({})",
                    found.trace_name
                ))
            })?; // (1, t, d)
            for p in 0..t {
                // The clean run's vector at (layer, position), written at that position: a
                // patch from the clean text without running it again.
                let v = values.data()[p * d..(p + 1) * d].to_vec();
                let iv = Intervention::set(hook.as_str(), v).positions(vec![p]);
                let logits = self.intervene(&[iv])?.next_token_logits(corrupt)?;
                let lp = log_prob(&logits, target)?;
                logprob[l][p] = lp;
                let gap = lp_clean - lp_corrupt;
                restored[l][p] = if gap.abs() > 1e-12 {
                    ((lp - lp_corrupt) / gap) as f32
                } else {
                    0.0
                };
                progress(l * t + p + 1, total);
            }
        }
        Ok(PatchSweep {
            target,
            hook: format!("blocks.L.hook_{point}"),
            tokens,
            clean_logprob: lp_clean,
            corrupt_logprob: lp_corrupt,
            logprob,
            restored,
        })
    }
}
