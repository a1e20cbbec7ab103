//! Print a GGUF file's metadata (arrays summarised) and tensor table:
//! `cargo run --release -p lucent --example gguf_dump -- FILE.gguf`.

use lucent::io::gguf::{GgufFile, GgufValue};

fn main() -> lucent::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_default();
    let f = GgufFile::open(&path)?;
    println!("version {} alignment {}", f.version(), f.alignment());
    for (k, v) in f.metadata() {
        match v {
            GgufValue::String(s) if s.len() > 200 => println!("{k} = <{} bytes>\n{s}", s.len()),
            _ => println!("{k} = {}", v.describe()),
        }
    }
    for t in f.tensor_infos() {
        println!("{} {:?} {}", t.name, t.shape, t.dtype);
    }
    Ok(())
}
