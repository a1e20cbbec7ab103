//! The explorer in real headless Chromium (Debian's `chromium`), driven over the
//! DevTools protocol by the `headless_chrome` crate (a Rust client that talks to the
//! browser directly: no WebDriver server to install beside it).
//!
//! One `lucent explore` (on 127.0.0.1, any free port, stopping by itself) serves
//! MiniLM, SmolLM2, Gemma 3, a GPT trained by `lucent train`, an encoder-decoder
//! trained by `lucent train seq2seq` (here, in a few seconds) and Whisper. For each
//! model the page loads with no console errors, and one layer/head's table view equals
//! `lucent attention -m MODEL TEXT --layer L --head H --json` to 4 decimals; for the
//! encoder-decoders, each of their three attentions (`--stack cross|encoder|decoder`),
//! Whisper's audio chosen with the page's file picker. A second server with
//! `--api-key` shows the page asking for the key and then the same numbers. On SmolLM2: the
//! sliders change the distribution exactly as the sampler would (the page's numbers
//! against the server's `lucent::pipeline::generate::distribution`), the exported
//! standalone HTML opened from file:// with the network off shows the same numbers,
//! every view is photographed into `explorer-screenshots/explorer-*.png` under the cargo
//! target directory (`CARGO_TARGET_DIR` when set), and the time from the request to the
//! first heatmap on a 1,000-token text is measured and printed (not asserted: timings
//! belong in BENCHMARKS.md).
//!
//! The test leaves the clone as it found it. The screenshots in `docs/img/` are
//! refreshed only on request: `LUCENT_REFRESH_DOCS_IMG=1 cargo test --release -p
//! lucent-cli --test explorer` also copies each one there (see docs/explorer.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Network;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::protocol::cdp::Runtime::ConsoleAPICalledEventTypeOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;

const TEXT: &str = "The cat sat on the mat because it was tired";

fn lucent() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lucent"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `lucent explore` on a free loopback port; killed when dropped (and it stops by
/// itself after a while in any case).
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(models: &[&str]) -> Server {
        Server::start_with(models, &[])
    }

    fn start_with(models: &[&str], extra: &[&str]) -> Server {
        let mut cmd = Command::new(lucent());
        cmd.arg("explore").args(["--exit-after", "400"]).args(extra);
        for m in models {
            cmd.args(["-m", m]);
        }
        let mut child = cmd
            .current_dir(root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("lucent explore: ")
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches('/')
            .to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let s = Server { child, url };
        let start = Instant::now();
        loop {
            if let Ok(r) = ureq::get(&format!("{}/health", s.url)).call() {
                if r.status() == 200 {
                    break;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the server never got ready"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    }

    fn get(&self, path: &str) -> Value {
        ureq::get(&format!("{}{path}", self.url))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap()
    }
}

impl Server {
    /// The status and JSON body of a GET, whatever the status.
    fn status(&self, path: &str) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent.get(&format!("{}{path}", self.url)).call().unwrap();
        (
            r.status().as_u16(),
            r.body_mut().read_json().unwrap_or(Value::Null),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Console errors, uncaught exceptions and failed loads the browser reported.
type Errors = Arc<Mutex<Vec<String>>>;

fn browser() -> Browser {
    let path = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("Chromium is not installed: apt-get install -y chromium (.ci/run does)");
    Browser::new(
        LaunchOptions::default_builder()
            .path(Some(path))
            .headless(true)
            .sandbox(false)
            .window_size(Some((1400, 1000)))
            .idle_browser_timeout(Duration::from_secs(300))
            .build()
            .unwrap(),
    )
    .unwrap()
}

fn watched_tab(b: &Browser) -> (Arc<Tab>, Errors) {
    let tab = b.new_tab().unwrap();
    tab.set_default_timeout(Duration::from_secs(120));
    let errors: Errors = Arc::default();
    tab.enable_log().unwrap();
    tab.enable_runtime().unwrap();
    let e = errors.clone();
    tab.add_event_listener(Arc::new(
        move |ev: &headless_chrome::protocol::cdp::types::Event| {
            use headless_chrome::protocol::cdp::types::Event;
            let msg = match ev {
                Event::RuntimeConsoleAPICalled(c)
                    if c.params.Type == ConsoleAPICalledEventTypeOption::Error =>
                {
                    Some(format!(
                        "console.error: {:?}",
                        c.params.args.first().and_then(|a| a.value.clone())
                    ))
                }
                Event::RuntimeExceptionThrown(x) => {
                    Some(format!("exception: {:?}", x.params.exception_details))
                }
                Event::LogEntryAdded(l)
                    if format!("{:?}", l.params.entry.level)
                        .to_lowercase()
                        .contains("error") =>
                {
                    Some(format!(
                        "log: {} {:?}",
                        l.params.entry.text, l.params.entry.url
                    ))
                }
                _ => None,
            };
            if let Some(m) = msg {
                e.lock().unwrap().push(m);
            }
        },
    ))
    .unwrap();
    (tab, errors)
}

fn eval(tab: &Tab, js: &str) -> Value {
    tab.evaluate(js, true).unwrap().value.unwrap_or(Value::Null)
}

/// Wait until the page has drawn its view (and fetched what it asked for).
fn wait_ready(tab: &Tab) {
    let start = Instant::now();
    loop {
        let v = eval(
            tab,
            "JSON.stringify([document.body.dataset.ready || '', (window.LUCENT_METRICS || {}).pending || 0, document.getElementById('status') ? document.getElementById('status').textContent : ''])",
        );
        let v: Value = serde_json::from_str(v.as_str().unwrap_or("[]")).unwrap();
        let ready = v[0].as_str().unwrap_or("");
        assert_ne!(ready, "error", "the page reports an error: {}", v[2]);
        if !ready.is_empty() && v[1].as_u64() == Some(0) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the page never got ready: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn open(tab: &Tab, url: &str) {
    tab.navigate_to(url)
        .unwrap()
        .wait_until_navigated()
        .unwrap();
    wait_ready(tab);
}

/// The numbers of the table view, row by row, as printed (4 decimals).
fn table(tab: &Tab) -> Vec<Vec<String>> {
    let v = eval(
        tab,
        "JSON.stringify(Array.from(document.querySelectorAll('#weights-table tbody tr')).map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent)))",
    );
    serde_json::from_str(v.as_str().unwrap()).unwrap()
}

/// One head's weights as `lucent attention --json` prints them.
fn cli_weights(model: &str, layer: usize, head: usize) -> Vec<Vec<f64>> {
    cli_weights_of(&[model, TEXT], layer, head)
}

/// `lucent attention -m ARGS... --json --layer L --head H`: that head's matrix.
fn cli_weights_of(args: &[&str], layer: usize, head: usize) -> Vec<Vec<f64>> {
    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("explorer-cli.png");
    let out = Command::new(lucent())
        .current_dir(root())
        .args(["attention", "-m"])
        .args(args)
        .arg("--json")
        .args(["--layer", &layer.to_string(), "--head", &head.to_string()])
        .arg("--png")
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every model kind prints one shape: `heads` holds the head `--head` names.
    let hit = v["heads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["head"] == head)
        .unwrap();
    serde_json::from_value(hit["weights"].clone()).unwrap()
}

/// The table view on the page equals the CLI's matrix to 4 decimals.
fn same_table(what: &str, page: &[Vec<String>], want: &[Vec<f64>]) {
    assert_eq!(page.len(), want.len(), "{what}: rows");
    for (i, (pr, wr)) in page.iter().zip(want).enumerate() {
        assert_eq!(pr.len(), wr.len(), "{what}: row {i}");
        for (j, (p, w)) in pr.iter().zip(wr).enumerate() {
            let p: f64 = p.parse().unwrap();
            assert!(
                (p - w).abs() <= 0.5e-4 + 1e-6,
                "{what} [{i}][{j}]: page {p} vs lucent attention {w}"
            );
        }
    }
}

/// Poll `js` (a boolean expression) until it holds.
fn wait_for(tab: &Tab, js: &str, what: &str) {
    let start = Instant::now();
    while eval(tab, js) != Value::Bool(true) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "waited 120 s for {what}; the page says: {}",
            eval(tab, "document.getElementById('status').textContent + ' | ' + document.getElementById('view').textContent.slice(0, 300)")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where the screenshots go: `explorer-screenshots/` in the cargo target directory (the
/// parent of `CARGO_TARGET_TMPDIR`, so `CARGO_TARGET_DIR` is respected), never the clone.
fn screenshot_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("explorer-screenshots")
}

/// Photograph the tab into `explorer-NAME.png` in [`screenshot_dir`]; with
/// `LUCENT_REFRESH_DOCS_IMG=1`, also into the tracked `docs/img/` (the documented way to
/// refresh the pictures in docs/explorer.md).
fn screenshot(tab: &Tab, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    let file = format!("explorer-{name}.png");
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&file), &png).unwrap();
    if std::env::var_os("LUCENT_REFRESH_DOCS_IMG").is_some_and(|v| v == "1") {
        let docs = root().join("docs/img");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(&file), &png).unwrap();
    }
}

#[test]
fn explorer_in_chromium() {
    let t0 = Instant::now();
    // An encoder-decoder trained here, in a few seconds: reverse 4 to 8 symbols.
    let run = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("explorer-reverse");
    let _ = std::fs::remove_dir_all(&run);
    let trained = Command::new(lucent())
        .args([
            "train",
            "seq2seq",
            "--task",
            "reverse",
            "--steps",
            "300",
            "--eval-every",
            "300",
        ])
        .args([
            "--test-size",
            "50",
            "--symbols",
            "8",
            "--min-len",
            "4",
            "--max-len",
            "8",
            "--json",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let run_s = run.to_str().unwrap().to_string();
    let server = Server::start(&[
        "smollm2",
        "minilm",
        "gemma3",
        "tests/data/runs/tiny-bpe",
        run_s.as_str(),
        "whisper-tiny.en",
    ]);
    let b = browser();
    let (tab, errors) = watched_tab(&b);
    let models = server.get("/explore/api/models");
    let heads_of = |name: &str| -> usize {
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not served: {models}"))["heads"]
            .as_u64()
            .unwrap() as usize
    };

    // 0. Every input is bounded: out-of-range or oversized requests get a 4xx error
    //    object that names the parameter and the numbers.
    let long = "a ".repeat(9000);
    for (path, status, says) in [
        (
            format!(
                "/explore/api/attention?model=smollm2&text={}&layer=30&head=0",
                enc(TEXT)
            ),
            400,
            "layer 30 does not exist: there are 30",
        ),
        (
            format!(
                "/explore/api/attention?model=smollm2&text={}&layer=0&head=9",
                enc(TEXT)
            ),
            400,
            "head 9 does not exist: there are 9",
        ),
        (
            format!(
                "/explore/api/steps?model=minilm&text={}&layer=0&head=0&token=99",
                enc(TEXT)
            ),
            400,
            "token 99 does not exist",
        ),
        (
            format!("/explore/api/tokens?model=smollm2&text={}", enc(&long)),
            400,
            "at most 16384",
        ),
        (
            format!(
                "/explore/api/tokens?model=smollm2&text={}",
                enc(&"cat ".repeat(3000))
            ),
            400,
            "at most 2048",
        ),
        (
            "/explore/api/tokens?model=smollm2&text=".to_string(),
            400,
            "text is required",
        ),
        (
            format!("/explore/api/tokens?model=nope&text={}", enc(TEXT)),
            404,
            "nope",
        ),
        (
            format!("/explore/api/distribution?model=minilm&text={}", enc(TEXT)),
            400,
            "encoder",
        ),
        (
            format!(
                "/explore/api/distribution?model=smollm2&text={}&top_p=2",
                enc(TEXT)
            ),
            400,
            "top-p",
        ),
        (
            format!(
                "/explore/api/attention?model=smollm2&text={}&layer=x",
                enc(TEXT)
            ),
            400,
            "layer must be a number",
        ),
    ] {
        let (got, body) = server.status(&path);
        let msg = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(got, status, "{path}: {body}");
        assert!(msg.contains(says), "{path}: '{msg}' does not say '{says}'");
    }

    // 1. Each model: loads without console errors; its table view equals the CLI's.
    for (model, cli, layer, head) in [
        ("minilm", "minilm", 2, 5),
        ("smollm2", "smollm2", 3, 4),
        ("gemma3", "gemma3", 5, 2),
        ("tiny-bpe", "tests/data/runs/tiny-bpe", 1, 1),
    ] {
        let head = head.min(heads_of(model) - 1);
        let url = format!(
            "{}/?model={model}&text={}&layer={layer}&head={head}&view=table",
            server.url,
            enc(TEXT)
        );
        open(&tab, &url);
        let page = table(&tab);
        let want = cli_weights(cli, layer, head);
        assert_eq!(page.len(), want.len(), "{model}: rows");
        for (i, (pr, wr)) in page.iter().zip(&want).enumerate() {
            assert_eq!(pr.len(), wr.len(), "{model}: row {i}");
            for (j, (p, w)) in pr.iter().zip(wr).enumerate() {
                let p: f64 = p.parse().unwrap();
                assert!(
                    (p - w).abs() <= 0.5e-4 + 1e-6,
                    "{model} layer {layer} head {head} [{i}][{j}]: page {p} vs lucent attention {w}"
                );
            }
        }
        let errs = errors.lock().unwrap().clone();
        assert!(errs.is_empty(), "{model}: console errors {errs:?}");
        println!("{model}: table of layer {layer} head {head} ({} tokens) equals lucent attention --json", page.len());
    }

    // 1b. A trained encoder-decoder: each of its three attentions equals the CLI's.
    for (stack, layer, head) in [("cross", 1, 2), ("encoder", 0, 1), ("decoder", 1, 3)] {
        let url = format!(
            "{}/?model=explorer-reverse&text=abcdefg&stack={stack}&layer={layer}&head={head}&view=table",
            server.url
        );
        open(&tab, &url);
        let want = cli_weights_of(&[&run_s, "abcdefg", "--stack", stack], layer, head);
        same_table(
            &format!("reverse {stack} layer {layer} head {head}"),
            &table(&tab),
            &want,
        );
        println!("explorer-reverse: {stack} attention of layer {layer} head {head} equals lucent attention --json");
    }
    open(
        &tab,
        &format!(
            "{}/?model=explorer-reverse&text=abcdefg&stack=cross&layer=1&head=0&view=heatmap",
            server.url
        ),
    );
    screenshot(&tab, "seq2seq-cross");
    let errs = errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "explorer-reverse: console errors {errs:?}");

    // 1c. Whisper: a WAV chosen with the page's file picker is uploaded and traced; the
    //     three attentions equal `lucent attention -m whisper-tiny.en FILE.wav --stack S`.
    // (Canonical: Chromium reads no file by a path with `..` in it.)
    let wav = root()
        .join("tests/data/whisper/clips/10.wav")
        .canonicalize()
        .unwrap();
    open(
        &tab,
        &format!("{}/?model=whisper-tiny.en&view=table", server.url),
    );
    let picker = tab.find_element("#audio-file").unwrap();
    tab.call_method(headless_chrome::protocol::cdp::DOM::SetFileInputFiles {
        files: vec![wav.to_str().unwrap().to_string()],
        node_id: Some(picker.node_id),
        backend_node_id: None,
        object_id: None,
    })
    .unwrap();
    // DOM.setFileInputFiles sets the files as a user's choice would; the page acts on
    // the input's change event, which a user's choice fires.
    let chosen = eval(&tab, "(() => { const i = document.getElementById('audio-file'); const n = i.files.length; if (n) i.dispatchEvent(new Event('change', { bubbles: true })); return n; })()");
    assert_eq!(chosen, Value::from(1), "the file picker holds no file");
    wait_for(
        &tab,
        "location.search.includes('audio=') && !!document.getElementById('weights-table')",
        "the upload and the first table",
    );
    wait_ready(&tab);
    let audio = eval(&tab, "new URLSearchParams(location.search).get('audio')");
    let audio = audio.as_str().unwrap().to_string();
    let wav_s = wav.to_str().unwrap();
    for (stack, layer, head) in [("cross", 1, 2), ("encoder", 2, 5), ("decoder", 3, 0)] {
        let url = format!(
            "{}/?model=whisper-tiny.en&audio={audio}&stack={stack}&layer={layer}&head={head}&view=table",
            server.url
        );
        open(&tab, &url);
        let want = cli_weights_of(&["whisper-tiny.en", wav_s, "--stack", stack], layer, head);
        same_table(
            &format!("whisper {stack} layer {layer} head {head}"),
            &table(&tab),
            &want,
        );
        println!(
            "whisper-tiny.en: {stack} attention of layer {layer} head {head} ({} × {}) equals lucent attention --json",
            want.len(),
            want[0].len()
        );
    }
    // The pictures: a longer sentence (1.8 s), uploaded as the page does it.
    let longer = std::fs::read(root().join("tests/data/whisper/clips/00.wav")).unwrap();
    let up: Value = ureq::post(&format!("{}/explore/api/audio", server.url))
        .header("content-type", "audio/wav")
        .send(&longer[..])
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let shown = up["audio"].as_str().unwrap().to_string();
    for (view, shot) in [
        ("heatmap", "whisper-cross"),
        ("lines", "whisper-lines"),
        ("architecture", "whisper-architecture"),
        ("steps", "whisper-steps"),
    ] {
        open(
            &tab,
            &format!(
                "{}/?model=whisper-tiny.en&audio={shown}&stack=cross&layer=3&head=1&sqrt=1&view={view}",
                server.url
            ),
        );
        screenshot(&tab, shot);
    }
    let diff = eval(&tab, "document.getElementById('view').textContent.match(/largest difference from the kernel ([0-9.e+-]+)/)[1]");
    let diff: f64 = diff.as_str().unwrap().parse().unwrap();
    assert!(
        diff < 1e-4,
        "whisper cross-attention recomputed by hand differs by {diff}"
    );
    let errs = errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "whisper: console errors {errs:?}");

    // 2. Every view of SmolLM2, photographed.
    for view in [
        "heatmap",
        "table",
        "model",
        "lines",
        "steps",
        "architecture",
        "path",
        "distribution",
        "positions",
        "demos",
    ] {
        let url = format!(
            "{}/?model=smollm2&text={}&layer=3&head=4&token=8&view={view}",
            server.url,
            enc(TEXT)
        );
        open(&tab, &url);
        if view == "model" {
            std::thread::sleep(Duration::from_millis(300));
            wait_ready(&tab);
        }
        screenshot(&tab, view);
    }
    let url = format!(
        "{}/?model=gemma3&text={}&layer=5&head=0&view=model",
        server.url,
        enc(TEXT)
    );
    open(&tab, &url);
    std::thread::sleep(Duration::from_millis(300));
    wait_ready(&tab);
    screenshot(&tab, "gemma3-model");
    let errs = errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "views: console errors {errs:?}");

    // 3. The sliders apply the sampler's rules: the page's distribution equals the
    //    server's lucent::pipeline::generate::distribution of the same logits.
    let url = format!(
        "{}/?model=smollm2&text={}&view=distribution",
        server.url,
        enc(TEXT)
    );
    open(&tab, &url);
    for (t, k, p, m) in [
        (0.8, 40, 0.95, 0.05),
        (1.0, 0, 1.0, 0.0),
        (1.5, 0, 0.9, 0.0),
        (0.3, 5, 1.0, 0.0),
        (2.0, 100, 0.5, 0.1),
        (0.0, 40, 0.95, 0.05),
    ] {
        let set = format!(
            "for (const [n, v] of [['temperature', {t}], ['top_k', {k}], ['top_p', {p}], ['min_p', {m}]]) {{ const s = document.getElementById('s-' + n); s.value = v; s.dispatchEvent(new Event('input')); }}
             JSON.stringify({{kept: +document.getElementById('dist-table').dataset.kept, rows: Array.from(document.querySelectorAll('#dist-table tr[data-id]')).map(r => [+r.dataset.id, +r.dataset.p])}})"
        );
        let got: Value = serde_json::from_str(eval(&tab, &set).as_str().unwrap()).unwrap();
        let want = server.get(&format!(
            "/explore/api/distribution?model=smollm2&text={}&temperature={t}&top_k={k}&top_p={p}&min_p={m}&limit=25",
            enc(TEXT)
        ));
        assert_eq!(
            got["kept"], want["kept"],
            "T {t} k {k} p {p} min_p {m}: tokens kept"
        );
        let rows = got["rows"].as_array().unwrap();
        let top = want["top"].as_array().unwrap();
        assert_eq!(rows.len(), top.len());
        for (r, w) in rows.iter().zip(top) {
            assert_eq!(r[0], w["id"], "T {t}: token order");
            let (a, b) = (r[1].as_f64().unwrap(), w["p"].as_f64().unwrap());
            assert!(
                (a - b).abs() <= 2e-6 * b.max(1e-3),
                "T {t} k {k} p {p} min_p {m}: id {}: page {a} vs sampler {b}",
                w["id"]
            );
        }
        println!(
            "sliders T={t} top_k={k} top_p={p} min_p={m}: {} tokens kept, as the sampler",
            got["kept"]
        );
    }

    // 4. The standalone export, opened from file:// with the network off.
    let url = format!(
        "{}/?model=smollm2&text={}&layer=3&head=4&view=table",
        server.url,
        enc(TEXT)
    );
    open(&tab, &url);
    let live = table(&tab);
    let html = eval(&tab, "window.lucentStandalone()");
    let dir = std::env::temp_dir().join(format!("lucent-explorer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("export.html");
    std::fs::write(&file, html.as_str().unwrap()).unwrap();
    let (off, off_errors) = watched_tab(&b);
    off.call_method(Network::Enable {
        max_total_buffer_size: None,
        max_resource_buffer_size: None,
        max_post_data_size: None,
        report_direct_socket_traffic: None,
        enable_durable_messages: None,
    })
    .unwrap();
    off.call_method(Network::EmulateNetworkConditions {
        offline: true,
        latency: 0.0,
        download_throughput: -1.0,
        upload_throughput: -1.0,
        connection_Type: None,
        packet_loss: None,
        packet_queue_length: None,
        packet_reordering: None,
    })
    .unwrap();
    open(&off, &format!("file://{}", file.display()));
    assert_eq!(
        table(&off),
        live,
        "the standalone export shows other numbers"
    );
    let errs = off_errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "standalone: console errors {errs:?}");
    screenshot(&off, "standalone");
    println!(
        "standalone export ({} bytes) shows the same table offline",
        html.as_str().unwrap().len()
    );
    let _ = std::fs::remove_dir_all(&dir);

    // 4b. With --api-key the page asks for the key (kept in the tab, sent as a bearer
    //     token, never in the URL or an export) and then shows the same numbers.
    {
        let keyed = Server::start_with(&["minilm"], &["--api-key", "sekrit-7"]);
        let (status, _) = keyed.status(&format!(
            "/explore/api/tokens?model=minilm&text={}",
            enc(TEXT)
        ));
        assert_eq!(status, 401);
        let (kt, kerrs) = watched_tab(&b);
        let url = format!(
            "{}/?model=minilm&text={}&layer=2&head=5&view=table",
            keyed.url,
            enc(TEXT)
        );
        kt.navigate_to(&url)
            .unwrap()
            .wait_until_navigated()
            .unwrap();
        wait_for(
            &kt,
            "!document.getElementById('key-row').hidden",
            "the key prompt",
        );
        screenshot(&kt, "api-key");
        eval(&kt, "document.getElementById('key').value = 'sekrit-7'; document.getElementById('key-save').click(); true");
        wait_for(
            &kt,
            "!!document.getElementById('weights-table')",
            "the table after the key",
        );
        wait_ready(&kt);
        same_table(
            "minilm with --api-key",
            &table(&kt),
            &cli_weights("minilm", 2, 5),
        );
        let leaks = eval(
            &kt,
            "location.href.includes('sekrit') || window.lucentStandalone().includes('sekrit')",
        );
        assert_eq!(
            leaks,
            Value::Bool(false),
            "the key leaks into the URL or the export"
        );
        // The key in the address's fragment (never sent to the server) works too.
        let (ft, _) = watched_tab(&b);
        ft.navigate_to(&format!("{url}#key=sekrit-7"))
            .unwrap()
            .wait_until_navigated()
            .unwrap();
        wait_for(
            &ft,
            "!!document.getElementById('weights-table')",
            "the table with #key=",
        );
        wait_ready(&ft);
        assert_eq!(eval(&ft, "location.hash"), Value::String(String::new()));
        // Console errors: only the 401 of the first request, which the page answers.
        let errs = kerrs.lock().unwrap().clone();
        assert!(
            errs.iter().all(|e| e.contains("401")),
            "with --api-key: console errors {errs:?}"
        );
        println!("--api-key: the page asked for the key, then showed the same table");
    }

    // 5. Time from the request to the first heatmap: SmolLM2, about 1,000 tokens.
    let sentence = "Call me Ishmael. Some years ago, never mind how long precisely, having little money in my purse, I thought I would sail about a little and see the watery part of the world. ";
    let mut long = sentence.repeat(45);
    let count = |s: &str| {
        server.get(&format!(
            "/explore/api/tokens?model=smollm2&text={}",
            enc(s)
        ))["tokens"]
            .as_array()
            .unwrap()
            .len()
    };
    while count(&long) > 1000 {
        long.truncate(long.len() - 40);
    }
    let n = count(&long);
    let (fresh, fresh_errors) = watched_tab(&b);
    let url = format!(
        "{}/?model=smollm2&text={}&layer=7&head=2&view=heatmap",
        server.url,
        enc(&long)
    );
    open(&fresh, &url);
    let ms = eval(&fresh, "window.LUCENT_METRICS.firstHeatmapMs")
        .as_f64()
        .unwrap();
    println!("SmolLM2, {n} tokens: first heatmap {ms:.0} ms after the request (in Chromium)");
    screenshot(&fresh, "heatmap-1000");
    let errs = fresh_errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "1,000 tokens: console errors {errs:?}");
    println!("explorer test: {:.1} s", t0.elapsed().as_secs_f64());
}

/// A mixture of experts in the path view (no browser needed): `lucent explore` on the
/// random-weight Qwen3-MoE bench file (`tests/data/gguf_moe/qwen3moe.gguf`, 3 layers, 8
/// experts, 2 per token) answers, for every layer, the two experts each token chose
/// (distinct, in 0..8), and at the query token the same two with weights that sum to 1,
/// most probable first.
#[test]
fn path_view_shows_each_tokens_experts() {
    let server = Server::start(&["tests/data/gguf_moe/qwen3moe.gguf"]);
    let models = server.get("/explore/api/models");
    let name = models["models"][0]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("no model served: {models}"))
        .to_string();
    let token = 2;
    let p = server.get(&format!(
        "/explore/api/path?model={}&text={}&token={token}",
        enc(&name),
        enc(TEXT)
    ));
    let layers = p["experts"]
        .as_array()
        .unwrap_or_else(|| panic!("no experts: {p}"));
    assert_eq!(layers.len(), 3, "{p}");
    let t = p["t"].as_u64().unwrap() as usize;
    for (l, ex) in layers.iter().enumerate() {
        assert_eq!(ex["k"], 2, "layer {l}: {ex}");
        let per_token = ex["per_token"].as_array().unwrap();
        assert_eq!(per_token.len(), t, "layer {l}");
        for es in per_token {
            let es: Vec<u64> = es
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_u64().unwrap())
                .collect();
            assert!(
                es.len() == 2 && es[0] != es[1] && es.iter().all(|&e| e < 8),
                "layer {l}: {es:?}"
            );
        }
        let at: Vec<(u64, f64)> = ex["at_token"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u[0].as_u64().unwrap(), u[1].as_f64().unwrap()))
            .collect();
        let chosen: Vec<u64> = at.iter().map(|u| u.0).collect();
        assert_eq!(json_ids(&per_token[token]), chosen, "layer {l}");
        assert!(at[0].1 >= at[1].1, "layer {l}: {at:?}");
        assert!((at[0].1 + at[1].1 - 1.0).abs() < 1e-5, "layer {l}: {at:?}");
    }
}

fn json_ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_u64().unwrap())
        .collect()
}

/// `lucent ARGS... --json` (with `-m smollm2`): its JSON.
fn cli_json(args: &[&str]) -> Value {
    let out = Command::new(lucent())
        .current_dir(root())
        .args(args)
        .args(["-m", "smollm2", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lucent {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Interventions in the page, on SmolLM2 (docs/interventions.md): in the model view's
/// ablate mode a click on head 23.4 zero-ablates it, and the next-token table shows, side
/// by side, the clean run's and the ablated run's probabilities: the top tokens' equal
/// `exp(logprob)` of `lucent ablate --heads 23.4 --target TOKEN --json` (ablated) and
/// of its `plain_logprob` (clean) to 4 decimals, and the ablated run's top token is the
/// CLI's `top_token`. The patching view's every cell equals `lucent patch --json`'s
/// log-probability and restored share to 4 decimals; the steering view's continuations
/// equal `lucent steer --from "A|B" --scale C --json`'s, character for character. A bad
/// `iv=` is a 400 naming `iv` and the field. No console errors; each view photographed.
#[test]
fn explorer_interventions() {
    const EIFFEL: &str = "The Eiffel Tower is in";
    let server = Server::start(&["smollm2"]);
    let (code, body) = server.status(&format!(
        "/explore/api/distribution?model=smollm2&text={}&iv={}",
        enc(EIFFEL),
        enc(r#"[{"hook":"blocks.5.attn.hook_z","op":"zero","head":99}]"#)
    ));
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["param"], "iv", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("head")),
        "{body}"
    );
    let b = browser();
    let (tab, errors) = watched_tab(&b);

    // 1. Click a head in ablate mode.
    open(
        &tab,
        &format!(
            "{}/?model=smollm2&text={}&view=model&abmode=1",
            server.url,
            enc(EIFFEL)
        ),
    );
    eval(
        &tab,
        "document.querySelector('canvas.thumb[data-layer=\"23\"][data-head=\"4\"]').click(); true",
    );
    wait_for(
        &tab,
        "!!document.getElementById('ablate-table')",
        "the ablation table",
    );
    wait_ready(&tab);
    let url = eval(&tab, "location.search");
    assert!(
        url.as_str().is_some_and(|u| u.contains("ablate=23.4")),
        "{url}"
    );
    let rows: Vec<Value> = serde_json::from_str(
        eval(
            &tab,
            "JSON.stringify(Array.from(document.querySelectorAll('#ablate-table tr[data-id]')).map(r => ({id: +r.dataset.id, text: r.dataset.text, clean: Array.from(r.cells)[2].textContent, ablated: Array.from(r.cells)[3].textContent, pa: +r.dataset.ablated})))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    let mut by_ablated: Vec<&Value> = rows
        .iter()
        .filter(|r| !r["ablated"].as_str().unwrap().starts_with('<'))
        .collect();
    by_ablated.sort_by(|x, y| {
        y["pa"]
            .as_f64()
            .unwrap()
            .total_cmp(&x["pa"].as_f64().unwrap())
    });
    assert!(by_ablated.len() >= 3, "{rows:?}");
    for (rank, r) in by_ablated.iter().take(3).enumerate() {
        let tok = r["text"].as_str().unwrap();
        let j = cli_json(&["ablate", EIFFEL, "--heads", "23.4", "--target", tok]);
        assert_eq!(j["target_id"], r["id"], "{tok:?}");
        let want_ablated = j["results"][0]["logprob"].as_f64().unwrap().exp();
        let want_clean = j["plain_logprob"].as_f64().unwrap().exp();
        let shown: f64 = r["ablated"].as_str().unwrap().parse().unwrap();
        assert!(
            (shown - want_ablated).abs() <= 0.5e-4 + 1e-6,
            "{tok:?} ablated: page {shown} vs lucent ablate {want_ablated}"
        );
        let shown: f64 = r["clean"].as_str().unwrap().parse().unwrap();
        assert!(
            (shown - want_clean).abs() <= 0.5e-4 + 1e-6,
            "{tok:?} clean: page {shown} vs lucent ablate's plain run {want_clean}"
        );
        if rank == 0 {
            assert_eq!(j["results"][0]["top_token"].as_str(), Some(tok));
        }
        println!(
            "ablated 23.4: {tok:?} p = {want_ablated:.4} (clean {want_clean:.4}), as lucent ablate"
        );
    }
    screenshot(&tab, "ablate");

    // 2. The patching view against lucent patch.
    const CORRUPT: &str = "The Colosseum is in";
    open(
        &tab,
        &format!(
            "{}/?model=smollm2&text={}&view=patch&corrupt={}",
            server.url,
            enc(EIFFEL),
            enc(CORRUPT)
        ),
    );
    wait_for(
        &tab,
        "!!document.getElementById('patch-table')",
        "the patching table",
    );
    let cells: Vec<Vec<f64>> = serde_json::from_str(
        eval(
            &tab,
            "JSON.stringify(Array.from(document.querySelectorAll('#patch-table td[data-layer]')).map(td => [+td.dataset.layer, +td.dataset.pos, +td.dataset.logprob, +td.dataset.restored]))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    let j = cli_json(&["patch", "--clean", EIFFEL, "--corrupt", CORRUPT]);
    let t = j["tokens"].as_array().unwrap().len();
    assert_eq!(cells.len(), 30 * t);
    for c in &cells {
        let (l, p) = (c[0] as usize, c[1] as usize);
        let lp = j["logprob"][l][p].as_f64().unwrap();
        let r = j["restored"][l][p].as_f64().unwrap();
        assert!(
            (c[2] - lp).abs() <= 0.5e-4 && (c[3] - r).abs() <= 0.5e-4,
            "cell ({l}, {p}): page {c:?} vs lucent patch log p {lp}, restored {r}"
        );
    }
    screenshot(&tab, "patch");
    // Texts of different lengths: the page says so (and sweeps nothing); the route is a
    // 400 naming `corrupt`.
    const LONGER: &str = "The Colosseum in Rome is in";
    open(
        &tab,
        &format!(
            "{}/?model=smollm2&text={}&view=patch&corrupt={}",
            server.url,
            enc(EIFFEL),
            enc(LONGER)
        ),
    );
    let said = eval(
        &tab,
        "document.getElementById('patch-progress').textContent",
    );
    assert!(
        said.as_str()
            .is_some_and(|m| m.contains("same number of tokens")),
        "{said}"
    );
    let (code, body) = server.status(&format!(
        "/explore/api/patch?model=smollm2&text={}&corrupt={}",
        enc(EIFFEL),
        enc(LONGER)
    ));
    assert_eq!(
        (code, &body["error"]["param"]),
        (400, &Value::from("corrupt")),
        "{body}"
    );

    // 3. The steering view against lucent steer.
    const YOU: &str = "I think that you are";
    open(
        &tab,
        &format!(
            "{}/?model=smollm2&text={}&view=steer&sa={}&sb={}&slayer=12&coef=3",
            server.url,
            enc(YOU),
            enc("I love you"),
            enc("I hate you")
        ),
    );
    wait_for(
        &tab,
        "!!document.getElementById('steer-steered')",
        "the steered continuation",
    );
    let page = |id: &str| {
        eval(
            &tab,
            &format!("document.getElementById('{id}').textContent"),
        )
        .as_str()
        .unwrap()
        .to_string()
    };
    let j = cli_json(&[
        "steer",
        YOU,
        "--layer",
        "12",
        "--from",
        "I love you|I hate you",
        "--scale",
        "3",
        "-n",
        "16",
    ]);
    assert_eq!(Some(page("steer-steered").as_str()), j["steered"].as_str());
    assert_eq!(Some(page("steer-plain").as_str()), j["plain"].as_str());
    assert_ne!(page("steer-steered"), page("steer-plain"));
    screenshot(&tab, "steer");
    let errs = errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "interventions: console errors {errs:?}");
}
