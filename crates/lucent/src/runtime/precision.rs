//! [`Precision`]: how much precision a model spends on its products, one value chosen
//! when the model is opened and owned by it (never a thread-local or an environment
//! variable read inside a kernel).

use crate::{Error, Result};

/// How a model's weight products are computed.
///
/// `Exact` is the default and loses nothing: every parity test holds in it. The others
/// trade accuracy for speed, and lucent measures how far they land from exact
/// (`lucent bench precision`, docs/precision.md). Every precision keeps batch
/// invariance: a row's numbers never depend on the rows beside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The model's own arithmetic: f32 (or a GGUF file's blocks in llama.cpp's order).
    #[default]
    Exact,
    /// Weight products in 8-bit integers: weights quantised once at load (symmetric, one
    /// scale per output channel), activations per row as they arrive, integer sums
    /// (`ops::linear_int8`). Softmax, norms, attention and residual adds stay f32; an
    /// encoder keeps V and its feed-forward's down projection in bf16, where int8 costs
    /// the most accuracy (`EncoderModel::set_precision`), and Whisper runs only its
    /// feed-forward up projections and its encoder's down projection in int8, the rest in
    /// bf16 (`EncoderDecoderModel::set_precision`; the measurements are in
    /// docs/precision.md). A decoder runs every weight product in int8, a GGUF file's
    /// blocks widened once at load (`DecoderModel::set_precision`).
    Int8,
    /// Weight products in bf16 with f32 sums: weights rounded to bf16 once at load
    /// (to nearest, ties to even), activations per row as they arrive, `vdpbf16ps`
    /// (AVX512-BF16; emulated with the same bits on a CPU without it) in one fixed order
    /// (`ops::linear_bf16`). Softmax, norms, attention and residual adds stay f32.
    Bf16,
}

impl Precision {
    /// Every precision, in the order `--help` lists them.
    pub const ALL: [Precision; 3] = [Precision::Exact, Precision::Bf16, Precision::Int8];

    /// The name the CLI, the server and Python use (`"bf16"`, `"int8"`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Exact => "exact",
            Precision::Int8 => "int8",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Precision> {
        let s = s.trim().to_ascii_lowercase();
        Precision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
                Error::Argument(format!(
                    "precision '{s}' is not one lucent has; choose one of {}",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_ones_are_refused() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>().unwrap(), p);
        }
        assert_eq!(" INT8 ".parse::<Precision>().unwrap(), Precision::Int8);
        assert_eq!(Precision::default(), Precision::Exact);
        let e = "fp4".parse::<Precision>().unwrap_err().to_string();
        assert!(e.contains("exact, bf16, int8"), "{e}");
        assert_eq!("BF16".parse::<Precision>().unwrap(), Precision::Bf16);
    }
}
