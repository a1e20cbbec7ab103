//! The CTranslate2 reader on the real Whisper folders (fetched into the lucent cache on
//! first use) and on crafted, hostile files.
//!
//! Real files: every variable of the name table (io/ctranslate2.rs's module doc) is
//! present with the shape the table gives and nothing else is; the flags hold Whisper's
//! values; the tied output is an alias; the encoder's stored positions are Whisper's
//! sinusoids; config.json and tokenizer.json read, and the tokenizer turns CTranslate2's
//! reference ids (tests/data/whisper/ct2_reference.json) into CTranslate2's text.
//!
//! Crafted files: a small valid file reads back exactly (f32, f16, i8 flags, an int8
//! weight with its scale, an alias); every truncation, each bad field and random
//! corruptions give an error naming the file, never a panic or a huge allocation.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use lucent::io::ctranslate2::{Ct2Dtype, Ct2File, Ct2Folder};
use lucent::io::fetch;
use serde::Deserialize;

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lucent-ct2-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sizes a Whisper model's variables follow from.
struct Dims {
    name: &'static str,
    d: usize,
    layers: usize,
    heads: i64,
    vocab: usize,
    eot: u32,
}

const TINY_EN: Dims = Dims {
    name: "whisper-tiny.en",
    d: 384,
    layers: 4,
    heads: 6,
    vocab: 51_864,
    eot: 50_256,
};

const BASE: Dims = Dims {
    name: "whisper-base",
    d: 512,
    layers: 6,
    heads: 8,
    vocab: 51_865,
    eot: 50_257,
};

/// The name table: every variable a CTranslate2 Whisper model stores, with its shape.
fn expected_variables(m: &Dims) -> Vec<(String, Vec<usize>)> {
    let (d, f) = (m.d, 4 * m.d);
    let mut v: Vec<(String, Vec<usize>)> = vec![
        ("encoder/conv1/weight".into(), vec![d, 80, 3]),
        ("encoder/conv1/bias".into(), vec![d]),
        ("encoder/conv2/weight".into(), vec![d, d, 3]),
        ("encoder/conv2/bias".into(), vec![d]),
        ("encoder/position_encodings/encodings".into(), vec![1500, d]),
        ("encoder/layer_norm/gamma".into(), vec![d]),
        ("encoder/layer_norm/beta".into(), vec![d]),
        ("encoder/num_heads".into(), vec![]),
        ("decoder/embeddings/weight".into(), vec![m.vocab, d]),
        ("decoder/position_encodings/encodings".into(), vec![448, d]),
        ("decoder/layer_norm/gamma".into(), vec![d]),
        ("decoder/layer_norm/beta".into(), vec![d]),
    ];
    for flag in [
        "num_heads",
        "activation",
        "pre_norm",
        "scale_embeddings",
        "alibi",
        "start_from_zero_embedding",
        "alignment_layer",
        "alignment_heads",
    ] {
        v.push((format!("decoder/{flag}"), vec![]));
    }
    let block = |v: &mut Vec<(String, Vec<usize>)>, p: &str, linears: &[(usize, usize)]| {
        v.push((format!("{p}/layer_norm/gamma"), vec![d]));
        v.push((format!("{p}/layer_norm/beta"), vec![d]));
        for (i, &(rows, cols)) in linears.iter().enumerate() {
            v.push((format!("{p}/linear_{i}/weight"), vec![rows, cols]));
            v.push((format!("{p}/linear_{i}/bias"), vec![rows]));
        }
    };
    for l in 0..m.layers {
        for side in ["encoder", "decoder"] {
            block(
                &mut v,
                &format!("{side}/layer_{l}/self_attention"),
                &[(3 * d, d), (d, d)],
            );
            block(&mut v, &format!("{side}/layer_{l}/ffn"), &[(f, d), (d, f)]);
        }
        block(
            &mut v,
            &format!("decoder/layer_{l}/attention"),
            &[(d, d), (2 * d, d), (d, d)],
        );
    }
    v
}

fn folder(m: &Dims) -> Ct2Folder {
    let dir = fetch::ensure(m.name, &mut fetch::Silent).expect("fetch the model");
    Ct2Folder::open(&dir).expect("open the folder")
}

#[derive(Deserialize)]
struct Reference {
    models: std::collections::HashMap<String, ModelReference>,
}

#[derive(Deserialize)]
struct ModelReference {
    clips: std::collections::BTreeMap<String, ClipReference>,
}

#[derive(Deserialize)]
struct ClipReference {
    text: String,
    notimestamps: Run,
}

#[derive(Deserialize)]
struct Run {
    ids: Vec<u32>,
}

fn check_real(m: &Dims) {
    let f = folder(m);
    let file = &f.model;
    assert_eq!(file.spec(), "WhisperSpec");
    assert_eq!(file.revision(), 3);
    assert_eq!(file.binary_version(), 6);
    // Every variable of the table, with its shape, and nothing else.
    let want = expected_variables(m);
    let want_names: BTreeSet<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    let got_names: BTreeSet<&str> = file.names().collect();
    assert_eq!(got_names, want_names, "{}", m.name);
    for (name, shape) in &want {
        let v = file.get(name).unwrap();
        assert_eq!(&v.shape, shape, "{name}");
        if !shape.is_empty() {
            assert_eq!(v.dtype, Ct2Dtype::F16, "{name}");
            let t = file.tensor(name).unwrap();
            assert_eq!(t.shape(), &shape[..]);
            assert!(t.data().iter().all(|x| x.is_finite()), "{name}");
        }
    }
    // Flags and counts.
    assert_eq!(file.scalar_int("encoder/num_heads").unwrap(), m.heads);
    assert_eq!(file.scalar_int("decoder/num_heads").unwrap(), m.heads);
    assert_eq!(file.scalar_int("decoder/activation").unwrap(), 3); // GELU
    assert_eq!(file.scalar_int("decoder/pre_norm").unwrap(), 1);
    for off in ["scale_embeddings", "alibi", "start_from_zero_embedding"] {
        assert_eq!(
            file.scalar_int(&format!("decoder/{off}")).unwrap(),
            0,
            "{off}"
        );
    }
    // The tied output layer.
    assert_eq!(
        file.aliases()
            .get("decoder/projection/weight")
            .map(String::as_str),
        Some("decoder/embeddings/weight")
    );
    assert_eq!(
        file.tensor("decoder/projection/weight").unwrap().data(),
        file.tensor("decoder/embeddings/weight").unwrap().data()
    );
    // Whisper has no bias on K: the fused QKV bias's middle third is zero.
    let qkv = file
        .tensor("encoder/layer_0/self_attention/linear_0/bias")
        .unwrap();
    assert!(qkv.data()[m.d..2 * m.d].iter().all(|&b| b == 0.0));
    assert!(qkv.data()[..m.d].iter().any(|&b| b != 0.0));
    // The encoder's positions are Whisper's sinusoids: [sin(t·s_i) | cos(t·s_i)],
    // s_i = 10000^(−i / (d/2 − 1)).
    let pos = file.tensor("encoder/position_encodings/encodings").unwrap();
    let half = m.d / 2;
    let step = 10_000f64.ln() / (half - 1) as f64;
    let mut worst = 0.0f64;
    for t in 0..1500 {
        for i in 0..half {
            let a = t as f64 * (-step * i as f64).exp();
            let row = &pos.data()[t * m.d..(t + 1) * m.d];
            worst = worst.max((f64::from(row[i]) - a.sin()).abs());
            worst = worst.max((f64::from(row[half + i]) - a.cos()).abs());
        }
    }
    assert!(worst < 2e-3, "{}: sinusoids off by {worst}", m.name);
    // config.json.
    let cfg = f.whisper_config().unwrap();
    assert_eq!(cfg.alignment_heads.len(), 8);
    assert!(cfg.suppress_ids.len() > 80);
    assert_eq!(cfg.suppress_ids_begin, vec![220, m.eot]);
    assert!(cfg.other.is_empty(), "{:?}", cfg.other);
    // tokenizer.json: CTranslate2's greedy ids decode to CTranslate2's text.
    assert_eq!(f.tokenizer.token_to_id("<|endoftext|>"), Some(m.eot));
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(data("ct2_reference.json")).unwrap())
            .unwrap();
    let clips = &reference.models[m.name].clips;
    assert_eq!(clips.len(), 13);
    for (key, clip) in clips {
        let words: Vec<u32> = clip
            .notimestamps
            .ids
            .iter()
            .copied()
            .filter(|&t| t < m.eot)
            .collect();
        assert_eq!(
            f.tokenizer.decode(&words, true).unwrap(),
            clip.text,
            "{key}"
        );
    }
}

#[test]
fn whisper_tiny_en_folder() {
    check_real(&TINY_EN);
    let cfg = folder(&TINY_EN).whisper_config().unwrap();
    assert_eq!(cfg.suppress_ids.len(), 90);
    assert_eq!(cfg.alignment_heads[0], (1, 0));
}

#[test]
fn whisper_base_folder() {
    check_real(&BASE);
    let f = folder(&BASE);
    let cfg = f.whisper_config().unwrap();
    assert_eq!(cfg.suppress_ids.len(), 88);
    assert_eq!(cfg.lang_ids.len(), 99);
    assert_eq!(
        f.tokenizer.id_to_token(cfg.lang_ids[0]).as_deref(),
        Some("<|en|>")
    );
}

#[test]
fn folder_missing_a_file_is_an_error() {
    let dir = temp_dir("folder");
    let e = Ct2Folder::open(&dir).unwrap_err().to_string();
    assert!(
        e.contains("model.bin") && e.contains(&dir.display().to_string()),
        "{e}"
    );
    std::fs::write(dir.join("model.bin"), tiny_file()).unwrap();
    let e = Ct2Folder::open(&dir).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    let e = Ct2Folder::open(&dir).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
    let e = Ct2Folder::open(dir.join("nothing"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a folder"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ crafted files

/// Writes CTranslate2's binary layout (binary version 6).
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn string(&mut self, s: &str) -> &mut Self {
        self.u16(s.len() as u16 + 1);
        self.0.extend_from_slice(s.as_bytes());
        self.u8(0)
    }
    fn variable(&mut self, name: &str, shape: &[u32], dtype: u8, bytes: &[u8]) -> &mut Self {
        self.string(name).u8(shape.len() as u8);
        for &d in shape {
            self.u32(d);
        }
        self.u8(dtype).u32(bytes.len() as u32);
        self.0.extend_from_slice(bytes);
        self
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small valid file: f32 (2, 3), f16 (4), an i8 flag, an i16 count, an int8 weight
/// (2, 2) with its scale, and one alias.
fn tiny_file() -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u32(6).string("TestSpec").u32(1).u32(6);
    w.variable(
        "a/weight",
        &[2, 3],
        0,
        &f32_bytes(&[1.0, -2.0, 3.5, 0.25, 0.0, -1.0]),
    );
    let h: Vec<u8> = [1.5f32, -0.5, 2.0, 65504.0]
        .iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    w.variable("a/bias", &[4], 4, &h);
    w.variable("flag", &[], 1, &[3]);
    w.variable("count", &[], 2, &(-7i16).to_le_bytes());
    w.variable("q/weight", &[2, 2], 1, &[10u8, 246, 127, 0]); // 10, -10, 127, 0
    w.variable("q/weight_scale", &[2], 0, &f32_bytes(&[20.0, 127.0]));
    w.u32(1).string("tied/weight").string("a/weight");
    w.0
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn crafted_file_reads_back() {
    let dir = temp_dir("crafted");
    let path = write(&dir, "ok.bin", &tiny_file());
    let f = Ct2File::open(&path).unwrap();
    assert_eq!((f.spec(), f.revision(), f.len()), ("TestSpec", 1, 6));
    let names: Vec<&str> = f.names().collect();
    assert_eq!(
        names,
        [
            "a/weight",
            "a/bias",
            "flag",
            "count",
            "q/weight",
            "q/weight_scale"
        ]
    );
    let w = f.tensor("a/weight").unwrap();
    assert_eq!(w.shape(), &[2, 3]);
    assert_eq!(w.data(), &[1.0, -2.0, 3.5, 0.25, 0.0, -1.0]);
    assert_eq!(f.tensor("tied/weight").unwrap().data(), w.data());
    assert_eq!(f.get("a/bias").unwrap().dtype, Ct2Dtype::F16);
    assert_eq!(
        f.tensor("a/bias").unwrap().data(),
        &[1.5, -0.5, 2.0, 65504.0]
    );
    assert_eq!(f.scalar_int("flag").unwrap(), 3);
    assert_eq!(f.scalar_int("count").unwrap(), -7);
    let q = f.dequantized("q/weight").unwrap();
    assert_eq!(q.data(), &[0.5, -0.5, 1.0, 0.0]);
    assert_eq!(f.dequantized("a/weight").unwrap().data(), w.data());
    // Reading a thing as what it is not: errors naming the variable.
    let e = f.tensor("flag").unwrap_err().to_string();
    assert!(e.contains("'flag'") && e.contains("i8"), "{e}");
    let e = f.scalar_int("a/weight").unwrap_err().to_string();
    assert!(e.contains("'a/weight'"), "{e}");
    let e = f.get("a/gamma").unwrap_err().to_string();
    assert!(
        e.contains("no variable 'a/gamma'") && e.contains("a/weight"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The error of opening `bytes`, which must name the file.
fn open_err(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = write(dir, name, bytes);
    let e = Ct2File::open(&path)
        .err()
        .unwrap_or_else(|| panic!("{name}: opened"))
        .to_string();
    assert!(
        e.contains(name),
        "{name}: the error does not name the file: {e}"
    );
    e
}

#[test]
fn every_truncation_is_an_error() {
    let dir = temp_dir("truncated");
    let good = tiny_file();
    for len in 0..good.len() {
        let e = open_err(&dir, "cut.bin", &good[..len]);
        assert!(
            e.contains("truncated") || e.contains("string"),
            "cut at {len}: {e}"
        );
    }
    let mut longer = good.clone();
    longer.extend_from_slice(b"junk");
    let e = open_err(&dir, "long.bin", &longer);
    assert!(e.contains("4 bytes follow the alias table"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_fields_are_errors() {
    let dir = temp_dir("hostile");
    let header = |version: u32, count: u32| {
        let mut w = Writer(Vec::new());
        w.u32(version).string("S").u32(1).u32(count);
        w
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "version.bin",
            header(3, 0).u32(0).0.clone(),
            "binary version",
        ),
        (
            "future.bin",
            header(7, 0).u32(0).0.clone(),
            "binary version",
        ),
        // 2^32 - 1 variables over a few bytes: refused at the first missing byte.
        ("count.bin", header(6, u32::MAX).0.clone(), "truncated"),
        (
            "rank.bin",
            header(6, 1).string("x").u8(200).0.clone(),
            "200 dimensions",
        ),
        (
            "overflow.bin",
            header(6, 1)
                .string("x")
                .u8(8)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u32(u32::MAX)
                .u8(0)
                .u32(0)
                .0
                .clone(),
            "overflows",
        ),
        (
            "nbytes.bin",
            header(6, 1)
                .string("x")
                .u8(1)
                .u32(4)
                .u8(0)
                .u32(12)
                .0
                .clone(),
            "needs 16",
        ),
        (
            "huge.bin",
            header(6, 1)
                .string("x")
                .u8(2)
                .u32(65_536)
                .u32(16_383)
                .u8(0)
                .u32(65_536 * 16_383 * 4)
                .0
                .clone(),
            "truncated",
        ),
        (
            "dtype.bin",
            header(6, 1).string("x").u8(0).u8(9).u32(4).0.clone(),
            "unknown code 9",
        ),
        (
            "twice.bin",
            header(6, 2)
                .variable("x", &[], 1, &[1])
                .variable("x", &[], 1, &[2])
                .u32(0)
                .0
                .clone(),
            "appears twice",
        ),
        (
            "alias.bin",
            header(6, 1)
                .variable("x", &[], 1, &[1])
                .u32(1)
                .string("y")
                .string("missing")
                .0
                .clone(),
            "'missing' is not a variable",
        ),
        (
            "shadow.bin",
            header(6, 1)
                .variable("x", &[], 1, &[1])
                .u32(1)
                .string("x")
                .string("x")
                .0
                .clone(),
            "already a variable",
        ),
    ];
    for (name, bytes, want) in cases {
        let e = open_err(&dir, name, &bytes);
        assert!(e.contains(want), "{name}: {e}");
    }
    // Broken strings: no NUL, length 0, not UTF-8.
    let mut w = Writer(Vec::new());
    w.u32(6).u16(3).u8(b'a').u8(b'b').u8(b'c');
    let e = open_err(&dir, "nul.bin", &w.0);
    assert!(e.contains("spec name") && e.contains("NUL"), "{e}");
    let mut w = Writer(Vec::new());
    w.u32(6).u16(0);
    let e = open_err(&dir, "zero.bin", &w.0);
    assert!(e.contains("length 0"), "{e}");
    let mut w = Writer(Vec::new());
    w.u32(6).u16(3).u8(0xff).u8(0xfe).u8(0);
    let e = open_err(&dir, "utf8.bin", &w.0);
    assert!(e.contains("UTF-8"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Random corruptions of the small file: each one opens to an `Ok` or an `Err` and its
/// variables read without a panic.
#[test]
fn corruptions_never_panic() {
    let dir = temp_dir("fuzz");
    let good = tiny_file();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut refused = 0;
    for i in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = if next() % 2 == 0 { next() as u8 } else { 0xff };
        }
        let path = write(&dir, &format!("f{}.bin", i % 4), &bytes);
        match Ct2File::open(&path) {
            Ok(f) => {
                let names: Vec<String> = f.names().map(String::from).collect();
                for n in names.iter().chain(f.aliases().keys()) {
                    let _ = f.tensor(n);
                    let _ = f.scalar_int(n);
                    let _ = f.dequantized(n);
                }
            }
            Err(e) => {
                assert!(e.to_string().contains(".bin"), "{e}");
                refused += 1;
            }
        }
    }
    assert!(refused > 1000, "only {refused} of 3000 corruptions refused");
    let _ = std::fs::remove_dir_all(&dir);
}
