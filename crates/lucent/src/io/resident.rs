//! How a model file's bytes are held while a model runs: mapped from the file (the page
//! cache's 4 KiB pages), or copied once into anonymous memory advised for transparent
//! huge pages (2 MiB).
//!
//! A decoded token reads every weight of the model once, in long runs. Over 4 KiB
//! pages each run meets a page boundary every 4 KiB, where the CPU's hardware
//! prefetchers stop and the next page needs a TLB walk; over 2 MiB pages the stream
//! goes on. Measured on the project's machine (AMD EPYC Zen 5, 1 thread, alternating
//! runs of one binary): SmolLM2 decode 206 → 232 tok/s, Gemma 3 77 → 97, the Qwen3-0.6B
//! shape 60 → 68 (docs/decoding.md). llama.cpp maps its files (4 KiB pages) by default.
//!
//! The copy costs one read of the file at load and makes its bytes the process's own
//! memory (not the page cache's, which the kernel may drop under pressure), so it is
//! taken only where it helps and fits ([`Hold::choose`]): transparent huge pages not
//! switched off, and the file at most half the memory available. Otherwise the file is
//! mapped, as before.

use std::path::Path;

use crate::{Error, Result};

/// How a file's bytes are held ([`Hold::choose`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Copied into anonymous memory advised for transparent huge pages.
    Resident,
    /// Mapped from the file (the page cache's pages).
    Mapped,
}

impl Hold {
    /// The hold for a file of `len` bytes: [`Hold::Resident`] when transparent huge
    /// pages may be had (`thp`: the kernel's `enabled` setting is not `never`) and the
    /// file takes at most half of `available` bytes (the memory available now, as
    /// `/proc/meminfo`'s `MemAvailable` says); [`Hold::Mapped`] otherwise, and when
    /// either is unknown (None).
    pub fn choose(len: u64, available: Option<u64>, thp: Option<bool>) -> Hold {
        match (available, thp) {
            (Some(avail), Some(true)) if len <= avail / 2 => Hold::Resident,
            _ => Hold::Mapped,
        }
    }

    /// [`Hold::choose`] with this machine's figures (Linux; elsewhere always
    /// [`Hold::Mapped`]).
    pub fn for_len(len: u64) -> Hold {
        Hold::choose(len, mem_available(), thp_possible())
    }
}

/// The memory available now in bytes (`MemAvailable` of `/proc/meminfo`), if known.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Whether anonymous memory advised with `MADV_HUGEPAGE` may get transparent huge
/// pages: the kernel's setting (`[always]`, `[madvise]` or `[never]`) is not `never`.
/// None where the setting cannot be read (no such kernel).
fn thp_possible() -> Option<bool> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    Some(!s.contains("[never]"))
}

/// `bytes` (a model file's, from `path`) copied into anonymous memory advised for
/// transparent huge pages: what [`Hold::Resident`] holds, read-only.
///
/// # Errors
/// When the memory cannot be had (the error names `path`).
pub fn copy_held(bytes: &[u8], path: &Path) -> Result<memmap2::Mmap> {
    let mut m = memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| Error::io(path, e))?;
    // Before the first touch, so that the pages are faulted in as huge ones. A refusal
    // (no such kernel feature) leaves ordinary pages: still correct.
    #[cfg(target_os = "linux")]
    let _ = m.advise(memmap2::Advice::HugePage);
    m.copy_from_slice(bytes);
    m.make_read_only().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_only_with_huge_pages_and_room() {
        let gib = 1u64 << 30;
        assert_eq!(Hold::choose(gib, Some(4 * gib), Some(true)), Hold::Resident);
        assert_eq!(
            Hold::choose(2 * gib, Some(4 * gib), Some(true)),
            Hold::Resident
        );
        assert_eq!(
            Hold::choose(2 * gib + 1, Some(4 * gib), Some(true)),
            Hold::Mapped
        );
        assert_eq!(Hold::choose(gib, Some(4 * gib), Some(false)), Hold::Mapped);
        assert_eq!(Hold::choose(gib, None, Some(true)), Hold::Mapped);
        assert_eq!(Hold::choose(gib, Some(4 * gib), None), Hold::Mapped);
    }

    #[test]
    fn the_copy_holds_the_bytes() -> Result<()> {
        for n in [0usize, 1, 4095, 4097, 3 << 20] {
            let bytes: Vec<u8> = (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let m = copy_held(&bytes, Path::new("model.gguf"))?;
            assert!(m[..] == bytes[..], "{n} bytes");
        }
        Ok(())
    }
}
