//! The quantised kernels' tests: the block formats by their definitions and the entry
//! points against the twins at every instruction-set level (`formats`), and the private
//! kernels of each level against the twin bit for bit (`kernels`; `floats` for the
//! F32 / F16 / BF16 kernels and their prompt orders).
#![cfg(test)]

#[cfg(target_arch = "x86_64")]
mod floats;
mod formats;
#[cfg(target_arch = "x86_64")]
mod kernels;
