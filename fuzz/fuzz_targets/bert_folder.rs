//! Fuzz target `bert_folder`: its body is `harness::bert_folder` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::bert_folder(data));
