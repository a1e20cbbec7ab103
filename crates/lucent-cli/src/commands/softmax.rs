//! `lucent softmax 2 4 1 --temperature 0.5,1,2`: the guides' temperature table.
//!
//! Low temperature sharpens the distribution towards the largest score; high
//! temperature flattens it towards uniform.

use lucent::ops::softmax_with_temperature;
use lucent::{Result, Tensor};

/// Arguments of `lucent softmax`.
#[derive(clap::Args)]
#[command(after_help = "Example: lucent softmax 2 4 1 --temperature 0.5,1,2")]
pub struct Args {
    /// The scores (logits), e.g. `2 4 1`.
    #[arg(required = true, allow_negative_numbers = true)]
    scores: Vec<f32>,
    /// One or more temperatures, comma-separated (each > 0).
    #[arg(long, short = 't', value_delimiter = ',', default_value = "1")]
    temperature: Vec<f32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run `lucent softmax`.
pub fn run(args: Args) -> Result<()> {
    let x = Tensor::from_slice(&args.scores);
    let mut rows = Vec::new();
    for &t in &args.temperature {
        let p = softmax_with_temperature(&x, t)?;
        rows.push((t, p.into_vec()));
    }
    if args.json {
        let v = serde_json::json!({
            "scores": args.scores,
            "rows": rows.iter().map(|(t, p)| serde_json::json!({"temperature": t, "probabilities": p})).collect::<Vec<_>>(),
        });
        println!("{v:#}");
        return Ok(());
    }
    println!("softmax(x / T) for scores {:?}\n", args.scores);
    print!("{:>8} ", "T");
    for (i, s) in args.scores.iter().enumerate() {
        print!("{:>10}", format!("x{i}={s}"));
    }
    println!("{:>10}", "sum");
    for (t, p) in &rows {
        print!("{t:>8} ");
        for v in p {
            print!("{v:>10.6}");
        }
        println!("{:>10.6}", p.iter().sum::<f32>());
    }
    println!("\nLower T sharpens towards the largest score; higher T flattens towards uniform.");
    Ok(())
}
