//! The bodies of lucent's fuzz targets, one function per target.
//!
//! This one file is compiled twice: by the fuzz crate (`fuzz/fuzz_targets/NAME.rs` is a
//! one-line call of `harness::NAME`) and by the normal test suite
//! (`crates/lucent/tests/fuzz_regressions.rs`), which replays every input kept in
//! `tests/data/fuzz/NAME/` and every seed in `fuzz/corpus/NAME/` through the same code.
//! So the harness is type-checked by every `cargo test`, and a crash once found stays
//! fixed.
//!
//! Each function goes through lucent's public API as a user's file would: parse from
//! bytes, then use what was parsed (derive the config, the tokenizer, the chat template,
//! build the model). A returned error is a pass; a panic, an abort, a hang or an
//! allocation beyond libFuzzer's `-rss_limit_mb` is a finding. [`chat`] also checks a
//! property: control tokens come only from the template.
//!
//! A new target is one more function here, one file in `fuzz_targets/`, one `[[bin]]` in
//! `fuzz/Cargo.toml` and a seed folder `fuzz/corpus/NAME/`. The server's request target
//! lives in `harness_server.rs` (it needs the server crate, which this file's second
//! home, the library's test suite, cannot depend on).

// Each fuzz target calls one of these functions; the others are unused there.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lucent::io::audio::AudioStream;
use lucent::io::ctranslate2::Ct2Folder;
use lucent::io::gguf::{GgufArray, GgufFile, GgufValue, GgufWriter};
use lucent::io::gguf_tokenizer::{GgufTokenizer, TokenType};
use lucent::io::mel::{MelStream, N_FRAMES};
use lucent::io::tokenizer::TokenStream;
use lucent::io::{HfTokenizer as Tokenizer, SafetensorsFile};
use lucent::model::family::{bert, whisper, Weights, GGUF_FAMILIES};
use lucent::model::{DecoderModel, EncoderModel};
use lucent::pipeline::chat::{CHATML, GEMMA};
use lucent::pipeline::{ChatTemplate, Message};
use lucent::Tensor;

/// Text that every tokenizer target encodes: words, digits, spaces, special-token
/// spellings, multi-byte characters.
const TEXT: &str = "Hello <|im_start|>user\n  world<end_of_turn> 42\n\n é 日本 [SEP]";

/// Tensors up to this many elements are widened to f32 (larger ones are only viewed).
const WIDEN_LIMIT: usize = 1 << 20;

/// A GGUF file: metadata, tensor table and views, every GGUF family's config, the
/// tokenizer and chat template it carries (encoding, decoding, a rendered chat), and
/// the decoder model built from it.
pub fn gguf(data: &[u8]) {
    let Ok(f) = GgufFile::from_bytes(data, "fuzz.gguf") else {
        return;
    };
    for (_, v) in f.metadata() {
        let _ = v.describe();
    }
    for t in f.tensor_infos() {
        if let Ok(view) = f.tensor(&t.name) {
            if t.numel() <= WIDEN_LIMIT {
                let _ = view.dequantize();
            }
        }
        let _ = f.qmatrix(&t.name);
    }
    // Every registered family's config translation (whatever the file says its
    // architecture is), so a new family is fuzzed the day it is registered.
    for family in GGUF_FAMILIES {
        let _ = family.config(&f);
    }
    if let Ok(tok) = GgufTokenizer::from_gguf(&f) {
        if let Ok(ids) = tok.encode(TEXT, true) {
            let _ = tok.decode(&ids, false);
            let mut s = TokenStream::new(true);
            for id in ids {
                let _ = s.push(&tok, id);
            }
        }
        if let Ok(Some(t)) = ChatTemplate::from_gguf(&f, &tok) {
            let _ = t.encode_messages(&tok, &[Message::new("user", TEXT)], true);
        }
    }
    let _ = DecoderModel::from_gguf(&f);
}

/// A safetensors file: the header, then every tensor read (f16/bf16 widened).
pub fn safetensors(data: &[u8]) {
    let Ok(f) = SafetensorsFile::from_bytes(data, "fuzz.safetensors") else {
        return;
    };
    let names: Vec<String> = f.names().map(str::to_string).collect();
    for n in &names {
        let _ = f.tensor(n);
    }
    let _ = f.meta_f64("format");
}

/// A BERT model folder: `config.json` and `model.safetensors` in one input (a
/// little-endian u16 with the config's length, the config, then the safetensors file),
/// read and built into an [`EncoderModel`] as `bert::load_model` does.
pub fn bert_folder(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = u16::from_le_bytes(*len) as usize;
    let (config_json, weights) = rest.split_at(len.min(rest.len()));
    let Ok(hf) = bert::parse_config(config_json, Path::new("config.json")) else {
        return;
    };
    let Ok(cfg) = bert::config(&hf) else {
        return;
    };
    let Ok(file) = SafetensorsFile::from_bytes(weights, "model.safetensors") else {
        return;
    };
    if let Ok(w) = Weights::new(&file, &bert::NAMES, &cfg) {
        let _ = EncoderModel::load(cfg.clone(), &w);
    }
}

/// A `tokenizer.json`: loaded, then a text and a pair encoded, padded and decoded.
pub fn tokenizer_json(data: &[u8]) {
    let_caught_panics_unwind();
    let Ok(mut tok) = Tokenizer::from_bytes(data) else {
        return;
    };
    let _ = tok.set_max_length(Some(16));
    if let Ok(batch) = tok.encode_batch(&[TEXT, "a"], true) {
        let refs: Vec<_> = batch.iter().collect();
        let padded = tok.pad(&refs);
        let _ = tok.decode(&padded.ids, false);
    }
    let _ = tok.id_to_token(0).and_then(|t| tok.token_to_id(&t));
}

/// A folder of this process's own under the temporary directory, made once, for the
/// targets that read files by path as a user's `--model DIR` or `FILE.wav` is read.
fn scratch(target: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lucent-fuzz-{}-{target}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The `tokenizer.json` every fuzzed CTranslate2 folder holds (the target fuzzes the
/// model and its config; tokenizers have their own target).
pub const CT2_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"<|endoftext|>":0,"the":1,"cat":2,"<unk>":3},"unk_token":"<unk>"}}"#;

/// Models up to this many parameters also run: one window encoded, one decoder step.
const RUN_LIMIT: usize = 1 << 16;

/// A CTranslate2 Whisper folder: `config.json` and `model.bin` in one input (a
/// little-endian u16 with the config's length, the config, then `model.bin`), written
/// beside a fixed `tokenizer.json` and opened as `--model DIR` is: the binary layout,
/// every variable read (int8 dequantised, f16 widened), Whisper's config checked
/// against the model, the encoder-decoder built and, when it is small, one 30-second
/// window of silence encoded and one decoder step run on it.
pub fn ct2_folder(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = u16::from_le_bytes(*len) as usize;
    let (config_json, model_bin) = rest.split_at(len.min(rest.len()));
    let dir = scratch("ct2_folder");
    let written = std::fs::write(dir.join("config.json"), config_json)
        .and_then(|_| std::fs::write(dir.join("model.bin"), model_bin))
        .and_then(|_| std::fs::write(dir.join("tokenizer.json"), CT2_TOKENIZER));
    if written.is_err() {
        return;
    }
    let Ok(folder) = Ct2Folder::open(&dir) else {
        return;
    };
    let file = &folder.model;
    let names: Vec<String> = file.names().map(str::to_string).collect();
    for n in &names {
        if file.get(n).is_ok_and(|v| v.numel() <= WIDEN_LIMIT) {
            let _ = file.bytes(n);
            let _ = file.tensor(n);
            let _ = file.dequantized(n);
        }
        let _ = file.scalar_int(n);
    }
    let _ = folder.whisper_config();
    let Ok(model) = whisper::load(&folder) else {
        return;
    };
    let params: usize = names
        .iter()
        .filter_map(|n| file.get(n).ok())
        .map(|v| v.numel())
        .sum();
    let n_mels = file
        .get("encoder/conv1/weight")
        .ok()
        .and_then(|v| v.shape.get(1).copied());
    let (Some(n_mels), true) = (n_mels, params <= RUN_LIMIT) else {
        return;
    };
    let features = Tensor::zeros(&[1, n_mels, N_FRAMES]); // (1, n_mels, 3000)
    if let Ok(memory) = model.encode_features(&features, None) {
        let mut cache = model.new_cache(1, model.config.max_positions);
        let _ = model.decode(&[vec![0]], &memory, None, Some(&mut cache), None);
    }
}

/// Audio of at most this many seconds also goes through the log-mel front-end.
const MEL_SECONDS: f64 = 2.0;

/// A WAV file, written to a file and read as `lucent transcribe FILE.wav` reads it: the
/// header checked against the file's length, the samples streamed in chunks, mixed to
/// mono and resampled to 16 kHz; short audio also becomes log-mel windows (both passes
/// of the streaming front-end). Checked: a stream that reaches its end gives exactly
/// the 16 kHz sample count its header promises.
pub fn wav(data: &[u8]) {
    let path = scratch("wav").join("input.wav");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(mut stream) = AudioStream::open(&path) else {
        return;
    };
    let info = *stream.info();
    let _ = (info.duration_secs(), info.frames_16k());
    let mut samples = 0u64;
    let ended = loop {
        match stream.next_chunk() {
            Ok(Some(chunk)) => samples += chunk.len() as u64,
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    if ended {
        assert_eq!(
            samples,
            info.frames_16k(),
            "a stream that ends must give the 16 kHz length its header promises ({info:?})"
        );
    }
    if info.duration_secs() > MEL_SECONDS {
        return;
    }
    let Ok(mut mel) = MelStream::open_wav(&path, 80) else {
        return;
    };
    let mut seek = 0;
    while let Ok(Some(_window)) = mel.window(seek) {
        seek += N_FRAMES;
    }
}

/// Lets a panic raised inside the `tokenizers` crate unwind to lucent's boundary
/// ([`Tokenizer::from_bytes`] catches it and returns an error); every other panic still
/// goes to the hook installed before (libfuzzer-sys's, which aborts: a finding).
fn let_caught_panics_unwind() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_tokenizers = info.location().is_some_and(|l| {
                let f = l.file();
                f.contains("tokenizers-") || f.contains("/tokenizers/")
            });
            if !in_tokenizers {
                before(info);
            }
        }));
    });
}

/// Hostile message contents under lucent's chat templates, with a byte-level BPE and a
/// SentencePiece vocabulary that know ChatML's and Gemma's control tokens. The first
/// byte picks the template and vocabulary; the rest is the messages' text, split at
/// `\x01` (roles cycle through user, assistant, system). Checked, for every input:
/// - the conversation encodes;
/// - its control tokens are exactly those of the same conversation with every text
///   replaced by "x" (only the template makes control tokens);
/// - its ids decode to the template's rendering of the hostile text.
pub fn chat(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (tok, kind) = if pick & 1 == 0 {
        (bpe_vocab(), "bpe")
    } else {
        (spm_vocab(), "spm")
    };
    let source = [CHATML, GEMMA, TRIM_UPPER][(pick as usize >> 1) % 3];
    let tmpl = ChatTemplate::new(source, "<bos>", "<eos>");
    let mut text = String::from_utf8_lossy(rest).into_owned();
    if kind == "spm" {
        // A SentencePiece vocabulary writes spaces as ▁: a typed ▁ decodes as a space.
        text = text.replace('\u{2581}', "");
    }
    let roles = ["user", "assistant", "system"];
    let msgs: Vec<Message> = text
        .split('\u{1}')
        .enumerate()
        .map(|(i, t)| Message::new(roles[i % 3], t))
        .collect();
    let harmless: Vec<Message> = msgs.iter().map(|m| Message::new(&m.role, "x")).collect();
    let ids = match tmpl.encode_messages(tok, &msgs, true) {
        Ok(ids) => ids,
        Err(e) => panic!("{kind}: a conversation did not encode: {e}"),
    };
    let safe = match tmpl.encode_messages(tok, &harmless, true) {
        Ok(ids) => ids,
        Err(e) => panic!("{kind}: the harmless conversation did not encode: {e}"),
    };
    let controls = |ids: &[u32]| -> Vec<u32> {
        ids.iter()
            .copied()
            .filter(|&i| tok.token_type(i) == Some(TokenType::Control))
            .collect()
    };
    assert_eq!(
        controls(&ids),
        controls(&safe),
        "{kind}: message text made control tokens: {msgs:?}"
    );
    let mut rendered = match tmpl.render(&msgs, true) {
        Ok(r) => r,
        Err(e) => panic!("{kind}: rendering failed: {e}"),
    };
    if tok.add_bos() && !rendered.starts_with(tmpl.bos()) {
        rendered.insert_str(0, tmpl.bos());
    }
    let decoded = match tok.decode(&ids, false) {
        Ok(d) => d,
        Err(e) => panic!("{kind}: decoding failed: {e}"),
    };
    assert_eq!(decoded, rendered, "{kind}: the text did not come back");
}

/// A template that trims and upper-cases message text around its own control tokens.
const TRIM_UPPER: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim | upper }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Control tokens both vocabularies know (ChatML's, Gemma's, BOS/EOS).
const CONTROLS: [&str; 7] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>",
    "<eos>",
];

/// GPT-2's printable stand-in for each byte.
fn byte_chars() -> Vec<char> {
    let mut extra = 0u32;
    (0..=255u8)
        .map(|b| {
            if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
                b as char
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('?')
            }
        })
        .collect()
}

fn tokenizer_from(w: &GgufWriter, name: &str) -> GgufTokenizer {
    let f = GgufFile::from_bytes(&w.to_bytes(), name).expect("the harness's vocabulary");
    GgufTokenizer::from_gguf(&f).expect("the harness's tokenizer")
}

/// A byte-level BPE vocabulary: the control tokens, Gemma's `\n\n` as a user-defined
/// token, the 256 byte characters and a few merges.
fn bpe_vocab() -> &'static GgufTokenizer {
    static T: OnceLock<GgufTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut tokens: Vec<String> = CONTROLS.iter().map(|s| s.to_string()).collect();
        let mut types = vec![3i32; tokens.len()];
        tokens.push("\n\n".into());
        types.push(4);
        for c in byte_chars() {
            tokens.push(c.to_string());
            types.push(1);
        }
        for t in ["Ġt", "he", "Ġthe", "im", "<|"] {
            tokens.push(t.into());
            types.push(1);
        }
        let merges = ["Ġ t", "h e", "Ġt he", "i m", "< |"];
        let mut w = GgufWriter::new();
        w.add("tokenizer.ggml.model", GgufValue::String("gpt2".into()));
        w.add("tokenizer.ggml.pre", GgufValue::String("smollm".into()));
        w.add(
            "tokenizer.ggml.tokens",
            GgufValue::Array(GgufArray::String(tokens)),
        );
        w.add(
            "tokenizer.ggml.token_type",
            GgufValue::Array(GgufArray::I32(types)),
        );
        w.add(
            "tokenizer.ggml.merges",
            GgufValue::Array(GgufArray::String(
                merges.iter().map(|s| s.to_string()).collect(),
            )),
        );
        w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(5));
        w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(6));
        w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
        tokenizer_from(&w, "chat-bpe.gguf")
    })
}

/// A SentencePiece vocabulary with byte fallback: the control tokens, `\n` runs as
/// user-defined tokens, the 256 byte tokens and a few scored pieces.
fn spm_vocab() -> &'static GgufTokenizer {
    static T: OnceLock<GgufTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut tokens: Vec<String> = CONTROLS.iter().map(|s| s.to_string()).collect();
        let mut types = vec![3i32; tokens.len()];
        let mut scores = vec![0.0f32; tokens.len()];
        for t in ["\n", "\n\n", "\n\n\n"] {
            tokens.push(t.into());
            types.push(4);
            scores.push(-1000.0);
        }
        for b in 0..=255u32 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (i, t) in [
            "▁", "<", "|", ">", "im", "_", "start", "<|", "▁the", "user", "model",
        ]
        .iter()
        .enumerate()
        {
            tokens.push(t.to_string());
            types.push(1);
            scores.push(-(i as f32));
        }
        let mut w = GgufWriter::new();
        w.add("tokenizer.ggml.model", GgufValue::String("llama".into()));
        w.add(
            "tokenizer.ggml.tokens",
            GgufValue::Array(GgufArray::String(tokens)),
        );
        w.add(
            "tokenizer.ggml.scores",
            GgufValue::Array(GgufArray::F32(scores)),
        );
        w.add(
            "tokenizer.ggml.token_type",
            GgufValue::Array(GgufArray::I32(types)),
        );
        w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(5));
        w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(6));
        w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
        w.add("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
        tokenizer_from(&w, "chat-spm.gguf")
    })
}
