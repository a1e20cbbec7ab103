//! `lucent embed`, `lucent similarity`, `lucent analogy`: sentence embeddings from a
//! real encoder (all-MiniLM-L6-v2 by default).
//!
//! embed: text → encoder → mean pooling → L2 normalise → a 384-d unit vector.
//! similarity: cos(a, b) = a·b for unit vectors, as a matrix.
//! analogy: q = normalise(Σ ± e(term)); candidates ranked by cos(q, e(candidate)).

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use crate::commands::numbers::at_least;
use crate::show::count;
use indicatif::{ProgressBar, ProgressStyle};
use lucent::io::npy::NpyWriter;
use lucent::pipeline::embed::{analogy, cosine, parse_terms, Embedder, DEFAULT_BATCH};
use lucent::pipeline::embed_file::{embed_lines, DEFAULT_CHUNK_LINES};
use lucent::{Error, Precision, Result};

/// Load the embedding model `spec` (a known name, fetched on first use with progress
/// bars, or a local folder in Hugging Face layout).
pub fn load_embedder(spec: &str) -> Result<std::sync::Arc<Embedder>> {
    crate::loader::embedder(spec)
}

/// Arguments of `lucent embed`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent embed \"The cat sat on the mat.\" \"A dog slept on the rug.\"\n  lucent embed --precision int8 \"The cat sat on the mat.\"\n  lucent embed --file benches/sentences.txt --json > vectors.json\n  lucent embed --file benches/sentences.txt --out vectors.npy\n  lucent embed --file benches/sentences.txt --out vectors.jsonl\n  echo hello | lucent embed --file -"
)]
pub struct EmbedArgs {
    /// Texts to embed (each one input).
    texts: Vec<String>,
    /// A model name (see `lucent models`) or a local folder in Hugging Face layout.
    #[arg(long, short = 'm', default_value = "minilm")]
    model: String,
    /// Read inputs from a file, one per line (`-`: standard input); blank lines skipped.
    #[arg(long, value_name = "F")]
    file: Option<String>,
    /// Texts per forward pass.
    #[arg(long, default_value_t = DEFAULT_BATCH, value_parser = at_least::<0, usize>)]
    batch: usize,
    /// Print `{"model", "dim", "embeddings"}` as JSON (with --out: a summary).
    #[arg(long)]
    json: bool,
    /// Write the embeddings to F instead of printing them, streaming any number of lines
    /// in bounded memory with a progress bar: `.npy` (an (n, d) f32 array for NumPy) or
    /// `.jsonl` (one `{"text", "embedding"}` object per line). Default: print.
    #[arg(long, value_name = "F")]
    out: Option<PathBuf>,
    /// How the encoder's products are computed: `exact` (sentence-transformers' numbers),
    /// `bf16` (bf16 products with f32 sums) or `int8` (8-bit integer products, faster;
    /// `lucent bench precision` measures how close to exact each lands).
    #[arg(long, default_value = "exact", value_parser = parse_precision)]
    precision: Precision,
}

/// `--precision`'s parser (the library's names and its one-line refusal).
pub fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

fn read_inputs(texts: &[String], file: Option<&str>) -> Result<Vec<String>> {
    let mut all = texts.to_vec();
    if let Some(f) = file {
        let content = if f == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::io("<stdin>", e))?;
            s
        } else {
            std::fs::read_to_string(f).map_err(|e| Error::io(f, e))?
        };
        all.extend(
            content
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(String::from),
        );
    }
    if all.is_empty() {
        return Err(Error::Argument(
            "no input texts: give texts as arguments or a non-empty --file".into(),
        ));
    }
    Ok(all)
}

fn preview(v: &[f32]) -> String {
    let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:+.4}")).collect();
    format!("[{}, …]", head.join(", "))
}

fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', "⏎");
    let c: String = one_line.chars().take(n).collect();
    if c.len() < one_line.len() {
        format!(
            "{}…",
            c.chars().take(n.saturating_sub(1)).collect::<String>()
        )
    } else {
        c
    }
}

/// Run `lucent embed`.
pub fn run_embed(args: EmbedArgs) -> Result<()> {
    if let Some(out) = &args.out {
        return embed_to_file(&args, out);
    }
    let texts = read_inputs(&args.texts, args.file.as_deref())?;
    let embedder = crate::loader::embedder_in(&args.model, args.precision)?;
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let vecs = embedder.embed_batched(&refs, args.batch)?;
    if args.json {
        let v = serde_json::json!({
            "model": embedder.name(),
            "precision": embedder.precision().name(),
            "dim": embedder.dim(),
            "embeddings": vecs,
        });
        println!("{v}");
        return Ok(());
    }
    let c = embedder.config();
    println!(
        "{}{}: {} → {}-d vectors ({} pooling{}, max {} tokens)\n",
        embedder.name(),
        match embedder.precision() {
            Precision::Exact => String::new(),
            p => format!(" ({p} products)"),
        },
        count(vecs.len(), "text", "texts"),
        embedder.dim(),
        c.pooling.name(),
        if c.normalize { ", L2-normalised" } else { "" },
        c.max_seq_length
    );
    for (t, v) in texts.iter().zip(&vecs) {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        println!("{:<40} {}  ‖e‖ = {norm:.4}", clip(t, 40), preview(v));
    }
    Ok(())
}

/// Where `embed --out` writes: a `.npy` array or `.jsonl` lines.
enum Sink {
    Npy(NpyWriter),
    Jsonl(std::io::BufWriter<std::fs::File>),
}

/// `lucent embed --out F`: stream the inputs through the embedder into F.
fn embed_to_file(args: &EmbedArgs, out: &Path) -> Result<()> {
    let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(ext, "npy" | "jsonl") {
        return Err(Error::Argument(format!(
            "--out {}: name a .npy file (an (n, d) f32 array) or a .jsonl file (one object per line)",
            out.display()
        )));
    }
    if args.file.is_none() && args.texts.is_empty() {
        return Err(Error::Argument(
            "no input texts: give texts as arguments or --file F (`-`: standard input)".into(),
        ));
    }
    let embedder = crate::loader::embedder_in(&args.model, args.precision)?;
    // Arguments first, then the file's lines, as without --out.
    let mut head = std::io::Cursor::new(args.texts.join("\n").into_bytes());
    let (mut file_input, size): (Box<dyn BufRead>, Option<u64>) = match args.file.as_deref() {
        None => (Box::new(std::io::empty()), Some(0)),
        Some("-") => (Box::new(std::io::stdin().lock()), None),
        Some(f) => {
            let h = std::fs::File::open(f).map_err(|e| Error::io(f, e))?;
            let len = h.metadata().map_err(|e| Error::io(f, e))?.len();
            (Box::new(std::io::BufReader::new(h)), Some(len))
        }
    };
    if !args.texts.is_empty() {
        head.get_mut().push(b'\n');
    }
    let mut input = Read::chain(head, &mut file_input);
    let mut sink = match ext {
        "npy" => Sink::Npy(NpyWriter::create(out, embedder.dim())?),
        _ => Sink::Jsonl(std::io::BufWriter::new(
            std::fs::File::create(out).map_err(|e| Error::io(out, e))?,
        )),
    };
    let bar = match size {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "embedding [{bar:30}] {bytes}/{total_bytes} {msg} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} embedding {bytes} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    let start = std::time::Instant::now();
    let mut done = 0u64;
    let n = embed_lines(
        &embedder,
        &mut input,
        args.batch,
        DEFAULT_CHUNK_LINES,
        &mut |chunk| {
            for (t, v) in chunk.texts.iter().zip(chunk.vectors) {
                match &mut sink {
                    Sink::Npy(w) => w.push(v)?,
                    Sink::Jsonl(w) => {
                        let line = serde_json::json!({"text": t, "embedding": v});
                        writeln!(w, "{line}").map_err(|e| Error::io(out, e))?;
                    }
                }
            }
            done += chunk.texts.len() as u64;
            bar.set_position(chunk.bytes_read);
            bar.set_message(count(done, "text", "texts"));
            Ok(())
        },
    )?;
    match sink {
        Sink::Npy(w) => {
            w.finish()?;
        }
        Sink::Jsonl(mut w) => w.flush().map_err(|e| Error::io(out, e))?,
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    if n == 0 {
        std::fs::remove_file(out).ok();
        return Err(Error::Argument(
            "no input texts: the input has no non-blank lines".into(),
        ));
    }
    if args.json {
        let v = serde_json::json!({
            "model": embedder.name(),
            "dim": embedder.dim(),
            "texts": n,
            "out": out.display().to_string(),
            "seconds": secs,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} → {}-d vectors in {} ({secs:.1} s, {:.0} texts/s)",
            embedder.name(),
            count(n, "text", "texts"),
            embedder.dim(),
            out.display(),
            n as f64 / secs.max(1e-9)
        );
    }
    Ok(())
}

/// Arguments of `lucent similarity`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Example:\n  lucent similarity king queen man woman \"The cat sat on the mat.\""
)]
pub struct SimilarityArgs {
    /// Two or more texts.
    #[arg(required = true, num_args = 2..)]
    texts: Vec<String>,
    /// A model name (see `lucent models`) or a local folder in Hugging Face layout.
    #[arg(long, short = 'm', default_value = "minilm")]
    model: String,
    /// Print JSON (`texts`, `matrix`).
    #[arg(long)]
    json: bool,
}

/// Run `lucent similarity`: the cosine similarity matrix.
pub fn run_similarity(args: SimilarityArgs) -> Result<()> {
    if args.texts.len() < 2 {
        return Err(Error::Argument(
            "similarity needs at least two texts".into(),
        ));
    }
    let embedder = load_embedder(&args.model)?;
    let refs: Vec<&str> = args.texts.iter().map(|s| s.as_str()).collect();
    let vecs = embedder.embed(&refs)?;
    let matrix: Vec<Vec<f32>> = vecs
        .iter()
        .map(|a| vecs.iter().map(|b| cosine(a, b)).collect())
        .collect();
    if args.json {
        let v =
            serde_json::json!({"model": embedder.name(), "texts": args.texts, "matrix": matrix});
        println!("{v:#}");
        return Ok(());
    }
    println!(
        "cosine similarity ({}, {}-d)\n",
        embedder.name(),
        embedder.dim()
    );
    let w = 14;
    let labels: Vec<String> = args.texts.iter().map(|t| clip(t, w - 2)).collect();
    print!("{:w$}", "");
    for l in &labels {
        print!("{l:>w$}");
    }
    println!();
    for (l, row) in labels.iter().zip(&matrix) {
        print!("{l:<w$}");
        for v in row {
            print!("{v:>w$.3}");
        }
        println!();
    }
    if args.texts.len() > 2 {
        let mut best = (0, 1, f32::NEG_INFINITY);
        for (i, row) in matrix.iter().enumerate() {
            for (j, &v) in row.iter().enumerate().skip(i + 1) {
                if v > best.2 {
                    best = (i, j, v);
                }
            }
        }
        println!(
            "\nmost similar pair: {:?} and {:?} ({:.3})",
            args.texts[best.0], args.texts[best.1], best.2
        );
    }
    Ok(())
}

const DEFAULT_CANDIDATES: &str =
    "queen,king,prince,princess,man,woman,boy,girl,monarch,emperor,empress,duchess,lady,throne,crown,palace";

/// Arguments of `lucent analogy`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent analogy king - man + woman\n  lucent analogy paris - france + germany --candidates berlin,munich,london,rome"
)]
pub struct AnalogyArgs {
    /// The expression: terms joined by + and - (e.g. `king - man + woman`).
    #[arg(required = true, num_args = 1..)]
    expr: Vec<String>,
    /// Words to rank against the result, comma-separated (the terms themselves are left out).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CANDIDATES)]
    candidates: Vec<String>,
    /// A model name (see `lucent models`) or a local folder in Hugging Face layout.
    #[arg(long, short = 'm', default_value = "minilm")]
    model: String,
    /// How many candidates to show.
    #[arg(long, default_value_t = 5, value_parser = at_least::<0, usize>)]
    top: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Run `lucent analogy`.
pub fn run_analogy(args: AnalogyArgs) -> Result<()> {
    let terms = parse_terms(&args.expr)?;
    let candidates: Vec<String> = args
        .candidates
        .iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    let embedder = load_embedder(&args.model)?;
    let result = analogy(&embedder, &terms, &candidates)?;
    let expr: String = terms
        .iter()
        .enumerate()
        .map(|(i, t)| match (i, t.sign > 0.0) {
            (0, true) => t.text.clone(),
            (0, false) => format!("− {}", t.text),
            (_, true) => format!(" + {}", t.text),
            (_, false) => format!(" − {}", t.text),
        })
        .collect();
    // Pairwise similarities of the terms and the best candidate (the guide's figures).
    let mut words: Vec<String> = terms.iter().map(|t| t.text.clone()).collect();
    if let Some((best, _)) = result.ranked.first() {
        words.push(best.clone());
    }
    let refs: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
    let vecs = embedder.embed(&refs)?;
    let mut pairs = Vec::new();
    for i in 0..words.len() {
        for j in i + 1..words.len() {
            pairs.push((
                words[i].clone(),
                words[j].clone(),
                cosine(&vecs[i], &vecs[j]),
            ));
        }
    }
    if args.json {
        let v = serde_json::json!({
            "model": embedder.name(),
            "expression": expr,
            "ranked": result.ranked.iter().map(|(w, s)| serde_json::json!({"word": w, "cosine": s})).collect::<Vec<_>>(),
            "pairs": pairs.iter().map(|(a, b, s)| serde_json::json!({"a": a, "b": b, "cosine": s})).collect::<Vec<_>>(),
        });
        println!("{v:#}");
        return Ok(());
    }
    println!("{expr}  ({}, normalised embeddings)\n", embedder.name());
    println!("pairwise cosine similarity:");
    for (a, b, s) in &pairs {
        println!("  {a:>12} – {b:<12} {s:.3}");
    }
    println!("\nnearest candidates to ({expr}), by cosine:");
    for (w, s) in result.ranked.iter().take(args.top.max(1)) {
        println!("  {w:<14} {s:.3}");
    }
    if result.ranked.is_empty() {
        println!("  (no candidates left after leaving out the terms; pass --candidates)");
    }
    Ok(())
}
