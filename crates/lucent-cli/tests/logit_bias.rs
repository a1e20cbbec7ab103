//! `--logit-bias ID=BIAS` (OpenAI's `logit_bias` on the command line): -100 bans a token,
//! +100 forces it, as the sampler's first link; bad values are refused in one line.

use std::process::Command;

use serde_json::Value;

fn generate(extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "generate",
        "--raw",
        "--temperature",
        "0",
        "-n",
        "3",
        "--json",
        "The capital of France is",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(&args)
        .output()
        .unwrap();
    let j = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        j,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn minus_100_bans_and_plus_100_forces() {
    let (code, plain, err) = generate(&[]);
    assert_eq!(code, 0, "{err}");
    let paris = plain["ids"][0].as_u64().unwrap(); // " Paris"
    assert!(plain["text"].as_str().unwrap().starts_with(" Paris"));
    let ban = format!("{paris}=-100");
    let (code, banned, err) = generate(&["--logit-bias", &ban]);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<u64> = banned["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(!ids.contains(&paris), "{ids:?}");
    // +100 on " the" (from the plain text's vocabulary: id 260) forces it every step.
    let (code, forced, err) = generate(&["--logit-bias", "260=100"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(forced["ids"], serde_json::json!([260, 260, 260]));
    for bad in ["260=101", "x=1", "260", "99999999=1"] {
        let (code, _, err) = generate(&["--logit-bias", bad]);
        assert_ne!(code, 0, "--logit-bias {bad} accepted");
        assert!(
            err.contains("logit") || err.contains("bias") || err.contains("token"),
            "{err}"
        );
    }
}
