//! Fuzz target `tokenizer_json`: its body is `harness::tokenizer_json` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::tokenizer_json(data));
