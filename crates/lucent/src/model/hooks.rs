//! Hook points under TransformerLens's names, and [`Intervention`]s: the values that
//! write at them (ablation, activation patching, steering).
//!
//! lucent's [`Trace`](crate::Trace) names what a forward pass hands over by scope
//! (`decoder.layer.3.attn.context`); TransformerLens (TL) names the same points
//! `blocks.3.attn.hook_z`. This file is the one table between the two ([`hook_points`]):
//! the trace keeps its own names (the explorer, `lucent attention` and the tests read
//! them), and every door that takes a hook name takes TL's.
//!
//! | TL name | trace name (S = `decoder` or `encoder`) | shape |
//! | --- | --- | --- |
//! | `hook_embed` | `S.input` (embeddings with any absolute positions and embedding norm) | (b, t, d) |
//! | `blocks.L.hook_resid_pre` | `S.input` (L = 0) or `S.layer.{L-1}.output` | (b, t, d) |
//! | `blocks.L.ln1.hook_normalized` | `S.layer.L.attn.input` | (b, t, d) |
//! | `blocks.L.attn.hook_q` | `S.layer.L.attn.q` (after QK-norm and RoPE: TL's `hook_rot_q`) | (b, h, t, d_k) |
//! | `blocks.L.attn.hook_k`, `hook_v` | `S.layer.L.attn.k`, `.v` (k after RoPE) | (b, h_kv, t, d_k) |
//! | `blocks.L.attn.hook_pattern` | `S.layer.L.attn.weights` | (b, h, t_q, t_k) |
//! | `blocks.L.attn.hook_z` | `S.layer.L.attn.context` | (b, h, t, d_k) |
//! | `blocks.L.hook_attn_out` | `S.layer.L.attn.output` (before a sandwich post-norm) | (b, t, d) |
//! | `blocks.L.ln2.hook_normalized` | `S.layer.L.ffn.input` | (b, t, d) |
//! | `blocks.L.mlp.hook_post` | `S.layer.L.ffn.hidden` (after the activation / gate) | (b, t, d_ff) |
//! | `blocks.L.hook_mlp_out` | `S.layer.L.ffn.output` (before a sandwich post-norm) | (b, t, d) |
//! | `blocks.L.hook_resid_post` | `S.layer.L.output` | (b, t, d) |
//! | `ln_final.hook_normalized` | `S.output` (models with a final norm) | (b, t, d) |
//!
//! An encoder-decoder has each name under `encoder.` and `decoder.`, and its decoder
//! blocks also `cross_attn.hook_q` … `hook_z` and `hook_cross_attn_out`. lucent's per-head
//! tensors put the head before the position (TL: position first); an [`Intervention`]
//! selects by name (`head`, `positions`), so the order only matters to whoever reads a
//! recorded tensor.

use serde::{Deserialize, Serialize};

use crate::model::{ModelConfig, ModelKind};
use crate::nn::edit::{Edit, EditOp};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// What a hook point holds, for checking an intervention against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointShape {
    /// (b, t, width): the residual stream, a sub-layer's input or output, or the
    /// feed-forward units.
    Rows {
        /// The last axis (d_model, or d_ff for `mlp.hook_post`).
        width: usize,
    },
    /// (b, heads, t, d_k): queries, keys, values, the heads' outputs.
    Heads {
        /// Heads (h, or h_kv for keys and values).
        heads: usize,
        /// d_k.
        width: usize,
    },
    /// (b, h, t_q, t_k): an attention pattern.
    Pattern {
        /// h.
        heads: usize,
    },
}

/// One hook point of a model: its TransformerLens name and where lucent's trace has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookPoint {
    /// TransformerLens's name (`blocks.3.attn.hook_z`).
    pub name: String,
    /// The trace's full dotted name (`decoder.layer.3.attn.context`).
    pub trace_name: String,
    /// What it holds.
    pub shape: PointShape,
}

/// Every hook point of a model of `cfg`, in the order a forward pass reaches them
/// (module docs). `blocks.L.hook_resid_pre` and `blocks.{L-1}.hook_resid_post` are the
/// same point of the pass under two names, as in TransformerLens.
pub fn hook_points(cfg: &ModelConfig) -> Vec<HookPoint> {
    let mut out = Vec::new();
    match cfg.kind {
        ModelKind::Encoder => stack_points(cfg, "", "encoder", cfg.encoder_layers, false, &mut out),
        ModelKind::Decoder => stack_points(cfg, "", "decoder", cfg.decoder_layers, false, &mut out),
        ModelKind::EncoderDecoder => {
            stack_points(
                cfg,
                "encoder.",
                "encoder",
                cfg.encoder_layers,
                false,
                &mut out,
            );
            stack_points(
                cfg,
                "decoder.",
                "decoder",
                cfg.decoder_layers,
                true,
                &mut out,
            );
        }
    }
    out
}

/// The points of one stack: TL names under `tl` (`""` or `"encoder."`), trace names
/// under `stack`.
fn stack_points(
    cfg: &ModelConfig,
    tl: &str,
    stack: &str,
    layers: usize,
    cross: bool,
    out: &mut Vec<HookPoint>,
) {
    let d = cfg.d_model;
    let rows = |width| PointShape::Rows { width };
    let mut push = |name: String, trace_name: String, shape| {
        out.push(HookPoint {
            name,
            trace_name,
            shape,
        })
    };
    push(format!("{tl}hook_embed"), format!("{stack}.input"), rows(d));
    for l in 0..layers {
        let b = format!("{tl}blocks.{l}");
        let s = format!("{stack}.layer.{l}");
        let resid_pre = if l == 0 {
            format!("{stack}.input")
        } else {
            format!("{stack}.layer.{}.output", l - 1)
        };
        push(format!("{b}.hook_resid_pre"), resid_pre, rows(d));
        push(
            format!("{b}.ln1.hook_normalized"),
            format!("{s}.attn.input"),
            rows(d),
        );
        let mut attention = |tl_scope: &str, scope: &str, out_name: &str| {
            let heads = |heads| PointShape::Heads {
                heads,
                width: cfg.head_dim,
            };
            push(
                format!("{b}.{tl_scope}.hook_q"),
                format!("{s}.{scope}.q"),
                heads(cfg.n_heads),
            );
            push(
                format!("{b}.{tl_scope}.hook_k"),
                format!("{s}.{scope}.k"),
                heads(cfg.n_kv_heads),
            );
            push(
                format!("{b}.{tl_scope}.hook_v"),
                format!("{s}.{scope}.v"),
                heads(cfg.n_kv_heads),
            );
            push(
                format!("{b}.{tl_scope}.hook_pattern"),
                format!("{s}.{scope}.weights"),
                PointShape::Pattern { heads: cfg.n_heads },
            );
            push(
                format!("{b}.{tl_scope}.hook_z"),
                format!("{s}.{scope}.context"),
                heads(cfg.n_heads),
            );
            push(
                format!("{b}.{out_name}"),
                format!("{s}.{scope}.output"),
                rows(d),
            );
        };
        attention("attn", "attn", "hook_attn_out");
        if cross {
            attention("cross_attn", "cross_attn", "hook_cross_attn_out");
        }
        push(
            format!("{b}.ln2.hook_normalized"),
            format!("{s}.ffn.input"),
            rows(d),
        );
        push(
            format!("{b}.mlp.hook_post"),
            format!("{s}.ffn.hidden"),
            rows(cfg.d_ff),
        );
        push(
            format!("{b}.hook_mlp_out"),
            format!("{s}.ffn.output"),
            rows(d),
        );
        push(
            format!("{b}.hook_resid_post"),
            format!("{s}.output"),
            rows(d),
        );
    }
    if cfg.final_norm {
        push(
            format!("{tl}ln_final.hook_normalized"),
            format!("{stack}.output"),
            rows(d),
        );
    }
}

/// What an [`Intervention`] does (JSON: `"zero"`, `"mean"`, `"add"`, `"set"`, `"scale"`,
/// `"patch"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterventionOp {
    /// Write 0 (zero ablation).
    Zero,
    /// Write the mean over the run's positions (mean ablation).
    Mean,
    /// Add `value` (steering).
    Add,
    /// Write `value`.
    Set,
    /// Multiply by `value` (e.g. 0 at some key positions of a pattern: knockout).
    Scale,
    /// Write what the same point held in the run over `from` (activation patching).
    Patch,
}

/// An intervention's `value`: one number for every selected element, or one per element
/// of the hook point's last axis (a steering vector of d_model numbers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InterventionValue {
    /// The same number everywhere.
    Number(f32),
    /// One number per element of the last axis.
    Vector(Vec<f32>),
}

/// A write at a hook point, as JSON:
/// `{"hook": "blocks.3.attn.hook_z", "op": "zero", "head": 2}`,
/// `{"hook": "blocks.6.hook_resid_post", "op": "add", "value": [..576 numbers..]}`,
/// `{"hook": "blocks.0.hook_resid_pre", "op": "patch", "from": "other text", "positions": [4]}`.
///
/// `head` selects one head of a per-head point (`hook_q`, `hook_k`, `hook_v`,
/// `hook_pattern`, `hook_z`); `unit` one element of the last axis (a feed-forward unit of
/// `mlp.hook_post`, a feature of the residual stream or of a head); `positions` some
/// positions (queries, for a pattern); `keys` some key positions of a pattern. What is
/// left out is selected whole. Checked against the model by [`Intervention::check`]:
/// every error names the field at fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intervention {
    /// The hook point's TransformerLens name ([`hook_points`]).
    pub hook: String,
    /// What is written.
    pub op: InterventionOp,
    /// Only this head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<usize>,
    /// Only this element of the last axis (a feed-forward unit of `mlp.hook_post`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<usize>,
    /// Only these positions (0 = the first token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions: Option<Vec<usize>>,
    /// Only these key positions (`hook_pattern` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<usize>>,
    /// The number or vector of `add`, `set` and `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<InterventionValue>,
    /// The text (or, for a speech model, the WAV file) whose run `patch` copies from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

impl Intervention {
    /// `op` at `hook`, selecting everything (add `head`, `positions`… with the builders).
    pub fn new(hook: impl Into<String>, op: InterventionOp) -> Self {
        Intervention {
            hook: hook.into(),
            op,
            head: None,
            unit: None,
            positions: None,
            keys: None,
            value: None,
            from: None,
        }
    }

    /// Zero ablation of `hook`.
    pub fn zero(hook: impl Into<String>) -> Self {
        Intervention::new(hook, InterventionOp::Zero)
    }

    /// Mean ablation of `hook` (the mean over the run's positions).
    pub fn mean(hook: impl Into<String>) -> Self {
        Intervention::new(hook, InterventionOp::Mean)
    }

    /// Add `v` at `hook` (a steering vector: d_model numbers at a residual point).
    pub fn add(hook: impl Into<String>, v: Vec<f32>) -> Self {
        Intervention::new(hook, InterventionOp::Add).value(InterventionValue::Vector(v))
    }

    /// Write `v` at `hook`.
    pub fn set(hook: impl Into<String>, v: Vec<f32>) -> Self {
        Intervention::new(hook, InterventionOp::Set).value(InterventionValue::Vector(v))
    }

    /// Multiply `hook` by `s`.
    pub fn scale(hook: impl Into<String>, s: f32) -> Self {
        Intervention::new(hook, InterventionOp::Scale).value(InterventionValue::Number(s))
    }

    /// Patch `hook` from the run over `from`.
    pub fn patch(hook: impl Into<String>, from: impl Into<String>) -> Self {
        Intervention {
            from: Some(from.into()),
            ..Intervention::new(hook, InterventionOp::Patch)
        }
    }

    /// Only head `h`.
    pub fn head(mut self, h: usize) -> Self {
        self.head = Some(h);
        self
    }

    /// Only unit `u` of the last axis.
    pub fn unit(mut self, u: usize) -> Self {
        self.unit = Some(u);
        self
    }

    /// Only these positions.
    pub fn positions(mut self, p: Vec<usize>) -> Self {
        self.positions = Some(p);
        self
    }

    /// Only these key positions (a pattern).
    pub fn keys(mut self, k: Vec<usize>) -> Self {
        self.keys = Some(k);
        self
    }

    /// With this value.
    pub fn value(mut self, v: InterventionValue) -> Self {
        self.value = Some(v);
        self
    }

    /// Interventions from JSON: one object or an array of them; errors name the field.
    pub fn parse_json(text: &str) -> Result<Vec<Intervention>> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let v: serde_json::Value = serde::Deserialize::deserialize(de)
            .map_err(|e| Error::Argument(format!("interventions: not JSON: {e}")))?;
        let list = match v {
            serde_json::Value::Array(a) => a,
            other => vec![other],
        };
        list.into_iter()
            .enumerate()
            .map(|(i, v)| {
                serde_path_to_error::deserialize(v).map_err(|e| {
                    let path = e.path().to_string();
                    Error::Argument(format!(
                        "intervention {i}: {}{}",
                        if path == "." {
                            String::new()
                        } else {
                            format!("{path}: ")
                        },
                        e.inner()
                    ))
                })
            })
            .collect()
    }

    /// Check this intervention against `points` (a model's [`hook_points`]) and return
    /// the point it writes. Errors name the field: an unknown `hook` (or a layer out of
    /// range), a `head` or `unit` out of range or on a point without one, `keys` off a
    /// pattern, a missing or extra `value` / `from`, a vector of the wrong length.
    pub fn check<'p>(&self, points: &'p [HookPoint]) -> Result<&'p HookPoint> {
        let bad = |m: String| {
            Err(Error::Argument(format!(
                "intervention at {}: {m}",
                self.hook
            )))
        };
        let Some(point) = points.iter().find(|p| p.name == self.hook) else {
            let layers = points
                .iter()
                .filter_map(|p| layer_of(&p.name))
                .max()
                .map_or(0, |l| l + 1);
            if let Some(l) = layer_of(&self.hook).filter(|&l| l >= layers) {
                return bad(format!(
                    "hook: layer {l} is out of range (the model has layers 0..{layers})"
                ));
            }
            let examples: Vec<&str> = points
                .iter()
                .filter(|p| layer_of(&p.name).is_none_or(|l| l == 0))
                .map(|p| p.name.as_str())
                .collect();
            return bad(format!(
                "hook: no hook point of this model is named '{}'; its names are {} (and the same for \
                 every layer: Model::hook_names lists them, docs/interventions.md says what each holds)",
                self.hook,
                examples.join(", ")
            ));
        };
        let (heads, width) = match point.shape {
            PointShape::Rows { width } => (None, Some(width)),
            PointShape::Heads { heads, width } => (Some(heads), Some(width)),
            PointShape::Pattern { heads } => (Some(heads), None),
        };
        match (self.head, heads) {
            (Some(_), None) => {
                return bad("head: this hook point has no heads (heads are at hook_q, hook_k, hook_v, hook_pattern, hook_z)".into())
            }
            (Some(h), Some(n)) if h >= n => {
                return bad(format!("head: {h} is out of range (this point has heads 0..{n})"))
            }
            _ => {}
        }
        match (self.unit, width) {
            (Some(_), None) => {
                return bad("unit: a pattern has no units; select key positions with keys".into())
            }
            (Some(u), Some(w)) if u >= w => {
                return bad(format!(
                    "unit: {u} is out of range (the last axis has 0..{w})"
                ))
            }
            _ => {}
        }
        if self.keys.is_some() && width.is_some() {
            return bad(
                "keys: key positions select part of an attention pattern (hook_pattern) only"
                    .into(),
            );
        }
        if self.positions.as_ref().is_some_and(Vec::is_empty) {
            return bad(
                "positions: an empty list selects nothing; leave it out to select every position"
                    .into(),
            );
        }
        let needs_value = matches!(
            self.op,
            InterventionOp::Add | InterventionOp::Set | InterventionOp::Scale
        );
        match (&self.value, needs_value) {
            (None, true) => {
                return bad(format!(
                    "value: op {:?} needs a value (a number or a vector)",
                    self.op
                ))
            }
            (Some(_), false) => return bad(format!("value: op {:?} takes no value", self.op)),
            (Some(InterventionValue::Vector(v)), true) => {
                if self.unit.is_some() {
                    return bad("value: with unit, give one number".into());
                }
                match width {
                    Some(w) if v.len() != w => {
                        return bad(format!(
                            "value: a vector of {} numbers, but this point's last axis has {w}",
                            v.len()
                        ))
                    }
                    None if v.is_empty() => return bad("value: an empty vector".into()),
                    _ => {}
                }
            }
            _ => {}
        }
        match (&self.from, self.op) {
            (None, InterventionOp::Patch) => {
                return bad("from: op patch needs the text (or WAV file) to patch from".into())
            }
            (Some(_), op) if op != InterventionOp::Patch => {
                return bad(format!("from: op {op:?} takes no from (only patch does)"))
            }
            _ => {}
        }
        Ok(point)
    }

    /// The trace [`Edit`] of this intervention at `point`; `source` is the tensor of the
    /// `from` run at the same point (patch only).
    pub fn to_edit(&self, point: &HookPoint, source: Option<Tensor>) -> Result<Edit> {
        let values = || match &self.value {
            Some(InterventionValue::Number(x)) => vec![*x],
            Some(InterventionValue::Vector(v)) => v.clone(),
            None => vec![0.0],
        };
        let op = match self.op {
            InterventionOp::Zero => EditOp::Zero,
            InterventionOp::Mean => EditOp::Mean,
            InterventionOp::Add => EditOp::Add(values()),
            InterventionOp::Set => EditOp::Set(values()),
            InterventionOp::Scale => EditOp::Scale(values()),
            InterventionOp::Patch => EditOp::Patch(source.ok_or_else(|| {
                Error::Argument(format!(
                    "intervention at {}: from: the run over the from text recorded nothing at {}",
                    self.hook, point.trace_name
                ))
            })?),
        };
        Ok(Edit {
            name: point.trace_name.clone(),
            op,
            head: self.head,
            positions: self.positions.clone(),
            keys: self.keys.clone(),
            unit: self.unit,
        })
    }
}

/// The L of a TL name's `blocks.L`.
fn layer_of(name: &str) -> Option<usize> {
    let mut parts = name.split('.');
    while let Some(p) = parts.next() {
        if p == "blocks" {
            return parts.next().and_then(|n| n.parse().ok());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets::preset;

    #[test]
    fn names_map_to_the_trace_and_bad_interventions_name_their_field() -> Result<()> {
        let cfg = preset("smollm2")?;
        let points = hook_points(&cfg);
        let find = |n: &str| {
            points
                .iter()
                .find(|p| p.name == n)
                .map(|p| p.trace_name.as_str())
        };
        assert_eq!(find("hook_embed"), Some("decoder.input"));
        assert_eq!(find("blocks.0.hook_resid_pre"), Some("decoder.input"));
        assert_eq!(
            find("blocks.1.hook_resid_pre"),
            Some("decoder.layer.0.output")
        );
        assert_eq!(
            find("blocks.1.attn.hook_z"),
            Some("decoder.layer.1.attn.context")
        );
        assert_eq!(
            find("blocks.1.mlp.hook_post"),
            Some("decoder.layer.1.ffn.hidden")
        );
        let err = |iv: Intervention| iv.check(&points).unwrap_err().to_string();
        assert!(err(Intervention::zero("blocks.99.hook_z")).contains("hook: layer 99"));
        assert!(err(Intervention::zero("blocks.0.attn.hook_zz")).contains("hook: no hook point"));
        assert!(
            err(Intervention::zero("blocks.0.attn.hook_z").head(cfg.n_heads)).contains("head: ")
        );
        assert!(err(Intervention::zero("blocks.0.hook_resid_post").head(0))
            .contains("head: this hook point has no heads"));
        assert!(
            err(Intervention::zero("blocks.0.mlp.hook_post").unit(cfg.d_ff)).contains("unit: ")
        );
        assert!(err(Intervention::new(
            "blocks.0.hook_resid_post",
            InterventionOp::Add
        ))
        .contains("value: "));
        assert!(
            err(Intervention::add("blocks.0.hook_resid_post", vec![1.0; 3]))
                .contains("value: a vector of 3")
        );
        assert!(err(Intervention::new(
            "blocks.0.hook_resid_post",
            InterventionOp::Patch
        ))
        .contains("from: "));
        assert!(
            err(Intervention::zero("blocks.0.hook_resid_post").keys(vec![0])).contains("keys: ")
        );
        assert!(Intervention::zero("blocks.0.attn.hook_pattern")
            .keys(vec![0])
            .check(&points)
            .is_ok());
        let parsed = Intervention::parse_json(
            r#"{"hook": "blocks.0.attn.hook_z", "op": "zero", "head": 1}"#,
        )?;
        assert_eq!(
            parsed,
            vec![Intervention::zero("blocks.0.attn.hook_z").head(1)]
        );
        let e = Intervention::parse_json(r#"[{"hook": "x", "op": "ablate"}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("intervention 0: op"), "{e}");
        let e = Intervention::parse_json(r#"{"hook": "x", "op": "zero", "heads": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads"), "{e}");
        Ok(())
    }
}
