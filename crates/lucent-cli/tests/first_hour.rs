//! What a new user meets first (issue 35), run as that user would run it: the README's
//! quickstart answer, the Gemma 3 example, the bounds on numeric options, and `chat`'s
//! start line, refusals and Ctrl-C.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

fn lucent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = lucent(args);
    assert_eq!(code, 0, "lucent {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap()
}

/// The first sentence of `text`.
fn first_sentence(text: &str) -> &str {
    let t = text.trim_start();
    let end = t
        .char_indices()
        .find(|&(i, c)| matches!(c, '.' | '!' | '?') && t[i + 1..].starts_with(char::is_whitespace))
        .map_or(t.len(), |(i, _)| i + 1);
    &t[..end]
}

/// The README's first command, as it stands there, over ten seeds: the answer's first
/// sentence names Paris, in English, on at least 8 (with the template's invented system
/// message, as llama.cpp renders it, 2 of 10 did).
#[test]
fn the_quickstart_answer_is_right_on_most_seeds() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let prompt = "What is the capital of France?";
    assert!(
        readme.contains(&format!("cargo run --release -- generate \"{prompt}\"")),
        "the README's quickstart no longer asks {prompt:?}: change this test with it"
    );
    let mut right = Vec::new();
    for seed in 1..=10 {
        let seed = seed.to_string();
        let j = json(&["generate", prompt, "--seed", &seed, "-n", "48", "--json"]);
        let text = j["text"].as_str().unwrap().to_string();
        let first = first_sentence(&text);
        let french = ["L'", "La ", "Le ", "Les ", "Un ", "Une "]
            .iter()
            .any(|p| first.starts_with(p));
        if first.contains("Paris") && !french {
            right.push(seed);
        } else {
            eprintln!("seed {seed}: {text:?}");
        }
    }
    assert!(right.len() >= 8, "right on seeds {right:?} only");
}

/// The README's Gemma 3 example continues the text: the packaged file is a base model
/// without a chat template, so no chat turns are put around the prompt, and no
/// special-token text is printed.
#[test]
fn a_base_model_continues_the_text() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let example = "lucent generate -m gemma3 \"The sky is blue because\" -n 60 --seed 1";
    assert!(
        readme.contains(example),
        "the README's Gemma 3 example changed"
    );
    let j = json(&[
        "generate",
        "-m",
        "gemma3",
        "The sky is blue because",
        "-n",
        "60",
        "--seed",
        "1",
        "--json",
    ]);
    assert_eq!(j["chat"], false);
    // <bos> and the prompt's own tokens: no <start_of_turn> (105) / <end_of_turn> (106).
    let prompt: Vec<u64> = j["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(prompt[0], 2, "{prompt:?}");
    assert!(!prompt.iter().any(|&i| i == 105 || i == 106), "{prompt:?}");
    let text = j["text"].as_str().unwrap();
    for special in [
        "<start_of_image>",
        "<end_of_image>",
        "<start_of_turn>",
        "<eos>",
    ] {
        assert!(!text.contains(special), "{special} printed in {text:?}");
    }
    // A chat with it is refused, naming why and what to do.
    let (code, _, err) = lucent(&["generate", "-m", "gemma3", "--chat", "Hi"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no chat template") && err.contains("--chat-template"),
        "{err}"
    );
    let (code, _, err) = lucent(&["chat", "-m", "gemma3"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no chat template") && err.contains("--chat-template"),
        "{err}"
    );
    // ...unless a template is given by hand.
    let j = json(&[
        "generate",
        "-m",
        "gemma3",
        "--chat-template",
        "gemma",
        "--temperature",
        "0",
        "-n",
        "4",
        "Hi",
        "--json",
    ]);
    assert_eq!(j["chat"], true);
    assert!(j["prompt_ids"]
        .as_array()
        .unwrap()
        .contains(&Value::from(105)));
}

/// Special tokens' text is printed only when asked for (`--special`).
#[test]
fn special_tokens_are_printed_only_when_asked() {
    let args = [
        "generate",
        "-m",
        "smollm2",
        "--raw",
        "--temperature",
        "0",
        "--ignore-eos",
        "-n",
        "30",
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
        "--json",
    ];
    let plain = json(&args);
    let mut with = args.to_vec();
    with.push("--special");
    let special = json(&with);
    assert_eq!(plain["ids"], special["ids"]);
    let (p, s) = (
        plain["text"].as_str().unwrap(),
        special["text"].as_str().unwrap(),
    );
    assert!(s.contains("<|im_end|>"), "{s:?}");
    assert!(
        !p.contains("<|im_end|>") && !p.contains("<|im_start|>"),
        "{p:?}"
    );
}

/// Numbers out of range: one line, exit 1, no backtrace, no allocation abort.
#[test]
fn numeric_options_are_bounded() {
    for args in [
        &["generate", "-n", "10000000000", "hi"][..],
        &["generate", "-n", "-5", "hi"],
        &["chat", "-n", "10000000000"],
        &["--threads", "5000", "embed", "hi"],
        &["--threads", "0", "embed", "hi"],
        &["embed", "hi", "--threads", "-2"],
    ] {
        let (code, out, err) = lucent(args);
        assert_eq!(code, 1, "lucent {args:?}: {err}");
        assert!(out.is_empty(), "lucent {args:?} wrote {out:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "lucent {args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(!err.contains("panicked") && !err.contains("memory allocation"));
        assert!(err.contains("give "), "no allowed range named: {err}");
    }
}

/// `chat` says how to leave at the start; Ctrl-C stops a reply and keeps the
/// conversation going.
#[test]
fn chat_hints_and_ctrl_c_stops_only_the_reply() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(["chat", "-m", "smollm2", "--temperature", "0", "-n", "400"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(
        stdin,
        "Write a very long story about a dragon, in many chapters."
    )
    .unwrap();
    stdin.flush().unwrap();
    // Wait for the reply to start: one full line of it.
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(!line.trim().is_empty(), "no reply started");
    // SAFETY: sends SIGINT to the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    // The conversation goes on: a second question is answered, then /exit ends it.
    writeln!(stdin, "What is 2 + 2?").unwrap();
    writeln!(stdin, "/exit").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chat ended with {:?}: {err}",
        out.status
    );
    assert!(err.contains("[chat with smollm2: /reset"), "{err}");
    assert!(err.contains("/exit"), "{err}");
    assert!(err.contains("[reply stopped"), "{err}");
    // The second question was read and answered after the stop (the loop went on to
    // /exit), with nothing refused.
    assert!(!rest.trim().is_empty(), "nothing written after the stop");
    assert!(!err.contains("error"), "{err}");
}
