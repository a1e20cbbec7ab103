//! Optimisers, the learning-rate schedule and gradient clipping.
//!
//! **AdamW** (Loshchilov & Hutter, with PyTorch's exact order of operations), per
//! parameter θ with gradient g at step t:
//!
//! ```text
//! θ ← θ · (1 − lr·λ)                       decoupled weight decay
//! m ← β₁ m + (1 − β₁) g
//! v ← β₂ v + (1 − β₂) g²
//! θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
//! ```
//!
//! **SGD with momentum** (PyTorch): g ← g + λθ; b ← μ b + g (b = g at the first step);
//! θ ← θ − lr·b.
//!
//! **Schedule**: linear warm-up from lr/warmup to lr over `warmup` steps, then cosine
//! decay to `min_lr` at `total` steps: lr_t = min + ½(lr − min)(1 + cos(π·p)),
//! p = (t − warmup)/(total − warmup).
//!
//! **Clipping by global norm**: with n = √(Σ over all parameters of Σ g²), every gradient
//! is multiplied by max_norm / (n + 10⁻⁶) when n > max_norm.

use std::collections::BTreeMap;

use crate::tensor::Tensor;
use crate::train::params::Parameters;
use crate::{Error, Result};

/// Which parameters weight decay applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecayRule {
    /// Every parameter (plain `torch.optim.AdamW(model.parameters())`).
    All,
    /// Only matrices (rank ≥ 2: linear weights, embedding tables); not biases or norm
    /// gains (nanoGPT's grouping).
    MatricesOnly,
}

impl DecayRule {
    fn applies(self, t: &Tensor) -> bool {
        match self {
            DecayRule::All => true,
            DecayRule::MatricesOnly => t.rank() >= 2,
        }
    }
}

/// AdamW with decoupled weight decay.
#[derive(Clone, Debug)]
pub struct AdamW {
    /// Learning rate (set it each step from a schedule).
    pub lr: f32,
    /// β₁, the first-moment decay.
    pub beta1: f32,
    /// β₂, the second-moment decay.
    pub beta2: f32,
    /// ε added to the denominator.
    pub eps: f32,
    /// λ, the weight decay.
    pub weight_decay: f32,
    /// Which parameters decay.
    pub decay: DecayRule,
    /// Steps taken so far.
    pub step: u64,
    /// Per parameter name: (m, v).
    state: BTreeMap<String, (Vec<f32>, Vec<f32>)>,
}

impl AdamW {
    /// AdamW with the given hyper-parameters and no state yet.
    pub fn new(lr: f32, betas: (f32, f32), eps: f32, weight_decay: f32, decay: DecayRule) -> Self {
        AdamW {
            lr,
            beta1: betas.0,
            beta2: betas.1,
            eps,
            weight_decay,
            decay,
            step: 0,
            state: BTreeMap::new(),
        }
    }

    /// One update of every parameter of `model` that has a gradient.
    pub fn step(&mut self, model: &mut dyn Parameters) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let bc1 = 1.0 - (self.beta1 as f64).powi(t);
        let bc2_sqrt = (1.0 - (self.beta2 as f64).powi(t)).sqrt() as f32;
        let step_size = (self.lr as f64 / bc1) as f32;
        let (b1, b2, eps, lr) = (self.beta1, self.beta2, self.eps, self.lr);
        let mut result = Ok(());
        model.visit_params("", &mut |name, p| {
            if result.is_err() {
                return;
            }
            let Some(g) = p.grad() else { return };
            if g.shape() != p.shape() {
                result = Err(Error::mismatch(format!("AdamW: gradient of {name}"), g.shape(), p.shape()));
                return;
            }
            let decay = if self.decay.applies(p) { 1.0 - lr * self.weight_decay } else { 1.0 };
            let n = p.numel();
            let (m, v) = self
                .state
                .entry(name.to_string())
                .or_insert_with(|| (vec![0.0; n], vec![0.0; n]));
            if m.len() != n {
                result = Err(Error::Training(format!(
                    "AdamW state for {name} has {} values but the parameter has {n}; the checkpoint belongs to another model",
                    m.len()
                )));
                return;
            }
            for (((x, &gi), mi), vi) in p.data_mut().iter_mut().zip(g.data()).zip(m.iter_mut()).zip(v.iter_mut()) {
                *x *= decay;
                *mi += (gi - *mi) * (1.0 - b1);
                *vi = *vi * b2 + (1.0 - b2) * gi * gi;
                let denom = vi.sqrt() / bc2_sqrt + eps;
                *x += -step_size * (*mi / denom);
            }
        });
        result
    }

    /// The optimiser state as named tensors (`adamw.m.NAME`, `adamw.v.NAME`), for
    /// checkpoints.
    pub fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for (name, (m, v)) in &self.state {
            out.push((
                format!("adamw.m.{name}"),
                Tensor::new(m.clone(), &[m.len()])?,
            ));
            out.push((
                format!("adamw.v.{name}"),
                Tensor::new(v.clone(), &[v.len()])?,
            ));
        }
        Ok(out)
    }

    /// Restore the state written by [`AdamW::state_tensors`] (other names are ignored).
    pub fn load_state(&mut self, step: u64, tensors: &[(String, Tensor)]) {
        self.step = step;
        self.state.clear();
        for (name, t) in tensors {
            if let Some(p) = name.strip_prefix("adamw.m.") {
                self.state.entry(p.to_string()).or_default().0 = t.data().to_vec();
            } else if let Some(p) = name.strip_prefix("adamw.v.") {
                self.state.entry(p.to_string()).or_default().1 = t.data().to_vec();
            }
        }
    }
}

/// SGD with (optional) momentum and L2 weight decay, PyTorch semantics (no dampening,
/// no Nesterov).
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f32,
    /// Momentum μ (0 for plain SGD).
    pub momentum: f32,
    /// L2 weight decay λ added to the gradient.
    pub weight_decay: f32,
    buffers: BTreeMap<String, Vec<f32>>,
}

impl Sgd {
    /// SGD with the given settings.
    pub fn new(lr: f32, momentum: f32, weight_decay: f32) -> Self {
        Sgd {
            lr,
            momentum,
            weight_decay,
            buffers: BTreeMap::new(),
        }
    }

    /// One update of every parameter of `model` that has a gradient.
    pub fn step(&mut self, model: &mut dyn Parameters) -> Result<()> {
        let (lr, mu, wd) = (self.lr, self.momentum, self.weight_decay);
        let buffers = &mut self.buffers;
        model.visit_params("", &mut |name, p| {
            let Some(g) = p.grad() else { return };
            let theta = p.data().to_vec();
            let mut d: Vec<f32> = g
                .data()
                .iter()
                .zip(&theta)
                .map(|(&gi, &x)| gi + wd * x)
                .collect();
            if mu != 0.0 {
                match buffers.get_mut(name) {
                    Some(b) if b.len() == d.len() => {
                        for (bi, di) in b.iter_mut().zip(d.iter_mut()) {
                            *bi = mu * *bi + *di;
                            *di = *bi;
                        }
                    }
                    _ => {
                        buffers.insert(name.to_string(), d.clone());
                    }
                }
            }
            for (x, di) in p.data_mut().iter_mut().zip(d) {
                *x -= lr * di;
            }
        });
        Ok(())
    }
}

/// Linear warm-up, then cosine decay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Peak learning rate.
    pub lr: f32,
    /// Warm-up steps.
    pub warmup: u64,
    /// Step at which the decay reaches `min_lr` (it stays there afterwards).
    pub total: u64,
    /// Final learning rate.
    pub min_lr: f32,
}

impl Schedule {
    /// A constant learning rate.
    pub fn constant(lr: f32) -> Self {
        Schedule {
            lr,
            warmup: 0,
            total: 0,
            min_lr: lr,
        }
    }

    /// The learning rate for step `t` (0-based).
    pub fn lr_at(&self, t: u64) -> f32 {
        if t < self.warmup {
            return self.lr * (t + 1) as f32 / self.warmup as f32;
        }
        if self.total <= self.warmup || t >= self.total {
            return if self.total <= self.warmup {
                self.lr
            } else {
                self.min_lr
            };
        }
        let p = (t - self.warmup) as f64 / (self.total - self.warmup) as f64;
        let c = 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
        (self.min_lr as f64 + (self.lr - self.min_lr) as f64 * c) as f32
    }
}

/// Scale all gradients so that their global L2 norm is at most `max_norm`; returns the
/// norm before clipping.
pub fn clip_grad_norm(model: &mut dyn Parameters, max_norm: f32) -> f32 {
    let mut sq = 0.0f64;
    model.visit_params("", &mut |_, p| {
        if let Some(g) = p.grad() {
            sq += sum_of_squares(g.data());
        }
    });
    let norm = sq.sqrt() as f32;
    if norm > max_norm {
        let s = max_norm / (norm + 1e-6);
        model.visit_params("", &mut |_, p| {
            if let Some(g) = p.grad() {
                p.set_grad(Some(g.map(|x| x * s)));
            }
        });
    }
    norm
}

/// Σ x² in f64, eight independent running sums (so the loop vectorises) added at the end.
fn sum_of_squares(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| v as f64 * v as f64)
        .sum();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v as f64 * v as f64;
        }
    }
    lanes.iter().sum::<f64>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Linear;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// A 1×2 linear layer with weights `w` and gradient `g`, as a parameter holder.
    fn holder(w: [f32; 2], g: [f32; 2]) -> crate::Result<Linear> {
        let mut lin = Linear::new(Tensor::from_slice(&w).reshape(&[1, 2])?, None)?;
        lin.requires_grad();
        lin.weight_f32()?
            .set_grad(Some(Tensor::from_slice(&g).reshape(&[1, 2])?));
        Ok(lin)
    }

    #[test]
    fn schedule_warms_up_linearly_then_follows_the_cosine() {
        let s = Schedule {
            lr: 1.0,
            warmup: 10,
            total: 110,
            min_lr: 0.1,
        };
        assert!((s.lr_at(0) - 0.1).abs() < 1e-7);
        assert!((s.lr_at(9) - 1.0).abs() < 1e-7);
        assert!((s.lr_at(10) - 1.0).abs() < 1e-7);
        assert!((s.lr_at(60) - 0.55).abs() < 1e-6, "half-way: (lr + min)/2");
        assert!((s.lr_at(110) - 0.1).abs() < 1e-7 && (s.lr_at(500) - 0.1).abs() < 1e-7);
        assert_eq!(Schedule::constant(0.3).lr_at(1000), 0.3);
    }

    #[test]
    fn clipping_scales_to_the_global_norm() -> TestResult {
        let mut lin = holder([0.0, 0.0], [3.0, 4.0])?;
        let norm = clip_grad_norm(&mut lin, 1.0);
        assert!((norm - 5.0).abs() < 1e-6);
        let g = lin.weight_f32()?.grad().ok_or("no gradient")?;
        assert!((g.data()[0] - 0.6).abs() < 1e-5 && (g.data()[1] - 0.8).abs() < 1e-5);
        let mut small = holder([0.0, 0.0], [0.3, 0.4])?;
        clip_grad_norm(&mut small, 1.0);
        assert_eq!(
            small.weight_f32()?.grad().ok_or("no gradient")?.data(),
            &[0.3, 0.4],
            "below the norm: untouched"
        );
        Ok(())
    }

    #[test]
    fn sgd_momentum_and_adamw_first_steps_follow_the_formulas() -> TestResult {
        // SGD: θ₁ = θ₀ − lr·g; b = g; θ₂ = θ₁ − lr·(μ·g + g).
        let mut lin = holder([1.0, -2.0], [0.5, 0.25])?;
        let mut sgd = Sgd::new(0.1, 0.9, 0.0);
        sgd.step(&mut lin)?;
        sgd.step(&mut lin)?;
        let want = [
            1.0 - 0.1 * 0.5 - 0.1 * 1.9 * 0.5,
            -2.0 - 0.1 * 0.25 - 0.1 * 1.9 * 0.25,
        ];
        for (got, want) in lin.weight_f32()?.data().iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        // AdamW step 1: θ(1 − lr·λ) − lr·g/(|g| + ε).
        let mut lin = holder([1.0, -2.0], [0.5, -0.25])?;
        let mut adam = AdamW::new(0.01, (0.9, 0.95), 1e-8, 0.1, DecayRule::All);
        adam.step(&mut lin)?;
        let want = [1.0 * (1.0 - 0.001) - 0.01, -2.0 * (1.0 - 0.001) + 0.01];
        for (got, want) in lin.weight_f32()?.data().iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert_eq!(adam.state_tensors()?.len(), 2, "m and v of one tensor");
        Ok(())
    }
}
