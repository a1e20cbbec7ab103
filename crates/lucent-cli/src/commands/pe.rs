//! `lucent pe`: the sinusoidal position encoding table, its heatmap, and how similar
//! nearby positions are.
//!
//! PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
//!
//! PE(p)·PE(p+k) = Σᵢ cos(k·ωᵢ) depends only on the offset k, so the cosine similarity of
//! two positions falls (not monotonically) as they move apart.

use std::path::PathBuf;

use crate::commands::numbers::at_least;
use crate::show::count;
use lucent::nn::position::SinusoidalEncoding;
use lucent::viz::{heatmap, ColorMap, Panel};
use lucent::{Error, Result};

/// Arguments of `lucent pe`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_help = "\
Examples:
  lucent pe --len 10 --dim 8                     the whole table (the guides' 10 × 8)
  lucent pe --len 100 --dim 64 --png pe.png      an excerpt, and the heatmap
  lucent pe --len 50 --dim 16 --json

The heatmap puts position on x and dimension on y: the first dimensions change fast
(short wavelengths), the last ones slowly (wavelengths up to 10000·2π).")]
pub struct Args {
    /// Number of positions (rows of the table).
    #[arg(
        long,
        short = 'n',
        default_value = "10",
        value_name = "N",
        value_parser = at_least::<1, usize>
    )]
    len: usize,
    /// Model width d (columns of the table).
    #[arg(
        long,
        short = 'd',
        default_value = "8",
        value_name = "D",
        value_parser = at_least::<1, usize>
    )]
    dim: usize,
    /// Draw the table as a heatmap to this file (.png or .svg).
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
    /// Print JSON (the whole table and the similarities) instead.
    #[arg(long)]
    json: bool,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Run `lucent pe`.
pub fn run(args: Args) -> Result<()> {
    if args.len == 0 || args.dim == 0 {
        return Err(Error::Argument("--len and --dim must be at least 1".into()));
    }
    if args.len * args.dim > 50_000_000 {
        return Err(Error::Argument(format!(
            "--len {} × --dim {} is {} values; keep the table under 50 million",
            args.len,
            args.dim,
            args.len * args.dim
        )));
    }
    let pe = SinusoidalEncoding::new(args.len, args.dim)?;
    let table = pe.table();
    let offsets: Vec<usize> = [1usize, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000]
        .into_iter()
        .filter(|&k| k < args.len)
        .collect();
    let sims: Vec<(usize, f64)> = offsets
        .iter()
        .map(|&k| (k, cosine(table.row(0), table.row(k))))
        .collect();

    if let Some(path) = &args.png {
        // position on x, dimension on y: transpose the (len, d) table
        let m: Vec<Vec<f32>> = (0..args.dim)
            .map(|j| (0..args.len).map(|p| table.row(p)[j]).collect())
            .collect();
        let panel = Panel::new(
            format!(
                "sinusoidal position encoding, {} × d = {}",
                count(args.len, "position", "positions"),
                args.dim
            ),
            m,
        )
        .axes("position", "dimension")
        .colormap(ColorMap::Diverging)
        .range(-1.0, 1.0);
        heatmap(&panel, path)?;
    }

    if args.json {
        let v = serde_json::json!({
            "len": args.len,
            "dim": args.dim,
            "formula": "PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))",
            "table": table.to_rows(),
            "cosine_similarity_to_position_0": sims.iter().map(|(k, c)| serde_json::json!({"offset": k, "cosine": c})).collect::<Vec<_>>(),
        });
        println!("{v:#}");
        return Ok(());
    }

    println!(
        "Sinusoidal position encoding, {} × d = {}",
        count(args.len, "position", "positions"),
        args.dim
    );
    println!("PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d))\n");
    let show_cols: Vec<usize> = if args.dim <= 10 {
        (0..args.dim).collect()
    } else {
        (0..6).chain(args.dim - 2..args.dim).collect()
    };
    let show_rows: Vec<usize> = if args.len <= 12 {
        (0..args.len).collect()
    } else {
        (0..8).chain([args.len / 2, args.len - 1]).collect()
    };
    if show_cols.len() < args.dim || show_rows.len() < args.len {
        println!(
            "(an excerpt: rows {:?}, dimensions {:?}; --json prints it all)\n",
            show_rows, show_cols
        );
    }
    print!("{:>6}", "pos");
    let mut prev = None;
    for &j in &show_cols {
        if prev.is_some_and(|p: usize| j != p + 1) {
            print!("{:>4}", "…");
        }
        print!(
            "{:>9}",
            format!("{}{}", if j % 2 == 0 { "sin" } else { "cos" }, j)
        );
        prev = Some(j);
    }
    println!();
    let mut prev_row = None;
    for &p in &show_rows {
        if prev_row.is_some_and(|q: usize| p != q + 1) {
            println!("{:>6}", "⋮");
        }
        print!("{p:>6}");
        let mut prev = None;
        for &j in &show_cols {
            if prev.is_some_and(|q: usize| j != q + 1) {
                print!("{:>4}", "…");
            }
            print!("{:>9.4}", table.row(p)[j]);
            prev = Some(j);
        }
        println!();
        prev_row = Some(p);
    }
    if !sims.is_empty() {
        println!(
            "\nNearby positions have similar encodings: cosine similarity of PE(0) with PE(k)"
        );
        println!("(the same for any PE(p) vs PE(p+k): it depends only on the offset k)\n");
        for (k, c) in &sims {
            let bar = "█".repeat(((c.max(0.0)) * 40.0).round() as usize);
            println!("  k = {k:>4}   {c:>7.4}  {bar}");
        }
    }
    if let Some(path) = &args.png {
        println!("\nWrote {}", path.display());
    }
    Ok(())
}
