//! Which of Whisper's product groups int8 harms: the suite's clips (tests/data/whisper)
//! decoded greedily (no timestamps) in exact, in bf16, in int8 everywhere, and with one
//! group of products at a time in int8 (the rest exact), for whisper-tiny.en and
//! whisper-base. For each: on how many clips the ids equal exact's, and the word error
//! rate against the spoken text (clips.json). The measurement behind
//! `Products::plan` (docs/precision.md):
//!
//! `cargo run --release -p lucent --example whisper_precision_probe [GROUPS ...]`
//!
//! Each argument, a comma-separated list of group names (`encoder.qk,head`), adds a
//! configuration: int8 with those groups in bf16 (a candidate plan). `MODELS` (a
//! space-separated list) chooses the models.
use lucent::io::mel::first_window;
use lucent::io::SafetensorsFile;
use lucent::model::Products;
use lucent::pipeline::transcribe::{DecodeOptions, Transcriber};
use lucent::pipeline::wer::word_error_rate;
use lucent::{Precision, Result, Tensor};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/whisper");

/// A named way to set a model's products up before a run.
type Setup = Box<dyn Fn(&mut Transcriber)>;

/// (clip key, spoken text, first 30-s window of its log-mel) for every clip.
fn clips() -> Result<Vec<(String, String, Tensor)>> {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{DATA}/clips.json"))
            .map_err(|e| lucent::Error::io(format!("{DATA}/clips.json"), e))?,
    )
    .map_err(|e| lucent::Error::Argument(format!("clips.json: {e}")))?;
    let mels = SafetensorsFile::open(format!("{DATA}/mel_reference.safetensors"))?;
    let mut out = Vec::new();
    for c in meta["clips"].as_array().into_iter().flatten() {
        let file = c["file"].as_str().unwrap_or_default();
        let key = file
            .trim_start_matches("clips/")
            .trim_end_matches(".wav")
            .to_string();
        let text = c["text"].as_str().unwrap_or_default().to_string();
        let mel = mels.tensor(&format!("{key}/mel80"))?;
        out.push((key, text, first_window(&mel)?));
    }
    Ok(out)
}

/// Greedy ids and text of every clip.
fn transcribe(
    t: &Transcriber,
    clips: &[(String, String, Tensor)],
) -> Result<Vec<(Vec<u32>, String)>> {
    let prompt = t.prompt(Some("en"), Default::default(), false)?;
    let opts = DecodeOptions {
        timestamps: false,
        ..DecodeOptions::default()
    };
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
    clips
        .iter()
        .map(|(_, _, window)| {
            let memory = t.encode(window)?;
            let r = t.decode_window(&memory, &prompt, &opts, &mut rng)?;
            Ok((r.tokens, r.text))
        })
        .collect()
}

fn main() -> Result<()> {
    let clips = clips()?;
    let plans: Vec<Vec<Products>> = std::env::args()
        .skip(1)
        .map(|a| {
            a.split(',')
                .map(|n| {
                    Products::ALL
                        .into_iter()
                        .find(|g| g.name() == n.trim())
                        .ok_or_else(|| {
                            lucent::Error::Argument(format!("{n}: not a group of products"))
                        })
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let models = std::env::var("MODELS").unwrap_or("whisper-tiny.en whisper-base".into());
    for name in models.split_whitespace() {
        let mut t = Transcriber::open(name)?;
        let exact = transcribe(&t, &clips)?;
        let mut configs: Vec<(String, Setup)> = vec![
            (
                "exact".into(),
                Box::new(|t| t.set_precision(Precision::Exact)),
            ),
            (
                "bf16".into(),
                Box::new(|t| t.set_precision(Precision::Bf16)),
            ),
            (
                "int8 everywhere".into(),
                Box::new(|t| {
                    t.set_precision(Precision::Exact);
                    for g in Products::ALL {
                        t.model.set_products(g, Precision::Int8);
                    }
                }),
            ),
            (
                "int8 (plan)".into(),
                Box::new(|t| t.set_precision(Precision::Int8)),
            ),
        ];
        for plan in &plans {
            let plan = plan.clone();
            let names: Vec<&str> = plan.iter().map(|g| g.name()).collect();
            configs.push((
                format!("int8, bf16: {}", names.join(",")),
                Box::new(move |t| {
                    t.set_precision(Precision::Exact);
                    for g in Products::ALL {
                        let p = if plan.contains(&g) {
                            Precision::Bf16
                        } else {
                            Precision::Int8
                        };
                        t.model.set_products(g, p);
                    }
                }),
            ));
        }
        // With candidate plans given, only those (beside exact, bf16 and the plan).
        for g in Products::ALL.into_iter().filter(|_| plans.is_empty()) {
            configs.push((
                format!("int8 {} only", g.name()),
                Box::new(move |t| {
                    t.set_precision(Precision::Exact);
                    t.model.set_products(g, Precision::Int8);
                }),
            ));
        }
        for (label, set) in &configs {
            set(&mut t);
            let got = transcribe(&t, &clips)?;
            let equal = got.iter().zip(&exact).filter(|(a, b)| a.0 == b.0).count();
            let wer = word_error_rate(
                clips
                    .iter()
                    .zip(&got)
                    .map(|((_, text, _), (_, hyp))| (text.as_str(), hyp.as_str())),
            );
            for ((key, _, _), ((a, ta), (b, _))) in clips.iter().zip(got.iter().zip(&exact)) {
                if a != b {
                    eprintln!("{name} {label} clip {key}: {ta:?}");
                }
            }
            println!(
                "{name:16} {label:40} ids = exact on {equal:2} of {} clips, WER {:.2}%",
                clips.len(),
                100.0 * wer
            );
        }
    }
    Ok(())
}
