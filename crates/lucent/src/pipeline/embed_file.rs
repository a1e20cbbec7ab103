//! Embeddings of a file of any size: lines are read a chunk at a time, embedded, and
//! handed on (to a `.npy` or `.jsonl` writer) before the next chunk is read, so memory
//! holds one chunk whatever the file's length.
//!
//! A text's embedding does not depend on its neighbours in a batch: batches are packed
//! without padding ([`crate::model::EncoderModel::forward_packed`]), and the rows of a
//! packed batch are independent bit for bit, and equal to the text embedded alone
//! (`ops::linear_kernel` sums every number in one order whatever the rows;
//! `tests/minilm.rs` checks with `==`).

use std::io::BufRead;

use crate::pipeline::embed::Embedder;
use crate::{Error, Result};

/// Lines longer than this are refused (a line is one text; the model reads at most a
/// few hundred tokens of it).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Lines embedded per chunk by default: enough for full batches on every thread.
pub const DEFAULT_CHUNK_LINES: usize = 2048;

/// One chunk's results, in file order.
#[derive(Debug)]
pub struct EmbeddedChunk<'a> {
    /// The texts (non-blank lines, without their line ends).
    pub texts: &'a [String],
    /// One vector per text.
    pub vectors: &'a [Vec<f32>],
    /// Bytes of the input read so far (for a progress bar).
    pub bytes_read: u64,
}

/// Embed every non-blank line of `input`, `chunk_lines` lines at a time in batches of
/// `batch`, passing each chunk to `sink` in file order; returns the number of texts.
/// Errors name the line (1-based) that could not be read.
pub fn embed_lines(
    embedder: &Embedder,
    input: &mut dyn BufRead,
    batch: usize,
    chunk_lines: usize,
    sink: &mut dyn FnMut(EmbeddedChunk<'_>) -> Result<()>,
) -> Result<u64> {
    if chunk_lines == 0 {
        return Err(Error::Argument("chunk_lines must be at least 1".into()));
    }
    let mut texts: Vec<String> = Vec::with_capacity(chunk_lines);
    let mut bytes_read = 0u64;
    let mut line_no = 0u64;
    let mut total = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = read_line_bounded(input, &mut buf, line_no + 1)?;
        let at_end = n == 0;
        if !at_end {
            line_no += 1;
            bytes_read += n as u64;
            let line = String::from_utf8(std::mem::take(&mut buf)).map_err(|_| {
                Error::Argument(format!(
                    "line {line_no} is not UTF-8 text; embed reads UTF-8 text files"
                ))
            })?;
            let line = line.trim_end_matches(['\n', '\r']);
            if !line.trim().is_empty() {
                texts.push(line.to_string());
            }
        }
        if texts.len() == chunk_lines || (at_end && !texts.is_empty()) {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embedder.embed_batched(&refs, batch)?;
            total += texts.len() as u64;
            sink(EmbeddedChunk {
                texts: &texts,
                vectors: &vectors,
                bytes_read,
            })?;
            texts.clear();
        }
        if at_end {
            return Ok(total);
        }
    }
}

/// Read one line (with its `\n`) into `buf`, refusing lines over [`MAX_LINE_BYTES`];
/// returns the bytes read (0 at the end).
fn read_line_bounded(input: &mut dyn BufRead, buf: &mut Vec<u8>, line_no: u64) -> Result<usize> {
    let mut limited = std::io::Read::take(&mut *input, MAX_LINE_BYTES as u64 + 1);
    let n = limited
        .read_until(b'\n', buf)
        .map_err(|e| Error::io(format!("<input line {line_no}>"), e))?;
    if n > MAX_LINE_BYTES {
        return Err(Error::Argument(format!(
            "line {line_no} is over {MAX_LINE_BYTES} bytes; embed takes one text per line"
        )));
    }
    Ok(n)
}
