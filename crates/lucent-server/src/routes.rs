//! The HTTP routes: each reads its body (capped), checks it into a job for an engine
//! or a worker, and turns what comes back into OpenAI's response shapes — one JSON
//! object, or Server-Sent Events ending with `data: [DONE]` for a stream.
//!
//! Response shapes (as the official `openai` Python client's types have them):
//! - `chat.completion`: `choices[i].message {role, content}`, `finish_reason`,
//!   `logprobs.content[j] {token, logprob, bytes, top_logprobs[{token, logprob, bytes}]}`,
//!   `usage {prompt_tokens, completion_tokens, total_tokens}`;
//! - `chat.completion.chunk`: `choices[i].delta {role?, content?}`, then a chunk with
//!   the `finish_reason`, then (`stream_options.include_usage`) one with `choices: []`
//!   and the usage;
//! - `text_completion`: `choices[i].text`, legacy `logprobs {tokens, token_logprobs,
//!   top_logprobs, text_offset}`;
//! - embeddings: `{object: "list", data: [{object: "embedding", index, embedding}],
//!   model, usage}`, the embedding a list of floats or base64 of little-endian f32.
//!
//! With `"lucent"` in the request, each choice carries `"lucent": {"prompt": …,
//! "generated": [...]}` (streams: the prompt's view on the first chunk of a choice,
//! each token's on its chunk); see [`crate::inside`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::StreamExt;
use lucent::io::tokenizer::Tokenizer;
use lucent::pipeline::generate::TokenLogprob;
use lucent::pipeline::tools::{self, AnswerStream, CallFormat, StreamPart, Tool, ToolCall};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::api::{self, GenerateRequest, Prompt};
use crate::engine::{Engine, Event, Job};
use crate::error::ApiError;
use crate::inside::InsideSpec;
use crate::{AppState, Served, ServedModel};

type St = State<Arc<AppState>>;

/// The router with every route, the API-key check, the request counts and CORS.
pub fn router(state: Arc<AppState>) -> Router {
    let cors = cors_layer(&state.opts.cors);
    let r = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route(
            "/v1/audio/transcriptions",
            post(crate::speech::transcriptions).layer(DefaultBodyLimit::max(AUDIO_BODY)),
        )
        .route(
            "/v1/audio/translations",
            post(crate::speech::translations).layer(DefaultBodyLimit::max(AUDIO_BODY)),
        )
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(crate::explore::routes())
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state);
    match cors {
        Some(c) => r.layer(c),
        None => r,
    }
}

/// The body limit of the audio routes: the file and the form around it.
const AUDIO_BODY: usize = crate::speech::MAX_AUDIO_BYTES + (1 << 20);

/// CORS for the origins given (`*`: any).
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let layer = CorsLayer::new()
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers(Any);
    Some(if origins.iter().any(|o| o == "*") {
        layer.allow_origin(Any)
    } else {
        let list: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect();
        layer.allow_origin(AllowOrigin::list(list))
    })
}

/// Every request: the API key (but for `/health`, `/metrics` and the explorer's page,
/// which holds no data: the page asks for the key and sends it with its data
/// requests), then the handler, then its count by route and status.
async fn guard(State(st): St, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let open = matches!(route.as_str(), "/health" | "/metrics" | "/");
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let resp = if open || st.authorized(auth) {
        st.metrics.in_flight.inc();
        let r = next.run(req).await;
        st.metrics.in_flight.dec();
        r
    } else {
        ApiError::unauthorized().into_response()
    };
    st.metrics.count(&route, resp.status().as_u16());
    resp
}

async fn fallback(req: Request) -> Response {
    ApiError::not_found(req.uri().path()).into_response()
}

/// Read a body of at most `limit` bytes. A larger one is read to its end (up to 16
/// times the limit, for at most 10 s) and refused with 413: answering before the
/// client has sent it all would make its socket reset and lose the answer.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    let start = Instant::now();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::invalid(format!("the request body could not be read: {e}")))?;
        seen += chunk.len();
        if seen <= limit {
            buf.extend_from_slice(&chunk);
        } else if seen > limit.saturating_mul(16) || start.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::too_large(limit));
    }
    Ok(Bytes::from(buf))
}

/// Run blocking work (tokenising, chat templates) off tokio's worker threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> lucent::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("a worker task failed: {e}")))?
        .map_err(ApiError::from)
}

fn respond(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// A unique id for a response (`chatcmpl-…`, `cmpl-…`).
fn response_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    format!(
        "{prefix}-{t:x}{:04x}",
        N.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ------------------------------------------------------------------ generation

/// Which of the two generation routes answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Chat,
    Completion,
}

/// One request's generation, planned: its prompts, each run `n` times.
struct Plan {
    flavor: Flavor,
    id: String,
    created: u64,
    model: String,
    /// Each prompt's ids.
    prompts: Vec<Arc<Vec<u32>>>,
    /// Completions with `echo`: each prompt's text, put in front of its choices.
    echo: Vec<String>,
    n: usize,
    logprobs: Option<usize>,
    stream: bool,
    include_usage: bool,
    inside: bool,
    /// Chat with tools offered: the answers are read back as calls where they are.
    tools: Option<Vec<Tool>>,
    /// The form the model writes calls in (its chat template's, else Hermes): the
    /// tools' constraint and the reading back take it.
    format: CallFormat,
}

async fn chat(State(st): St, body: Body) -> Response {
    respond(chat_inner(st, body).await)
}

async fn chat_inner(st: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    st.accepting()?;
    let req: GenerateRequest = api::parse(&read_body(body, st.opts.max_body).await?)?;
    req.refuse_unsupported()?;
    if req.prompt.is_some() {
        return Err(ApiError::invalid_param(
            "prompt",
            "chat completions take messages, not a prompt (see /v1/completions)",
        ));
    }
    let (name, engine) = st.decoder(req.model.as_deref())?;
    let (name, engine) = (name.to_string(), engine.clone());
    let messages = req.conversation()?;
    let tools = req.tool_plan()?.filter(|p| p.offered()).map(|p| p.tools);
    let logprobs = req.chat_logprobs()?;
    let tm = engine.model().clone();
    let offered = tools.clone().unwrap_or_default();
    let ids = blocking(move || tm.encode_chat_tools(&messages, &offered)).await?;
    let plan = Plan {
        flavor: Flavor::Chat,
        id: response_id("chatcmpl"),
        created: now_secs(),
        model: name,
        prompts: vec![Arc::new(ids)],
        echo: Vec::new(),
        n: req.n()?,
        logprobs,
        stream: req.streaming(),
        include_usage: req.include_usage(),
        inside: req.lucent.as_ref().is_some_and(|l| l.wants_view()),
        tools,
        format: engine.model().tool_call_format(),
    };
    generate(&st, &engine, &req, plan).await
}

async fn completions(State(st): St, body: Body) -> Response {
    respond(completions_inner(st, body).await)
}

async fn completions_inner(st: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    st.accepting()?;
    let req: GenerateRequest = api::parse(&read_body(body, st.opts.max_body).await?)?;
    req.refuse_unsupported()?;
    req.refuse_tools()?;
    if req.messages.is_some() {
        return Err(ApiError::invalid_param(
            "messages",
            "completions take a prompt, not messages (see /v1/chat/completions)",
        ));
    }
    let (name, engine) = st.decoder(req.model.as_deref())?;
    let (name, engine) = (name.to_string(), engine.clone());
    let logprobs = req.completion_logprobs()?;
    let echo = req.echo.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::invalid_param(
            "echo",
            "echo with logprobs (the prompt's own log-probabilities) is not supported by lucent serve; ask for one of them",
        ));
    }
    let prompts = api::prompts(&req.prompt)?;
    let tm = engine.model().clone();
    let (ids, texts) = blocking(move || {
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for p in prompts {
            match p {
                Prompt::Text(t) => {
                    ids.push(Arc::new(tm.encode(&t)?));
                    texts.push(t);
                }
                Prompt::Ids(v) => {
                    let vocab = tm.tokenizer.vocab_size();
                    if let Some(bad) = v.iter().find(|&&i| i as usize >= vocab) {
                        return Err(lucent::Error::Argument(format!(
                            "prompt: token id {bad} is outside the vocabulary of {vocab}"
                        )));
                    }
                    texts.push(tm.tokenizer.decode_ids(&v, false)?);
                    ids.push(Arc::new(v));
                }
            }
        }
        Ok((ids, texts))
    })
    .await?;
    let plan = Plan {
        flavor: Flavor::Completion,
        id: response_id("cmpl"),
        created: now_secs(),
        model: name,
        prompts: ids,
        echo: if echo { texts } else { Vec::new() },
        n: req.n()?,
        logprobs,
        stream: req.streaming(),
        include_usage: req.include_usage(),
        inside: req.lucent.as_ref().is_some_and(|l| l.wants_view()),
        tools: None,
        format: CallFormat::Hermes,
    };
    generate(&st, &engine, &req, plan).await
}

/// Check the plan's prompts against the context, queue its jobs, and answer.
async fn generate(
    st: &Arc<AppState>,
    engine: &Arc<Engine>,
    req: &GenerateRequest,
    plan: Plan,
) -> Result<Response, ApiError> {
    let ctx = engine.config().ctx;
    let (tx, rx) = mpsc::unbounded_channel();
    let arrived = Instant::now();
    let deadline = arrived + Duration::from_secs_f64(st.opts.timeout_secs.max(0.0));
    // A schema, grammar or regex the grammar engine cannot use is the request's fault,
    // found before anything is queued (the first one also builds the model's vocabulary
    // trie, once).
    if let Some(c) = req.constraint()? {
        let tm = engine.model().clone();
        blocking(move || tm.compile(&c).map(drop))
            .await
            .map_err(|e| e.with_param("response_format"))?;
    }
    let edits = request_interventions(engine, req).await?;
    check_tool_schemas(engine, req, plan.tools.as_deref(), plan.format).await?;
    let mut jobs = Vec::new();
    for (p, ids) in plan.prompts.iter().enumerate() {
        if ids.is_empty() {
            return Err(ApiError::invalid_param(
                "prompt",
                "the prompt has no tokens",
            ));
        }
        if ids.len() > ctx {
            return Err(ApiError::invalid(format!(
                "the prompt has {} tokens but a slot's context holds {ctx} (lucent serve --ctx-size); shorten the prompt",
                ids.len()
            ))
            .with_param(if plan.flavor == Flavor::Chat { "messages" } else { "prompt" })
            .with_code("context_length_exceeded"));
        }
        // The last token is never fed back: ctx − len + 1 new tokens fit.
        let room = ctx - ids.len() + 1;
        let mut sampling = req.sampling_in(room, plan.logprobs, plan.format)?;
        let vocab = engine.model().model.config.vocab_size;
        if let Some((id, _)) = sampling
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= vocab)
        {
            return Err(ApiError::invalid_param(
                "logit_bias",
                format!(
                    "logit_bias names token {id}, outside the model's vocabulary of {vocab} tokens"
                ),
            ));
        }
        let inside = match &req.lucent {
            Some(r) if r.wants_view() => {
                let pieces = lucent::pipeline::generate::prompt_chunks(
                    ids.len(),
                    engine.config().prefill_chunk,
                )
                .len();
                Some(Arc::new(InsideSpec::new(
                    r,
                    &engine.model().model.config,
                    ids.len(),
                    sampling.max_tokens,
                    pieces,
                    st.opts.max_inside_floats,
                )?))
            }
            _ => None,
        };
        let seed = sampling.seed;
        for j in 0..plan.n {
            sampling.seed = seed.wrapping_add(j as u64);
            jobs.push(Job {
                prompt: ids.clone(),
                sampling: sampling.clone(),
                inside: inside.clone(),
                edits: edits.clone(),
                index: p * plan.n + j,
                events: tx.clone(),
                arrived,
                deadline,
            });
        }
    }
    drop(tx);
    engine.submit(jobs)?;
    let tok = engine.model().tokenizer.clone();
    if plan.stream {
        Ok(stream(plan, rx, tok))
    } else {
        collect(plan, rx, tok).await
    }
}

/// The edits of the request's `lucent.interventions`, checked against the engine's
/// model (their `patch` texts run off the async threads); `None` for none.
async fn request_interventions(
    engine: &Arc<Engine>,
    req: &GenerateRequest,
) -> Result<Option<Arc<Vec<lucent::nn::Edit>>>, ApiError> {
    let Some(ivs) = req.lucent.as_ref().and_then(|l| l.interventions.clone()) else {
        return Ok(None);
    };
    let tm = engine.model().clone();
    tokio::task::spawn_blocking(move || crate::intervene::request_edits(&tm, Some(&ivs)))
        .await
        .map_err(|e| ApiError::internal(format!("the interventions' check failed: {e}")))?
}

/// What one choice has gathered.
#[derive(Default)]
struct Choice {
    text: String,
    logprobs: Vec<TokenLogprob>,
    finish: Option<&'static str>,
    completion_tokens: usize,
    cached_tokens: usize,
    prompt_view: Option<Value>,
    step_views: Vec<Value>,
}

/// A token's text (its bytes, invalid UTF-8 shown as U+FFFD) and bytes.
fn token_text(tok: &dyn Tokenizer, id: u32) -> (String, Vec<u8>) {
    let b = tok.token_bytes(id, false).unwrap_or_default();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// Chat's `logprobs.content` entries.
fn chat_logprobs(tok: &dyn Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let (t, b) = token_text(tok, id);
        json!({"token": t, "logprob": lp, "bytes": b})
    };
    Value::Array(
        lps.iter()
            .map(|lp| {
                let mut e = entry(lp.id, lp.logprob);
                e["top_logprobs"] = lp.top.iter().map(|&(id, l)| entry(id, l)).collect();
                e
            })
            .collect(),
    )
}

/// Completions' legacy `logprobs`, with text offsets from `offset`.
fn completion_logprobs(tok: &dyn Tokenizer, lps: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut tokens = Vec::new();
    let mut offsets = Vec::new();
    for lp in lps {
        let (t, _) = token_text(tok, lp.id);
        offsets.push(at);
        at += t.len();
        tokens.push(t);
    }
    json!({
        "tokens": tokens,
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| {
            l.top.iter().map(|&(id, p)| (token_text(tok, id).0, json!(p))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

/// OpenAI's `usage`: `cached` of the `prompt` tokens came from the prompt cache.
fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached}})
}

/// Prompt tokens of a request taken from the prompt cache: each prompt counted once
/// (as `prompt_tokens` counts it), by its first choice's figure.
fn cached_of_prompts(n: usize, cached_by_choice: impl Iterator<Item = usize>) -> usize {
    cached_by_choice.step_by(n.max(1)).sum()
}

/// The whole answer at once.
async fn collect(
    plan: Plan,
    mut rx: mpsc::UnboundedReceiver<(usize, Event)>,
    tok: Arc<dyn Tokenizer>,
) -> Result<Response, ApiError> {
    let total = plan.prompts.len() * plan.n;
    let mut choices: Vec<Choice> = (0..total).map(|_| Choice::default()).collect();
    let mut done = 0;
    while done < total {
        let Some((i, ev)) = rx.recv().await else {
            return Err(ApiError::internal(
                "the engine stopped before the answer was complete",
            ));
        };
        let c = &mut choices[i];
        match ev {
            Event::Prompt { inside } => c.prompt_view = inside,
            Event::Step {
                text,
                logprob,
                inside,
                ..
            } => {
                c.text.push_str(&text);
                c.logprobs.extend(logprob);
                c.step_views.extend(inside);
            }
            Event::Done {
                finish_reason,
                completion_tokens,
                cached_tokens,
                ..
            } => {
                c.finish = Some(finish_reason);
                c.completion_tokens = completion_tokens;
                c.cached_tokens = cached_tokens;
                done += 1;
            }
            Event::Failed(e) => return Err(e),
        }
    }
    let prompt_tokens: usize = plan.prompts.iter().map(|p| p.len()).sum();
    let completion_tokens: usize = choices.iter().map(|c| c.completion_tokens).sum();
    let cached_tokens = cached_of_prompts(plan.n, choices.iter().map(|c| c.cached_tokens));
    let out: Vec<Value> = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = match plan.flavor {
                Flavor::Chat => {
                    let (message, finish) = chat_message(&c.text, c.finish, plan.tools.as_deref(), plan.format);
                    json!({
                        "index": i,
                        "message": message,
                        "logprobs": plan.logprobs.map(|_| json!({"content": chat_logprobs(tok.as_ref(), &c.logprobs), "refusal": null})),
                        "finish_reason": finish,
                    })
                }
                Flavor::Completion => {
                    let echo = plan.echo.get(i / plan.n).map_or("", String::as_str);
                    json!({
                        "index": i,
                        "text": format!("{echo}{}", c.text),
                        "logprobs": plan.logprobs.map(|_| completion_logprobs(tok.as_ref(), &c.logprobs, echo.len())),
                        "finish_reason": c.finish,
                    })
                }
            };
            if plan.inside {
                v["lucent"] = json!({"prompt": c.prompt_view, "generated": c.step_views});
            }
            v
        })
        .collect();
    let object = match plan.flavor {
        Flavor::Chat => "chat.completion",
        Flavor::Completion => "text_completion",
    };
    Ok(Json(json!({
        "id": plan.id,
        "object": object,
        "created": plan.created,
        "model": plan.model,
        "system_fingerprint": concat!("lucent-", env!("CARGO_PKG_VERSION")),
        "choices": out,
        "usage": usage(prompt_tokens, completion_tokens, cached_tokens),
    }))
    .into_response())
}

/// Server-Sent Events, one chunk per step that has something to say, `[DONE]` last.
fn stream(
    plan: Plan,
    rx: mpsc::UnboundedReceiver<(usize, Event)>,
    tok: Arc<dyn Tokenizer>,
) -> Response {
    struct S {
        plan: Plan,
        rx: mpsc::UnboundedReceiver<(usize, Event)>,
        tok: Arc<dyn Tokenizer>,
        left: usize,
        completion: usize,
        /// Each choice's prompt tokens taken from the prompt cache.
        cached: Vec<usize>,
        /// Text offset of each choice (completions' logprobs).
        offsets: Vec<usize>,
        /// Whether a choice has had its first chunk.
        started: Vec<bool>,
        /// Chat with tools: each choice's answer, read as it comes.
        calls: Vec<Option<AnswerStream>>,
        ended: bool,
    }
    let total = plan.prompts.len() * plan.n;
    let s = S {
        offsets: (0..total)
            .map(|i| plan.echo.get(i / plan.n).map_or(0, String::len))
            .collect(),
        started: vec![false; total],
        cached: vec![0; total],
        calls: (0..total)
            .map(|_| {
                plan.tools
                    .as_deref()
                    .map(|t| AnswerStream::with_format(t, plan.format))
            })
            .collect(),
        left: total,
        completion: 0,
        ended: false,
        plan,
        rx,
        tok,
    };
    let chunk = |s: &S, choice: Value| -> SseEvent {
        let object = match s.plan.flavor {
            Flavor::Chat => "chat.completion.chunk",
            Flavor::Completion => "text_completion",
        };
        let mut v = json!({
            "id": s.plan.id, "object": object, "created": s.plan.created, "model": s.plan.model,
            "system_fingerprint": concat!("lucent-", env!("CARGO_PKG_VERSION")),
            "choices": [choice],
        });
        if s.plan.include_usage {
            v["usage"] = Value::Null;
        }
        SseEvent::default().data(v.to_string())
    };
    let events = futures_util::stream::unfold(s, move |mut s| async move {
        loop {
            if s.ended {
                return None;
            }
            if s.left == 0 {
                s.ended = true;
                let mut out = Vec::new();
                if s.plan.include_usage {
                    let prompt: usize = s.plan.prompts.iter().map(|p| p.len()).sum();
                    let object = match s.plan.flavor {
                        Flavor::Chat => "chat.completion.chunk",
                        Flavor::Completion => "text_completion",
                    };
                    let v = json!({
                        "id": s.plan.id, "object": object, "created": s.plan.created, "model": s.plan.model,
                        "system_fingerprint": concat!("lucent-", env!("CARGO_PKG_VERSION")),
                        "choices": [], "usage": usage(prompt, s.completion, cached_of_prompts(s.plan.n, s.cached.iter().copied())),
                    });
                    out.push(SseEvent::default().data(v.to_string()));
                }
                out.push(SseEvent::default().data("[DONE]"));
                return Some((out, s));
            }
            let Some((i, ev)) = s.rx.recv().await else {
                s.ended = true;
                let e = ApiError::internal("the engine stopped before the answer was complete");
                return Some((vec![SseEvent::default().data(e.body().to_string()), SseEvent::default().data("[DONE]")], s));
            };
            let mut out = Vec::new();
            let flavor = s.plan.flavor;
            let first = !s.started[i];
            s.started[i] = true;
            match ev {
                Event::Prompt { inside } => {
                    let mut c = match flavor {
                        Flavor::Chat => json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}),
                        Flavor::Completion => {
                            let echo = s.plan.echo.get(i / s.plan.n).cloned().unwrap_or_default();
                            if echo.is_empty() && inside.is_none() {
                                continue;
                            }
                            json!({"index": i, "text": echo, "logprobs": null, "finish_reason": null})
                        }
                    };
                    if let Some(v) = inside {
                        c["lucent"] = json!({"prompt": v});
                    }
                    out.push(chunk(&s, c));
                }
                Event::Step { text, logprob, inside, .. } => {
                    let (text, parts) = match &mut s.calls[i] {
                        Some(reader) => (String::new(), reader.feed(&text)),
                        None => (text, Vec::new()),
                    };
                    if s.calls[i].is_some() && logprob.is_none() && inside.is_none() {
                        if parts.is_empty() {
                            continue;
                        }
                        let mut parts = part_chunks(i, parts);
                        if first {
                            parts[0]["delta"]["role"] = json!("assistant");
                        }
                        out.extend(parts.into_iter().map(|c| chunk(&s, c)));
                        return Some((out, s));
                    }
                    let lps: Vec<TokenLogprob> = logprob.into_iter().collect();
                    let mut c = match flavor {
                        Flavor::Chat => {
                            let mut delta = json!({"content": text});
                            if first {
                                delta["role"] = json!("assistant");
                            }
                            json!({"index": i, "delta": delta,
                                "logprobs": s.plan.logprobs.map(|_| json!({"content": chat_logprobs(s.tok.as_ref(), &lps), "refusal": null})),
                                "finish_reason": null})
                        }
                        Flavor::Completion => {
                            let lp = s.plan.logprobs.map(|_| completion_logprobs(s.tok.as_ref(), &lps, s.offsets[i]));
                            s.offsets[i] += lps.iter().map(|l| token_text(s.tok.as_ref(), l.id).0.len()).sum::<usize>();
                            json!({"index": i, "text": text, "logprobs": lp, "finish_reason": null})
                        }
                    };
                    if let Some(v) = inside {
                        c["lucent"] = json!({"generated": [v]});
                    }
                    out.push(chunk(&s, c));
                    out.extend(part_chunks(i, parts).into_iter().map(|c| chunk(&s, c)));
                }
                Event::Done { finish_reason, completion_tokens, cached_tokens, .. } => {
                    s.left -= 1;
                    s.completion += completion_tokens;
                    s.cached[i] = cached_tokens;
                    let mut finish_reason = finish_reason;
                    if let Some(reader) = &mut s.calls[i] {
                        let (parts, were_calls) = reader.finish();
                        out.extend(part_chunks(i, parts).into_iter().map(|c| chunk(&s, c)));
                        if were_calls && finish_reason == "stop" {
                            finish_reason = "tool_calls";
                        }
                    }
                    let c = match flavor {
                        Flavor::Chat => json!({"index": i, "delta": {}, "logprobs": null, "finish_reason": finish_reason}),
                        Flavor::Completion => json!({"index": i, "text": "", "logprobs": null, "finish_reason": finish_reason}),
                    };
                    out.push(chunk(&s, c));
                }
                Event::Failed(e) => {
                    s.ended = true;
                    out.push(SseEvent::default().data(e.body().to_string()));
                    out.push(SseEvent::default().data("[DONE]"));
                }
            }
            return Some((out, s));
        }
    })
    .flat_map(|v| futures_util::stream::iter(v.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events).into_response()
}

// ------------------------------------------------------------------ tool calls

/// A `parameters` schema the grammar engine cannot use is the request's fault: found
/// before anything is queued, naming `tools[i].function.parameters`. The whole grammar
/// is compiled once; only when it fails is each tool's schema compiled alone, to name
/// the one at fault.
async fn check_tool_schemas(
    engine: &Arc<Engine>,
    req: &GenerateRequest,
    tools: Option<&[Tool]>,
    format: CallFormat,
) -> Result<(), ApiError> {
    let Some(tools) = tools else {
        return Ok(());
    };
    let Some(c) = req
        .tool_plan()?
        .map(|p| p.in_format(format).constraint())
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    let tm = engine.model().clone();
    let whole = blocking(move || tm.compile(&c).map(drop)).await;
    let Err(whole) = whole else {
        return Ok(());
    };
    for (i, t) in tools.iter().enumerate() {
        let tm = engine.model().clone();
        let c = lucent::pipeline::Constraint::JsonSchema(t.parameters.clone());
        blocking(move || tm.compile(&c).map(drop))
            .await
            .map_err(|e| e.with_param(&format!("tools[{i}].function.parameters")))?;
    }
    Err(whole.with_param("tools"))
}

/// OpenAI's `tool_calls` entries for `calls` (each with a fresh `call_…` id).
fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| json!({"id": tools::call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

/// A chat answer's `message` and `finish_reason`: with tools offered and a text that
/// (read in the model's call `format`)
/// makes calls (after text of its own, or none), `content` that text (`null` where it
/// is whitespace), the `tool_calls` and `finish_reason: "tool_calls"`; otherwise the
/// text as content.
fn chat_message(
    text: &str,
    finish: Option<&'static str>,
    offered: Option<&[Tool]>,
    format: CallFormat,
) -> (Value, Option<&'static str>) {
    if let Some((content, calls)) = offered.and_then(|t| tools::split_answer_in(format, text, t)) {
        let finish = if finish == Some("stop") {
            Some("tool_calls")
        } else {
            finish
        };
        let content = (!content.trim().is_empty()).then_some(content);
        return (
            json!({"role": "assistant", "content": content, "refusal": null, "tool_calls": tool_calls_json(&calls)}),
            finish,
        );
    }
    (
        json!({"role": "assistant", "content": text, "refusal": null}),
        finish,
    )
}

/// The stream chunks' choices for what choice `i`'s answer says now
/// ([`tools::AnswerStream`]): content deltas; a call's first delta with its `index`,
/// a fresh id, `type` and `function.name` (`arguments: ""`); then its arguments in the
/// pieces they arrived in (clients join the pieces of a call by its `index`).
fn part_chunks(i: usize, parts: Vec<StreamPart>) -> Vec<Value> {
    parts
        .into_iter()
        .map(|p| {
            let delta = match p {
                StreamPart::Content(text) => json!({"content": text}),
                StreamPart::CallStart { index, name } => json!({"tool_calls": [{"index": index,
                    "id": tools::call_id(), "type": "function", "function": {"name": name, "arguments": ""}}]}),
                StreamPart::Arguments { index, text } => {
                    json!({"tool_calls": [{"index": index, "function": {"arguments": text}}]})
                }
            };
            json!({"index": i, "delta": delta, "logprobs": null, "finish_reason": null})
        })
        .collect()
}

// ------------------------------------------------------------------ embeddings

async fn embeddings(State(st): St, body: Body) -> Response {
    respond(embeddings_inner(st, body).await)
}

async fn embeddings_inner(st: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    st.accepting()?;
    let req: api::EmbeddingRequest = api::parse(&read_body(body, st.opts.max_body).await?)?;
    let (name, worker) = st.encoder(req.model.as_deref())?;
    let texts = api::embedding_inputs(&req.input)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format must be float or base64, got '{other}'"),
            ))
        }
    };
    let dim = worker.embedder().dim();
    if let Some(d) = req.dimensions {
        if d != dim as i64 {
            return Err(ApiError::invalid_param(
                "dimensions",
                format!(
                    "'{name}' makes {dim}-dimensional embeddings; dimensions {d} is not supported"
                ),
            ));
        }
    }
    let name = name.to_string();
    let rx = worker.submit(texts)?;
    let (vectors, tokens) = rx
        .await
        .map_err(|_| ApiError::internal("the encoder stopped before answering"))??;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

// ------------------------------------------------------------------ the rest

fn model_object(st: &AppState, m: &ServedModel) -> Value {
    json!({
        "id": m.name, "object": "model", "created": st.started, "owned_by": "lucent",
        "precision": m.model.precision().name(),
    })
}

async fn models(State(st): St) -> Response {
    respond((|| {
        let models = st.accepting()?;
        let data: Vec<Value> = models.iter().map(|m| model_object(&st, m)).collect();
        Ok(Json(json!({"object": "list", "data": data})).into_response())
    })())
}

async fn model(State(st): St, Path(id): Path<String>) -> Response {
    respond(
        st.find(Some(&id))
            .map(|m| Json(model_object(&st, m)).into_response()),
    )
}

/// The tokenizer of the model a request names.
fn tokenizer_of(st: &AppState, model: Option<&str>) -> Result<Arc<dyn Tokenizer>, ApiError> {
    Ok(match &st.find(model)?.served {
        Served::Decoder(e) => e.model().tokenizer.clone(),
        Served::Encoder(w) => Arc::new(w.embedder().tokenizer().clone()),
        Served::Speech(w) => Arc::new(w.transcriber().tokenizer.clone()),
        Served::Seq2Seq => {
            return Err(ApiError::invalid_param(
                "model",
                "a model trained by `lucent train seq2seq` reads its task's symbols; it has no tokenizer",
            ))
        }
    })
}

async fn tokenize(State(st): St, body: Body) -> Response {
    respond(
        async {
            let req: api::TokenizeRequest = api::parse(&read_body(body, st.opts.max_body).await?)?;
            let tok = tokenizer_of(&st, req.model.as_deref())?;
            let add = req.add_special.unwrap_or(false);
            let pieces = req.with_pieces.unwrap_or(false);
            let t = tok.clone();
            let ids = blocking(move || t.encode_ids(&req.content, add, true)).await?;
            let tokens: Vec<Value> = if pieces {
                ids.iter()
                    .map(|&id| json!({"id": id, "piece": token_text(tok.as_ref(), id).0}))
                    .collect()
            } else {
                ids.iter().map(|&id| json!(id)).collect()
            };
            Ok(Json(json!({"tokens": tokens})).into_response())
        }
        .await,
    )
}

async fn detokenize(State(st): St, body: Body) -> Response {
    respond(
        async {
            let req: api::DetokenizeRequest =
                api::parse(&read_body(body, st.opts.max_body).await?)?;
            let tok = tokenizer_of(&st, req.model.as_deref())?;
            let vocab = tok.vocab_size();
            if let Some(bad) = req.tokens.iter().find(|&&i| i as usize >= vocab) {
                return Err(ApiError::invalid_param(
                    "tokens",
                    format!("token id {bad} is outside the vocabulary of {vocab}"),
                ));
            }
            let text = blocking(move || tok.decode_ids(&req.tokens, false)).await?;
            Ok(Json(json!({"content": text})).into_response())
        }
        .await,
    )
}

/// 200 `{"status": "ok"}` once every model is loaded; 503 `loading` / `draining`.
async fn health(State(st): St) -> Response {
    let (code, status) = if st.draining.load(std::sync::atomic::Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else if st.models.get().is_some() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loading")
    };
    (code, Json(json!({"status": status, "models": st.names()}))).into_response()
}

async fn metrics(State(st): St) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}
