//! The body of the `server_request` fuzz target: hostile HTTP requests through the real
//! `lucent serve` router, in process, with no socket.
//!
//! Compiled twice, like `harness.rs`: by the fuzz crate (`fuzz_targets/server_request.rs`)
//! and by the server crate's test suite (`crates/lucent-server/tests/fuzz_regressions.rs`),
//! which replays every seed in `fuzz/corpus/server_request/` and every finding kept in
//! `tests/data/fuzz/server_request/`.
//!
//! Once per process the router is built over two tiny models from the seed corpora: a
//! LLaMA-shaped GGUF decoder (`tiny-llama`, with a ChatML template) and a BERT encoder
//! folder (`tiny-bert`). An input is one request: its first byte picks the route, the
//! rest is the body. The request goes through everything a client's request goes
//! through (body limits, JSON parsing with the field's path in errors, OpenAI's checks,
//! the chat template, tokenization, the engine's queue and slots, generation with the
//! KV cache, streaming as Server-Sent Events, embeddings) and its whole answer is read.
//! Checked, for every input: no panic anywhere (a panic in a worker would come back
//! as a 500, so a 500 is a finding too), every answer is JSON or an event stream, and
//! an error's body is OpenAI's `{"error": {"message": …}}`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use tower::ServiceExt;

use lucent_server::{load_models, routes::router, AppState, ServeOptions};

/// The routes an input's first byte picks from.
pub const ROUTES: [(&str, &str); 9] = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/tiny-llama"),
    ("GET", "/health"),
    ("GET", "/metrics"),
];

/// The largest answer read back (a tiny model's answers are far smaller).
const ANSWER_LIMIT: usize = 16 << 20;

/// The repository's root, found from the crate that compiles this file.
fn root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("fuzz/corpus").is_dir() {
        if !dir.pop() {
            break;
        }
    }
    dir
}

/// The tiny BERT seed (`u16` config length, config.json, model.safetensors) written out
/// as a model folder with a WordPiece-free word-level tokenizer.
fn tiny_bert_folder() -> PathBuf {
    let seed = std::fs::read(root().join("fuzz/corpus/bert_folder/tiny-bert"))
        .expect("the tiny-bert seed (cargo run --example fuzz_seeds)");
    let (len, rest) = seed.split_at(2);
    let (config, weights) = rest.split_at(u16::from_le_bytes([len[0], len[1]]) as usize);
    let dir = std::env::temp_dir()
        .join(format!("lucent-fuzz-{}-server", std::process::id()))
        .join("tiny-bert");
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    std::fs::write(dir.join("config.json"), config).expect("config.json");
    std::fs::write(dir.join("model.safetensors"), weights).expect("model.safetensors");
    std::fs::write(dir.join("tokenizer.json"), BERT_TOKENIZER).expect("tokenizer.json");
    dir
}

/// A word-level tokenizer.json inside tiny-bert's vocabulary of 16, adding [CLS] and
/// [SEP] as BERT's do.
const BERT_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
"added_tokens":[{"id":0,"content":"[PAD]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
{"id":2,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
{"id":3,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"Whitespace"},
"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],
"pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],
"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[2],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[3],"tokens":["[SEP]"]}}},
"decoder":null,
"model":{"type":"WordLevel","vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"the":4,"cat":5,"sat":6,"on":7,"mat":8,"a":9,"dog":10,".":11,",":12,"hello":13,"world":14,"!":15},"unk_token":"[UNK]"}}"#;

/// The router over the tiny models, and the runtime that drives it.
struct Server {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let llama = root().join("fuzz/corpus/gguf/tiny-llama.gguf");
        let opts = ServeOptions {
            models: vec![
                llama.display().to_string(),
                tiny_bert_folder().display().to_string(),
            ],
            port: 0,
            parallel: 2,
            ctx_size: 256,
            max_queue: 8,
            max_body: 64 << 10,
            timeout_secs: 20.0,
            max_inside_floats: 200_000,
            ..ServeOptions::default()
        };
        let state = Arc::new(AppState::new(opts));
        let models = load_models(&state.opts, &state.metrics).expect("the tiny models load");
        if state.models.set(models).is_err() {
            unreachable!("the models are set once");
        }
        state.metrics.ready.set(1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Server {
            rt,
            router: router(state),
        }
    })
}

/// One request: `data[0]` picks the route ([`ROUTES`]), the rest is the body.
pub fn server_request(data: &[u8]) {
    let _ = answer(data);
}

/// [`server_request`]'s request, checked, with its status and answer (an empty input
/// asks for `/health`).
pub fn answer(data: &[u8]) -> (u16, String) {
    let (pick, body) = data.split_first().map_or((7, &[][..]), |(&p, b)| (p, b));
    let (method, path) = ROUTES[pick as usize % ROUTES.len()];
    let s = server();
    let request = Request::builder()
        .method(if method == "GET" {
            Method::GET
        } else {
            Method::POST
        })
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a well-formed request");
    s.rt.block_on(async {
        let response = s
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router answers");
        let status = response.status();
        let kind = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), ANSWER_LIMIT)
            .await
            .expect("the whole answer reads");
        assert_ne!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{method} {path} failed inside: {}",
            String::from_utf8_lossy(&bytes)
        );
        if kind.starts_with("application/json") {
            let v: serde_json::Value =
                serde_json::from_slice(&bytes).expect("a JSON answer parses");
            if !status.is_success() {
                assert!(
                    v.pointer("/error/message").is_some_and(|m| m.is_string()),
                    "{status}: an error without OpenAI's shape: {v}"
                );
            }
        } else {
            assert!(
                kind.starts_with("text/event-stream")
                    || kind.starts_with("text/plain")
                    || kind.starts_with("application/openmetrics-text"),
                "{method} {path}: an answer of type '{kind}' ({status})"
            );
        }
        (
            status.as_u16(),
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    })
}
