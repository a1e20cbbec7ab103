//! `lucent serve`: the OpenAI-compatible server (`lucent-server`), with its flags.

use crate::commands::numbers::{at_least, non_negative};
use lucent::Result;
use lucent_server::ServeOptions;

/// Arguments of `lucent serve`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Run `lucent serve -m smollm2 -m minilm --parallel 8` and talk to it with any OpenAI client:\n  curl http://127.0.0.1:8080/v1/chat/completions -d '{\"model\": \"smollm2\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'\n\nRoutes: POST /v1/chat/completions, /v1/completions, /v1/embeddings, /tokenize, /detokenize; GET /v1/models, /health, /metrics. See docs/serving.md.\n\nExamples:\n  lucent serve -m smollm2 -m minilm --port 0 --exit-after 3   # any free port; drains and stops after 3 s\n  lucent serve -m smollm2 -m minilm --precision smollm2=int8 --port 0 --exit-after 3"
)]
pub struct Args {
    /// A model to serve (repeatable): a known name (smollm2, gemma3, minilm), a .gguf file, a folder.
    #[arg(long = "model", short = 'm', default_value = "smollm2")]
    pub models: Vec<String>,
    /// Address to bind (loopback by default; 0.0.0.0 opens it to the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080, value_parser = at_least::<0, u16>)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route but /health and /metrics [default: none, no key].
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Slots per decoder model: requests generated at once (batched into one step).
    #[arg(long, short = 'p', default_value_t = 4, value_parser = at_least::<0, usize>)]
    pub parallel: usize,
    /// KV-cache positions per slot (prompt and answer); 0: the model's context, at most 4096.
    #[arg(long, short = 'c', default_value_t = 0, value_parser = at_least::<0, usize>)]
    pub ctx_size: usize,
    /// Requests that may wait for a slot (per model) before the server answers 429.
    #[arg(long, default_value_t = 64, value_parser = at_least::<0, usize>)]
    pub max_queue: usize,
    /// Allow this browser origin (repeatable; `*` for any) [default: none, no CORS headers].
    #[arg(long, value_name = "ORIGIN")]
    pub cors: Vec<String>,
    /// Largest request body in bytes (413 above).
    #[arg(long, default_value_t = 2 << 20, value_parser = at_least::<0, usize>)]
    pub max_body: usize,
    /// Seconds one request may take, waiting included (504 after).
    #[arg(long, default_value_t = 600.0, value_parser = non_negative)]
    pub timeout: f64,
    /// Seconds SIGTERM waits for the requests in flight before exiting.
    #[arg(long, default_value_t = 30.0, value_parser = non_negative)]
    pub drain: f64,
    /// About this many prompt tokens per prefill piece (others' decode steps wait at most one
    /// piece; larger: a lone long prompt reads a little faster, streams stall longer).
    #[arg(long, default_value_t = 64, value_parser = at_least::<0, usize>)]
    pub prefill_chunk: usize,
    /// Bytes of each decoder model's prompt cache, shared by its slots (prompt blocks any request computed, least recently used dropped first): 0 (off), 512MiB, 2GiB, … [default: a quarter of the physical memory, at most 4GiB].
    #[arg(long, value_name = "BYTES", value_parser = lucent_server::prompt_cache::parse_bytes)]
    pub cache_ram: Option<u64>,
    /// Most numbers one request's "lucent" inside view may return.
    #[arg(long, default_value_t = 4_000_000, value_parser = at_least::<0, u64>)]
    pub max_inside_floats: u64,
    /// Stop by itself after this many seconds, draining as at SIGTERM [default: none, run until stopped].
    #[arg(long, value_name = "SECS", value_parser = non_negative)]
    pub exit_after: Option<f64>,
    /// The chat template of every decoder served: a Jinja file, or the built-in `chatml` or `gemma` [default: each file's own].
    #[arg(long, value_name = "FILE|chatml|gemma")]
    pub chat_template: Option<String>,
    /// The precision of the models' products (repeatable): `int8` or `bf16` for every model, `smollm2=int8` for the model `-m smollm2` serves; a later choice for a model wins (docs/precision.md) [default: exact].
    #[arg(long, value_name = "[MODEL=]exact|bf16|int8")]
    pub precision: Vec<lucent_server::ModelPrecision>,
}

/// Run `lucent serve` until SIGTERM or Ctrl-C.
pub fn run(args: Args) -> Result<()> {
    lucent_server::serve(ServeOptions {
        models: args.models,
        host: args.host,
        port: args.port,
        api_key: args.api_key,
        parallel: args.parallel,
        ctx_size: args.ctx_size,
        max_queue: args.max_queue,
        cors: args.cors,
        max_body: args.max_body,
        timeout_secs: args.timeout,
        drain_secs: args.drain,
        prefill_chunk: args.prefill_chunk,
        cache_ram: args
            .cache_ram
            .unwrap_or_else(lucent_server::prompt_cache::default_cache_ram),
        max_inside_floats: args.max_inside_floats,
        exit_after_secs: args.exit_after,
        log_name: "lucent serve".into(),
        chat_template: args.chat_template,
        precision: args.precision,
    })
}
