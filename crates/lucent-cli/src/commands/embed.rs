//! `lucent embed`, `lucent similarity`, `lucent analogy`: sentence embeddings from a
//! real encoder (all-MiniLM-L6-v2 by default).
//!
//! embed: text → encoder → mean pooling → L2 normalise → a 384-d unit vector.
//! similarity: cos(a, b) = a·b for unit vectors, as a matrix.
//! analogy: q = normalise(Σ ± e(term)); candidates ranked by cos(q, e(candidate)).

use std::io::Read;

use lucent::pipeline::embed::{analogy, cosine, parse_terms, Embedder, DEFAULT_BATCH};
use lucent::{Error, Result};

/// Load the embedding model `spec` (a known name, fetched on first use with progress
/// bars, or a local folder in Hugging Face layout).
pub fn load_embedder(spec: &str) -> Result<std::sync::Arc<Embedder>> {
    crate::loader::embedder(spec)
}

/// Arguments of `lucent embed`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent embed \"The cat sat on the mat.\" \"A dog slept on the rug.\"\n  lucent embed --file sentences.txt --json > vectors.json\n  echo hello | lucent embed --file -"
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
    #[arg(long, default_value_t = DEFAULT_BATCH)]
    batch: usize,
    /// Print `{"model", "dim", "embeddings"}` as JSON.
    #[arg(long)]
    json: bool,
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
    let texts = read_inputs(&args.texts, args.file.as_deref())?;
    let embedder = load_embedder(&args.model)?;
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let vecs = embedder.embed_batched(&refs, args.batch)?;
    if args.json {
        let v = serde_json::json!({
            "model": embedder.name(),
            "dim": embedder.dim(),
            "embeddings": vecs,
        });
        println!("{v}");
        return Ok(());
    }
    let c = embedder.config();
    println!(
        "{}: {} texts → {}-d vectors ({} pooling{}, max {} tokens)\n",
        embedder.name(),
        vecs.len(),
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

/// Arguments of `lucent similarity`.
#[derive(clap::Args)]
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
    #[arg(long, default_value_t = 5)]
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
