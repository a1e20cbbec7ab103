//! How far a decoder's int8 lands from exact, and which rounding puts it there: SmolLM2
//! and Gemma 3 in several arithmetics, each measured by the share of greedy 32-token
//! continuations equal to exact's on tests/data/decoder_precision_prompts.txt and the
//! perplexity on the first `CHARS` (8,000) characters of moby-dick in windows of 128
//! (docs/precision.md). Then, for SmolLM2, one batched decode step of 8 rows timed in
//! exact, block-integer int8, per-row int8 and grouped int8, interleaved, medians of 15 (an indication
//! only: `scripts/bench-serve-peer.sh` measures the server).
//!
//! `cargo run --release -p lucent --example decoder_precision_probe`
//!
//! `MODELS` (a space-separated list) chooses the models; `CONFIGS` the arithmetics
//! (default `int8-blocks int8`):
//! - `int8-blocks`: the blocks' own integers, llama.cpp's activation integers, one f32
//!   rescale per block (`Linear::keep_int8_blocks`);
//! - `int8`: the decoders' int8 (`Precision::Int8`): every weight dequantised and
//!   quantised per output row, activations in groups of `INT8_GROUP` (64)
//!   (`Linear::keep_int8_groups`);
//! - `int8-rows`: the same weights, activations per row (`Linear::keep_int8`, the
//!   decoders' int8 before groups);
//! - `int8-groups`: the per-row int8 weights, activations quantised in groups of
//!   `G` (env, default 64) consecutive inputs, each its own scale
//!   (`Linear::keep_int8_groups`); `int8-g32`, `int8-g64`, ... name G directly;
//! - `w-rows`: only the weights rounded per output row (dequantised, quantised per row,
//!   widened back), activations f32, an f32 product;
//! - `x-rows`: the weights dequantised to f32 as they are, only the activations rounded
//!   per row to 8 bits and back (`Linear::round_inputs_per_row`);
//! - `f32`: the weights dequantised, nothing rounded: f32 arithmetic without llama.cpp's
//!   activation blocks;
//! - `bf16`: `Precision::Bf16`.
//!
//! `GROUPS=1` adds int8 with one group at a time left exact; `STEP=0` skips
//! the timing.
use std::time::Instant;

use lucent::model::DecoderProducts;
use lucent::nn::{Linear, Weight};
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
        .take(
            std::env::var("CHARS")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(8000),
        )
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
        let wanted = std::env::var("CONFIGS").unwrap_or_else(|_| "int8-blocks int8".into());
        let mut configs: Vec<(String, TextModel)> = Vec::new();
        for c in wanted.split_whitespace() {
            let m = match c {
                "int8" => text_model(name, Precision::Int8)?,
                "bf16" => text_model(name, Precision::Bf16)?,
                c if c == "int8-groups" || c.starts_with("int8-g") => {
                    let g = match c.strip_prefix("int8-g").and_then(|g| g.parse().ok()) {
                        Some(g) => g,
                        None => std::env::var("G")
                            .ok()
                            .and_then(|g| g.parse().ok())
                            .unwrap_or(64),
                    };
                    let mut bad = None;
                    let m = changed(name, &mut |l| {
                        l.forget_copies();
                        if let Err(e) = l.keep_int8_groups(g) {
                            bad = Some(e);
                        }
                    })?;
                    if let Some(e) = bad {
                        return Err(e);
                    }
                    m
                }
                "int8-blocks" => changed(name, &mut |l| {
                    l.forget_copies();
                    l.keep_int8_blocks();
                })?,
                "int8-rows" => changed(name, &mut |l| {
                    l.forget_copies();
                    l.keep_int8();
                })?,
                "w-rows" => changed(name, &mut |l| {
                    if let Ok(w) = l.weight.to_f32() {
                        l.forget_copies();
                        l.weight = Weight::F32(rows_rounded(w));
                    }
                })?,
                "x-rows" => changed(name, &mut |l| {
                    if let Ok(w) = l.weight.to_f32() {
                        l.forget_copies();
                        l.weight = Weight::F32(w);
                        l.round_inputs_per_row(true);
                    }
                })?,
                "f32" => changed(name, &mut |l| {
                    if let Ok(w) = l.weight.to_f32() {
                        l.forget_copies();
                        l.weight = Weight::F32(w);
                    }
                })?,
                other => {
                    return Err(lucent::Error::Argument(format!(
                        "CONFIGS: unknown arithmetic {other:?} (int8-blocks, int8, int8-rows, int8-groups, int8-gG, w-rows, x-rows, f32, bf16)"
                    )))
                }
            };
            configs.push((c.to_string(), m));
        }
        let groups = std::env::var("GROUPS").as_deref() == Ok("1");
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

/// The exact model with `f` applied to every product (Q, K, V, O, the feed-forward's,
/// the head on its own copy of a tied table).
fn changed(name: &str, f: &mut dyn FnMut(&mut Linear)) -> Result<TextModel> {
    let mut m = text_model(name, Precision::Exact)?;
    for g in DecoderProducts::ALL {
        m.model.map_products(g, true, f);
    }
    Ok(m)
}

/// W (out, in) with each row rounded to 8 bits and back: one symmetric scale per row,
/// `max |w| / 127`, ties to even (the per-row int8 weights, widened).
fn rows_rounded(w: lucent::Tensor) -> lucent::Tensor {
    let k = *w.shape().last().unwrap_or(&1);
    let mut v = w.data().to_vec();
    for row in v.chunks_exact_mut(k.max(1)) {
        let amax = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let s = amax / 127.0;
        let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        for x in row.iter_mut() {
            *x = s * (*x * id).round_ties_even().clamp(-127.0, 127.0);
        }
    }
    lucent::Tensor::new(v, w.shape()).unwrap_or(w)
}

/// One decode step of 8 rows (each sequence 64 tokens in): exact, block-integer int8,
/// per-row int8 and grouped int8 for each G of `STEP_GROUPS` (default "32 64 128 256"),
/// interleaved.
fn step_ratio() -> Result<()> {
    let mut models: Vec<(String, TextModel)> = vec![
        ("exact".into(), text_model("smollm2", Precision::Exact)?),
        (
            "int8 (blocks)".into(),
            changed("smollm2", &mut |l| {
                l.forget_copies();
                l.keep_int8_blocks();
            })?,
        ),
        (
            "int8 (rows)".into(),
            text_model("smollm2", Precision::Int8)?,
        ),
    ];
    let groups = std::env::var("STEP_GROUPS").unwrap_or_else(|_| "32 64 128 256".into());
    for g in groups
        .split_whitespace()
        .filter_map(|g| g.parse::<usize>().ok())
    {
        let m = changed("smollm2", &mut |l| {
            l.forget_copies();
            let _ = l.keep_int8_groups(g);
        })?;
        models.push((format!("int8 (G {g})"), m));
    }
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
    let mut cs = models
        .iter()
        .map(|(_, m)| caches(m))
        .collect::<Result<Vec<_>>>()?;
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
    let mut times = vec![Vec::new(); models.len()];
    for _ in 0..15 {
        for ((_, m), (c, t)) in models.iter().zip(cs.iter_mut().zip(&mut times)) {
            t.push(step(m, c)?);
        }
    }
    let medians: Vec<f64> = times
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    println!(
        "smollm2 decode step of 8 rows ({} threads), medians of 15, interleaved:",
        lucent::threads()
    );
    for ((label, _), t) in models.iter().zip(&medians) {
        println!(
            "  {label:<14} {:.2} ms = {:.2}x exact's speed, {:.2}x per-row int8's",
            t * 1e3,
            medians[0] / t,
            medians[2] / t
        );
    }
    Ok(())
}
