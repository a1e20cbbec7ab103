//! Word-level times for Whisper transcripts, as openai-whisper's `word_timestamps` makes
//! them: the decoder reads the window's transcript once more, the cross-attention weights
//! of the model's alignment heads (`config.json`'s `alignment_heads`) say which audio
//! positions each text token looked at, and dynamic time warping (DTW) turns that into a
//! monotonic token → time path; tokens are grouped into words and each word's start and
//! end are where the path enters its first token and leaves its last.
//!
//! The steps, per window (facts from openai-whisper 20250625's `timing.py`):
//! 1. decode `sot-sequence <|notimestamps|> text… <|endoftext|>` in one pass, keeping the
//!    cross-attention weights of the alignment heads, `(heads, t, 1500)`;
//! 2. keep the first `num_frames / 2` audio positions (the window's audio; one position
//!    is 20 ms) and renormalise each row over them (= the softmax over those positions);
//! 3. standardise each head's matrix over the tokens (per audio position: minus the mean,
//!    over the population standard deviation);
//! 4. median filter of width 7 along the audio positions (reflect padding);
//! 5. mean over the heads; keep the rows of `<|notimestamps|>` … the last text token (the
//!    positions that predict the text tokens and the end of text);
//! 6. DTW on the negated matrix; a token starts where the path first reaches its row;
//! 7. tokens → words: split at tokens that begin with a space, punctuation and special
//!    tokens (languages without spaces — zh, ja, th, lo, my, yue — split at every whole
//!    character); then the heuristics of `add_word_timestamps`: long words at sentence and
//!    segment boundaries clipped to twice the median word length, punctuation merged into
//!    its neighbour, segment ends moved to their words'.
//!
//! When `config.json` lists no alignment heads, the heads of the last half of the decoder
//! layers serve (Whisper's own default before a model's heads were measured).

use serde::Serialize;

use crate::autograd::no_grad;
use crate::nn::{Trace, TraceFilter};
use crate::pipeline::transcribe::{Segment, Transcriber};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Audio positions per second after the encoder's stride-2 convolution (one per 20 ms).
pub const POSITIONS_PER_SECOND: f64 = 50.0;
/// Width of the median filter over audio positions.
pub const MEDIAN_WIDTH: usize = 7;
/// Punctuation joined to the following word.
pub const PREPEND_PUNCTUATIONS: &str = "\"'“¿([{-";
/// Punctuation joined to the preceding word.
pub const APPEND_PUNCTUATIONS: &str = "\"'.。,，!！?？:：”)]}、";
/// Python's `string.punctuation` (a word is punctuation if its stripped text is a
/// substring of this, as openai-whisper tests it).
const ASCII_PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
/// Languages written without spaces between words.
const NO_SPACE_LANGUAGES: [&str; 6] = ["zh", "ja", "th", "lo", "my", "yue"];

/// One timed word of a transcript.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Word {
    /// Its text, with the leading space and any punctuation merged into it.
    pub word: String,
    /// Start, seconds from the beginning of the audio (rounded to 10 ms).
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// Mean probability of its tokens (softmax over the text tokens).
    pub probability: f32,
}

/// A word as the alignment gives it, before the heuristics (times relative to the window).
#[derive(Clone, Debug, PartialEq)]
pub struct WordTiming {
    /// Its text.
    pub word: String,
    /// Its token ids.
    pub tokens: Vec<u32>,
    /// Start, seconds from the window's start.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// Mean probability of its tokens.
    pub probability: f32,
}

/// Median filter of odd `width` along each row of `x` (rows × cols), with reflect padding
/// (`x[-k] = x[k]`); rows not longer than `width / 2` are left as they are.
pub fn median_filter(x: &mut [f32], cols: usize, width: usize) {
    let pad = width / 2;
    if cols <= pad || cols == 0 {
        return;
    }
    let reflect = |i: isize| -> usize {
        let n = cols as isize;
        let j = if i < 0 {
            -i
        } else if i >= n {
            2 * (n - 1) - i
        } else {
            i
        };
        j as usize
    };
    let mut window = vec![0f32; width];
    let mut out = vec![0f32; cols];
    for row in x.chunks_mut(cols) {
        for (c, o) in out.iter_mut().enumerate() {
            for (k, w) in window.iter_mut().enumerate() {
                *w = row[reflect(c as isize + k as isize - pad as isize)];
            }
            window.sort_by(|a, b| a.total_cmp(b));
            *o = window[pad];
        }
        row.copy_from_slice(&out);
    }
}

/// Dynamic time warping over a cost matrix `x` (n × m, row-major): the cheapest monotonic
/// path from (0, 0) to (n − 1, m − 1) moving down, right or diagonally. Returns the
/// path's (row, column) pairs in order. Ties go as openai-whisper's `dtw_cpu` breaks them
/// (diagonal only when strictly cheapest, then down, else right), with its f32 costs.
pub fn dtw(x: &[f64], n: usize, m: usize) -> Vec<(usize, usize)> {
    if n == 0 || m == 0 {
        return Vec::new();
    }
    let w = m + 1;
    let mut cost = vec![f32::INFINITY; (n + 1) * w];
    let mut trace = vec![0u8; (n + 1) * w];
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let c0 = cost[(i - 1) * w + j - 1];
            let c1 = cost[(i - 1) * w + j];
            let c2 = cost[i * w + j - 1];
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[i * w + j] = (x[(i - 1) * m + j - 1] + f64::from(c)) as f32;
            trace[i * w + j] = t;
        }
    }
    trace[..w].fill(2);
    for i in 0..=n {
        trace[i * w] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::with_capacity(n + m);
    while i > 0 && j > 0 {
        path.push((i - 1, j - 1));
        match trace[i * w + j] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    path
}

/// The start time of each row of a DTW path (the first column the path reaches in it),
/// in seconds; `n` rows.
fn jump_times(path: &[(usize, usize)], n: usize) -> Vec<f64> {
    let mut times = vec![0.0; n];
    let mut last = None;
    for &(i, j) in path {
        if last != Some(i) && i < n {
            times[i] = j as f64 / POSITIONS_PER_SECOND;
        }
        last = Some(i);
    }
    times
}

impl Transcriber {
    /// The alignment heads, `(layer, head)`: `config.json`'s, or every head of the last
    /// half of the decoder layers when it lists none.
    pub fn alignment_heads(&self) -> Vec<(usize, usize)> {
        if !self.whisper.alignment_heads.is_empty() {
            return self.whisper.alignment_heads.clone();
        }
        let layers = self.model.config.decoder_layers;
        let heads = self.model.config.n_heads;
        (layers / 2..layers)
            .flat_map(|l| (0..heads).map(move |h| (l, h)))
            .collect()
    }

    /// Split `tokens` into words (openai-whisper's `split_to_word_tokens`): whole
    /// characters first, then, except for languages without spaces, words that start at a
    /// space, at punctuation or at a special token.
    pub fn split_to_word_tokens(
        &self,
        tokens: &[u32],
        language: Option<&str>,
    ) -> Result<(Vec<String>, Vec<Vec<u32>>)> {
        const REPLACEMENT: char = '\u{fffd}';
        let full: Vec<char> = self.tokenizer.decode(tokens, false)?.chars().collect();
        let mut words = Vec::new();
        let mut word_tokens: Vec<Vec<u32>> = Vec::new();
        let mut current = Vec::new();
        let mut offset = 0usize;
        for &id in tokens {
            current.push(id);
            let decoded = self.tokenizer.decode(&current, false)?;
            let chars: Vec<char> = decoded.chars().collect();
            let whole = match chars.iter().position(|&c| c == REPLACEMENT) {
                None => true,
                Some(k) => full.get(offset + k) == Some(&REPLACEMENT),
            };
            if whole {
                offset += chars.len();
                words.push(decoded);
                word_tokens.push(std::mem::take(&mut current));
            }
        }
        if language.is_some_and(|l| NO_SPACE_LANGUAGES.contains(&l)) {
            return Ok((words, word_tokens));
        }
        let mut out_words: Vec<String> = Vec::new();
        let mut out_tokens: Vec<Vec<u32>> = Vec::new();
        for (sub, toks) in words.into_iter().zip(word_tokens) {
            let special = toks.first().is_some_and(|&t| t >= self.tokens.eot);
            let with_space = sub.starts_with(' ');
            let punctuation = ASCII_PUNCTUATION.contains(sub.trim());
            match (out_words.last_mut(), out_tokens.last_mut()) {
                (Some(w), Some(t)) if !(special || with_space || punctuation) => {
                    w.push_str(&sub);
                    t.extend(toks);
                }
                _ => {
                    out_words.push(sub);
                    out_tokens.push(toks);
                }
            }
        }
        Ok((out_words, out_tokens))
    }

    /// Align `text_tokens` (a window's text, no timestamps) with the window's audio:
    /// words with times relative to the window's start (module doc, steps 1–7 up to the
    /// heuristics).
    ///
    /// # Shapes
    /// memory: (1, 1500, d); `num_frames`: mel frames of audio in the window (≤ 3000)
    pub fn find_alignment(
        &self,
        memory: &Tensor,
        sot_sequence: &[u32],
        text_tokens: &[u32],
        num_frames: usize,
        language: Option<&str>,
    ) -> Result<Vec<WordTiming>> {
        if text_tokens.is_empty() {
            return Ok(Vec::new());
        }
        let t = &self.tokens;
        let ids: Vec<u32> = sot_sequence
            .iter()
            .copied()
            .chain([t.no_timestamps])
            .chain(text_tokens.iter().copied())
            .chain([t.eot])
            .collect();
        if ids.len() > self.model.config.max_positions {
            return Err(Error::Argument(format!(
                "word times: {} tokens exceed the decoder's context of {}",
                ids.len(),
                self.model.config.max_positions
            )));
        }
        let heads = self.alignment_heads();
        let mut layers: Vec<usize> = heads.iter().map(|&(l, _)| l).collect();
        layers.dedup();
        let mut trace = Trace::with_filter(TraceFilter {
            leaves: Some(vec!["weights".into()]),
            layers: Some(layers),
            prefix: Some("decoder.".into()),
        });
        let tgt = vec![ids.iter().map(|&i| i as usize).collect::<Vec<_>>()];
        let logits = no_grad(|| {
            self.model
                .decode(&tgt, memory, None, None, Some(&mut trace))
        })?; // (1, t, V)
        let n_tok = ids.len();
        let vocab = self.model.config.vocab_size;

        // Token probabilities: softmax over the text tokens (ids below <|endoftext|>).
        let eot = t.eot as usize;
        let lg = logits.data();
        let sot_len = sot_sequence.len();
        let probs: Vec<f32> = text_tokens
            .iter()
            .enumerate()
            .map(|(i, &tok)| {
                let row = &lg[(sot_len + i) * vocab..(sot_len + i) * vocab + eot];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f64 = row.iter().map(|&v| f64::from((v - max).exp())).sum();
                ((f64::from(row[tok as usize] - max).exp()) / sum) as f32
            })
            .collect();

        // (heads, t, n) weights over the window's audio positions.
        let n = (num_frames / 2).clamp(1, 1500);
        let mut matrix = vec![0f32; n_tok * n];
        for &(layer, head) in &heads {
            let name = format!("decoder.layer.{layer}.cross_attn.weights");
            let w = trace.get(&name).ok_or_else(|| {
                Error::Argument(format!("word times: the decoder recorded no {name}"))
            })?;
            let [_, h, tt, s] = w.dims()?; // (1, h, t, s)
            if head >= h || tt != n_tok || s < n {
                return Err(Error::Argument(format!(
                    "word times: {name} is {:?}; head {head} of {n_tok} tokens over {n} positions was expected",
                    w.shape()
                )));
            }
            let wd = w.data();
            let mut m = vec![0f32; n_tok * n];
            for r in 0..n_tok {
                let row = &wd[(head * tt + r) * s..(head * tt + r) * s + n];
                let total: f32 = row.iter().sum();
                let total = if total > 0.0 { total } else { 1.0 };
                for (o, &v) in m[r * n..(r + 1) * n].iter_mut().zip(row) {
                    *o = v / total;
                }
            }
            for c in 0..n {
                let mean = (0..n_tok).map(|r| m[r * n + c]).sum::<f32>() / n_tok as f32;
                let var = (0..n_tok)
                    .map(|r| (m[r * n + c] - mean).powi(2))
                    .sum::<f32>()
                    / n_tok as f32;
                let std = var.sqrt();
                for r in 0..n_tok {
                    let v = &mut m[r * n + c];
                    *v = if std > 0.0 { (*v - mean) / std } else { 0.0 };
                }
            }
            median_filter(&mut m, n, MEDIAN_WIDTH);
            for (a, b) in matrix.iter_mut().zip(&m) {
                *a += b / heads.len() as f32;
            }
        }
        // Rows of <|notimestamps|> … the last text token.
        let rows = text_tokens.len() + 1;
        let cost: Vec<f64> = matrix[sot_len * n..(sot_len + rows) * n]
            .iter()
            .map(|&v| -f64::from(v))
            .collect();
        let path = dtw(&cost, rows, n);
        let jumps = jump_times(&path, rows);

        let mut with_eot = text_tokens.to_vec();
        with_eot.push(t.eot);
        let (words, word_tokens) = self.split_to_word_tokens(&with_eot, language)?;
        if word_tokens.len() <= 1 {
            return Ok(Vec::new());
        }
        // The end of text is the last word; it is not one of the results.
        let n_words = words.len() - 1;
        let mut out = Vec::with_capacity(n_words);
        let mut at = 0usize;
        for (word, toks) in words.into_iter().zip(word_tokens).take(n_words) {
            let end_at = at + toks.len();
            let p = &probs[at.min(probs.len())..end_at.min(probs.len())];
            out.push(WordTiming {
                word,
                start: jumps.get(at).copied().unwrap_or(0.0),
                end: jumps.get(end_at).copied().unwrap_or(0.0),
                probability: if p.is_empty() {
                    0.0
                } else {
                    p.iter().sum::<f32>() / p.len() as f32
                },
                tokens: toks,
            });
            at = end_at;
        }
        Ok(out)
    }

    /// Give each of a window's `segments` its words (openai-whisper's
    /// `add_word_timestamps`, module doc step 7); `offset` is the window's start in
    /// seconds, `last_speech` the end of the last speech so far (updated).
    #[allow(clippy::too_many_arguments)]
    pub fn add_word_timestamps(
        &self,
        segments: &mut [Segment],
        memory: &Tensor,
        sot_sequence: &[u32],
        num_frames: usize,
        offset: f64,
        language: Option<&str>,
        last_speech: &mut f64,
    ) -> Result<()> {
        if segments.is_empty() {
            return Ok(());
        }
        let eot = self.tokens.eot;
        let per_segment: Vec<Vec<u32>> = segments
            .iter()
            .map(|s| s.tokens.iter().copied().filter(|&t| t < eot).collect())
            .collect();
        let text: Vec<u32> = per_segment.iter().flatten().copied().collect();
        let mut alignment =
            self.find_alignment(memory, sot_sequence, &text, num_frames, language)?;

        let mut durations: Vec<f64> = alignment
            .iter()
            .map(|w| w.end - w.start)
            .filter(|&d| d != 0.0)
            .collect();
        durations.sort_by(|a, b| a.total_cmp(b));
        let median = match durations.len() {
            0 => 0.0,
            k if k % 2 == 1 => durations[k / 2],
            k => (durations[k / 2 - 1] + durations[k / 2]) / 2.0,
        };
        let median = median.min(0.7);
        let max_duration = median * 2.0;
        if !durations.is_empty() {
            const SENTENCE_END: &str = ".。!！?？";
            for i in 1..alignment.len() {
                if alignment[i].end - alignment[i].start > max_duration {
                    if SENTENCE_END.contains(alignment[i].word.as_str()) {
                        alignment[i].end = alignment[i].start + max_duration;
                    } else if SENTENCE_END.contains(alignment[i - 1].word.as_str()) {
                        alignment[i].start = alignment[i].end - max_duration;
                    }
                }
            }
        }
        merge_punctuations(&mut alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS);

        let round2 = |x: f64| (x * 100.0).round() / 100.0;
        let mut index = 0usize;
        for (segment, text) in segments.iter_mut().zip(&per_segment) {
            let mut saved = 0usize;
            let mut words: Vec<Word> = Vec::new();
            while index < alignment.len() && saved < text.len() {
                let w = &alignment[index];
                if !w.word.is_empty() {
                    words.push(Word {
                        word: w.word.clone(),
                        start: round2(offset + w.start),
                        end: round2(offset + w.end),
                        probability: w.probability,
                    });
                }
                saved += w.tokens.len();
                index += 1;
            }
            if let (Some(first), Some(last)) = (words.first().cloned(), words.last().cloned()) {
                // The first and second word after a pause: at most twice the median.
                let second = words.get(1).cloned();
                if first.end - *last_speech > median * 4.0
                    && (first.end - first.start > max_duration
                        || second
                            .as_ref()
                            .is_some_and(|s| s.end - first.start > max_duration * 2.0))
                {
                    if let Some(s) = second.as_ref().filter(|s| s.end - s.start > max_duration) {
                        let boundary = (s.end / 2.0).max(s.end - max_duration);
                        words[0].end = boundary;
                        words[1].start = boundary;
                    }
                    words[0].start = (words[0].end - max_duration).max(0.0);
                }
                let first = words[0].clone();
                // Prefer the segment's start if the first word is too long.
                if segment.start < first.end && segment.start - 0.5 > first.start {
                    words[0].start = (first.end - median).min(segment.start).max(0.0);
                } else {
                    segment.start = first.start;
                }
                // Prefer the segment's end if the last word is too long.
                let k = words.len() - 1;
                let last = if k == 0 { words[0].clone() } else { last };
                if segment.end > last.start && segment.end + 0.5 < last.end {
                    words[k].end = (last.start + median).max(segment.end);
                } else {
                    segment.end = last.end;
                }
                *last_speech = segment.end;
            }
            segment.words = Some(words);
        }
        Ok(())
    }
}

/// Join punctuation to its neighbour word (openai-whisper's `merge_punctuations`): a
/// word that is a space and one of `prepended` goes into the next word, one of `appended`
/// into the previous; the emptied word keeps its place with no text and no tokens.
pub fn merge_punctuations(alignment: &mut [WordTiming], prepended: &str, appended: &str) {
    let n = alignment.len();
    if n >= 2 {
        let mut j = n - 1;
        for i in (0..n - 1).rev() {
            let prev = alignment[i].word.clone();
            if prev.starts_with(' ') && prepended.contains(prev.trim()) {
                let toks = std::mem::take(&mut alignment[i].tokens);
                let following = &mut alignment[j];
                following.word = format!("{prev}{}", following.word);
                following.tokens = toks.into_iter().chain(following.tokens.drain(..)).collect();
                alignment[i].word.clear();
            } else {
                j = i;
            }
        }
    }
    let mut i = 0;
    for j in 1..n {
        let following = alignment[j].word.clone();
        if !alignment[i].word.ends_with(' ') && appended.contains(following.as_str()) {
            let toks = std::mem::take(&mut alignment[j].tokens);
            alignment[i].word.push_str(&following);
            alignment[i].tokens.extend(toks);
            alignment[j].word.clear();
        } else {
            i = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_filter_reflects_at_the_edges() {
        // Row 0..7; reflect padding by 3: [3 2 1 | 0 1 2 3 4 5 6 | 5 4 3].
        let mut x: Vec<f32> = (0..7).map(|v| v as f32).collect();
        x[3] = 100.0; // a spike the filter removes
        median_filter(&mut x, 7, 7);
        // Window of 0: [3 2 1 0 1 2 100] → sorted [0 1 1 2 2 3 100] → 2.
        assert_eq!(x[0], 2.0);
        assert!(x.iter().all(|&v| v < 100.0));
    }

    #[test]
    fn dtw_follows_the_cheap_diagonal() {
        // 3 × 6 cost: each row cheap on two columns, in order.
        let mut x = vec![1.0; 18];
        for (r, cols) in [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])] {
            for c in cols {
                x[r * 6 + c] = -1.0;
            }
        }
        let path = dtw(&x, 3, 6);
        assert_eq!(path.first(), Some(&(0, 0)));
        assert_eq!(path.last(), Some(&(2, 5)));
        let times = jump_times(&path, 3);
        assert_eq!(times, vec![0.0, 2.0 / 50.0, 4.0 / 50.0]);
    }

    #[test]
    fn punctuation_joins_its_neighbours() {
        let w = |s: &str, t: u32| WordTiming {
            word: s.into(),
            tokens: vec![t],
            start: 0.0,
            end: 0.0,
            probability: 1.0,
        };
        let mut a = vec![
            w(" \"", 1),
            w("Hi", 2),
            w(",", 3),
            w(" there", 4),
            w(".", 5),
        ];
        merge_punctuations(&mut a, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS);
        let words: Vec<&str> = a.iter().map(|w| w.word.as_str()).collect();
        assert_eq!(words, vec!["", " \"Hi,", "", " there.", ""]);
        assert_eq!(a[1].tokens, vec![1, 2, 3]);
    }
}
