//! The GGUF reader on synthetic files (every value type, nested arrays, versions 2 and 3,
//! alignment, tensors) and on bad input (truncation at every byte, wrong magic, unknown
//! versions and dtypes, data past the end, absurd counts, misaligned offsets); then the
//! real SmolLM2 and Gemma 3 files: tables, dequantisation, and tokenisation exactly as
//! llama.cpp did (tests/data/decoder_reference_*.json).

use std::path::PathBuf;

use lucent::io::gguf::{GgufArray, GgufFile, GgufValue, GgufWriter};
use lucent::io::gguf_tokenizer::{GgufTokenizer, TokenType, TokenizerKind};
use lucent::io::tokenizer::TokenStream;
use lucent::tensor::quant::GgmlType;

/// Where the real model files are. For now: env vars LUCENT_TEST_SMOLLM2 /
/// LUCENT_TEST_GEMMA3 (paths to the .gguf files); fails with a clear message when unset.
/// The real model file, fetched (and cached) through lucent's own fetch code.
fn model_path(name: &str) -> PathBuf {
    lucent::io::fetch::ensure(name, &mut lucent::io::fetch::Silent)
        .unwrap_or_else(|e| panic!("could not fetch {name}: {e}"))
}

fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

fn q8_0_bytes(rows: usize, cols: usize, seed: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..rows {
        for b in 0..cols / 32 {
            out.extend(half::f16::from_f32(0.5).to_bits().to_le_bytes());
            for j in 0..32 {
                out.push(((r * 7 + b * 3 + j) as u8).wrapping_mul(seed) % 31);
            }
        }
    }
    out
}

fn every_value() -> Vec<(&'static str, GgufValue)> {
    vec![
        ("t.u8", GgufValue::U8(200)),
        ("t.i8", GgufValue::I8(-5)),
        ("t.u16", GgufValue::U16(60000)),
        ("t.i16", GgufValue::I16(-30000)),
        ("t.u32", GgufValue::U32(4_000_000_000)),
        ("t.i32", GgufValue::I32(-7)),
        ("t.u64", GgufValue::U64(1 << 40)),
        ("t.i64", GgufValue::I64(-(1 << 40))),
        ("t.f32", GgufValue::F32(1.5)),
        ("t.f64", GgufValue::F64(-2.25)),
        ("t.bool", GgufValue::Bool(true)),
        ("t.str", GgufValue::String("héllo ▁ world".into())),
        ("t.arr_u8", GgufValue::Array(GgufArray::U8(vec![1, 2, 3]))),
        ("t.arr_i8", GgufValue::Array(GgufArray::I8(vec![-1, 2]))),
        ("t.arr_u16", GgufValue::Array(GgufArray::U16(vec![7]))),
        ("t.arr_i16", GgufValue::Array(GgufArray::I16(vec![-7, 8]))),
        ("t.arr_u32", GgufValue::Array(GgufArray::U32(vec![1, 2]))),
        (
            "t.arr_i32",
            GgufValue::Array(GgufArray::I32(vec![3, -4, 5])),
        ),
        ("t.arr_u64", GgufValue::Array(GgufArray::U64(vec![9]))),
        ("t.arr_i64", GgufValue::Array(GgufArray::I64(vec![-9]))),
        (
            "t.arr_f32",
            GgufValue::Array(GgufArray::F32(vec![0.25, -1.0])),
        ),
        ("t.arr_f64", GgufValue::Array(GgufArray::F64(vec![3.5]))),
        (
            "t.arr_bool",
            GgufValue::Array(GgufArray::Bool(vec![true, false])),
        ),
        (
            "t.arr_str",
            GgufValue::Array(GgufArray::String(vec!["a".into(), "".into(), "Ġt".into()])),
        ),
        ("t.arr_empty", GgufValue::Array(GgufArray::F32(vec![]))),
        (
            "t.nested",
            GgufValue::Array(GgufArray::Array(vec![
                GgufArray::I32(vec![1, 2]),
                GgufArray::String(vec!["x".into()]),
                GgufArray::Array(vec![GgufArray::U8(vec![5])]),
            ])),
        ),
    ]
}

fn synthetic(version: u32, align: Option<u32>) -> Vec<u8> {
    let mut w = GgufWriter::new().version(version);
    if let Some(a) = align {
        w = w.alignment(a);
    }
    w.add("general.architecture", GgufValue::String("llama".into()));
    for (k, v) in every_value() {
        w.add(k, v);
    }
    w.add_f32("norm.weight", &[5], &[1.0, 2.0, 3.0, 4.0, 5.0])
        .unwrap();
    w.add_tensor(
        "proj.weight",
        &[3, 64],
        GgmlType::Q8_0,
        q8_0_bytes(3, 64, 13),
    )
    .unwrap();
    let k = vec![0u8; GgmlType::Q4_K.row_bytes(256).unwrap() * 2];
    w.add_tensor("stack.weight", &[2, 1, 256], GgmlType::Q4_K, k)
        .unwrap();
    w.to_bytes()
}

#[test]
fn reads_every_value_type_and_tensor_v2_v3() {
    for (version, align) in [(3, None), (2, None), (3, Some(64u32)), (2, Some(1))] {
        let bytes = synthetic(version, align);
        let f = GgufFile::from_bytes(&bytes, "synthetic.gguf").unwrap();
        assert_eq!(f.version(), version);
        assert_eq!(f.alignment(), align.unwrap_or(32) as usize);
        assert_eq!(f.architecture().unwrap(), "llama");
        for (k, v) in every_value() {
            assert_eq!(f.get(k), Some(&v), "{k} (v{version})");
        }
        // Typed getters widen integers of any width that fit, and name the key when not.
        assert_eq!(f.get_u32("t.u8").unwrap(), 200);
        assert_eq!(f.get_u32("t.u16").unwrap(), 60000);
        assert_eq!(f.get_u64("t.u64").unwrap(), 1 << 40);
        assert_eq!(f.get_i64("t.i8").unwrap(), -5);
        assert_eq!(f.get_f32("t.f64").unwrap(), -2.25);
        assert!(f.get_bool("t.bool").unwrap());
        assert_eq!(f.get_str("t.str").unwrap(), "héllo ▁ world");
        assert_eq!(f.get_str_array("t.arr_str").unwrap(), &["a", "", "Ġt"]);
        assert_eq!(f.get_f32_array("t.arr_f32").unwrap(), &[0.25, -1.0]);
        assert_eq!(f.get_int_array("t.arr_i32").unwrap(), vec![3, -4, 5]);
        assert_eq!(f.opt_u32("no.such.key").unwrap(), None);
        let e = f.get_u32("t.i32").unwrap_err().to_string();
        assert!(e.contains("t.i32") && e.contains("synthetic.gguf"), "{e}");
        let e = f.get_u32("llama.block_count").unwrap_err().to_string();
        assert!(
            e.contains("llama.block_count") && e.contains("missing"),
            "{e}"
        );
        let e = f.get_str("t.u8").unwrap_err().to_string();
        assert!(e.contains("t.u8") && e.contains("string"), "{e}");

        // Tensors: GGUF ne (innermost first) → lucent shape (outermost first).
        let names: Vec<&str> = f.tensor_infos().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["norm.weight", "proj.weight", "stack.weight"]);
        let p = f.tensor_info("proj.weight").unwrap();
        assert_eq!(
            (p.dims.clone(), p.shape.clone(), p.dtype),
            (vec![64, 3], vec![3, 64], GgmlType::Q8_0)
        );
        assert_eq!(p.start % f.alignment(), 0);
        let s = f.tensor_info("stack.weight").unwrap();
        assert_eq!(
            (s.shape.clone(), s.rows(), s.cols()),
            (vec![2, 1, 256], 2, 256)
        );
        let t = f.tensor("proj.weight").unwrap();
        assert_eq!(t.data, &q8_0_bytes(3, 64, 13)[..]);
        let w = t.dequantize().unwrap();
        assert_eq!(w[0], 0.0);
        assert_eq!(w[1], 0.5 * 13.0); // byte (0·7 + 0·3 + 1)·13 mod 31
        let norm = f.tensor_f32("norm.weight").unwrap();
        assert_eq!(
            (norm.shape(), norm.data()),
            (&[5usize][..], &[1.0f32, 2.0, 3.0, 4.0, 5.0][..])
        );
        let aligned = f
            .tensor_info("norm.weight")
            .unwrap()
            .start
            .is_multiple_of(4);
        assert_eq!(
            norm.is_mapped(),
            aligned,
            "aligned f32 tensors are used in place, others copied"
        );
        let m = f.qmatrix("proj.weight").unwrap();
        assert_eq!((m.rows(), m.cols(), m.dtype()), (3, 64, GgmlType::Q8_0));
        assert_eq!(m.dequantize_all().unwrap(), w);
        assert!(f.qmatrix_shaped("proj.weight", 3, 64).is_ok());
        let e = f
            .qmatrix_shaped("proj.weight", 64, 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("proj.weight") && e.contains("[3, 64]") && e.contains("[64, 3]"),
            "{e}"
        );
        assert!(f.tensor_f32_shaped("norm.weight", &[4]).is_err());
        let e = f.tensor("proj.wieght").unwrap_err().to_string();
        assert!(
            e.contains("proj.wieght") && e.contains("proj.weight"),
            "{e}"
        );
    }
}

#[test]
fn writes_files_to_disk_and_reopens() {
    let dir = std::env::temp_dir().join(format!("lucent-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    std::fs::write(&path, synthetic(3, None)).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensor_infos().len(), 3);
    std::fs::write(&path, b"GGUF").unwrap();
    let e = GgufFile::open(&path).unwrap_err().to_string();
    assert!(e.contains("too short"), "{e}");
    let e = GgufFile::open(dir.join("missing.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.gguf"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The position of the type field of tensor `name` in `bytes` (for corrupting it).
fn tensor_field(bytes: &[u8], name: &str, n_dims: usize) -> usize {
    let at = bytes
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .unwrap();
    at + name.len() + 4 + 8 * n_dims
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = synthetic(3, None);
    for cut in 0..bytes.len() {
        let r = GgufFile::from_bytes(&bytes[..cut], "cut.gguf");
        let e = r.expect_err(&format!(
            "a file cut at {cut} of {} bytes must not open",
            bytes.len()
        ));
        let msg = e.to_string();
        assert!(
            msg.contains("truncated")
                || msg.contains("too short")
                || msg.contains("past the end")
                || msg.contains("could fit"),
            "cut at {cut}: {msg}"
        );
    }
}

#[test]
fn bad_headers_give_clear_errors() {
    let good = synthetic(3, None);
    let err = |b: &[u8]| GgufFile::from_bytes(b, "bad.gguf").unwrap_err().to_string();

    let mut b = good.clone();
    b[0..4].copy_from_slice(b"GGML");
    assert!(err(&b).contains("not a GGUF file"), "{}", err(&b));

    for (v, want) in [
        (1u32, "version 1"),
        (4, "unknown GGUF version 4"),
        (3u32.swap_bytes(), "big-endian"),
    ] {
        let mut b = good.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert!(err(&b).contains(want), "{}", err(&b));
    }

    // Unknown and unsupported dtypes name the tensor.
    for (id, want) in [(99u32, "unknown type id 99"), (16, "IQ2_XXS")] {
        let mut b = good.clone();
        let at = tensor_field(&b, "proj.weight", 2);
        b[at..at + 4].copy_from_slice(&id.to_le_bytes());
        let e = err(&b);
        assert!(e.contains(want) && e.contains("proj.weight"), "{e}");
    }

    // A misaligned offset.
    let mut b = good.clone();
    let at = tensor_field(&b, "proj.weight", 2) + 4;
    let off = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    b[at..at + 8].copy_from_slice(&(off + 4).to_le_bytes());
    assert!(
        err(&b).contains("not a multiple of the alignment"),
        "{}",
        err(&b)
    );

    // Data past the end of the file (an offset far out, and a dimension made huge).
    let mut b = good.clone();
    b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(err(&b).contains("past the end"), "{}", err(&b));
    let mut b = good.clone();
    let dim_at = tensor_field(&b, "proj.weight", 2) - 8; // ne[1] (rows)
    b[dim_at..dim_at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    assert!(
        err(&b).contains("past the end") || err(&b).contains("too many"),
        "{}",
        err(&b)
    );

    // Too many dimensions.
    let mut b = good.clone();
    let nd_at = tensor_field(&b, "proj.weight", 2) - 8 * 2 - 4;
    b[nd_at..nd_at + 4].copy_from_slice(&9u32.to_le_bytes());
    assert!(err(&b).contains("9 dimensions"), "{}", err(&b));

    // Absurd counts: tensors, metadata pairs, an array longer than the file, a string too.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&b).contains("tensor count"), "{}", err(&b));
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(err(&b).contains("metadata count"), "{}", err(&b));
    let mut b = good.clone();
    let key = b"t.arr_f32";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 4; // past type, elem type
    b[at..at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = err(&b);
    assert!(e.contains("t.arr_f32") && e.contains("could fit"), "{e}");
    let mut b = good.clone();
    let key = b"t.str";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    b[at..at + 8].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    assert!(err(&b).contains("runs past the end"), "{}", err(&b));

    // An unknown value type, and an alignment that is not a power of two.
    let mut b = good.clone();
    let key = b"t.u8";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    b[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
    assert!(err(&b).contains("unknown value type 77"), "{}", err(&b));
    let b = {
        let mut w = GgufWriter::new();
        w.add("general.alignment", GgufValue::U32(24));
        w.to_bytes()
    };
    assert!(err(&b).contains("power of two"), "{}", err(&b));

    // A tensor whose rows are not whole blocks.
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("x", &[1, 48], GgmlType::Q8_0, vec![0; 51])
        .is_err());
}

// ------------------------------------------------------------------ synthetic tokenizers

fn tiny_bpe() -> GgufFile {
    // Byte-level alphabet (the 256 GGUF byte characters) plus a few merges and specials.
    let table: Vec<char> = {
        let mut t = Vec::new();
        let mut extra = 0u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            t.push(if printable {
                b as char
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap()
            });
        }
        t
    };
    let mut tokens: Vec<String> = vec![
        "<|endoftext|>".into(),
        "<|im_start|>".into(),
        "<|im_end|>".into(),
    ];
    let mut types = vec![3i32, 3, 3];
    for &c in &table {
        tokens.push(c.to_string());
        types.push(1);
    }
    for t in ["Ġt", "he", "Ġthe", "Ġthe"] {
        if !tokens.contains(&t.to_string()) {
            tokens.push(t.into());
            types.push(1);
        }
    }
    let merges = vec!["Ġ t".to_string(), "h e".into(), "Ġt he".into()];
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
        GgufValue::Array(GgufArray::String(merges)),
    );
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
    w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
    GgufFile::from_bytes(&w.to_bytes(), "tiny-bpe.gguf").unwrap()
}

#[test]
fn byte_level_bpe_from_metadata() {
    let f = tiny_bpe();
    let t = GgufTokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.kind(), TokenizerKind::ByteLevelBpe);
    let id = |s: &str| t.token_id(s).unwrap();
    // " the" merges to one token; digits are split one by one (smollm's \p{N} pass).
    let ids = t.encode("<|im_start|> the 42", true).unwrap();
    assert_eq!(ids, vec![1, id("Ġthe"), id("Ġ"), id("4"), id("2")]);
    assert_eq!(t.decode(&ids, false).unwrap(), "<|im_start|> the 42");
    assert_eq!(t.decode(&ids, true).unwrap(), " the 42");
    // Special-token text can be tokenised as plain text on request.
    let plain = t.encode_with("<|im_end|>", false, false).unwrap();
    assert!(plain.len() > 1 && !plain.contains(&2));
    assert!(t.is_eog(2) && t.eog_ids().contains(&0)); // <|endoftext|> ends generation too
                                                      // Multi-byte characters survive the byte-level round trip.
    let s = "héllo ▁ 日本";
    assert_eq!(t.decode(&t.encode(s, false).unwrap(), false).unwrap(), s);
}

fn tiny_spm(add_space_prefix: bool) -> GgufFile {
    // ▁ is U+2581. Scores decide merge order: "ab" (-1) beats "bc" (-2).
    let mut tokens: Vec<String> = vec![
        "<pad>".into(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
    ];
    let mut types = vec![3i32, 3, 3, 2];
    let mut scores = vec![0.0f32; 4];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [
        ("a", -10.0),
        ("b", -10.0),
        ("c", -10.0),
        ("▁", -10.0),
        ("ab", -1.0),
        ("bc", -2.0),
        ("abc", -3.0),
        ("▁a", -0.5),
        ("\n", 0.0),
        ("<start_of_turn>", 0.0),
    ] {
        tokens.push(t.into());
        types.push(if t == "\n" {
            4
        } else if t.starts_with('<') {
            3
        } else {
            1
        });
        scores.push(s);
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
    w.add("tokenizer.ggml.bos_token_id", GgufValue::U32(2));
    w.add("tokenizer.ggml.eos_token_id", GgufValue::U32(1));
    w.add("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
    w.add(
        "tokenizer.ggml.add_space_prefix",
        GgufValue::Bool(add_space_prefix),
    );
    GgufFile::from_bytes(&w.to_bytes(), "tiny-spm.gguf").unwrap()
}

#[test]
fn sentencepiece_merges_by_score_with_byte_fallback() {
    let f = tiny_spm(false);
    let t = GgufTokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.kind(), TokenizerKind::SentencePiece);
    let id = |s: &str| t.token_id(s).unwrap();
    // "abc": ab (score -1) merges first, then ab+c = abc (-3).
    assert_eq!(t.encode("abc", true).unwrap(), vec![2, id("abc")]);
    // "bca": bc merges; "a" stays; no "bca" token.
    assert_eq!(t.encode("bca", false).unwrap(), vec![id("bc"), id("a")]);
    // Space → ▁, and "▁a" (-0.5) outranks "ab" (-1): " ab" → ▁a, b.
    assert_eq!(t.encode(" ab", false).unwrap(), vec![id("▁a"), id("b")]);
    // Byte fallback: "é" is not a token → <0xC3> <0xA9>; decoding restores it.
    let ids = t.encode("aé", false).unwrap();
    assert_eq!(ids, vec![id("a"), id("<0xC3>"), id("<0xA9>")]);
    assert_eq!(t.decode(&ids, false).unwrap(), "aé");
    // User-defined "\n" and control <start_of_turn> are split out as single tokens.
    let ids = t.encode("<start_of_turn>a\nb", false).unwrap();
    assert_eq!(ids, vec![id("<start_of_turn>"), id("a"), id("\n"), id("b")]);
    assert_eq!(t.decode(&ids, true).unwrap(), "a\nb");
    assert_eq!(t.decode(&[2, id("▁a"), id("b")], true).unwrap(), " ab");
    // add_space_prefix puts a space (▁) before the first text.
    let t2 = GgufTokenizer::from_gguf(&tiny_spm(true)).unwrap();
    assert_eq!(t2.encode("ab", false).unwrap(), vec![id("▁a"), id("b")]);
    assert!(t.decode(&[99_999], false).is_err());
}

#[test]
fn stream_decoding_never_splits_a_character() {
    let f = tiny_spm(false);
    let t = GgufTokenizer::from_gguf(&f).unwrap();
    let id = |s: &str| t.token_id(s).unwrap();
    let mut s = TokenStream::new(true);
    assert_eq!(s.push(&t, id("a")).unwrap(), "a");
    assert_eq!(s.push(&t, id("<0xE6>")).unwrap(), ""); // 日 = E6 97 A5
    assert_eq!(s.push(&t, id("<0x97>")).unwrap(), "");
    assert_eq!(s.push(&t, id("<0xA5>")).unwrap(), "日");
    assert_eq!(s.push(&t, id("<0xFF>")).unwrap(), "\u{FFFD}"); // never valid: replaced at once
    assert_eq!(s.push(&t, id("<0xC3>")).unwrap(), "");
    assert_eq!(s.finish(), "\u{FFFD}"); // an unfinished character at the end
}

#[test]
fn tokenizer_metadata_errors_name_the_key() {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", GgufValue::String("bert".into()));
    let f = GgufFile::from_bytes(&w.to_bytes(), "t.gguf").unwrap();
    let e = GgufTokenizer::from_gguf(&f).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.ggml.model") && e.contains("bert"),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", GgufValue::String("llama".into()));
    w.add(
        "tokenizer.ggml.tokens",
        GgufValue::Array(GgufArray::String(vec!["a".into()])),
    );
    let f = GgufFile::from_bytes(&w.to_bytes(), "t.gguf").unwrap();
    let e = GgufTokenizer::from_gguf(&f).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.scores"), "{e}");
}

// ------------------------------------------------------------------ real files

#[derive(serde::Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    greedy_text: String,
}

fn reference(name: &str) -> Reference {
    let text =
        std::fs::read_to_string(data_path(&format!("decoder_reference_{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Open a real file, check its table, dequantise one tensor of each dtype, and hold one
/// matrix-vector product to dequantise-then-dot.
fn check_real_file(name: &str, arch: &str, dtypes: &[GgmlType]) -> GgufFile {
    let f = GgufFile::open(model_path(name)).unwrap();
    assert_eq!(f.architecture().unwrap(), arch);
    let mut seen: Vec<GgmlType> = f.tensor_infos().iter().map(|t| t.dtype).collect();
    seen.sort_by_key(|t| t.id());
    seen.dedup();
    let mut want = dtypes.to_vec();
    want.sort_by_key(|t| t.id());
    assert_eq!(seen, want, "{name}: dtypes present");
    eprintln!(
        "{name}: GGUF v{}, {} keys, {} tensors",
        f.version(),
        f.metadata().len(),
        f.tensor_infos().len()
    );
    for &dt in dtypes {
        // The smallest tensor of the type (Gemma's Q8_0 embedding alone is 670 MB as f32).
        let info = f
            .tensor_infos()
            .iter()
            .filter(|t| t.dtype == dt)
            .min_by_key(|t| t.numel())
            .unwrap();
        let t = f.tensor(&info.name).unwrap();
        let v = t.dequantize().unwrap();
        assert_eq!(v.len(), info.numel());
        assert!(
            v.iter().all(|x| x.is_finite()),
            "{name}: {} has non-finite values",
            info.name
        );
        eprintln!(
            "  {:<28} {:<5} shape {:?}",
            info.name,
            dt.name(),
            info.shape
        );
        if info.shape.len() == 2 && info.rows() <= 4096 {
            let m = f.qmatrix(&info.name).unwrap();
            let x: Vec<f32> = (0..m.cols())
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let y = m.matvec(&x).unwrap();
            let xq = m.prepare(&x).unwrap().dequantize();
            for r in (0..m.rows()).step_by(97) {
                let w = &v[r * m.cols()..(r + 1) * m.cols()];
                let exact: f64 = w.iter().zip(&xq).map(|(&a, &b)| a as f64 * b as f64).sum();
                let scale: f64 = w
                    .iter()
                    .zip(&xq)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum();
                // f32 rounding of the block sums (see ops/quant/tests): 1e-5 of Σ|w·xq|.
                assert!(
                    (y[r] as f64 - exact).abs() <= 1e-5 * scale + 1e-6,
                    "{name} {} row {r}",
                    info.name
                );
            }
        }
    }
    f
}

fn check_tokenizer(f: &GgufFile, name: &str, kind: TokenizerKind) {
    let t = GgufTokenizer::from_gguf(f).unwrap();
    assert_eq!(t.kind(), kind);
    let reference = reference(name);
    // The JSON holds the prompts exactly as run; they are the lines of
    // decoder_prompts.txt, where a newline inside a prompt is written `\n`.
    let lines = std::fs::read_to_string(data_path("decoder_prompts.txt")).unwrap();
    let prompts: Vec<String> = lines
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect();
    let cased: Vec<&str> = reference.cases.iter().map(|c| c.prompt.as_str()).collect();
    assert_eq!(
        cased, prompts,
        "{name}: JSON prompts vs decoder_prompts.txt"
    );
    for case in &reference.cases {
        let ids = t.encode(&case.prompt, true).unwrap();
        assert_eq!(ids, case.prompt_ids, "{name}: prompt {:?}", case.prompt);
        // Round trip: decoding the prompt ids gives the prompt back (BOS hidden).
        assert_eq!(
            t.decode(&ids, false).unwrap().trim_start_matches("<bos>"),
            case.prompt,
            "{name}"
        );
        // The greedy continuation decodes to llama.cpp's text, also token by token.
        assert_eq!(
            t.decode(&case.greedy_ids, true).unwrap(),
            case.greedy_text,
            "{name}: greedy text"
        );
        let mut s = TokenStream::new(true);
        let mut streamed = String::new();
        for &id in &case.greedy_ids {
            streamed.push_str(&s.push(&t, id).unwrap());
        }
        streamed.push_str(&s.finish());
        assert_eq!(streamed, case.greedy_text, "{name}: streamed text");
    }
}

#[test]
fn smollm2_file_and_tokenizer() {
    let f = check_real_file(
        "smollm2",
        "llama",
        &[GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0],
    );
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(
        f.tensor_info("token_embd.weight").unwrap().shape,
        vec![49152, 576]
    );
    check_tokenizer(&f, "smollm2", TokenizerKind::ByteLevelBpe);
    let t = GgufTokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.encode("<|im_start|>", false).unwrap(), vec![1]);
    assert_eq!(t.token_type(1), Some(TokenType::Control));
    assert!(t.is_eog(2)); // <|im_end|>
}

#[test]
fn gemma3_file_and_tokenizer() {
    let f = check_real_file(
        "gemma3",
        "gemma3",
        &[
            GgmlType::F32,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ],
    );
    assert_eq!(f.get_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(f.get_u32("gemma3.attention.sliding_window").unwrap(), 512);
    check_tokenizer(&f, "gemma3", TokenizerKind::SentencePiece);
    let t = GgufTokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.vocab_size(), 262_144);
    assert!(t.is_eog(t.token_id("<end_of_turn>").unwrap()));
}
