//! The explorer: a page at `/` that shows every intermediate of a real model's forward
//! pass, and the JSON routes it fetches lazily, one view at a time (`docs/explorer.md`).
//!
//! | route (GET, query parameters) | answer |
//! | --- | --- |
//! | `/` | the page (HTML, CSS and JS embedded in the binary: no CDN, works offline) |
//! | `/explore/api/models` | the models served, with their configs |
//! | `/explore/api/architecture?model=M&text=T` or `?preset=P&t=N` | the block list with the shape after every step ([`lucent::model::shapes`]) |
//! | `/explore/api/tokens?model&text` | ids, pieces, texts and bytes of the tokens |
//! | `/explore/api/attention?model&text&layer&head[&thumb=N]` | one head's softmax weights (t, t) as little-endian f32 in base64; `thumb` max-pools them to N × N |
//! | `/explore/api/steps?model&text&layer&head&token` | the arithmetic of one query row: q, K, V, q·k, ·1/√d_k, mask, softmax, Σ w·v |
//! | `/explore/api/path?model&text&token` | residual-stream norms per layer and token, FFN activation summaries, the logit lens, the final logits |
//! | `/explore/api/distribution?model&text&token&temperature&top_k&top_p&min_p` | the sampler's filtered next-token distribution ([`lucent::pipeline::generate::distribution`]) |
//! | `/explore/api/positions?model&t` | the sinusoidal table and RoPE's frequencies and angles |
//! | `/explore/api/masks?t&window&prefix&pad` | BERT (padding), GPT (causal), T5 (encoder, decoder, cross), prefix-LM and sliding-window masks |
//!
//! Every input is bounded (text bytes and tokens, layer, head and token ranges; 400 with
//! the numbers otherwise). Traces are computed on blocking threads, one at a time, and
//! a head's layer is kept in a small cache bounded by the numbers it holds, so clicking
//! through the heads of a layer computes nothing new. A short text (up to
//! [`ALL_LAYERS_UP_TO`] tokens) records every layer in one pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use lucent::model::shapes::forward_shapes;
use lucent::model::{ModelConfig, ModelKind, PositionKind};
use lucent::nn::position::{Rope, SinusoidalEncoding};
use lucent::ops::rope::RopeConvention;
use lucent::pipeline::generate::{distribution, TextModel};
use lucent::{Sampling, Tensor, Token, Trace, TraceFilter};
use serde_json::{json, Value};

use crate::error::ApiError;
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
        .route("/explore/api/architecture", get(architecture))
        .route("/explore/api/tokens", get(tokens))
        .route("/explore/api/attention", get(attention))
        .route("/explore/api/steps", get(steps))
        .route("/explore/api/path", get(path))
        .route("/explore/api/distribution", get(dist))
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
}

impl Cached {
    fn floats(&self) -> usize {
        match self {
            Cached::Weights(t) => t.numel(),
            Cached::Path(_) => 1 << 16,
            Cached::Logits(l) => l.len(),
        }
    }
}

/// A least-recently-used cache keyed by (model, text, what), bounded by the numbers it
/// holds; and the gate that lets one explorer computation run at a time.
pub struct Cache {
    entries: Mutex<Vec<(String, Cached)>>,
    cap: usize,
    gate: tokio::sync::Semaphore,
    waiting: AtomicUsize,
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
            cap,
            gate: tokio::sync::Semaphore::new(1),
            waiting: AtomicUsize::new(0),
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
        Served::Encoder(_) => None,
    };
    Ok(Subject {
        name: m.name.clone(),
        model: m.model.clone(),
        text,
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
fn run_trace(
    s: &Subject,
    text: &str,
    filter: TraceFilter,
    last_only: bool,
    stop_early: bool,
) -> Result<Trace, ApiError> {
    let mut trace = Trace::with_filter(filter);
    if stop_early {
        trace = trace.stop_when_done();
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
                    "config": c,
                })
            })
            .collect();
        Ok(json!({"models": list, "limits": {"text_bytes": MAX_TEXT_BYTES, "tokens": MAX_TOKENS}}))
    })())
}

async fn architecture(State(st): St, Query(q): Params) -> Response {
    respond(
        async {
            let (config, name, t) = match q.get("preset") {
                Some(p) => {
                    let c = lucent::model::presets::preset(p)
                        .map_err(|e| ApiError::from(e).with_param("preset"))?;
                    let t = num::<usize>(&q, "t")?.unwrap_or(8).clamp(1, MAX_TOKENS);
                    (c, p.clone(), t)
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
                    (s.config().clone(), s.name, t)
                }
            };
            let src = (config.kind == ModelKind::EncoderDecoder).then_some(t);
            let steps = forward_shapes(&config, 1, t, src)?;
            let layers = config.encoder_layers.max(config.decoder_layers);
            Ok(json!({
                "model": name,
                "t": t,
                "config": config,
                "windows": (0..layers).map(|l| config.window_of_layer(l)).collect::<Vec<_>>(),
                "steps": steps,
            }))
        }
        .await,
    )
}

async fn tokens(State(st): St, Query(q): Params) -> Response {
    respond(
        async {
            let s = subject(&st, &q)?;
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
) -> Result<Arc<Tensor>, ApiError> {
    let k = key(s, text, &format!("weights.{layer}"));
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
    let trace = run_trace(s, text, filter, true, layers.len() == 1)?;
    let mut out = None;
    for l in layers {
        let name = format!("{}.layer.{l}.attn.weights", s.stack());
        let w = Arc::new(recorded(&trace, &name)?.clone());
        if l == layer {
            out = Some(w.clone());
        }
        st.explore
            .put(key(s, text, &format!("weights.{l}")), Cached::Weights(w));
    }
    out.ok_or_else(|| ApiError::internal(format!("layer {layer} was not recorded")))
}

/// Max-pool a (t, t) matrix to (n, n) (n ≤ t).
fn pool(m: &[f32], t: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n * n];
    for i in 0..t {
        let bi = i * n / t;
        for j in 0..t {
            let bj = j * n / t;
            let o = &mut out[bi * n + bj];
            *o = o.max(m[i * t + j]);
        }
    }
    out
}

async fn attention(State(st): St, Query(q): Params) -> Response {
    let st2 = st.clone();
    respond(
        async move {
            let s = subject(&st, &q)?;
            let text = text_param(&q)?;
            let c = s.config().clone();
            let layer = index(&q, "layer", s.layers(), Some(0))?;
            let head = index(&q, "head", c.n_heads, Some(0))?;
            let thumb = num::<usize>(&q, "thumb")?;
            let s2 = s.clone();
            let (toks, w) = compute(&st, move || {
                let toks = read_tokens(&s2, &text)?;
                let w = layer_weights(&st2, &s2, &text, layer, toks.len())?;
                Ok((toks, w))
            })
            .await?;
            let [_, h, t, tk] = w.dims()?;
            if head >= h || t != tk {
                return Err(ApiError::internal(format!(
                    "the weights recorded are {:?}, not (1, {}, t, t)",
                    w.shape(),
                    c.n_heads
                )));
            }
            let m = &w.data()[head * t * t..(head + 1) * t * t];
            let group = (c.n_heads / c.n_kv_heads.max(1)).max(1);
            let (n, data) = match thumb {
                Some(n) if n > 0 && n < t => (n.min(256), pool(m, t, n.min(256))),
                _ => (t, m.to_vec()),
            };
            Ok(json!({
                "model": s.name,
                "layer": layer,
                "head": head,
                "kv_head": head / group,
                "heads_sharing_kv": ((head / group) * group..(head / group + 1) * group).collect::<Vec<_>>(),
                "t": t,
                "size": n,
                "pooled": n != t,
                "causal": c.kind != ModelKind::Encoder,
                "window": c.window_of_layer(layer),
                "tokens": toks.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
                "weights_f32": b64(&data),
            }))
        }
        .await,
    )
}

async fn steps(State(st): St, Query(q): Params) -> Response {
    respond(
        async move {
            let s = subject(&st, &q)?;
            let text = text_param(&q)?;
            let c = s.config().clone();
            let layer = index(&q, "layer", s.layers(), Some(0))?;
            let head = index(&q, "head", c.n_heads, Some(0))?;
            let token_q = num::<usize>(&q, "token")?;
            let s2 = s.clone();
            compute(&st, move || {
                let toks = read_tokens(&s2, &text)?;
                let t = toks.len();
                let i = match token_q {
                    Some(i) if i >= t => {
                        return Err(ApiError::invalid_param(
                            "token",
                            format!(
                                "token {i} does not exist: the text has {t} tokens (0..{})",
                                t - 1
                            ),
                        ))
                    }
                    Some(i) => i,
                    None => t - 1,
                };
                let filter = TraceFilter {
                    leaves: Some(
                        [
                            "q", "k", "v", "scores", "scaled", "mask", "weights", "context",
                        ]
                        .map(String::from)
                        .to_vec(),
                    ),
                    layers: Some(vec![layer]),
                    prefix: Some(format!("{}.layer.{layer}.attn.", s2.stack())),
                };
                let trace = run_trace(&s2, &text, filter, true, true)?;
                let get = |leaf: &str| {
                    recorded(&trace, &format!("{}.layer.{layer}.attn.{leaf}", s2.stack()))
                };
                let row = |leaf: &str, hh: usize, r: usize| -> Result<Vec<f32>, ApiError> {
                    let x = get(leaf)?;
                    let [_, nh, rows, cols] = x.dims()?;
                    if hh >= nh || r >= rows {
                        return Err(ApiError::internal(format!("{leaf} is {:?}", x.shape())));
                    }
                    Ok(x.data()[(hh * rows + r) * cols..][..cols].to_vec())
                };
                let [_, h_kv, _, _] = get("k")?.dims()?;
                let group = (c.n_heads / h_kv.max(1)).max(1);
                let kv = head / group;
                let qv = row("q", head, i)?;
                let keys: Vec<Vec<f32>> =
                    (0..t).map(|j| row("k", kv, j)).collect::<Result<_, _>>()?;
                let values: Vec<Vec<f32>> =
                    (0..t).map(|j| row("v", kv, j)).collect::<Result<_, _>>()?;
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
                let finite = |v: Vec<f32>| -> Vec<Option<f32>> {
                    v.into_iter().map(|x| x.is_finite().then_some(x)).collect()
                };
                Ok(json!({
                    "model": s2.name, "layer": layer, "head": head, "kv_head": kv, "token": i,
                    "d_k": qv.len(), "scale": scale,
                    "tokens": toks.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
                    "q": qv, "k": keys, "v": values,
                    "scores": scores, "scaled": scaled,
                    "mask": finite(mask),
                    "weights": weights, "context": context,
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
fn path_view(st: &AppState, s: &Subject, text: &str, i: usize) -> Result<Arc<Value>, ApiError> {
    let k = key(s, text, &format!("path.{i}"));
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
            ]),
            layers: Some(layers.clone()),
            prefix: Some(format!("{stack}.")),
        };
        let trace = run_trace(s, text, filter, false, true)?;
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
            key(s, text, &format!("logits.{i}")),
            Cached::Logits(Arc::new(lg.clone())),
        );
    }
    let v = Arc::new(json!({
        "model": s.name, "token": i, "t": t,
        "tokens": toks.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
        "residual_norms": residual,
        "attn_out_norms": attn_norm,
        "ffn_out_norms": ffn_norm,
        "ffn": ffn,
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

fn token_index(q: &HashMap<String, String>, t: usize) -> Result<usize, ApiError> {
    match num::<usize>(q, "token")? {
        Some(i) if i >= t => Err(ApiError::invalid_param(
            "token",
            format!(
                "token {i} does not exist: the text has {t} tokens (0..{})",
                t - 1
            ),
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
            let text = text_param(&q)?;
            let v = compute(&st, move || {
                let t = read_tokens(&s, &text)?.len();
                let i = token_index(&q, t)?;
                path_view(&st2, &s, &text, i)
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
            compute(&st, move || {
                let t = read_tokens(&s, &text)?.len();
                let i = token_index(&q, t)?;
                let k = key(&s, &text, &format!("logits.{i}"));
                let logits = match st2.explore.get(&k) {
                    Some(Cached::Logits(l)) => l,
                    _ => {
                        path_view(&st2, &s, &text, i)?;
                        match st2.explore.get(&k) {
                            Some(Cached::Logits(l)) => l,
                            _ => return Err(ApiError::internal("no logits were recorded")),
                        }
                    }
                };
                let d = distribution(&sampling, &logits)?;
                Ok(json!({
                    "model": s.name, "token": i,
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
