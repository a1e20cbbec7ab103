//! `lucent serve`: an OpenAI-compatible HTTP server over lucent's models.
//!
//! ```no_run
//! let opts = lucent_server::ServeOptions {
//!     models: vec!["smollm2".into(), "minilm".into()],
//!     ..lucent_server::ServeOptions::default()
//! };
//! lucent_server::serve(opts)?; // until SIGTERM / Ctrl-C
//! # Ok::<(), lucent::Error>(())
//! ```
//!
//! - **Routes** ([`routes`]): `POST /v1/chat/completions`, `/v1/completions`,
//!   `/v1/embeddings`, `/v1/audio/transcriptions` and `/v1/audio/translations`
//!   ([`speech`]: multipart uploads, Whisper models), `GET /v1/models`, `POST /tokenize`, `/detokenize`, `GET /health`
//!   (200 only once every model is loaded, 503 while loading or draining), `GET
//!   /metrics` ([`metrics`]), in OpenAI's request and response shapes ([`api`]), with
//!   Server-Sent Events for streams and OpenAI's error objects ([`error`]).
//! - **Engines** ([`engine`]): each decoder model has a scheduler thread with
//!   `--parallel` slots that batches the decode steps of every running request into
//!   one forward pass (continuous batching), bit for bit what each request would get
//!   alone; each encoder a worker thread ([`encoder`]), each speech model one too
//!   ([`speech`]). tokio's threads only move bytes. An encoder-decoder trained by
//!   `lucent train seq2seq` is served to the explorer only.
//! - **Seeing inside** ([`inside`]): a request's `"lucent"` field returns the attention
//!   weights and intermediates of the passes that produced its answer.
//! - **The explorer** ([`explore`]): a page at `/` (`lucent explore`) that draws every
//!   intermediate of a model's forward pass, fed by JSON routes under `/explore/api/`.
//! - **Limits**: a body cap (413), the context (400 with the numbers), a bounded queue
//!   (429 with `Retry-After`), a per-request timeout (504), a client that goes away
//!   frees its slot at the next step, SIGTERM drains the requests in flight up to a
//!   deadline while refusing new ones, `--api-key` compared in constant time.
//!
//! Several models share one process (`-m smollm2 -m minilm`); a request picks one by
//! its `model` field. The server binds to 127.0.0.1 unless told otherwise; replicas
//! behind a load balancer scale it past one machine (`docs/serving.md`).

pub mod api;
pub mod encoder;
pub mod engine;
pub mod error;
pub mod explore;
pub mod inside;
pub mod intervene;
pub mod metrics;
pub mod prompt_cache;
pub mod routes;
pub mod speech;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::encoder::EncoderWorker;
use crate::engine::{Engine, EngineConfig};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::speech::SpeechWorker;

/// How the server runs (the flags of `lucent serve`).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Models to serve, by name or path (`smollm2`, `minilm`, a `.gguf` file, …).
    pub models: Vec<String>,
    /// Address to bind (loopback unless asked).
    pub host: String,
    /// Port (0: any free one; the address chosen is printed).
    pub port: u16,
    /// If set, every route but `/health` and `/metrics` wants `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Slots per decoder model: sequences generated at once.
    pub parallel: usize,
    /// KV-cache positions per slot (prompt and answer); 0: the model's context, at
    /// most 4096.
    pub ctx_size: usize,
    /// Requests that may wait for a slot, per model, before 429.
    pub max_queue: usize,
    /// Origins allowed by CORS (`*` for any); none: no CORS headers.
    pub cors: Vec<String>,
    /// Largest request body, in bytes (413 above).
    pub max_body: usize,
    /// Seconds a request may take, queue included (504 after).
    pub timeout_secs: f64,
    /// Seconds SIGTERM waits for the requests in flight before the server exits.
    pub drain_secs: f64,
    /// About this many prompt tokens per prefill piece and per step.
    pub prefill_chunk: usize,
    /// Most bytes of each decoder model's prompt cache (0: off); the default is
    /// [`prompt_cache::default_cache_ram`].
    pub cache_ram: u64,
    /// Most numbers one request's inside view may hold.
    pub max_inside_floats: u64,
    /// Stop by itself after this many seconds (draining as at SIGTERM); None: run until
    /// told to stop.
    pub exit_after_secs: Option<f64>,
    /// What the server's log lines on stderr start with: the command the user ran
    /// (`lucent serve`, or `lucent explore` when the explorer starts this server).
    pub log_name: String,
    /// The chat template of every decoder served: `chatml`, `gemma` or a Jinja file
    /// (`TextModel::with_chat_template`); None: each file's own.
    pub chat_template: Option<String>,
    /// The precision of each model's products (`--precision int8` for every model,
    /// `--precision smollm2=int8` for one; a later choice for a model wins); none:
    /// exact.
    pub precision: Vec<ModelPrecision>,
}

/// One `--precision` choice: a precision for every model served, or for the one that
/// `model` names (as `-m` gave it, or its file's stem).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPrecision {
    /// The model it is for; None: every model.
    pub model: Option<String>,
    /// The precision.
    pub precision: lucent::Precision,
}

impl std::str::FromStr for ModelPrecision {
    type Err = lucent::Error;

    /// `int8` (every model) or `NAME=int8` (the model `-m NAME` serves).
    fn from_str(s: &str) -> lucent::Result<ModelPrecision> {
        match s.rsplit_once('=') {
            Some((model, p)) if !model.trim().is_empty() => Ok(ModelPrecision {
                model: Some(model.trim().to_string()),
                precision: p.parse()?,
            }),
            Some(_) => Err(lucent::Error::Argument(format!(
                "--precision {s}: a model name goes before '=' (smollm2=int8), or give the precision alone (int8)"
            ))),
            None => Ok(ModelPrecision {
                model: None,
                precision: s.parse()?,
            }),
        }
    }
}

impl ModelPrecision {
    /// Whether this choice is for the model `-m spec` serves (every model, its spec, or
    /// its file's stem).
    fn is_for(&self, spec: &str) -> bool {
        match &self.model {
            None => true,
            Some(m) => {
                m == spec
                    || std::path::Path::new(spec)
                        .file_stem()
                        .is_some_and(|s| s.to_string_lossy() == m.as_str())
            }
        }
    }
}

impl ServeOptions {
    /// The precision `-m spec` is opened in: the last `--precision` choice for it, exact
    /// where none is.
    pub fn precision_of(&self, spec: &str) -> lucent::Precision {
        self.precision
            .iter()
            .rev()
            .find(|c| c.is_for(spec))
            .map_or(lucent::Precision::Exact, |c| c.precision)
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            models: vec!["smollm2".into()],
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            parallel: 4,
            ctx_size: 0,
            max_queue: 64,
            cors: Vec::new(),
            max_body: 2 << 20,
            timeout_secs: 600.0,
            drain_secs: 30.0,
            prefill_chunk: 64,
            cache_ram: prompt_cache::default_cache_ram(),
            max_inside_floats: 4_000_000,
            exit_after_secs: None,
            log_name: "lucent serve".into(),
            chat_template: None,
            precision: Vec::new(),
        }
    }
}

/// A model being served.
pub enum Served {
    /// A decoder: text generation through its engine.
    Decoder(Arc<Engine>),
    /// An encoder: sentence embeddings through its worker.
    Encoder(EncoderWorker),
    /// A speech model (Whisper): transcriptions through its worker.
    Speech(SpeechWorker),
    /// An encoder-decoder trained on a task (`lucent train seq2seq`): the explorer
    /// shows its attentions; it has no OpenAI route.
    Seq2Seq,
}

/// A served model and the name requests use for it.
pub struct ServedModel {
    /// The name in `model` fields (`smollm2`, or a file's stem).
    pub name: String,
    /// The model.
    pub served: Served,
    /// The model as opened (the explorer traces it).
    pub model: Arc<lucent::Model>,
}

/// What every handler shares.
pub struct AppState {
    /// The options it runs with.
    pub opts: ServeOptions,
    /// The figures of `/metrics`.
    pub metrics: Metrics,
    /// The models, once loaded.
    pub models: OnceLock<Vec<ServedModel>>,
    /// Set by SIGTERM: new requests are refused.
    pub draining: AtomicBool,
    /// Why loading failed, if it did.
    pub load_error: Mutex<Option<String>>,
    /// SHA-256 of the API key (keys are compared as digests, in constant time).
    key: Option<[u8; 32]>,
    /// When the server started (`created` of the models).
    pub started: u64,
    /// The explorer's cache of traced layers and its one-at-a-time gate.
    pub explore: explore::Cache,
}

impl AppState {
    /// A state with no model loaded yet.
    pub fn new(opts: ServeOptions) -> AppState {
        let key = opts
            .api_key
            .as_ref()
            .map(|k| Sha256::digest(k.as_bytes()).into());
        AppState {
            opts,
            metrics: Metrics::new(),
            models: OnceLock::new(),
            draining: AtomicBool::new(false),
            load_error: Mutex::new(None),
            key,
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            explore: explore::Cache::default(),
        }
    }

    /// Whether `header` (the `Authorization` value) carries the key; true when no key
    /// is set. The comparison takes the same time whatever the key sent.
    pub fn authorized(&self, header: Option<&[u8]>) -> bool {
        let Some(want) = &self.key else { return true };
        let sent = header
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        let got: [u8; 32] = Sha256::digest(sent).into();
        bool::from(got.ct_eq(want))
    }

    /// The loaded models, or 503 while loading, or 503 while draining.
    pub fn accepting(&self) -> Result<&[ServedModel], ApiError> {
        if self.draining.load(Ordering::Relaxed) {
            return Err(ApiError::unavailable(
                "the server is shutting down and takes no new requests; retry on another replica",
            ));
        }
        self.models
            .get()
            .map(Vec::as_slice)
            .ok_or_else(|| ApiError::unavailable("the server is still loading its models; retry shortly (GET /health says when it is ready)"))
    }

    /// The names of the models served.
    pub fn names(&self) -> Vec<String> {
        self.models
            .get()
            .map(|m| m.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default()
    }

    /// The model a request names (None: the only one of its kind, or the first).
    pub fn find(&self, name: Option<&str>) -> Result<&ServedModel, ApiError> {
        let models = self.accepting()?;
        match name {
            Some(n) => models
                .iter()
                .find(|m| m.name == n)
                .ok_or_else(|| ApiError::model_not_found(n, &self.names())),
            None => models
                .first()
                .ok_or_else(|| ApiError::invalid_param("model", "model is required")),
        }
    }

    /// The decoder a generation request names.
    pub fn decoder(&self, name: Option<&str>) -> Result<(&str, &Arc<Engine>), ApiError> {
        let name = name.ok_or_else(|| {
            ApiError::invalid_param(
                "model",
                format!(
                    "model is required; this server has: {}",
                    self.names().join(", ")
                ),
            )
        })?;
        let m = self.find(Some(name))?;
        match &m.served {
            Served::Decoder(e) => Ok((&m.name, e)),
            Served::Encoder(_) => Err(ApiError::invalid_param(
                "model",
                format!("'{name}' is an encoder (embeddings only); generate with a decoder model"),
            )),
            Served::Speech(_) => Err(ApiError::invalid_param(
                "model",
                format!(
                    "'{name}' is a speech model; it transcribes audio at /v1/audio/transcriptions"
                ),
            )),
            Served::Seq2Seq => Err(ApiError::invalid_param(
                "model",
                format!(
                    "'{name}' is an encoder-decoder trained on a task; the explorer (/) shows it"
                ),
            )),
        }
    }

    /// The encoder an embeddings request names.
    pub fn encoder(&self, name: Option<&str>) -> Result<(&str, &EncoderWorker), ApiError> {
        let name = name.ok_or_else(|| ApiError::invalid_param("model", "model is required"))?;
        let m = self.find(Some(name))?;
        match &m.served {
            Served::Encoder(w) => Ok((&m.name, w)),
            _ => Err(ApiError::invalid_param(
                "model",
                format!(
                    "'{name}' is not an encoder; /v1/embeddings needs an encoder model such as minilm"
                ),
            )),
        }
    }

    /// The speech model an audio request names (None: the first one served).
    pub fn speech(&self, name: Option<&str>) -> Result<(&str, &SpeechWorker), ApiError> {
        let models = self.accepting()?;
        let m = match name.map(str::trim).filter(|n| !n.is_empty()) {
            Some(n) => self.find(Some(n))?,
            None => models
                .iter()
                .find(|m| matches!(m.served, Served::Speech(_)))
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "model",
                        format!(
                            "this server has no speech model (it has: {}); start it with -m whisper-tiny.en",
                            self.names().join(", ")
                        ),
                    )
                })?,
        };
        match &m.served {
            Served::Speech(w) => Ok((&m.name, w)),
            _ => Err(ApiError::invalid_param(
                "model",
                format!(
                    "'{}' is not a speech model; the audio routes need a Whisper model such as whisper-tiny.en",
                    m.name
                ),
            )),
        }
    }
}

/// Open every model of `opts` and start its engine or worker.
pub fn load_models(opts: &ServeOptions, metrics: &Metrics) -> lucent::Result<Vec<ServedModel>> {
    let mut out: Vec<ServedModel> = Vec::new();
    if let Some(c) = opts
        .precision
        .iter()
        .find(|c| c.model.is_some() && !opts.models.iter().any(|spec| c.is_for(spec)))
    {
        return Err(lucent::Error::Argument(format!(
            "--precision {}={}: no model of that name is served (-m {}); name one of them",
            c.model.as_deref().unwrap_or_default(),
            c.precision,
            opts.models.join(" -m ")
        )));
    }
    for spec in &opts.models {
        let model = lucent::OpenOptions::new()
            .precision(opts.precision_of(spec))
            .open(spec)?;
        let name = model.name().to_string();
        if out.iter().any(|m| m.name == name) {
            return Err(lucent::Error::Argument(format!(
                "the model '{name}' is given twice (-m {spec}); serve each model once"
            )));
        }
        let served = match model.kind() {
            lucent::ModelKind::Encoder => Served::Encoder(EncoderWorker::start(
                &name,
                model.embedder()?,
                opts.max_queue,
            )?),
            lucent::ModelKind::EncoderDecoder => match model.transcriber() {
                Ok(t) => Served::Speech(SpeechWorker::start(&name, t, opts.max_queue)?),
                Err(_) => Served::Seq2Seq,
            },
            lucent::ModelKind::Decoder => {
                let tm = match &opts.chat_template {
                    Some(spec) => Arc::new(model.text_model()?.with_chat_template(spec)?),
                    None => model.text_model()?,
                };
                let ctx = match opts.ctx_size {
                    0 => tm.model.context_len().min(4096),
                    n => n.min(tm.model.context_len()),
                };
                let config = EngineConfig {
                    slots: opts.parallel,
                    ctx,
                    max_queue: opts.max_queue,
                    prefill_chunk: opts.prefill_chunk,
                    cache_ram: usize::try_from(opts.cache_ram).unwrap_or(usize::MAX),
                };
                Served::Decoder(Engine::start(&name, tm, config, metrics.model(&name))?)
            }
        };
        // A precision other than exact says, in the same line, which kernel its
        // products take on this CPU (int8 without VNNI runs AVX2's, bf16 without
        // AVX512-BF16 is emulated).
        let kernel = match model.precision() {
            lucent::Precision::Exact => String::new(),
            lucent::Precision::Int8 => format!(": {}", lucent::ops::linear_int8::int8_path()),
            lucent::Precision::Bf16 => format!(": {}", lucent::ops::linear_bf16::bf16_path()),
        };
        eprintln!(
            "{}: {name} ready ({}, precision {}{kernel})",
            opts.log_name,
            model.path().display(),
            model.precision()
        );
        out.push(ServedModel {
            name,
            served,
            model: Arc::new(model),
        });
    }
    Ok(out)
}

/// Run the server until SIGTERM or Ctrl-C (then drain): bind, print the address, load
/// the models (answering 503 meanwhile), serve.
pub fn serve(opts: ServeOptions) -> lucent::Result<()> {
    let rt = runtime()?;
    rt.block_on(run(opts))
}

/// The HTTP runtime: two threads that only move bytes.
fn runtime() -> lucent::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lucent-http")
        .enable_all()
        .build()
        .map_err(|e| lucent::Error::Argument(format!("cannot start the HTTP runtime: {e}")))
}

/// [`serve`] on a socket already bound (`lucent explore` binds first, to print the
/// address before the models load): until SIGTERM or Ctrl-C.
pub fn serve_on(listener: std::net::TcpListener, opts: ServeOptions) -> lucent::Result<()> {
    let rt = runtime()?;
    rt.block_on(async move {
        listener.set_nonblocking(true).map_err(|e| {
            lucent::Error::Argument(format!("cannot make the socket non-blocking: {e}"))
        })?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| lucent::Error::Argument(format!("cannot use the socket: {e}")))?;
        run_on(listener, opts).await
    })
}

/// [`serve`] inside a tokio runtime.
pub async fn run(opts: ServeOptions) -> lucent::Result<()> {
    let bind = format!("{}:{}", opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(&bind).await.map_err(|e| {
        lucent::Error::Argument(format!(
            "cannot listen on {bind}: {e} (pick another --port or --host)"
        ))
    })?;
    run_on(listener, opts).await
}

/// [`run`] on a bound listener.
pub async fn run_on(listener: tokio::net::TcpListener, opts: ServeOptions) -> lucent::Result<()> {
    let addr = listener
        .local_addr()
        .map_err(|e| lucent::Error::Argument(format!("cannot read the address bound: {e}")))?;
    eprintln!(
        "{}: listening on http://{addr} (pid {}); loading {} …",
        opts.log_name,
        std::process::id(),
        opts.models.join(", ")
    );
    let state = Arc::new(AppState::new(opts));
    let stop = Arc::new(tokio::sync::Notify::new());

    // Load on a plain thread (compute stays off tokio's threads).
    {
        let (state, stop) = (state.clone(), stop.clone());
        std::thread::spawn(move || match load_models(&state.opts, &state.metrics) {
            Ok(models) => {
                let _ = state.models.set(models);
                state.metrics.ready.set(1);
                eprintln!("{}: ready on http://{addr}", state.opts.log_name);
            }
            Err(e) => {
                *state.load_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                stop.notify_one();
            }
        });
    }

    let app = routes::router(state.clone());
    let drain = Duration::from_secs_f64(state.opts.drain_secs.max(0.0));
    let signalled = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (state, stop, signalled) = (state.clone(), stop.clone(), signalled.clone());
        async move {
            let exit_after = async {
                match state.opts.exit_after_secs {
                    Some(s) => tokio::time::sleep(Duration::from_secs_f64(s.max(0.0))).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = termination() => {}
                _ = exit_after => {}
                _ = stop.notified() => {}
            }
            eprintln!(
                "{}: draining (up to {} s for the requests in flight) …",
                state.opts.log_name, state.opts.drain_secs
            );
            state.draining.store(true, Ordering::Relaxed);
            state.metrics.draining.set(1);
            state.metrics.ready.set(0);
            signalled.notify_one();
        }
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let deadline = async {
        signalled.notified().await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        r = server => r.map_err(|e| lucent::Error::Argument(format!("the server failed: {e}")))?,
        _ = deadline => eprintln!("{}: the drain deadline passed; ending the requests still running", state.opts.log_name),
    }
    if let Some(models) = state.models.get() {
        for m in models {
            if let Served::Decoder(e) = &m.served {
                e.close();
            }
        }
    }
    if let Some(e) = state
        .load_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return Err(lucent::Error::Argument(format!(
            "{} could not load its models: {e}",
            state.opts.log_name
        )));
    }
    eprintln!("{}: stopped", state.opts.log_name);
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn termination() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = ctrl_c => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_choices_parse_and_the_last_for_a_model_wins() {
        use lucent::Precision::{Bf16, Exact, Int8};
        let opts = ServeOptions {
            models: vec!["smollm2".into(), "/m/gemma3.gguf".into(), "minilm".into()],
            precision: ["bf16", "smollm2=int8", "gemma3=exact"]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect(),
            ..ServeOptions::default()
        };
        assert_eq!(opts.precision_of("smollm2"), Int8);
        assert_eq!(opts.precision_of("/m/gemma3.gguf"), Exact);
        assert_eq!(opts.precision_of("minilm"), Bf16);
        assert_eq!(ServeOptions::default().precision_of("smollm2"), Exact);
        for bad in ["fp4", "=int8", "smollm2=fp4"] {
            let e = bad.parse::<ModelPrecision>().unwrap_err().to_string();
            assert_eq!(e.lines().count(), 1, "{bad}: {e}");
        }
        // A choice for a model not served is refused, in one line, before any loading.
        let stray = ServeOptions {
            models: vec!["/no/such/model.gguf".into()],
            precision: vec!["gemma3=int8".parse().unwrap()],
            ..ServeOptions::default()
        };
        let e = load_models(&stray, &Metrics::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--precision gemma3=int8") && e.lines().count() == 1,
            "{e}"
        );
    }

    #[test]
    fn api_key_is_checked() {
        let s = AppState::new(ServeOptions {
            api_key: Some("sekrit".into()),
            ..ServeOptions::default()
        });
        assert!(s.authorized(Some(b"Bearer sekrit")));
        assert!(!s.authorized(Some(b"Bearer sekriT")));
        assert!(!s.authorized(Some(b"sekrit")));
        assert!(!s.authorized(None));
        let open = AppState::new(ServeOptions::default());
        assert!(open.authorized(None));
    }
}
