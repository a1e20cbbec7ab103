//! What lucent's kernels run on: the CPU's instruction sets ([`cpu`]) and the thread
//! pool and instruction-set cap of a [`Runtime`] ([`pool`]).
//!
//! | file | holds |
//! | --- | --- |
//! | `cpu` | [`Isa`] levels (scalar < AVX2 < AVX-512), [`CpuFeatures`] detected once, `LUCENT_ISA` |
//! | `pool` | [`Runtime`]: a rayon pool of lucent's own with its thread count and level; the default runtime |

pub mod cpu;
pub mod pool;

pub use cpu::{CpuFeatures, Isa};
pub use pool::{isa, Runtime, RuntimeBuilder};
