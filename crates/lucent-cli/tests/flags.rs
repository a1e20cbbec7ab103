//! What a new user meets on the command line: negative numbers parse where a negative
//! means something (`lucent softmax 2 -1 3`), and a negative count is refused in one line
//! that names the flag and its range (never clap's "to pass '-1' as a value, use '-- -1'"
//! tip); `bench train` takes `--threads-list` as the other benches do (the old
//! `--thread-counts` still works, unlisted); a count of one is singular ("1 text");
//! `lucent explore` logs as `lucent explore:`, not as the `lucent serve` it runs.

use std::process::Command;

/// Run `lucent ARGS`: (exit code, stdout, stderr).
fn lucent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(args)
        .output()
        .expect("lucent runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn negative_scores_are_numbers() {
    let (code, out, err) = lucent(&["softmax", "2", "-1", "3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("x1=-1"), "{out}");
    let (code, out, err) = lucent(&["softmax", "-2.5", "-1", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("-2.5"), "{out}");
}

#[test]
fn a_negative_count_is_one_line_naming_the_flag_and_its_range() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["pe", "--len", "-3"], "--len", "≥ 1"),
        (&["mask", "--len", "-4"], "--len", "≥ 0"),
        (
            &["memory", "--preset", "gpt2", "--seq", "-5"],
            "--seq",
            "≥ 0",
        ),
        (&["params", "--layers", "-2"], "--layers", "≥ 0"),
        (&["shapes", "--seq", "4", "--batch", "-1"], "--batch", "≥ 0"),
        (&["bench", "train", "--steps", "-1"], "--steps", "≥ 1"),
        (
            &["bench", "embed", "--threads-list", "-2"],
            "--threads-list",
            "≥ 1",
        ),
        (
            &["train", "lm", "--corpus", "x.txt", "--steps", "-5"],
            "--steps",
            "≥ 0",
        ),
        (&["train", "seq2seq", "--min-len", "-1"], "--min-len", "≥ 0"),
        (&["serve", "--parallel", "-1"], "--parallel", "≥ 0"),
        (&["explore", "--exit-after", "-1"], "--exit-after", "≥ 0"),
        (
            &["attention", "-m", "minilm", "hi", "--layer", "-1"],
            "--layer",
            "≥ 0",
        ),
        (
            &["bench", "transcribe", "x.wav", "--rounds", "-1"],
            "--rounds",
            "≥ 1",
        ),
    ];
    for (args, flag, range) in cases {
        let (code, out, err) = lucent(args);
        assert_eq!(code, 2, "lucent {args:?}: {err}");
        assert!(out.is_empty(), "lucent {args:?} printed {out}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
            .collect();
        assert_eq!(lines.len(), 1, "lucent {args:?}: {err}");
        assert!(
            lines[0].starts_with("error: invalid value '-")
                && lines[0].contains(&format!("'{flag} "))
                && lines[0].contains(range),
            "lucent {args:?}: {err}"
        );
        assert!(!err.contains("'-- -"), "lucent {args:?}: clap's tip: {err}");
    }
}

/// A negative where the library checks the range (a temperature): its one-line error,
/// not clap's tip.
#[test]
fn a_negative_temperature_is_refused_by_the_sampler() {
    for cmd in ["generate", "chat"] {
        let mut args = vec![cmd, "--temperature", "-1"];
        if cmd == "generate" {
            args.push("hi");
        }
        let (code, _, err) = lucent(&args);
        assert_eq!(code, 1, "lucent {args:?}: {err}");
        assert!(err.contains("--temperature must be ≥ 0"), "{err}");
        assert!(!err.contains("'-- -"), "clap's tip: {err}");
    }
}

/// The tiny model of `bench train` for a quick run.
const TINY: &[&str] = &[
    "--steps",
    "1",
    "--layers",
    "1",
    "--d-model",
    "8",
    "--heads",
    "1",
    "--block",
    "4",
    "--batch",
    "1",
    "--vocab",
    "8",
    "--json",
];

#[test]
fn bench_train_takes_threads_list_and_the_old_spelling() {
    for flag in ["--threads-list", "--thread-counts"] {
        let mut args = vec!["bench", "train", flag, "1"];
        args.extend_from_slice(TINY);
        let (code, out, err) = lucent(&args);
        assert_eq!(code, 0, "{flag}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["results"][0]["threads"], 1, "{flag}: {out}");
    }
    let (code, help, _) = lucent(&["bench", "train", "--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("--threads-list"), "{help}");
    assert!(!help.contains("--thread-counts"), "{help}");
}

#[test]
fn one_is_singular() {
    let (code, out, err) = lucent(&["pe", "--len", "1", "--dim", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 position ×"), "{out}");
    let (code, out, err) = lucent(&["mask", "--len", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 position "), "{out}");
    let (code, out, err) = lucent(&["params", "--layers", "1", "--heads", "1", "--d-model", "8"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 layer,") && out.contains("1 head ") && !out.contains("1 heads"),
        "{out}"
    );
    let (code, out, err) = lucent(&["embed", "one text"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(": 1 text →") && !out.contains("1 texts"),
        "{out}"
    );
}

#[test]
fn explore_logs_under_its_own_name() {
    let (code, out, err) = lucent(&["explore", "-m", "minilm", "--exit-after", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("lucent explore: http://127.0.0.1:"),
        "{out}"
    );
    assert!(
        err.contains("lucent explore: listening on") && err.contains("lucent explore: stopped"),
        "{err}"
    );
    assert!(!err.contains("lucent serve"), "{err}");
}
