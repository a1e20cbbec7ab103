//! The demonstration commands, run as a user would: `attention --demo`, `mask`, `pe`.
//! Their JSON must carry the true values of tests/data/seed_examples.json.

use std::process::Command;

use serde_json::Value;

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

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = lucent(args);
    assert!(ok, "lucent {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap()
}

fn seed() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/seed_examples.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn flat(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
        .collect()
}

/// Printed values against the golden ones, 1e-6 (f32).
fn close(what: &str, got: &Value, want: &Value) {
    let (g, w) = (flat(got), flat(want));
    assert_eq!(g.len(), w.len(), "{what}");
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= 1e-6, "{what}[{k}]: {a} vs {b}");
    }
}

#[test]
fn attention_demo_prints_the_true_values() {
    let j = json(&["attention", "--demo", "--json"]);
    let s = seed();
    let ex = &s["attention_seed42"];
    for key in ["Q", "K", "V", "scores", "scaled", "weights", "output"] {
        close(key, &j[key], &ex[key]);
    }
    assert_eq!(j["attends_most_to"], serde_json::json!([2, 2, 1]));
    let (ok, out, _) = lucent(&["attention", "--demo"]);
    assert!(ok);
    assert!(
        out.contains("0.3929") && out.contains("0.4390") && out.contains("-0.3208"),
        "{out}"
    );
}

#[test]
fn attention_demo_causal() {
    let j = json(&["attention", "--demo", "--causal", "--json"]);
    let w = flat(&j["weights"]);
    assert_eq!(&w[0..3], &[1.0, 0.0, 0.0]);
    assert_eq!(w[5], 0.0);
    // the last row sees everything: unchanged from the unmasked example
    close(
        "last row",
        &serde_json::json!([w[6..9].to_vec()]),
        &serde_json::json!([flat(&seed()["attention_seed42"]["weights"])[6..9].to_vec()]),
    );
    assert_eq!(
        j["mask"],
        serde_json::json!([
            [true, false, false],
            [true, true, false],
            [true, true, true]
        ])
    );
}

#[test]
fn attention_without_demo_says_what_to_pass() {
    let (ok, _, err) = lucent(&["attention"]);
    assert!(!ok);
    assert!(err.contains("--demo"), "{err}");
}

#[test]
fn mask_kinds_and_errors() {
    let j = json(&[
        "mask", "--kind", "prefix", "--len", "4", "--prefix", "2", "--json",
    ]);
    assert_eq!(
        j["mask"],
        serde_json::json!([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    );
    let j = json(&["mask", "--compare", "--tokens", "The cat sat", "--json"]);
    let kinds: Vec<&str> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["bidirectional", "causal", "prefix"]);
    assert_eq!(j[1]["can_see"], serde_json::json!([[0], [0, 1], [0, 1, 2]]));
    let (ok, out, _) = lucent(&["mask", "--kind", "causal", "--tokens", "The cat sat"]);
    assert!(ok);
    assert!(out.contains("position 1 (cat) can see [The, cat]"), "{out}");
    for bad in [
        &["mask", "--len", "3", "--tokens", "a b"][..],
        &["mask", "--kind", "prefix", "--len", "3", "--prefix", "4"],
        &["mask", "--len", "0"],
        &["mask"],
    ] {
        let (ok, _, err) = lucent(bad);
        assert!(!ok && err.starts_with("error:"), "{bad:?}: {err}");
    }
}

#[test]
fn mask_compare_png() {
    let path = std::env::temp_dir().join(format!("lucent-masks-{}.png", std::process::id()));
    let (ok, _, err) = lucent(&[
        "mask",
        "--compare",
        "--len",
        "5",
        "--png",
        path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn pe_table_and_similarity() {
    let j = json(&["pe", "--len", "10", "--dim", "8", "--json"]);
    close("PE 10x8", &j["table"], &seed()["sinusoidal_pe_10x8"]);
    let sims: Vec<f64> = j["cosine_similarity_to_position_0"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["cosine"].as_f64().unwrap())
        .collect();
    assert!(
        sims[0] > sims[sims.len() - 1],
        "nearby positions more similar: {sims:?}"
    );
    let (ok, out, _) = lucent(&["pe", "--len", "100", "--dim", "64"]);
    assert!(ok);
    assert!(out.contains("excerpt") && out.contains("k =    1"), "{out}");
    let (ok, _, err) = lucent(&["pe", "--len", "0"]);
    assert!(!ok && err.contains("--len"), "{err}");
}
