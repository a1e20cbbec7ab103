//! all-MiniLM-L6-v2 run for real (fetched into the lucent cache on first use), held to
//! sentence-transformers' embeddings (tests/data/minilm_reference.safetensors, made with
//! sentence-transformers 6.2: Transformer → mean Pooling → Normalize, max_seq_length 256).
//!
//! Tolerances: every row cosine ≥ 0.99999 and max |Δ| ≤ 1e-4 against the reference
//! (the figures); lucent against itself (batching, padding) ≤ 1e-5.

use std::path::PathBuf;
use std::sync::OnceLock;

use lucent::io::fetch;
use lucent::io::SafetensorsFile;
use lucent::model::family::bert;
use lucent::pipeline::embed::{cosine, Embedder};

fn data(path: &str) -> String {
    format!("{}/../../tests/data/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn model_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| fetch::ensure("minilm", &mut fetch::Silent).expect("fetch minilm"))
        .clone()
}

fn embedder() -> &'static Embedder {
    static E: OnceLock<Embedder> = OnceLock::new();
    E.get_or_init(|| Embedder::load(&model_dir()).expect("load minilm"))
}

/// The reference sentences (a `\n` in the file is a newline inside one input).
fn sentences() -> Vec<String> {
    std::fs::read_to_string(data("minilm_sentences.txt"))
        .unwrap()
        .lines()
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn json_list<T: serde::de::DeserializeOwned>(f: &SafetensorsFile, key: &str) -> T {
    serde_json::from_str(&f.metadata()[key]).unwrap()
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let reference = SafetensorsFile::open(data("minilm_reference.safetensors")).unwrap();
    let want = reference.tensor("embeddings").unwrap();
    let sents = sentences();
    let stored: Vec<String> = json_list(&reference, "sentences");
    assert_eq!(
        sents, stored,
        "sentences file and reference metadata differ"
    );
    let texts: Vec<&str> = sents.iter().map(|s| s.as_str()).collect();
    let got = embedder().embed(&texts).unwrap();
    assert_eq!(got.len(), want.shape()[0]);
    let (mut worst_cos, mut worst_diff) = (1.0f32, 0.0f32);
    for (i, g) in got.iter().enumerate() {
        let w = want.row(i);
        let (c, m) = (cosine(g, w), max_abs(g, w));
        worst_cos = worst_cos.min(c);
        worst_diff = worst_diff.max(m);
        assert!(
            c >= 0.99999 && m <= 1e-4,
            "sentence {i} {:?}: cosine {c}, max |Δ| {m}",
            texts[i]
        );
    }
    eprintln!(
        "minilm vs sentence-transformers: worst cosine {worst_cos}, worst max |Δ| {worst_diff:e}"
    );
}

#[test]
fn token_ids_equal_the_reference() {
    let reference = SafetensorsFile::open(data("minilm_reference.safetensors")).unwrap();
    let counts: Vec<usize> = json_list(&reference, "token_counts");
    let first: Vec<Vec<u32>> = json_list(&reference, "token_ids_first4");
    let sents = sentences();
    let texts: Vec<&str> = sents.iter().map(|s| s.as_str()).collect();
    let enc = embedder().encode(&texts).unwrap();
    let got: Vec<usize> = enc.iter().map(|e| e.len()).collect();
    assert_eq!(got, counts);
    for (i, ids) in first.iter().enumerate() {
        assert_eq!(&enc[i].ids, ids, "sentence {i}");
    }
    // Known WordPiece ids of bert-base-uncased's vocabulary.
    let e = embedder()
        .tokenizer()
        .encode("The cat sat on the mat.", true)
        .unwrap();
    assert_eq!(
        e.ids,
        vec![101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]
    );
    assert_eq!(
        embedder().tokenizer().decode(&e.ids, true).unwrap(),
        "the cat sat on the mat."
    );
}

#[test]
fn guide_figures() {
    let e = embedder()
        .embed(&["king", "queen", "man", "woman"])
        .unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!((dot(&e[0], &e[1]) - 0.681).abs() < 5e-4);
    assert!((dot(&e[0], &e[2]) - 0.322).abs() < 5e-4);
    let terms = lucent::pipeline::embed::parse_terms(&["king - man + woman".to_string()]).unwrap();
    let a = lucent::pipeline::embed::analogy(
        embedder(),
        &terms,
        &["queen".into(), "king".into(), "prince".into()],
    )
    .unwrap();
    assert_eq!(a.ranked.len(), 2, "input words are left out");
    let queen = a.ranked.iter().find(|(w, _)| w == "queen").unwrap().1;
    assert!((queen - 0.579).abs() < 5e-4, "{queen}");
}

#[test]
fn other_inputs_hold() {
    let long = "word ".repeat(600);
    let inputs = [
        "Ünïcödé façade naïve café",
        "I love pizza 🍕🔥 and 🤖 robots",
        "我喜欢机器学习。東京は日本の首都です。",
        long.as_str(),
        "a",
        "   leading and trailing spaces   ",
        "line one\nline two",
    ];
    let tok = embedder().tokenizer();
    for text in inputs {
        let enc = tok.encode(text, true).unwrap();
        assert!(enc.len() <= 256, "{text:?}: {} tokens", enc.len());
        assert_eq!(enc.ids[0], 101);
        assert_eq!(*enc.ids.last().unwrap(), 102);
    }
    // sentence-transformers truncates to 256 tokens, [CLS] and [SEP] included.
    assert_eq!(tok.encode(&long, true).unwrap().len(), 256);
    // Spaces around a text do not change its tokens.
    assert_eq!(
        tok.encode("   hello world  ", true).unwrap().ids,
        tok.encode("hello world", true).unwrap().ids
    );
    let got = embedder().embed(&inputs).unwrap();
    for (text, v) in inputs.iter().zip(&got) {
        assert_eq!(v.len(), 384);
        assert!(v.iter().all(|x| x.is_finite()), "{text:?}");
        assert!((norm(v) - 1.0).abs() < 1e-5, "{text:?}: norm {}", norm(v));
    }
    // A long text equals its own first 254 word-pieces.
    let cut = "word ".repeat(254);
    let a = embedder().embed_one(&long).unwrap();
    let b = embedder().embed_one(&cut).unwrap();
    assert!(max_abs(&a, &b) <= 1e-5);
}

#[test]
fn batching_and_padding_do_not_change_embeddings() {
    let sents = sentences();
    let texts: Vec<&str> = sents.iter().map(|s| s.as_str()).collect();
    let together = embedder().embed_batched(&texts, texts.len()).unwrap();
    let default = embedder().embed(&texts).unwrap();
    let batch3 = embedder().embed_batched(&texts, 3).unwrap();
    for (i, t) in texts.iter().enumerate() {
        let one = embedder().embed_one(t).unwrap();
        for (what, v) in [
            ("all", &together[i]),
            ("default", &default[i]),
            ("3", &batch3[i]),
        ] {
            let m = max_abs(&one, v);
            assert!(m == 0.0, "sentence {i} batch {what}: max |Δ| {m}");
        }
    }
    // Hidden states of a short sentence padded to a long one's length equal its own.
    let enc = embedder().encode(&["hi", texts[14]]).unwrap();
    let padded = embedder().hidden_states(&[&enc[0], &enc[1]], None).unwrap();
    let alone = embedder().hidden_states(&[&enc[0]], None).unwrap();
    let n = enc[0].len() * 384;
    let m = max_abs(&padded.data()[..n], alone.data());
    assert!(m == 0.0, "padding changed hidden states by {m}");
}

#[test]
fn bad_input_is_an_error() {
    let e = embedder().embed(&[]).unwrap_err().to_string();
    assert!(e.contains("no input texts"), "{e}");
    let e = Embedder::load(std::path::Path::new("/nonexistent/model"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/model") && e.contains("does not exist"),
        "{e}"
    );

    let tmp = std::env::temp_dir().join(format!("lucent-minilm-bad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let src = model_dir();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).unwrap();
    }
    // A corrupt safetensors header.
    std::fs::write(
        tmp.join("model.safetensors"),
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json!!!!!!}",
    )
    .unwrap();
    let e = Embedder::load(&tmp).unwrap_err().to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("not a valid safetensors"),
        "{e}"
    );
    // An unknown activation.
    let cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(tmp.join("config.json"), cfg.replace("\"gelu\"", "\"mish\"")).unwrap();
    let e = bert::load_config(&tmp.join("config.json"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("config.json") && e.contains("hidden_act 'mish'"),
        "{e}"
    );
    let e = Embedder::load(&tmp).unwrap_err().to_string();
    assert!(e.contains("mish"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn mis_shaped_tensor_names_key_and_shapes() {
    let file = SafetensorsFile::open(model_dir().join("model.safetensors")).unwrap();
    let mut cfg = bert::load_config(&model_dir().join("config.json")).unwrap();
    cfg.d_ff = 1000;
    let w = lucent::model::family::Weights::new(&file, &bert::NAMES, &cfg).unwrap();
    let e = lucent::model::EncoderModel::load(cfg.clone(), &w)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("encoder.layer.0.intermediate.dense.weight")
            && e.contains("[1536, 384]")
            && e.contains("[1000, 384]"),
        "{e}"
    );
}

/// A file embedded in chunks and batches (`lucent embed --file F --out F.npy`) equals
/// its lines embedded one by one. Blank lines are skipped; a line ending in `\r\n` reads
/// as the same text. Measured: max |Δ| 2.3e-7, not 0: a packed batch's rows are
/// independent of each other (bit for bit), but a short text alone is a product of few
/// rows, for which the `gemm` crate picks other blocking than for a batch's many rows;
/// bit-for-bit equality needs lucent's own packed kernel (issue 18, item 1).
#[test]
fn embedded_file_equals_lines_one_by_one() {
    use lucent::pipeline::embed_file::{embed_lines, EmbeddedChunk};
    let sents = sentences();
    let mut lines: Vec<String> = Vec::new();
    for i in 0..90 {
        let s = &sents[i % sents.len()];
        // Vary the lengths so that batches mix short and long texts.
        lines.push(match i % 3 {
            0 => s.clone(),
            1 => format!("{s} {}", s.to_uppercase()),
            _ => s.split(' ').take(1 + i % 4).collect::<Vec<_>>().join(" "),
        });
    }
    let mut file = String::new();
    for (i, l) in lines.iter().enumerate() {
        file.push_str(l);
        file.push_str(if i % 7 == 0 { "\r\n" } else { "\n" });
        if i % 11 == 0 {
            file.push_str("   \n");
        }
    }
    for (batch, chunk) in [(7, 20), (32, 2048), (1, 3)] {
        let mut got: Vec<(String, Vec<f32>)> = Vec::new();
        let mut last_bytes = 0;
        let n = embed_lines(
            embedder(),
            &mut file.as_bytes(),
            batch,
            chunk,
            &mut |c: EmbeddedChunk<'_>| {
                assert!(c.bytes_read >= last_bytes);
                last_bytes = c.bytes_read;
                got.extend(c.texts.iter().cloned().zip(c.vectors.iter().cloned()));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(n as usize, lines.len());
        assert_eq!(last_bytes as usize, file.len());
        for (i, ((text, v), line)) in got.iter().zip(&lines).enumerate() {
            assert_eq!(text, line, "line {i}");
            let one = embedder().embed_one(line).unwrap();
            let m = max_abs(&one, v);
            assert!(
                m == 0.0,
                "batch {batch}, chunk {chunk}: line {i} differs from its lone embedding by {m}"
            );
        }
    }
    // A line over the limit is an error naming it; so is text that is not UTF-8.
    let long = format!(
        "ok\n{}\n",
        "a".repeat(lucent::pipeline::embed_file::MAX_LINE_BYTES + 1)
    );
    let e = embed_lines(embedder(), &mut long.as_bytes(), 8, 4, &mut |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    let bad: &[u8] = b"fine\n\xff\xfe\n";
    let e = embed_lines(embedder(), &mut &bad[..], 8, 4, &mut |_| Ok(())).unwrap_err();
    assert!(
        e.to_string().contains("line 2") && e.to_string().contains("UTF-8"),
        "{e}"
    );
}
