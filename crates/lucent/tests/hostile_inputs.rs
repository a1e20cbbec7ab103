//! Hostile files are refused with a clear error, allocating no more than a small
//! multiple of the file's real size (issue 20, item 2).
//!
//! Each case crafts a file, then runs lucent's reader on it in a child process (this
//! same test binary, started again with `LUCENT_HOSTILE_CASE` set) so that the child's
//! peak resident memory (`VmHWM` in `/proc/self/status`, before and after the read)
//! belongs to that read alone. The parent checks:
//!
//! - the error names the file and the field at fault (the case's expected phrases);
//! - the growth of the child's peak memory stays within the case's bound: at most
//!   `factor × file size + 8 MiB` (the slack covers the reader's fixed costs), where
//!   the factor is 0 for files refused unread (a 1 GB config, a header longer than
//!   its file) and small for the rest;
//! - a few files that are valid but built to blow up (a million tiny metadata pairs,
//!   100 000 tiny tensors, a million empty strings) open within the same kind of bound.
//!
//! The child's CPU time is printed beside each case, not asserted (timings are for
//! `docs/reliability.md`, never for a test's verdict). This test has its own `main`
//! (`harness = false` in Cargo.toml).

use std::path::{Path, PathBuf};
use std::process::Command;

use lucent::io::gguf::GgufFile;
use lucent::io::gguf_tokenizer::GgufTokenizer;
use lucent::io::{HfTokenizer as Tokenizer, SafetensorsFile};
use lucent::model::family::bert;

const MIB: u64 = 1 << 20;

/// What a case's file must do.
enum Expect {
    /// Refused with an error holding each phrase (the file's name is checked too).
    Refused(&'static [&'static str]),
    /// Opened.
    Accepted,
}

struct Case {
    name: &'static str,
    /// The file's name inside the case's folder.
    file: &'static str,
    /// Writes the file.
    make: fn(&Path),
    /// Reads it with lucent.
    read: fn(&Path) -> lucent::Result<()>,
    expect: Expect,
    /// Peak memory growth allowed per byte of the file (plus the fixed slack).
    factor: u64,
}

const SLACK: u64 = 8 * MIB;

// ------------------------------------------------------------------ file builders

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// A GGUF v3 header claiming `n_tensors` and `n_kv`, followed by `body`.
fn gguf(n_tensors: u64, n_kv: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(n_tensors.to_le_bytes());
    out.extend(n_kv.to_le_bytes());
    out.extend(body);
    out
}

/// A tensor table entry: name, dims (GGUF order), ggml type id, offset.
fn tensor_entry(out: &mut Vec<u8>, name: &str, dims: &[u64], ty: u32, offset: u64) {
    put_str(out, name.as_bytes());
    out.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend(d.to_le_bytes());
    }
    out.extend(ty.to_le_bytes());
    out.extend(offset.to_le_bytes());
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

/// A file of `len` bytes that holds no data (sparse): claims a size without using disk.
fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// A safetensors file: 8-byte header length, the JSON header, `data_len` zero bytes.
fn safetensors(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.resize(out.len() + data_len, 0);
    out
}

const DEEP: usize = 1_000_000;

fn nested_json(prefix: &str, suffix: &str) -> String {
    let mut s = String::with_capacity(2 * DEEP + prefix.len() + suffix.len());
    s.push_str(prefix);
    s.extend(std::iter::repeat_n('[', DEEP));
    s.extend(std::iter::repeat_n(']', DEEP));
    s.push_str(suffix);
    s
}

// ------------------------------------------------------------------ readers

fn open_gguf(p: &Path) -> lucent::Result<()> {
    GgufFile::open(p).map(drop)
}

fn open_gguf_tokenizer(p: &Path) -> lucent::Result<()> {
    let f = GgufFile::open(p)?;
    GgufTokenizer::from_gguf(&f).map(drop)
}

fn open_safetensors(p: &Path) -> lucent::Result<()> {
    SafetensorsFile::open(p).map(drop)
}

fn open_config(p: &Path) -> lucent::Result<()> {
    bert::load_config(p).map(drop)
}

fn open_tokenizer(p: &Path) -> lucent::Result<()> {
    Tokenizer::from_file(p).map(drop)
}

// ------------------------------------------------------------------ the cases

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "GGUF claiming 2^40 tensors",
            file: "many-tensors.gguf",
            make: |p| write(p, &gguf(1 << 40, 0, &[0; 64])),
            read: open_gguf,
            expect: Expect::Refused(&["tensor count = 1099511627776", "could fit"]),
            factor: 0,
        },
        Case {
            name: "GGUF string of 2^60 bytes",
            file: "long-string.gguf",
            make: |p| {
                let mut body = Vec::new();
                put_str(&mut body, b"general.name");
                body.extend(8u32.to_le_bytes());
                body.extend((1u64 << 60).to_le_bytes());
                body.extend(b"SmolLM2");
                write(p, &gguf(0, 1, &body))
            },
            read: open_gguf,
            expect: Expect::Refused(&[
                "general.name",
                "string length 1152921504606846976",
                "past the end",
            ]),
            factor: 0,
        },
        Case {
            name: "GGUF dimensions whose product overflows",
            file: "overflow.gguf",
            make: |p| {
                let mut body = Vec::new();
                tensor_entry(
                    &mut body,
                    "blk.0.attn_q.weight",
                    &[1 << 32, 1 << 32, 1 << 32],
                    0,
                    0,
                );
                write(p, &gguf(1, 0, &body))
            },
            read: open_gguf,
            expect: Expect::Refused(&["blk.0.attn_q.weight", "too many elements", "overflows"]),
            factor: 0,
        },
        Case {
            name: "GGUF tensor whose data runs past the end",
            file: "past-end.gguf",
            make: |p| {
                let mut body = Vec::new();
                tensor_entry(&mut body, "token_embd.weight", &[1024, 1024], 0, 0);
                let mut b = gguf(1, 0, &body);
                b.resize(b.len().div_ceil(32) * 32 + 64, 0);
                write(p, &b)
            },
            read: open_gguf,
            expect: Expect::Refused(&["token_embd.weight", "past the end of the file"]),
            factor: 0,
        },
        Case {
            name: "GGUF tensors sharing their bytes",
            file: "shared.gguf",
            make: |p| {
                let mut body = Vec::new();
                tensor_entry(&mut body, "a.weight", &[256, 256], 0, 0);
                tensor_entry(&mut body, "b.weight", &[256, 256], 0, 0);
                let mut b = gguf(2, 0, &body);
                b.resize(b.len().div_ceil(32) * 32 + 256 * 256 * 4, 0);
                write(p, &b)
            },
            read: open_gguf,
            expect: Expect::Refused(&["'b.weight'", "overlaps tensor 'a.weight'"]),
            factor: 2,
        },
        Case {
            name: "GGUF arrays nested a million deep",
            file: "deep.gguf",
            make: |p| {
                let mut body = Vec::new();
                put_str(&mut body, b"tokenizer.ggml.tokens");
                body.extend(9u32.to_le_bytes());
                for _ in 0..DEEP {
                    body.extend(9u32.to_le_bytes()); // an array of arrays
                    body.extend(1u64.to_le_bytes()); // of one element
                }
                write(p, &gguf(0, 1, &body))
            },
            read: open_gguf,
            expect: Expect::Refused(&["tokenizer.ggml.tokens", "nest deeper than 8"]),
            factor: 2,
        },
        Case {
            name: "GGUF with a million tiny metadata pairs",
            file: "many-pairs.gguf",
            make: |p| {
                let mut body = Vec::new();
                for i in 0..1_000_000u32 {
                    put_str(&mut body, format!("k{i}").as_bytes());
                    body.extend(0u32.to_le_bytes()); // u8
                    body.push(1);
                }
                write(p, &gguf(0, 1_000_000, &body))
            },
            read: open_gguf,
            expect: Expect::Refused(&["metadata count = 1000000", "at most 65536"]),
            factor: 0,
        },
        Case {
            name: "GGUF with 65 536 tiny metadata pairs (valid)",
            file: "many-pairs-valid.gguf",
            make: |p| {
                let mut body = Vec::new();
                for i in 0..65_536u32 {
                    put_str(&mut body, format!("k{i}").as_bytes());
                    body.extend(0u32.to_le_bytes()); // u8
                    body.push(1);
                }
                write(p, &gguf(0, 65_536, &body))
            },
            read: open_gguf,
            expect: Expect::Accepted,
            factor: 8,
        },
        Case {
            name: "GGUF with 100 000 tiny tensors (valid)",
            file: "many-tensors-valid.gguf",
            make: |p| {
                let mut body = Vec::new();
                for i in 0..100_000u64 {
                    tensor_entry(&mut body, &format!("t{i}"), &[8], 0, i * 32);
                }
                let mut b = gguf(100_000, 0, &body);
                b.resize(b.len().div_ceil(32) * 32 + 100_000 * 32, 0);
                write(p, &b)
            },
            read: open_gguf,
            expect: Expect::Accepted,
            factor: 8,
        },
        Case {
            name: "GGUF vocabulary of a million empty strings",
            file: "empty-tokens.gguf",
            make: |p| {
                let mut body = Vec::new();
                put_str(&mut body, b"tokenizer.ggml.model");
                body.extend(8u32.to_le_bytes());
                put_str(&mut body, b"llama");
                put_str(&mut body, b"tokenizer.ggml.tokens");
                body.extend(9u32.to_le_bytes());
                body.extend(8u32.to_le_bytes());
                body.extend(1_000_000u64.to_le_bytes());
                for _ in 0..1_000_000 {
                    body.extend(0u64.to_le_bytes());
                }
                write(p, &gguf(0, 2, &body))
            },
            read: open_gguf_tokenizer,
            expect: Expect::Refused(&["tokenizer.ggml.scores"]),
            factor: 8,
        },
        Case {
            name: "GGUF vocabulary of 300 000 control tokens",
            file: "control-tokens.gguf",
            make: |p| {
                let n = 300_000u64;
                let mut body = Vec::new();
                put_str(&mut body, b"tokenizer.ggml.model");
                body.extend(8u32.to_le_bytes());
                put_str(&mut body, b"llama");
                put_str(&mut body, b"tokenizer.ggml.tokens");
                body.extend(9u32.to_le_bytes());
                body.extend(8u32.to_le_bytes());
                body.extend(n.to_le_bytes());
                for i in 0..n {
                    put_str(&mut body, format!("<unused{i}>").as_bytes());
                }
                put_str(&mut body, b"tokenizer.ggml.scores");
                body.extend(9u32.to_le_bytes());
                body.extend(6u32.to_le_bytes());
                body.extend(n.to_le_bytes());
                body.resize(body.len() + 4 * n as usize, 0);
                put_str(&mut body, b"tokenizer.ggml.token_type");
                body.extend(9u32.to_le_bytes());
                body.extend(5u32.to_le_bytes());
                body.extend(n.to_le_bytes());
                for _ in 0..n {
                    body.extend(3i32.to_le_bytes());
                }
                write(p, &gguf(0, 3, &body))
            },
            read: open_gguf_tokenizer,
            // The tokenizer keeps tables of its own: ids by text, the specials, matchers.
            expect: Expect::Accepted,
            factor: 10,
        },
        Case {
            name: "safetensors header length 2^60",
            file: "long-header.safetensors",
            make: |p| {
                let mut b = (1u64 << 60).to_le_bytes().to_vec();
                b.extend(br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
                write(p, &b)
            },
            read: open_safetensors,
            expect: Expect::Refused(&["header length 1152921504606846976", "runs past the end"]),
            factor: 0,
        },
        Case {
            name: "safetensors dimensions whose product overflows",
            file: "overflow.safetensors",
            make: |p| {
                let h = r#"{"encoder.weight":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}}"#;
                write(p, &safetensors(h, 16))
            },
            read: open_safetensors,
            expect: Expect::Refused(&["'encoder.weight'", "shape", "overflows"]),
            factor: 0,
        },
        Case {
            name: "safetensors tensor whose data runs past the end",
            file: "past-end.safetensors",
            make: |p| {
                let h = r#"{"encoder.weight":{"dtype":"F32","shape":[1024,1024],"data_offsets":[0,4194304]}}"#;
                write(p, &safetensors(h, 16))
            },
            read: open_safetensors,
            expect: Expect::Refused(&[
                "'encoder.weight'",
                "data_offsets [0, 4194304]",
                "past the end",
            ]),
            factor: 0,
        },
        Case {
            name: "safetensors offsets that wrap around 2^64",
            file: "wrap.safetensors",
            make: |p| {
                // Eight tensors of 2^61 - 1 bytes each end just below 2^64: the sum
                // with the header length wraps round to the file's length.
                let mut h = String::from("{");
                let size = (1u64 << 61) - 1;
                for i in 0..8u64 {
                    let (b, e) = (i * size, (i + 1) * size);
                    h.push_str(&format!(
                        "{}\"t{i}\":{{\"dtype\":\"U8\",\"shape\":[{size}],\"data_offsets\":[{b},{e}]}}",
                        if i > 0 { "," } else { "" }
                    ));
                }
                h.push('}');
                write(p, &safetensors(&h, 64))
            },
            read: open_safetensors,
            expect: Expect::Refused(&["'t0'", "data_offsets", "past the end"]),
            factor: 0,
        },
        Case {
            name: "safetensors header nested a million deep",
            file: "deep.safetensors",
            make: |p| write(p, &safetensors(&nested_json(r#"{"__metadata__":"#, "}"), 0)),
            read: open_safetensors,
            expect: Expect::Refused(&[
                "not a valid safetensors file",
                "__metadata__",
                "invalid type: sequence",
            ]),
            factor: 2,
        },
        Case {
            name: "config.json of 1 GB",
            file: "config.json",
            make: |p| sparse(p, 1 << 30),
            read: open_config,
            expect: Expect::Refused(&["config.json is 1073741824 bytes", "at most"]),
            factor: 0,
        },
        Case {
            name: "config.json nested a million deep",
            file: "config.json",
            make: |p| {
                write(
                    p,
                    nested_json(r#"{"vocab_size":30522,"hidden_act":"#, "}").as_bytes(),
                )
            },
            read: open_config,
            expect: Expect::Refused(&["field 'hidden_act'", "invalid type: sequence"]),
            factor: 2,
        },
        Case {
            name: "config.json with a field of the wrong type",
            file: "config.json",
            make: |p| {
                write(
                    p,
                    br#"{"vocab_size":30522,"hidden_size":"big","num_hidden_layers":6,"num_attention_heads":12,"intermediate_size":1536}"#,
                )
            },
            read: open_config,
            expect: Expect::Refused(&["field 'hidden_size'", "invalid type"]),
            factor: 0,
        },
        Case {
            name: "config.json whose sizes overflow",
            file: "config.json",
            make: |p| {
                write(
                    p,
                    br#"{"vocab_size":1099511627776,"hidden_size":1099511627776,"num_hidden_layers":6,"num_attention_heads":1,"intermediate_size":1536}"#,
                )
            },
            read: open_config,
            expect: Expect::Refused(&["vocab_size (1099511627776) × d_model (1099511627776)"]),
            factor: 0,
        },
        Case {
            name: "tokenizer.json of 1 GB",
            file: "tokenizer.json",
            make: |p| sparse(p, 1 << 30),
            read: open_tokenizer,
            expect: Expect::Refused(&["tokenizer.json is 1073741824 bytes", "at most"]),
            factor: 0,
        },
        Case {
            name: "tokenizer.json nested a million deep",
            file: "tokenizer.json",
            make: |p| {
                let level = r#"{"type":"Sequence","normalizers":["#;
                let mut s = String::from(r#"{"normalizer":"#);
                s.extend(std::iter::repeat_n(level, DEEP));
                s.extend(std::iter::repeat_n("]}", DEEP));
                s.push('}');
                write(p, s.as_bytes())
            },
            read: open_tokenizer,
            expect: Expect::Refused(&["not a valid tokenizer.json", "recursion limit"]),
            factor: 2,
        },
    ]
}

// ------------------------------------------------------------------ measuring

/// Peak resident memory of this process so far, in bytes (`VmHWM`: the high-water
/// mark of this process's own memory map, which starts afresh at `exec`; `ru_maxrss`
/// would carry the parent's peak over), and its CPU time in µs (`getrusage`).
fn usage() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    // SAFETY: getrusage writes into the struct we pass; all-zero is a valid rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    assert_eq!(rc, 0, "getrusage failed");
    let cpu = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (hwm_kib * 1024, cpu(u.ru_utime) + cpu(u.ru_stime))
}

/// In the child: read the file, print `peak_growth cpu_us` and the error (or `ok`).
fn child(name: &str, path: &Path) {
    let case = cases().into_iter().find(|c| c.name == name).unwrap();
    let (rss0, cpu0) = usage();
    let r = (case.read)(path);
    let (rss1, cpu1) = usage();
    println!("{} {}", rss1.saturating_sub(rss0), cpu1 - cpu0);
    match r {
        Ok(()) => println!("ok"),
        Err(e) => println!("{e}"),
    }
}

fn main() {
    if let Ok(name) = std::env::var("LUCENT_HOSTILE_CASE") {
        let path = PathBuf::from(std::env::var("LUCENT_HOSTILE_FILE").unwrap());
        child(&name, &path);
        return;
    }
    let root = std::env::temp_dir().join(format!("lucent-hostile-{}", std::process::id()));
    let exe = std::env::current_exe().unwrap();
    let mut failures = Vec::new();
    println!(
        "{:<50} {:>12} {:>12} {:>12} {:>8}",
        "case", "file bytes", "peak growth", "bound", "cpu ms"
    );
    for (i, case) in cases().iter().enumerate() {
        let dir = root.join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(case.file);
        (case.make)(&path);
        let len = std::fs::metadata(&path).unwrap().len();
        let out = Command::new(&exe)
            .env("LUCENT_HOSTILE_CASE", case.name)
            .env("LUCENT_HOSTILE_FILE", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = stdout.lines();
        let (growth, cpu_us) = match lines.next().map(|l| {
            let v: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
            (v.first().copied(), v.get(1).copied())
        }) {
            Some((Some(g), Some(c))) if out.status.success() => (g, c),
            _ => {
                failures.push(format!(
                    "{}: the child failed ({}): {stdout}{}",
                    case.name,
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
        };
        let message: String = lines.collect::<Vec<_>>().join("\n");
        let bound = case.factor * len + SLACK;
        println!(
            "{:<50} {:>12} {:>12} {:>12} {:>8.1}",
            case.name,
            len,
            growth,
            bound,
            cpu_us as f64 / 1000.0
        );
        if growth > bound {
            failures.push(format!(
                "{}: peak memory grew by {growth} bytes, more than {bound} ({} × {len} + {SLACK})",
                case.name, case.factor
            ));
        }
        match case.expect {
            Expect::Accepted if message != "ok" => {
                failures.push(format!("{}: should open, got: {message}", case.name))
            }
            Expect::Accepted => {}
            Expect::Refused(want) => {
                println!("    {message}");
                let file_named = message.contains(&path.display().to_string());
                let missing: Vec<&&str> = want.iter().filter(|w| !message.contains(**w)).collect();
                if message == "ok" || !file_named || !missing.is_empty() {
                    failures.push(format!(
                        "{}: the error must name the file and hold {want:?}; got: {message}",
                        case.name
                    ));
                }
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
    if !failures.is_empty() {
        eprintln!("\n{} of {} cases failed:", failures.len(), cases().len());
        for f in &failures {
            eprintln!("- {f}");
        }
        std::process::exit(1);
    }
    println!("\nall {} cases hold", cases().len());
}
