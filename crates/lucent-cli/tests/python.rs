//! The Python package in the suite: build the wheel of `python/` (maturin, through pip's
//! build hook: `pip install ./python`), install it in a venv under `target/`, and run
//! `pytest python/tests` against this build's `lucent` binary. Fails if any step or any
//! Python test fails.
//!
//! The venv (`target/python-suite/venv`) holds what python/tests/requirements.txt asks
//! for from PyPI (pytest, numpy, maturin, Ray Data); it is made once and made again
//! when that file changes. The package itself is rebuilt and reinstalled every run.
//! `LUCENT_PYTHON` names the interpreter to make the venv with (default `python3`,
//! which must be ≥ 3.9).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Canonical, so that the target directory handed to maturin's cargo is spelled as
    // the suite's own build spells it.
    repo.canonicalize().unwrap_or(repo)
}

/// Run `cmd`, panicking with its output if it fails.
fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The suite's venv with the test requirements, made (again) when they change.
fn venv(target: &Path) -> PathBuf {
    let dir = target.join("python-suite");
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let reqs = repo().join("python/tests/requirements.txt");
    let want = std::fs::read_to_string(&reqs).expect("python/tests/requirements.txt");
    let stamp = venv.join("lucent-requirements.txt");
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return python;
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).expect("remove the old venv");
    }
    std::fs::create_dir_all(&dir).expect("create target/python-suite");
    let base = std::env::var("LUCENT_PYTHON").unwrap_or_else(|_| "python3".into());
    run(
        Command::new(&base).args(["-m", "venv"]).arg(&venv),
        "making the venv (is python3 >= 3.9 with venv installed?)",
    );
    run(
        Command::new(&python).args(["-m", "pip", "install", "-q", "--upgrade", "pip"]),
        "upgrading pip",
    );
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "-r"])
            .arg(&reqs),
        "installing the test requirements from PyPI",
    );
    std::fs::write(&stamp, want).expect("write the venv's stamp");
    python
}

#[test]
fn python_package_builds_installs_and_passes_pytest() {
    let repo = repo();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"));
    let python = venv(&target);
    // maturin's build hook runs the `maturin` command: the venv's bin first on PATH.
    let bin = python.parent().expect("the venv's bin folder");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    // pip runs maturin (pyproject.toml's build backend) in place: the wheel is built
    // with cargo in this workspace's target directory, so lucent is not compiled again.
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--no-build-isolation",
                "--no-deps",
                "--force-reinstall",
            ])
            .arg(repo.join("python"))
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target),
        "building and installing the lucent wheel (pip install ./python)",
    );
    run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(repo.join("python/tests"))
            .current_dir(&repo)
            .env("LUCENT_BIN", env!("CARGO_BIN_EXE_lucent")),
        "pytest python/tests",
    );
}
