//! `lucent bench generate -m MODEL`: prefill and decode speed of a decoder model, the
//! way `scripts/bench-generate-peer.sh` measures llama.cpp on the same file.
//!
//! Prefill: a prompt of `--prompt-tokens` ids (a fixed English text, tokenised and cut
//! to length; `--print-prompt-ids` prints them for the peer script) through the model
//! into an empty KV cache, up to the first logits. Decode: `--gen-tokens` greedy steps
//! after it (end-of-generation ignored). Each at every thread count of `--threads-list`,
//! after one untimed prefill and step (the weights' pages mapped in, the scale tables
//! built, as in the peer's later rounds), `--repeats` times; the median is reported in
//! tokens per second. Resident memory is
//! read from /proc at the end and compared with file + KV cache + 100 MB.
//!
//! Batched decode (`--batch-list 4,8,16`): B sequences, each after the same prefilled
//! prompt, take `--gen-tokens` steps together through
//! [`lucent::model::DecoderModel::decode_batch`] — the step `lucent serve` runs for B
//! concurrent streams — and the aggregate (B × steps / time) is reported beside the
//! lone stream's decode speed.

use std::time::Instant;

use lucent::pipeline::generate::argmax;
use lucent::{Error, Result};

use crate::commands::numbers::at_least;
use crate::loader;

/// The benchmark prompt (repeated as needed, then cut to the asked number of tokens).
pub const PROMPT_TEXT: &str = "The history of the printing press begins in the fifteenth century, when \
Johannes Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from those \
used for wine. Within fifty years, presses were working in more than two hundred cities across Europe, \
and the number of books in circulation grew from thousands to millions. Scholars could compare \
identical copies of a text, errors could be corrected in later editions, and ideas travelled faster \
than any courier. ";

/// Arguments of `lucent bench generate`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent bench generate -m smollm2 --threads-list 1,2\n  lucent bench generate -m smollm2 --threads-list 2 --batch-list 4,16 --gen-tokens 64 --json"
)]
pub struct GenerateBenchArgs {
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 128, value_parser = at_least::<1, usize>)]
    pub prompt_tokens: usize,
    /// Tokens to decode.
    #[arg(long, default_value_t = 128, value_parser = at_least::<0, usize>)]
    pub gen_tokens: usize,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least::<1, usize>)]
    pub threads_list: Vec<usize>,
    /// Batch sizes of the batched decode step to measure, comma-separated (B streams at
    /// once, as `lucent serve` runs them); default: none.
    #[arg(long, value_delimiter = ',', value_parser = at_least::<1, usize>)]
    pub batch_list: Vec<usize>,
    /// Runs per measurement (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least::<1, usize>)]
    pub repeats: usize,
    /// Print the prompt's token ids (comma-separated) and exit.
    #[arg(long)]
    pub print_prompt_ids: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Run `lucent bench generate`.
pub fn run(args: GenerateBenchArgs) -> Result<()> {
    if args.repeats == 0
        || args.prompt_tokens == 0
        || args.threads_list.is_empty()
        || args.batch_list.contains(&0)
    {
        return Err(Error::Argument(
            "--repeats, --prompt-tokens, --threads-list and --batch-list must be non-empty / > 0"
                .into(),
        ));
    }
    let tm = loader::text_model(&args.model)?;
    let mut ids = tm.encode("")?;
    while ids.len() < args.prompt_tokens {
        ids.extend(tm.tokenizer.encode_ids(PROMPT_TEXT, false, true)?);
    }
    ids.truncate(args.prompt_tokens);
    if args.print_prompt_ids {
        let s: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("{}", s.join(","));
        return Ok(());
    }
    let max_t = ids.len() + args.gen_tokens + 1;
    let mut cache = tm.model.new_cache(max_t);
    let mut rows = Vec::new();
    let mut batched = Vec::new();
    for &n in &args.threads_list {
        let rt = lucent::Runtime::builder().threads(n).build()?;
        // One untimed pass first, as the peer's rounds reuse one loaded model: the
        // weights' pages mapped in, each matrix's scale table built, the threads started.
        cache.clear();
        rt.install(|| -> Result<()> {
            let logits = tm.model.forward(&ids, Some(&mut cache), true, None)?;
            tm.model
                .forward(&[argmax(logits.data())], Some(&mut cache), true, None)?;
            Ok(())
        })?;
        let (mut pre, mut dec) = (Vec::new(), Vec::new());
        for _ in 0..args.repeats {
            cache.clear();
            let (p, d) = rt.install(|| -> Result<(f64, f64)> {
                let t0 = Instant::now();
                let logits = tm.model.forward(&ids, Some(&mut cache), true, None)?;
                let p = ids.len() as f64 / t0.elapsed().as_secs_f64();
                let mut next = argmax(logits.data());
                let t1 = Instant::now();
                for _ in 0..args.gen_tokens {
                    let l = tm.model.forward(&[next], Some(&mut cache), true, None)?;
                    next = argmax(l.data());
                }
                Ok((p, args.gen_tokens as f64 / t1.elapsed().as_secs_f64()))
            })?;
            pre.push(p);
            dec.push(d);
        }
        let row = (n, median(pre), median(dec));
        if !args.json {
            println!(
                "threads {:>2}: prefill {:>8.1} tok/s ({} tokens)   decode {:>7.1} tok/s ({} tokens)   median of {}",
                row.0, row.1, ids.len(), row.2, args.gen_tokens, args.repeats
            );
        }
        for &b in &args.batch_list {
            let tok_s = rt.install(|| batched_decode(&tm.model, &ids, &mut cache, b, &args))?;
            if !args.json {
                println!(
                    "threads {n:>2}: batched decode of {b:>2} streams {tok_s:>8.1} tok/s in all ({:.2}× one stream)",
                    tok_s / row.2
                );
            }
            batched.push(serde_json::json!({"threads": n, "batch": b, "decode_tok_s": tok_s, "ratio_to_one_stream": tok_s / row.2}));
        }
        rows.push(row);
    }
    let file = std::fs::metadata(&tm.path).map(|m| m.len()).unwrap_or(0);
    let c = &tm.model.config;
    // The lone stream's cache, and the copies of the largest batch measured.
    let caches = 1 + args.batch_list.iter().copied().max().unwrap_or(0) as u64;
    let kv = caches * (2 * c.decoder_layers * c.n_kv_heads * c.head_dim * max_t * 4) as u64;
    let rss = resident_bytes();
    let budget = file + kv + 100 * 1024 * 1024;
    if args.json {
        let v = serde_json::json!({
            "model": tm.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "path": tm.path,
            "prompt_ids": ids,
            "prompt_tokens": ids.len(),
            "gen_tokens": args.gen_tokens,
            "repeats": args.repeats,
            "runs": rows.iter().map(|(n, p, d)| serde_json::json!({"threads": n, "prefill_tok_s": p, "decode_tok_s": d})).collect::<Vec<_>>(),
            "batched": batched,
            "resident_bytes": rss,
            "file_bytes": file,
            "kv_bytes": kv,
        });
        println!("{v}");
    } else if let Some(r) = rss {
        let mb = |b: u64| b as f64 / 1e6;
        println!(
            "resident memory {:.1} MB; file {:.1} MB + KV cache{} {:.1} MB + 100 MB = {:.1} MB ({})",
            mb(r),
            mb(file),
            if caches > 1 { format!("s ({caches})") } else { String::new() },
            mb(kv),
            mb(budget),
            if r <= budget { "within" } else { "OVER" }
        );
    }
    Ok(())
}

/// Aggregate decode tok/s of `b` sequences stepping together (median of the repeats):
/// each sequence's cache starts as `ids` prefilled (into `cache`, then copied), then
/// `--gen-tokens` greedy steps of all `b` go through one `decode_batch` each.
fn batched_decode(
    model: &lucent::model::DecoderModel,
    ids: &[u32],
    cache: &mut lucent::nn::KvCache,
    b: usize,
    args: &GenerateBenchArgs,
) -> Result<f64> {
    cache.clear();
    let logits = model.forward(ids, Some(cache), true, None)?;
    let first = argmax(logits.data());
    let mut runs = Vec::with_capacity(args.repeats);
    for _ in 0..args.repeats {
        let mut caches: Vec<lucent::nn::KvCache> = (0..b).map(|_| cache.clone()).collect();
        let mut next = vec![first; b];
        let t0 = Instant::now();
        for _ in 0..args.gen_tokens {
            let mut refs: Vec<&mut lucent::nn::KvCache> = caches.iter_mut().collect();
            let l = model.decode_batch(&next, &mut refs, &mut [])?; // (b, V)
            let v = l.data().len() / b;
            for (i, row) in l.data().chunks(v).enumerate() {
                next[i] = argmax(row);
            }
        }
        runs.push((b * args.gen_tokens) as f64 / t0.elapsed().as_secs_f64());
    }
    Ok(median(runs))
}
