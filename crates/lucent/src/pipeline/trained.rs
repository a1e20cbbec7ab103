//! Generation from a training run: a trained language model joins the common
//! generation loop ([`Generator`]) as a [`TextModel`]; a trained encoder-decoder decodes
//! its task's input greedily.

use std::path::Path;
use std::sync::Arc;

use crate::pipeline::generate::{Sampling, TextModel};
use crate::pipeline::Generator;
use crate::train::run::greedy_one;
use crate::train::TrainedModel;
use crate::{Error, Result};

impl TrainedModel {
    /// The language model as a [`TextModel`] for the generation loop (no chat
    /// template: it was trained on plain text). Errors for an encoder-decoder.
    pub fn text_model(&self, path: &Path) -> Result<TextModel> {
        match self {
            TrainedModel::Lm { model, tokenizer } => Ok(TextModel {
                path: path.to_path_buf(),
                model: model.clone(),
                tokenizer: Arc::new(tokenizer.clone()),
                template: None,
                add_bos: false,
                special_texts: Default::default(),
                vocabulary: Default::default(),
            }),
            TrainedModel::Seq2Seq { .. } => Err(Error::Argument(format!(
                "{} is an encoder-decoder trained on a task; it transforms an input (lucent train sample) \
                 rather than continue a text",
                path.display()
            ))),
        }
    }

    /// Continue `prompt` by `n` tokens sampled at `temperature` (0: greedy) with `seed`
    /// (language model), or decode `prompt` greedily (encoder-decoder). Returns the
    /// prompt followed by the generated text (LM) or the output (seq2seq).
    pub fn sample(&self, prompt: &str, n: usize, temperature: f32, seed: u64) -> Result<String> {
        match self {
            TrainedModel::Lm { .. } => {
                let tm = self.text_model(Path::new("<trained>"))?;
                let mut gen = Generator::new(Arc::new(tm));
                let sampling = Sampling {
                    context_shift: true,
                    ..Sampling::greedy()
                        .temperature(temperature)
                        .seed(seed)
                        .max_tokens(n)
                };
                let text = gen.complete(prompt, &sampling)?;
                Ok(format!("{prompt}{text}"))
            }
            TrainedModel::Seq2Seq {
                model,
                task,
                symbols,
                ..
            } => {
                let (_, out) = greedy_one(model, *task, *symbols, prompt)?;
                Ok(task.render(*symbols, &out))
            }
        }
    }
}
