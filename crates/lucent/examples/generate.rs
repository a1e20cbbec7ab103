//! Text from SmolLM2 through lucent's public API: `cargo run --release --example generate`.
use std::io::Write;

fn main() -> lucent::Result<()> {
    let prompt = std::env::args().nth(1);
    let prompt = prompt.as_deref().unwrap_or("The capital of France is");
    let mut gen = lucent::Generator::open("smollm2")?; // fetched on first use
    let sampling = lucent::Sampling::greedy().max_tokens(24);
    print!("{prompt}");
    for piece in gen.stream(prompt, &sampling)? {
        print!("{}", piece?);
        std::io::stdout().flush().ok();
    }
    println!();
    Ok(())
}
