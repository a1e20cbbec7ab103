//! The quantised kernels' tests: the block formats by their definitions and the entry
//! points against the twins at every instruction-set level (`formats`), and the private
//! kernels of each level against the twin bit for bit (`kernels`).
#![cfg(test)]

mod formats;
#[cfg(target_arch = "x86_64")]
mod kernels;
