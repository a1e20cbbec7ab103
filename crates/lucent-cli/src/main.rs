//! `lucent`: run, inspect and train Transformers from the command line.
//!
//! One subcommand per task; each lives in `commands/NAME.rs` with its clap `Args` and a
//! `run` function. Every command that computes takes `--threads`, and most take `--json`
//! for machine-readable output.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// lucent — a Transformer engine you can see inside.
///
/// Every building block of the classic Transformer guides (attention, masks, positions,
/// feed-forward, norms, encoder and decoder), real pretrained models, and training,
/// with every intermediate step on show.
#[derive(Parser)]
#[command(name = "lucent", version, about, long_about, propagate_version = true)]
struct Cli {
    /// Threads for the kernels (default: the machine's physical cores).
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure lucent's speed: `lucent bench kernels` (medians of several runs).
    Bench(commands::bench::Args),
    /// Softmax of a list of scores at one or more temperatures (the guides' table).
    Softmax(commands::softmax::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    lucent::set_threads(cli.threads.unwrap_or(0));
    let result = match cli.command {
        Command::Bench(a) => commands::bench::run(a),
        Command::Softmax(a) => commands::softmax::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
