//! Shared pretty printing for the commands: labelled matrices and token lists.

/// Labels for n positions: the tokens if given, else `0`, `1`, ...
pub fn labels(tokens: &[String], n: usize) -> Vec<String> {
    if tokens.len() == n {
        tokens.to_vec()
    } else {
        (0..n).map(|i| i.to_string()).collect()
    }
}

/// Print a matrix with row and column labels, each value with `decimals` decimals
/// (−∞ printed as such).
pub fn print_matrix(
    title: &str,
    m: &[Vec<f32>],
    rows: &[String],
    cols: &[String],
    decimals: usize,
) {
    if !title.is_empty() {
        println!("{title}");
    }
    let cell = m
        .iter()
        .flatten()
        .map(|v| fmt(*v, decimals).chars().count())
        .chain(cols.iter().map(|c| c.chars().count()))
        .max()
        .unwrap_or(1)
        + 2;
    let lw = rows.iter().map(|r| r.chars().count()).max().unwrap_or(0) + 2;
    print!("{:lw$}", "");
    for c in cols {
        print!("{c:>cell$}");
    }
    println!();
    for (r, row) in rows.iter().zip(m) {
        print!("  {r:<w$}", w = lw - 2);
        for v in row {
            print!("{:>cell$}", fmt(*v, decimals));
        }
        println!();
    }
    println!();
}

/// One value: fixed decimals, or −∞.
pub fn fmt(v: f32, decimals: usize) -> String {
    if v == f32::NEG_INFINITY {
        "-inf".to_string()
    } else {
        format!("{v:.decimals$}")
    }
}

/// A matrix as JSON rows (−∞ as null, since JSON has no infinities).
pub fn json_matrix(m: &[Vec<f32>]) -> serde_json::Value {
    serde_json::Value::Array(
        m.iter()
            .map(|r| {
                serde_json::Value::Array(
                    r.iter()
                        .map(|&v| {
                            if v.is_finite() {
                                serde_json::json!(v)
                            } else {
                                serde_json::Value::Null
                            }
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

/// `n` and the noun that goes with it: `1 text`, `2 texts` (`many` is the plural spelled
/// out, for nouns that do not just take an `s`).
pub fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn count_agrees_with_its_number() {
        assert_eq!(super::count(1, "text", "texts"), "1 text");
        assert_eq!(super::count(0, "text", "texts"), "0 texts");
        assert_eq!(super::count(2, "head", "heads"), "2 heads");
    }
}
