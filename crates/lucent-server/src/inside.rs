//! Seeing inside: the `"lucent"` request field, which returns the attention weights
//! (and chosen intermediates) of the very forward passes that produced an answer.
//!
//! ```json
//! "lucent": {"attention": {"layers": [0, 29], "heads": [0, 4]}, "trace": ["q", "output"]}
//! ```
//!
//! - `attention`: softmax weights of the chosen layers and heads (default: all), from
//!   the prompt's pass and from each step that produced a token. The prompt's come as
//!   `attention[l][h][q]`, the weights of query position q over keys 0..=q (a
//!   triangle: the causal mask hides the rest). Generated token i carries
//!   `attention[l][h]`, the weights of the pass whose logits gave it: its query is the
//!   position just before it (the prompt's last position for the first token), over
//!   every key up to there.
//! - `trace`: any of the [`LEAVES`] of [`lucent::Trace`] in those layers (or in
//!   `"layers"` when there is no `attention`), each as `{"name", "shape", "data"}`
//!   (data flat, row-major); the prompt's also name the positions they cover
//!   (`"positions": [start, end]`: a long prompt is read in pieces).
//!
//! - `interventions`: a list of `lucent::Intervention`s applied to this request's own
//!   passes (see [`crate::intervene`]); with nothing else asked, no view is returned.
//!
//! These are recorded from the same pass that computes the answer (a traced pass is
//! the same arithmetic: the tokens do not change). A request whose view would hold
//! more numbers than the server's cap (`--max-inside-floats`) is refused up front
//! with the estimate, so a view never takes the server's memory by surprise.

use std::sync::Arc;

use lucent::model::ModelConfig;
use lucent::pipeline::generate::TextModel;
use lucent::{Trace, TraceFilter};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;

/// The intermediates a request may ask for by name (see [`lucent::nn::trace`]).
pub const LEAVES: &[&str] = &[
    "input", "q", "k", "v", "scores", "scaled", "mask", "weights", "context", "output",
];

/// The `"lucent"` field of a request.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InsideRequest {
    /// Attention weights of these layers and heads.
    pub attention: Option<AttentionRequest>,
    /// Intermediates by leaf name.
    pub trace: Option<Vec<String>>,
    /// Layers of the trace when no `attention` names them (default: all).
    pub layers: Option<Vec<usize>>,
    /// Interventions on this request's own passes (`lucent::Intervention`'s JSON shape,
    /// as the CLI's `--intervene`): see [`crate::intervene`].
    pub interventions: Option<Vec<lucent::Intervention>>,
}

impl InsideRequest {
    /// Whether the request asks to see inside (anything but interventions alone).
    pub fn wants_view(&self) -> bool {
        self.interventions.is_none()
            || self.attention.is_some()
            || self.trace.is_some()
            || self.layers.is_some()
    }
}

/// Which attention weights to return.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionRequest {
    /// Layers (default: all).
    pub layers: Option<Vec<usize>>,
    /// Query heads (default: all).
    pub heads: Option<Vec<usize>>,
}

/// A checked inside request.
#[derive(Clone, Debug)]
pub struct InsideSpec {
    /// Layers shown, ascending.
    pub layers: Vec<usize>,
    /// Heads shown (attention), ascending.
    pub heads: Vec<usize>,
    /// Whether attention weights were asked for.
    pub attention: bool,
    /// Trace leaves asked for.
    pub leaves: Vec<String>,
}

/// The checked `layers` or `heads` list: each below `n`, sorted, without repeats;
/// `None` is all of them.
fn pick(list: &Option<Vec<usize>>, n: usize, what: &str) -> Result<Vec<usize>, ApiError> {
    match list {
        None => Ok((0..n).collect()),
        Some(v) => {
            if let Some(bad) = v.iter().find(|&&x| x >= n) {
                return Err(ApiError::invalid_param(
                    &format!("lucent.{what}"),
                    format!(
                        "{what} {bad} does not exist: the model has {n} (0..{})",
                        n - 1
                    ),
                ));
            }
            let mut v = v.clone();
            v.sort_unstable();
            v.dedup();
            Ok(v)
        }
    }
}

impl InsideSpec {
    /// Check `req` against `config`; refuse it if the view of a prompt of `t` tokens
    /// and up to `max_tokens` new ones, read in `pieces` prompt pieces, would hold more
    /// than `cap` numbers.
    pub fn new(
        req: &InsideRequest,
        config: &ModelConfig,
        t: usize,
        max_tokens: usize,
        pieces: usize,
        cap: u64,
    ) -> Result<InsideSpec, ApiError> {
        let n_layers = config.decoder_layers;
        let (layers, heads) = match &req.attention {
            Some(a) => (
                pick(&a.layers, n_layers, "layers")?,
                pick(&a.heads, config.n_heads, "heads")?,
            ),
            None => (pick(&req.layers, n_layers, "layers")?, Vec::new()),
        };
        let leaves = req.trace.clone().unwrap_or_default();
        if let Some(bad) = leaves.iter().find(|l| !LEAVES.contains(&l.as_str())) {
            return Err(ApiError::invalid_param(
                "lucent.trace",
                format!(
                    "unknown intermediate '{bad}'; ask for any of {}",
                    LEAVES.join(", ")
                ),
            ));
        }
        let spec = InsideSpec {
            layers,
            heads,
            attention: req.attention.is_some(),
            leaves,
        };
        let need = spec.estimate(config, t as u128, max_tokens as u128, pieces.max(1) as u128);
        if need > cap as u128 {
            return Err(ApiError::invalid_param(
                "lucent",
                format!(
                    "the inside view asked for would hold up to {need} numbers ({} prompt tokens, up to {max_tokens} new \
                     ones), more than this server's cap of {cap} (lucent serve --max-inside-floats): ask for fewer \
                     layers, heads or intermediates, or set max_tokens lower",
                    t
                ),
            ));
        }
        Ok(spec)
    }

    /// The most numbers the view can hold (an upper bound).
    fn estimate(&self, c: &ModelConfig, t: u128, m: u128, pieces: u128) -> u128 {
        let l = self.layers.len() as u128;
        let (h, h_kv, dk, d) = (
            c.n_heads as u128,
            c.n_kv_heads as u128,
            c.head_dim as u128,
            c.d_model as u128,
        );
        // Keys seen: the prompt's triangle, then t + i for generated token i.
        let tri = t * (t + 1) / 2;
        let gen_keys = m * t + m * m.saturating_sub(1) / 2;
        let mut n = 0u128;
        if self.attention {
            n += l * self.heads.len() as u128 * (tri + gen_keys);
        }
        for leaf in &self.leaves {
            let per_layer = match leaf.as_str() {
                "q" | "context" => h * dk * (t + m),
                // The keys and values of every position so far, at each piece and step.
                "k" | "v" => h_kv * dk * (t * pieces + gen_keys),
                "scores" | "scaled" | "mask" | "weights" => h * (t * t + gen_keys),
                // input and output of the attention and feed-forward blocks and the layer.
                _ => 3 * d * (t + m),
            };
            n += l * per_layer + d * (t + m);
        }
        n
    }

    /// The trace filter that keeps what this view needs.
    pub fn filter(&self) -> TraceFilter {
        let mut leaves = self.leaves.clone();
        if self.attention && !leaves.iter().any(|l| l == "weights") {
            leaves.push("weights".into());
        }
        TraceFilter {
            leaves: Some(leaves),
            layers: Some(self.layers.clone()),
            prefix: Some("decoder.".into()),
        }
    }

    /// The view of one decode step's pass (one query position): per layer and head
    /// the weights over every key so far, and the trace entries asked for.
    pub fn step_view(&self, trace: &Trace) -> Value {
        let mut attention: Vec<Vec<Value>> = vec![Vec::new(); self.layers.len()];
        let mut entries = Vec::new();
        for (name, t) in trace.entries() {
            let leaf = leaf_of(name);
            if leaf == "weights" && self.attention && name.ends_with(".attn.weights") {
                if let (Some(li), [_, h, 1, t_k]) = (self.layer_index(name), t.shape()) {
                    for &head in &self.heads {
                        if head < *h {
                            attention[li].push(json!(&t.data()[head * t_k..(head + 1) * t_k]));
                        }
                    }
                }
            }
            if self.leaves.iter().any(|l| l == leaf) {
                entries.push(json!({"name": name, "shape": t.shape(), "data": t.data()}));
            }
        }
        let mut v = json!({});
        if self.attention {
            v["attention"] = json!(attention);
        }
        if !self.leaves.is_empty() {
            v["trace"] = json!(entries);
        }
        v
    }

    /// The position of `name`'s layer among the layers shown.
    fn layer_index(&self, name: &str) -> Option<usize> {
        let mut parts = name.split('.');
        while let Some(p) = parts.next() {
            if p == "layer" {
                let l: usize = parts.next()?.parse().ok()?;
                return self.layers.iter().position(|&x| x == l);
            }
        }
        None
    }
}

/// The last dotted part of a trace name.
fn leaf_of(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The prompt's view, assembled piece by piece as the prompt is read.
#[derive(Debug)]
pub struct PromptView {
    spec: Arc<InsideSpec>,
    tokens: Vec<String>,
    /// [layer][head][query] → weights over keys 0..=query.
    attention: Vec<Vec<Vec<Vec<f32>>>>,
    trace: Vec<Value>,
}

impl PromptView {
    /// An empty view of `prompt` (its tokens' texts as labels).
    pub fn new(spec: Arc<InsideSpec>, model: &TextModel, prompt: &[u32]) -> PromptView {
        let tokens = prompt
            .iter()
            .map(|&id| {
                String::from_utf8_lossy(&model.tokenizer.token_bytes(id, false).unwrap_or_default())
                    .into_owned()
            })
            .collect();
        let attention = vec![vec![Vec::new(); spec.heads.len()]; spec.layers.len()];
        PromptView {
            spec,
            tokens,
            attention,
            trace: Vec::new(),
        }
    }

    /// Take what `trace` recorded for the prompt piece starting at position `start`.
    pub fn add_piece(&mut self, start: usize, trace: &Trace) {
        for (name, t) in trace.entries() {
            let leaf = leaf_of(name);
            if leaf == "weights" && self.spec.attention && name.ends_with(".attn.weights") {
                if let (Some(li), &[_, h, c, t_k]) = (self.spec.layer_index(name), t.shape()) {
                    for (hj, &head) in self.spec.heads.iter().enumerate() {
                        if head >= h {
                            continue;
                        }
                        for r in 0..c {
                            let q = start + r;
                            let row = &t.data()[(head * c + r) * t_k..][..t_k];
                            self.attention[li][hj].push(row[..(q + 1).min(t_k)].to_vec());
                        }
                    }
                }
            }
            if self.spec.leaves.iter().any(|l| l == leaf) {
                let rows = t.shape().get(2).copied().unwrap_or(1);
                self.trace.push(json!({
                    "name": name, "positions": [start, start + rows],
                    "shape": t.shape(), "data": t.data(),
                }));
            }
        }
    }

    /// The view that goes with the first generated token: each layer and head's
    /// weights of the prompt's last position.
    pub fn last_row_view(&self) -> Value {
        let mut v = json!({});
        if self.spec.attention {
            let rows: Vec<Vec<&[f32]>> = self
                .attention
                .iter()
                .map(|heads| {
                    heads
                        .iter()
                        .map(|rows| rows.last().map_or(&[][..], |r| &r[..]))
                        .collect()
                })
                .collect();
            v["attention"] = json!(rows);
        }
        if !self.spec.leaves.is_empty() {
            v["trace"] = json!([]);
        }
        v
    }

    /// The whole prompt's view.
    pub fn into_json(self) -> Value {
        let mut v = json!({
            "tokens": self.tokens,
            "layers": self.spec.layers,
        });
        if self.spec.attention {
            v["heads"] = json!(self.spec.heads);
            v["attention"] = json!(self.attention);
        }
        if !self.spec.leaves.is_empty() {
            v["trace"] = json!(self.trace);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        let mut c = lucent::model::presets::custom_decoder();
        c.decoder_layers = 4;
        c.n_heads = 2;
        c.n_kv_heads = 1;
        c.head_dim = 8;
        c.d_model = 16;
        c
    }

    #[test]
    fn requests_are_checked_and_capped() {
        let c = config();
        let req = InsideRequest {
            attention: Some(AttentionRequest {
                layers: Some(vec![3, 1, 3]),
                heads: None,
            }),
            ..Default::default()
        };
        let s = InsideSpec::new(&req, &c, 10, 5, 1, 1_000_000).unwrap();
        assert_eq!(
            (s.layers.clone(), s.heads.clone()),
            (vec![1, 3], vec![0, 1])
        );
        // 2 layers × 2 heads × (55 + 5·10 + 10) numbers.
        assert_eq!(s.estimate(&c, 10, 5, 1), 4 * (55 + 50 + 10));
        let e = InsideSpec::new(&req, &c, 10, 5, 1, 100).unwrap_err();
        assert!(e.message.contains("460"), "{}", e.message);
        let bad = InsideRequest {
            attention: Some(AttentionRequest {
                layers: Some(vec![4]),
                heads: None,
            }),
            ..Default::default()
        };
        let e = InsideSpec::new(&bad, &c, 10, 5, 1, 1000).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("lucent.layers"));
        let bad = InsideRequest {
            trace: Some(vec!["nonsense".into()]),
            ..Default::default()
        };
        assert!(InsideSpec::new(&bad, &c, 10, 5, 1, 1000).is_err());
    }
}
