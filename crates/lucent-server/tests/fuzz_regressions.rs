//! The `server_request` fuzz target's body (`fuzz/harness_server.rs`, compiled here too)
//! runs over every seed in `fuzz/corpus/server_request/` and every input the fuzzer
//! found a problem with, kept in `tests/data/fuzz/server_request/` (issue 20, item 4).
//! A panic here is a regression.

#[path = "../../../fuzz/harness_server.rs"]
mod harness_server;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files in `dir` (none if it does not exist), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file());
    v.sort();
    v
}

#[test]
fn every_seed_and_finding_passes() {
    let seeds = files(&root().join("fuzz/corpus/server_request"));
    assert!(
        seeds.len() >= 10,
        "fuzz/corpus/server_request has {} seeds",
        seeds.len()
    );
    let findings = files(&root().join("tests/data/fuzz/server_request"));
    for f in seeds.iter().chain(&findings) {
        println!("server_request: {}", f.display());
        let (status, body) = harness_server::answer(&std::fs::read(f).unwrap());
        println!("  {status}: {}", body.chars().take(160).collect::<String>());
    }
    println!("{} findings replayed", findings.len());
}

/// The seeds reach deep: a chat completion and an embedding succeed on the tiny models
/// (so the fuzzer starts from requests that get through every check).
#[test]
fn seeds_reach_the_models() {
    for (seed, needle) in [("seed-00", "chat.completion"), ("seed-05", "embedding")] {
        let bytes = std::fs::read(root().join("fuzz/corpus/server_request").join(seed)).unwrap();
        let answer = harness_server::answer(&bytes);
        assert_eq!(answer.0, 200, "{seed}: {}", answer.1);
        assert!(answer.1.contains(needle), "{seed}: {}", answer.1);
    }
}
