//! `lucent train lm|seq2seq`: train a small Transformer from scratch, with a progress
//! bar (step, loss, tokens/s, ETA) or `--json` metrics lines; and the temporary
//! what `generate -m DIR` and `attention -m DIR` run for a trained run's folder.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use lucent::train::data::Task;
use lucent::train::{self, Job, Limits, Metrics, Observer, Summary, TrainConfig};
use lucent::Result;

use crate::commands::numbers::{at_least, non_negative};
use crate::progress::Bars;
use crate::show::count;

/// Arguments of `lucent train`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    job: TrainJob,
}

#[derive(clap::Subcommand)]
enum TrainJob {
    /// A GPT language model on a text corpus (moby-dick, sotu or a text file).
    #[command(
        after_help = "Examples:\n  lucent train lm --corpus moby-dick --minutes 15 --out runs/moby\n  lucent train lm --corpus benches/sentences.txt --tokenizer bpe --bpe-vocab 1024 --steps 3000\n  lucent train lm --resume runs/moby --steps 6000\n\nThe last 10% of the corpus is held out for the validation loss. The folder gets\nmodel.safetensors (weights + AdamW state + step + config), the tokenizer,\nhistory.json and loss.png. Sample with `lucent generate -m DIR \"prompt\"`."
    )]
    Lm(LmArgs),
    /// The guides' encoder-decoder on a synthetic task (reverse, sort, copy, add).
    #[command(
        after_help = "Examples:\n  lucent train seq2seq --task reverse --minutes 5 --out runs/reverse\n  lucent attention -m runs/reverse abcdefghij --png reverse.png"
    )]
    Seq2seq(Seq2SeqArgs),
}

/// Settings shared by both jobs.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
struct Common {
    /// Layers (of each stack) [default: lm 4, seq2seq 2].
    #[arg(long, value_parser = at_least::<0, usize>)]
    layers: Option<usize>,
    /// Model width d [default: lm 128, seq2seq 64].
    #[arg(long = "d-model", value_parser = at_least::<0, usize>)]
    d_model: Option<usize>,
    /// Attention heads [default: 4].
    #[arg(long, value_parser = at_least::<0, usize>)]
    heads: Option<usize>,
    /// Sequences per batch [default: lm 12, seq2seq 32].
    #[arg(long, value_parser = at_least::<0, usize>)]
    batch: Option<usize>,
    /// Optimisation steps, the schedule's length [default: lm 14000, seq2seq 1500; with
    /// --minutes alone: as many as fit the time budget].
    #[arg(long, value_parser = at_least::<0, u64>)]
    steps: Option<u64>,
    /// Peak learning rate (AdamW; warm-up then cosine decay to a tenth) [default: lm 2e-3,
    /// seq2seq 1e-3].
    #[arg(long)]
    lr: Option<f32>,
    /// Warm-up steps [default: lm 200, seq2seq 100].
    #[arg(long, value_parser = at_least::<0, u64>)]
    warmup: Option<u64>,
    /// Time budget in minutes. Given alone, the run uses it whole: the step count and the
    /// learning-rate schedule are fitted to it. With --steps, the run stops at whichever
    /// comes first (and can be resumed) [default: none].
    #[arg(long, value_parser = non_negative)]
    minutes: Option<f64>,
    /// Seed of the initialisation and the batches [default: 1337].
    #[arg(long, value_parser = at_least::<0, u64>)]
    seed: Option<u64>,
    /// Evaluate and checkpoint every N steps [default: lm 200, seq2seq 250].
    #[arg(long = "eval-every", value_parser = at_least::<0, u64>)]
    eval_every: Option<u64>,
    /// Output folder [default: runs/lm, runs/TASK].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the run saved in DIR (its config; --steps extends it).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// One JSON object per step on stdout instead of the progress bar.
    #[arg(long)]
    json: bool,
}

/// `lucent train lm`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
struct LmArgs {
    /// moby-dick, sotu, or a path to a text file (required unless --resume).
    #[arg(long, required_unless_present = "resume")]
    corpus: Option<String>,
    /// char or bpe.
    #[arg(long, default_value = "char")]
    tokenizer: String,
    /// BPE vocabulary size.
    #[arg(long = "bpe-vocab", default_value_t = 512, value_parser = at_least::<0, usize>)]
    bpe_vocab: usize,
    /// Context length in tokens [default: 64].
    #[arg(long, value_parser = at_least::<0, usize>)]
    block: Option<usize>,
    /// Dropout on the embeddings while training.
    #[arg(long, default_value_t = 0.0)]
    dropout: f32,
    #[command(flatten)]
    common: Common,
}

/// `lucent train seq2seq`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
struct Seq2SeqArgs {
    /// reverse, sort, copy or add.
    #[arg(long, default_value = "reverse")]
    task: String,
    /// Distinct symbols (reverse, sort, copy).
    #[arg(long, default_value_t = 10, value_parser = at_least::<0, usize>)]
    symbols: usize,
    /// Shortest input.
    #[arg(long = "min-len", default_value_t = 8, value_parser = at_least::<0, usize>)]
    min_len: usize,
    /// Longest input.
    #[arg(long = "max-len", default_value_t = 16, value_parser = at_least::<0, usize>)]
    max_len: usize,
    /// Held-out examples for the exact-match accuracy.
    #[arg(long = "test-size", default_value_t = 500, value_parser = at_least::<0, usize>)]
    test_size: usize,
    #[command(flatten)]
    common: Common,
}

fn apply(c: &Common, mut cfg: TrainConfig) -> TrainConfig {
    let set = |v: Option<usize>, d: &mut usize| {
        if let Some(v) = v {
            *d = v;
        }
    };
    set(c.layers, &mut cfg.layers);
    set(c.d_model, &mut cfg.d_model);
    set(c.heads, &mut cfg.heads);
    set(c.batch, &mut cfg.batch);
    if let Some(s) = c.steps {
        cfg.steps = s;
    }
    if let Some(lr) = c.lr {
        cfg.lr = lr;
        cfg.min_lr = lr / 10.0;
    }
    if let Some(w) = c.warmup {
        cfg.warmup = w;
    }
    if let Some(s) = c.seed {
        cfg.seed = s;
    }
    if let Some(e) = c.eval_every {
        cfg.eval_every = e;
    }
    cfg
}

/// Run `lucent train`.
pub fn run(args: Args) -> Result<()> {
    let (common, cfg) = match &args.job {
        TrainJob::Lm(a) => {
            let mut cfg = TrainConfig::lm(a.corpus.as_deref().unwrap_or(""));
            cfg.job = Job::Lm {
                corpus: a.corpus.clone().unwrap_or_default(),
                tokenizer: a.tokenizer.clone(),
                bpe_vocab: a.bpe_vocab,
            };
            if let Some(b) = a.block {
                cfg.block = b;
            }
            cfg.dropout = a.dropout;
            (&a.common, apply(&a.common, cfg))
        }
        TrainJob::Seq2seq(a) => {
            let task = Task::parse(&a.task)?;
            let mut cfg = TrainConfig::seq2seq(task);
            cfg.job = Job::Seq2Seq {
                task,
                symbols: a.symbols,
                min_len: a.min_len,
                max_len: a.max_len,
                test_size: a.test_size,
            };
            (&a.common, apply(&a.common, cfg))
        }
    };
    let limits = Limits {
        minutes: common.minutes,
        stop_after: None,
        fit_to_time: common.minutes.is_some() && common.steps.is_none(),
    };
    let mut observer = Cli::new(common.json);
    let summary = match &common.resume {
        Some(dir) => train::resume(
            dir,
            common.out.as_deref(),
            common.steps,
            limits,
            &mut observer,
            &mut Bars::default(),
        )?,
        None => {
            let out = common
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from(default_out(&cfg)));
            train::train(cfg, &out, limits, &mut observer, &mut Bars::default())?
        }
    };
    observer.finish();
    report(&summary, common.json);
    Ok(())
}

fn default_out(cfg: &TrainConfig) -> String {
    match &cfg.job {
        Job::Lm { .. } => "runs/lm".into(),
        Job::Seq2Seq { task, .. } => format!("runs/{}", task.name()),
    }
}

fn report(s: &Summary, json: bool) {
    if json {
        let v = serde_json::json!({
            "done": true,
            "step": s.step,
            "parameters": s.parameters,
            "val_loss": s.last_val_loss(),
            "exact_match": s.last_exact_match(),
            "checkpoint": s.checkpoint,
            "plot": s.plot,
        });
        println!("{v}");
        return;
    }
    println!(
        "trained {} parameters for {}",
        s.parameters,
        count(s.step, "step", "steps")
    );
    if let Some(v) = s.last_val_loss() {
        println!("validation loss {v:.4} (perplexity {:.2})", v.exp());
    }
    if let Some(em) = s.last_exact_match() {
        println!("exact match on held-out examples: {:.1}%", 100.0 * em);
    }
    println!("checkpoint: {}", s.checkpoint.display());
    if let Some(p) = &s.plot {
        println!("loss curve: {}", p.display());
    }
}

/// The command line's observer: a progress bar, or JSON lines.
struct Cli {
    json: bool,
    bar: Option<ProgressBar>,
    last_val: Option<f32>,
    last_em: Option<f32>,
}

impl Cli {
    fn new(json: bool) -> Self {
        Cli {
            json,
            bar: None,
            last_val: None,
            last_em: None,
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }
}

impl Observer for Cli {
    fn start(&mut self, start: u64, total: u64) {
        if self.json {
            return;
        }
        let bar = ProgressBar::new(total).with_style(
            ProgressStyle::with_template("step {pos}/{len} [{bar:30}] {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_position(start);
        self.bar = Some(bar);
    }

    fn step(&mut self, m: &Metrics) {
        if self.json {
            if let Ok(s) = serde_json::to_string(m) {
                println!("{s}");
            }
            return;
        }
        self.last_val = m.val_loss.or(self.last_val);
        self.last_em = m.exact_match.or(self.last_em);
        if let Some(b) = &self.bar {
            let mut msg = format!("loss {:.3}", m.train_loss);
            if let Some(v) = self.last_val {
                msg += &format!(" val {v:.3}");
            }
            if let Some(e) = self.last_em {
                msg += &format!(" exact {:.1}%", 100.0 * e);
            }
            msg += &format!(" {:.0} tok/s", m.tok_s);
            b.set_message(msg);
            b.set_position(m.step);
            if m.val_loss.is_some() {
                let line = format!(
                    "step {:>6}  train {:.4}  val {:.4}{}",
                    m.step,
                    m.train_loss,
                    m.val_loss.unwrap_or(f32::NAN),
                    m.exact_match
                        .map_or(String::new(), |e| format!("  exact {:.1}%", 100.0 * e))
                );
                // A hidden bar (output not a terminal) prints nothing itself.
                if b.is_hidden() {
                    eprintln!("{line}");
                } else {
                    b.println(line);
                }
            }
        }
    }

    fn message(&mut self, msg: &str) {
        if self.json {
            return;
        }
        match &self.bar {
            Some(b) if !b.is_hidden() => b.println(msg),
            _ => eprintln!("{msg}"),
        }
    }
}
