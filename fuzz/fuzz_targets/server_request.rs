//! Fuzz target `server_request`: its body is `harness_server::server_request`
//! (fuzz/harness_server.rs).
#![no_main]

#[path = "../harness_server.rs"]
mod harness_server;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness_server::server_request(data));
