//! Fuzz target `gguf`: its body is `harness::gguf` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::gguf(data));
