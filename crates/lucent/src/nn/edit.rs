//! `Edit`: a write at a hook point of a forward pass, the other half of the [`Trace`].
//!
//! A trace that carries edits changes the tensors it is shown, at the points where a
//! forward hands them over (`crate::nn::trace::hook`): the values flow on edited, so
//! every later step of the pass sees them. This is how ablation, activation patching and
//! steering work; the model-level values (`lucent::Intervention`, under TransformerLens's
//! hook names) are translated into edits by the model layer's hook table (`model/hooks.rs`, which depends on this module, not the other way).
//!
//! An edit names a tensor by its full dotted trace name (`decoder.layer.3.attn.context`)
//! and selects elements by the axes of that leaf:
//!
//! | leaf | shape | `head` | `positions` | `keys` | `unit` |
//! | --- | --- | --- | --- | --- | --- |
//! | `q`, `k`, `v`, `context` | (b, h, t, d_k) | axis 1 | axis 2 | – | axis 3 |
//! | `weights` | (b, h, t_q, t_k) | axis 1 | axis 2 (queries) | axis 3 | – |
//! | anything else (`input`, `output`, `hidden`) | (b, t, x) | – | axis 1 | – | axis 2 |
//!
//! Every selection left out selects the whole axis. The op then writes the selected
//! elements: 0 ([`EditOp::Zero`]), the mean over all positions of the same batch row,
//! head and feature ([`EditOp::Mean`]), x + v, v, x · v ([`EditOp::Add`], [`EditOp::Set`],
//! [`EditOp::Scale`]: v is one number, or one per element of the last axis), or the same
//! element of another run's tensor ([`EditOp::Patch`]; that run may be shorter, as when a
//! generation goes on past the text it patches from: only its own positions are copied).
//! Elements outside the selection keep their bits.

use crate::nn::trace::Trace;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// What an [`Edit`] writes into the elements it selects.
#[derive(Clone, Debug)]
pub enum EditOp {
    /// 0.
    Zero,
    /// The mean over every position of the run (same batch row, head and feature).
    Mean,
    /// x + v (v: one number, or one per element of the last axis).
    Add(Vec<f32>),
    /// v (as for `Add`).
    Set(Vec<f32>),
    /// x · v (as for `Add`).
    Scale(Vec<f32>),
    /// The same element of this tensor, recorded at the same point of another run; its
    /// shape must equal the edited tensor's, except that it may cover fewer positions
    /// (and, for `weights`, fewer keys): the elements beyond it are not patched.
    Patch(Tensor),
}

/// One write at a hook point (module docs).
#[derive(Clone, Debug)]
pub struct Edit {
    /// The full dotted trace name (`decoder.layer.3.attn.context`).
    pub name: String,
    /// What is written.
    pub op: EditOp,
    /// Only this head (axis 1 of a per-head leaf).
    pub head: Option<usize>,
    /// Only these positions (queries for `weights`).
    pub positions: Option<Vec<usize>>,
    /// Only these key positions (`weights` only).
    pub keys: Option<Vec<usize>>,
    /// Only this element of the last axis (a feed-forward unit of `hidden`, a feature of
    /// the residual stream or of a head).
    pub unit: Option<usize>,
}

/// Whether a leaf holds one slice per head: (b, h, t, ·).
pub fn per_head(leaf: &str) -> bool {
    matches!(leaf, "q" | "k" | "v" | "context" | "weights")
}

impl Edit {
    /// Write this edit into `t` (the tensor at its hook point). Errors name the edit and
    /// say which index or length does not fit.
    pub fn apply(&self, t: &mut Tensor) -> Result<()> {
        let leaf = self.name.rsplit('.').next().unwrap_or(&self.name);
        let shape = t.shape().to_vec();
        // As (b, h, t, x), h = 1 for a leaf without heads.
        let [b, h, n, x] = match (per_head(leaf), shape.as_slice()) {
            (true, &[b, h, n, x]) => [b, h, n, x],
            (false, &[b, n, x]) => [b, 1, n, x],
            _ => {
                return Err(Error::Shape(format!(
                    "edit at {}: a tensor of shape {shape:?} is not the (b, {}t, x) this hook point holds",
                    self.name,
                    if per_head(leaf) { "h, " } else { "" }
                )))
            }
        };
        let bad = |what: &str, i: usize, len: usize| {
            Err(Error::Argument(format!(
                "edit at {}: {what} {i} is out of range (this run has {len})",
                self.name
            )))
        };
        let heads: Vec<usize> = match self.head {
            Some(hd) if !per_head(leaf) => {
                return Err(Error::Argument(format!(
                    "edit at {}: head {hd} given, but this hook point has no heads",
                    self.name
                )))
            }
            Some(hd) if hd >= h => return bad("head", hd, h),
            Some(hd) => vec![hd],
            None => (0..h).collect(),
        };
        let positions: Vec<usize> = match &self.positions {
            Some(ps) => {
                if let Some(&p) = ps.iter().find(|&&p| p >= n) {
                    return bad("position", p, n);
                }
                ps.clone()
            }
            None => (0..n).collect(),
        };
        let features: Vec<usize> = match (&self.keys, self.unit) {
            (Some(_), Some(_)) => {
                return Err(Error::Argument(format!(
                    "edit at {}: give keys or unit, not both",
                    self.name
                )))
            }
            (Some(ks), None) => {
                if leaf != "weights" {
                    return Err(Error::Argument(format!(
                        "edit at {}: keys select key positions of an attention pattern only",
                        self.name
                    )));
                }
                if let Some(&k) = ks.iter().find(|&&k| k >= x) {
                    return bad("key position", k, x);
                }
                ks.clone()
            }
            (None, Some(u)) if u >= x => return bad("unit", u, x),
            (None, Some(u)) => vec![u],
            (None, None) => (0..x).collect(),
        };
        let value = |v: &[f32], xi: usize| if v.len() == 1 { v[0] } else { v[xi] };
        if let EditOp::Add(v) | EditOp::Set(v) | EditOp::Scale(v) = &self.op {
            if v.len() != 1 && v.len() != x {
                return Err(Error::Argument(format!(
                    "edit at {}: a vector of {} values, but the last axis has {x} (give one number or {x})",
                    self.name,
                    v.len()
                )));
            }
        }
        // A patch source may cover fewer positions (and, for a pattern, fewer keys) than
        // this run: a generation continues past the text it was recorded from, and only
        // the source's own positions are patched. (ns, xs): its extent.
        let (ns, xs) = match &self.op {
            EditOp::Patch(src) => {
                let s = src.shape();
                let fits = match (per_head(leaf), s) {
                    (true, &[sb, sh, sn, sx]) => (sb == b
                        && sh == h
                        && sn <= n
                        && (sx == x || (leaf == "weights" && sx <= x)))
                        .then_some((sn, sx)),
                    (false, &[sb, sn, sx]) => (sb == b && sn <= n && sx == x).then_some((sn, sx)),
                    _ => None,
                };
                fits.ok_or_else(|| {
                    Error::Argument(format!(
                        "edit at {}: the patch source has shape {s:?} but this run's tensor has {shape:?}; \
                         patch from a text of the same number of tokens",
                        self.name
                    ))
                })?
            }
            _ => (n, x),
        };
        // The means are taken over the values as they were, before any write.
        let means: Option<Vec<f32>> = matches!(self.op, EditOp::Mean).then(|| {
            let d = t.data();
            let mut m = vec![0.0f32; b * h * x]; // (b, h, x)
            for bi in 0..b {
                for hi in 0..h {
                    for ti in 0..n {
                        let row = ((bi * h + hi) * n + ti) * x;
                        for xi in 0..x {
                            m[(bi * h + hi) * x + xi] += d[row + xi];
                        }
                    }
                }
            }
            m.iter().map(|s| s / n.max(1) as f32).collect()
        });
        let src = match &self.op {
            EditOp::Patch(s) => Some(s.data()),
            _ => None,
        };
        let d = t.data_mut();
        for bi in 0..b {
            for &hi in &heads {
                for &ti in &positions {
                    let row = ((bi * h + hi) * n + ti) * x;
                    for &xi in &features {
                        let e = &mut d[row + xi];
                        *e = match &self.op {
                            EditOp::Zero => 0.0,
                            EditOp::Mean => {
                                means.as_ref().map_or(0.0, |m| m[(bi * h + hi) * x + xi])
                            }
                            EditOp::Add(v) => *e + value(v, xi),
                            EditOp::Set(v) => value(v, xi),
                            EditOp::Scale(v) => *e * value(v, xi),
                            EditOp::Patch(_) if ti < ns && xi < xs => {
                                src.map_or(*e, |s| s[((bi * h + hi) * ns + ti) * xs + xi])
                            }
                            EditOp::Patch(_) => *e,
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

/// Apply the edits of an optional trace at `leaf` (in its current scope) to `t`, without
/// recording it: for points recorded later (Q, K and V are edited before attention and
/// recorded after it). With `None`, or no edit there, `t` comes back untouched.
pub fn edit(trace: &mut Option<&mut Trace>, leaf: &str, t: Tensor) -> Result<Tensor> {
    match trace.as_deref() {
        Some(tr) => tr.edit(leaf, t),
        None => Ok(t),
    }
}

/// Whether an optional trace has an edit at `leaf` (false for `None`).
pub fn edits(trace: &Option<&mut Trace>, leaf: &str) -> bool {
    trace.as_deref().is_some_and(|tr| tr.has_edit(leaf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(name: &str, op: EditOp) -> Edit {
        Edit {
            name: name.into(),
            op,
            head: None,
            positions: None,
            keys: None,
            unit: None,
        }
    }

    #[test]
    fn ops_write_the_selected_elements_only() -> Result<()> {
        // (b 1, h 2, t 3, d_k 2): element value = its index.
        let t0 = Tensor::from_fn(&[1, 2, 3, 2], |i| i as f32);
        let mut t = t0.clone();
        let mut e = edit("decoder.layer.0.attn.context", EditOp::Zero);
        e.head = Some(1);
        e.apply(&mut t)?;
        assert_eq!(t.data()[..6], t0.data()[..6]);
        assert!(t.data()[6..].iter().all(|&v| v == 0.0));

        let mut t = t0.clone();
        let mut e = edit("decoder.layer.0.attn.context", EditOp::Mean);
        e.head = Some(0);
        e.positions = Some(vec![2]);
        e.apply(&mut t)?;
        // Head 0 holds rows [0 1] [2 3] [4 5]: means 2 and 3, written at position 2.
        assert_eq!(&t.data()[..6], &[0.0, 1.0, 2.0, 3.0, 2.0, 3.0]);

        // (b 1, t 2, x 3): add a vector, scale one unit, set a number.
        let r0 = Tensor::from_fn(&[1, 2, 3], |i| i as f32);
        let mut r = r0.clone();
        edit(
            "decoder.layer.1.output",
            EditOp::Add(vec![10.0, 20.0, 30.0]),
        )
        .apply(&mut r)?;
        assert_eq!(r.data(), &[10.0, 21.0, 32.0, 13.0, 24.0, 35.0]);
        let mut r = r0.clone();
        let mut e = edit("decoder.layer.1.ffn.hidden", EditOp::Scale(vec![-2.0]));
        e.unit = Some(2);
        e.apply(&mut r)?;
        assert_eq!(r.data(), &[0.0, 1.0, -4.0, 3.0, 4.0, -10.0]);
        let mut r = r0.clone();
        let mut e = edit(
            "decoder.input",
            EditOp::Patch(Tensor::full(&[1, 2, 3], 7.0)),
        );
        e.positions = Some(vec![1]);
        e.apply(&mut r)?;
        assert_eq!(r.data(), &[0.0, 1.0, 2.0, 7.0, 7.0, 7.0]);
        // A shorter source (one position) patches only its own position.
        let mut r = r0.clone();
        edit(
            "decoder.input",
            EditOp::Patch(Tensor::full(&[1, 1, 3], 7.0)),
        )
        .apply(&mut r)?;
        assert_eq!(r.data(), &[7.0, 7.0, 7.0, 3.0, 4.0, 5.0]);
        // A pattern (b 1, h 1, t_q 3, t_k 3) patched from a 2-token run's (1, 1, 2, 2).
        let mut w = Tensor::full(&[1, 1, 3, 3], 0.5);
        edit(
            "decoder.layer.0.attn.weights",
            EditOp::Patch(Tensor::from_fn(&[1, 1, 2, 2], |i| i as f32)),
        )
        .apply(&mut w)?;
        assert_eq!(w.data(), &[0.0, 1.0, 0.5, 2.0, 3.0, 0.5, 0.5, 0.5, 0.5]);

        // Knock out key 0 in a pattern (b 1, h 1, t_q 2, t_k 2).
        let mut w = Tensor::full(&[1, 1, 2, 2], 0.5);
        let mut e = edit("decoder.layer.0.attn.weights", EditOp::Scale(vec![0.0]));
        e.keys = Some(vec![0]);
        e.apply(&mut w)?;
        assert_eq!(w.data(), &[0.0, 0.5, 0.0, 0.5]);
        Ok(())
    }

    #[test]
    fn bad_selections_are_errors_naming_the_point() {
        let mut r = Tensor::zeros(&[1, 2, 3]);
        let mut e = edit("decoder.layer.1.output", EditOp::Zero);
        e.head = Some(0);
        let err = e.apply(&mut r).unwrap_err().to_string();
        assert!(
            err.contains("decoder.layer.1.output") && err.contains("no heads"),
            "{err}"
        );
        let mut e = edit("decoder.layer.1.output", EditOp::Zero);
        e.positions = Some(vec![2]);
        assert!(e
            .apply(&mut r)
            .unwrap_err()
            .to_string()
            .contains("position 2"));
        let e = edit("decoder.layer.1.output", EditOp::Add(vec![1.0, 2.0]));
        assert!(e
            .apply(&mut r)
            .unwrap_err()
            .to_string()
            .contains("2 values"));
        let e = edit(
            "decoder.layer.1.output",
            EditOp::Patch(Tensor::zeros(&[1, 3, 3])),
        );
        assert!(e
            .apply(&mut r)
            .unwrap_err()
            .to_string()
            .contains("same number of tokens"));
    }
}
