//! Interventions held to PyTorch forward hooks, without torch in the suite.
//!
//! tests/data/interventions_reference.json was made once by
//! scripts/interventions_reference.py: it exported the committed character-level run
//! (tests/data/runs/tiny-char, a GPT trained by `lucent train lm`) with `lucent export
//! hf`, loaded the folder with `transformers.GPT2LMHeadModel` and, for each case, did
//! the case's interventions with `register_forward_pre_hook` / `register_forward_hook`
//! (a head's slice of the input of `attn.c_proj` for `hook_z`, a column of the input of
//! `mlp.c_proj` for `mlp.hook_post`, a block's input and output for `hook_resid_pre` and
//! `hook_resid_post`) and recorded every position's logits. The cases: zero- and
//! mean-ablation of heads, activation patching of `hook_resid_pre` from another prompt
//! at chosen positions and at all, residual steering with a seeded random vector at all
//! and at chosen positions, a head's output scaled, an FFN unit zeroed, and four of
//! these composed. Each case carries its interventions as lucent's JSON values.
//!
//! Here the same JSON goes through `Model::intervene` on the run itself and on the
//! exported folder read back through the `gpt2` family; every logit must be PyTorch's
//! within 1e-5 (the figure), and every case must move the logits far more than
//! that (a case that changes nothing would prove nothing).

use std::path::{Path, PathBuf};

use lucent::pipeline::export::export_hf;
use lucent::{Intervention, Model};
use serde_json::Value;
use sha2::{Digest, Sha256};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The bound on |lucent − PyTorch| for every logit.
const TOLERANCE: f32 = 1e-5;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

fn reference() -> Result<Value, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(data().join("interventions_reference.json"))?;
    Ok(serde_json::from_str(&text)?)
}

/// A case's logits, row by row: (t, V) flattened.
fn logits_of(case: &Value) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    Ok(case["logits"]
        .as_array()
        .ok_or("logits")?
        .iter()
        .flat_map(|row| row.as_array().into_iter().flatten())
        .map(|x| {
            x.as_f64()
                .map(|v| v as f32)
                .ok_or("a logit is not a number")
        })
        .collect::<Result<_, _>>()?)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "logit count");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Every case through `model`; returns the largest |Δ| over the cases.
fn check_model(what: &str, model: &Model, all: &Value) -> Result<f32, Box<dyn std::error::Error>> {
    let prompt = all["prompt"].as_str().ok_or("prompt")?;
    let ids: Vec<u32> = all["ids"]
        .as_array()
        .ok_or("ids")?
        .iter()
        .map(|v| v.as_u64().map(|i| i as u32).ok_or("id"))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        model.text_model()?.encode(prompt)?,
        ids,
        "{what}: the prompt's ids"
    );
    let cases = all["cases"].as_array().ok_or("cases")?;
    let plain = model.intervene(&[])?.logits(prompt)?;
    let plain_diff = max_diff(plain.data(), &logits_of(&cases[0])?);
    println!("{what}: plain run vs PyTorch: max |Δ| = {plain_diff:e}");
    let mut worst = 0.0f32;
    for case in cases {
        let name = case["name"].as_str().ok_or("name")?;
        let ivs = Intervention::parse_json(&case["interventions"].to_string())?;
        let got = model.intervene(&ivs)?.logits(prompt)?; // (t, V)
        let d = max_diff(got.data(), &logits_of(case)?);
        println!("{what}: {name}: max |Δ| vs PyTorch's hooks = {d:e}");
        assert!(
            d <= TOLERANCE,
            "{what}: {name}: lucent vs PyTorch's hooks: max |Δlogit| = {d:e} > {TOLERANCE:e}"
        );
        if !ivs.is_empty() {
            let moved = max_diff(got.data(), plain.data());
            assert!(
                moved > 1000.0 * TOLERANCE,
                "{what}: {name} moves the logits by only {moved:e}: it would prove nothing"
            );
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

#[test]
fn interventions_equal_pytorch_forward_hooks() -> TestResult {
    let all = reference()?;
    let run_name = all["run"].as_str().ok_or("run")?;
    let run = data().join("runs").join(run_name);
    let out = std::env::temp_dir().join(format!("lucent-iv-torch-{}", std::process::id()));
    export_hf(&run, &out)?;
    // The same bytes as the export PyTorch read: its logits are PyTorch's for this one.
    for (file, sha) in all["files"].as_object().ok_or("files")? {
        let bytes = std::fs::read(out.join(file))?;
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            Some(got.as_str()),
            sha.as_str(),
            "{file} differs from the export the reference was made with"
        );
    }
    let trained = lucent::open(run.to_str().ok_or("path")?)?;
    let exported = lucent::open(out.to_str().ok_or("path")?)?;
    assert_eq!(exported.config().family, "gpt2");
    let a = check_model("the run", &trained, &all)?;
    let b = check_model("the export", &exported, &all)?;
    println!("worst over every case: {:e}", a.max(b));
    std::fs::remove_dir_all(&out)?;
    Ok(())
}

/// Direct logit attribution (`Model::logit_attribution`) against the same terms taken
/// from PyTorch's forward hooks (the script's `logit_attribution`: the final norm's
/// scale cached from the run, each head's slice of `attn.c_proj`'s input times its rows
/// of the weight, each `mlp`'s output, the embeddings), on the run and on its export:
/// every term within 1e-5. The engine's logit is PyTorch's, and equals the terms' logit
/// plus the final LayerNorm's bias term β · W_U[target], which no term holds.
#[test]
fn logit_attribution_equals_pytorch_hooks() -> TestResult {
    let all = reference()?;
    let r = &all["attribution"];
    let prompt = all["prompt"].as_str().ok_or("prompt")?;
    let target = r["target_id"].as_u64().ok_or("target_id")? as u32;
    let num = |v: &Value| v.as_f64().ok_or("a number");
    let run = data().join("runs").join(all["run"].as_str().ok_or("run")?);
    let out = std::env::temp_dir().join(format!("lucent-iv-dla-{}", std::process::id()));
    export_hf(&run, &out)?;
    for path in [&run, &out] {
        let model = lucent::open(path.to_str().ok_or("path")?)?;
        let a = model.logit_attribution(prompt, target)?;
        let mut pairs: Vec<(String, f64, f64)> = vec![
            ("logit".into(), a.logit as f64, num(&r["logit"])?),
            ("logit_f32".into(), a.logit_f32, num(&r["logit_f32"])?),
            ("scale".into(), a.scale, num(&r["scale"])?),
            ("embed".into(), a.embed, num(&r["embed"])?),
            ("rest".into(), a.rest, num(&r["rest"])?),
        ];
        for (l, row) in a.heads.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                pairs.push((format!("head {l}.{h}"), v, num(&r["heads"][l][h])?));
            }
            pairs.push((format!("mlp {l}"), a.mlp[l], num(&r["mlp"][l])?));
            pairs.push((
                format!("attn_rest {l}"),
                a.attn_rest[l],
                num(&r["attn_rest"][l])?,
            ));
        }
        assert_eq!(pairs.len(), 5 + 2 * 4 + 2 * 2, "2 layers of 4 heads");
        let worst = pairs
            .iter()
            .map(|(_, x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        println!(
            "{}: attribution vs PyTorch: max |Δ| = {worst:e}",
            path.display()
        );
        for (name, got, want) in &pairs {
            assert!(
                (got - want).abs() <= TOLERANCE as f64,
                "{name}: lucent {got} vs PyTorch {want}"
            );
        }
        let bias = num(&r["final_norm_bias_term"])?;
        assert!((a.logit as f64 - (a.logit_f32 + bias)).abs() <= TOLERANCE as f64);
    }
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
