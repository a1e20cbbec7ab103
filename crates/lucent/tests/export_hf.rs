//! `lucent export hf` held to PyTorch without torch in the suite.
//!
//! tests/data/gpt2_export_reference.json was made once by
//! scripts/gpt2_export_reference.py: it exported the committed runs (tests/data/runs/
//! tiny-char and tiny-bpe) with lucent, loaded each folder with
//! `transformers.GPT2LMHeadModel.from_pretrained` and recorded the logits of a prompt and
//! the sha256 of every exported file. Here:
//!
//! 1. the export is the same bytes (so those logits are PyTorch's for this export);
//! 2. lucent's logits of the run itself equal PyTorch's within 1e-4 (the figure);
//! 3. lucent reads the exported folder back (the `gpt2` family, through `lucent::open`)
//!    with the same tokenizer ids and logits equal to PyTorch's within 1e-4.

use std::path::{Path, PathBuf};

use lucent::pipeline::export::export_hf;
use lucent::train::TrainedModel;
use lucent::ModelKind;
use serde_json::Value;
use sha2::{Digest, Sha256};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

fn reference() -> Result<Value, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(data().join("gpt2_export_reference.json"))?;
    Ok(serde_json::from_str(&text)?)
}

fn max_diff(got: &[f32], want: &[Value]) -> Result<f32, Box<dyn std::error::Error>> {
    let want: Vec<f32> = want
        .iter()
        .flat_map(|row| row.as_array().into_iter().flatten())
        .map(|x| {
            x.as_f64()
                .map(|v| v as f32)
                .ok_or("a logit is not a number")
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(got.len(), want.len(), "logit count");
    Ok(got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max))
}

fn check_run(name: &str) -> TestResult {
    let all = reference()?;
    let r = &all["runs"][name];
    let run = data().join("runs").join(name);
    let out = std::env::temp_dir().join(format!("lucent-export-{name}-{}", std::process::id()));
    let e = export_hf(&run, &out)?;
    assert_eq!(e.tensors, 28, "2 layers × 12 + 4 global tensors");

    // 1. The same bytes as the export PyTorch read.
    for (file, sha) in r["files"].as_object().ok_or("files")? {
        let bytes = std::fs::read(out.join(file))?;
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            Some(got.as_str()),
            sha.as_str(),
            "{name}/{file} differs from the reference export"
        );
    }

    let ids: Vec<u32> = r["ids"]
        .as_array()
        .ok_or("ids")?
        .iter()
        .map(|v| v.as_u64().map(|i| i as u32).ok_or("id"))
        .collect::<Result<_, _>>()?;
    let want = r["logits"].as_array().ok_or("logits")?;

    // 2. The run itself.
    let TrainedModel::Lm { model, .. } = TrainedModel::load(&run)? else {
        return Err("expected a language model".into());
    };
    let logits = model.forward(&ids, None, false, None)?; // (t, V)
    let d = max_diff(logits.data(), want)?;
    assert!(d <= 1e-4, "{name}: lucent's run vs PyTorch: max |Δ| = {d}");

    // 3. The export read back as a Hugging Face GPT-2 folder.
    let m = lucent::open(out.to_str().ok_or("path")?)?;
    assert_eq!(m.kind(), ModelKind::Decoder);
    assert_eq!(m.config().family, "gpt2");
    let tm = m.text_model()?;
    let prompt = all["prompt"].as_str().ok_or("prompt")?;
    let mut encoded = tm.encode(prompt)?;
    encoded.truncate(ids.len());
    assert_eq!(encoded, ids, "{name}: the exported tokenizer's ids");
    let back = tm.model.forward(&ids, None, false, None)?;
    let d = max_diff(back.data(), want)?;
    assert!(
        d <= 1e-4,
        "{name}: lucent reading the export vs PyTorch: max |Δ| = {d}"
    );
    assert_eq!(
        back.data(),
        logits.data(),
        "{name}: the export computes what the run does"
    );

    std::fs::remove_dir_all(&out)?;
    Ok(())
}

#[test]
fn character_model_exports_to_pytorchs_logits() -> TestResult {
    check_run("tiny-char")
}

#[test]
fn bpe_model_exports_to_pytorchs_logits() -> TestResult {
    check_run("tiny-bpe")
}

#[test]
fn a_missing_run_is_named() -> TestResult {
    let err = export_hf(
        &data().join("no-such-run"),
        &std::env::temp_dir().join("lucent-x"),
    )
    .err()
    .ok_or("expected an error")?
    .to_string();
    assert!(err.contains("no-such-run"), "{err}");
    Ok(())
}
