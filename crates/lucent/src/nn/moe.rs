//! The Mixture-of-Experts feed-forward network: a router sends each position to k of
//! n expert FFNs and sums their outputs, weighted (Shazeer et al. 2017, "Outrageously
//! Large Neural Networks"; Mixtral 8x7B; Qwen3-MoE).
//!
//! For one position x (d features), with W_g (n, d) the router and FFN_e the gated
//! feed-forward network of expert e ([`FeedForward::Gated`], SwiGLU):
//!
//! ```text
//! r   = W_g x                               router logits, n of them
//! p   = softmax(r)                          router probabilities
//! E   = top-k(p)                            the k most probable experts, most probable first
//! w_j = p_{E_j} / Σ_i p_{E_i}               renormalised over the k (when `normalize`;
//!                                           else w_j = p_{E_j})
//! MoE(x) = Σ_j w_j · FFN_{E_j}(x)           j = 0 … k−1, added in that order
//! ```
//!
//! Only k of the n FFNs run for a position: the parameters are n FFNs, the arithmetic
//! k of them. Mixtral and Qwen3-MoE take the softmax over all n experts *before* the
//! top-k and renormalise the k chosen probabilities (which equals a softmax over the k
//! chosen logits, but for rounding).
//!
//! # llama.cpp's order (`build_moe_ffn`, `src/llama-graph.cpp`)
//!
//! With llama.cpp's [`Numerics`] each step is its CPU build's, so logits equal it bit for
//! bit: the router is an ordinary product; the softmax is `ggml_soft_max`'s (its vector
//! exp eight at a time, each eight's sum added in f64, the tail past the last whole eight
//! with the C library's `expf`, one by one in f64); the top-k is `ggml_argsort` (descending;
//! llama.cpp's `std::sort` leaves the order of exactly equal probabilities unspecified,
//! lucent puts the lower index first); the k weights' sum is taken in f64
//! (`ggml_sum_rows`), rounded to f32, clamped below at 2⁻¹⁴ (6.1035e-5), and each weight
//! divided by it; each expert's products are `ggml_mul_mat_id`'s, every row computed
//! alone as a decoded token's is (so lucent's prompt rows take
//! [`Numerics::RowInvariant`]); each expert's output is multiplied by its weight and the
//! k products are added left to right, slot 0 first.
//!
//! # Two paths, the same numbers
//!
//! [`MixtureOfExperts::forward_plain`] is the formula as loops: each position, each of its
//! k experts, one row at a time. [`MixtureOfExperts::forward`] groups the positions that
//! chose each expert and runs each expert once over its group (a prompt's rows then go
//! through the quantised products' many-row kernels); the rows are computed alone in
//! either, so the two agree bit for bit (a test holds them to it).
//!
//! # Trace
//!
//! Under the FFN's scope (`….ffn.`): `input` (…, d), `router_logits` (…, n) (an edit
//! there changes the routing), `router_probs` (…, n), `experts` (…, k) (the chosen
//! experts' indices, as f32, most probable first), `expert_weights` (…, k) (the w_j),
//! `output` (…, d).

use rand::Rng;

use crate::nn::feed_forward::FeedForward;
use crate::nn::linear::Linear;
use crate::nn::trace::{hook, record, wants, Trace};
use crate::ops::Activation;
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The smallest sum of the k weights llama.cpp divides by (the smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Where the router sends one position: k experts, most probable first, and their
/// weights w_j.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// The chosen experts E_0 … E_{k−1} (descending probability).
    pub experts: Vec<usize>,
    /// Their weights w_j (renormalised over the k when the block asks for it).
    pub weights: Vec<f32>,
}

/// A Mixture-of-Experts FFN: a router W_g and n gated expert FFNs, k used per position
/// (module docs).
#[derive(Clone, Debug)]
pub struct MixtureOfExperts {
    /// W_g: (n, d), no bias.
    pub router: Linear,
    /// The n experts, each a gated FFN d → d_ff → d.
    pub experts: Vec<FeedForward>,
    /// k: experts used per position (1 ≤ k ≤ n).
    pub k: usize,
    /// Whether the k chosen probabilities are renormalised to sum to 1.
    pub normalize: bool,
}

impl MixtureOfExperts {
    /// A block from its router W_g (n, d) and n gated experts of one shape; errors name
    /// what does not fit (a router of another width, an MLP expert, k outside 1..=n).
    pub fn new(
        router: Linear,
        experts: Vec<FeedForward>,
        k: usize,
        normalize: bool,
    ) -> Result<Self> {
        let n = experts.len();
        if router.out_features() != n || router.bias.is_some() {
            return Err(Error::Shape(format!(
                "Mixture of experts: the router W_g is {:?}{}, expected ({n}, d) without bias for {n} experts",
                router.weight.shape(),
                if router.bias.is_some() { " with a bias" } else { "" }
            )));
        }
        if k == 0 || k > n {
            return Err(Error::Config(format!(
                "Mixture of experts: k = {k} experts per position, but there are {n}; k must be in 1..={n}"
            )));
        }
        let d = router.in_features();
        let d_ff = experts.first().map_or(0, FeedForward::d_ff);
        for (e, ffn) in experts.iter().enumerate() {
            if !matches!(ffn, FeedForward::Gated { .. }) {
                return Err(Error::Config(format!(
                    "Mixture of experts: expert {e} is not a gated FFN; lucent's experts are SwiGLU/GeGLU"
                )));
            }
            if ffn.d_model() != d || ffn.d_ff() != d_ff {
                return Err(Error::Shape(format!(
                    "Mixture of experts: expert {e} is {} → {} → {}, expected {d} → {d_ff} → {d} like expert 0 and the router",
                    ffn.d_model(),
                    ffn.d_ff(),
                    ffn.d_model()
                )));
            }
        }
        Ok(MixtureOfExperts {
            router,
            experts,
            k,
            normalize,
        })
    }

    /// Random weights: W_g ~ N(0, 0.02²), each expert as [`FeedForward::new_random`]
    /// (gated, `out_std` for W_down). `k` is taken as given (a [`crate::ModelConfig`]'s
    /// `validate` checks 1 ≤ k ≤ n).
    #[allow(clippy::too_many_arguments)]
    pub fn new_random(
        n: usize,
        k: usize,
        normalize: bool,
        activation: Activation,
        d_model: usize,
        d_ff: usize,
        out_std: f32,
        rng: &mut impl Rng,
    ) -> Self {
        let router = Linear::new_random(d_model, n, false, 0.02, rng);
        let experts = (0..n)
            .map(|_| {
                FeedForward::new_random(
                    crate::nn::FfnKind::Gated,
                    activation,
                    d_model,
                    d_ff,
                    false,
                    out_std,
                    rng,
                )
            })
            .collect();
        MixtureOfExperts {
            router,
            experts,
            k,
            normalize,
        }
    }

    /// n, the number of experts.
    pub fn n_experts(&self) -> usize {
        self.experts.len()
    }

    /// The model width d.
    pub fn d_model(&self) -> usize {
        self.router.in_features()
    }

    /// Each expert's hidden width d_ff.
    pub fn d_ff(&self) -> usize {
        self.experts.first().map_or(0, FeedForward::d_ff)
    }

    /// The numerics of the experts' products: llama.cpp computes every row of
    /// `ggml_mul_mat_id` alone, as a decoded token's (module docs).
    fn expert_numerics(numerics: Numerics) -> Numerics {
        if numerics.llama_cpp() {
            Numerics::RowInvariant
        } else {
            numerics
        }
    }

    /// The router probabilities p = softmax(r) of one position's logits `r` (n), and
    /// where it sends the position (top-k, weights): the formula's steps in `numerics`'
    /// order (module docs).
    pub fn route(&self, logits: &[f32], numerics: Numerics) -> (Vec<f32>, Routing) {
        let mut p = logits.to_vec();
        if numerics.llama_cpp() {
            softmax_llama_cpp(&mut p);
        } else {
            softmax_plain(&mut p);
        }
        // Descending probability; equal ones: the lower index first (a stable sort).
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
        order.truncate(self.k);
        let mut weights: Vec<f32> = order.iter().map(|&e| p[e]).collect();
        if self.normalize {
            let sum = weights.iter().map(|&w| w as f64).sum::<f64>() as f32; // (f64, as ggml_sum_rows)
            let sum = sum.max(MIN_WEIGHT_SUM);
            weights.iter_mut().for_each(|w| *w /= sum);
        }
        (
            p,
            Routing {
                experts: order,
                weights,
            },
        )
    }

    /// The router's logits, probabilities and routings of every position, recording
    /// (and applying the trace's edits to) `router_logits`, and recording
    /// `router_probs`, `experts` and `expert_weights`.
    ///
    /// # Shapes
    /// x: (..., d) → one [`Routing`] per position
    fn routings(
        &self,
        x: &Tensor,
        numerics: Numerics,
        trace: &mut Option<&mut Trace>,
    ) -> Result<Vec<Routing>> {
        let n = self.n_experts();
        let logits = self.router.forward_with(x, numerics)?; // (..., n)
        let logits = hook(trace, "router_logits", logits)?;
        let mut probs = Vec::with_capacity(logits.numel());
        let mut routes = Vec::with_capacity(logits.numel() / n.max(1));
        for row in logits.data().chunks_exact(n) {
            let (p, r) = self.route(row, numerics);
            probs.extend(p);
            routes.push(r);
        }
        let lead = &x.shape()[..x.rank().saturating_sub(1)];
        let shaped = |last: usize| -> Vec<usize> {
            let mut s = lead.to_vec();
            s.push(last);
            s
        };
        if wants(trace, "router_probs") {
            record(trace, "router_probs", &Tensor::new(probs, &shaped(n))?); // (..., n)
        }
        if wants(trace, "experts") {
            let ids = routes
                .iter()
                .flat_map(|r| r.experts.iter().map(|&e| e as f32))
                .collect();
            record(trace, "experts", &Tensor::new(ids, &shaped(self.k))?); // (..., k)
        }
        if wants(trace, "expert_weights") {
            let w = routes.iter().flat_map(|r| r.weights.clone()).collect();
            record(trace, "expert_weights", &Tensor::new(w, &shaped(self.k))?); // (..., k)
        }
        Ok(routes)
    }

    /// Apply the block to every position: the positions that chose each expert are
    /// gathered and run through it together, each weighted output put in its position's
    /// slot, and the k slots of each position added in order. Records `input`, the
    /// router's leaves and `output` (module docs).
    ///
    /// # Shapes
    /// x: (..., d) → (..., d)
    pub fn forward(
        &self,
        x: &Tensor,
        numerics: Numerics,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let x = &hook(&mut trace, "input", x.clone())?;
        let d = self.check_input(x)?;
        let routes = self.routings(x, numerics, &mut trace)?;
        let (t, k) = (routes.len(), self.k);
        let en = Self::expert_numerics(numerics);
        // weighted[(i·k + j)·d ..]: w_j · FFN_{E_j}(x_i), position i's slot j.
        let mut weighted = vec![0.0f32; t * k * d]; // (t, k, d)
                                                    // (expert, its members (position, slot)) for each expert some position chose.
        let groups: Vec<(usize, Vec<(usize, usize)>)> = (0..self.experts.len())
            .map(|e| {
                let members = routes
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| {
                        r.experts
                            .iter()
                            .enumerate()
                            .filter(move |(_, &c)| c == e)
                            .map(move |(j, _)| (i, j))
                    })
                    .collect::<Vec<_>>();
                (e, members)
            })
            .filter(|(_, m)| !m.is_empty())
            .collect();
        let run = |&(e, ref members): &(usize, Vec<(usize, usize)>)| -> Result<Tensor> {
            let mut rows = Vec::with_capacity(members.len() * d);
            for &(i, _) in members {
                rows.extend_from_slice(&x.data()[i * d..(i + 1) * d]);
            }
            let xs = Tensor::new(rows, &[members.len(), d])?; // (m, d)
            self.experts[e].forward(&xs, en, None) // (m, d)
        };
        // Every row alone (row-invariant products): an expert's numbers do not depend
        // on how its rows' products are split over threads, so the experts in use (a
        // prompt's, or a token's k) run side by side, each on one thread, rather than
        // each small product split.
        let threads = crate::runtime::threads::threads();
        let outputs: Vec<Result<Tensor>> =
            if en.row_invariant() && threads > 1 && groups.len() >= 2 * threads {
                crate::runtime::threads::map_collect(groups.len(), |g| {
                    crate::runtime::threads::serial(|| run(&groups[g]))
                })
            } else {
                groups.iter().map(run).collect()
            };
        for ((_, members), ys) in groups.iter().zip(outputs) {
            let ys = ys?;
            for (&(i, j), y) in members.iter().zip(ys.data().chunks_exact(d)) {
                let w = routes[i].weights[j];
                let slot = &mut weighted[(i * k + j) * d..(i * k + j + 1) * d];
                for (s, &v) in slot.iter_mut().zip(y) {
                    *s = v * w;
                }
            }
        }
        let mut out = Vec::with_capacity(t * d);
        for slots in weighted.chunks_exact(k * d) {
            let mut acc = slots[..d].to_vec();
            for slot in slots[d..].chunks_exact(d) {
                for (a, &v) in acc.iter_mut().zip(slot) {
                    *a += v;
                }
            }
            out.extend(acc);
        }
        hook(&mut trace, "output", Tensor::new(out, x.shape())?)
    }

    /// The plain twin of [`MixtureOfExperts::forward`]: position by position, each of its
    /// k experts run on that one row, `acc = w_0·y_0`, then `acc = acc + w_j·y_j`. The
    /// same numbers as the grouped path.
    ///
    /// # Shapes
    /// x: (..., d) → (..., d)
    pub fn forward_plain(&self, x: &Tensor, numerics: Numerics) -> Result<Tensor> {
        let d = self.check_input(x)?;
        let en = Self::expert_numerics(numerics);
        let mut out = Vec::with_capacity(x.numel());
        for row in x.data().chunks_exact(d) {
            let xi = Tensor::new(row.to_vec(), &[1, d])?; // (1, d)
            let r = self.router.forward_with(&xi, numerics)?; // (1, n)
            let (_, routing) = self.route(r.data(), numerics);
            let mut acc = vec![0.0f32; d];
            for (j, (&e, &w)) in routing.experts.iter().zip(&routing.weights).enumerate() {
                let y = self.experts[e].forward(&xi, en, None)?; // (1, d)
                for (a, &v) in acc.iter_mut().zip(y.data()) {
                    *a = if j == 0 { v * w } else { *a + v * w };
                }
            }
            out.extend(acc);
        }
        Tensor::new(out, x.shape())
    }

    /// d, after checking that x is (..., d).
    fn check_input(&self, x: &Tensor) -> Result<usize> {
        let d = self.d_model();
        if x.rank() == 0 || x.last_dim() != d || d == 0 {
            return Err(Error::mismatch(
                "Mixture of experts: x (..., d) vs the router W_g (n, d)",
                x.shape(),
                self.router.weight.shape(),
            ));
        }
        Ok(d)
    }
}

/// softmax(r) in f32 with the maximum subtracted: lucent's own order.
fn softmax_plain(r: &mut [f32]) {
    let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in r.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    r.iter_mut().for_each(|v| *v /= sum);
}

/// softmax(r) as `ggml_soft_max` computes one row on llama.cpp's AVX2 build (scale 1, no
/// mask): the maximum; e = [`crate::ops::activation::llama_cpp::expf`](r − max) eight at a
/// time, each eight's [`crate::ops::f16_dot::hsum8`] added in f64; past the last whole eight, the C
/// library's `expf` one number at a time, added in f64; then e · (f32)(1 / sum).
fn softmax_llama_cpp(r: &mut [f32]) {
    use crate::ops::activation::llama_cpp::expf;
    use crate::ops::f16_dot::hsum8;
    let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    let whole = r.len() / 8 * 8;
    let (head, tail) = r.split_at_mut(whole);
    for ch in head.chunks_exact_mut(8) {
        let mut e = [0.0f32; 8];
        for (l, v) in ch.iter_mut().enumerate() {
            *v = expf(*v - max);
            e[l] = *v;
        }
        sum += hsum8(&e) as f64;
    }
    for v in tail.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    r.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::quant::QMatrix;
    use crate::tensor::quant::GgmlType;
    use rand::{rngs::StdRng, SeedableRng};

    fn same_bits(a: &Tensor, b: &Tensor) -> bool {
        a.shape() == b.shape()
            && a.data()
                .iter()
                .zip(b.data())
                .all(|(p, q)| p.to_bits() == q.to_bits())
    }

    /// A Q8_0 copy of an f32 Linear (its numbers quantised by lucent's own quantiser).
    fn q8(l: &Linear) -> Linear {
        let w = l.weight.as_f32().expect("f32");
        let [rows, cols] = w.dims().expect("2-D");
        // Q8_0 blocks: an f16 scale d = max|x| / 127, then 32 numbers round(x / d) as i8.
        let mut bytes = Vec::new();
        for block in w.data().chunks_exact(32) {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = half::f16::from_f32(amax / 127.0);
            bytes.extend(d.to_le_bytes());
            let inv = if d.to_f32() > 0.0 {
                1.0 / d.to_f32()
            } else {
                0.0
            };
            bytes.extend(block.iter().map(|v| (v * inv).round() as i8 as u8));
        }
        Linear::new(
            QMatrix::from_vec(GgmlType::Q8_0, rows, cols, bytes).expect("q"),
            None,
        )
        .expect("linear")
    }

    fn random_moe(quantised: bool, n: usize, k: usize, normalize: bool) -> MixtureOfExperts {
        let mut rng = StdRng::seed_from_u64(7);
        let mut m =
            MixtureOfExperts::new_random(n, k, normalize, Activation::Silu, 64, 96, 0.1, &mut rng);
        m.router = Linear::new_random(64, n, false, 0.3, &mut rng);
        if quantised {
            m.router = q8(&m.router);
            for e in &mut m.experts {
                for l in e.linears_mut() {
                    *l = q8(l);
                }
            }
        }
        m
    }

    /// The grouped path equals the plain twin bit for bit: quantised experts in
    /// llama.cpp's numerics and in lucent's, f32 experts row by row, on every ISA level,
    /// for one position and for a prompt of 13 (n = 8, 10 experts: whole eights and a
    /// tail for the softmax; k = 1, 2, 3).
    #[test]
    fn grouped_path_equals_plain_twin() {
        let mut rng = StdRng::seed_from_u64(11);
        for (quantised, numerics) in [
            (true, Numerics::LlamaCpp),
            (true, Numerics::Lucent),
            (false, Numerics::RowInvariant),
        ] {
            for (n, k) in [(8, 2), (10, 3), (8, 1)] {
                let m = random_moe(quantised, n, k, true);
                for t in [1usize, 13] {
                    let x = Tensor::randn(&[1, t, 64], 1.0, &mut rng);
                    for isa in crate::Isa::available() {
                        let rt = crate::Runtime::builder()
                            .threads(2)
                            .isa(isa)
                            .build()
                            .expect("runtime");
                        let (a, b) = rt.install(|| {
                            (
                                m.forward(&x, numerics, None).expect("grouped"),
                                m.forward_plain(&x, numerics).expect("plain"),
                            )
                        });
                        assert!(
                            same_bits(&a, &b),
                            "{numerics:?} quantised={quantised} n={n} k={k} t={t} {isa:?}"
                        );
                    }
                }
            }
        }
    }

    /// The plain twin is the formula: softmax over the n logits, the k largest, their
    /// probabilities renormalised, Σ w_j · FFN_{E_j}(x), checked in f64 against experts
    /// and router computed here from their f32 weights.
    #[test]
    fn plain_twin_is_the_formula() {
        let m = random_moe(false, 6, 2, true);
        let mut rng = StdRng::seed_from_u64(5);
        let x = Tensor::randn(&[3, 64], 1.0, &mut rng);
        let got = m.forward_plain(&x, Numerics::Lucent).expect("plain");
        let wg = m.router.weight.as_f32().expect("f32").clone();
        for (i, row) in x.data().chunks_exact(64).enumerate() {
            let r: Vec<f64> = wg
                .data()
                .chunks_exact(64)
                .map(|w| w.iter().zip(row).map(|(&a, &b)| a as f64 * b as f64).sum())
                .collect();
            let max = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = r.iter().map(|v| (v - max).exp()).collect();
            let s: f64 = e.iter().sum();
            let p: Vec<f64> = e.iter().map(|v| v / s).collect();
            let mut idx: Vec<usize> = (0..6).collect();
            idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            let top = &idx[..2];
            let norm: f64 = top.iter().map(|&e| p[e]).sum();
            let xi = Tensor::new(row.to_vec(), &[1, 64]).expect("row");
            let mut want = vec![0.0f64; 64];
            for &e in top {
                let y = m.experts[e]
                    .forward(&xi, Numerics::Lucent, None)
                    .expect("ffn");
                for (a, &v) in want.iter_mut().zip(y.data()) {
                    *a += p[e] / norm * v as f64;
                }
            }
            for (g, w) in got.data()[i * 64..(i + 1) * 64].iter().zip(&want) {
                assert!((*g as f64 - w).abs() < 1e-5, "{g} vs {w}");
            }
        }
    }

    /// llama.cpp's softmax of a row of whole eights is `ops::softmax::llama_cpp::softmax_row`'s; the
    /// weights of a route sum to 1 when renormalised and are the probabilities when not.
    #[test]
    fn routing_follows_the_formula() {
        let mut rng = StdRng::seed_from_u64(9);
        let r = Tensor::randn(&[16], 2.0, &mut rng).into_vec();
        let mut a = r.clone();
        softmax_llama_cpp(&mut a);
        let mut b = r.clone();
        crate::ops::softmax::llama_cpp::softmax_row(&mut b, 1.0);
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        let m = random_moe(false, 16, 3, true);
        let (p, route) = m.route(&r, Numerics::LlamaCpp);
        assert_eq!(route.experts.len(), 3);
        assert!(route.experts.windows(2).all(|w| p[w[0]] >= p[w[1]]));
        let best = (0..16).max_by(|&i, &j| r[i].total_cmp(&r[j])).expect("max");
        assert_eq!(route.experts[0], best);
        assert!((route.weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let raw = MixtureOfExperts {
            normalize: false,
            ..m
        };
        let (_, route) = raw.route(&r, Numerics::LlamaCpp);
        for (&e, &w) in route.experts.iter().zip(&route.weights) {
            assert_eq!(w.to_bits(), p[e].to_bits());
        }
    }
}
