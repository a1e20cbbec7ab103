//! `lucent explore [-m MODEL]...`: the explorer in the browser. Starts the server of
//! `lucent serve` on 127.0.0.1 (any free port unless `--port`), prints the page's
//! address, and serves until Ctrl-C (or `--exit-after`). The page, its script and its
//! style are inside the binary: nothing is fetched from the network.

use crate::commands::numbers::{at_least, non_negative};
use lucent::{Error, Result};
use lucent_server::ServeOptions;

/// Arguments of `lucent explore`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Opens nothing by itself: it prints the address; open it in a browser. The state of the page is in its address, e.g.\n  http://127.0.0.1:PORT/?model=smollm2&text=The%20cat%20sat&layer=2&head=1&view=table\n\nExamples:\n  lucent explore -m minilm --exit-after 3   # any free port; stops by itself after 3 s\n  lucent explore -m smollm2 -m minilm --port 0 --exit-after 3\n  lucent explore -m whisper-tiny.en --exit-after 3   # speech: pick a WAV in the page\n  lucent explore -m minilm --api-key sekrit --exit-after 3   # the page asks for the key\n\nViews: heatmap, table, model, lines, steps, architecture, path, distribution, positions, demos. An encoder-decoder (Whisper, a `lucent train seq2seq` run) shows its cross-, encoder and decoder attention. See docs/explorer.md."
)]
pub struct Args {
    /// A model to explore (repeatable): a known name (smollm2, gemma3, minilm, whisper-tiny.en), a .gguf file, a folder, a training run.
    #[arg(long = "model", short = 'm', default_value = "smollm2")]
    pub models: Vec<String>,
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port).
    #[arg(long, default_value_t = 0, value_parser = at_least::<0, u16>)]
    pub port: u16,
    /// Every data request must carry `Authorization: Bearer KEY`; the page asks for the key
    /// once and keeps it in the tab (for a server reachable beyond this machine)
    /// [default: none, the data routes are open].
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Stop by itself after this many seconds [default: none, run until Ctrl-C].
    #[arg(long, value_name = "SECS", value_parser = non_negative)]
    pub exit_after: Option<f64>,
}

/// Run `lucent explore` until Ctrl-C or `--exit-after`.
pub fn run(args: Args) -> Result<()> {
    let bind = format!("{}:{}", args.host, args.port);
    let listener = std::net::TcpListener::bind(&bind).map_err(|e| {
        Error::Argument(format!(
            "cannot listen on {bind}: {e} (pick another --port or --host)"
        ))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Argument(format!("cannot read the address bound: {e}")))?;
    println!("lucent explore: http://{addr}/");
    lucent_server::serve_on(
        listener,
        ServeOptions {
            models: args.models,
            host: args.host,
            port: addr.port(),
            parallel: 1,
            drain_secs: 1.0,
            exit_after_secs: args.exit_after,
            api_key: args.api_key,
            log_name: "lucent explore".into(),
            ..ServeOptions::default()
        },
    )
}
