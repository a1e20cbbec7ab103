//! The low-bit block types held to llama.cpp bit for bit on small random-weight files
//! (`tests/data/gguf_quants/*.gguf`: one F32 `llama` model quantised by llama.cpp's own
//! `llama-quantize` to the `Q2_K`, `Q3_K_S`, `Q3_K_M`, `IQ4_NL` and `IQ4_XS` mixes, with
//! llama.cpp's logits, by `scripts/make_gguf_quants.py` with llama-cpp-python 0.3.36
//! built for AVX2; see docs/quantization.md):
//!
//! - each file opened through the public door (`lucent::open`), at 1 and at 2 threads:
//!   the logits after each of three prompts (5, 17 and 40 token ids, one batch, so the
//!   prompt products take llama.cpp's tiled and repacked orders) equal llama.cpp's to
//!   the bit, and the 32 greedy tokens after it (one decode step each: the token
//!   products) are llama.cpp's;
//! - the float types (`F32`, `F16`, `BF16`: one smaller F32 model converted by the same
//!   `llama-quantize`, whose widths give both of llama.cpp's float prompt products:
//!   tinyBLAS for Q, K, V, O, one `vec_dot` per output for the FFN's 142 rows and its
//!   142-number rows), the same at every instruction-set level this CPU runs (scalar
//!   twins, AVX2, AVX-512), each matrix kept in its type;
//! - IQ4_NL and Q4_0 matrices whose row count is not a multiple of 8 (`iq4-nl-rows.gguf`,
//!   `q4-0-rows.gguf`: K and V of 28 rows, gate and up of 148), which llama.cpp does not
//!   repack and multiplies by tinyBLAS in a prompt, beside Q and O of 224 and 128 rows,
//!   which it repacks (one chain per output): the same at every instruction-set level
//!   this CPU runs (the down projection and the head are F32, so that no rounding hides
//!   a last-bit difference);
//! - each file holds the block types its mix names (so a file that fell back to other
//!   types cannot pass for the mix);
//! - a file whose tensor type contradicts its shape (a row that is not a whole number of
//!   blocks) is refused, naming the tensor.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lucent::io::gguf::{GgufFile, GgufValue, GgufWriter};
use lucent::runtime::Isa;
use lucent::tensor::quant::GgmlType;
use lucent::Runtime;
use serde::Deserialize;

#[path = "common/gguf_bench.rs"]
mod gguf_bench;
use gguf_bench::{greedy, on_threads, Case};

#[derive(Deserialize)]
struct Reference {
    files: BTreeMap<String, File>,
}

#[derive(Deserialize)]
struct File {
    file: String,
    /// Block type name → tensor count, as llama-quantize chose them.
    types: BTreeMap<String, usize>,
    cases: Vec<Case>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gguf_quants")
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data_dir().join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("reference json")
}

/// The file of `mix` holds the block types `want` (and those llama-quantize recorded),
/// and equals llama.cpp at 1 and 2 threads.
fn check_bit_exact(mix: &str, want: &[GgmlType]) {
    check_bit_exact_at(mix, want, None);
}

/// [`check_bit_exact`] on runtimes capped at `isa` (None: the default runtime's level).
fn check_bit_exact_at(mix: &str, want: &[GgmlType], isa: Option<Isa>) {
    let reference = reference();
    let file = &reference.files[mix];
    let path = data_dir().join(&file.file);
    let f = GgufFile::open(&path).expect("open");
    let mut types: BTreeMap<String, usize> = BTreeMap::new();
    for t in f.tensor_infos() {
        *types.entry(t.dtype.name().to_string()).or_default() += 1;
    }
    assert_eq!(
        types, file.types,
        "{mix}: the block types llama-quantize wrote"
    );
    for t in want {
        assert!(
            types.contains_key(t.name()),
            "{mix}: no {t} tensor in {types:?}"
        );
    }
    let model = lucent::open(path.to_str().expect("utf-8 path")).expect("open");
    let tm = model.text_model().expect("a decoder");
    for threads in [1usize, 2] {
        for case in &file.cases {
            let want = &case.logits_bits[&threads.to_string()];
            let run = || greedy(&tm.model, &case.prompt_ids, case.greedy_ids.len());
            let (first, ids) = match isa {
                None => on_threads(threads, run),
                Some(isa) => Runtime::builder()
                    .threads(threads)
                    .isa(isa)
                    .build()
                    .expect("runtime")
                    .install(run),
            };
            let got: Vec<u32> = first.iter().map(|x| x.to_bits()).collect();
            let worst = first
                .iter()
                .zip(want)
                .map(|(a, &b)| (a - f32::from_bits(b)).abs())
                .fold(0.0f32, f32::max);
            assert!(
                &got == want,
                "{mix}, {threads} thread(s), {isa:?}, prompt of {}: logits differ from llama.cpp's (largest |difference| {worst})",
                case.prompt_ids.len()
            );
            assert_eq!(
                ids,
                case.greedy_ids,
                "{mix}, {threads} thread(s), {isa:?}, prompt of {}: greedy tokens",
                case.prompt_ids.len()
            );
        }
    }
}

#[test]
fn q2_k_equals_llama_cpp() {
    check_bit_exact("q2-k", &[GgmlType::Q2_K, GgmlType::Q3_K]);
}

#[test]
fn q3_k_s_equals_llama_cpp() {
    check_bit_exact("q3-k-s", &[GgmlType::Q3_K]);
}

#[test]
fn q3_k_m_equals_llama_cpp() {
    check_bit_exact("q3-k-m", &[GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K]);
}

#[test]
fn iq4_nl_equals_llama_cpp() {
    check_bit_exact("iq4-nl", &[GgmlType::IQ4_NL]);
}

#[test]
fn iq4_xs_equals_llama_cpp() {
    check_bit_exact("iq4-xs", &[GgmlType::IQ4_XS]);
}

/// IQ4_NL matrices of row counts that are not multiples of 8 (not repacked by llama.cpp:
/// a prompt takes its tinyBLAS order) equal llama.cpp at every instruction-set level.
#[test]
fn iq4_nl_rows_not_multiple_of_8_equal_llama_cpp() {
    for isa in Isa::available() {
        check_bit_exact_at("iq4-nl-rows", &[GgmlType::IQ4_NL], Some(isa));
    }
}

/// Q4_0 matrices, repacked by llama.cpp when their rows are a multiple of 8 (one chain
/// per output) and multiplied by tinyBLAS in a prompt otherwise, equal llama.cpp at
/// every instruction-set level.
#[test]
fn q4_0_rows_equal_llama_cpp() {
    for isa in Isa::available() {
        check_bit_exact_at("q4-0-rows", &[GgmlType::Q4_0], Some(isa));
    }
}

/// The rows benches hold the shapes that send llama.cpp's IQ4_NL and Q4_0 products down
/// both paths: K and V (28 rows) and gate and up (148 rows), not multiples of 8, and Q
/// (224 rows) and O (128 rows), multiples of 8 (repacked); every one in the bench's type.
#[test]
fn rows_files_keep_their_shapes() {
    for (name, dtype) in [
        ("iq4-nl-rows", GgmlType::IQ4_NL),
        ("q4-0-rows", GgmlType::Q4_0),
    ] {
        check_rows_shapes(name, dtype);
    }
}

fn check_rows_shapes(name: &str, dtype: GgmlType) {
    let f = GgufFile::open(data_dir().join(format!("{name}.gguf"))).expect("open");
    for layer in 0..2 {
        for (t, rows) in [
            ("attn_k", 28),
            ("attn_v", 28),
            ("ffn_gate", 148),
            ("ffn_up", 148),
            ("attn_q", 224),
            ("attn_output", 128),
        ] {
            let tensor = format!("blk.{layer}.{t}.weight");
            let m = f.qmatrix(&tensor).expect("a matrix");
            assert_eq!((m.dtype(), m.rows()), (dtype, rows), "{name}: {tensor}");
        }
    }
}

/// A float file equals llama.cpp at every instruction-set level this CPU runs.
fn check_float(name: &str, dtype: GgmlType) {
    for isa in Isa::available() {
        check_bit_exact_at(name, &[dtype], Some(isa));
    }
}

#[test]
fn f32_equals_llama_cpp() {
    check_float("f32", GgmlType::F32);
}

#[test]
fn f16_equals_llama_cpp() {
    check_float("f16", GgmlType::F16);
}

#[test]
fn bf16_equals_llama_cpp() {
    check_float("bf16", GgmlType::BF16);
}

/// The float files' matrices stay in their type (an F16 model held at its file's size),
/// and their FFN widths are the ones that send llama.cpp's prompt products down both
/// paths: 142 rows (not a multiple of 4) and rows of 142 numbers (not a multiple of 8).
#[test]
fn float_files_keep_their_type_and_shapes() {
    for (name, dtype) in [
        ("f32", GgmlType::F32),
        ("f16", GgmlType::F16),
        ("bf16", GgmlType::BF16),
    ] {
        let f = GgufFile::open(data_dir().join(format!("{name}.gguf"))).expect("open");
        let info = |t: &str| f.tensor_info(t).unwrap_or_else(|| panic!("{name}: no {t}"));
        let gate = info("blk.0.ffn_gate.weight");
        assert_eq!(
            (gate.dtype, gate.shape.clone()),
            (dtype, vec![142, 128]),
            "{name}: ffn_gate"
        );
        let down = info("blk.0.ffn_down.weight");
        assert_eq!(
            (down.dtype, down.shape.clone()),
            (dtype, vec![128, 142]),
            "{name}: ffn_down"
        );
        let q = f.qmatrix("blk.0.attn_q.weight").expect("a matrix");
        assert_eq!(
            (q.dtype(), q.rows(), q.cols()),
            (dtype, 128, 128),
            "{name}: attn_q"
        );
    }
}

/// Where the tensor `name`'s first dimension (ne[0], its row length) is stored in the
/// bytes of a GGUF file: after the name's bytes and the u32 dimension count.
fn row_length_field(bytes: &[u8], name: &str) -> usize {
    let at = bytes
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .expect("tensor name in the file");
    at + name.len() + 4
}

#[test]
fn a_row_that_is_not_whole_blocks_is_refused_naming_the_tensor() {
    for (dtype, cols) in [
        (GgmlType::Q2_K, 256),
        (GgmlType::Q3_K, 256),
        (GgmlType::IQ4_NL, 32),
        (GgmlType::IQ4_XS, 256),
    ] {
        let mut w = GgufWriter::new();
        w.add("general.architecture", GgufValue::String("llama".into()));
        let bytes = vec![0u8; dtype.row_bytes(cols).expect("whole blocks") * 2];
        w.add_tensor("blk.0.ffn_down.weight", &[2, cols], dtype, bytes)
            .expect("a well-formed tensor");
        let mut b = w.to_bytes();
        assert!(
            GgufFile::from_bytes(&b, "good.gguf").is_ok(),
            "{dtype}: the good file"
        );
        // The row made half a block shorter: the type contradicts the shape.
        let at = row_length_field(&b, "blk.0.ffn_down.weight");
        let half = (cols - dtype.block_len() / 2) as u64;
        b[at..at + 8].copy_from_slice(&half.to_le_bytes());
        let e = GgufFile::from_bytes(&b, "bad.gguf")
            .err()
            .unwrap_or_else(|| panic!("{dtype}: a row of {half} numbers was accepted"))
            .to_string();
        assert!(
            e.contains("blk.0.ffn_down.weight")
                && e.contains(dtype.name())
                && e.contains("multiple of"),
            "{dtype}: {e}"
        );
    }
}

/// `lucent inspect`'s report of each file: lucent runs it, and its type mix is the one
/// llama-quantize wrote, with each type's bytes its blocks' (rows × row bytes).
#[test]
fn inspect_reports_each_mix_and_runs_it() {
    let reference = reference();
    for (mix, file) in &reference.files {
        let path = data_dir().join(&file.file);
        let r = lucent::pipeline::inspect::inspect_gguf(&path).expect("inspect");
        assert!(r.runs, "{mix}: inspect refuses it: {:?}", r.refusal);
        let got: BTreeMap<String, usize> = r
            .types
            .iter()
            .map(|t| (t.dtype.clone(), t.tensors))
            .collect();
        assert_eq!(got, file.types, "{mix}: the type mix");
        let f = GgufFile::open(&path).expect("open");
        for t in &r.types {
            let bytes: u64 = f
                .tensor_infos()
                .iter()
                .filter(|i| i.dtype.name() == t.dtype)
                .map(|i| {
                    let cols = i.shape.last().copied().unwrap_or(1);
                    let rows = i.shape.iter().product::<usize>() / cols;
                    (i.dtype.row_bytes(cols).expect("whole blocks") * rows) as u64
                })
                .sum();
            assert_eq!(t.bytes, bytes, "{mix}: bytes of {}", t.dtype);
        }
    }
}
