//! Fuzz target `chat`: its body is `harness::chat` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::chat(data));
