//! Value parsers for numeric flags. With them (and `allow_negative_numbers` on the
//! command), a number outside a flag's range, such as a negative count, is refused in one
//! line that names the flag and the range (`invalid value '-3' for '--len <N>': expected
//! a whole number ≥ 1`), where clap alone would take `-3` for a flag and suggest `-- -3`.

/// A whole number of at least `MIN` (`--len`, `--steps`, `--threads-list`, …), as any
/// unsigned integer type.
///
/// # Errors
/// A message naming the range, for clap to print after the flag's name.
pub fn at_least<const MIN: u64, T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n >= MIN)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| match T::try_from(u64::MAX) {
            Ok(_) => format!("expected a whole number ≥ {MIN}"),
            Err(_) => format!(
                "expected a whole number ≥ {MIN} that fits in {} bits",
                8 * std::mem::size_of::<T>()
            ),
        })
}

/// A finite number of at least 0 (seconds, minutes, rates).
///
/// # Errors
/// A message naming the range, for clap to print after the flag's name.
pub fn non_negative(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| "expected a number ≥ 0".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_named() {
        assert_eq!(at_least::<1, usize>("3"), Ok(3));
        assert_eq!(at_least::<0, u64>(" 0 "), Ok(0));
        assert_eq!(
            at_least::<1, usize>("0"),
            Err("expected a whole number ≥ 1".into())
        );
        assert!(at_least::<0, usize>("-1").is_err());
        assert!(at_least::<0, usize>("2.5").is_err());
        assert!(at_least::<0, u16>("70000").unwrap_err().contains("16 bits"));
        assert_eq!(non_negative("1.5"), Ok(1.5));
        assert!(non_negative("-1").is_err());
        assert!(non_negative("inf").is_err());
    }
}
