//! `Generator` and `TokenStream`: text from a decoder model ([`lucent::Generator`]).
//!
//! A `Generator` holds the loaded model ([`TextModel`], shared); every call makes its
//! own [`lucent::Generator`] (its own KV cache), so calls from several Python threads
//! run at once. `generate` returns the whole result; `stream` runs the generation on a
//! thread of its own and hands its text pieces over a bounded channel, one per
//! `__next__` (the GIL is released while waiting). Dropping the stream stops the
//! generation at its next piece.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};

use lucent::pipeline::{Constraint, Message, TextModel, TokenLogprob};
use lucent::{Generation, Sampling};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::{OrPy, Threads};

/// Pieces a stream may run ahead of its reader.
const STREAM_AHEAD: usize = 16;

/// A decoder model ready to write text: tokenizer, chat template, generation.
#[pyclass(module = "lucent._lucent", frozen)]
pub struct Generator {
    model: Arc<TextModel>,
    name: String,
    threads: Threads,
}

/// What one step of a stream hands over.
enum Event {
    /// Text that became final, with the tokens produced since the last piece and their
    /// log-probabilities (if asked for).
    Piece {
        text: String,
        ids: Vec<u32>,
        logprobs: Vec<TokenLogprob>,
    },
    /// The end: OpenAI's finish reason, the prompt's and the new tokens' counts.
    End {
        finish_reason: &'static str,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// lucent's error message.
    Error(String),
}

/// The sampler settings as lucent's [`Sampling`] (one place for every call).
#[allow(clippy::too_many_arguments)]
fn sampling(
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    repeat_last_n: usize,
    presence_penalty: f32,
    frequency_penalty: f32,
    seed: u64,
    max_tokens: usize,
    stop: Vec<String>,
    logprobs: Option<usize>,
    logit_bias: Vec<(u32, f32)>,
    constraint: Option<(String, String)>,
) -> lucent::Result<Sampling> {
    let constrain = match constraint {
        None => None,
        Some((kind, text)) => Some(match kind.as_str() {
            "json_schema" => Constraint::json_schema_str(&text)?,
            "json_object" => Constraint::JsonObject,
            "lark" => Constraint::Lark(text),
            "regex" => Constraint::Regex(text),
            other => {
                return Err(lucent::Error::Argument(format!(
                    "constraint kind {other:?}: give json_schema, json_object, lark or regex"
                )))
            }
        }),
    };
    let s = Sampling {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        repeat_last_n,
        presence_penalty,
        frequency_penalty,
        seed,
        max_tokens,
        stop,
        logprobs,
        logit_bias,
        constrain,
        ..Sampling::greedy()
    };
    s.validate()?;
    Ok(s)
}

/// `[(id, logprob, [(id, logprob), …]), …]`.
fn logprob_list<'py>(py: Python<'py>, lps: &[TokenLogprob]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        lps.iter()
            .map(|lp| (lp.id, lp.logprob, lp.top.clone()))
            .collect::<Vec<_>>(),
    )
}

#[pymethods]
impl Generator {
    /// Open a decoder by name (`smollm2`, `gemma3`; fetched on first use) or path (a
    /// `.gguf` file, a `lucent train` run, a Hugging Face GPT-2 folder). `n_threads`:
    /// a runtime of that many kernel threads for this model alone (None: lucent's
    /// default).
    #[new]
    #[pyo3(signature = (name_or_path, n_threads = None))]
    fn new(py: Python<'_>, name_or_path: String, n_threads: Option<usize>) -> PyResult<Self> {
        let threads = Threads::new(n_threads)?;
        let (model, name) = py
            .detach(|| -> lucent::Result<_> {
                let m = lucent::open(&name_or_path)?;
                Ok((m.text_model()?, m.name().to_string()))
            })
            .or_py()?;
        Ok(Generator {
            model,
            name,
            threads,
        })
    }

    /// The kernel threads this model's calls use.
    #[getter]
    fn n_threads(&self) -> usize {
        self.threads.count()
    }

    /// The name it was opened by.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The file or folder it was loaded from.
    #[getter]
    fn path(&self) -> String {
        self.model.path.display().to_string()
    }

    /// The model's context: the most positions (prompt + new tokens) it reads.
    #[getter]
    fn n_ctx(&self) -> usize {
        self.model.model.config.max_positions
    }

    /// Vocabulary size V.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.model.model.config.vocab_size
    }

    /// Model width d.
    #[getter]
    fn n_embd(&self) -> usize {
        self.model.model.config.d_model
    }

    /// Whether a raw prompt starts with the BOS token (as the model's file says).
    #[getter]
    fn add_bos(&self) -> bool {
        self.model.add_bos
    }

    /// Whether the model has a chat template (instruct models).
    #[getter]
    fn has_chat_template(&self) -> bool {
        self.model.template.is_some()
    }

    /// Ids of `text`: BOS first if `add_bos` and the model wants it; with `special`,
    /// special-token text (`<|im_start|>`) becomes its token.
    #[pyo3(signature = (text, add_bos = true, special = false))]
    fn tokenize(
        &self,
        py: Python<'_>,
        text: String,
        add_bos: bool,
        special: bool,
    ) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        py.detach(move || {
            model
                .tokenizer
                .encode_ids(&text, add_bos && model.add_bos, special)
        })
        .or_py()
    }

    /// Ids of a raw prompt as generation reads it (special-token text parsed, BOS as
    /// the model wants).
    fn prompt_ids(&self, py: Python<'_>, prompt: String) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        py.detach(move || model.encode(&prompt)).or_py()
    }

    /// Ids of a conversation `[(role, content), …]` through the model's chat template,
    /// ending with the assistant's cue.
    fn chat_ids(&self, py: Python<'_>, messages: Vec<(String, String)>) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        py.detach(move || {
            let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
            model.encode_chat(&msgs)
        })
        .or_py()
    }

    /// The bytes of `ids` (special tokens as their text with `special`, else nothing).
    #[pyo3(signature = (ids, special = false))]
    fn detokenize<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<u32>,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut bytes = Vec::new();
        for id in ids {
            bytes.extend(self.model.tokenizer.token_bytes(id, !special).or_py()?);
        }
        Ok(PyBytes::new(py, &bytes))
    }

    /// Whether `id` is a special (control) token.
    fn is_special(&self, id: u32) -> bool {
        self.model.tokenizer.is_special(id)
    }

    /// Whether generating `id` ends the text (EOS, `<|im_end|>`, …).
    fn is_end_of_generation(&self, id: u32) -> bool {
        self.model.tokenizer.is_end_of_generation(id)
    }

    /// The vocabulary's piece of `id` (`"Ġcat"`), if any.
    fn token_piece(&self, id: u32) -> Option<String> {
        self.model.tokenizer.token_piece(id)
    }

    /// Generate after `prompt_ids`: a dict with `prompt_ids`, `ids`, `text`,
    /// `finish_reason` (`stop` or `length`), `stop` (why, in words), `logprobs`
    /// (`[(id, logprob, [(id, logprob), …]), …]` when `logprobs` is a number) and
    /// `timings`. `logit_bias`: `[(id, bias), …]` added to the logits first (-100
    /// bans); `constraint`: `(kind, text)` with kind `json_schema` (the schema as JSON
    /// text), `json_object`, `lark` or `regex` (structured outputs). The GIL is released
    /// while it runs.
    #[pyo3(signature = (prompt_ids, *, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05,
        repeat_penalty = 1.0, repeat_last_n = 64, presence_penalty = 0.0, frequency_penalty = 0.0,
        seed = 0, max_tokens = 128, stop = Vec::new(), logprobs = None, logit_bias = Vec::new(),
        constraint = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt_ids: Vec<u32>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: usize,
        presence_penalty: f32,
        frequency_penalty: f32,
        seed: u64,
        max_tokens: usize,
        stop: Vec<String>,
        logprobs: Option<usize>,
        logit_bias: Vec<(u32, f32)>,
        constraint: Option<(String, String)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = sampling(
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            repeat_last_n,
            presence_penalty,
            frequency_penalty,
            seed,
            max_tokens,
            stop,
            logprobs,
            logit_bias,
            constraint,
        )
        .or_py()?;
        let model = self.model.clone();
        let threads = self.threads.clone();
        let g: Generation = py
            .detach(move || {
                threads.run(move || {
                    let mut gen = lucent::Generator::new(model);
                    gen.generate(&prompt_ids, &s, &mut |_| {})
                })
            })
            .or_py()?;
        let out = PyDict::new(py);
        out.set_item("prompt_ids", &g.prompt_ids)?;
        out.set_item("ids", &g.ids)?;
        out.set_item("text", &g.text)?;
        out.set_item("finish_reason", g.stop.finish_reason())?;
        out.set_item("stop", g.stop.to_string())?;
        out.set_item("logprobs", logprob_list(py, &g.logprobs)?)?;
        let timings = PyDict::new(py);
        timings.set_item("prefill_s", g.prefill_secs)?;
        timings.set_item("decode_s", g.decode_secs)?;
        timings.set_item("prefill_tok_s", g.prefill_tok_s())?;
        timings.set_item("decode_tok_s", g.decode_tok_s())?;
        out.set_item("timings", timings)?;
        Ok(out)
    }

    /// Like `generate`, piece by piece: an iterator of dicts `{"text", "ids",
    /// "logprobs"}` (each text whole characters, none part of a stop string), then one
    /// `{"finish_reason", "prompt_tokens", "completion_tokens"}`.
    #[pyo3(signature = (prompt_ids, *, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05,
        repeat_penalty = 1.0, repeat_last_n = 64, presence_penalty = 0.0, frequency_penalty = 0.0,
        seed = 0, max_tokens = 128, stop = Vec::new(), logprobs = None, logit_bias = Vec::new(),
        constraint = None))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        prompt_ids: Vec<u32>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: usize,
        presence_penalty: f32,
        frequency_penalty: f32,
        seed: u64,
        max_tokens: usize,
        stop: Vec<String>,
        logprobs: Option<usize>,
        logit_bias: Vec<(u32, f32)>,
        constraint: Option<(String, String)>,
    ) -> PyResult<TokenStream> {
        let s = sampling(
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            repeat_last_n,
            presence_penalty,
            frequency_penalty,
            seed,
            max_tokens,
            stop,
            logprobs,
            logit_bias,
            constraint,
        )
        .or_py()?;
        let model = self.model.clone();
        let threads = self.threads.clone();
        let (tx, rx) = sync_channel(STREAM_AHEAD);
        std::thread::Builder::new()
            .name("lucent-stream".into())
            .spawn(move || {
                let mut gen = lucent::Generator::new(model);
                // Each step runs in the model's runtime; waiting for the reader does not
                // hold one of its threads.
                let mut stream = match threads.run(|| gen.stream_ids(&prompt_ids, &s)) {
                    Ok(st) => st,
                    Err(e) => {
                        let _ = tx.send(Event::Error(e.to_string()));
                        return;
                    }
                };
                let (mut ids_sent, mut lps_sent) = (0, 0);
                loop {
                    let event = match threads.run(|| stream.next()) {
                        Some(Ok(text)) => {
                            let ids = stream.ids()[ids_sent..].to_vec();
                            let lps = stream.logprobs()[lps_sent..].to_vec();
                            ids_sent += ids.len();
                            lps_sent += lps.len();
                            Event::Piece {
                                text,
                                ids,
                                logprobs: lps,
                            }
                        }
                        Some(Err(e)) => Event::Error(e.to_string()),
                        None => Event::End {
                            finish_reason: stream
                                .stop_reason()
                                .map_or("length", |r| r.finish_reason()),
                            prompt_tokens: prompt_ids.len(),
                            completion_tokens: stream.ids().len(),
                        },
                    };
                    let last = !matches!(event, Event::Piece { .. });
                    if tx.send(event).is_err() || last {
                        return; // the reader is gone, or this was the end
                    }
                }
            })
            .map_err(|e| {
                crate::LucentError::new_err(format!("cannot start a generation thread: {e}"))
            })?;
        Ok(TokenStream {
            rx: Mutex::new(Some(rx)),
        })
    }
}

/// The pieces of a generation as they are produced (see `Generator.stream`).
#[pyclass(module = "lucent._lucent", frozen)]
pub struct TokenStream {
    /// The generation thread's channel; `None` once it ended or was closed.
    rx: Mutex<Option<Receiver<Event>>>,
}

impl TokenStream {
    /// The channel, taken out while one reader waits on it (`None`: ended, closed, or
    /// another thread is reading this stream).
    fn take(&self) -> Option<Receiver<Event>> {
        self.rx.lock().ok().and_then(|mut rx| rx.take())
    }
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(rx) = self.take() else {
            return Ok(None);
        };
        let (event, rx) = py.detach(move || (rx.recv(), rx));
        let out = PyDict::new(py);
        match event {
            Ok(Event::Piece {
                text,
                ids,
                logprobs,
            }) => {
                out.set_item("text", text)?;
                out.set_item("ids", ids)?;
                out.set_item("logprobs", logprob_list(py, &logprobs)?)?;
                if let Ok(mut slot) = self.rx.lock() {
                    *slot = Some(rx);
                }
            }
            Ok(Event::End {
                finish_reason,
                prompt_tokens,
                completion_tokens,
            }) => {
                out.set_item("finish_reason", finish_reason)?;
                out.set_item("prompt_tokens", prompt_tokens)?;
                out.set_item("completion_tokens", completion_tokens)?;
            }
            Ok(Event::Error(msg)) => return Err(crate::LucentError::new_err(msg)),
            Err(_) => {
                return Err(crate::LucentError::new_err(
                    "the generation thread ended without a result (it panicked); this is a bug in lucent",
                ))
            }
        }
        Ok(Some(out))
    }

    /// Stop the generation (it ends at its next piece).
    fn close(&self) {
        drop(self.take());
    }
}
