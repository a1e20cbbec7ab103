//! What lucent's kernels run on and how they round: the CPU's instruction sets
//! ([`cpu`]), the thread pool and instruction-set cap of a [`Runtime`] ([`pool`]), and
//! the arithmetic a model asks for ([`Numerics`]).
//!
//! | file | holds |
//! | --- | --- |
//! | `cpu` | [`Isa`] levels (scalar < AVX2 < AVX-512), [`CpuFeatures`] detected once, `LUCENT_ISA` |
//! | `pool` | [`Runtime`]: a rayon pool of lucent's own with its thread count and level; the default runtime |
//! | `threads` | how kernels share their work over a runtime's threads: the thread count, `serial`, the parallel loops, the decode team |
//! | `numerics` | [`Numerics`]: lucent's f32 order, llama.cpp's, or llama.cpp's with every row alike |
//! | `precision` | [`Precision`]: exact (the default) or 8-bit integer products, chosen when a model is opened |

pub mod cpu;
pub mod numerics;
pub mod pool;
pub mod precision;
pub mod threads;

pub use cpu::{CpuFeatures, Isa};
pub use numerics::Numerics;
pub use pool::{isa, max_threads, Runtime, RuntimeBuilder};
pub use precision::Precision;
