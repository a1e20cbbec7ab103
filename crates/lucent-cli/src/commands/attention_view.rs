//! What every model kind of `lucent attention -m MODEL INPUT` shares: choosing the
//! query row (`--token`) and the heads (`--head`), the tables printed on the terminal,
//! the step-by-step arithmetic of one head for one query (`--steps`), and the one JSON
//! shape of `--json`.
//!
//! Weights(layer, head) = softmax(Q·Kᵀ · scale + mask), one row per query position.
//! `--steps` takes one head's row apart: the query q, the scores q·kⱼ, the scaling, the
//! mask, the softmax and the weighted sum of the values, recomputed by hand from the
//! recorded q, k, v and checked against what the kernel wrote.
//!
//! The JSON (every kind; `--head` keeps one entry of `heads`, `--token` one row):
//!
//! ```text
//! {"model", "kind": "encoder"|"decoder"|"encoder-decoder", "stack": "encoder"|"decoder"|"cross",
//!  "layer": L (null: an encoder-decoder's mean view, one entry per layer),
//!  "input", "tokens": [row labels], "keys": [column labels], "rows": [query positions],
//!  "n_heads", "n_kv_heads",
//!  "heads": [{"layer", "head" (null: the mean of the layer's heads), "kv_head", "weights": [[..]]}],
//!  "steps": {..} (--steps), "png", "png_notes" (--png), and a kind's extras}
//! ```

use lucent::nn::Trace;
use lucent::{Error, Result, Tensor};

/// The query position `spec` names: a position (`8`), or a token (`it`), compared
/// without case and without a tokenizer's word markers (`Ġ`, `▁`, `##`, a leading
/// space).
pub fn find_token(tokens: &[String], spec: &str) -> Result<usize> {
    if let Ok(i) = spec.parse::<usize>() {
        if i < tokens.len() {
            return Ok(i);
        }
    }
    let bare = |t: &str| -> String {
        t.trim()
            .trim_start_matches(['Ġ', '▁'])
            .trim_start_matches("##")
            .to_lowercase()
    };
    let want = spec.to_lowercase();
    tokens
        .iter()
        .position(|t| t.to_lowercase() == want)
        .or_else(|| tokens.iter().position(|t| bare(t) == bare(spec)))
        .ok_or_else(|| {
            let shown: Vec<&String> = tokens.iter().take(30).collect();
            let more = if tokens.len() > 30 { ", …" } else { "" };
            Error::Argument(format!(
                "--token '{spec}' is not one of the tokens {shown:?}{more}; give a token or a position 0..{}",
                tokens.len().saturating_sub(1)
            ))
        })
}

/// The heads to show: `--head H` (checked against the `n` heads) or all of them.
pub fn heads(head: Option<usize>, n: usize) -> Result<Vec<usize>> {
    match head {
        Some(h) if h >= n => Err(Error::Argument(format!(
            "--head {h} is out of range: the layer has heads 0..{}",
            n.saturating_sub(1)
        ))),
        Some(h) => Ok(vec![h]),
        None => Ok((0..n).collect()),
    }
}

/// `--layer` checked against the `n` layers of a stack, or the last layer.
pub fn layer(layer: Option<usize>, n: usize, stack: &str) -> Result<usize> {
    let l = layer.unwrap_or(n.saturating_sub(1));
    if l >= n {
        return Err(Error::Argument(format!(
            "--layer {l} is out of range: the {stack} stack has layers 0..{}",
            n.saturating_sub(1)
        )));
    }
    Ok(l)
}

/// Row `i` of head `h` of a (1, h, r, c) tensor.
pub fn row(t: &Tensor, h: usize, i: usize) -> Result<Vec<f32>> {
    let [_, heads, r, c] = t.dims()?;
    if h >= heads || i >= r {
        return Err(Error::Argument(format!(
            "row {i} of head {h}: the tensor has {heads} heads of {r} rows"
        )));
    }
    Ok(t.data()[(h * r + i) * c..][..c].to_vec())
}

/// The leaf `leaf` of the attention at `prefix` (`encoder.layer.3.attn`,
/// `decoder.layer.1.cross_attn`) in `trace`.
pub fn leaf<'a>(trace: &'a Trace, prefix: &str, leaf: &str) -> Result<&'a Tensor> {
    let name = format!("{prefix}.{leaf}");
    trace.get(&name).ok_or_else(|| {
        Error::Argument(format!(
            "the forward pass recorded no '{name}' (recorded: {:?})",
            trace.names().collect::<Vec<_>>()
        ))
    })
}

/// One head's weights as shown: its rows are the view's `rows`, its columns the keys.
pub struct HeadWeights {
    /// The layer.
    pub layer: usize,
    /// The query head (None: the mean over the layer's heads).
    pub head: Option<usize>,
    /// The key/value head it reads (grouped-query attention shares them).
    pub kv_head: Option<usize>,
    /// (rows, keys).
    pub weights: Vec<Vec<f32>>,
}

/// What `lucent attention -m` shows, in the one shape every model kind prints.
pub struct View {
    /// The model's name.
    pub model: String,
    /// `encoder`, `decoder` or `encoder-decoder`.
    pub kind: &'static str,
    /// `encoder`, `decoder` (self-attention) or `cross`.
    pub stack: String,
    /// The layer (None: an encoder-decoder's mean view over every layer).
    pub layer: Option<usize>,
    /// The text, or the audio file.
    pub input: String,
    /// Labels of every query position.
    pub tokens: Vec<String>,
    /// Labels of the key positions shown.
    pub keys: Vec<String>,
    /// The query positions the weights' rows are (`--token`: one).
    pub rows: Vec<usize>,
    /// Query heads per layer.
    pub n_heads: usize,
    /// Key/value heads per layer.
    pub n_kv_heads: usize,
    /// The heads shown.
    pub heads: Vec<HeadWeights>,
    /// `--steps`: one head's arithmetic.
    pub steps: Option<Steps>,
    /// The kind's own fields (`ids`, `window`, `text`, `output`, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl View {
    /// Record a drawn picture in the JSON (`png`, and `png_notes`: what downsampling
    /// did) and, unless `quiet`, say on stderr where it went.
    pub fn drew(&mut self, path: &std::path::Path, drawn: &lucent::viz::Drawn, quiet: bool) {
        self.extra
            .insert("png".into(), serde_json::json!(path.display().to_string()));
        self.extra
            .insert("png_notes".into(), serde_json::json!(drawn.notes));
        if !quiet {
            eprintln!("wrote {}", path.display());
            for n in &drawn.notes {
                eprintln!("  (downsampled: {n})");
            }
        }
    }

    /// The JSON of `--json` (module doc).
    pub fn to_json(&self) -> serde_json::Value {
        let heads: Vec<serde_json::Value> = self
            .heads
            .iter()
            .map(|h| {
                serde_json::json!({"layer": h.layer, "head": h.head, "kv_head": h.kv_head, "weights": h.weights})
            })
            .collect();
        let mut v = serde_json::json!({
            "model": self.model,
            "kind": self.kind,
            "stack": self.stack,
            "layer": self.layer,
            "input": self.input,
            "tokens": self.tokens,
            "keys": self.keys,
            "rows": self.rows,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "heads": heads,
        });
        if let Some(s) = &self.steps {
            v["steps"] = s.to_json();
        }
        for (k, x) in &self.extra {
            v[k] = x.clone();
        }
        v
    }

    /// The heads as tables on the terminal: with one query row, where that token looks
    /// (a bar per key for one head, a row per head for several); else each head's
    /// matrix (`·` where a causal mask hides the key). Long key lists (audio frames)
    /// show their 20 keys of most weight.
    pub fn print(&self, causal: bool) {
        let clip = |s: &str, n: usize| -> String { s.chars().take(n).collect() };
        if let [i] = self.rows[..] {
            let tok = &self.tokens[i];
            if let [h] = &self.heads[..] {
                println!("{}: where {tok:?} (position {i}) looks\n", head_name(h));
                let w = &h.weights[0];
                for j in shown_keys(w) {
                    if causal && j > i {
                        println!("  {:>12} {:>5}", clip(&self.keys[j], 12), "·");
                    } else {
                        println!(
                            "  {:>12} {:.3} {}",
                            clip(&self.keys[j], 12),
                            w[j],
                            bar(w[j])
                        );
                    }
                }
                if w.len() > MAX_KEYS {
                    println!(
                        "  (the {} keys of most weight of {}; --json has every key)",
                        MAX_KEYS / 2,
                        w.len()
                    );
                }
                return;
            }
            println!("where {tok:?} (position {i}) looks, one row per head:\n");
            if self.keys.len() > MAX_KEYS {
                for h in &self.heads {
                    let w = &h.weights[0];
                    let top = argmax(w);
                    println!(
                        "{:>10}: most weight on {:?} ({:.3})",
                        head_name(h),
                        self.keys[top],
                        w[top]
                    );
                }
                return;
            }
            print!("{:>6}", "head");
            for k in &self.keys {
                print!("{:>9}", clip(k, 8));
            }
            println!("{:>10}", "top");
            for h in &self.heads {
                let w = &h.weights[0];
                print!("{:>6}", h.head.map_or("mean".into(), |x| x.to_string()));
                for x in w {
                    print!("{x:>9.3}");
                }
                println!("{:>10}", clip(&self.keys[argmax(w)], 9));
            }
            return;
        }
        if self.rows.len() > MAX_KEYS && self.keys.len() > MAX_KEYS {
            println!(
                "{} head(s) of {} queries × {} keys: too many to print; --token T shows one query's row, --json every weight",
                self.heads.len(),
                self.rows.len(),
                self.keys.len()
            );
            return;
        }
        for h in &self.heads {
            println!("{} (rows: query, columns: key)", head_name(h));
            if self.keys.len() > MAX_KEYS {
                for (r, w) in self.rows.iter().zip(&h.weights) {
                    let top = argmax(w);
                    println!(
                        "{:>12}: most weight on {:?} ({:.3})",
                        clip(&self.tokens[*r], 12),
                        self.keys[top],
                        w[top]
                    );
                }
                println!();
                continue;
            }
            print!("{:>10}", "");
            for k in &self.keys {
                print!("{:>8}", clip(k, 7));
            }
            println!();
            for (r, w) in self.rows.iter().zip(&h.weights) {
                print!("{:>10}", clip(&self.tokens[*r], 9));
                for (j, x) in w.iter().enumerate() {
                    if causal && j > *r {
                        print!("{:>8}", "·");
                    } else {
                        print!("{x:>8.2}");
                    }
                }
                println!();
            }
            println!();
        }
    }
}

/// Keys past this many are shown by their largest weights only.
const MAX_KEYS: usize = 40;

/// "layer 3, head 5 (kv head 1)" or "layer 3, mean of the heads".
fn head_name(h: &HeadWeights) -> String {
    match (h.head, h.kv_head) {
        (Some(x), Some(k)) if k != x => format!("layer {}, head {x} (kv head {k})", h.layer),
        (Some(x), _) => format!("layer {}, head {x}", h.layer),
        (None, _) => format!("layer {}, mean of the heads", h.layer),
    }
}

/// The keys of a row to print: all, or the `MAX_KEYS / 2` of most weight, in order.
fn shown_keys(w: &[f32]) -> Vec<usize> {
    if w.len() <= MAX_KEYS {
        return (0..w.len()).collect();
    }
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
    let mut top: Vec<usize> = order.into_iter().take(MAX_KEYS / 2).collect();
    top.sort_unstable();
    top
}

fn bar(w: f32) -> String {
    "█".repeat((w.max(0.0) * 30.0).round() as usize)
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

fn vec_preview(v: &[f32], n: usize) -> String {
    let s: Vec<String> = v.iter().take(n).map(|x| format!("{x:+.3}")).collect();
    if v.len() > n {
        format!("[{}, … ({} values)]", s.join(", "), v.len())
    } else {
        format!("[{}]", s.join(", "))
    }
}

/// The leaves a trace records for `--steps` (the weights alone without it).
pub fn leaves(steps: bool) -> &'static [&'static str] {
    if steps {
        &[
            "q", "k", "v", "scores", "scaled", "mask", "weights", "context",
        ]
    } else {
        &["weights"]
    }
}

/// The arithmetic of one head for one query position.
pub struct Steps {
    head: usize,
    kv_head: usize,
    token: usize,
    d_k: usize,
    scale: f32,
    q: Vec<f32>,
    scores: Vec<f32>,
    scaled: Vec<f32>,
    mask: Vec<f32>,
    weights: Vec<f32>,
    context: Vec<f32>,
    by_hand_diff: f32,
}

/// Take head `h`'s row for query `i` apart, from the leaves at `prefix` that a trace
/// with [`leaves`]`(true)` recorded; `group` query heads share each key/value head.
/// The softmax and the output are recomputed by hand from q, k, v, the scale and the
/// mask, and compared with the kernel's.
pub fn step_by_step(
    trace: &Trace,
    prefix: &str,
    h: usize,
    i: usize,
    group: usize,
) -> Result<Steps> {
    let kv = h / group.max(1);
    let q = row(leaf(trace, prefix, "q")?, h, i)?;
    let k = leaf(trace, prefix, "k")?; // (1, h_kv, t_k, d_k)
    let v = leaf(trace, prefix, "v")?; // (1, h_kv, t_k, d_k)
    let [_, _, t_k, d_k] = k.dims()?;
    let scores = row(leaf(trace, prefix, "scores")?, h, i)?;
    let scaled = row(leaf(trace, prefix, "scaled")?, h, i)?;
    let mask = match trace.get(&format!("{prefix}.mask")) {
        Some(m) => row(m, h, i)?,
        None => vec![0.0; t_k],
    };
    let weights = row(leaf(trace, prefix, "weights")?, h, i)?;
    let context = row(leaf(trace, prefix, "context")?, h, i)?;
    // The scale the kernel applied (1/√d_k, or the model's own), read off the largest
    // score, where the ratio is most exact.
    let big = argmax(&scores.iter().map(|s| s.abs()).collect::<Vec<_>>());
    let scale = if scores.get(big).is_some_and(|s| s.abs() > 1e-6) {
        scaled[big] / scores[big]
    } else {
        1.0 / (d_k as f32).sqrt()
    };
    // By the formula: q·kⱼ · scale + maskⱼ, softmax, Σ wⱼ vⱼ.
    let logits: Vec<f32> = (0..t_k)
        .map(|j| -> Result<f32> {
            let kj = row(k, kv, j)?;
            let s: f32 = q.iter().zip(&kj).map(|(a, b)| a * b).sum();
            Ok(s * scale + mask[j])
        })
        .collect::<Result<_>>()?;
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|s| (s - m).exp()).collect();
    let z: f32 = e.iter().sum();
    let mut diff = 0.0f32;
    for (j, w) in weights.iter().enumerate() {
        diff = diff.max((e[j] / z - w).abs());
    }
    let mut by_hand_context = vec![0.0f32; context.len()];
    for (j, w) in weights.iter().enumerate() {
        for (acc, x) in by_hand_context.iter_mut().zip(row(v, kv, j)?) {
            *acc += w * x;
        }
    }
    for (a, b) in by_hand_context.iter().zip(&context) {
        diff = diff.max((a - b).abs());
    }
    Ok(Steps {
        head: h,
        kv_head: kv,
        token: i,
        d_k,
        scale,
        q,
        scores,
        scaled,
        mask,
        weights,
        context,
        by_hand_diff: diff,
    })
}

impl Steps {
    /// The walk-through on the terminal, query labels `tokens`, key labels `keys`.
    pub fn print(&self, tokens: &[String], keys: &[String]) {
        let i = self.token;
        let kv = if self.kv_head != self.head {
            format!(" (kv head {})", self.kv_head)
        } else {
            String::new()
        };
        println!(
            "\nstep by step: head {}{kv}, query {:?} (position {i})\n",
            self.head, tokens[i]
        );
        println!(
            "1. query q = x·W_Qᵀ + b_Q (this head's slice; after RoPE where the model has it): {}",
            vec_preview(&self.q, 6)
        );
        let root = 1.0 / (self.d_k as f32).sqrt();
        let how = if (self.scale - root).abs() <= 1e-6 * root {
            format!("1/√d_k = 1/√{} = {:.4}", self.d_k, self.scale)
        } else {
            format!(
                "the model's scale {:.4} (1/√d_k would be {root:.4})",
                self.scale
            )
        };
        let masked = self.mask.iter().any(|&m| m != 0.0);
        println!(
            "2. scores sⱼ = q·kⱼ; 3. scaled sⱼ × {how};{} softmax → weights:",
            if masked {
                " 4. + mask (−∞: hidden);"
            } else {
                ""
            }
        );
        print!("   {:>12} {:>9} {:>9}", "key", "q·k", "scaled");
        if masked {
            print!(" {:>6}", "mask");
        }
        println!(" {:>8}", "weight");
        for j in shown_keys(&self.weights) {
            print!(
                "   {:>12} {:>9.3} {:>9.3}",
                keys[j].chars().take(12).collect::<String>(),
                self.scores[j],
                self.scaled[j]
            );
            if masked {
                let m = if self.mask[j] == f32::NEG_INFINITY {
                    "−∞".to_string()
                } else {
                    format!("{:.2}", self.mask[j])
                };
                print!(" {m:>6}");
            }
            println!(" {:>8.3} {}", self.weights[j], bar(self.weights[j]));
        }
        if self.weights.len() > MAX_KEYS {
            println!(
                "   (the {} keys of most weight of {}; --json has every key)",
                MAX_KEYS / 2,
                self.weights.len()
            );
        }
        println!("5. output Σⱼ weightⱼ·vⱼ: {}", vec_preview(&self.context, 6));
        println!(
            "   recomputed by hand from q, k, v: largest difference from the kernel {:.1e}",
            self.by_hand_diff
        );
    }

    /// The walk-through as JSON (−∞ in the mask as null).
    pub fn to_json(&self) -> serde_json::Value {
        let mask: Vec<Option<f32>> = self
            .mask
            .iter()
            .map(|&m| m.is_finite().then_some(m))
            .collect();
        serde_json::json!({
            "head": self.head, "kv_head": self.kv_head, "token": self.token,
            "d_k": self.d_k, "scale": self.scale,
            "q": self.q, "scores": self.scores, "scaled": self.scaled, "mask": mask,
            "weights": self.weights, "context": self.context,
            "by_hand_max_diff": self.by_hand_diff,
        })
    }
}
