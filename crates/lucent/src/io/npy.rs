//! NumPy `.npy` files of f32 rows, written as they come: `lucent embed --out emb.npy`
//! streams embeddings of a file of any size without holding them.
//!
//! The format (NumPy's `format.py`, version 1.0): the magic `\x93NUMPY`, the version
//! bytes `1 0`, a little-endian u16 header length, then an ASCII Python dict
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (n, d), }` padded with spaces and a
//! final `\n` so that the data starts at a multiple of 64 bytes, then the n·d values
//! row-major. The row count is unknown until the stream ends, so the header is written
//! with room for any count (the shape padded with spaces, which Python's literal parser
//! ignores) and rewritten in place by [`NpyWriter::finish`].

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Header bytes (magic to the final `\n`): room for any u64 row count.
const HEADER_BYTES: usize = 128;

/// Writes f32 rows of one width to a `.npy` file (module docs).
pub struct NpyWriter {
    file: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    dim: usize,
    rows: u64,
}

impl std::fmt::Debug for NpyWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpyWriter")
            .field("path", &self.path)
            .field("dim", &self.dim)
            .field("rows", &self.rows)
            .finish()
    }
}

/// The header of an `(rows, dim)` little-endian f32 array, padded to [`HEADER_BYTES`].
fn header(rows: u64, dim: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}");
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    let len = (HEADER_BYTES - 10) as u16;
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h.resize(HEADER_BYTES - 1, b' ');
    h.push(b'\n');
    h
}

impl NpyWriter {
    /// Create (or replace) `path` for rows of `dim` values.
    pub fn create(path: impl AsRef<Path>, dim: usize) -> Result<NpyWriter> {
        let path = path.as_ref().to_path_buf();
        if dim == 0 {
            return Err(Error::Argument(format!(
                "{}: rows of width 0 cannot be written",
                path.display()
            )));
        }
        let f = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut file = std::io::BufWriter::new(f);
        file.write_all(&header(0, dim))
            .map_err(|e| Error::io(&path, e))?;
        Ok(NpyWriter {
            file,
            path,
            dim,
            rows: 0,
        })
    }

    /// Append one row; its width must be the writer's.
    pub fn push(&mut self, row: &[f32]) -> Result<()> {
        if row.len() != self.dim {
            return Err(Error::Shape(format!(
                "{}: a row of {} values in a file of {}-wide rows",
                self.path.display(),
                row.len(),
                self.dim
            )));
        }
        let mut bytes = Vec::with_capacity(4 * row.len());
        for x in row {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        self.file
            .write_all(&bytes)
            .map_err(|e| Error::io(&self.path, e))?;
        self.rows += 1;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Write the final row count into the header and flush; returns the row count.
    pub fn finish(mut self) -> Result<u64> {
        let io = |e| Error::io(&self.path, e);
        self.file.flush().map_err(io)?;
        let f = self.file.get_mut();
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        f.write_all(&header(self.rows, self.dim)).map_err(io)?;
        f.sync_all().map_err(io)?;
        Ok(self.rows)
    }
}

/// Read a `.npy` of little-endian f32 (as [`NpyWriter`] and NumPy write them): `(rows,
/// dim)` and the values. For tests and small files; errors name what is wrong.
pub fn read_f32(path: impl AsRef<Path>) -> Result<(usize, usize, Vec<f32>)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |why: &str| Error::format(path, format!("not a 2-d f32 .npy file: {why}"));
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err(bad("unknown version")),
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad("header runs past the end"))?;
    let dict = std::str::from_utf8(&bytes[start..end]).map_err(|_| bad("header not ASCII"))?;
    if !dict.contains("'descr': '<f4'") || !dict.contains("'fortran_order': False") {
        return Err(bad("only little-endian f32 in C order is read"));
    }
    let shape = dict
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("shape is not numbers")))
        .collect::<Result<_>>()?;
    let [rows, dim] = dims[..] else {
        return Err(bad("not 2-d"));
    };
    let data = &bytes[end..];
    if Some(data.len()) != rows.checked_mul(dim).and_then(|n| n.checked_mul(4)) {
        return Err(bad("data length does not match the shape"));
    }
    let values = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((rows, dim, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_64_aligned_and_room_for_any_count() {
        for rows in [0, 7, u64::MAX] {
            let h = header(rows, 768);
            assert_eq!(h.len(), HEADER_BYTES);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
        }
    }

    #[test]
    fn rows_round_trip() {
        let dir = std::env::temp_dir().join(format!("lucent-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.npy");
        let mut w = NpyWriter::create(&p, 3).unwrap();
        w.push(&[1.0, -2.5, 3.25]).unwrap();
        w.push(&[f32::MIN_POSITIVE, 0.0, -0.0]).unwrap();
        assert!(w.push(&[1.0]).is_err());
        assert_eq!(w.finish().unwrap(), 2);
        let (r, d, v) = read_f32(&p).unwrap();
        assert_eq!((r, d), (2, 3));
        assert_eq!(v, vec![1.0, -2.5, 3.25, f32::MIN_POSITIVE, 0.0, -0.0]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
