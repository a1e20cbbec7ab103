//! Dump every intermediate a decoder computes for one prompt, for comparing lucent with
//! another engine layer by layer (how the llama.cpp parity of `ops::attention::llama_cpp` was found).
//!
//! `cargo run --release -p lucent --example trace_dump -- MODEL.gguf OUTDIR ID ID ...`
//!
//! Writes `OUTDIR/NAME.f32` (little-endian f32, row-major) for every traced tensor
//! (`decoder.layer.L.attn.input`, `.q`, `.k`, `.v`, `.weights`, `.context`, `.output`,
//! `ffn.input`, `ffn.hidden`, `ffn.output`, `layer.L.output`) and the logits, with
//! their shapes in `OUTDIR/index.txt`. `CACHE=1` runs the prompt through a KV cache (the
//! path generation takes); `NOF16=1` turns llama.cpp's f16 arithmetic off.

use lucent::io::gguf::GgufFile;
use lucent::model::family::gguf_family;
use lucent::model::DecoderModel;
use lucent::nn::Trace;
use lucent::tensor::Tensor;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: trace_dump MODEL.gguf OUTDIR ID [ID ...]".into());
    }
    let f = GgufFile::open(&args[1])?;
    let fam = gguf_family(&f)?;
    let cfg = fam.config(&f)?;
    let w = fam.weights(&f, &cfg);
    // llama.cpp's arithmetic, as `DecoderModel::from_gguf` runs a GGUF file.
    let mut m = DecoderModel::load(cfg.clone(), &w)?.with_numerics(lucent::Numerics::LlamaCpp);
    if std::env::var("NOF16").is_ok() {
        // lucent's own f32 arithmetic instead of llama.cpp's f16 steps.
        m.numerics = lucent::Numerics::Lucent;
    }
    let ids = args[3..]
        .iter()
        .map(|s| s.parse::<u32>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut tr = Trace::new();
    let logits = if std::env::var("CACHE").is_ok() {
        let mut cache = m.new_cache(ids.len());
        m.forward(&ids, Some(&mut cache), true, Some(&mut tr))?
    } else {
        m.forward(&ids, None, false, Some(&mut tr))?
    };
    let dir = std::path::Path::new(&args[2]);
    std::fs::create_dir_all(dir)?;
    let mut index = String::new();
    let mut put = |name: &str, t: &Tensor| -> Res<()> {
        let bytes: Vec<u8> = t.data().iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(dir.join(format!("{name}.f32")), bytes)?;
        index.push_str(&format!("{name} {:?}\n", t.shape()));
        Ok(())
    };
    for (name, t) in tr.entries() {
        put(name, t)?;
    }
    put("logits", &logits)?;
    std::fs::write(dir.join("index.txt"), index)?;
    Ok(())
}
