//! The CPU's instruction sets, detected once, and the levels the kernels choose between.
//!
//! Every fast kernel belongs to one [`Isa`] level: the plain twins (`Scalar`), AVX2 with
//! FMA and F16C (`Avx2`), or AVX-512 F/BW/VL/VNNI on top of those (`Avx512`). A kernel
//! asks for a level, never for single features; the few extras that one kernel also
//! needs (GFNI and BMI2 for the paired decode tiles) are read from [`CpuFeatures`],
//! which the standard library's detection fills once per process. AMX is never used.
//!
//! Which level runs is the detected one capped by the [`Runtime`](crate::Runtime) the
//! kernel runs in (`LUCENT_ISA=scalar|avx2|avx512` for the default runtime, read once,
//! or [`RuntimeBuilder::isa`](crate::runtime::RuntimeBuilder::isa)); the dispatchers take
//! the level as a parameter, so tests run every path this machine has
//! ([`Isa::available`]).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::{Error, Result};

/// A level of instruction sets the kernels are written for, ordered: each level's
/// kernels may also use everything below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// No SIMD: the plain twins, on any CPU.
    Scalar,
    /// AVX2 with FMA and F16C (and AVX): x86-64 CPUs from 2013 on.
    Avx2,
    /// AVX-512 F, BW, VL and VNNI, besides everything of [`Isa::Avx2`].
    Avx512,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The name `LUCENT_ISA` and the CLI use (`"avx2"`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The highest level this CPU runs.
    pub fn detected() -> Isa {
        CpuFeatures::get().level()
    }

    /// Every level this CPU runs, lowest first (`Scalar` always): what a test of a fast
    /// kernel against its twin iterates over.
    pub fn available() -> Vec<Isa> {
        let top = Isa::detected();
        Isa::ALL.into_iter().filter(|&l| l <= top).collect()
    }

    /// This level, lowered to what the CPU runs.
    pub fn supported(self) -> Isa {
        self.min(Isa::detected())
    }

    /// The cap `LUCENT_ISA` sets, read from the environment once per process: None when
    /// unset or empty; an error naming the variable when it holds anything but
    /// `scalar`, `avx2` or `avx512`.
    pub fn from_env() -> Result<Option<Isa>> {
        static CAP: OnceLock<std::result::Result<Option<Isa>, String>> = OnceLock::new();
        CAP.get_or_init(|| match std::env::var("LUCENT_ISA") {
            Ok(v) if v.trim().is_empty() => Ok(None),
            Ok(v) => v
                .parse::<Isa>()
                .map(Some)
                .map_err(|e| format!("LUCENT_ISA: {e}")),
            Err(_) => Ok(None),
        })
        .clone()
        .map_err(Error::Argument)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = Error;

    /// `scalar`, `avx2` or `avx512` (any case).
    fn from_str(s: &str) -> Result<Isa> {
        let s = s.trim().to_ascii_lowercase();
        Isa::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            Error::Argument(format!(
                "'{s}' is not an instruction-set level; use scalar, avx2 or avx512"
            ))
        })
    }
}

/// The instruction-set extensions of this CPU that lucent's kernels use, detected once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX (256-bit float registers).
    pub avx: bool,
    /// AVX2 (256-bit integer operations).
    pub avx2: bool,
    /// Fused multiply-add.
    pub fma: bool,
    /// f16 ↔ f32 conversions.
    pub f16c: bool,
    /// AVX-512 foundation.
    pub avx512f: bool,
    /// AVX-512 byte and word operations.
    pub avx512bw: bool,
    /// AVX-512 on 128- and 256-bit registers.
    pub avx512vl: bool,
    /// AVX-512 vector neural network instructions (`vpdpbusd`).
    pub avx512vnni: bool,
    /// Galois-field affine byte transforms (one instruction splits a byte's nibbles).
    pub gfni: bool,
    /// Bit deposit and extract (`pdep` spreads the fifth bits of Q5 blocks).
    pub bmi2: bool,
    /// AVX512-BF16 (`vdpbf16ps`: pairs of bf16 products summed into f32 lanes), used by
    /// `ops::linear_bf16` at the Avx512 level; without it that kernel is emulated.
    pub avx512bf16: bool,
}

impl CpuFeatures {
    /// This CPU's features (detected on the first call).
    pub fn get() -> &'static CpuFeatures {
        static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
        FEATURES.get_or_init(CpuFeatures::detect)
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> CpuFeatures {
        CpuFeatures {
            avx: is_x86_feature_detected!("avx"),
            avx2: is_x86_feature_detected!("avx2"),
            fma: is_x86_feature_detected!("fma"),
            f16c: is_x86_feature_detected!("f16c"),
            avx512f: is_x86_feature_detected!("avx512f"),
            avx512bw: is_x86_feature_detected!("avx512bw"),
            avx512vl: is_x86_feature_detected!("avx512vl"),
            avx512vnni: is_x86_feature_detected!("avx512vnni"),
            gfni: is_x86_feature_detected!("gfni"),
            bmi2: is_x86_feature_detected!("bmi2"),
            avx512bf16: is_x86_feature_detected!("avx512bf16"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> CpuFeatures {
        CpuFeatures::default()
    }

    /// The highest [`Isa`] level these features make up.
    pub fn level(&self) -> Isa {
        let avx2 = self.avx && self.avx2 && self.fma && self.f16c;
        let avx512 = avx2 && self.avx512f && self.avx512bw && self.avx512vl && self.avx512vnni;
        if avx512 {
            Isa::Avx512
        } else if avx2 {
            Isa::Avx2
        } else {
            Isa::Scalar
        }
    }

    /// Whether the paired decode tiles of the 32-block quantised types run at `isa`:
    /// [`Isa::Avx512`] and also GFNI and BMI2.
    pub fn pairs(&self, isa: Isa) -> bool {
        isa >= Isa::Avx512 && self.gfni && self.bmi2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_order_and_cap() {
        assert_eq!("AVX2".parse::<Isa>().unwrap(), Isa::Avx2);
        assert_eq!(" scalar ".parse::<Isa>().unwrap(), Isa::Scalar);
        let e = "sse".parse::<Isa>().unwrap_err().to_string();
        assert!(e.contains("scalar, avx2 or avx512"), "{e}");
        assert!(Isa::Scalar < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        let all = Isa::available();
        assert_eq!(all[0], Isa::Scalar);
        assert_eq!(*all.last().unwrap(), Isa::detected());
        assert_eq!(Isa::Avx512.supported(), Isa::detected());
        assert_eq!(Isa::Scalar.supported(), Isa::Scalar);
    }

    /// The level is what the standard library's detection says, feature by feature.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn level_follows_the_detected_features() {
        let f = CpuFeatures::get();
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("avx");
        assert_eq!(f.level() >= Isa::Avx2, avx2);
        let mut less = *f;
        less.avx512vnni = false;
        assert!(less.level() <= Isa::Avx2);
        less.fma = false;
        assert_eq!(less.level(), Isa::Scalar);
        assert!(!f.pairs(Isa::Avx2));
    }
}
