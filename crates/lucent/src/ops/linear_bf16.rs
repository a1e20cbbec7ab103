//! bf16 products for [`Precision::Bf16`](crate::Precision::Bf16): C = A · Wᵀ + b with
//! W (out, in) rounded to bf16 once at load and each row of A rounded as it arrives,
//! products summed in f32.
//!
//! # The arithmetic
//!
//! - bf16 is f32's upper 16 bits (8 exponent bits, 7 stored mantissa bits). A number is
//!   rounded to it to nearest, ties to even ([`to_bf16`]); a denormal becomes a zero of
//!   its sign (what `vcvtne2ps2bf16` does), a NaN stays a (quiet) NaN.
//! - W: rounded once at load, packed in the order the tiles read it.
//! - A: each row rounded on its own (so a row's result never depends on the rows beside
//!   it: batch invariance holds).
//! - The terms go in pairs (2g, 2g + 1); C[i, j] starts at +0 and for g = 0, 1, … takes
//!   acc ← ftz(fma(A[i, 2g+1], W[j, 2g+1], acc)), then acc ← ftz(fma(A[i, 2g], W[j, 2g],
//!   acc)), where ftz flushes a denormal to a zero of its sign; then C = acc + b[j] (an
//!   IEEE f32 add). That is `vdpbf16ps` (AVX512-BF16) as Intel's pseudo-code writes it:
//!   per 32-bit lane the odd pair member first, each step a fused multiply-add rounded to
//!   nearest even with denormal inputs read as zero and denormal results flushed, MXCSR
//!   ignored (a bf16 × bf16 product is exact in f32, so the fused and the unfused step
//!   round the same). On this CPU the instruction matches that order bit for bit on
//!   millions of random lanes, denormals included; `bf16_products_equal_the_twin_on_every_level`
//!   holds it there on every build.
//! - A k that is odd is padded with a zero term (in A and W), in every path alike.
//!
//! Every path performs these operations in this order, so the result is the same bits on
//! every instruction-set level, for any number of rows, threads or tiles; the plain twin
//! ([`reference`]) is compared with each bit for bit.
//!
//! # The kernels
//!
//! W is packed once in panels of 16 columns: per pair of terms, 16 columns × 2 bf16, one
//! 64-byte vector (column c's pair in 32-bit lane c, the even term in the low half, as
//! `vdpbf16ps` reads it). A tile is up to 8 rows × 32 columns: per pair, two loads of W,
//! one broadcast of the row's pair and two `vdpbf16ps` per row. Without AVX512-BF16 (an
//! AVX2 or AVX-512 CPU of an older generation) the same tile runs **emulated**: the pairs
//! widened to f32 (a shift), two AVX2 FMAs per pair in the instruction's order and a
//! flush of denormals after each, so the same bits, slower (speed unmeasured;
//! [`bf16_path`] says which runs).

use std::sync::OnceLock;

use crate::runtime::{CpuFeatures, Isa};
use crate::threads::threads;

/// Columns of a packed panel (one 512-bit vector of f32 lanes).
const NR: usize = 16;
/// Rows of a tile.
const MR: usize = 8;
/// Multiply-adds from which a product is split over threads.
const PARALLEL_MIN: usize = 1 << 20;

/// `x` rounded to bf16 (its upper 16 bits), to nearest with ties to even; a denormal
/// gives a zero of its sign, a NaN a quiet NaN.
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x0040) as u16;
    }
    if b & 0x7f80_0000 == 0 {
        return ((b >> 16) & 0x8000) as u16; // zero or denormal: a zero of its sign
    }
    // ties to even: add 0x7fff plus the lowest kept bit, then truncate
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// A bf16 number widened back to f32 (exact).
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// A denormal flushed to a zero of its sign (what `vdpbf16ps` does to each result).
#[inline(always)]
fn ftz(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// One pair of terms into `acc` as `vdpbf16ps` does it (module docs): the odd (high)
/// member first.
#[inline(always)]
fn pair_step(acc: f32, a: u32, w: u32) -> f32 {
    let (a_hi, w_hi) = (
        f32::from_bits(a & 0xffff_0000),
        f32::from_bits(w & 0xffff_0000),
    );
    let (a_lo, w_lo) = (f32::from_bits(a << 16), f32::from_bits(w << 16));
    let acc = ftz(a_hi.mul_add(w_hi, acc));
    ftz(a_lo.mul_add(w_lo, acc))
}

/// Round one row to bf16 pairs: `pairs[g]` holds terms 2g (low half) and 2g + 1 (high
/// half); a missing last term is +0. Every level gives the same bits.
fn round_row(x: &[f32], pairs: &mut [u32]) {
    assert!(pairs.len() >= x.len().div_ceil(2), "round_row sizes"); // ok: internal invariant
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= Isa::Avx2 {
        // SAFETY: the Avx2 level includes AVX2; `pairs` holds x.len() rounded up to 2
        // halves (asserted above).
        unsafe { x86::round_row(x, pairs) };
        return;
    }
    round_row_plain(x, pairs);
}

/// [`round_row`] one number at a time.
fn round_row_plain(x: &[f32], pairs: &mut [u32]) {
    for (g, p) in pairs.iter_mut().enumerate() {
        let lo = x.get(2 * g).map_or(0, |&v| to_bf16(v));
        let hi = x.get(2 * g + 1).map_or(0, |&v| to_bf16(v));
        *p = u32::from(lo) | (u32::from(hi) << 16);
    }
}

/// Round one row to bf16 and widen it back, each pair's odd term first:
/// `wide[2g] = bf16(x[2g + 1])`, `wide[2g + 1] = bf16(x[2g])` as f32 (a missing last
/// term +0): the order in which [`Path::Fma512`] takes them. The same numbers as
/// [`round_row`]'s halves on every level.
fn round_row_wide(x: &[f32], wide: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= Isa::Avx2 {
        // SAFETY: the Avx2 level includes AVX2; `wide` holds x.len() rounded up to 2.
        unsafe { x86::round_row_wide(x, wide) };
        return;
    }
    round_row_wide_plain(x, wide);
}

/// [`round_row_wide`] one number at a time.
fn round_row_wide_plain(x: &[f32], wide: &mut [f32]) {
    for (g, w) in wide.chunks_exact_mut(2).enumerate() {
        w[0] = x.get(2 * g + 1).map_or(0.0, |&v| from_bf16(to_bf16(v)));
        w[1] = x.get(2 * g).map_or(0.0, |&v| from_bf16(to_bf16(v)));
    }
}

/// A [`Path::Fma512`] tile done with the flushes, one number at a time (the twin's
/// steps on the widened rows): for the rare tile in which a step gave a denormal.
/// Writes C's rows i..i+rows (`out` starts at row i), columns j..jn.
#[allow(clippy::too_many_arguments)]
fn tile_wide_plain(
    w: &[u32],
    a: &[f32],
    kh: usize,
    rows: usize,
    panels: usize,
    out: &mut [f32],
    n: usize,
    j: usize,
    jn: usize,
    bias: Option<&[f32]>,
) {
    for r in 0..rows {
        let ar = &a[2 * r * kh..2 * (r + 1) * kh];
        for pc in 0..(jn - j).min(panels * NR) {
            let (panel, col) = (pc / NR, pc % NR);
            let mut s = 0.0f32;
            for (g, x) in ar.chunks_exact(2).enumerate() {
                let pair = (x[0].to_bits() & 0xffff_0000) | (x[1].to_bits() >> 16);
                s = pair_step(s, pair, w[(panel * kh + g) * NR + col]);
            }
            out[r * n + j + pc] = match bias {
                Some(b) => s + b[j + pc],
                None => s,
            };
        }
    }
}

/// A weight matrix W (n × k) rounded to bf16 for [`matmul`](Bf16Matrix::matmul),
/// packed in 16-column panels of term pairs.
#[derive(Clone, Debug)]
pub struct Bf16Matrix {
    n: usize,
    k: usize,
    /// Pairs per row: k / 2 rounded up.
    kh: usize,
    /// Panels: for panel P (columns 16P..16P+16) and pair g (terms 2g, 2g+1), 16 lanes
    /// at (P · kh + g) · 16: column c's pair in lane c (term 2g in the low half).
    data: Vec<u32>,
    /// The largest |W − bf16(W)| of the whole matrix (how far the copy is from W).
    max_error: f32,
}

impl Bf16Matrix {
    /// Round W (n × k, row-major) to bf16 and pack it.
    ///
    /// Panics if `w.len() != n · k` (an internal invariant: callers pass a checked
    /// tensor's dimensions).
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn round(w: &[f32], n: usize, k: usize) -> Bf16Matrix {
        assert_eq!(w.len(), n * k, "Bf16Matrix::round sizes"); // ok: internal invariant
        let kh = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        let mut data = vec![0u32; panels * NR * kh];
        let mut max_error = 0.0f32;
        let mut pairs = vec![0u32; kh];
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            round_row(row, &mut pairs);
            for (p, &x) in row.iter().enumerate() {
                let h = (pairs[p / 2] >> (16 * (p % 2))) as u16;
                max_error = max_error.max((x - from_bf16(h)).abs());
            }
            let (panel, c) = (j / NR, j % NR);
            for (g, &pair) in pairs.iter().enumerate() {
                data[(panel * kh + g) * NR + c] = pair;
            }
        }
        Bf16Matrix {
            n,
            k,
            kh,
            data,
            max_error,
        }
    }

    /// W's rows (out features).
    pub fn n(&self) -> usize {
        self.n
    }

    /// W's columns (in features).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The largest |W − bf16(W)| over the matrix: the weights' own rounding.
    pub fn max_error(&self) -> f32 {
        self.max_error
    }

    /// Bytes held (the packed weights).
    pub fn bytes(&self) -> usize {
        4 * self.data.len()
    }

    /// Row j of W as bf16 pairs (kh of them), read out of the panels.
    fn row(&self, j: usize) -> Vec<u32> {
        (0..self.kh)
            .map(|g| self.data[((j / NR) * self.kh + g) * NR + j % NR])
            .collect()
    }

    /// C (m × n) = A (m × k) · Wᵀ + bias in bf16 products with f32 sums (module docs),
    /// split over the runtime's threads when large; the numbers do not depend on the
    /// split, the level or m.
    ///
    /// Panics if a slice's length does not match (an internal invariant).
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    pub fn matmul(&self, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k) = (self.n, self.k);
        assert!(
            c.len() == m * n && a.len() == m * k && bias.is_none_or(|b| b.len() == n),
            "Bf16Matrix::matmul sizes: c {}, a {} for m {m}, k {k}, n {n}",
            c.len(),
            a.len()
        ); // ok: internal invariant
        if m == 0 || n == 0 {
            return;
        }
        self.matmul_on(Path::at(crate::runtime::isa()), c, a, bias, m);
    }

    /// [`Bf16Matrix::matmul`] on `path` (which the CPU must be able to run).
    fn matmul_on(&self, path: Path, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k, kh) = (self.n, self.k, self.kh);
        // Each row rounded once for every column: (m, kh) pairs, or for the FMA path
        // (m, 2 kh) widened numbers, each pair's odd term first.
        let mut ah = Vec::new();
        let mut af = Vec::new();
        if path == Path::Fma512 {
            af = vec![0.0f32; m * 2 * kh];
            if kh > 0 {
                for (row, wide) in a.chunks_exact(k).zip(af.chunks_exact_mut(2 * kh)) {
                    round_row_wide(row, wide);
                }
            }
        } else {
            ah = vec![0u32; m * kh];
            if kh > 0 {
                for (row, pairs) in a.chunks_exact(k).zip(ah.chunks_exact_mut(kh)) {
                    round_row(row, pairs);
                }
            }
        }
        let workers = threads();
        let job = Job {
            m: self,
            ah: &ah,
            af: &af,
            bias,
        };
        if workers <= 1 || m * n * k < PARALLEL_MIN {
            job.run(c, path, 0, m, 0, n);
            return;
        }
        if m >= workers * MR * 2 {
            // Row blocks: every task owns whole rows of C.
            let rows = m.div_ceil(workers * 2).next_multiple_of(MR).max(MR);
            crate::threads::for_each_chunk_mut(c, rows * n, |t, c| {
                let i0 = t * rows;
                job.run_rows(c, path, i0, i0 + c.len() / n);
            });
        } else {
            // Few rows: column blocks (whole panels), every task owns whole columns.
            let cols = n.div_ceil(workers).next_multiple_of(NR);
            // SAFETY: each call writes only its columns j0..j1 of C's m rows.
            unsafe {
                crate::threads::for_each_column_block(c, n, cols, |c, j0, j1| {
                    job.run(c, path, 0, m, j0, j1);
                })
            };
        }
    }
}

/// Which tile a product runs: the instruction, the same steps as AVX-512 FMAs, their
/// emulation on AVX2, or plain code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// `vdpbf16ps` (AVX512-BF16, at the Avx512 level on a CPU where it is the faster
    /// way: see [`Path::at`]).
    Native,
    /// AVX-512 FMAs on bf16 numbers widened to f32 (the rows once per product, W per
    /// pair), two per pair in the instruction's order; a tile in which any step gave a
    /// denormal is done again with the flushes (`x86::tile_fma512_out`).
    Fma512,
    /// AVX2 FMAs on widened pairs, in the instruction's order, flushing each step.
    Emulated,
    /// Plain code, in the same order.
    Plain,
}

impl Path {
    /// The path at instruction-set level `isa` on this CPU: at the Avx512 level
    /// `vdpbf16ps` where the CPU has it and it is not slower than two FMAs, else the
    /// FMAs. On CPUs with AMX (Intel Sapphire Rapids and later) it is slower: measured
    /// on this Xeon, 1.65 ns per `vdpbf16ps` (32 products) against 0.43 ns per
    /// `vfmadd231ps` (16), so the FMAs give bf16 products at twice the instruction's
    /// rate (docs/precision.md).
    fn at(isa: Isa) -> Path {
        if !cfg!(target_arch = "x86_64") {
            Path::Plain
        } else if isa >= Isa::Avx512 {
            if CpuFeatures::get().avx512bf16 && !slow_vdpbf16ps() {
                Path::Native
            } else {
                Path::Fma512
            }
        } else if isa >= Isa::Avx2 {
            Path::Emulated
        } else {
            Path::Plain
        }
    }

    /// Every path this CPU can run, whichever [`Path::at`] picks (the tests hold each
    /// one to the twin).
    #[cfg(test)]
    fn available() -> Vec<Path> {
        let mut all = vec![Path::Plain];
        let levels = Isa::available();
        if cfg!(target_arch = "x86_64") && levels.contains(&Isa::Avx2) {
            all.push(Path::Emulated);
        }
        if cfg!(target_arch = "x86_64") && levels.contains(&Isa::Avx512) {
            all.push(Path::Fma512);
            if CpuFeatures::get().avx512bf16 {
                all.push(Path::Native);
            }
        }
        all
    }
}

/// Whether this CPU's `vdpbf16ps` is slower than two FMAs: CPUs with AMX-BF16 (CPUID
/// leaf 7, EDX bit 22), whose bf16 work goes to the tile unit.
/// Read once: `cpuid` is slow (in a virtual machine it traps to the hypervisor), and
/// every product asks (it took 4 % of a one-thread Whisper transcription when read
/// per product).
fn slow_vdpbf16ps() -> bool {
    static SLOW: OnceLock<bool> = OnceLock::new();
    *SLOW.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // leaf 7 is read only when the highest leaf reaches it
            if std::arch::x86_64::__cpuid(0).eax >= 7 {
                let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
                return leaf7.edx & (1 << 22) != 0;
            }
        }
        false
    })
}

/// One product's shared inputs: the packed W and the rounded rows.
struct Job<'a> {
    m: &'a Bf16Matrix,
    /// The rows as bf16 pairs, (m, kh) (every path but [`Path::Fma512`]).
    ah: &'a [u32],
    /// The rows widened, (m, 2 kh): per pair the odd term, then the even one
    /// ([`Path::Fma512`]).
    af: &'a [f32],
    bias: Option<&'a [f32]>,
}

impl Job<'_> {
    /// Rows i0..i1 of C, where `c` holds exactly those rows.
    fn run_rows(&self, c: &mut [f32], path: Path, i0: usize, i1: usize) {
        let kh = self.m.kh;
        let sub = Job {
            m: self.m,
            ah: self.ah.get(i0 * kh..i1 * kh).unwrap_or(&[]),
            af: self.af.get(2 * i0 * kh..2 * i1 * kh).unwrap_or(&[]),
            bias: self.bias,
        };
        sub.run(c, path, 0, i1 - i0, 0, self.m.n);
    }

    /// Rows i0..i1 and columns j0..j1 (j0 a multiple of 16) of C (m × n, all of it).
    fn run(&self, c: &mut [f32], path: Path, i0: usize, i1: usize, j0: usize, j1: usize) {
        let (n, kh) = (self.m.n, self.m.kh);
        let mut j = j0;
        while j < j1 {
            let panels = if j + NR < j1 { 2 } else { 1 };
            let jn = (j + panels * NR).min(j1);
            let p = j / NR;
            let w = &self.m.data[p * kh * NR..(p + panels) * kh * NR];
            let mut i = i0;
            while i < i1 {
                let rows = (i1 - i).min(MR);
                #[cfg(target_arch = "x86_64")]
                if path == Path::Fma512 {
                    let a = &self.af[2 * i * kh..2 * (i + rows) * kh];
                    let out = &mut c[i * n..];
                    // SAFETY: the Fma512 path is taken only at the Avx512 level
                    // (AVX-512 F); W's panels, the rows' numbers and C's rows
                    // i..i+rows, columns j..jn are in bounds.
                    let done = unsafe {
                        x86::tile_fma512_out(
                            w,
                            a,
                            kh,
                            rows,
                            panels,
                            out[j..].as_mut_ptr(),
                            n,
                            jn - j,
                            self.bias.map(|b| &b[j..jn]),
                        )
                    };
                    if !done {
                        // a denormal on the way: the steps again with the flushes
                        tile_wide_plain(w, a, kh, rows, panels, out, n, j, jn, self.bias);
                    }
                    i += rows;
                    continue;
                }
                let a = &self.ah[i * kh..(i + rows) * kh];
                #[cfg(target_arch = "x86_64")]
                if path == Path::Native {
                    // SAFETY: the Native path is taken only where the CPU has AVX-512
                    // F/BW/VL and BF16; W's panels, the rows' pairs and C's rows
                    // i..i+rows, columns j..jn are in bounds.
                    unsafe {
                        x86::tile_bf16_out(
                            w,
                            a,
                            kh,
                            rows,
                            panels,
                            c[i * n + j..].as_mut_ptr(),
                            n,
                            jn - j,
                            self.bias.map(|b| &b[j..jn]),
                        )
                    };
                    i += rows;
                    continue;
                }
                let mut acc = [[0.0f32; 2 * NR]; MR];
                tile(w, a, kh, rows, panels, path, &mut acc);
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    let out = &mut c[(i + r) * n + j..(i + r) * n + jn];
                    match self.bias {
                        Some(b) => {
                            for ((o, &s), &b) in out.iter_mut().zip(acc).zip(&b[j..jn]) {
                                *o = s + b;
                            }
                        }
                        None => out.copy_from_slice(&acc[..jn - j]),
                    }
                }
                i += rows;
            }
            j = jn;
        }
    }
}

/// The f32 sums of `rows` rows of pairs `a` with `panels` panels `w`, below the native
/// path (which has its own tile, `x86::tile_bf16_out`): acc[r][c] as the module docs
/// define it.
#[allow(clippy::needless_range_loop)]
fn tile(
    w: &[u32],
    a: &[u32],
    kh: usize,
    rows: usize,
    panels: usize,
    path: Path,
    acc: &mut [[f32; 2 * NR]; MR],
) {
    #[cfg(target_arch = "x86_64")]
    if path == Path::Emulated {
        // SAFETY: the Emulated path is taken at the Avx2 level or above (AVX2 and FMA).
        unsafe { x86::tile_emulated(w, a, kh, rows, panels, acc) };
        return;
    }
    let _ = path;
    for r in 0..rows {
        let ar = &a[r * kh..(r + 1) * kh];
        for pc in 0..panels * NR {
            let (panel, c) = (pc / NR, pc % NR);
            let mut s = 0.0f32;
            for (g, &x) in ar.iter().enumerate() {
                s = pair_step(s, x, w[(panel * kh + g) * NR + c]);
            }
            acc[r][pc] = s;
        }
    }
}

/// Which bf16 path this CPU runs (the report of `lucent bench precision`): the
/// instruction, or its emulation (the same numbers, slower).
pub fn bf16_path() -> &'static str {
    static PATH: OnceLock<&'static str> = OnceLock::new();
    PATH.get_or_init(|| match Path::at(Isa::detected()) {
        Path::Native => "AVX512-BF16 (vdpbf16ps)",
        Path::Fma512 => {
            "AVX-512 FMAs in vdpbf16ps's order (the same numbers; on this CPU faster than vdpbf16ps, or it has none)"
        }
        Path::Emulated => {
            "emulated with AVX2 FMAs (no AVX512-BF16 on this CPU: the same numbers, slower)"
        }
        Path::Plain => "emulated in plain code (no AVX2 on this CPU: the same numbers, slower)",
    })
}

// The tiles index their register arrays by row and panel, as the layout reads.
#[allow(clippy::needless_range_loop)]
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// The f32 sums of a tile with `vdpbf16ps` (up to 8 rows × 2 panels), then the bias
    /// added in the registers (C = acc + b, or C = acc without one) and stored under a
    /// mask for a partial panel: the twin's operations, so the same bits.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL and BF16; `w` holds `panels` panels of `kh` pairs, `a` `rows`
    /// rows of `kh` pairs; `out` points at `rows` rows of `ldc` floats with `cols ≤ 32`
    /// writable columns each; `bias` holds `cols` numbers.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    pub(super) unsafe fn tile_bf16_out(
        w: &[u32],
        a: &[u32],
        kh: usize,
        rows: usize,
        panels: usize,
        out: *mut f32,
        ldc: usize,
        cols: usize,
        bias: Option<&[f32]>,
    ) {
        let mut s = [[_mm512_setzero_ps(); 2]; MR];
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        if panels == 2 {
            for g in 0..kh {
                let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(g * NR).cast()));
                let w1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(wp.add((kh + g) * NR).cast()));
                for r in 0..MR {
                    if r < rows {
                        let x: __m512bh =
                            std::mem::transmute(_mm512_set1_epi32(*ap.add(r * kh + g) as i32));
                        s[r][0] = _mm512_dpbf16_ps(s[r][0], x, w0);
                        s[r][1] = _mm512_dpbf16_ps(s[r][1], x, w1);
                    }
                }
            }
        } else {
            for g in 0..kh {
                let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(g * NR).cast()));
                for r in 0..MR {
                    if r < rows {
                        let x: __m512bh =
                            std::mem::transmute(_mm512_set1_epi32(*ap.add(r * kh + g) as i32));
                        s[r][0] = _mm512_dpbf16_ps(s[r][0], x, w0);
                    }
                }
            }
        }
        for h in 0..panels {
            let c0 = h * NR;
            if c0 >= cols {
                break;
            }
            let n = (cols - c0).min(NR);
            let mask: __mmask16 = if n == NR { 0xffff } else { (1u16 << n) - 1 };
            let b = bias.map(|b| _mm512_maskz_loadu_ps(mask, b.as_ptr().add(c0)));
            for r in 0..rows {
                let y = match b {
                    Some(b) => _mm512_add_ps(s[r][h], b),
                    None => s[r][h],
                };
                _mm512_mask_storeu_ps(out.add(r * ldc + c0), mask, y);
            }
        }
    }

    /// [`super::to_bf16`]'s steps on the bits of eight numbers: a NaN keeps its upper
    /// half with the quiet bit set, a zero or denormal becomes a zero of its sign,
    /// anything else rounds to nearest even. The result's lower halves are zero.
    #[inline(always)]
    unsafe fn round8(b: __m256i) -> __m256i {
        let (abs, exp, sign) = (
            _mm256_set1_epi32(0x7fff_ffff),
            _mm256_set1_epi32(0x7f80_0000),
            _mm256_set1_epi32(i32::MIN),
        );
        let (upper, quiet, half, one) = (
            _mm256_set1_epi32(0xffff_0000u32 as i32),
            _mm256_set1_epi32(0x0040_0000),
            _mm256_set1_epi32(0x7fff),
            _mm256_set1_epi32(1),
        );
        let nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), exp);
        let tiny = _mm256_cmpeq_epi32(_mm256_and_si256(b, exp), _mm256_setzero_si256());
        let odd = _mm256_and_si256(_mm256_srli_epi32::<16>(b), one);
        let near = _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(half, odd)), upper);
        let r = _mm256_blendv_epi8(near, _mm256_and_si256(b, sign), tiny);
        _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_and_si256(b, upper), quiet), nan)
    }

    /// [`super::round_row_wide`] on AVX2: [`round8`] eight numbers at a time, then each
    /// pair's two numbers swapped.
    ///
    /// # Safety
    /// AVX2; `wide.len()` is x.len() rounded up to 2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn round_row_wide(x: &[f32], wide: &mut [f32]) {
        let n = x.len();
        let mut i = 0;
        while i + 8 <= n {
            let r = round8(_mm256_loadu_si256(x.as_ptr().add(i).cast()));
            // (x0, x1, x2, x3, …) → (x1, x0, x3, x2, …)
            let r = _mm256_permute_ps::<0b10_11_00_01>(_mm256_castsi256_ps(r));
            _mm256_storeu_ps(wide.as_mut_ptr().add(i), r);
            i += 8;
        }
        super::round_row_wide_plain(&x[i..], &mut wide[i..]);
    }

    /// [`super::round_row`] on AVX2: [`round8`] sixteen numbers at a time, their upper
    /// halves packed in order into eight pairs (term 2g low, 2g + 1 high).
    ///
    /// # Safety
    /// AVX2; `pairs.len()` is at least x.len() / 2 rounded up.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn round_row(x: &[f32], pairs: &mut [u32]) {
        let n = x.len();
        let mut i = 0;
        while i + 16 <= n {
            let lo = _mm256_srli_epi32::<16>(round8(_mm256_loadu_si256(x.as_ptr().add(i).cast())));
            let hi =
                _mm256_srli_epi32::<16>(round8(_mm256_loadu_si256(x.as_ptr().add(i + 8).cast())));
            // packus works within 128-bit lanes: (lo0-3, hi0-3, lo4-7, hi4-7) as 64-bit
            // quarters, put back in order by the permute (every value fits in 16 bits)
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
            _mm256_storeu_si256(pairs.as_mut_ptr().add(i / 2).cast(), packed);
            i += 16;
        }
        super::round_row_plain(&x[i..], &mut pairs[i / 2..]);
    }

    /// The f32 sums of a tile (up to 8 rows × 2 panels) with AVX-512 FMAs in
    /// `vdpbf16ps`'s order: per pair, W's lanes widened (the odd term is the lane's
    /// upper half, the even one the lower half shifted up), acc ← fma(odd, odd, acc),
    /// then acc ← fma(even, even, acc); then C = acc + b stored under a mask. The flushes
    /// are left out: without a denormal step they change nothing, and a denormal step
    /// shows (MXCSR's denormal-operand or underflow flag, clear before the tile, or a
    /// denormal sum at the end), in which case nothing is promised of C and the answer
    /// is false (the caller does the tile again with the flushes). Returns true when C
    /// holds the twin's bits.
    ///
    /// # Safety
    /// AVX-512 F; `w` holds `panels` panels of `kh` pairs, `a` `rows` (1 to 8) rows of
    /// `2 kh` numbers (per pair the odd term first); `out` points at `rows` rows of
    /// `ldc` floats with `cols ≤ 32` writable columns each; `bias` holds `cols` numbers.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile_fma512_out(
        w: &[u32],
        a: &[f32],
        kh: usize,
        rows: usize,
        panels: usize,
        out: *mut f32,
        ldc: usize,
        cols: usize,
        bias: Option<&[f32]>,
    ) -> bool {
        // MXCSR's denormal-operand (bit 1) and underflow (bit 4) flags
        const FLAGS: u32 = 0b1_0010;
        let mut csr = 0u32;
        // SAFETY (all three): stmxcsr / ldmxcsr read and write the 4 bytes of `csr`;
        // the only bits changed are two sticky status flags. Left without options, each
        // is a barrier for the memory reads and writes around it.
        std::arch::asm!("stmxcsr [{}]", in(reg) &raw mut csr, options(nostack, preserves_flags));
        if csr & FLAGS != 0 {
            // cleared only when set (by other code, or a tile that went again): ldmxcsr
            // costs as much as a small tile on this CPU
            csr &= !FLAGS;
            std::arch::asm!("ldmxcsr [{}]", in(reg) &raw const csr, options(nostack, preserves_flags));
        }
        let (a, w) = (a.as_ptr(), w.as_ptr());
        let (denormal, s) = match (rows, panels == 2) {
            (1, true) => sums::<1, 2>(w, a, kh),
            (2, true) => sums::<2, 2>(w, a, kh),
            (3, true) => sums::<3, 2>(w, a, kh),
            (4, true) => sums::<4, 2>(w, a, kh),
            (5, true) => sums::<5, 2>(w, a, kh),
            (6, true) => sums::<6, 2>(w, a, kh),
            (7, true) => sums::<7, 2>(w, a, kh),
            (_, true) => sums::<8, 2>(w, a, kh),
            (1, false) => sums::<1, 1>(w, a, kh),
            (2, false) => sums::<2, 1>(w, a, kh),
            (3, false) => sums::<3, 1>(w, a, kh),
            (4, false) => sums::<4, 1>(w, a, kh),
            (5, false) => sums::<5, 1>(w, a, kh),
            (6, false) => sums::<6, 1>(w, a, kh),
            (7, false) => sums::<7, 1>(w, a, kh),
            (_, false) => sums::<8, 1>(w, a, kh),
        };
        for h in 0..panels {
            let c0 = h * NR;
            if c0 >= cols {
                break;
            }
            let n = (cols - c0).min(NR);
            let mask: __mmask16 = if n == NR { 0xffff } else { (1u16 << n) - 1 };
            let b = bias.map(|b| _mm512_maskz_loadu_ps(mask, b.as_ptr().add(c0)));
            for r in 0..rows {
                let y = match b {
                    Some(b) => _mm512_add_ps(s[r][h], b),
                    None => s[r][h],
                };
                _mm512_mask_storeu_ps(out.add(r * ldc + c0), mask, y);
            }
        }
        // after the stores, so after every step that fed them
        std::arch::asm!("stmxcsr [{}]", in(reg) &raw mut csr, options(nostack, preserves_flags));
        !denormal && csr & FLAGS == 0
    }

    /// [`tile_fma512_out`]'s sums for R rows × P panels (R, P known when compiled, so
    /// the accumulators stay in registers), and whether a sum ended denormal.
    ///
    /// # Safety
    /// AVX-512 F; `w` holds P panels of `kh` pairs, `a` R rows of `2 kh` numbers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sums<const R: usize, const P: usize>(
        w: *const u32,
        a: *const f32,
        kh: usize,
    ) -> (bool, [[__m512; 2]; MR]) {
        let upper = _mm512_set1_epi32(0xffff_0000u32 as i32);
        let mut s = [[_mm512_setzero_ps(); 2]; MR];
        for g in 0..kh {
            let mut wh = [_mm512_setzero_ps(); 2];
            let mut wl = [_mm512_setzero_ps(); 2];
            for h in 0..P {
                let v = _mm512_loadu_si512(w.add((h * kh + g) * NR).cast());
                wh[h] = _mm512_castsi512_ps(_mm512_and_si512(v, upper));
                wl[h] = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
            }
            for r in 0..R {
                let xh = _mm512_set1_ps(*a.add(2 * (r * kh + g)));
                let xl = _mm512_set1_ps(*a.add(2 * (r * kh + g) + 1));
                for h in 0..P {
                    s[r][h] = _mm512_fmadd_ps(xl, wl[h], _mm512_fmadd_ps(xh, wh[h], s[r][h]));
                }
            }
        }
        // a denormal sum at the end (one no later step read)
        let (tiny, zero) = (_mm512_set1_ps(f32::MIN_POSITIVE), _mm512_setzero_ps());
        let mut denormal = false;
        for r in 0..R {
            for h in 0..P {
                let x = _mm512_abs_ps(s[r][h]);
                let small = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, tiny)
                    & _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(x, zero);
                denormal |= small != 0;
            }
        }
        (denormal, s)
    }

    /// A denormal lane flushed to a zero of its sign.
    #[inline(always)]
    unsafe fn ftz(x: __m256, abs: __m256, sign: __m256, tiny: __m256) -> __m256 {
        let small = _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_and_ps(x, abs), tiny);
        _mm256_blendv_ps(x, _mm256_and_ps(x, sign), small)
    }

    /// [`super::tile`] emulated on AVX2: each pair widened to f32 (the odd term's bits
    /// are the lane's upper half, the even term's the lower half shifted up), the odd
    /// product fused into the sum first, then the even one, each result's denormals
    /// flushed: `vdpbf16ps`'s steps, so its bits.
    ///
    /// # Safety
    /// AVX2 and FMA; `w` holds `panels` panels of `kh` pairs, `a` `rows` rows of `kh`
    /// pairs.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_emulated(
        w: &[u32],
        a: &[u32],
        kh: usize,
        rows: usize,
        panels: usize,
        acc: &mut [[f32; 2 * NR]; MR],
    ) {
        let hi_mask = _mm256_set1_epi32(0xffff_0000u32 as i32);
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
        let tiny = _mm256_set1_ps(f32::MIN_POSITIVE);
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        for panel in 0..panels {
            // four rows at a time: 4 rows × 16 columns = 8 accumulators
            let mut r0 = 0;
            while r0 < rows {
                let rn = (rows - r0).min(4);
                let mut s = [[_mm256_setzero_ps(); 2]; 4];
                for g in 0..kh {
                    let base = wp.add((panel * kh + g) * NR);
                    let w0 = _mm256_loadu_si256(base.cast());
                    let w1 = _mm256_loadu_si256(base.add(8).cast());
                    let (w0h, w0l) = (
                        _mm256_castsi256_ps(_mm256_and_si256(w0, hi_mask)),
                        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w0)),
                    );
                    let (w1h, w1l) = (
                        _mm256_castsi256_ps(_mm256_and_si256(w1, hi_mask)),
                        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w1)),
                    );
                    for r in 0..4 {
                        if r < rn {
                            let pair = *ap.add((r0 + r) * kh + g);
                            let xh = _mm256_set1_ps(f32::from_bits(pair & 0xffff_0000));
                            let xl = _mm256_set1_ps(f32::from_bits(pair << 16));
                            let t0 = ftz(_mm256_fmadd_ps(xh, w0h, s[r][0]), abs, sign, tiny);
                            let t1 = ftz(_mm256_fmadd_ps(xh, w1h, s[r][1]), abs, sign, tiny);
                            s[r][0] = ftz(_mm256_fmadd_ps(xl, w0l, t0), abs, sign, tiny);
                            s[r][1] = ftz(_mm256_fmadd_ps(xl, w1l, t1), abs, sign, tiny);
                        }
                    }
                }
                for r in 0..rn {
                    let row = acc[r0 + r].as_mut_ptr().add(panel * NR);
                    _mm256_storeu_ps(row, s[r][0]);
                    _mm256_storeu_ps(row.add(8), s[r][1]);
                }
                r0 += rn;
            }
        }
    }
}

/// The plain twin: each row rounded, each output the pairs taken in order as the
/// instruction takes them, then the bias added.
pub mod reference {
    use super::{pair_step, round_row_plain, Bf16Matrix};

    /// [`Bf16Matrix::matmul`], one number at a time.
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    pub fn matmul(w: &Bf16Matrix, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k) = (w.n, w.k);
        let rows: Vec<Vec<u32>> = (0..n).map(|j| w.row(j)).collect();
        let mut x = vec![0u32; w.kh];
        for i in 0..m {
            round_row_plain(&a[i * k..(i + 1) * k], &mut x);
            for (j, wj) in rows.iter().enumerate() {
                let acc = x
                    .iter()
                    .zip(wj)
                    .fold(0.0f32, |acc, (&x, &w)| pair_step(acc, x, w));
                c[i * n + j] = match bias {
                    Some(b) => acc + b[j],
                    None => acc,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Runtime, Tensor};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Every level (the instruction, its AVX2 emulation, plain code), thread count and
    /// row count gives the twin's bits, for shapes with partial panels, k odd, one row
    /// and many, with and without a bias.
    #[test]
    fn bf16_products_equal_the_twin_on_every_level() {
        let mut rng = StdRng::seed_from_u64(16);
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 7, 5),
            (3, 33, 17),
            (9, 64, 48),
            (17, 384, 384),
            (130, 384, 1536),
            (70, 1536, 384),
        ] {
            let w = Tensor::randn(&[n, k], 0.05, &mut rng);
            let a = Tensor::randn(&[m, k], 1.0, &mut rng);
            let b = Tensor::randn(&[n], 0.1, &mut rng);
            let q = Bf16Matrix::round(w.data(), n, k);
            for bias in [Some(b.data()), None] {
                let mut want = vec![f32::NAN; m * n];
                reference::matmul(&q, &mut want, a.data(), bias, m);
                for isa in Isa::available() {
                    for t in [1, 2] {
                        let rt = Runtime::builder().threads(t).isa(isa).build().unwrap();
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| q.matmul(&mut got, a.data(), bias, m));
                        assert!(
                            same_bits(&got, &want),
                            "{isa:?} ({:?}) threads {t}: m {m} k {k} n {n}",
                            Path::at(isa)
                        );
                        // one row alone = the same row in the batch
                        let last = m - 1;
                        let mut one = vec![f32::NAN; n];
                        rt.install(|| q.matmul(&mut one, &a.data()[last * k..], bias, 1));
                        assert!(same_bits(&one, &want[last * n..]));
                    }
                }
            }
            // and the result is near the f32 product: each term's two roundings are
            // within 2⁻⁸ of it, relative
            let exact = crate::ops::linear(&a, &w, Some(&b)).unwrap();
            let mut want = vec![f32::NAN; m * n];
            reference::matmul(&q, &mut want, a.data(), Some(b.data()), m);
            for i in 0..m {
                for j in 0..n {
                    let bound: f32 = (0..k)
                        .map(|p| (a.data()[i * k + p] * w.data()[j * k + p]).abs())
                        .sum::<f32>()
                        * (2.0 / 256.0)
                        + 1e-6;
                    let d = (exact.data()[i * n + j] - want[i * n + j]).abs();
                    assert!(d <= bound, "m {m} k {k} n {n} ({i}, {j}): {d} > {bound}");
                }
            }
        }
    }

    /// Numbers at the edges of f32 (tiny ones whose products and sums are denormal,
    /// denormal inputs, huge ones whose products overflow, zeros of both signs) give the
    /// twin's bits on every level: the flushes and the order are the instruction's. Each
    /// row of A and of W keeps to one regime, so every pair of regimes meets.
    #[test]
    fn tiny_and_huge_numbers_equal_the_twin_on_every_level() {
        let mut rng = StdRng::seed_from_u64(17);
        let (m, k, n) = (12, 37, 40);
        let row = |regime: usize, rng: &mut StdRng| -> Vec<f32> {
            (0..k)
                .map(|_| {
                    let (e, sign) = match regime {
                        0 => (rng.random_range(-70..-58), rng.random::<bool>()), // denormal products
                        1 => (rng.random_range(-130..-120), rng.random::<bool>()), // denormal inputs
                        2 => (rng.random_range(58..66), false), // overflowing products
                        _ => (rng.random_range(-3..3), rng.random::<bool>()),
                    };
                    let s = if sign { -1.0 } else { 1.0 };
                    if rng.random_range(0..8) == 0 {
                        0.0 * s
                    } else {
                        s * rng.random_range(1.0f32..2.0) * 2f32.powi(e)
                    }
                })
                .collect()
        };
        let w: Vec<f32> = (0..n).flat_map(|j| row(j % 4, &mut rng)).collect();
        let a: Vec<f32> = (0..m).flat_map(|i| row(i % 4, &mut rng)).collect();
        let q = Bf16Matrix::round(&w, n, k);
        let mut want = vec![f32::NAN; m * n];
        reference::matmul(&q, &mut want, &a, None, m);
        // denormal inputs read as zeros, huge × huge overflows, tiny × tiny is partly flushed
        assert!(want[n] == 0.0 && want[2 * n + 2].is_infinite(), "{want:?}");
        for isa in Isa::available() {
            let rt = Runtime::builder().threads(1).isa(isa).build().unwrap();
            let mut got = vec![f32::NAN; m * n];
            rt.install(|| q.matmul(&mut got, &a, None, m));
            for (x, y) in got.iter().zip(&want) {
                assert!(
                    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                    "{isa:?}: {x:e} vs the twin's {y:e}"
                );
            }
        }
    }

    /// Every path this CPU can run (not only the one each level picks: on a CPU with
    /// AMX the Avx512 level runs the FMAs, not `vdpbf16ps`) gives the twin's bits, on
    /// the shapes above and on numbers at the edges of f32 (where the FMA path meets
    /// denormal steps and does its tile again with the flushes).
    #[test]
    fn every_bf16_path_equals_the_twin() {
        let mut rng = StdRng::seed_from_u64(18);
        /// (m, k, n, W, A)
        type Case = (usize, usize, usize, Vec<f32>, Vec<f32>);
        let mut cases: Vec<Case> = Vec::new();
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 7, 5),
            (3, 33, 17),
            (9, 64, 48),
            (17, 384, 384),
            (70, 1536, 384),
        ] {
            let w = Tensor::randn(&[n, k], 0.05, &mut rng);
            let a = Tensor::randn(&[m, k], 1.0, &mut rng);
            cases.push((m, k, n, w.data().to_vec(), a.data().to_vec()));
        }
        // tiny and huge numbers, each row in one regime (as in the test above)
        let (m, k, n) = (12, 37, 40);
        let edge = |i: usize, rng: &mut StdRng| -> Vec<f32> {
            (0..k)
                .map(|_| {
                    let e = match i % 4 {
                        0 => rng.random_range(-70..-58),
                        1 => rng.random_range(-130..-120),
                        2 => rng.random_range(58..66),
                        _ => rng.random_range(-3..3),
                    };
                    let s = if rng.random::<bool>() { -1.0 } else { 1.0 };
                    s * rng.random_range(1.0f32..2.0) * 2f32.powi(e)
                })
                .collect()
        };
        let w: Vec<f32> = (0..n).flat_map(|j| edge(j, &mut rng)).collect();
        let a: Vec<f32> = (0..m).flat_map(|i| edge(i, &mut rng)).collect();
        cases.push((m, k, n, w, a));
        let paths = Path::available();
        assert!(paths.contains(&Path::Plain));
        for (m, k, n, w, a) in &cases {
            let (m, k, n) = (*m, *k, *n);
            let q = Bf16Matrix::round(w, n, k);
            let b: Vec<f32> = (0..n).map(|j| (j as f32 - 7.0) * 0.01).collect();
            for bias in [Some(&b[..]), None] {
                let mut want = vec![f32::NAN; m * n];
                reference::matmul(&q, &mut want, a, bias, m);
                for &path in &paths {
                    for t in [1, 2] {
                        let rt = Runtime::builder().threads(t).build().unwrap();
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| q.matmul_on(path, &mut got, a, bias, m));
                        for (x, y) in got.iter().zip(&want) {
                            assert!(
                                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                                "{path:?} threads {t}: m {m} k {k} n {n}: {x:e} vs the twin's {y:e}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The vectorised rounding of a row gives [`to_bf16`]'s numbers for every kind of
    /// f32 (NaNs, infinities, denormals, ties, the largest numbers), odd lengths too.
    #[test]
    fn rounding_a_row_equals_to_bf16() {
        let mut rng = StdRng::seed_from_u64(19);
        let mut x: Vec<f32> = (0..2000)
            .map(|_| f32::from_bits(rng.random::<u32>()))
            .collect();
        x.extend([
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -f32::MAX,
            f32::MIN_POSITIVE,
            -f32::from_bits(1),
            0.0,
            -0.0,
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
        ]);
        for len in [0, 1, 7, 8, 9, 17, x.len()] {
            let row = &x[x.len() - len..];
            let mut plain = vec![0.0f32; len.next_multiple_of(2)];
            let mut fast = vec![1.0f32; len.next_multiple_of(2)];
            round_row_wide_plain(row, &mut plain);
            round_row_wide(row, &mut fast);
            for (p, f) in plain.iter().zip(&fast) {
                assert_eq!(p.to_bits(), f.to_bits(), "length {len}");
            }
            for (g, pair) in plain.chunks_exact(2).enumerate() {
                let want = |i: usize| row.get(i).map_or(0, |&v| to_bf16(v));
                assert_eq!(pair[0].to_bits() >> 16, u32::from(want(2 * g + 1)));
                assert_eq!(pair[1].to_bits() >> 16, u32::from(want(2 * g)));
            }
        }
        // the pairs `vdpbf16ps` and the emulated paths read, at every length up to 40
        // (whole and partial groups of sixteen) and the whole row
        for len in (0..=40).chain([x.len() - 1, x.len()]) {
            let row = &x[x.len() - len..];
            let mut plain = vec![0u32; len.div_ceil(2)];
            let mut fast = vec![u32::MAX; len.div_ceil(2)];
            round_row_plain(row, &mut plain);
            round_row(row, &mut fast);
            assert_eq!(plain, fast, "length {len}");
            for (g, &pair) in plain.iter().enumerate() {
                let want = |i: usize| u32::from(row.get(i).map_or(0, |&v| to_bf16(v)));
                assert_eq!(pair, want(2 * g) | (want(2 * g + 1) << 16), "length {len}");
            }
        }
    }

    /// Rounding to bf16: ties to even, denormals to signed zeros, overflow to
    /// infinity, NaN kept.
    #[test]
    fn rounding_to_bf16_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: ties to the even one (1)
        assert_eq!(to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: ties to 1 + 2⁻⁶
        assert_eq!(to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        assert_eq!(to_bf16(-f32::from_bits(1)), 0x8000);
        assert_eq!(to_bf16(f32::MAX), 0x7f80);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        let q = Bf16Matrix::round(&[0.1, -3.0, 1e-3], 1, 3);
        assert!(q.max_error() > 0.0 && q.max_error() <= 0.1 / 256.0);
    }
}
