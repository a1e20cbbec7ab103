//! `lucent ablate`, `patch` and `steer` on SmolLM2: their numbers are the library's
//! (`Model::intervene` computed here independently of the CLI's code path), a patch at
//! the position that differs restores the clean run exactly at layer 0, and bad input
//! is refused in one line naming the flag.

use std::process::Command;

use lucent::Intervention;
use serde_json::Value;

fn lucent(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(args)
        .output()
        .unwrap();
    let j = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        j,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// ln softmax(logits)[id] in f64, as the CLI computes it.
fn log_prob(logits: &[f32], id: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[id] as f64 - max - sum.ln()
}

/// Equal but for JSON: serde_json's default float parser may miss an f64 by an ulp.
fn assert_json_f64(what: &str, got: &Value, want: f64) {
    let got = got.as_f64().unwrap_or(f64::NAN);
    assert!(
        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
        "{what}: {got} vs {want}"
    );
}

#[test]
fn ablate_reports_the_library_numbers() {
    let text = "The Eiffel Tower is in";
    let (code, j, err) = lucent(&[
        "ablate", text, "--target", " Paris", "--heads", "0.3,5.1", "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let model = lucent::open("smollm2").unwrap();
    let id = j["target_id"].as_u64().unwrap() as usize;
    let plain = model
        .intervene(&[])
        .unwrap()
        .next_token_logits(text)
        .unwrap();
    assert_json_f64("plain_logprob", &j["plain_logprob"], log_prob(&plain, id));
    let ivs = [
        Intervention::zero("blocks.0.attn.hook_z").head(3),
        Intervention::zero("blocks.5.attn.hook_z").head(1),
    ];
    let ablated = model
        .intervene(&ivs)
        .unwrap()
        .next_token_logits(text)
        .unwrap();
    let r = &j["results"][0];
    assert_json_f64("logprob", &r["logprob"], log_prob(&ablated, id));
    assert_json_f64(
        "delta",
        &r["delta"],
        log_prob(&ablated, id) - log_prob(&plain, id),
    );
    assert_eq!(r["heads"], serde_json::json!([[0, 3], [5, 1]]));
    assert_eq!(j["target"], " Paris");
}

#[test]
fn patch_layer_zero_at_the_differing_position_restores_the_clean_run() {
    let (code, j, err) = lucent(&[
        "patch",
        "--clean",
        "The capital of France is",
        "--corrupt",
        "The capital of Spain is",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let tokens: Vec<&str> = j["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let p = tokens.iter().position(|t| *t == " France").unwrap();
    // Layer 0's resid_pre is the embeddings: patching the one token that differs makes
    // the corrupted run the clean one, so log p equals the clean run's to the bit.
    assert_eq!(j["logprob"][0][p].as_f64(), j["clean_logprob"].as_f64());
    assert_eq!(j["restored"][0][p].as_f64(), Some(1.0));
    // The positions before it change nothing (causal attention).
    for q in 0..p {
        assert_eq!(j["logprob"][0][q].as_f64(), j["corrupt_logprob"].as_f64());
    }
    assert_eq!(j["restored"].as_array().unwrap().len(), 30);
}

#[test]
fn bad_input_is_refused_naming_the_flag() {
    let (code, _, err) = lucent(&["ablate", "The Eiffel Tower is in", "--heads", "30.0"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--heads 30.0") && err.lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = lucent(&[
        "ablate",
        "The Eiffel Tower is in",
        "--target",
        " Eiffel Tower",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--target") && err.contains("tokens"), "{err}");
    let (code, _, err) = lucent(&[
        "patch",
        "--clean",
        "Paris is in",
        "--corrupt",
        "The city of Rome is in",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("same number of tokens"), "{err}");
    let (code, _, err) = lucent(&["steer", "You are", "--layer", "40", "--from", "a|b"]);
    assert_ne!(code, 0);
    assert!(err.contains("layer 40 is out of range"), "{err}");
    let (code, _, err) = lucent(&["steer", "You are", "--layer", "3", "--from", "no bar"]);
    assert_ne!(code, 0);
    assert!(err.contains("--from") && err.contains("A|B"), "{err}");
}

#[test]
fn a_sweep_cell_equals_the_single_ablation() {
    let text = "The Eiffel Tower is in";
    let (code, sweep, err) = lucent(&[
        "ablate", text, "--target", " Paris", "--sweep", "--layers", "5-5", "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, one, err) = lucent(&[
        "ablate", text, "--target", " Paris", "--heads", "5.1", "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let cell = &sweep["results"][1];
    assert_eq!(cell["heads"], serde_json::json!([[5, 1]]));
    assert_eq!(cell["delta"], one["results"][0]["delta"]);
    assert_eq!(cell["logprob"], one["results"][0]["logprob"]);
}

/// Direct logit attribution: its terms add up to the target's logit from the final
/// residual stream (`logit_f32`): every term is a linear map of part of that residual
/// with the cached scale, computed in f64, so the identity holds to f64 rounding (a
/// relative 1e-9 of the terms' magnitudes bounds it for a few hundred terms); the
/// engine's own logit (`logit`) is the library's to the bit.
#[test]
fn attribution_terms_add_up_to_the_logit() {
    let text = "The Eiffel Tower is in";
    let (code, j, err) = lucent(&["attribute", text, "--target", " Paris", "--json"]);
    assert_eq!(code, 0, "{err}");
    let f = |v: &Value| v.as_f64().unwrap();
    let heads: Vec<f64> = j["heads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(f))
        .collect();
    assert_eq!(heads.len(), 30 * 9);
    let mlp: Vec<f64> = j["mlp"].as_array().unwrap().iter().map(f).collect();
    let attn_rest: Vec<f64> = j["attn_rest"].as_array().unwrap().iter().map(f).collect();
    let terms: Vec<f64> = heads
        .iter()
        .chain(&mlp)
        .chain(&attn_rest)
        .copied()
        .chain([f(&j["embed"]), f(&j["rest"])])
        .collect();
    let sum: f64 = terms.iter().sum();
    let size: f64 = terms.iter().map(|t| t.abs()).sum();
    let logit_f32 = f(&j["logit_f32"]);
    assert!(
        (sum - logit_f32).abs() <= 1e-9 * size,
        "terms add to {sum}, the logit from the residual is {logit_f32}"
    );
    let model = lucent::open("smollm2").unwrap();
    let logits = model
        .intervene(&[])
        .unwrap()
        .next_token_logits(text)
        .unwrap();
    let id = j["target_id"].as_u64().unwrap() as usize;
    assert_eq!(j["logit"].as_f64().unwrap() as f32, logits[id]);
    // For the record: how far the engine's quantised head and the rounding terms are.
    let rest: f64 = attn_rest.iter().sum::<f64>() + f(&j["rest"]);
    println!(
        "logit {} (engine) vs {logit_f32} (f32 residual); rest {rest}",
        logits[id]
    );
}
