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
    /// (`ops::linear_int8`). Softmax, norms, attention and residual adds stay f32.
    Int8,
}

impl Precision {
    /// Every precision, in the order `--help` lists them.
    pub const ALL: [Precision; 2] = [Precision::Exact, Precision::Int8];

    /// The name the CLI, the server and Python use (`"int8"`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Exact => "exact",
            Precision::Int8 => "int8",
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
                let bf16 = if s == "bf16" {
                    " (bf16 is not built yet: issue #32)"
                } else {
                    ""
                };
                Error::Argument(format!(
                    "precision '{s}' is not one lucent has{bf16}; choose one of {}",
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
        assert!(e.contains("exact, int8"), "{e}");
    }
}
