//! The training loop: configuration ([`TrainConfig`]), one run from a fresh start
//! ([`train`]) or from a checkpoint ([`resume`]), the per-step loss and its backward pass
//! (sharded over threads), validation, metrics and the observer that reports them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::optim::{clip_grad_norm, AdamW, DecayRule, Schedule};
use super::params::Parameters;
use super::run::TrainedModel;
use super::{checkpoint, data, models};
use crate::autograd::no_grad;
use crate::io::fetch::Progress;
use crate::nn::Dropout;
use crate::tensor::Tensor;
use crate::{Error, Result};

use crate::model::{DecoderModel, EncoderDecoderModel};
use data::{
    eval_windows, pad_batch, random_batch, CharTokenizer, Task, TextTokenizer, TokenStream,
};
use models::{lm_loss, new_gpt, new_seq2seq, seq2seq_loss, src_lengths, Dims};

/// What to train.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Job {
    /// A GPT language model on a text corpus.
    Lm {
        /// The corpus as given (a known name or a path).
        corpus: String,
        /// "char" or "bpe".
        tokenizer: String,
        /// BPE vocabulary size (ignored for characters).
        bpe_vocab: usize,
    },
    /// The encoder-decoder on a synthetic task.
    Seq2Seq {
        /// The task.
        task: Task,
        /// Number of distinct symbols (reverse, sort, copy).
        symbols: usize,
        /// Shortest input.
        min_len: usize,
        /// Longest input.
        max_len: usize,
        /// Held-out examples (never trained on).
        test_size: usize,
    },
}

/// Everything that defines a run (saved in every checkpoint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// What to train.
    pub job: Job,
    /// Layers (of each stack).
    pub layers: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Context length (LM); longest sequence + 1 (seq2seq, set automatically).
    pub block: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Steps in all (the schedule's length).
    pub steps: u64,
    /// Peak learning rate.
    pub lr: f32,
    /// Final learning rate of the cosine decay.
    pub min_lr: f32,
    /// Warm-up steps.
    pub warmup: u64,
    /// AdamW weight decay (matrices only).
    pub weight_decay: f32,
    /// AdamW β₂.
    pub beta2: f32,
    /// Clip gradients to this global norm (0: no clipping).
    pub grad_clip: f32,
    /// Seed of the initialisation and of every batch.
    pub seed: u64,
    /// Evaluate (and checkpoint) every this many steps.
    pub eval_every: u64,
    /// Embedding dropout probability while training (LM; 0 = none).
    #[serde(default)]
    pub dropout: f32,
    /// Validation windows per evaluation (LM).
    pub eval_windows: usize,
}

impl TrainConfig {
    /// Defaults for a language model on `corpus`.
    pub fn lm(corpus: &str) -> Self {
        TrainConfig {
            job: Job::Lm {
                corpus: corpus.to_string(),
                tokenizer: "char".into(),
                bpe_vocab: 512,
            },
            layers: 4,
            d_model: 128,
            heads: 4,
            block: 64,
            batch: 12,
            steps: 14_000,
            lr: 2e-3,
            min_lr: 2e-4,
            warmup: 200,
            weight_decay: 0.1,
            beta2: 0.99,
            grad_clip: 1.0,
            seed: 1337,
            eval_every: 200,
            dropout: 0.0,
            eval_windows: 200,
        }
    }

    /// Defaults for the encoder-decoder on `task`.
    pub fn seq2seq(task: Task) -> Self {
        TrainConfig {
            job: Job::Seq2Seq {
                task,
                symbols: 10,
                min_len: 8,
                max_len: 16,
                test_size: 500,
            },
            layers: 2,
            d_model: 64,
            heads: 4,
            block: 0,
            batch: 32,
            steps: 1500,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            weight_decay: 0.01,
            beta2: 0.98,
            grad_clip: 1.0,
            seed: 1337,
            eval_every: 250,
            dropout: 0.0,
            eval_windows: 0,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Argument(m));
        if self.batch == 0 || self.steps == 0 || self.eval_every == 0 {
            return bad(format!(
                "--batch, --steps and --eval-every must be > 0 (got {}, {}, {})",
                self.batch, self.steps, self.eval_every
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("--dropout must be in [0, 1), got {}", self.dropout));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("--lr must be a finite number > 0, got {}", self.lr));
        }
        if let Job::Seq2Seq {
            min_len,
            max_len,
            test_size,
            ..
        } = &self.job
        {
            if *min_len == 0 || min_len > max_len || *test_size == 0 {
                return bad(format!(
                    "seq2seq needs 1 ≤ --min-len ≤ --max-len and --test-size > 0 (got {min_len}, {max_len}, {test_size})"
                ));
            }
        }
        Ok(())
    }

    fn schedule(&self) -> Schedule {
        Schedule {
            lr: self.lr,
            warmup: self.warmup.min(self.steps / 2),
            total: self.steps,
            min_lr: self.min_lr.min(self.lr),
        }
    }
}

/// One line of the metrics log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Steps done (1-based).
    pub step: u64,
    /// Steps planned.
    pub total_steps: u64,
    /// This step's training loss (nats per token).
    pub train_loss: f32,
    /// Validation loss, when evaluated at this step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub val_loss: Option<f32>,
    /// Validation perplexity e^val_loss (LM), when evaluated.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub val_ppl: Option<f32>,
    /// Exact-match accuracy on the held-out set (seq2seq), when evaluated.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exact_match: Option<f32>,
    /// Training tokens per second (this session, evaluation excluded).
    pub tok_s: f32,
    /// Learning rate used at this step.
    pub lr: f32,
    /// Seconds since this session started.
    pub elapsed_s: f32,
}

/// Receives the run's progress (the CLI draws a progress bar or prints JSON lines).
pub trait Observer {
    /// The run starts at `start_step` of `total_steps`.
    fn start(&mut self, _start_step: u64, _total_steps: u64) {}
    /// A step finished (with validation numbers when it evaluated).
    fn step(&mut self, _m: &Metrics) {}
    /// A line of news ("tokenising", "checkpoint saved", ...).
    fn message(&mut self, _msg: &str) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// Limits of one session (not part of the run's definition).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// Stop after this many minutes of wall-clock time.
    pub minutes: Option<f64>,
    /// Stop after this step (as if interrupted; the run can be resumed).
    pub stop_after: Option<u64>,
    /// With `minutes`: fit the run's length (`steps`, and so the learning-rate schedule)
    /// to the time budget instead of the configured step count, so the budget is used
    /// whole and the schedule ends when it does. The steps are estimated from the
    /// measured time per step (evaluations included) after a short calibration and
    /// re-estimated at each evaluation in the first half of the budget.
    pub fit_to_time: bool,
}

/// What a session did.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The last step done.
    pub step: u64,
    /// Every step's metrics since step 1 (including earlier sessions).
    pub history: Vec<Metrics>,
    /// Where the checkpoint is.
    pub checkpoint: PathBuf,
    /// The loss curve (when it could be drawn).
    pub plot: Option<PathBuf>,
    /// Parameters of the model.
    pub parameters: usize,
}

impl Summary {
    /// The last validation loss recorded.
    pub fn last_val_loss(&self) -> Option<f32> {
        self.history.iter().rev().find_map(|m| m.val_loss)
    }
    /// The last exact-match accuracy recorded.
    pub fn last_exact_match(&self) -> Option<f32> {
        self.history.iter().rev().find_map(|m| m.exact_match)
    }
}

/// A trained network.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // one per run, never in a collection
pub enum Net {
    /// Language model.
    Lm(DecoderModel),
    /// Encoder-decoder.
    Seq2Seq(EncoderDecoderModel),
}

impl Net {
    fn params(&mut self) -> &mut dyn Parameters {
        match self {
            Net::Lm(m) => m,
            Net::Seq2Seq(m) => m,
        }
    }
}

enum Data {
    Lm {
        stream: TokenStream,
        tokenizer: TextTokenizer,
    },
    Seq2Seq {
        test: Vec<(Vec<usize>, Vec<usize>)>,
        held_out: HashSet<Vec<usize>>,
    },
}

/// The checkpoint file inside a run folder written by `lucent train`.
pub const CHECKPOINT: &str = "model.safetensors";

/// Steps run before a time budget's first estimate of the run's length.
const CALIBRATION_STEPS: u64 = 20;

/// The batch RNG of step `t`: a pure function of (seed, t).
fn step_rng(seed: u64, t: u64) -> StdRng {
    StdRng::seed_from_u64(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ t.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

pub(crate) fn dims_of(cfg: &TrainConfig, vocab: usize) -> Dims {
    Dims {
        layers: cfg.layers,
        d_model: cfg.d_model,
        heads: cfg.heads,
        d_ff: 4 * cfg.d_model,
        block: cfg.block,
        vocab,
    }
}

/// Read a corpus (known name or file) as text; errors for a missing or empty one.
pub fn read_corpus(spec: &str, progress: &mut dyn Progress) -> Result<(PathBuf, String)> {
    #[cfg(feature = "fetch")]
    let path = crate::io::corpus::resolve_corpus(spec, progress)?;
    #[cfg(not(feature = "fetch"))]
    let path = {
        let _ = progress;
        let p = PathBuf::from(spec);
        if !p.is_file() {
            return Err(Error::Argument(format!(
                "corpus '{spec}' is not a file, and this build of lucent has no `fetch` feature to fetch a known corpus"
            )));
        }
        p
    };
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    if text.trim().is_empty() {
        return Err(Error::Argument(format!(
            "the corpus {} is empty; give a text file with some text in it",
            path.display()
        )));
    }
    Ok((path, text))
}

/// A run in memory: config, model, optimiser, data, progress.
struct Run {
    config: TrainConfig,
    net: Net,
    opt: AdamW,
    data: Data,
    step: u64,
    history: Vec<Metrics>,
    out: PathBuf,
}

/// Train from scratch, writing into `out`.
pub fn train(
    config: TrainConfig,
    out: &Path,
    limits: Limits,
    observer: &mut dyn Observer,
    progress: &mut dyn Progress,
) -> Result<Summary> {
    config.check()?;
    let mut config = config;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let mut init_rng = StdRng::seed_from_u64(config.seed);
    let (net, data) = match config.job.clone() {
        Job::Lm {
            corpus,
            tokenizer,
            bpe_vocab,
        } => {
            let (_, text) = read_corpus(&corpus, progress)?;
            observer.message(&format!(
                "tokenising the corpus ({} characters, {tokenizer})",
                text.chars().count()
            ));
            let tok = match tokenizer.as_str() {
                "char" => TextTokenizer::Char(CharTokenizer::fit(&text)),
                "bpe" => TextTokenizer::train_bpe(&text, bpe_vocab)?,
                other => {
                    return Err(Error::Argument(format!(
                        "unknown --tokenizer '{other}'; choose char or bpe"
                    )))
                }
            };
            let ids = tok.encode(&text)?;
            let stream = TokenStream::split(ids, config.block)?;
            tok.save(out)?;
            let gpt = new_gpt(&dims_of(&config, tok.vocab_size()), &mut init_rng)?;
            (
                Net::Lm(gpt),
                Data::Lm {
                    stream,
                    tokenizer: tok,
                },
            )
        }
        Job::Seq2Seq {
            task,
            symbols,
            min_len,
            max_len,
            test_size,
        } => {
            config.block = 2 * max_len + 8;
            let vocab = task.vocab_size(symbols);
            let s2s = new_seq2seq(&dims_of(&config, vocab), &mut init_rng)?;
            (
                Net::Seq2Seq(s2s),
                seq2seq_data(task, symbols, min_len, max_len, test_size, config.seed),
            )
        }
    };
    let opt = AdamW::new(
        config.lr,
        (0.9, config.beta2),
        1e-8,
        config.weight_decay,
        DecayRule::MatricesOnly,
    );
    let mut run = Run {
        config,
        net,
        opt,
        data,
        step: 0,
        history: Vec::new(),
        out: out.to_path_buf(),
    };
    run.net.params().requires_grad();
    run.go(limits, observer)
}

fn seq2seq_data(
    task: Task,
    symbols: usize,
    min_len: usize,
    max_len: usize,
    test_size: usize,
    seed: u64,
) -> Data {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x07E5_75E7);
    let mut held_out = HashSet::new();
    let mut test = Vec::new();
    let mut tries = 0;
    while test.len() < test_size && tries < test_size * 20 {
        tries += 1;
        let ex = task.example(symbols, min_len, max_len, &mut rng);
        if held_out.insert(ex.0.clone()) {
            test.push(ex);
        }
    }
    Data::Seq2Seq { test, held_out }
}

/// Continue the run saved in `dir` (its checkpoint, config and tokenizer), writing into
/// `out` (default: `dir`). `steps` extends the schedule when given.
pub fn resume(
    dir: &Path,
    out: Option<&Path>,
    steps: Option<u64>,
    limits: Limits,
    observer: &mut dyn Observer,
    progress: &mut dyn Progress,
) -> Result<Summary> {
    let path = dir.join(CHECKPOINT);
    let ck = checkpoint::load(&path)?;
    let mut config: TrainConfig = serde_json::from_str(ck.meta("config", &path)?)
        .map_err(|e| Error::format(&path, format!("bad config in the checkpoint: {e}")))?;
    let step: u64 = ck
        .meta("step", &path)?
        .parse()
        .map_err(|e| Error::format(&path, format!("bad step in the checkpoint: {e}")))?;
    if let Some(s) = steps {
        config.steps = s;
    }
    let out = out.unwrap_or(dir).to_path_buf();
    std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
    let mut model = TrainedModel::from_checkpoint(dir, &ck, &path)?;
    let data = match (&config.job, &model) {
        (Job::Lm { corpus, .. }, TrainedModel::Lm { tokenizer, .. }) => {
            let (_, text) = read_corpus(corpus, progress)?;
            let stream = TokenStream::split(tokenizer.encode(&text)?, config.block)?;
            if out != dir {
                tokenizer.save(&out)?;
            }
            Data::Lm {
                stream,
                tokenizer: tokenizer.clone(),
            }
        }
        (
            Job::Seq2Seq {
                task,
                symbols,
                min_len,
                max_len,
                test_size,
            },
            _,
        ) => seq2seq_data(*task, *symbols, *min_len, *max_len, *test_size, config.seed),
        _ => {
            return Err(Error::format(
                &path,
                "checkpoint's config and model kinds disagree",
            ))
        }
    };
    let net = match &mut model {
        TrainedModel::Lm { model, .. } => Net::Lm(model.clone()),
        TrainedModel::Seq2Seq { model, .. } => Net::Seq2Seq(model.clone()),
    };
    let mut opt = AdamW::new(
        config.lr,
        (0.9, config.beta2),
        1e-8,
        config.weight_decay,
        DecayRule::MatricesOnly,
    );
    opt.load_state(step, &ck.tensors);
    let history_path = dir.join("history.json");
    let history: Vec<Metrics> = match std::fs::read_to_string(&history_path) {
        Ok(s) => {
            serde_json::from_str(&s).map_err(|e| Error::format(&history_path, e.to_string()))?
        }
        Err(_) => Vec::new(),
    };
    let history = history.into_iter().filter(|m| m.step <= step).collect();
    let mut run = Run {
        config,
        net,
        opt,
        data,
        step,
        history,
        out,
    };
    run.net.params().requires_grad();
    run.go(limits, observer)
}

impl Run {
    fn go(&mut self, limits: Limits, observer: &mut dyn Observer) -> Result<Summary> {
        let started = Instant::now();
        let schedule = self.config.schedule();
        let parameters = self.net.params().num_parameters();
        observer.start(self.step, self.config.steps);
        let mut train_time = 0.0f64;
        let mut tokens = 0usize;
        let mut last_saved = None;
        let first_step = self.step;
        let budget = limits
            .minutes
            .filter(|_| limits.fit_to_time)
            .map(|m| m * 60.0);
        let mut schedule = schedule;
        while self.step < self.config.steps {
            if let Some(budget) = budget {
                let done = self.step - first_step;
                let elapsed = started.elapsed().as_secs_f64();
                let calibrated = done == CALIBRATION_STEPS
                    || (done > CALIBRATION_STEPS
                        && self.step.is_multiple_of(self.config.eval_every)
                        && elapsed < budget / 2.0);
                if calibrated {
                    // Seconds per step so far (evaluations included), and the steps that
                    // fit what is left of the budget (3% kept for the last evaluation).
                    let per_step = elapsed / done as f64;
                    let fit = self.step + ((budget * 0.97 - elapsed) / per_step).max(1.0) as u64;
                    if fit != self.config.steps {
                        self.config.steps = fit;
                        schedule = self.config.schedule();
                        observer.message(&format!(
                            "time budget: {:.1} s per step so far, schedule fitted to {fit} steps",
                            per_step
                        ));
                    }
                }
            }
            if limits.stop_after.is_some_and(|s| self.step >= s) {
                break;
            }
            if limits
                .minutes
                .is_some_and(|m| started.elapsed().as_secs_f64() >= m * 60.0)
            {
                observer.message(&format!("time budget reached after step {}", self.step));
                break;
            }
            let t = self.step;
            let lr = schedule.lr_at(t);
            self.opt.lr = lr;
            let t0 = Instant::now();
            let (loss, n_tokens) = self.train_step(t)?;
            train_time += t0.elapsed().as_secs_f64();
            tokens += n_tokens;
            self.step += 1;
            let mut m = Metrics {
                step: self.step,
                total_steps: self.config.steps,
                train_loss: loss,
                val_loss: None,
                val_ppl: None,
                exact_match: None,
                tok_s: (tokens as f64 / train_time.max(1e-9)) as f32,
                lr,
                elapsed_s: started.elapsed().as_secs_f32(),
            };
            let eval =
                self.step.is_multiple_of(self.config.eval_every) || self.step == self.config.steps;
            if eval {
                self.evaluate(&mut m)?;
            }
            observer.step(&m);
            self.history.push(m);
            if eval {
                self.save()?;
                last_saved = Some(self.step);
            }
        }
        if last_saved != Some(self.step) {
            // Stopped between evaluations: evaluate and save where we are.
            if let Some(last) = self.history.last_mut() {
                if last.step == self.step && last.val_loss.is_none() {
                    let mut m = last.clone();
                    self.evaluate(&mut m)?;
                    observer.step(&m);
                    if let Some(last) = self.history.last_mut() {
                        *last = m;
                    }
                }
            }
            self.save()?;
        }
        #[cfg(feature = "viz")]
        let plot = super::plot::loss_curve(&self.history, &self.out.join("loss.png")).ok();
        #[cfg(not(feature = "viz"))]
        let plot: Option<()> = None;
        Ok(Summary {
            step: self.step,
            history: self.history.clone(),
            checkpoint: self.out.join(CHECKPOINT),
            plot: plot.map(|_| self.out.join("loss.png")),
            parameters,
        })
    }

    /// One optimisation step at step index `t`; returns (loss, tokens).
    fn train_step(&mut self, t: u64) -> Result<(f32, usize)> {
        let mut rng = step_rng(self.config.seed, t);
        let (loss, n_tokens) = match (&self.net, &self.data) {
            (Net::Lm(m), Data::Lm { stream, .. }) => {
                let (x, y) = random_batch(
                    &stream.train,
                    self.config.batch,
                    self.config.block,
                    &mut rng,
                );
                // Seeded per step, like the batch, so resuming stays exact.
                let dropout = (self.config.dropout > 0.0).then(|| {
                    (
                        self.config.dropout,
                        self.config.seed ^ t.wrapping_mul(0xA24B_AED4_963E_E407),
                    )
                });
                let value = lm_backward(m, &x, &y, dropout)?;
                (Loss::Done(value), self.config.batch * self.config.block)
            }
            (Net::Seq2Seq(m), Data::Seq2Seq { held_out, .. }) => {
                let Job::Seq2Seq {
                    task,
                    symbols,
                    min_len,
                    max_len,
                    ..
                } = self.config.job
                else {
                    return Err(Error::Training(
                        "seq2seq model with a language-model config".into(),
                    ));
                };
                let mut examples = Vec::with_capacity(self.config.batch);
                while examples.len() < self.config.batch {
                    let ex = task.example(symbols, min_len, max_len, &mut rng);
                    if !held_out.contains(&ex.0) {
                        examples.push(ex);
                    }
                }
                let b = pad_batch(&examples);
                let n = b.src.iter().map(Vec::len).sum::<usize>()
                    + b.tgt_in.iter().map(Vec::len).sum::<usize>();
                (
                    Loss::Pending(seq2seq_loss(m, &b.src, &b.tgt_in, &b.tgt_out, data::PAD)?),
                    n,
                )
            }
            _ => return Err(Error::Training("model and data kinds disagree".into())),
        };
        let value = match &loss {
            Loss::Done(v) => *v,
            Loss::Pending(l) => l.item()?,
        };
        if !value.is_finite() {
            return Err(Error::Training(format!(
                "the loss became {value} at step {} (learning rate {}); lower --lr or keep gradient clipping on, and resume from the last checkpoint",
                t + 1,
                self.opt.lr
            )));
        }
        if let Loss::Pending(l) = loss {
            l.backward()?;
        }
        let params = self.net.params();
        if self.config.grad_clip > 0.0 {
            clip_grad_norm(params, self.config.grad_clip);
        }
        self.opt.step(params)?;
        params.zero_grad();
        Ok((value, n_tokens))
    }

    fn evaluate(&mut self, m: &mut Metrics) -> Result<()> {
        no_grad(|| {
            match (&self.net, &self.data) {
                (Net::Lm(model), Data::Lm { stream, .. }) => {
                    let loss = lm_val_loss(
                        model,
                        &stream.val,
                        self.config.block,
                        self.config.batch,
                        self.config.eval_windows,
                    )?;
                    m.val_loss = Some(loss);
                    m.val_ppl = Some(loss.exp());
                }
                (Net::Seq2Seq(model), Data::Seq2Seq { test, .. }) => {
                    let (loss, em) = seq2seq_eval(model, test)?;
                    m.val_loss = Some(loss);
                    m.exact_match = Some(em);
                }
                _ => return Err(Error::Training("model and data kinds disagree".into())),
            }
            Ok(())
        })
    }

    fn save(&mut self) -> Result<()> {
        let mut tensors: Vec<(String, Tensor)> = self
            .net
            .params()
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (n, t.detach()))
            .collect();
        tensors.extend(self.opt.state_tensors()?);
        let mut meta = HashMap::new();
        meta.insert("format".into(), "lucent-train-1".into());
        meta.insert(
            "kind".into(),
            match self.net {
                Net::Lm(_) => "lm",
                Net::Seq2Seq(_) => "seq2seq",
            }
            .into(),
        );
        meta.insert("step".into(), self.step.to_string());
        meta.insert(
            "config".into(),
            serde_json::to_string(&self.config).map_err(|e| Error::Training(e.to_string()))?,
        );
        meta.insert(
            "rng".into(),
            format!(
                "{{\"seed\": {}, \"next_step\": {}}}",
                self.config.seed, self.step
            ),
        );
        if let Data::Lm { tokenizer, .. } = &self.data {
            meta.insert("tokenizer".into(), tokenizer.kind().into());
        }
        checkpoint::save(&self.out.join(CHECKPOINT), &tensors, meta)?;
        let history_path = self.out.join("history.json");
        let json =
            serde_json::to_string(&self.history).map_err(|e| Error::Training(e.to_string()))?;
        std::fs::write(&history_path, json).map_err(|e| Error::io(&history_path, e))
    }
}

/// A training step's loss: already back-propagated (the language model's data-parallel
/// step) or still to be.
enum Loss {
    Done(f32),
    Pending(Tensor),
}

/// Forward and backward of the GPT's mean cross-entropy over a batch, data-parallel: the
/// rows are split into one contiguous shard per kernel thread (see
/// [`crate::autograd::backward_sharded`]), each weighted by its share of the rows, so the
/// gradients that accumulate in the parameters are those of the whole batch's mean.
/// `dropout` is (probability, seed); shard i draws its masks from `seed ^ i·K`. Returns the
/// batch's mean loss. With one thread this is exactly `loss(...)` then `backward()`.
pub fn lm_backward(
    model: &DecoderModel,
    x: &[Vec<usize>],
    y: &[Vec<usize>],
    dropout: Option<(f32, u64)>,
) -> Result<f32> {
    lm_backward_shards(model, x, y, dropout, crate::threads::threads())
}

/// [`lm_backward`] with a given number of shards (at most one per row).
pub fn lm_backward_shards(
    model: &DecoderModel,
    x: &[Vec<usize>],
    y: &[Vec<usize>],
    dropout: Option<(f32, u64)>,
    shards: usize,
) -> Result<f32> {
    let rows = x.len();
    let shards = shards.clamp(1, rows.max(1));
    let range = |i: usize| i * rows / shards..(i + 1) * rows / shards;
    let losses = crate::autograd::backward_sharded(shards, |i| {
        let r = range(i);
        let weight = r.len() as f32 / rows as f32;
        let loss = match dropout {
            Some((p, seed)) => {
                let mut d = Dropout::new(p, seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
                lm_loss(model, &x[r.clone()], &y[r], Some(&mut d))?
            }
            None => lm_loss(model, &x[r.clone()], &y[r], None)?,
        };
        Ok((loss, weight))
    })?;
    Ok((0..shards)
        .map(|i| losses[i] * range(i).len() as f32 / rows as f32)
        .sum())
}

/// Mean next-token loss over evenly spaced validation windows.
pub fn lm_val_loss(
    model: &DecoderModel,
    val: &[usize],
    block: usize,
    batch: usize,
    windows: usize,
) -> Result<f32> {
    let (x, y) = eval_windows(val, block, windows.max(1));
    let (mut total, mut n) = (0.0f64, 0usize);
    for (xc, yc) in x.chunks(batch.max(1)).zip(y.chunks(batch.max(1))) {
        let l = no_grad(|| lm_loss(model, xc, yc, None))?.item()?;
        total += l as f64 * xc.len() as f64;
        n += xc.len();
    }
    Ok((total / n.max(1) as f64) as f32)
}

/// (teacher-forced loss, greedy exact-match accuracy) on held-out examples.
pub fn seq2seq_eval(
    model: &EncoderDecoderModel,
    test: &[(Vec<usize>, Vec<usize>)],
) -> Result<(f32, f32)> {
    let (mut total, mut n, mut exact) = (0.0f64, 0usize, 0usize);
    for chunk in test.chunks(100) {
        let b = pad_batch(chunk);
        let l =
            no_grad(|| seq2seq_loss(model, &b.src, &b.tgt_in, &b.tgt_out, data::PAD))?.item()?;
        total += l as f64 * chunk.len() as f64;
        n += chunk.len();
        // Greedy decoding of the padded batch (padding is masked out).
        let max_len = chunk.iter().map(|e| e.1.len()).max().unwrap_or(0) + 2;
        let lens = src_lengths(&b.src);
        let out = model.greedy(&b.src, Some(&lens), data::BOS, data::EOS, max_len)?;
        exact += out.iter().zip(chunk).filter(|(o, ex)| **o == ex.1).count();
    }
    Ok((
        (total / n.max(1) as f64) as f32,
        exact as f32 / n.max(1) as f32,
    ))
}
