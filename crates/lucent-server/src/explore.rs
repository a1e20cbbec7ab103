//! The explorer: a page at `/` that shows every intermediate of a real model's forward
//! pass, and the JSON routes it fetches lazily, one view at a time (`docs/explorer.md`).
//!
//! | route (GET, query parameters) | answer |
//! | --- | --- |
//! | `/` | the page (HTML, CSS and JS embedded in the binary: no CDN, works offline) |
//! | `/explore/api/models` | the models served, with their configs, attention stacks and input kind |
//! | `POST /explore/api/audio` (body: a WAV file) | for a speech model: keeps the upload, answers its id (`audio=ID` in the other routes) and length |
//! | `/explore/api/architecture?model=M&text=T` or `?preset=P&t=N` | the block list with the shape after every step ([`lucent::model::shapes`]) |
//! | `/explore/api/tokens?model&text` | ids, pieces, texts and bytes of the tokens (an encoder-decoder: its source and its greedily decoded target) |
//! | `/explore/api/attention?model&text&layer&head[&stack][&thumb=N]` | one head's softmax weights (rows, cols) as little-endian f32 in base64; `thumb` max-pools them to at most N × N |
//! | `/explore/api/steps?model&text&layer&head&token[&stack]` | the arithmetic of one query row: q, K, V, q·k, ·1/√d_k, mask, softmax, Σ w·v |
//! | `/explore/api/path?model&text&token` | residual-stream norms per layer and token, FFN activation summaries (a mixture of experts: the experts each token chose, with their weights), the logit lens, the final logits |
//! | `/explore/api/distribution?model&text&token&temperature&top_k&top_p&min_p` | the sampler's filtered next-token distribution ([`lucent::pipeline::generate::distribution`]) |
//! | `/explore/api/patch?model&text&corrupt[&target][&hook]` | the patching sweep ([`lucent::Model::patching_sweep`]): the corrupted text's run with the clean text's `blocks.L.hook_<hook>` written at one layer and position, for every layer × position; the target's log-probability and the share of the gap restored |
//! | `/explore/api/progress` | how far the running sweep is (`done` of `total` passes); never waits for the gate |
//! | `/explore/api/steer?model&text&a&b&layer&coef[&n]` | steering: the vector `coef` × (residual after block `layer` at the last position of `a` − that of `b`) added to `blocks.{layer}.hook_resid_post`; the next-token distribution and an `n`-token greedy continuation, plain and steered |
//! | `/explore/api/positions?model&t` | the sinusoidal table and RoPE's frequencies and angles |
//! | `/explore/api/masks?t&window&prefix&pad` | BERT (padding), GPT (causal), T5 (encoder, decoder, cross), prefix-LM and sliding-window masks |
//!
//! An encoder-decoder (a model trained by `lucent train seq2seq`, or Whisper) has three
//! attentions, chosen by `stack`: `cross` (the decoder's target tokens over the
//! encoder's output, the default), `encoder` and `decoder` self-attention; its target is
//! what it decodes greedily from the input, and every view is of the teacher-forced
//! pass over that answer (as `lucent attention` and [`lucent::Model::trace`] do). A
//! speech model reads `audio=ID` (an upload) instead of `text`: its first 30-second
//! window, with the audio positions (20 ms each) shown up to a little past the audio's
//! end, as `lucent attention -m whisper-tiny.en FILE.wav` draws them.
//!
//! The attention, path and distribution routes take interventions: `iv=` holds a JSON
//! array of [`lucent::Intervention`]s (the one shape of the CLI's `--intervene` and the
//! server's `"lucent": {"interventions": [..]}`), URL-encoded, e.g.
//! `iv=[{"hook":"blocks.5.attn.hook_z","op":"zero","head":3}]`. They are checked against
//! the model (400 naming the field) and the pass runs through
//! [`lucent::Model::intervene`]; the cache keeps the intervened run apart from the clean
//! one. The page's model view zero-ablates the heads clicked in "ablate" mode this way
//! and shows the clean and the ablated run side by side.
//!
//! Every input is bounded (text bytes and tokens, layer, head and token ranges; 400 with
//! the numbers otherwise). Traces are computed on blocking threads, one at a time, and
//! a head's layer is kept in a small cache bounded by the numbers it holds, so clicking
//! through the heads of a layer computes nothing new. A short text (up to
//! [`ALL_LAYERS_UP_TO`] tokens) records every layer in one pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use lucent::io::mel::N_FRAMES;
use lucent::model::shapes::{forward_shapes, ShapeStep};
use lucent::model::{ModelConfig, ModelKind, PositionKind};
use lucent::nn::position::{Rope, SinusoidalEncoding};
use lucent::ops::rope::RopeConvention;
use lucent::pipeline::generate::{distribution, TextModel};
use lucent::pipeline::transcribe::audio_positions;
use lucent::{Intervention, Sampling, Tensor, Token, Trace, TraceFilter};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::speech::{TempAudio, MAX_AUDIO_BYTES};
use crate::{AppState, Served};

/// The page, its style and its script (embedded: `lucent explore` needs no network).
const PAGE: &str = include_str!("../assets/explorer.html");
const STYLE: &str = include_str!("../assets/explorer.css");
const SCRIPT: &str = include_str!("../assets/explorer.js");

/// Longest text the explorer reads, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Most tokens the explorer reads (and at most the model's context).
pub const MAX_TOKENS: usize = 2048;
/// Texts up to this many tokens record every layer's weights in one pass.
pub const ALL_LAYERS_UP_TO: usize = 256;
/// Numbers the cache may hold (f32), over all entries: 256 MB.
pub const CACHE_FLOATS: usize = 64 << 20;
/// Numbers one traced pass of the path view may hold before it is split by layers.
const PATH_PASS_FLOATS: usize = 48 << 20;
/// Audio uploads a server keeps (the oldest is dropped, and its file deleted, past this).
pub const MAX_UPLOADS: usize = 8;
/// Largest table of the positions and masks views.
const MAX_TABLE_T: usize = 512;
const MAX_MASK_T: usize = 64;

type St = State<Arc<AppState>>;
type Params = Query<HashMap<String, String>>;

/// The explorer's routes (merged into the server's router).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(page))
        .route("/explore/api/models", get(models))
        .route("/explore/api/audio", post(upload_audio))
        .route("/explore/api/architecture", get(architecture))
        .route("/explore/api/tokens", get(tokens))
        .route("/explore/api/attention", get(attention))
        .route("/explore/api/steps", get(steps))
        .route("/explore/api/path", get(path))
        .route("/explore/api/distribution", get(dist))
        .route("/explore/api/patch", get(patch))
        .route("/explore/api/progress", get(progress))
        .route("/explore/api/steer", get(steer))
        .route("/explore/api/positions", get(positions))
        .route("/explore/api/masks", get(masks))
}

/// The page: the HTML with its style and script put inside (one document, so that it
/// can save itself as a standalone file).
async fn page() -> Response {
    let html = PAGE
        .replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", SCRIPT);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

// ------------------------------------------------------------------ the cache

/// What the cache keeps: one layer's attention weights, one pass's path view, one
/// position's logits.
#[derive(Clone)]
enum Cached {
    Weights(Arc<Tensor>),
    Path(Arc<Value>),
    Logits(Arc<Vec<f32>>),
    Sides(Arc<Sides>),
}

impl Cached {
    fn floats(&self) -> usize {
        match self {
            Cached::Weights(t) => t.numel(),
            Cached::Path(_) => 1 << 16,
            Cached::Logits(l) => l.len(),
            Cached::Sides(s) => s.source.len() + s.target.len(),
        }
    }
}

/// A least-recently-used cache keyed by (model, text, what), bounded by the numbers it
/// holds; and the gate that lets one explorer computation run at a time.
pub struct Cache {
    entries: Mutex<Vec<(String, Cached)>>,
    /// Audio uploads: id, file, seconds (oldest first).
    uploads: Mutex<Vec<(String, Arc<TempAudio>, f64)>>,
    cap: usize,
    gate: tokio::sync::Semaphore,
    waiting: AtomicUsize,
    /// The running sweep: what, passes done, passes in all.
    progress: Mutex<(String, usize, usize)>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new(CACHE_FLOATS)
    }
}

impl Cache {
    /// A cache holding at most `cap` numbers.
    pub fn new(cap: usize) -> Cache {
        Cache {
            entries: Mutex::new(Vec::new()),
            uploads: Mutex::new(Vec::new()),
            cap,
            gate: tokio::sync::Semaphore::new(1),
            waiting: AtomicUsize::new(0),
            progress: Mutex::new((String::new(), 0, 0)),
        }
    }

    fn get(&self, key: &str) -> Option<Cached> {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let i = e.iter().position(|(k, _)| k == key)?;
        let hit = e.remove(i);
        let v = hit.1.clone();
        e.push(hit);
        Some(v)
    }

    /// The upload `id`: its file and length in seconds.
    fn upload(&self, id: &str) -> Option<(Arc<TempAudio>, f64)> {
        let u = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        u.iter()
            .find(|(k, _, _)| k == id)
            .map(|(_, f, s)| (f.clone(), *s))
    }

    /// Keep an upload under `id` (dropping the oldest past [`MAX_UPLOADS`]).
    fn keep_upload(&self, id: String, file: Arc<TempAudio>, seconds: f64) {
        let mut u = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        u.retain(|(k, _, _)| *k != id);
        u.push((id, file, seconds));
        while u.len() > MAX_UPLOADS {
            u.remove(0);
        }
    }

    fn put(&self, key: String, v: Cached) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|(k, _)| *k != key);
        e.push((key, v));
        let mut total: usize = e.iter().map(|(_, v)| v.floats()).sum();
        while total > self.cap && e.len() > 1 {
            total -= e.remove(0).1.floats();
        }
    }
}

/// Run `f` on a blocking thread once the gate lets it (one explorer computation at a
/// time; 429 when `queue` others already wait).
async fn compute<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let cache = &st.explore;
    if cache.waiting.fetch_add(1, Ordering::Relaxed) >= st.opts.max_queue.max(1) {
        cache.waiting.fetch_sub(1, Ordering::Relaxed);
        return Err(ApiError::overloaded("explorer", 1, st.opts.max_queue, 1));
    }
    let permit = cache.gate.acquire().await;
    cache.waiting.fetch_sub(1, Ordering::Relaxed);
    let _permit = permit.map_err(|_| ApiError::unavailable("the server is stopping"))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("an explorer task failed: {e}")))?
}

fn respond(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

// ------------------------------------------------------------------ inputs

/// A served model as the explorer sees it.
#[derive(Clone)]
struct Subject {
    name: String,
    model: Arc<lucent::Model>,
    /// The decoder with its tokenizer (decoders and trained language models).
    text: Option<Arc<TextModel>>,
    /// A speech model: it reads uploaded audio, not text.
    speech: bool,
}

/// One of a model's attentions, as the views choose it (`stack=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stack {
    /// The encoder's self-attention (bidirectional).
    Encoder,
    /// The decoder's self-attention (causal).
    Decoder,
    /// The decoder's cross-attention over the encoder's output.
    Cross,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
            Stack::Cross => "cross",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Stack::Encoder => "encoder self-attention",
            Stack::Decoder => "decoder self-attention (masked)",
            Stack::Cross => "decoder cross-attention",
        }
    }

    /// The trace's name of `leaf` in layer `l` of this attention.
    fn leaf(self, l: usize, leaf: &str) -> String {
        match self {
            Stack::Encoder => format!("encoder.layer.{l}.attn.{leaf}"),
            Stack::Decoder => format!("decoder.layer.{l}.attn.{leaf}"),
            Stack::Cross => format!("decoder.layer.{l}.cross_attn.{leaf}"),
        }
    }
}

/// What the views of a model read: a text, or a speech model's uploaded audio.
#[derive(Clone)]
struct Input {
    /// Names it in the cache.
    key: String,
    /// What the model reads: the text, or the audio file's path.
    arg: String,
    /// The audio's length in seconds (speech models).
    seconds: Option<f64>,
    /// Holds the upload's file while a computation reads it.
    _file: Option<Arc<TempAudio>>,
}

impl Subject {
    fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    /// "encoder" or "decoder": the stack whose layers the views show.
    fn stack(&self) -> &'static str {
        match self.config().kind {
            ModelKind::Encoder => "encoder",
            _ => "decoder",
        }
    }

    fn layers(&self) -> usize {
        let c = self.config();
        match c.kind {
            ModelKind::Encoder => c.encoder_layers,
            _ => c.decoder_layers,
        }
    }

    /// An encoder-decoder (three attentions, a source and a target).
    fn seq2seq(&self) -> bool {
        self.config().kind == ModelKind::EncoderDecoder
    }

    /// Its attentions, the default first.
    fn stacks(&self) -> Vec<Stack> {
        match self.config().kind {
            ModelKind::Encoder => vec![Stack::Encoder],
            ModelKind::Decoder => vec![Stack::Decoder],
            ModelKind::EncoderDecoder => vec![Stack::Cross, Stack::Encoder, Stack::Decoder],
        }
    }

    fn layers_of(&self, stack: Stack) -> usize {
        match stack {
            Stack::Encoder => self.config().encoder_layers,
            _ => self.config().decoder_layers,
        }
    }
}

/// The attention `stack=` names (default: the model's first).
fn stack_param(s: &Subject, q: &HashMap<String, String>) -> Result<Stack, ApiError> {
    let all = s.stacks();
    match q.get("stack").map(String::as_str) {
        None | Some("") => Ok(all[0]),
        Some(name) => all
            .iter()
            .copied()
            .find(|x| x.name() == name)
            .ok_or_else(|| {
                ApiError::invalid_param(
                    "stack",
                    format!(
                        "stack '{name}': {} has {}",
                        s.name,
                        all.iter().map(|x| x.name()).collect::<Vec<_>>().join(", ")
                    ),
                )
            }),
    }
}

/// The input of a view: `text`, or a speech model's `audio` upload.
fn input_param(st: &AppState, s: &Subject, q: &HashMap<String, String>) -> Result<Input, ApiError> {
    if !s.speech {
        let t = text_param(q)?;
        return Ok(Input {
            key: t.clone(),
            arg: t,
            seconds: None,
            _file: None,
        });
    }
    let id = q.get("audio").map(|a| a.trim()).filter(|a| !a.is_empty()).ok_or_else(|| {
        ApiError::invalid_param(
            "audio",
            format!(
                "{} is a speech model: upload a WAV with POST /explore/api/audio (the page's file picker) and pass its id as audio",
                s.name
            ),
        )
    })?;
    let (file, seconds) = st.explore.upload(id).ok_or_else(|| {
        ApiError::invalid_param(
            "audio",
            format!("no upload '{id}' on this server (it keeps the last {MAX_UPLOADS} while it runs); upload the file again"),
        )
    })?;
    Ok(Input {
        key: format!("audio:{id}"),
        arg: file.path().to_string_lossy().into_owned(),
        seconds: Some(seconds),
        _file: Some(file),
    })
}

fn subject(st: &AppState, q: &HashMap<String, String>) -> Result<Subject, ApiError> {
    let models = st.accepting()?;
    let m = match q.get("model") {
        Some(n) => models
            .iter()
            .find(|m| &m.name == n)
            .ok_or_else(|| ApiError::model_not_found(n, &st.names()))?,
        None => models
            .first()
            .ok_or_else(|| ApiError::invalid_param("model", "this server has no model"))?,
    };
    let text = match &m.served {
        Served::Decoder(e) => Some(e.model().clone()),
        _ => None,
    };
    Ok(Subject {
        name: m.name.clone(),
        model: m.model.clone(),
        text,
        speech: matches!(m.served, Served::Speech(_)),
    })
}

fn text_param(q: &HashMap<String, String>) -> Result<String, ApiError> {
    let t = q.get("text").cloned().unwrap_or_default();
    if t.trim().is_empty() {
        return Err(ApiError::invalid_param(
            "text",
            "text is required and must not be empty",
        ));
    }
    if t.len() > MAX_TEXT_BYTES {
        return Err(ApiError::invalid_param(
            "text",
            format!(
                "text is {} bytes; the explorer reads at most {MAX_TEXT_BYTES}",
                t.len()
            ),
        ));
    }
    Ok(t)
}

/// An optional number parameter.
fn num<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, ApiError> {
    match q.get(name) {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            ApiError::invalid_param(name, format!("{name} must be a number, got '{s}'"))
        }),
    }
}

/// A required index below `n`.
fn index(
    q: &HashMap<String, String>,
    name: &str,
    n: usize,
    default: Option<usize>,
) -> Result<usize, ApiError> {
    let i = match (num::<usize>(q, name)?, default) {
        (Some(i), _) => i,
        (None, Some(d)) => d,
        (None, None) => return Err(ApiError::invalid_param(name, format!("{name} is required"))),
    };
    if i >= n {
        return Err(ApiError::invalid_param(
            name,
            format!(
                "{name} {i} does not exist: there are {n} (0..{})",
                n.saturating_sub(1)
            ),
        ));
    }
    Ok(i)
}

/// The tokens of `text`, bounded by [`MAX_TOKENS`] and the model's context.
fn read_tokens(s: &Subject, text: &str) -> Result<Vec<Token>, ApiError> {
    let toks = s.model.tokens(text)?;
    let limit = MAX_TOKENS.min(s.config().max_positions.max(1));
    if toks.len() > limit {
        return Err(ApiError::invalid_param(
            "text",
            format!(
                "the text is {} tokens; the explorer reads at most {limit} with {}",
                toks.len(),
                s.name
            ),
        ));
    }
    if toks.is_empty() {
        return Err(ApiError::invalid_param("text", "the text has no tokens"));
    }
    Ok(toks)
}

/// Trace the forward pass over `text` with `filter` (decoders: every position's
/// attention; with `last_only` the head only at the last position). `stop_early` ends
/// the pass after the last layer the filter keeps ([`Trace::stop_when_done`]).
///
/// With interventions the pass is [`lucent::Intervened::trace_with`]'s (the same
/// forward, writing them at their hook points; every position's logits).
fn run_trace(
    s: &Subject,
    text: &str,
    filter: TraceFilter,
    last_only: bool,
    stop_early: bool,
    ivs: &[Intervention],
) -> Result<Trace, ApiError> {
    let mut trace = Trace::with_filter(filter);
    if stop_early {
        trace = trace.stop_when_done();
    }
    if !ivs.is_empty() {
        return Ok(s.model.intervene(ivs)?.trace_with(text, trace)?);
    }
    match &s.text {
        Some(tm) => {
            let ids = tm.encode(text)?;
            tm.model.forward(&ids, None, last_only, Some(&mut trace))?;
        }
        None => trace = s.model.trace_with(text, trace)?,
    }
    Ok(trace)
}

fn recorded<'a>(trace: &'a Trace, name: &str) -> Result<&'a Tensor, ApiError> {
    trace
        .get(name)
        .ok_or_else(|| ApiError::internal(format!("the forward pass recorded no '{name}'")))
}

fn b64(v: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(v.len() * 4);
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn key(s: &Subject, text: &str, what: &str) -> String {
    format!("{}\u{0}{text}\u{0}{what}", s.name)
}

/// The interventions of `iv=` (a JSON array, or one object, in [`Intervention`]'s
/// shape), checked against the model: 400 naming `iv` and the intervention's field.
fn iv_param(s: &Subject, q: &HashMap<String, String>) -> Result<Vec<Intervention>, ApiError> {
    let Some(text) = q.get("iv").filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let bad = |e: lucent::Error| ApiError::invalid_param("iv", format!("iv: {e}"));
    let ivs = Intervention::parse_json(text).map_err(bad)?;
    if !ivs.is_empty() && s.seq2seq() {
        return Err(ApiError::invalid_param(
            "iv",
            format!(
                "{} is an encoder-decoder: the explorer applies interventions to encoders and decoders \
                 (the CLI's --intervene and the library take them for every model kind)",
                s.name
            ),
        ));
    }
    let points = s.model.hook_points();
    for iv in &ivs {
        iv.check(&points).map_err(bad)?;
    }
    Ok(ivs)
}

/// What interventions add to a cache key (nothing for none: the clean run's entries).
fn iv_key(ivs: &[Intervention]) -> String {
    if ivs.is_empty() {
        return String::new();
    }
    format!("\u{0}iv{}", serde_json::to_string(ivs).unwrap_or_default())
}

// ------------------------------------------------------------------ routes

async fn models(State(st): St) -> Response {
    respond((|| {
        let models = st.accepting()?;
        let list: Vec<Value> = models
            .iter()
            .map(|m| {
                let c = m.model.config();
                let layers = if c.kind == ModelKind::Encoder {
                    c.encoder_layers
                } else {
                    c.decoder_layers
                };
                json!({
                    "name": m.name,
                    "kind": format!("{:?}", c.kind),
                    "family": c.family,
                    "precision": m.model.precision().name(),
                    "layers": layers,
                    "heads": c.n_heads,
                    "kv_heads": c.n_kv_heads,
                    "d_model": c.d_model,
                    "d_k": c.head_dim,
                    "d_ff": c.d_ff,
                    "vocab": c.vocab_size,
                    "context": c.max_positions,
                    "windows": (0..layers).map(|l| c.window_of_layer(l)).collect::<Vec<_>>(),
                    "generates": matches!(m.served, Served::Decoder(_)),
                    "input": if matches!(m.served, Served::Speech(_)) { "audio" } else { "text" },
                    "stacks": stacks_json(c.kind, c),
                    "config": c,
                })
            })
            .collect();
        Ok(json!({"models": list, "limits": {"text_bytes": MAX_TEXT_BYTES, "tokens": MAX_TOKENS}}))
    })())
}

/// The attentions of a model of `kind`, the default first: name, title, layers.
fn stacks_json(kind: ModelKind, c: &ModelConfig) -> Value {
    let list: Vec<(Stack, usize)> = match kind {
        ModelKind::Encoder => vec![(Stack::Encoder, c.encoder_layers)],
        ModelKind::Decoder => vec![(Stack::Decoder, c.decoder_layers)],
        ModelKind::EncoderDecoder => vec![
            (Stack::Cross, c.decoder_layers),
            (Stack::Encoder, c.encoder_layers),
            (Stack::Decoder, c.decoder_layers),
        ],
    };
    json!(list
        .into_iter()
        .map(|(s, n)| json!({"name": s.name(), "title": s.title(), "layers": n}))
        .collect::<Vec<_>>())
}

/// `POST /explore/api/audio`: keep an uploaded WAV for a speech model's views.
async fn upload_audio(State(st): St, body: Body) -> Response {
    respond(
        async {
            st.accepting()?;
            let bytes = crate::routes::read_body(body, MAX_AUDIO_BYTES).await?;
            if bytes.is_empty() {
                return Err(ApiError::invalid(
                    "the body is empty: send the WAV file's bytes as the request body",
                ));
            }
            let id = {
                use sha2::Digest;
                let h = sha2::Sha256::digest(&bytes);
                h.iter()
                    .take(8)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            };
            if let Some((_, seconds)) = st.explore.upload(&id) {
                return Ok(json!({"audio": id, "seconds": seconds}));
            }
            let seconds = compute(&st, move || {
                let (file, mut f) = TempAudio::create()?;
                use std::io::Write;
                f.write_all(&bytes)
                    .map_err(|e| ApiError::internal(format!("cannot keep the upload: {e}")))?;
                drop(f);
                let stream = lucent::io::AudioStream::open(file.path())
                    .map_err(|e| ApiError::invalid(format!("not audio lucent reads: {e}")))?;
                let seconds = stream.info().duration_secs();
                if seconds <= 0.0 {
                    return Err(ApiError::invalid("the audio has no samples"));
                }
                Ok((Arc::new(file), seconds))
            })
            .await
            .map(|(file, seconds)| {
                st.explore.keep_upload(id.clone(), file, seconds);
                seconds
            })?;
            Ok(json!({"audio": id, "seconds": seconds}))
        }
        .await,
    )
}

/// A speech model's encoder reads a log-mel spectrogram, not token ids: replace the
/// encoder's input steps (ids, embedding, positions) with Whisper's front-end — two
/// Conv1d layers with GELU (the second of stride 2) and the stored sinusoidal positions.
fn speech_front_end(steps: &mut Vec<ShapeStep>, n_mels: usize, d: usize) {
    let first_layer = steps
        .iter()
        .position(|s| s.stage == "encoder" && s.repeat > 1)
        .unwrap_or(0);
    let start = steps
        .iter()
        .position(|s| s.stage == "encoder")
        .unwrap_or(0)
        .min(first_layer);
    let (f, p) = (N_FRAMES, N_FRAMES / 2);
    let step = |name: &str, dims: &str, shape: Vec<usize>, note: &str| ShapeStep {
        stage: "encoder".into(),
        repeat: 1,
        name: name.into(),
        dims: dims.into(),
        shape,
        note: note.into(),
    };
    let front = vec![
        step(
            "log-mel spectrogram of a 30-s window",
            "(b, n_mels, frames)",
            vec![1, n_mels, f],
            "hop 10 ms",
        ),
        step(
            "Conv1d (kernel 3, stride 1) + GELU",
            "(b, d, frames)",
            vec![1, d, f],
            "",
        ),
        step(
            "Conv1d (kernel 3, stride 2) + GELU",
            "(b, d, t_src)",
            vec![1, d, p],
            "20 ms a position",
        ),
        step(
            "transpose to positions × features",
            "(b, t_src, d)",
            vec![1, p, d],
            "",
        ),
        step(
            "+ sinusoidal positions (stored (t_src, d) table)",
            "(b, t_src, d)",
            vec![1, p, d],
            "",
        ),
    ];
    steps.splice(start..first_layer, front);
}

async fn architecture(State(st): St, Query(q): Params) -> Response {
    respond(
        async {
            let (config, name, t, mels) = match q.get("preset") {
                Some(p) => {
                    let c = lucent::model::presets::preset(p)
                        .map_err(|e| ApiError::from(e).with_param("preset"))?;
                    let t = num::<usize>(&q, "t")?.unwrap_or(8).clamp(1, MAX_TOKENS);
                    (c, p.clone(), t, None)
                }
                None => {
                    let s = subject(&st, &q)?;
                    let t = match q.get("text") {
                        Some(_) => {
                            let text = text_param(&q)?;
                            let s2 = s.clone();
                            compute(&st, move || read_tokens(&s2, &text)).await?.len()
                        }
                        None => num::<usize>(&q, "t")?.unwrap_or(8).clamp(1, MAX_TOKENS),
                    };
                    let mels = s.model.transcriber().ok().map(|tr| tr.n_mels);
                    (s.config().clone(), s.name, t, mels)
                }
            };
            let src = match (config.kind, mels) {
                (ModelKind::EncoderDecoder, Some(_)) => Some(N_FRAMES / 2),
                (ModelKind::EncoderDecoder, None) => Some(t),
                _ => None,
            };
            let mut steps = forward_shapes(&config, 1, t, src)?;
            let audio = mels.map(|n_mels| {
                speech_front_end(&mut steps, n_mels, config.d_model);
                json!({"n_mels": n_mels, "frames": N_FRAMES, "positions": N_FRAMES / 2})
            });
            let layers = config.encoder_layers.max(config.decoder_layers);
            Ok(json!({
                "model": name,
                "t": t,
                "config": config,
                "windows": (0..layers).map(|l| config.window_of_layer(l)).collect::<Vec<_>>(),
                "steps": steps,
                "audio": audio,
            }))
        }
        .await,
    )
}

async fn tokens(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async {
            let s = subject(&st, &q)?;
            if s.seq2seq() {
                let input = input_param(&st, &s, &q)?;
                let sides = compute(&st, move || sides(&st2, &s, &input)).await?;
                return Ok(json!({"tokens": sides.source, "target": sides.target}));
            }
            let text = text_param(&q)?;
            let toks = compute(&st, move || read_tokens(&s, &text)).await?;
            let list: Vec<Value> = toks
                .iter()
                .map(|t| {
                    json!({"id": t.id, "piece": t.piece, "text": t.text, "special": t.special,
                           "bytes": t.text.as_bytes()})
                })
                .collect();
            Ok(json!({"tokens": list}))
        }
        .await,
    )
}

/// The weights (1, h, t, t) of `layer`, from the cache or a traced pass (which caches
/// every layer it recorded).
fn layer_weights(
    st: &AppState,
    s: &Subject,
    text: &str,
    layer: usize,
    t: usize,
    ivs: &[Intervention],
) -> Result<Arc<Tensor>, ApiError> {
    let ik = iv_key(ivs);
    let k = key(s, text, &format!("weights.{layer}{ik}"));
    if let Some(Cached::Weights(w)) = st.explore.get(&k) {
        return Ok(w);
    }
    let layers: Vec<usize> = if t <= ALL_LAYERS_UP_TO {
        (0..s.layers()).collect()
    } else {
        vec![layer]
    };
    let filter = TraceFilter {
        leaves: Some(vec!["weights".into()]),
        layers: Some(layers.clone()),
        prefix: Some(format!("{}.", s.stack())),
    };
    // One layer of a long text: stop the pass after it (the layers after it and the
    // head would only cost time).
    let trace = run_trace(s, text, filter, true, layers.len() == 1, ivs)?;
    let mut out = None;
    for l in layers {
        let name = format!("{}.layer.{l}.attn.weights", s.stack());
        let w = Arc::new(recorded(&trace, &name)?.clone());
        if l == layer {
            out = Some(w.clone());
        }
        st.explore.put(
            key(s, text, &format!("weights.{l}{ik}")),
            Cached::Weights(w),
        );
    }
    out.ok_or_else(|| ApiError::internal(format!("layer {layer} was not recorded")))
}

/// An encoder-decoder's two sides over one input: the source (the input's tokens, or
/// a speech model's audio positions) and the target it decodes greedily, as token
/// objects and as labels (a speech model's positions up to a little past the audio).
pub struct Sides {
    source: Vec<Value>,
    target: Vec<Value>,
    source_labels: Vec<String>,
    target_labels: Vec<String>,
}

fn label_token(text: &str, special: bool) -> Value {
    json!({"id": null, "piece": text, "text": text, "special": special, "bytes": text.as_bytes()})
}

/// The sides of `input` (cached; computing them traces the decoder's weights, which
/// are cached too).
fn sides(st: &AppState, s: &Subject, input: &Input) -> Result<Arc<Sides>, ApiError> {
    if let Some(Cached::Sides(v)) = st.explore.get(&key(s, &input.key, "sides")) {
        return Ok(v);
    }
    Ok(seq2seq_pass(st, s, input, Stack::Decoder)?.0)
}

/// Keep the first `rows` rows and `cols` columns of each head of (1, h, r, c).
fn crop(w: &Tensor, rows: usize, cols: usize) -> Result<Tensor, ApiError> {
    let [b, h, r, c] = w.dims()?;
    let (rows, cols) = (rows.min(r), cols.min(c));
    if (rows, cols) == (r, c) {
        return Ok(w.clone());
    }
    let mut out = Vec::with_capacity(b * h * rows * cols);
    for m in w.data().chunks(r * c) {
        for i in 0..rows {
            out.extend_from_slice(&m[i * c..i * c + cols]);
        }
    }
    Ok(Tensor::new(out, &[b, h, rows, cols])?)
}

/// Every layer's weights of a pass, by attention and layer.
type LayerWeights = Vec<(Stack, usize, Arc<Tensor>)>;

/// One traced pass of an encoder-decoder over `input`, recording the attention
/// weights of the encoder (`Stack::Encoder`) or of the decoder (self and cross) in
/// every layer; caches each (stack, layer), cropped to the positions shown, and the
/// sides, and returns them too (the cache, bounded, may already have let the first go
/// by the time the pass ends). One side at a time: a speech model's encoder weights are
/// large.
fn seq2seq_pass(
    st: &AppState,
    s: &Subject,
    input: &Input,
    side: Stack,
) -> Result<(Arc<Sides>, LayerWeights), ApiError> {
    let prefix = if side == Stack::Encoder {
        "encoder."
    } else {
        "decoder."
    };
    let filter = TraceFilter {
        leaves: Some(vec!["weights".into()]),
        layers: None,
        prefix: Some(prefix.into()),
    };
    let trace = s.model.trace_with(&input.arg, Trace::with_filter(filter))?;
    let target_labels = trace.target_tokens().to_vec();
    let first = if side == Stack::Encoder {
        Stack::Encoder.leaf(0, "weights")
    } else {
        Stack::Cross.leaf(0, "weights")
    };
    let all = recorded(&trace, &first)?.last_dim();
    let (source, source_labels, keep) = match input.seconds {
        Some(secs) => {
            let keep = audio_positions(secs, all);
            let labels: Vec<String> = (0..keep)
                .map(|j| format!("{:.2}s", j as f64 * 0.02))
                .collect();
            (
                labels.iter().map(|l| label_token(l, false)).collect(),
                labels,
                keep,
            )
        }
        None => {
            let toks = s.model.tokens(&input.arg)?;
            let labels: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
            let objs = toks
                .iter()
                .map(|t| json!({"id": t.id, "piece": t.piece, "text": t.text, "special": t.special, "bytes": t.text.as_bytes()}))
                .collect();
            (objs, labels, all)
        }
    };
    let stacks: &[Stack] = if side == Stack::Encoder {
        &[Stack::Encoder]
    } else {
        &[Stack::Decoder, Stack::Cross]
    };
    let mut weights = Vec::new();
    for &stack in stacks {
        for l in 0..s.layers_of(stack) {
            let w = recorded(&trace, &stack.leaf(l, "weights"))?;
            let w = Arc::new(match stack {
                Stack::Encoder => crop(w, keep, keep)?,
                Stack::Cross => crop(w, usize::MAX, keep)?,
                Stack::Decoder => w.clone(),
            });
            st.explore.put(
                key(s, &input.key, &format!("weights.{}.{l}", stack.name())),
                Cached::Weights(w.clone()),
            );
            weights.push((stack, l, w));
        }
    }
    let target = target_labels
        .iter()
        .map(|t| label_token(t, t.starts_with("<|") && t.ends_with("|>")))
        .collect();
    let sides = Arc::new(Sides {
        source,
        target,
        source_labels,
        target_labels,
    });
    st.explore
        .put(key(s, &input.key, "sides"), Cached::Sides(sides.clone()));
    Ok((sides, weights))
}

/// The weights (1, h, rows, cols) of an encoder-decoder's `stack` in `layer`.
fn seq2seq_weights(
    st: &AppState,
    s: &Subject,
    input: &Input,
    stack: Stack,
    layer: usize,
) -> Result<Arc<Tensor>, ApiError> {
    let k = key(s, &input.key, &format!("weights.{}.{layer}", stack.name()));
    if let Some(Cached::Weights(w)) = st.explore.get(&k) {
        return Ok(w);
    }
    let (_, weights) = seq2seq_pass(st, s, input, stack)?;
    weights
        .into_iter()
        .find(|(x, l, _)| *x == stack && *l == layer)
        .map(|(_, _, w)| w)
        .ok_or_else(|| {
            ApiError::internal(format!("{} layer {layer} was not recorded", stack.name()))
        })
}

/// Max-pool a (rows, cols) matrix to at most (n, n): (rows', cols', numbers).
fn pool(m: &[f32], rows: usize, cols: usize, n: usize) -> (usize, usize, Vec<f32>) {
    let (nr, nc) = (rows.min(n), cols.min(n));
    let mut out = vec![0.0f32; nr * nc];
    for i in 0..rows {
        let bi = i * nr / rows;
        for j in 0..cols {
            let bj = j * nc / cols;
            let o = &mut out[bi * nc + bj];
            *o = o.max(m[i * cols + j]);
        }
    }
    (nr, nc, out)
}

async fn attention(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            let stack = stack_param(&s, &q)?;
            let input = input_param(&st, &s, &q)?;
            let c = s.config().clone();
            let layer = index(&q, "layer", s.layers_of(stack), Some(0))?;
            let head = index(&q, "head", c.n_heads, Some(0))?;
            let thumb = num::<usize>(&q, "thumb")?;
            let ivs = iv_param(&s, &q)?;
            let s2 = s.clone();
            let (rows_of, cols_of, w) = compute(&st, move || {
                if s2.seq2seq() {
                    let w = seq2seq_weights(&st2, &s2, &input, stack, layer)?;
                    let sd = sides(&st2, &s2, &input)?;
                    let src: Vec<String> = sd.source_labels.clone();
                    let tgt: Vec<String> = sd.target_labels.clone();
                    return Ok(match stack {
                        Stack::Encoder => (src.clone(), src, w),
                        Stack::Decoder => (tgt.clone(), tgt, w),
                        Stack::Cross => (tgt, src, w),
                    });
                }
                let toks = read_tokens(&s2, &input.arg)?;
                let w = layer_weights(&st2, &s2, &input.arg, layer, toks.len(), &ivs)?;
                let labels: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
                Ok((labels.clone(), labels, w))
            })
            .await?;
            let [_, h, r, cl] = w.dims()?;
            if head >= h || r != rows_of.len() || cl != cols_of.len() {
                return Err(ApiError::internal(format!(
                    "the weights recorded are {:?}, not (1, {}, {}, {})",
                    w.shape(),
                    c.n_heads,
                    rows_of.len(),
                    cols_of.len()
                )));
            }
            let m = &w.data()[head * r * cl..(head + 1) * r * cl];
            let group = (c.n_heads / c.n_kv_heads.max(1)).max(1);
            let (nr, nc, data) = match thumb {
                Some(n) if n > 0 && (n < r || n < cl) => pool(m, r, cl, n.min(256)),
                _ => (r, cl, m.to_vec()),
            };
            let pooled = (nr, nc) != (r, cl);
            Ok(json!({
                "model": s.name,
                "stack": stack.name(),
                "stack_title": stack.title(),
                "layer": layer,
                "head": head,
                "kv_head": head / group,
                "heads_sharing_kv": ((head / group) * group..(head / group + 1) * group).collect::<Vec<_>>(),
                "t": r,
                "keys": cl,
                "rows": nr,
                "cols": nc,
                "size": nr,
                "pooled": pooled,
                "causal": stack == Stack::Decoder,
                "window": if stack == Stack::Decoder { c.window_of_layer(layer) } else { None },
                "tokens": rows_of,
                "row_tokens": if pooled { Vec::new() } else { rows_of.clone() },
                "col_tokens": if pooled { Vec::new() } else { cols_of },
                "weights_f32": b64(&data),
            }))
        }
        .await,
    )
}

async fn steps(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            let stack = stack_param(&s, &q)?;
            let input = input_param(&st, &s, &q)?;
            let c = s.config().clone();
            let layer = index(&q, "layer", s.layers_of(stack), Some(0))?;
            let head = index(&q, "head", c.n_heads, Some(0))?;
            let token_q = num::<usize>(&q, "token")?;
            let s2 = s.clone();
            compute(&st, move || {
                let filter = TraceFilter {
                    leaves: Some(
                        [
                            "q", "k", "v", "scores", "scaled", "mask", "weights", "context",
                        ]
                        .map(String::from)
                        .to_vec(),
                    ),
                    layers: Some(vec![layer]),
                    prefix: Some(stack.leaf(layer, "")),
                };
                // The labels of the query rows and of the keys, and the traced pass.
                let (queries, keys_shown, trace) = if s2.seq2seq() {
                    let sd = sides(&st2, &s2, &input)?;
                    let trace = s2
                        .model
                        .trace_with(&input.arg, Trace::with_filter(filter))?;
                    let (src, tgt) = (sd.source_labels.clone(), sd.target_labels.clone());
                    match stack {
                        Stack::Encoder => (src.clone(), src, trace),
                        Stack::Decoder => (tgt.clone(), tgt, trace),
                        Stack::Cross => (tgt, src, trace),
                    }
                } else {
                    let toks = read_tokens(&s2, &input.arg)?;
                    let labels: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
                    let trace = run_trace(&s2, &input.arg, filter, true, true, &[])?;
                    (labels.clone(), labels, trace)
                };
                let t = queries.len();
                let i = match token_q {
                    Some(i) if i >= t => {
                        return Err(ApiError::invalid_param(
                            "token",
                            format!(
                                "token {i} does not exist: there are {t} query tokens (0..{})",
                                t - 1
                            ),
                        ))
                    }
                    Some(i) => i,
                    None => t - 1,
                };
                let get = |leaf: &str| recorded(&trace, &stack.leaf(layer, leaf));
                let row = |leaf: &str, hh: usize, r: usize| -> Result<Vec<f32>, ApiError> {
                    let x = get(leaf)?;
                    let [_, nh, rows, cols] = x.dims()?;
                    if hh >= nh || r >= rows {
                        return Err(ApiError::internal(format!("{leaf} is {:?}", x.shape())));
                    }
                    Ok(x.data()[(hh * rows + r) * cols..][..cols].to_vec())
                };
                let [_, h_kv, n_keys, _] = get("k")?.dims()?;
                let group = (c.n_heads / h_kv.max(1)).max(1);
                let kv = head / group;
                let qv = row("q", head, i)?;
                let keys: Vec<Vec<f32>> = (0..n_keys)
                    .map(|j| row("k", kv, j))
                    .collect::<Result<_, _>>()?;
                let values: Vec<Vec<f32>> = (0..n_keys)
                    .map(|j| row("v", kv, j))
                    .collect::<Result<_, _>>()?;
                let scores = row("scores", head, i)?;
                let scaled = row("scaled", head, i)?;
                let mask = row("mask", head, i)?;
                let weights = row("weights", head, i)?;
                let context = row("context", head, i)?;
                // Recompute the row by the formula from q, K, V and the mask; compare.
                let scale = c.score_scale();
                let by_hand: Vec<f32> = keys
                    .iter()
                    .zip(&mask)
                    .map(|(k, m)| qv.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale + m)
                    .collect();
                let mx = by_hand.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = by_hand.iter().map(|x| (x - mx).exp()).collect();
                let z: f32 = e.iter().sum();
                let mut diff = 0.0f32;
                for (j, w) in weights.iter().enumerate() {
                    diff = diff.max((e[j] / z - w).abs());
                }
                for (d, o) in context.iter().enumerate() {
                    let sum: f32 = weights.iter().zip(&values).map(|(w, v)| w * v[d]).sum();
                    diff = diff.max((sum - o).abs());
                }
                // A speech model's keys are shown up to a little past the audio (the
                // sums above ran over all of them).
                let shown = keys_shown.len().min(n_keys);
                let cut = |v: Vec<f32>| v[..shown].to_vec();
                let finite = |v: Vec<f32>| -> Vec<Option<f32>> {
                    v[..shown]
                        .iter()
                        .map(|&x| x.is_finite().then_some(x))
                        .collect()
                };
                Ok(json!({
                    "model": s2.name, "stack": stack.name(), "layer": layer, "head": head,
                    "kv_head": kv, "token": i,
                    "d_k": qv.len(), "scale": scale,
                    "tokens": keys_shown,
                    "query_tokens": queries,
                    "keys_total": n_keys,
                    "q": qv, "k": keys[..shown].to_vec(), "v": values[..shown].to_vec(),
                    "scores": cut(scores), "scaled": cut(scaled),
                    "mask": finite(mask),
                    "weights": cut(weights), "context": context,
                    "by_hand_max_diff": diff,
                }))
            })
            .await
        }
        .await,
    )
}

/// ‖x‖ of each row of a (1, t, d) tensor.
fn row_norms(x: &Tensor) -> Vec<f32> {
    let d = x.last_dim().max(1);
    x.data()
        .chunks(d)
        .map(|r| r.iter().map(|v| v * v).sum::<f32>().sqrt())
        .collect()
}

/// The logits the model would give at a position whose hidden state (before the final
/// norm) is `h` (d): the final norm, then the head. The logit lens reads every layer
/// out this way.
fn read_out(tm: &TextModel, h: &[f32]) -> Result<Vec<f32>, ApiError> {
    let x = Tensor::new(h.to_vec(), &[1, h.len()])?; // (1, d)
    let x = match &tm.model.decoder.final_norm {
        Some(n) => n.forward(&x)?,
        None => x,
    };
    Ok(tm.model.logits(&x)?.into_vec()) // (1, V)
}

/// The top `k` of softmax(`logits`) as (id, p).
fn top_probs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| ((x - m) as f64).exp()).sum();
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(k - 1, |&a, &b| {
        logits[b as usize].total_cmp(&logits[a as usize])
    });
    idx.truncate(k);
    idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    idx.into_iter()
        .map(|i| (i, (((logits[i as usize] - m) as f64).exp() / z) as f32))
        .collect()
}

fn token_text(tm: &TextModel, id: u32) -> String {
    String::from_utf8_lossy(&tm.tokenizer.token_bytes(id, false).unwrap_or_default()).into_owned()
}

/// The path view of `text` at query position `i` (see the module docs).
fn path_view(
    st: &AppState,
    s: &Subject,
    text: &str,
    i: usize,
    ivs: &[Intervention],
) -> Result<Arc<Value>, ApiError> {
    let ik = iv_key(ivs);
    let k = key(s, text, &format!("path.{i}{ik}"));
    if let Some(Cached::Path(v)) = st.explore.get(&k) {
        return Ok(v);
    }
    let toks = read_tokens(s, text)?;
    let t = toks.len();
    let c = s.config();
    let n = s.layers();
    let stack = s.stack();
    let per_layer = t * (3 * c.d_model + c.d_ff.max(c.d_model));
    let group = (PATH_PASS_FLOATS / per_layer.max(1)).clamp(1, n.max(1));
    let mut residual = vec![Vec::new(); n + 1];
    let mut attn_norm = vec![Vec::new(); n];
    let mut ffn_norm = vec![Vec::new(); n];
    let mut ffn = vec![Value::Null; n];
    let mut experts = vec![Value::Null; n];
    let mut lens = vec![Value::Null; n];
    let mut logits_at: Option<Vec<f32>> = None;
    let mut start = 0;
    while start < n {
        let layers: Vec<usize> = (start..(start + group).min(n)).collect();
        let filter = TraceFilter {
            leaves: Some(vec![
                "output".into(),
                "hidden".into(),
                "embeddings".into(),
                "input".into(),
                "experts".into(),
                "expert_weights".into(),
            ]),
            layers: Some(layers.clone()),
            prefix: Some(format!("{stack}.")),
        };
        let trace = run_trace(s, text, filter, false, true, ivs)?;
        if start == 0 {
            // The residual stream's start: what the stack receives.
            let x0 = trace
                .get(&format!("{stack}.input"))
                .or_else(|| trace.get(&format!("{stack}.embeddings")));
            if let Some(x0) = x0 {
                residual[0] = row_norms(x0);
            }
        }
        for &l in &layers {
            let p = format!("{stack}.layer.{l}");
            let out = recorded(&trace, &format!("{p}.output"))?;
            residual[l + 1] = row_norms(out);
            if let Some(a) = trace.get(&format!("{p}.attn.output")) {
                attn_norm[l] = row_norms(a);
            }
            if let Some(f) = trace.get(&format!("{p}.ffn.output")) {
                ffn_norm[l] = row_norms(f);
            }
            if let Some(hd) = trace.get(&format!("{p}.ffn.hidden")) {
                let d_ff = hd.last_dim().max(1);
                let all = hd.data();
                let count = all.len().max(1) as f32;
                let mean_abs = all.iter().map(|v| v.abs()).sum::<f32>() / count;
                let active = all.iter().filter(|v| **v > 0.0).count() as f32 / count;
                let row = &all[i * d_ff..(i + 1) * d_ff];
                let mut top: Vec<usize> = (0..d_ff).collect();
                top.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()));
                top.truncate(8);
                let per_token_mean: Vec<f32> = all
                    .chunks(d_ff)
                    .map(|r| r.iter().map(|v| v.abs()).sum::<f32>() / d_ff as f32)
                    .collect();
                ffn[l] = json!({
                    "d_ff": d_ff, "mean_abs": mean_abs, "active": active,
                    "max": all.iter().cloned().fold(f32::NEG_INFINITY, f32::max),
                    "per_token_mean_abs": per_token_mean,
                    "top_at_token": top.iter().map(|&j| json!([j, row[j]])).collect::<Vec<_>>(),
                });
            }
            // A mixture of experts: which experts each token chose (most probable first)
            // and, at the query token, their weights.
            if let (Some(ex), Some(w)) = (
                trace.get(&format!("{p}.ffn.experts")),
                trace.get(&format!("{p}.ffn.expert_weights")),
            ) {
                let k = ex.last_dim().max(1);
                let at = |v: &Tensor| v.data().get(i * k..(i + 1) * k).map(<[f32]>::to_vec);
                if let (Some(e), Some(wt)) = (at(ex), at(w)) {
                    experts[l] = json!({
                        "k": k,
                        "at_token": e.iter().zip(&wt).map(|(&e, &w)| json!([e as usize, w])).collect::<Vec<_>>(),
                        "per_token": ex.data().chunks(k)
                            .map(|r| r.iter().map(|&e| e as usize).collect::<Vec<_>>())
                            .collect::<Vec<_>>(),
                    });
                }
            }
            if let Some(tm) = &s.text {
                let d = out.last_dim();
                let lg = read_out(tm, &out.data()[i * d..(i + 1) * d])?;
                lens[l] = json!(top_probs(&lg, 5)
                    .into_iter()
                    .map(|(id, p)| json!({"id": id, "text": token_text(tm, id), "p": p}))
                    .collect::<Vec<_>>());
                if l + 1 == n {
                    logits_at = Some(lg);
                }
            }
        }
        start += group;
    }
    if let Some(lg) = &logits_at {
        st.explore.put(
            key(s, text, &format!("logits.{i}{ik}")),
            Cached::Logits(Arc::new(lg.clone())),
        );
    }
    let v = Arc::new(json!({
        "model": s.name, "token": i, "t": t,
        "interventions": ivs,
        "tokens": toks.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
        "residual_norms": residual,
        "attn_out_norms": attn_norm,
        "ffn_out_norms": ffn_norm,
        "ffn": ffn,
        "experts": experts,
        "lens": if s.text.is_some() { json!(lens) } else { Value::Null },
        "logits_f32": logits_at.as_ref().map(|l| b64(l)),
        "vocab": logits_at.as_ref().map(Vec::len),
        "final_top": match (&s.text, &logits_at) {
            (Some(tm), Some(lg)) => json!(top_probs(lg, 256)
                .into_iter()
                .map(|(id, _)| json!([id, token_text(tm, id)]))
                .collect::<Vec<_>>()),
            _ => Value::Null,
        },
    }));
    st.explore.put(k, Cached::Path(v.clone()));
    Ok(v)
}

/// The path and distribution views read one stack's residual stream and a decoder's
/// logits: refused for an encoder-decoder, naming the views it has.
fn no_seq2seq(s: &Subject, view: &str) -> Result<(), ApiError> {
    if s.seq2seq() {
        return Err(ApiError::invalid_param(
            "model",
            format!(
                "{} is an encoder-decoder: the {view} view is drawn for encoders and decoders; \
                 its attentions are in the attention and steps views (stack=cross, encoder or decoder)",
                s.name
            ),
        ));
    }
    Ok(())
}

fn token_index(q: &HashMap<String, String>, t: usize) -> Result<usize, ApiError> {
    match num::<usize>(q, "token")? {
        Some(i) if i >= t => Err(ApiError::invalid_param(
            "token",
            match t {
                1 => format!("token {i} does not exist: the text has 1 token (0)"),
                _ => format!(
                    "token {i} does not exist: the text has {t} tokens (0..{})",
                    t.saturating_sub(1)
                ),
            },
        )),
        Some(i) => Ok(i),
        None => Ok(t - 1),
    }
}

async fn path(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            no_seq2seq(&s, "path")?;
            let text = text_param(&q)?;
            let ivs = iv_param(&s, &q)?;
            let v = compute(&st, move || {
                let t = read_tokens(&s, &text)?.len();
                let i = token_index(&q, t)?;
                path_view(&st2, &s, &text, i, &ivs)
            })
            .await?;
            Ok((*v).clone())
        }
        .await,
    )
}

async fn dist(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            no_seq2seq(&s, "distribution")?;
            let text = text_param(&q)?;
            let tm = s.text.clone().ok_or_else(|| {
                ApiError::invalid_param("model", format!("{} is an encoder: it has no next-token distribution", s.name))
            })?;
            let sampling = Sampling {
                temperature: num(&q, "temperature")?.unwrap_or(1.0),
                top_k: num(&q, "top_k")?.unwrap_or(0),
                top_p: num(&q, "top_p")?.unwrap_or(1.0),
                min_p: num(&q, "min_p")?.unwrap_or(0.0),
                ..Sampling::greedy()
            };
            sampling
                .validate()
                .map_err(|e| ApiError::invalid(e.to_string()))?;
            let limit = num::<usize>(&q, "limit")?.unwrap_or(50).min(1000);
            let ivs = iv_param(&s, &q)?;
            compute(&st, move || {
                let t = read_tokens(&s, &text)?.len();
                let i = token_index(&q, t)?;
                let k = key(&s, &text, &format!("logits.{i}{}", iv_key(&ivs)));
                let logits = match st2.explore.get(&k) {
                    Some(Cached::Logits(l)) => l,
                    _ => {
                        path_view(&st2, &s, &text, i, &ivs)?;
                        match st2.explore.get(&k) {
                            Some(Cached::Logits(l)) => l,
                            _ => return Err(ApiError::internal("no logits were recorded")),
                        }
                    }
                };
                let d = distribution(&sampling, &logits)?;
                Ok(json!({
                    "model": s.name, "token": i, "interventions": ivs,
                    "temperature": sampling.temperature, "top_k": sampling.top_k,
                    "top_p": sampling.top_p, "min_p": sampling.min_p,
                    "kept": d.len(),
                    "top": d.iter().take(limit).map(|&(id, p)| json!({"id": id, "text": token_text(&tm, id), "p": p})).collect::<Vec<_>>(),
                }))
            })
            .await
        }
        .await,
    )
}

/// A decoder's [`TextModel`], or 400 naming the view that needs one.
fn decoder_of(s: &Subject, view: &str) -> Result<Arc<TextModel>, ApiError> {
    match (&s.text, s.seq2seq()) {
        (Some(tm), false) => Ok(tm.clone()),
        _ => Err(ApiError::invalid_param(
            "model",
            format!(
                "{} is not a decoder: the {view} view watches a next token (pick smollm2, gemma3 or a trained GPT)",
                s.name
            ),
        )),
    }
}

/// A required text parameter other than `text`, bounded as `text` is.
fn text_of(q: &HashMap<String, String>, name: &str) -> Result<String, ApiError> {
    let t = q.get(name).cloned().unwrap_or_default();
    if t.trim().is_empty() {
        return Err(ApiError::invalid_param(
            name,
            format!("{name} is required and must not be empty"),
        ));
    }
    if t.len() > MAX_TEXT_BYTES {
        return Err(ApiError::invalid_param(
            name,
            format!(
                "{name} is {} bytes; the explorer reads at most {MAX_TEXT_BYTES}",
                t.len()
            ),
        ));
    }
    Ok(t)
}

/// The id of the one token `text` is (400 naming `param` otherwise).
fn one_token(tm: &TextModel, text: &str, param: &str) -> Result<u32, ApiError> {
    let ids = tm.tokenizer.encode_ids(text, false, false)?;
    match ids.as_slice() {
        [id] => Ok(*id),
        _ => Err(ApiError::invalid_param(
            param,
            format!(
                "{param} {text:?} is {} tokens for this model; give one token (e.g. with its leading space, \" Paris\")",
                ids.len()
            ),
        )),
    }
}

/// Most tokens a patching sweep reads (it runs layers × tokens passes).
const MAX_PATCH_TOKENS: usize = 32;

/// `/explore/api/patch`: the patching sweep of the library ([`lucent::Model::patching_sweep`],
/// the one `lucent patch` prints), reporting its progress to `/explore/api/progress`.
async fn patch(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            let tm = decoder_of(&s, "patching")?;
            let clean = text_param(&q)?;
            let corrupt = text_of(&q, "corrupt")?;
            let hook = q
                .get("hook")
                .cloned()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "resid_pre".into());
            if !lucent::patching::PATCH_POINTS.contains(&hook.as_str()) {
                return Err(ApiError::invalid_param(
                    "hook",
                    format!(
                        "hook '{hook}': give one of {}",
                        lucent::patching::PATCH_POINTS.join(", ")
                    ),
                ));
            }
            let target_text = q.get("target").cloned().filter(|t| !t.is_empty());
            compute(&st, move || {
                let (nc, nk) = (read_tokens(&s, &clean)?.len(), read_tokens(&s, &corrupt)?.len());
                if nc != nk {
                    return Err(ApiError::invalid_param(
                        "corrupt",
                        format!(
                            "the clean text is {nc} tokens and the corrupted text {nk}: patching copies \
                             position by position, so give texts of the same number of tokens"
                        ),
                    ));
                }
                if nc > MAX_PATCH_TOKENS {
                    return Err(ApiError::invalid_param(
                        "text",
                        format!("the text is {nc} tokens; the patching view sweeps at most {MAX_PATCH_TOKENS}"),
                    ));
                }
                let target = match &target_text {
                    Some(t) => Some(one_token(&tm, t, "target")?),
                    None => None,
                };
                let what = format!(
                    "patch.{hook}\u{0}{corrupt}\u{0}{}",
                    target.map_or(String::new(), |t| t.to_string())
                );
                let k = key(&s, &clean, &what);
                if let Some(Cached::Path(v)) = st2.explore.get(&k) {
                    return Ok(v);
                }
                let progress = |done: usize, total: usize| {
                    let mut p = st2.explore.progress.lock().unwrap_or_else(|p| p.into_inner());
                    *p = ("patching".into(), done, total);
                };
                progress(0, s.layers() * nc);
                let sweep = s.model.patching_sweep(&clean, &corrupt, target, &hook, &mut |d, n| {
                    progress(d, n)
                });
                progress(0, 0);
                let sweep = sweep?;
                let corrupt_tokens: Vec<String> =
                    read_tokens(&s, &corrupt)?.into_iter().map(|t| t.text).collect();
                let v = Arc::new(json!({
                    "model": s.name,
                    "clean": clean,
                    "corrupt": corrupt,
                    "target": token_text(&tm, sweep.target),
                    "target_id": sweep.target,
                    "hook": sweep.hook,
                    "tokens": sweep.tokens,
                    "corrupt_tokens": corrupt_tokens,
                    "clean_logprob": sweep.clean_logprob,
                    "corrupt_logprob": sweep.corrupt_logprob,
                    "logprob": sweep.logprob,
                    "restored": sweep.restored,
                }));
                st2.explore.put(k, Cached::Path(v.clone()));
                Ok(v)
            })
            .await
            .map(|v| (*v).clone())
        }
        .await,
    )
}

/// `/explore/api/progress`: the running sweep's passes done and in all (0 of 0: none).
async fn progress(State(st): St) -> Response {
    let p = st
        .explore
        .progress
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Json(json!({"what": p.0, "done": p.1, "total": p.2})).into_response()
}

/// Most new tokens the steering view generates.
const MAX_STEER_TOKENS: usize = 64;

/// `/explore/api/steer`: the steering vector of the pair (`a`, `b`) at `layer`
/// ([`lucent::Model::steering_vector`]) times `coef`, added to
/// `blocks.{layer}.hook_resid_post` at every position (as `lucent steer --from "A|B"
/// --scale COEF` does); the next-token distribution and a greedy continuation of `n`
/// tokens, plain and steered.
async fn steer(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            let tm = decoder_of(&s, "steering")?;
            let text = text_param(&q)?;
            let (a, b) = (text_of(&q, "a")?, text_of(&q, "b")?);
            let layer = index(&q, "layer", s.layers(), None)?;
            let coef: f32 = num(&q, "coef")?.unwrap_or(1.0);
            if !coef.is_finite() || coef.abs() > 1000.0 {
                return Err(ApiError::invalid_param(
                    "coef",
                    format!("coef {coef}: give a number within ±1000"),
                ));
            }
            let n = num::<usize>(&q, "n")?.unwrap_or(16);
            if n > MAX_STEER_TOKENS {
                return Err(ApiError::invalid_param(
                    "n",
                    format!("n {n}: the steering view generates at most {MAX_STEER_TOKENS} tokens"),
                ));
            }
            compute(&st, move || {
                read_tokens(&s, &text)?;
                let vk = key(&s, &a, &format!("steer.{layer}\u{0}{b}"));
                let v = match st2.explore.get(&vk) {
                    Some(Cached::Logits(v)) => v,
                    _ => {
                        let v = Arc::new(s.model.steering_vector(&[(a.as_str(), b.as_str())], layer)?);
                        st2.explore.put(vk, Cached::Logits(v.clone()));
                        v
                    }
                };
                let scaled: Vec<f32> = v.iter().map(|x| x * coef).collect();
                let norm = scaled.iter().map(|x| x * x).sum::<f32>().sqrt();
                let hook = format!("blocks.{layer}.hook_resid_post");
                let greedy = Sampling::greedy().max_tokens(n);
                let all = Sampling {
                    temperature: 1.0,
                    top_k: 0,
                    top_p: 1.0,
                    min_p: 0.0,
                    ..Sampling::greedy()
                };
                let run = |ivs: &[Intervention]| -> Result<Value, ApiError> {
                    let view = s.model.intervene(ivs)?;
                    let logits = view.next_token_logits(&text)?;
                    let d = distribution(&all, &logits)?;
                    let continuation = view.generate(&text, &greedy)?;
                    Ok(json!({
                        "top": d.iter().take(10).map(|&(id, p)| json!({"id": id, "text": token_text(&tm, id), "p": p})).collect::<Vec<_>>(),
                        "continuation": continuation,
                    }))
                };
                let plain = run(&[])?;
                let steered = run(&[Intervention::add(hook.as_str(), scaled)])?;
                Ok(json!({
                    "model": s.name, "text": text, "a": a, "b": b, "layer": layer,
                    "coef": coef, "hook": hook, "norm": norm, "n": n,
                    "plain": plain, "steered": steered,
                }))
            })
            .await
        }
        .await,
    )
}

async fn positions(State(st): St, Query(q): Params) -> Response {
    respond((|| {
        let t = num::<usize>(&q, "t")?.unwrap_or(64).clamp(1, MAX_TABLE_T);
        let paper = RopeConvention::RotateHalf;
        let (d, base, conv, d_k, kind) = match q.get("model") {
            Some(_) => {
                let s = subject(&st, &q)?;
                let c = s.config();
                let (base, conv) = match &c.position {
                    PositionKind::Rope {
                        base, convention, ..
                    } => (*base, *convention),
                    _ => (10_000.0, paper),
                };
                (
                    c.d_model,
                    base,
                    conv,
                    c.head_dim,
                    format!("{:?}", c.position),
                )
            }
            None => (64, 10_000.0, paper, 64, "demo".to_string()),
        };
        let d_table = num::<usize>(&q, "d")?.unwrap_or(d.min(128)).clamp(2, 1024);
        let table = SinusoidalEncoding::table_f64(t, d_table);
        let rope = Rope::new(d_k, base, conv)?;
        let freqs: Vec<f64> = (0..d_k / 2).map(|i| rope.inv_freq(i)).collect();
        Ok(json!({
            "t": t, "d": d_table, "position": kind,
            "sinusoidal": table.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            "rope": {"base": base, "d_k": d_k, "inv_freq": freqs},
        }))
    })())
}

async fn masks(Query(q): Params) -> Response {
    use lucent::nn::mask::{bidirectional_mask, causal_mask, padding_mask, prefix_lm_mask, Mask};
    respond((|| {
        let t = num::<usize>(&q, "t")?.unwrap_or(8).clamp(1, MAX_MASK_T);
        let pad = num::<usize>(&q, "pad")?.unwrap_or(2).min(t - 1);
        let window = num::<usize>(&q, "window")?.unwrap_or(3).clamp(1, t);
        let prefix = num::<usize>(&q, "prefix")?.unwrap_or(t / 2).clamp(1, t);
        let rows = |m: &Mask| -> Vec<Vec<u8>> {
            m.matrix(0)
                .iter()
                .map(|r| r.iter().map(|&b| b as u8).collect())
                .collect()
        };
        let sliding = Mask::from_fn(1, t, t, |_, i, j| j <= i && i - j < window);
        Ok(json!({
            "t": t, "pad": pad, "window": window, "prefix": prefix,
            "masks": [
                {"name": "BERT: padding", "note": format!("every token sees every real token; the last {pad} are padding"), "rows": rows(&padding_mask(&[t - pad], t)?)},
                {"name": "GPT: causal", "note": "token i sees tokens 0..=i", "rows": rows(&causal_mask(t)?)},
                {"name": "T5 encoder: bidirectional", "note": "every token sees every token", "rows": rows(&bidirectional_mask(t)?)},
                {"name": "T5 decoder: causal self-attention", "note": "as GPT", "rows": rows(&causal_mask(t)?)},
                {"name": "T5 cross-attention", "note": "every target token sees every source token", "rows": vec![vec![1u8; t]; t]},
                {"name": "prefix-LM", "note": format!("the first {prefix} see each other; the rest are causal"), "rows": rows(&prefix_lm_mask(t, prefix)?)},
                {"name": "sliding window", "note": format!("causal, and at most {window} back (Gemma 3's local layers)"), "rows": rows(&sliding)},
            ],
        }))
    })())
}
