//! The fuzz targets' bodies (`fuzz/harness.rs`, compiled here too) run over every seed
//! in `fuzz/corpus/TARGET/` and every input the fuzzer ever found a problem with, kept
//! in `tests/data/fuzz/TARGET/` (issue 20, item 4). A panic here is a regression.
//! The seeds are also checked to reach deep: the tiny models among them load.

#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

use lucent::io::gguf::GgufFile;
use lucent::model::DecoderModel;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A target's body.
type Body = fn(&[u8]);

/// Every target with its body.
const TARGETS: [(&str, Body); 7] = [
    ("gguf", harness::gguf),
    ("safetensors", harness::safetensors),
    ("bert_folder", harness::bert_folder),
    ("tokenizer_json", harness::tokenizer_json),
    ("chat", harness::chat),
    ("ct2_folder", harness::ct2_folder),
    ("wav", harness::wav),
];

/// The files in `dir` (none if it does not exist), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file());
    v.sort();
    v
}

#[test]
fn every_seed_passes_its_target() {
    for (target, body) in TARGETS {
        let seeds = files(&root().join("fuzz/corpus").join(target));
        assert!(!seeds.is_empty(), "fuzz/corpus/{target} has no seeds");
        for s in seeds {
            println!("{target}: {}", s.display());
            body(&std::fs::read(&s).unwrap());
        }
    }
}

#[test]
fn every_fuzz_finding_stays_fixed() {
    let mut n = 0;
    for (target, body) in TARGETS {
        for f in files(&root().join("tests/data/fuzz").join(target)) {
            println!("{target}: {}", f.display());
            body(&std::fs::read(&f).unwrap());
            n += 1;
        }
    }
    println!("{n} findings replayed");
}

/// The GGUF test benches' files (every family, pre-tokenizer, low-bit block type and
/// mixture of experts): whole models the
/// `gguf` target's body takes apart without a panic.
const GGUF_BENCHES: [&str; 4] = [
    "tests/data/gguf_families",
    "tests/data/gguf_tokenizers",
    "tests/data/gguf_quants",
    "tests/data/gguf_moe",
];

#[test]
fn every_bench_gguf_passes_the_gguf_target() {
    for dir in GGUF_BENCHES {
        let mut ggufs = files(&root().join(dir));
        ggufs.retain(|p| p.extension().is_some_and(|e| e == "gguf"));
        assert!(!ggufs.is_empty(), "{dir} has no .gguf files");
        for f in ggufs {
            println!("gguf: {}", f.display());
            harness::gguf(&std::fs::read(&f).unwrap());
        }
    }
}

#[test]
fn seeds_reach_the_models() {
    for name in ["tiny-llama.gguf", "tiny-gemma3.gguf"] {
        let bytes = std::fs::read(root().join("fuzz/corpus/gguf").join(name)).unwrap();
        let f = GgufFile::from_bytes(&bytes, name).unwrap();
        DecoderModel::from_gguf(&f).unwrap();
    }
    let folder = std::fs::read(root().join("fuzz/corpus/bert_folder/tiny-bert")).unwrap();
    let (len, rest) = folder.split_at(2);
    let (config, weights) = rest.split_at(u16::from_le_bytes([len[0], len[1]]) as usize);
    let cfg = lucent::model::family::bert::parse_config(config, Path::new("config.json")).unwrap();
    let cfg = lucent::model::family::bert::config(&cfg).unwrap();
    let file = lucent::io::SafetensorsFile::from_bytes(weights, "model.safetensors").unwrap();
    let w = lucent::model::family::Weights::new(&file, &lucent::model::family::bert::NAMES, &cfg)
        .unwrap();
    lucent::model::EncoderModel::load(cfg.clone(), &w).unwrap();

    // The tiny Whisper folders load, check their config and run a decoder step.
    for name in ["tiny-whisper-f16", "tiny-whisper-f32"] {
        let bytes = std::fs::read(root().join("fuzz/corpus/ct2_folder").join(name)).unwrap();
        let (len, rest) = bytes.split_at(2);
        let (config, model) = rest.split_at(u16::from_le_bytes([len[0], len[1]]) as usize);
        let dir = std::env::temp_dir().join(format!("lucent-seed-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        std::fs::write(dir.join("model.bin"), model).unwrap();
        std::fs::write(dir.join("tokenizer.json"), harness::CT2_TOKENIZER).unwrap();
        let folder = lucent::io::Ct2Folder::open(&dir).unwrap();
        folder.whisper_config().unwrap();
        let m = lucent::model::family::whisper::load(&folder).unwrap();
        let features = lucent::Tensor::zeros(&[1, 8, lucent::io::mel::N_FRAMES]);
        let memory = m.encode_features(&features, None).unwrap();
        let mut cache = m.new_cache(1, m.config.max_positions);
        let logits = m
            .decode(&[vec![0]], &memory, None, Some(&mut cache), None)
            .unwrap();
        assert_eq!(logits.shape(), &[1, 1, 8]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    // The crafted WAV seeds read to the end, at the length their headers promise.
    for f in files(&root().join("fuzz/corpus/wav")) {
        let mut s = lucent::io::AudioStream::open(&f).unwrap();
        let mut n = 0u64;
        while let Some(chunk) = s.next_chunk().unwrap() {
            n += chunk.len() as u64;
        }
        assert_eq!(n, s.info().frames_16k(), "{}", f.display());
    }
}

/// Found while fuzzing the GGUF reader (reproduced with the `gguf` target's binary, not
/// found by it in its first 10 minutes): `llama.block_count = 2^32 - 1` made the model
/// builder reserve room for 4 billion layers, an 11 TB allocation that aborted the
/// process. Now the count is held to the file's tensors, and layers are not reserved.
#[test]
fn a_block_count_beyond_the_tensors_is_refused() {
    let path = root().join("tests/data/fuzz/gguf/block-count-4294967295.gguf");
    let f = GgufFile::open(&path).unwrap();
    let e = DecoderModel::from_gguf(&f).unwrap_err().to_string();
    assert!(
        e.contains("block-count-4294967295.gguf")
            && e.contains("llama.block_count = 4294967295")
            && e.contains("holds only 11 tensors"),
        "{e}"
    );
}

/// The same reservation in the encoder: a BERT config.json with 2^40 layers over a
/// one-layer checkpoint is refused at the first missing layer.
#[test]
fn a_layer_count_beyond_the_checkpoint_is_refused() {
    let bytes = std::fs::read(root().join("tests/data/fuzz/bert_folder/layers-2pow40")).unwrap();
    let (len, rest) = bytes.split_at(2);
    let (config, weights) = rest.split_at(u16::from_le_bytes([len[0], len[1]]) as usize);
    let hf = lucent::model::family::bert::parse_config(config, Path::new("config.json")).unwrap();
    let cfg = lucent::model::family::bert::config(&hf).unwrap();
    let file = lucent::io::SafetensorsFile::from_bytes(weights, "model.safetensors").unwrap();
    let w = lucent::model::family::Weights::new(&file, &lucent::model::family::bert::NAMES, &cfg)
        .unwrap();
    let e = lucent::model::EncoderModel::load(cfg.clone(), &w)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("missing tensor 'encoder.layer.1."),
        "{e}"
    );
}

/// Found by the `tokenizer_json` target in its first seconds: the `tokenizers` crate
/// panics (`expect("Helper")`) on a `decoder` that does not parse; a Precompiled
/// normalizer without its map panics the same way (`expect("Precompiled")`, found by
/// reading the crate after the first). lucent returns an error instead.
#[test]
fn tokenizer_crate_panics_become_errors() {
    for (name, want) in [
        ("decoder-does-not-parse.json", "Helper"),
        ("precompiled-without-map.json", "Precompiled"),
    ] {
        let json = std::fs::read(root().join("tests/data/fuzz/tokenizer_json").join(name)).unwrap();
        let e = lucent::io::HfTokenizer::from_bytes(&json)
            .unwrap_err()
            .to_string();
        println!("{name}: {e}");
        assert!(
            e.contains("not a valid tokenizer.json") && e.contains(want),
            "{name}: {e}"
        );
    }
    // Found by the same target next: a template post-processor that names a special
    // token it does not define loads, then panics inside the crate at encode time.
    let json = std::fs::read(
        root().join("tests/data/fuzz/tokenizer_json/template-names-missing-special.json"),
    )
    .unwrap();
    let tok = lucent::io::HfTokenizer::from_bytes(&json).unwrap();
    let e = tok.encode_batch(&["a", "b"], true).unwrap_err().to_string();
    assert!(e.contains("no entry found for key"), "{e}");
    let e = tok.encode("a", true).unwrap_err().to_string();
    assert!(e.contains("no entry found for key"), "{e}");
}
