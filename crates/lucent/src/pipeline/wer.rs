//! Word error rate: how far a transcript lands from a reference text, in words — the
//! measure `lucent bench precision` and the Whisper precision tests report for int8 and
//! bf16 against exact.
//!
//! Both texts are normalised the same simple way before they are compared: lowercased,
//! every character that is not a letter, a digit or an apostrophe turned into a space,
//! then split on whitespace ("Can you hear me now?" → can you hear me now). It is not
//! Whisper's English text normaliser (which also spells out numbers and unifies
//! spellings); the clips it is used on say no numbers.

/// The normalised words of `text` (module docs).
pub fn normalized_words(text: &str) -> Vec<String> {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '\'' {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                ' '
            }
        })
        .collect();
    cleaned.split_whitespace().map(str::to_string).collect()
}

/// The fewest word substitutions, deletions and insertions that turn `reference` into
/// `hypothesis` (Levenshtein distance over words).
pub fn word_edits(reference: &[String], hypothesis: &[String]) -> usize {
    // One row of the edit-distance table at a time: prev[j] = distance between the
    // first i−1 reference words and the first j hypothesis words.
    let mut prev: Vec<usize> = (0..=hypothesis.len()).collect();
    let mut row = vec![0usize; hypothesis.len() + 1];
    for (i, r) in reference.iter().enumerate() {
        row[0] = i + 1;
        for (j, h) in hypothesis.iter().enumerate() {
            let substitute = prev[j] + usize::from(r != h);
            row[j + 1] = substitute.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        std::mem::swap(&mut prev, &mut row);
    }
    prev[hypothesis.len()]
}

/// Word error rate of several transcripts together: the edits summed over the pairs
/// (reference, hypothesis) over the reference words summed (a fraction: 0.05 is 5%).
/// 0 when the references have no words and the hypotheses none either.
pub fn word_error_rate<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> f64 {
    let (mut edits, mut words) = (0usize, 0usize);
    for (reference, hypothesis) in pairs {
        let r = normalized_words(reference);
        let h = normalized_words(hypothesis);
        edits += word_edits(&r, &h);
        words += r.len();
    }
    if words == 0 {
        return if edits == 0 { 0.0 } else { f64::INFINITY };
    }
    edits as f64 / words as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_drops_case_and_punctuation() {
        assert_eq!(
            normalized_words(" Can you hear me, now?"),
            ["can", "you", "hear", "me", "now"]
        );
        assert_eq!(normalized_words("It's"), ["it's"]);
    }

    #[test]
    fn edits_count_substitutions_deletions_and_insertions() {
        let w = |s: &str| normalized_words(s);
        assert_eq!(word_edits(&w("a b c"), &w("a b c")), 0);
        assert_eq!(word_edits(&w("a b c"), &w("a x c")), 1);
        assert_eq!(word_edits(&w("a b c"), &w("a c")), 1);
        assert_eq!(word_edits(&w("a b c"), &w("a b c d")), 1);
        assert_eq!(word_edits(&w("a b c"), &w("")), 3);
        assert_eq!(word_edits(&w(""), &w("a")), 1);
        // kitten → sitting in words: two substitutions and an insertion.
        assert_eq!(word_edits(&w("k i t t e n"), &w("s i t t i n g")), 3);
    }

    #[test]
    fn the_rate_sums_edits_and_words_over_pairs() {
        let wer = word_error_rate([("a b c d", "a b c d"), ("e f", "e g")]);
        assert!((wer - 1.0 / 6.0).abs() < 1e-12, "{wer}");
        assert_eq!(word_error_rate([("", "")]), 0.0);
    }
}
