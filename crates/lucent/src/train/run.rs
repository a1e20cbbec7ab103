//! A finished (or interrupted) training run, loaded back from its folder: the network
//! with its tokenizer (language model) or its task (encoder-decoder), for sampling,
//! inspecting cross-attention and resuming. Generation through the common loop
//! (`text_model`, `sample`) is added by `pipeline::trained`, one level up.

use std::path::Path;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::checkpoint;
use super::data::{self, Task, TextTokenizer};
use super::models::{new_gpt, new_seq2seq};
use super::params::Parameters;
use super::trainer::{dims_of, Job, TrainConfig, CHECKPOINT};
use crate::autograd::no_grad;
use crate::model::{DecoderModel, EncoderDecoderModel};
use crate::nn::Trace;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A trained model loaded from a run's folder, for sampling and inspection.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // one per process, never in a collection
pub enum TrainedModel {
    /// A language model with its tokenizer.
    Lm {
        /// The network.
        model: DecoderModel,
        /// Its tokenizer.
        tokenizer: TextTokenizer,
    },
    /// An encoder-decoder with its task.
    Seq2Seq {
        /// The network.
        model: EncoderDecoderModel,
        /// The task it learned.
        task: Task,
        /// Its number of symbols.
        symbols: usize,
    },
}

impl TrainedModel {
    /// Load `dir/model.safetensors` (and the tokenizer beside it).
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(CHECKPOINT);
        let ck = checkpoint::load(&path)?;
        TrainedModel::from_checkpoint(dir, &ck, &path)
    }

    pub(crate) fn from_checkpoint(
        dir: &Path,
        ck: &checkpoint::Loaded,
        path: &Path,
    ) -> Result<Self> {
        let config: TrainConfig = serde_json::from_str(ck.meta("config", path)?)
            .map_err(|e| Error::format(path, format!("bad config in the checkpoint: {e}")))?;
        let mut rng = StdRng::seed_from_u64(0);
        let fill = |params: &mut dyn Parameters| -> Result<()> {
            let mut err = Ok(());
            params.visit_params("", &mut |name, t| {
                if err.is_err() {
                    return;
                }
                match ck.tensor(name, path) {
                    Ok(saved) if saved.shape() == t.shape() => *t = saved.clone(),
                    Ok(saved) => {
                        err = Err(Error::format(
                            path,
                            format!(
                                "tensor {name} has shape {:?}, the config makes {:?}",
                                saved.shape(),
                                t.shape()
                            ),
                        ))
                    }
                    Err(e) => err = Err(e),
                }
            });
            err
        };
        match &config.job {
            Job::Lm { .. } => {
                let kind = ck.meta("tokenizer", path)?;
                let tokenizer = TextTokenizer::load(dir, kind)?;
                let mut model = new_gpt(&dims_of(&config, tokenizer.vocab_size()), &mut rng)?;
                fill(&mut model)?;
                Ok(TrainedModel::Lm { model, tokenizer })
            }
            Job::Seq2Seq { task, symbols, .. } => {
                let mut model =
                    new_seq2seq(&dims_of(&config, task.vocab_size(*symbols)), &mut rng)?;
                fill(&mut model)?;
                Ok(TrainedModel::Seq2Seq {
                    model,
                    task: *task,
                    symbols: *symbols,
                })
            }
        }
    }

    /// The encoder-decoder's cross-attention while it decodes `input` greedily: for
    /// each decoder layer, the weights averaged over heads, (output tokens, input
    /// tokens), with the input and output symbols as labels.
    pub fn cross_attention(&self, input: &str) -> Result<(Vec<Tensor>, Vec<String>, Vec<String>)> {
        let mut trace = Trace::only(&["weights"]);
        let (src, out) = self.trace_seq2seq(input, &mut trace)?;
        let layers = match self {
            TrainedModel::Seq2Seq { model, .. } => model.transformer.decoder.layers.len(),
            TrainedModel::Lm { .. } => 0,
        };
        let mut maps = Vec::new();
        for i in 0..layers {
            let name = format!("decoder.layer.{i}.cross_attn.weights");
            let w = trace
                .get(&name)
                .ok_or_else(|| Error::Training(format!("the trace holds no {name}")))?;
            let [_, h, tq, tk] = w.dims()?;
            let mut mean = vec![0.0f32; tq * tk];
            for hi in 0..h {
                for (m, &x) in mean
                    .iter_mut()
                    .zip(&w.data()[hi * tq * tk..(hi + 1) * tq * tk])
                {
                    *m += x / h as f32;
                }
            }
            maps.push(Tensor::new(mean, &[tq, tk])?);
        }
        Ok((maps, out, src))
    }

    /// Decode `input` greedily with the encoder-decoder, then run the teacher-forced
    /// pass over its own answer into `trace` (encoder and decoder, cross-attention
    /// included). Returns the input's symbols and the output's (ending with `<eos>`),
    /// as labels for the encoder's and the decoder's positions.
    pub fn trace_seq2seq(
        &self,
        input: &str,
        trace: &mut Trace,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let TrainedModel::Seq2Seq {
            model,
            task,
            symbols,
            ..
        } = self
        else {
            return Err(Error::Argument(
                "cross-attention belongs to encoder-decoder models; this one is a language model"
                    .into(),
            ));
        };
        let (src, out) = greedy_one(model, *task, *symbols, input)?;
        let tgt_in: Vec<usize> = [&[data::BOS], out.as_slice()].concat();
        no_grad(|| {
            model.forward(
                std::slice::from_ref(&src),
                std::slice::from_ref(&tgt_in),
                None,
                Some(trace),
            )
        })?;
        let render = |ids: &[usize]| -> Vec<String> {
            ids.iter().map(|&i| task.render(*symbols, &[i])).collect()
        };
        let mut rows: Vec<String> = render(&out);
        rows.push("<eos>".into());
        Ok((render(&src), rows))
    }
}

/// Parse `input` for `task` and decode it greedily with the KV cache (room for twice
/// the input and a few more tokens). Returns the input's ids and the output's.
pub(crate) fn greedy_one(
    model: &EncoderDecoderModel,
    task: Task,
    symbols: usize,
    input: &str,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let src = task.parse_input(symbols, input)?;
    let mut out = model.greedy(
        std::slice::from_ref(&src),
        None,
        data::BOS,
        data::EOS,
        src.len() * 2 + 4,
    )?;
    let out = out
        .pop()
        .ok_or_else(|| Error::Training("greedy decoding returned no sequence".into()))?;
    Ok((src, out))
}
