//! Every GGUF pre-tokenizer (`tokenizer.ggml.pre`) lucent reads gives llama.cpp's token
//! ids on a hostile text (`tests/data/gguf_tokenizers/hostile.txt`: many scripts, emoji,
//! digits and number runs, Unicode whitespace, zero-width and combining characters, code,
//! contractions in every case). The files and llama.cpp's ids come from
//! `scripts/make_gguf_tokenizers.py` (llama-cpp-python 0.3.36): one vocabulary-only file
//! per name, all sharing a byte-level BPE vocabulary whose merges were learned across the
//! boundaries pre-tokenizers draw, so each pattern shows in the ids.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lucent::io::gguf::GgufFile;
use lucent::io::gguf_tokenizer::GgufTokenizer;
use lucent::io::pre_tokenizers::pre_tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    lines: usize,
    distinct_sequences: usize,
    pre: BTreeMap<String, Ids>,
}

#[derive(Deserialize)]
struct Ids {
    text: Vec<u32>,
    lines: Vec<Vec<u32>>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gguf_tokenizers")
}

fn hostile() -> String {
    std::fs::read_to_string(data_dir().join("hostile.txt")).expect("hostile.txt")
}

/// The text's lines with their ends, as Python's `splitlines(keepends=True)` cuts them
/// (the script tokenised those): \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029.
fn lines_with_ends(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = text.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let end = match c {
            '\r' => match it.peek() {
                Some(&(j, '\n')) => {
                    it.next();
                    j + 1
                }
                _ => i + 1,
            },
            '\n' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => i + c.len_utf8(),
            _ => continue,
        };
        out.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data_dir().join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("reference json")
}

fn tokenizer(pre: &str) -> GgufTokenizer {
    let path = data_dir().join(format!("{pre}.gguf"));
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    GgufTokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{pre}: {e}"))
}

/// The first index where two id sequences part, with a little of each around it.
fn first_difference(ours: &[u32], theirs: &[u32]) -> String {
    let i = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let lo = i.saturating_sub(3);
    format!(
        "first difference at id {i} (lengths {} / {}): lucent {:?}, llama.cpp {:?}",
        ours.len(),
        theirs.len(),
        &ours[lo..(i + 4).min(ours.len())],
        &theirs[lo..(i + 4).min(theirs.len())]
    )
}

#[test]
fn every_pre_tokenizer_gives_llama_cpp_ids_on_the_hostile_text() {
    let reference = reference();
    let text = hostile();
    let lines = lines_with_ends(&text);
    assert_eq!(lines.len(), reference.lines, "the text's lines");
    let mut failures = Vec::new();
    for (pre, ids) in &reference.pre {
        let tok = tokenizer(pre);
        let ours = tok.encode(&text, false).expect("encode");
        if ours != ids.text {
            failures.push(format!(
                "{pre}: whole text: {}",
                first_difference(&ours, &ids.text)
            ));
        }
        for (n, (line, want)) in lines.iter().zip(&ids.lines).enumerate() {
            let ours = tok.encode(line, false).expect("encode");
            if &ours != want {
                failures.push(format!(
                    "{pre}: line {}: {line:?}: {}",
                    n + 1,
                    first_difference(&ours, want)
                ));
            }
        }
        // Round trip: the ids decode to the text.
        assert_eq!(
            tok.decode(&ids.text, false).expect("decode"),
            text,
            "{pre}: decode"
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Patterns that differ in writing but cut every text alike, so no text can tell them
/// apart: Ling's (`bailingmoe`) contractions `'(?:[sSdDmMtT]|[lL][lL]|…)` are Qwen 2's
/// `(?:'[sS]|'[tT]|…)` regrouped, and its `\s*[\r\n]` takes the same text as `\s*[\r\n]+`
/// (the greedy `\s*` backs off to the last line break either way). MiniCPM 5 cuts digits
/// into threes first, so its later `\p{N}+` sees at most three: Llama 3's `\p{N}{1,3}`.
const SAME_CUTS: &[(&str, &str)] = &[("bailingmoe", "qwen2"), ("minicpm5", "llama-bpe")];

#[test]
fn the_bench_tells_the_pre_tokenizers_apart() {
    // Names that share a pattern give the same ids; distinct patterns must give distinct
    // ids (but for the pairs above), or the first test could not see a wrong pattern.
    let reference = reference();
    let mut by_ids: BTreeMap<&[u32], Vec<&str>> = BTreeMap::new();
    for (pre, ids) in &reference.pre {
        by_ids.entry(&ids.text).or_default().push(pre);
    }
    assert_eq!(by_ids.len(), reference.distinct_sequences);
    for names in by_ids.values() {
        let first = pre_tokenizer(names[0]).expect("known").regexes;
        for n in &names[1..] {
            let same_cuts = SAME_CUTS
                .iter()
                .any(|&(a, b)| names.contains(&a) && names.contains(&b));
            assert!(
                pre_tokenizer(n).expect("known").regexes == first || same_cuts,
                "{names:?} give the same ids but lucent's patterns differ: the hostile text cannot tell them apart"
            );
        }
    }
}

#[test]
fn an_unknown_pre_tokenizer_is_refused_with_the_list() {
    // Rewrite the name inside a copy of a bench file: same length keeps the offsets.
    let bytes = std::fs::read(data_dir().join("default.gguf")).expect("file");
    let at = bytes
        .windows(b"default".len())
        .position(|w| w == b"default")
        .expect("the name in the file");
    let mut bad = bytes.clone();
    bad[at..at + 7].copy_from_slice(b"nonsens");
    let dir = std::env::temp_dir().join(format!("lucent-pre-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nonsens.gguf");
    std::fs::write(&path, bad).unwrap();
    let f = GgufFile::open(&path).expect("open");
    let Err(err) = GgufTokenizer::from_gguf(&f) else {
        panic!("a file naming an unknown pre-tokenizer was accepted");
    };
    let err = err.to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains("tokenizer.ggml.pre = 'nonsens'"), "{err}");
    assert!(
        err.contains("llama-bpe") && err.contains("qwen2") && err.contains("tekken"),
        "{err}"
    );
}
