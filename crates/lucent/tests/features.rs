//! The cargo features are real switches: the library builds, without warnings, with no
//! default feature and with each feature alone (`fetch`, `viz`, `train`,
//! `chat-templates`), so a user who writes `default-features = false` gets a lean library
//! that compiles. The checks run `cargo check` on this very crate into a target folder of
//! their own (`features-check/` inside the active target directory: `CARGO_TARGET_DIR`
//! when set, else the workspace's `target/`), so they never wait on the suite's build lock
//! and never write into the clone.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `features-check/` in the target directory this test was built into (the parent of
/// `CARGO_TARGET_TMPDIR`, which cargo places inside `CARGO_TARGET_DIR` when that is set).
fn check_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("features-check")
}

/// `cargo check -p lucent --no-default-features [--features F]`, warnings denied.
fn check(features: Option<&str>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "check",
            "--quiet",
            "-p",
            "lucent",
            "--lib",
            "--no-default-features",
        ])
        .env("CARGO_TARGET_DIR", check_dir())
        .env("RUSTFLAGS", "-D warnings");
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo check --no-default-features {features:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_feature_subset_builds_without_warnings() {
    check(None);
    for f in ["fetch", "viz", "train", "chat-templates"] {
        check(Some(f));
    }
}
