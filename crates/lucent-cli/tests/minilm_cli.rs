//! The MiniLM commands run as a user would: `embed`, `similarity`, `analogy`,
//! `attention -m`, `bench embed`, and their errors on bad input (exit code ≠ 0, a
//! message naming the problem, no panic). The model is fetched into the lucent cache on
//! first use. Tolerance against sentence-transformers: max |Δ| ≤ 1e-4 (the issue's).

use std::path::PathBuf;
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

fn fails(args: &[&str], needle: &str) {
    let (ok, _, err) = lucent(args);
    assert!(!ok, "lucent {args:?} should fail");
    assert!(!err.contains("panicked"), "lucent {args:?} panicked: {err}");
    assert!(
        err.contains(needle),
        "lucent {args:?}: expected {needle:?} in {err}"
    );
}

fn model_dir() -> PathBuf {
    let v = json(&["fetch", "minilm", "--json"]);
    PathBuf::from(v["models"][0]["path"].as_str().unwrap())
}

/// Rows 0 and 1 of the reference (king, queen), read from the safetensors file by hand.
fn reference_rows() -> Vec<Vec<f32>> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/minilm_reference.safetensors");
    let bytes = std::fs::read(p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let data = &bytes[8 + n..];
    (0..2)
        .map(|r| {
            (0..384)
                .map(|i| {
                    let o = (r * 384 + i) * 4;
                    f32::from_le_bytes(data[o..o + 4].try_into().unwrap())
                })
                .collect()
        })
        .collect()
}

#[test]
fn embed_json_equals_the_reference() {
    let v = json(&["embed", "--json", "king", "queen"]);
    assert_eq!(v["model"], "minilm");
    assert_eq!(v["dim"], 384);
    let rows = v["embeddings"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (got, want) in rows.iter().zip(reference_rows()) {
        let got: Vec<f32> = got
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let m = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(m <= 1e-4, "max |Δ| {m}");
    }
}

#[test]
fn similarity_and_analogy_print_the_guide_figures() {
    let (ok, out, err) = lucent(&["similarity", "king", "queen", "man"]);
    assert!(ok, "{err}");
    assert!(out.contains("0.681") && out.contains("0.322"), "{out}");
    let (ok, out, err) = lucent(&["analogy", "king", "-", "man", "+", "woman"]);
    assert!(ok, "{err}");
    assert!(out.contains("king – queen        0.681"), "{out}");
    let first = out
        .lines()
        .skip_while(|l| !l.starts_with("nearest"))
        .nth(1)
        .unwrap();
    assert!(first.contains("queen") && first.contains("0.579"), "{out}");
}

#[test]
fn attention_model_weights_are_distributions() {
    let v = json(&[
        "attention",
        "-m",
        "minilm",
        "The cat sat on the mat because it was tired",
        "--layer",
        "2",
        "--head",
        "5",
        "--token",
        "it",
        "--steps",
        "--json",
    ]);
    let tokens = v["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 12);
    assert_eq!(v["n_heads"], 12);
    // --head 5 --token it: one head, one row (the query "it", position 8).
    assert_eq!(v["rows"], serde_json::json!([8]));
    let heads = v["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0]["head"], 5);
    for head in heads {
        for row in head["weights"].as_array().unwrap() {
            let s: f64 = row
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .sum();
            assert!((s - 1.0).abs() < 1e-5, "row sums to {s}");
        }
    }
    assert_eq!(v["steps"]["token"], 8);
    assert!(v["steps"]["by_hand_max_diff"].as_f64().unwrap() < 1e-5);
    fails(
        &["attention", "-m", "minilm", "a b", "--layer", "6"],
        "--layer 6 is out of range",
    );
    fails(
        &["attention", "-m", "minilm", "a b", "--token", "zebra"],
        "--token 'zebra'",
    );
}

#[test]
fn bench_embed_runs() {
    let v = json(&[
        "bench",
        "embed",
        "--threads-list",
        "1",
        "--runs",
        "1",
        "--latency-samples",
        "2",
        "--json",
    ]);
    assert_eq!(v["sentences"], 256);
    assert!(v["threads"][0]["sentences_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_input_is_a_clear_error() {
    fails(&["embed"], "no input texts");
    fails(
        &["embed", "-m", "/nonexistent/model", "x"],
        "/nonexistent/model",
    );
    let src = model_dir();
    let tmp = std::env::temp_dir().join(format!("lucent-cli-minilm-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).unwrap();
    }
    std::fs::write(
        tmp.join("model.safetensors"),
        b"\xff\xff\xff\xff\x00\x00\x00\x00garbage",
    )
    .unwrap();
    let dir = tmp.to_str().unwrap();
    fails(&["embed", "-m", dir, "x"], "not a safetensors file");
    let cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(tmp.join("config.json"), cfg.replace("\"gelu\"", "\"mish\"")).unwrap();
    fails(&["embed", "-m", dir, "x"], "hidden_act 'mish'");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `embed --file F --out X.npy` and `--out X.jsonl` write the same vectors `--json`
/// prints; a wrong extension and an input with no text are errors naming the problem.
#[test]
fn embed_out_writes_npy_and_jsonl() {
    let dir = std::env::temp_dir().join(format!("lucent-embed-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.txt");
    std::fs::write(
        &input,
        "The cat sat on the mat.\n\nA dog slept on the rug.\nStocks fell.\n",
    )
    .unwrap();
    let inp = input.to_str().unwrap();
    let printed = json(&["embed", "--file", inp, "--json"]);
    let printed = printed["embeddings"].as_array().unwrap();
    let npy = dir.join("e.npy");
    let summary = json(&[
        "embed",
        "--file",
        inp,
        "--out",
        npy.to_str().unwrap(),
        "--json",
        "--batch",
        "2",
    ]);
    assert_eq!(summary["texts"], 3);
    let (rows, dim, values) = lucent::io::npy::read_f32(&npy).unwrap();
    assert_eq!((rows, dim), (3, 384));
    let jsonl = dir.join("e.jsonl");
    json(&[
        "embed",
        "--file",
        inp,
        "--out",
        jsonl.to_str().unwrap(),
        "--json",
    ]);
    let lines: Vec<Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["text"], "A dog slept on the rug.");
    for r in 0..3 {
        let want: Vec<f32> = printed[r]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let from_jsonl: Vec<f32> = lines[r]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        for i in 0..384 {
            assert!((values[r * 384 + i] - want[i]).abs() <= 1e-6, "row {r}");
            assert_eq!(from_jsonl[i], want[i], "row {r}");
        }
    }
    fails(
        &[
            "embed",
            "--file",
            inp,
            "--out",
            dir.join("e.csv").to_str().unwrap(),
        ],
        ".npy",
    );
    let blank = dir.join("blank.txt");
    std::fs::write(&blank, "\n  \n").unwrap();
    fails(
        &[
            "embed",
            "--file",
            blank.to_str().unwrap(),
            "--out",
            npy.to_str().unwrap(),
        ],
        "no input texts",
    );
    std::fs::remove_dir_all(&dir).ok();
}
