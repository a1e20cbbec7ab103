//! `lucent export hf RUN_DIR OUT_DIR`: a language model from `lucent train lm` written as
//! a Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json) that
//! `transformers.GPT2LMHeadModel.from_pretrained(OUT_DIR)` loads, and that lucent reads
//! back (`lucent generate -m OUT_DIR`). See `lucent::pipeline::export`.

use std::path::PathBuf;

use lucent::pipeline::export::export_hf;
use lucent::{Error, Result};

/// Arguments of `lucent export`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent train lm --corpus moby-dick --minutes 5 --out runs/moby\n  lucent export hf runs/moby hf/moby\n  python -c \"import transformers; transformers.GPT2LMHeadModel.from_pretrained('hf/moby')\"\n  lucent generate -m hf/moby --temperature 0 \"Call me\""
)]
pub struct Args {
    #[command(subcommand)]
    format: Format,
}

#[derive(clap::Subcommand)]
enum Format {
    /// A Hugging Face GPT-2 folder (transformers' GPT2LMHeadModel).
    Hf {
        /// The training run's folder (`lucent train lm --out DIR`).
        run_dir: PathBuf,
        /// The folder to write (created if needed; its three files are replaced).
        out_dir: PathBuf,
        /// Print what was written as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run `lucent export`.
pub fn run(args: Args) -> Result<()> {
    match args.format {
        Format::Hf {
            run_dir,
            out_dir,
            json,
        } => {
            let e = export_hf(&run_dir, &out_dir)?;
            if json {
                let v = serde_json::to_string(&e).map_err(|err| {
                    Error::Argument(format!("cannot print the export as JSON: {err}"))
                })?;
                println!("{v}");
            } else {
                println!(
                    "wrote {} ({} tensors, {} tokenizer): {}",
                    e.dir.display(),
                    e.tensors,
                    e.tokenizer,
                    e.files.join(", ")
                );
            }
            Ok(())
        }
    }
}
