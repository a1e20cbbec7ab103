//! Interventions over HTTP: `"lucent": {"interventions": [...]}` on chat and completions
//! requests, in `lucent::Intervention`'s JSON shape (the CLI's `--intervene`):
//!
//! ```json
//! "lucent": {"interventions": [{"hook": "blocks.10.hook_resid_post", "op": "add", "value": [0.1, ...]}]}
//! ```
//!
//! They are checked against the model when the request arrives (an unknown hook, a
//! layer, head or unit out of range, a vector of the wrong length, a `mean` ablation:
//! 400 naming the field), each `patch`'s `from` text is run once, and the request's jobs
//! carry the resulting edits. The engine cuts them to each pass's positions
//! (`lucent::edits_for_positions`: positions are those of the prompt and its
//! continuation, counted from 0) and hands them to that request's rows only, so the
//! other requests of a batch compute exactly what they compute alone.

use std::sync::Arc;

use lucent::nn::Edit;
use lucent::pipeline::generate::TextModel;
use lucent::Intervention;

use crate::error::ApiError;

/// The edits of a request's `lucent.interventions` on `model` (`None` for none given);
/// 400 naming the intervention's field for anything the model cannot take.
pub fn request_edits(
    model: &TextModel,
    interventions: Option<&[Intervention]>,
) -> Result<Option<Arc<Vec<Edit>>>, ApiError> {
    let Some(ivs) = interventions.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad = |e: lucent::Error| ApiError::invalid_param("lucent.interventions", e.to_string());
    let edits = lucent::decoder_edits(model, ivs).map_err(bad)?;
    // What a cached decoding cannot run is refused now, not mid-generation.
    lucent::edits_for_positions(&edits, 0, 0).map_err(bad)?;
    Ok(Some(Arc::new(edits)))
}
