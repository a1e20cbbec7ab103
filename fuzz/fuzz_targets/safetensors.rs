//! Fuzz target `safetensors`: its body is `harness::safetensors` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::safetensors(data));
