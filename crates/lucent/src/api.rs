//! The public API: [`open`] any model lucent runs, by name or path, and get the handle
//! of its task — a [`Generator`] for decoders, an [`Embedder`] for encoders — or the
//! [`Trace`] of every intermediate of its forward pass.
//!
//! ```no_run
//! let model = lucent::open("smollm2")?; // a known name, a .gguf, an HF folder, a training run
//! assert_eq!(model.kind(), lucent::ModelKind::Decoder);
//! let mut gen = model.generator()?;
//! let text = gen.complete("The capital of France is", &lucent::Sampling::greedy().max_tokens(16))?;
//! let trace = model.trace("The cat sat")?; // per layer and head: q, k, v, scores, weights …
//! let v = lucent::Embedder::open("minilm")?.embed(&["a cat", "a dog"])?;
//! # Ok::<(), lucent::Error>(())
//! ```
//!
//! What a path holds is read from the path itself: a `.gguf` file is a decoder of the
//! family its `general.architecture` names; a folder with `config.json` and safetensors
//! is a Hugging Face model of its `model_type` (`bert`: an encoder, `gpt2`: a decoder);
//! a folder written by `lucent train` is a model you trained ("lucent" family), a
//! language model or an encoder-decoder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::fetch::{self, Progress};
use crate::io::tokenizer::Tokenizer;
use crate::model::{ModelConfig, ModelKind};
use crate::nn::Trace;
use crate::pipeline::embed::Embedder;
use crate::pipeline::generate::TextModel;
use crate::pipeline::generator::Generator;
use crate::pipeline::transcribe::Transcriber;
use crate::runtime::Precision;
#[cfg(feature = "train")]
use crate::train::TrainedModel;
use crate::{Error, Result};

/// A model lucent can run, of a known kind.
pub struct Model {
    name: String,
    path: PathBuf,
    inner: Inner,
}

enum Inner {
    Encoder(Arc<Embedder>),
    Speech(Arc<Transcriber>),
    Decoder(Arc<TextModel>),
    #[cfg(feature = "train")]
    Trained(Arc<TrainedModel>),
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("kind", &self.kind())
            .field("family", &self.config().family)
            .finish()
    }
}

/// One token of a text: its id, the piece the vocabulary stores, and the text it
/// stands for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Token {
    /// The id.
    pub id: u32,
    /// The vocabulary's piece (`"Ġcat"`, `"##ing"`, `"<|im_start|>"`).
    pub piece: String,
    /// The text it stands for (bytes of a split character shown as U+FFFD).
    pub text: String,
    /// Whether it is a special (control) token.
    pub special: bool,
}

/// Open a model by name (`minilm`, `smollm2`, `gemma3`; fetched into the cache on first
/// use) or by path (a `.gguf` file, a Hugging Face folder, a `lucent train` run).
pub fn open(spec: &str) -> Result<Model> {
    open_with(spec, &mut fetch::Silent)
}

/// [`open`], reporting the progress of a first fetch to `progress`.
pub fn open_with(spec: &str, progress: &mut dyn Progress) -> Result<Model> {
    OpenOptions::new().open_with(spec, progress)
}

/// How to open a model, beyond its name or path: the [`Precision`] of its products.
///
/// ```no_run
/// let model = lucent::OpenOptions::new()
///     .precision(lucent::Precision::Int8)
///     .open("minilm")?;
/// assert_eq!(model.precision(), lucent::Precision::Int8);
/// # Ok::<(), lucent::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    precision: Precision,
}

impl OpenOptions {
    /// The defaults: exact arithmetic.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// Compute the model's products in `precision` (exact by default). Decoders
    /// (`DecoderModel::set_precision`), encoders and Whisper take every precision; a
    /// lucent training run asked for anything but exact is refused when opened, in one
    /// line.
    pub fn precision(mut self, precision: Precision) -> OpenOptions {
        self.precision = precision;
        self
    }

    /// Open `spec` (as [`open`]) with these options.
    pub fn open(&self, spec: &str) -> Result<Model> {
        self.open_with(spec, &mut fetch::Silent)
    }

    /// [`OpenOptions::open`], reporting the progress of a first fetch to `progress`.
    pub fn open_with(&self, spec: &str, progress: &mut dyn Progress) -> Result<Model> {
        let path = fetch::resolve(spec, progress)?;
        let name = if crate::model::family::registry::known_model(spec).is_some() {
            spec.to_string()
        } else {
            path.file_stem()
                .map_or_else(|| spec.to_string(), |s| s.to_string_lossy().into_owned())
        };
        let mut inner = load(&path)?;
        match &mut inner {
            Inner::Encoder(e) if self.precision != Precision::Exact => {
                if let Some(e) = Arc::get_mut(e) {
                    e.set_precision(self.precision);
                }
            }
            Inner::Speech(t) if self.precision != Precision::Exact => {
                if let Some(t) = Arc::get_mut(t) {
                    t.set_precision(self.precision);
                }
            }
            Inner::Decoder(t) if self.precision != Precision::Exact => {
                if let Some(t) = Arc::get_mut(t) {
                    t.model.set_precision(self.precision);
                }
            }
            _ if self.precision != Precision::Exact => {
                return Err(Error::Argument(format!(
                    "{name}: precision {} is built for GGUF and Hugging Face decoders, encoders and Whisper \
                     (smollm2, gemma3, *.gguf, minilm, mpnet, whisper-*); a lucent training run runs exact \
                     (precision exact)",
                    self.precision
                )));
            }
            _ => {}
        }
        Ok(Model { name, path, inner })
    }
}

/// Load what `path` holds (module docs).
fn load(path: &Path) -> Result<Inner> {
    if path.is_file() {
        if is_gguf(path)? {
            return Ok(Inner::Decoder(Arc::new(TextModel::load(path)?)));
        }
        return Err(Error::Argument(format!(
            "{} is not a GGUF file (it does not start with the bytes GGUF); lucent opens .gguf files, \
             Hugging Face folders and training runs",
            path.display()
        )));
    }
    if !path.is_dir() {
        return Err(Error::Argument(format!(
            "{} is neither a file nor a folder",
            path.display()
        )));
    }
    if path.join(CHECKPOINT).is_file() && !path.join("config.json").exists() {
        #[cfg(feature = "train")]
        return Ok(Inner::Trained(Arc::new(TrainedModel::load(path)?)));
        #[cfg(not(feature = "train"))]
        return Err(Error::Argument(format!(
            "{} is a training run; this build of lucent has no `train` feature to read it",
            path.display()
        )));
    }
    if crate::io::ctranslate2::Ct2Folder::is_ct2_folder(path) && path.join("config.json").is_file()
    {
        return Ok(Inner::Speech(Arc::new(Transcriber::load(path)?)));
    }
    let config = path.join("config.json");
    if !config.is_file() {
        return Err(Error::Argument(format!(
            "{}: no config.json (a Hugging Face folder) and no {CHECKPOINT} (a lucent training run); \
             is this a model folder?",
            path.display()
        )));
    }
    let model_type = hf_model_type(&config)?;
    match model_type.as_str() {
        "bert" | "roberta" | "xlm-roberta" | "mpnet" | "distilbert" => {
            let mut e = Embedder::load(path)?;
            if let Some(n) = path.file_name() {
                e.set_name(n.to_string_lossy());
            }
            Ok(Inner::Encoder(Arc::new(e)))
        }
        "gpt2" => Ok(Inner::Decoder(Arc::new(TextModel::load_hf_gpt2(path)?))),
        other => Err(Error::Config(format!(
            "{}: model_type '{other}' is not supported; lucent reads Hugging Face folders of model_type bert, roberta, xlm-roberta, mpnet, distilbert (encoders) or gpt2",
            config.display()
        ))),
    }
}

/// The checkpoint file of a folder written by `lucent train`.
const CHECKPOINT: &str = "model.safetensors";

/// Whether `path` starts with GGUF's magic bytes.
fn is_gguf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(f.read_exact(&mut magic).is_ok() && &magic == b"GGUF")
}

/// `model_type` of a Hugging Face `config.json`.
fn hf_model_type(config: &Path) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        model_type: Option<String>,
    }
    let text = std::fs::read_to_string(config).map_err(|e| Error::io(config, e))?;
    let head: Head = serde_json::from_str(&text)
        .map_err(|e| Error::format(config, format!("not a valid config.json: {e}")))?;
    head.model_type
        .ok_or_else(|| Error::format(config, "config.json has no model_type".to_string()))
}

impl Model {
    /// The name it was opened by (a known name, or the file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file or folder it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The precision its products are computed in ([`OpenOptions::precision`]).
    pub fn precision(&self) -> Precision {
        match &self.inner {
            Inner::Encoder(e) => e.precision(),
            Inner::Speech(t) => t.precision(),
            Inner::Decoder(d) => d.model.precision(),
            #[cfg(feature = "train")]
            Inner::Trained(_) => Precision::Exact,
        }
    }

    /// Encoder, decoder or encoder-decoder.
    pub fn kind(&self) -> ModelKind {
        self.config().kind
    }

    /// The checked configuration.
    pub fn config(&self) -> &ModelConfig {
        match &self.inner {
            Inner::Encoder(e) => &e.model().config,
            Inner::Speech(t) => &t.model.config,
            Inner::Decoder(d) => &d.model.config,
            #[cfg(feature = "train")]
            Inner::Trained(t) => match t.as_ref() {
                TrainedModel::Lm { model, .. } => &model.config,
                TrainedModel::Seq2Seq { model, .. } => &model.config,
            },
        }
    }

    /// A generator over this decoder (with its own KV cache); errors for an encoder.
    pub fn generator(&self) -> Result<Generator> {
        Ok(Generator::new(self.text_model()?))
    }

    /// The decoder with its tokenizer and chat template; errors for other kinds.
    pub fn text_model(&self) -> Result<Arc<TextModel>> {
        match &self.inner {
            Inner::Decoder(d) => Ok(d.clone()),
            #[cfg(feature = "train")]
            Inner::Trained(t) => Ok(Arc::new(t.text_model(&self.path)?)),
            Inner::Encoder(_) => Err(Error::Argument(format!(
                "{} is an encoder (sentence embeddings); it does not generate text — use embed, or a decoder such as smollm2",
                self.name
            ))),
            Inner::Speech(_) => Err(Error::Argument(format!(
                "{} is a speech model (Whisper); it transcribes audio — use transcribe",
                self.name
            ))),
        }
    }

    /// The sentence embedder over this encoder; errors for other kinds.
    pub fn embedder(&self) -> Result<Arc<Embedder>> {
        match &self.inner {
            Inner::Encoder(e) => Ok(e.clone()),
            _ => Err(Error::Argument(format!(
                "{} is a {:?} model; sentence embeddings come from an encoder such as minilm",
                self.name,
                self.kind()
            ))),
        }
    }

    /// The speech-to-text handle of a Whisper model; errors for other kinds.
    pub fn transcriber(&self) -> Result<Arc<Transcriber>> {
        match &self.inner {
            Inner::Speech(t) => Ok(t.clone()),
            _ => Err(Error::Argument(format!(
                "{} is not a speech model; transcription needs a Whisper model such as whisper-tiny.en",
                self.name
            ))),
        }
    }

    /// The model trained by `lucent train`, if it is one.
    #[cfg(feature = "train")]
    pub fn trained(&self) -> Option<&TrainedModel> {
        match &self.inner {
            Inner::Trained(t) => Some(t),
            _ => None,
        }
    }

    /// The tokens of `text` as the model reads it (a decoder's raw prompt with BOS, an
    /// encoder's `[CLS] … [SEP]`, a task model's symbols).
    pub fn tokens(&self, text: &str) -> Result<Vec<Token>> {
        match &self.inner {
            Inner::Encoder(e) => {
                let enc = e.tokenizer().encode(text, true)?;
                Ok(describe(e.tokenizer(), &enc.ids))
            }
            Inner::Decoder(d) => {
                let ids = d.encode(text)?;
                Ok(describe(d.tokenizer.as_ref(), &ids))
            }
            Inner::Speech(t) => {
                let enc = t.tokenizer.encode(text, false)?;
                Ok(describe(&t.tokenizer, &enc.ids))
            }
            #[cfg(feature = "train")]
            Inner::Trained(t) => match t.as_ref() {
                TrainedModel::Lm { tokenizer, .. } => {
                    let ids = tokenizer.encode_ids(text, false, true)?;
                    Ok(describe(tokenizer, &ids))
                }
                TrainedModel::Seq2Seq { task, symbols, .. } => {
                    let ids = task.parse_input(*symbols, text)?;
                    Ok(ids
                        .iter()
                        .map(|&i| {
                            let s = task.render(*symbols, &[i]);
                            Token {
                                id: i as u32,
                                piece: s.clone(),
                                text: s,
                                special: false,
                            }
                        })
                        .collect())
                }
            },
        }
    }

    /// Every intermediate of the forward pass over `text`: per layer and head the
    /// queries, keys, values, raw and scaled scores, mask, softmax weights, outputs and
    /// the residual stream ([`Trace`]'s names), with the tokens as labels. An
    /// encoder-decoder trained on a task decodes `text` greedily and traces the
    /// teacher-forced pass over its own answer (its cross-attention included).
    pub fn trace(&self, text: &str) -> Result<Trace> {
        self.trace_with(text, Trace::new())
    }

    /// [`Model::trace`] into a given trace (e.g. one that keeps only some leaves or
    /// layers: `Trace::only(&["weights"]).in_layers(&[2])`).
    pub fn trace_with(&self, text: &str, mut trace: Trace) -> Result<Trace> {
        let labels = |toks: Vec<Token>| toks.into_iter().map(|t| t.text).collect::<Vec<_>>();
        match &self.inner {
            Inner::Encoder(e) => {
                let enc = e.tokenizer().encode(text, true)?;
                trace.set_tokens(labels(describe(e.tokenizer(), &enc.ids)));
                e.hidden_states(&[&enc], Some(&mut trace))?;
            }
            Inner::Speech(t) => {
                // `text` names a WAV file: its first window, transcribed and traced.
                let tokens = t.trace_audio(Path::new(text), &mut trace)?;
                trace.set_target_tokens(tokens);
            }
            #[cfg(feature = "train")]
            Inner::Trained(t) if self.kind() == ModelKind::EncoderDecoder => {
                let (src, tgt) = t.trace_seq2seq(text, &mut trace)?;
                trace.set_tokens(src);
                trace.set_target_tokens(tgt);
            }
            _ => {
                let tm = self.text_model()?;
                let ids = tm.encode(text)?;
                trace.set_tokens(labels(describe(tm.tokenizer.as_ref(), &ids)));
                let logits = tm.model.forward(&ids, None, false, Some(&mut trace))?;
                trace.record("logits", &logits);
            }
        }
        Ok(trace)
    }
}

/// Id, piece and text of each of `ids`.
fn describe(tok: &dyn Tokenizer, ids: &[u32]) -> Vec<Token> {
    ids.iter()
        .map(|&id| Token {
            id,
            piece: tok.token_piece(id).unwrap_or_default(),
            text: String::from_utf8_lossy(&tok.token_bytes(id, false).unwrap_or_default())
                .into_owned(),
            special: tok.is_special(id),
        })
        .collect()
}
