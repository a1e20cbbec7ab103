//! Which of a decoder's product groups int8 harms: SmolLM2 and Gemma 3 in exact, bf16,
//! int8 everywhere, and int8 with one group at a time left exact, each measured by the
//! share of greedy 32-token continuations equal to exact's on
//! tests/data/decoder_precision_prompts.txt and the perplexity on the first 8,000
//! characters of moby-dick in windows of 128 (the measurement behind
//! `DecoderProducts::plan`, docs/precision.md). Then, for SmolLM2, one batched decode
//! step of 8 rows timed in exact and in int8, interleaved, medians of 15 (an indication
//! only: `scripts/bench-serve-peer.sh` measures the server).
//!
//! `cargo run --release -p lucent --example decoder_precision_probe`
//!
//! `MODELS` (a space-separated list) chooses the models; `GROUPS=0` skips the
//! one-group-exact configurations; `STEP=0` skips the timing.
use std::time::Instant;

use lucent::model::DecoderProducts;
use lucent::pipeline::generate::TextModel;
use lucent::pipeline::precision::{prompt_lines, DistanceSpec};
use lucent::{OpenOptions, Precision, Result};

const PROMPTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/decoder_precision_prompts.txt"
);

fn text_model(name: &str, p: Precision) -> Result<TextModel> {
    Ok((*OpenOptions::new().precision(p).open(name)?.text_model()?).clone())
}

fn main() -> Result<()> {
    let prompts =
        prompt_lines(&std::fs::read_to_string(PROMPTS).map_err(|e| lucent::Error::io(PROMPTS, e))?);
    let corpus = lucent::io::corpus::resolve_corpus("moby-dick", &mut lucent::io::fetch::Silent)?;
    let text: String = std::fs::read_to_string(&corpus)
        .map_err(|e| lucent::Error::io(&corpus, e))?
        .chars()
        .take(8000)
        .collect();
    let spec = DistanceSpec {
        prompts: &prompts,
        new_tokens: 32,
        text: &text,
        ctx: 128,
        chunks: None,
    };
    let models = std::env::var("MODELS").unwrap_or_else(|_| "smollm2 gemma3".into());
    for name in models.split_whitespace() {
        let exact = text_model(name, Precision::Exact)?;
        let base = spec.run(&exact)?;
        println!(
            "{name}: exact perplexity {:.4} ({} prompts)",
            base.ppl,
            prompts.len()
        );
        let mut configs: Vec<(String, TextModel)> = vec![
            ("bf16".into(), text_model(name, Precision::Bf16)?),
            ("int8".into(), text_model(name, Precision::Int8)?),
        ];
        let groups = std::env::var("GROUPS").as_deref() != Ok("0");
        for g in DecoderProducts::ALL.into_iter().filter(|_| groups) {
            let mut m = text_model(name, Precision::Int8)?;
            m.model.set_products(g, Precision::Exact);
            configs.push((format!("int8, {} exact", g.name()), m));
        }
        for (label, m) in &configs {
            let d = spec.distance(m, &base)?;
            println!(
                "  {label:<22} continuations = exact {:>2}/{} ({:>5.1} %)  perplexity {:.4} ({:+.3} %)",
                d.equal,
                d.prompts,
                100.0 * d.equal_share(),
                d.ppl,
                100.0 * d.ppl_change()
            );
        }
    }
    if std::env::var("STEP").as_deref() != Ok("0") {
        step_ratio()?;
    }
    Ok(())
}

/// One decode step of 8 rows (each sequence 64 tokens in), exact and int8 interleaved.
fn step_ratio() -> Result<()> {
    let exact = text_model("smollm2", Precision::Exact)?;
    let int8 = text_model("smollm2", Precision::Int8)?;
    let prompt: Vec<u32> = (0..64u32).map(|i| 100 + 7 * i).collect();
    let caches = |m: &TextModel| -> Result<Vec<lucent::nn::KvCache>> {
        (0..8)
            .map(|_| {
                let mut c = m.model.new_cache(4096);
                m.model.forward(&prompt, Some(&mut c), true, None)?;
                Ok(c)
            })
            .collect()
    };
    let (mut ce, mut ci) = (caches(&exact)?, caches(&int8)?);
    let ids = [300u32, 301, 302, 303, 304, 305, 306, 307];
    let step = |m: &TextModel, cs: &mut Vec<lucent::nn::KvCache>| -> Result<f64> {
        let mut refs: Vec<&mut lucent::nn::KvCache> = cs.iter_mut().collect();
        let t = Instant::now();
        m.model.decode_batch(&ids, &mut refs, &mut [])?;
        let s = t.elapsed().as_secs_f64();
        for c in cs.iter_mut() {
            c.truncate(64);
        }
        Ok(s)
    };
    let (mut te, mut ti) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        te.push(step(&exact, &mut ce)?);
        ti.push(step(&int8, &mut ci)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (me, mi) = (median(&mut te), median(&mut ti));
    println!(
        "smollm2 decode step of 8 rows: exact {:.2} ms, int8 {:.2} ms, int8 / exact speed {:.2}x ({} threads)",
        me * 1e3,
        mi * 1e3,
        me / mi,
        lucent::threads()
    );
    Ok(())
}
