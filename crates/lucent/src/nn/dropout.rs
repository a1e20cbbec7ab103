//! `Dropout` (Srivastava et al. 2014), in its inverted form.
//!
//! In training mode every element is kept with probability 1 − p and scaled by
//! 1 / (1 − p), so the expected value of each output equals its input:
//! y = x ⊙ m / (1 − p), m ~ Bernoulli(1 − p). In evaluation mode dropout is the identity
//! (that is the whole point of the 1/(1 − p) scale: nothing needs changing at test time).
//! The mode is explicit ([`Dropout::train`], [`Dropout::eval`]); a new `Dropout` starts in
//! training mode, so it never silently does nothing while a model trains.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::tensor::Tensor;
use crate::{Error, Result};

/// Inverted dropout with its own seeded random stream.
#[derive(Clone, Debug)]
pub struct Dropout {
    p: f32,
    training: bool,
    rng: StdRng,
}

impl Dropout {
    /// Dropout with drop probability `p` in [0, 1), seeded, in training mode.
    pub fn new(p: f32, seed: u64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Argument(format!(
                "dropout probability must be in [0, 1), got {p}"
            )));
        }
        Ok(Dropout {
            p,
            training: true,
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// The drop probability p.
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Whether dropout is active (training mode).
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// Switch to training mode (drop and rescale).
    pub fn train(&mut self) {
        self.training = true;
    }

    /// Switch to evaluation mode (identity).
    pub fn eval(&mut self) {
        self.training = false;
    }

    /// Apply dropout: in training mode zero each element with probability p and scale
    /// the rest by 1/(1 − p); in evaluation mode (or with p = 0) return `x` unchanged.
    ///
    /// # Shapes
    /// x: any → same
    pub fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        let keep = 1.0 - self.p;
        let rng = &mut self.rng;
        let mask = Tensor::from_fn(x.shape(), |_| {
            if rng.random::<f32>() < keep {
                1.0 / keep
            } else {
                0.0
            }
        });
        x.mul(&mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn training_drops_and_rescales_eval_is_identity() -> TestResult {
        let x = Tensor::full(&[100, 100], 2.0);
        let mut d = Dropout::new(0.25, 7)?;
        assert!(d.is_training(), "a new dropout is in training mode");
        let y = d.forward(&x)?;
        let zeros = y.data().iter().filter(|&&v| v == 0.0).count();
        let kept = y
            .data()
            .iter()
            .filter(|&&v| (v - 2.0 / 0.75).abs() < 1e-6)
            .count();
        assert_eq!(zeros + kept, 10_000, "every element is dropped or rescaled");
        let frac = zeros as f32 / 10_000.0;
        assert!((frac - 0.25).abs() < 0.02, "dropped fraction {frac}");
        let mean = y.data().iter().sum::<f32>() / 10_000.0;
        assert!((mean - 2.0).abs() < 0.05, "mean preserved, got {mean}");
        // Same seed, same mask; the stream advances between calls.
        let mut d2 = Dropout::new(0.25, 7)?;
        assert_eq!(d2.forward(&x)?.data(), y.data());
        assert_ne!(d2.forward(&x)?.data(), y.data());
        d.eval();
        assert_eq!(d.forward(&x)?.data(), x.data());
        assert!(Dropout::new(1.0, 0).is_err() && Dropout::new(-0.1, 0).is_err());
        Ok(())
    }
}
