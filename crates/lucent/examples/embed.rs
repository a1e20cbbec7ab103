//! Sentence embeddings and their cosine similarity: `cargo run --release --example embed`.
fn main() -> lucent::Result<()> {
    let embedder = lucent::Embedder::open("minilm")?; // fetched on first use
    let texts = [
        "A cat sits on the mat.",
        "A kitten rests on a rug.",
        "Stocks fell today.",
    ];
    let v = embedder.embed(&texts)?;
    for (i, t) in texts.iter().enumerate() {
        let cos: f32 = v[0].iter().zip(&v[i]).map(|(a, b)| a * b).sum(); // unit vectors
        println!("{cos:.4}  {t}");
    }
    Ok(())
}
