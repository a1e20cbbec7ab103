//! Fuzz target `ct2_folder`: its body is `harness::ct2_folder` (fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::ct2_folder(data));
