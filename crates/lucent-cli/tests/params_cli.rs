//! `lucent params`, `memory` and `shapes` end to end: the binary's JSON carries the same
//! exact numbers as the library (integers: no tolerance), and bad flags fail with a
//! message on stderr.

use std::process::Command;

fn lucent(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let (ok, out, err) = lucent(args);
    assert!(ok, "lucent {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn params_json_totals_and_problem_1() {
    let v = json(&["params", "--preset", "bert-base", "--json"]);
    assert_eq!(v["total"], 109_482_240);
    assert_eq!(v["pooler"], 590_592);
    let v = json(&[
        "params",
        "--d-model",
        "768",
        "--heads",
        "12",
        "--d-ff",
        "3072",
        "--json",
    ]);
    let g = &v["guide_problem_1"];
    assert_eq!(g["q_projection_one_head"], 49_152);
    assert_eq!(g["attention_four_matrices_no_bias"], 2_359_296);
    assert_eq!(g["ffn"], 4_722_432);
    assert_eq!(g["norms_per_layer"], 3_072);
    let (ok, table, _) = lucent(&["params", "--preset", "llama-7b"]);
    assert!(ok && table.contains("6,738,415,616"), "{table}");
}

#[test]
fn memory_json_16_mib_per_head() {
    let v = json(&["memory", "--preset", "gpt2", "--seq", "2048", "--json"]);
    assert_eq!(v["estimate"]["scores_per_head"], 16_777_216);
    let ts: Vec<u64> = v["growth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(ts, vec![512, 1024, 2048, 4096]);
}

#[test]
fn shapes_json_problem_2() {
    let v = json(&[
        "shapes",
        "--preset",
        "transformer-base",
        "--batch",
        "4",
        "--seq",
        "10",
        "--json",
    ]);
    let shapes: Vec<serde_json::Value> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shape"].clone())
        .collect();
    assert_eq!(shapes[1], serde_json::json!([4, 10, 512]));
    assert_eq!(shapes[6], serde_json::json!([4, 8, 10, 64]));
    assert_eq!(shapes[8], serde_json::json!([4, 8, 10, 10]));
    assert_eq!(shapes.last().unwrap(), &serde_json::json!([4, 10, 37000]));
}

#[test]
fn bad_flags_fail_with_a_reason() {
    let (ok, _, err) = lucent(&["params", "--preset", "gpt-5"]);
    assert!(
        !ok && err.contains("known presets") && err.contains("smollm2"),
        "{err}"
    );
    let (ok, _, err) = lucent(&["params", "--d-model", "10", "--heads", "3"]);
    assert!(
        !ok && err.contains("d_model (10) must be divisible by heads (3)"),
        "{err}"
    );
    let (ok, _, err) = lucent(&["memory", "--preset", "gpt2", "--seq", "0"]);
    assert!(!ok && err.contains("seq"), "{err}");
    let (ok, _, err) = lucent(&["shapes", "--preset", "gpt2", "--seq", "4", "--batch", "0"]);
    assert!(!ok && err.contains("batch"), "{err}");
}
