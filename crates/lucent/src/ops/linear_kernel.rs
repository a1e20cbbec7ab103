//! lucent's own kernel for the products of `nn.Linear` with f32 weights, many rows at a
//! time (an encoder's tokens, a prompt): C = A · Wᵀ + b, W stored (out, in) as
//! checkpoints store it (or packed once, [`PackedNt`]), the bias added in the same
//! pass.
//!
//! # One order for every output number
//!
//! Each output number C[i, j] is the dot product of row i of A with row j of W, always
//! summed in the same order, whatever the number of rows, the row's place in the batch,
//! the tile it falls in or the thread that computes it: per block of [`KC`] = 256 terms
//! a fused multiply-add chain from 0 over p in order, the blocks' sums added to the bias
//! (or 0) in order — the order a BLIS-style GEMM keeps per number, with shorter chains
//! (less rounding) than one chain over all k.
//!
//! So a sentence's embedding is the same bit for bit whether it is embedded alone or in
//! any batch (sentence-transformers cannot promise this: sentence-transformers#2312),
//! trailing zero terms (masked keys in attention) change nothing, and the result is
//! equal on every instruction-set level: the AVX2 kernel and its plain twin
//! ([`reference`]) follow the same order, and the tests compare their bits.
//!
//! # The AVX2 kernel
//!
//! W is packed per call, a panel at a time just before its first tiles (while the
//! next panel's rows are fetched), into panels of 16 columns laid out p-major (16
//! consecutive numbers per p: two vector loads), padded with zero columns; the copy
//! goes 8 × 8 at a time through a register transpose. A model that runs many small
//! products (an encoder embedding one sentence) keeps W packed once instead
//! ([`PackedNt`], [`matmul_nt_packed`]): the tiles then stream the panels from memory
//! front to back, the next one fetched while the current one is used. Tiles of
//! 6 rows × 16 columns: 12 accumulators, per p two loads of W and six broadcasts of A
//! for 12 fused multiply-adds. k is cut into blocks of [`KC`] (the chain goes on through
//! C between blocks, so the order is unchanged), columns into packed blocks of [`NC`],
//! rows into blocks of [`MC`]: one panel (16 × KC) stays in L1 while the row tiles of a
//! block pass it, the block of A in L2 while the panels pass it. Large products split their rows (or, for few rows, their
//! columns) over the runtime's threads; the split does not change any number.
//!
//! At the Avx512 level the same loops take tiles of [`MR512`] = 12 rows × 16 columns,
//! one 512-bit register a row (`avx2::tile512`), and attention's P · V strips of 12 rows
//! (`avx2::strip_pv512`): per term one load of the panel (or of V's row) and 12 fused
//! multiply-adds, every number the same chain as in the AVX2 tiles, so the same bits.
//! On a core whose 512-bit FMAs run at full width (Zen 5) this doubles the products'
//! rate; on one that splits them into halves (Zen 4) it does not (docs/whisper.md).

use crate::threads::threads;

/// Rows of a tile.
const MR: usize = 6;
/// Rows of a tile at the Avx512 level (one 512-bit register of 16 columns a row).
const MR512: usize = 12;
/// Columns of a tile (and of a packed panel).
const NR: usize = 16;
/// Terms of the dot products per block (one panel block: NR × KC floats, 16 KB).
const KC: usize = 256;
/// Columns per packed block (NC × KC floats, 256 KB: L2 or L3).
const NC: usize = 256;
/// Rows of A per block (MC × KC floats, 48 KB: L2), passed by every panel of a block.
const MC: usize = 48;
/// Multiply-adds from which a product is split over threads.
const PARALLEL_MIN: usize = 1 << 20;

/// C (m × n) = A (m × k) · Wᵀ + bias, W stored (n × k); all row-major, C overwritten.
/// The order of every sum is fixed (module docs): the result does not depend on m, on
/// the threads, or on the instruction-set level.
///
/// Panics if a slice's length does not match its dimensions (an internal invariant:
/// callers derive the dimensions from checked tensor shapes).
///
/// # Shapes
/// c: (m, n), a: (m, k), w: (n, k), bias: (n)
pub fn matmul_nt(
    c: &mut [f32],
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) {
    check_sizes(c, a, w.len(), bias, m, k, n);
    matmul_from(c, a, Source::InPlace(w), bias, m, k, n);
}

/// [`matmul_nt`] with W packed once ([`PackedNt`]): the same numbers, without packing
/// W's blocks on every call.
///
/// Panics if a slice's length does not match the dimensions (an internal invariant).
///
/// # Shapes
/// c: (m, n), a: (m, k), w: (n, k) packed, bias: (n)
pub fn matmul_nt_packed(c: &mut [f32], a: &[f32], w: &PackedNt, bias: Option<&[f32]>, m: usize) {
    let (k, n) = (w.k, w.n);
    check_sizes(c, a, n * k, bias, m, k, n);
    matmul_from(c, a, Source::Packed(w), bias, m, k, n);
}

/// W (n × k) packed once into the kernel's panels, in the order a product reads them:
/// per block of [`NC`] columns, per block of [`KC`] terms, its panels one after the
/// other, each `kc` rows of 16 numbers (row p: the panel's 16 columns' terms at p, zero
/// columns past n) — the blocks [`matmul_nt`] packs on every call, kept. A pure copy of
/// W's numbers: a product through it equals [`matmul_nt`]'s bit for bit, and streams W
/// from memory front to back instead of copying each block first.
#[derive(Clone, Debug, Default)]
pub struct PackedNt {
    n: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedNt {
    /// Pack W (n × k, row-major).
    ///
    /// Panics if `w.len() != n · k` (an internal invariant: callers pass a checked
    /// tensor's dimensions).
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn new(w: &[f32], n: usize, k: usize) -> PackedNt {
        let mut p = PackedNt::default();
        p.repack(w, n, k);
        p
    }

    /// Pack another W (n × k, row-major) into this one's memory (attention packs each
    /// head's keys once, for all its query blocks, into a buffer kept per thread).
    ///
    /// Panics if `w.len() != n · k` (an internal invariant).
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn repack(&mut self, w: &[f32], n: usize, k: usize) {
        assert_eq!(w.len(), n * k, "PackedNt::repack sizes"); // ok: internal invariant
        (self.n, self.k) = (n, k);
        self.data.clear();
        // zero columns past n in the last panel
        self.data.resize(n.div_ceil(NR) * NR * k, 0.0);
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            for kb in (0..k).step_by(KC) {
                let at = self.panel_at(j - j % NR, kb) + j % NR;
                for (q, &x) in row[kb..(kb + KC).min(k)].iter().enumerate() {
                    self.data[at + q * NR] = x;
                }
            }
        }
    }

    /// Where the panel of columns j .. j + 16 (j a multiple of 16, j < n) starts for
    /// the terms kb .. kb + KC (kb a multiple of KC, kb < k).
    fn panel_at(&self, j: usize, kb: usize) -> usize {
        let block = j / NC;
        let panels = ((block * NC + NC).min(self.n) - block * NC).div_ceil(NR);
        let kc = KC.min(self.k - kb);
        block * NC * self.k + kb * panels * NR + (j % NC) / NR * kc * NR
    }

    /// W's rows (out features).
    pub fn n(&self) -> usize {
        self.n
    }

    /// W's columns (in features).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Row j of W (k numbers), copied out of the panels.
    fn row(&self, j: usize) -> Vec<f32> {
        (0..self.k)
            .map(|p| {
                let kb = p - p % KC;
                self.data[self.panel_at(j - j % NR, kb) + (p - kb) * NR + j % NR]
            })
            .collect()
    }
}

/// Where a product reads W: in place (row-major, packed block by block per call) or
/// packed once ([`PackedNt`]).
#[derive(Clone, Copy)]
enum Source<'a> {
    InPlace(&'a [f32]),
    Packed(&'a PackedNt),
}

/// C (m × n) = A · Wᵀ + bias from `w` (sizes checked by the callers), split over the
/// threads when large.
fn matmul_from(
    c: &mut [f32],
    a: &[f32],
    w: Source,
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let workers = threads();
    if workers <= 1 || m * n * k < PARALLEL_MIN {
        serial(c, a, w, bias, m, k, n, 0, n);
        return;
    }
    // The tasks go to the pass's team when one runs (a sentence's many small
    // products), else to the runtime's pool (crate::threads::for_each_index).
    if m >= workers * MR * 4 {
        // Row blocks, one task each: every task owns whole rows of C.
        let rows = m.div_ceil(workers * 2).next_multiple_of(MR).max(MR);
        crate::threads::for_each_chunk_mut(c, rows * n, |t, c| {
            let a = &a[t * rows * k..][..c.len() / n * k];
            serial(c, a, w, bias, c.len() / n, k, n, 0, n);
        });
    } else {
        // Few rows: column blocks, one task each, every task owns whole columns of C.
        let cols = n.div_ceil(workers).next_multiple_of(NR);
        // SAFETY: each call writes only its columns j0..j1 of C's m rows.
        unsafe {
            crate::threads::for_each_column_block(c, n, cols, |c, j0, j1| {
                serial(c, a, w, bias, m, k, n, j0, j1);
            })
        };
    }
}

/// Panics unless c is m×n, a m×k, w n×k and bias (if any) n (an internal invariant).
fn check_sizes(
    c: &[f32],
    a: &[f32],
    w_len: usize,
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) {
    assert!(
        c.len() == m * n && a.len() == m * k && w_len == n * k && bias.is_none_or(|b| b.len() == n),
        "matmul_nt sizes: c {}, a {}, w {w_len} for m {m}, k {k}, n {n}",
        c.len(),
        a.len(),
    ); // ok: internal invariant
}

/// [`matmul_nt`] on the calling thread only (for kernels that already run one task per
/// thread, such as attention's heads). Same numbers.
///
/// # Shapes
/// c: (m, n), a: (m, k), w: (n, k), bias: (n)
pub fn matmul_nt_serial(
    c: &mut [f32],
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) {
    check_sizes(c, a, w.len(), bias, m, k, n);
    if m > 0 && n > 0 {
        serial(c, a, Source::InPlace(w), bias, m, k, n, 0, n);
    }
}

/// [`matmul_nt_packed`] on the calling thread only (attention's heads, one task each,
/// against keys packed once per head). Same numbers.
///
/// # Shapes
/// c: (m, n), a: (m, k), w: (n, k) packed, bias: (n)
pub fn matmul_nt_packed_serial(
    c: &mut [f32],
    a: &[f32],
    w: &PackedNt,
    bias: Option<&[f32]>,
    m: usize,
) {
    let (k, n) = (w.k, w.n);
    check_sizes(c, a, n * k, bias, m, k, n);
    if m > 0 && n > 0 {
        serial(c, a, Source::Packed(w), bias, m, k, n, 0, n);
    }
}

/// C (m × n) = P (m × k) · V (k × n), V row-major (attention's weighted sum of value
/// rows): each output number is summed per block of [`KC`] keys (a fused multiply-add
/// chain from 0 over the block's keys in order), the blocks' sums added in order. So a
/// row's numbers do not depend on the other rows, and trailing terms with P = 0 (masked
/// keys) leave them as they are. On the calling thread.
///
/// # Shapes
/// c: (m, n), p: (m, k), v: (k, n)
pub fn weighted_rows(c: &mut [f32], p: &[f32], v: &[f32], m: usize, k: usize, n: usize) {
    assert!(
        c.len() == m * n && p.len() == m * k && v.len() == k * n,
        "weighted_rows sizes"
    ); // ok: internal invariant
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= crate::runtime::Isa::Avx512 {
        // SAFETY: the Avx512 level includes AVX-512 F, AVX2 and FMA; the sizes were
        // asserted above.
        unsafe { avx2::weighted_rows512(c, p, v, m, k, n) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::ops::simd::has_avx2_fma() {
        // SAFETY: AVX2 + FMA are present; the sizes were asserted above.
        unsafe { avx2::weighted_rows(c, p, v, m, k, n) };
        return;
    }
    reference::weighted_rows(c, p, v, m, k, n);
}

/// Columns j0..j1 of C = A · Wᵀ + b on the calling thread (C, A: m rows; C's row
/// stride n).
#[allow(clippy::too_many_arguments)]
fn serial(
    c: &mut [f32],
    a: &[f32],
    w: Source,
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
    j0: usize,
    j1: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::simd::has_avx2_fma() {
        // SAFETY: AVX2 + FMA are present (runtime level); the slices' sizes hold (the
        // callers' assertions: c m×n, a m×k, w n×k, bias n), and j0 ≤ j1 ≤ n.
        unsafe {
            match w {
                // One row (a decode step's query against the cached keys): packing W
                // would cost more than the product; W is read in place instead.
                Source::InPlace(w) if m == 1 => avx2::one_row(c, a, w, bias, k, j0, j1),
                _ if crate::runtime::isa() >= crate::runtime::Isa::Avx512 => {
                    avx2::blocked512(c, a, w, bias, m, k, n, j0, j1)
                }
                _ => avx2::blocked(c, a, w, bias, m, k, n, j0, j1),
            }
        }
        return;
    }
    for j in j0..j1 {
        let start = bias.map_or(0.0, |b| b[j]);
        let packed_row;
        let wj = match w {
            Source::InPlace(w) => &w[j * k..(j + 1) * k],
            Source::Packed(p) => {
                packed_row = p.row(j);
                &packed_row[..]
            }
        };
        for i in 0..m {
            c[i * n + j] = reference::dot_from(start, &a[i * k..(i + 1) * k], wj);
        }
    }
}

/// The plain twin: every output number in the kernel's order (module docs), one at a
/// time.
pub mod reference {
    use super::KC;

    /// start + Σ_p a[p]·w[p] in the kernel's order: per block of [`KC`] terms a fused
    /// multiply-add chain from 0, the blocks' sums added to `start` (the bias, or 0) in
    /// order.
    pub fn dot_from(start: f32, a: &[f32], w: &[f32]) -> f32 {
        a.chunks(KC).zip(w.chunks(KC)).fold(start, |s, (a, w)| {
            s + a.iter().zip(w).fold(0.0f32, |t, (&x, &y)| x.mul_add(y, t))
        })
    }

    /// C (m × n) = P (m × k) · V (k × n): each number, per block of [`KC`] keys a fused
    /// multiply-add chain from 0, the blocks' sums added in order.
    pub fn weighted_rows(c: &mut [f32], p: &[f32], v: &[f32], m: usize, k: usize, n: usize) {
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f32;
                for q0 in (0..k).step_by(KC) {
                    let mut t = 0.0f32;
                    for q in q0..(q0 + KC).min(k) {
                        t = p[i * k + q].mul_add(v[q * n + j], t);
                    }
                    s += t;
                }
                c[i * n + j] = s;
            }
        }
    }

    /// C (m × n) = A (m × k) · Wᵀ + bias, one number at a time.
    pub fn matmul_nt(
        c: &mut [f32],
        a: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        m: usize,
        k: usize,
        n: usize,
    ) {
        for i in 0..m {
            for j in 0..n {
                let start = bias.map_or(0.0, |b| b[j]);
                c[i * n + j] = dot_from(start, &a[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Source, KC, MC, MR, MR512, NC, NR};

    /// Columns j0..j1 of C = A · Wᵀ + b, blocked for the caches (module docs).
    ///
    /// # Safety
    /// AVX2 + FMA present; c covers m×n, a m×k, w n×k, bias (if any) n; j0 ≤ j1 ≤ n.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn blocked(
        c: &mut [f32],
        a: &[f32],
        w: Source,
        bias: Option<&[f32]>,
        m: usize,
        k: usize,
        n: usize,
        j0: usize,
        j1: usize,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { blocked_with::<false>(c, a, w, bias, m, k, n, j0, j1) }
    }

    /// [`blocked`] with tiles of 12 rows × 16 columns in 512-bit registers
    /// ([`tile512`]): the same blocks, panels and chains, so the same bits.
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and FMA present; the slices as [`blocked`]'s.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn blocked512(
        c: &mut [f32],
        a: &[f32],
        w: Source,
        bias: Option<&[f32]>,
        m: usize,
        k: usize,
        n: usize,
        j0: usize,
        j1: usize,
    ) {
        // SAFETY: forwarded from this function's contract (AVX-512 F for WIDE).
        unsafe { blocked_with::<true>(c, a, w, bias, m, k, n, j0, j1) }
    }

    /// [`blocked`]'s loops; `WIDE`: [`tile512`]'s tiles of [`MR512`] rows (the caller
    /// has AVX-512 F), else [`tile`]'s of [`MR`].
    ///
    /// # Safety
    /// As [`blocked`]'s, and AVX-512 F present if `WIDE`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn blocked_with<const WIDE: bool>(
        c: &mut [f32],
        a: &[f32],
        w: Source,
        bias: Option<&[f32]>,
        m: usize,
        k: usize,
        n: usize,
        j0: usize,
        j1: usize,
    ) {
        let mr = if WIDE { MR512 } else { MR };
        thread_local! {
            /// This thread's panels of W read in place, reused from product to product.
            static PANELS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        // (NC / NR) panels of (kc, NR), for W read in place (every panel is packed
        // before a tile reads it).
        let in_place = matches!(w, Source::InPlace(_));
        let mut packed = if in_place { PANELS.take() } else { Vec::new() };
        packed.resize(if in_place { NC * KC } else { 0 }, 0.0);
        let (cp, ap) = (c.as_mut_ptr(), a.as_ptr());
        let mut jb = j0;
        while jb < j1 {
            let je = (jb + NC).min(j1);
            let panels = (je - jb).div_ceil(NR);
            let mut kb = 0;
            loop {
                let kc = KC.min(k - kb);
                let first = kb == 0;
                let mut ib = 0;
                while ib < m {
                    let ie = (ib + MC).min(m);
                    for t in 0..panels {
                        let j = jb + t * NR;
                        // The panel (kc rows of 16 at stride NR), and for the first row
                        // tile of a packed-once W the next panel, fetched meanwhile.
                        let (pt, ahead) = match w {
                            Source::InPlace(w) => {
                                if ib == 0 {
                                    // Each panel packed just before the first row block
                                    // meets it (while the next one's rows are fetched):
                                    // the copy from memory overlaps the products.
                                    // SAFETY: AVX2 present (this function's contract); the
                                    // panel lies inside W (je ≤ n, kb + kc ≤ k) and
                                    // `packed` holds NC × KC.
                                    unsafe { pack_panel(&mut packed, w, k, jb, je, kb, kc, t) };
                                }
                                (packed.as_ptr().add(t * KC * NR), std::ptr::null())
                            }
                            Source::Packed(p) => {
                                // SAFETY: j < n is a multiple of NR (j0 is, and NC is), so
                                // its panel exists; kb < k.
                                let at =
                                    |j: usize| unsafe { p.data.as_ptr().add(p.panel_at(j, kb)) };
                                let next = if ib == 0 && t + 1 < panels {
                                    at(j + NR)
                                } else {
                                    std::ptr::null()
                                };
                                (at(j), next)
                            }
                        };
                        // The first row block's tiles share the next panel's fetch: tile
                        // q of `tiles` takes its lines q, q + tiles, ...
                        let tiles = (ie - ib).div_ceil(mr);
                        let mut q = 0;
                        let mut i = ib;
                        while i < ie {
                            let rows = (ie - i).min(mr);
                            let cols = (je - j).min(NR);
                            let bt = match bias {
                                Some(b) if first => b[j..j + cols].as_ptr(),
                                _ => std::ptr::null(),
                            };
                            // SAFETY: rows i..i+rows < m of A (columns kb..kb+kc < k) and of
                            // C (columns j..j+cols ≤ n); the panel holds kc × 16; bias (if
                            // not null) covers cols; `ahead` (if not null) is a hint only.
                            unsafe {
                                let (ct, at) = (cp.add(i * n + j), ap.add(i * k + kb));
                                let pf = (ahead, q, tiles);
                                if WIDE {
                                    let t = (ct, n, at, k, pt, kc, cols, bt, first, pf);
                                    match rows {
                                        12 => tile512::<12>(t),
                                        11 => tile512::<11>(t),
                                        10 => tile512::<10>(t),
                                        9 => tile512::<9>(t),
                                        8 => tile512::<8>(t),
                                        7 => tile512::<7>(t),
                                        6 => tile512::<6>(t),
                                        5 => tile512::<5>(t),
                                        4 => tile512::<4>(t),
                                        3 => tile512::<3>(t),
                                        2 => tile512::<2>(t),
                                        _ => tile512::<1>(t),
                                    }
                                } else {
                                    match rows {
                                        6 => tile::<6>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                        5 => tile::<5>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                        4 => tile::<4>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                        3 => tile::<3>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                        2 => tile::<2>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                        _ => tile::<1>(ct, n, at, k, pt, kc, cols, bt, first, pf),
                                    }
                                }
                            }
                            q += 1;
                            i += rows;
                        }
                    }
                    ib = ie;
                }
                kb += kc;
                if kb >= k {
                    break;
                }
            }
            jb = je;
        }
        if in_place {
            PANELS.set(packed);
        }
    }

    /// Pack panel t of W[jb..je, kb..kb+kc] into `packed`: columns jb + 16t up to
    /// jb + 16t + 15 (zeros past je) at t · KC · NR, its row p the 16 columns' terms at kb + p. A
    /// pure copy (the numbers are W's), 8 columns × 8 terms at a time: eight loads
    /// along W's rows, an 8 × 8 transpose in registers, eight stores along the panel's
    /// rows — the strided scalar copy this replaces took two thirds of a one-sentence
    /// embedding's time. The edges (fewer than 8 columns or terms left) one by one.
    /// The next panel's rows are prefetched as this one's are read.
    ///
    /// # Safety
    /// AVX2 present; w covers rows jb..je of k numbers with kb + kc ≤ k; packed holds
    /// (je - jb).div_ceil(NR) panels of KC × NR, and t is one of them.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pack_panel(
        packed: &mut [f32],
        w: &[f32],
        k: usize,
        jb: usize,
        je: usize,
        kb: usize,
        kc: usize,
        t: usize,
    ) {
        let panel = &mut packed[t * KC * NR..][..kc * NR];
        for half in 0..NR / 8 {
            let c0 = jb + t * NR + half * 8;
            let mut p = 0;
            if c0 + 8 <= je {
                while p + 8 <= kc {
                    if p % 16 == 0 {
                        // The next panel's rows, the same 16 terms (a hint: past W's
                        // end it reads nothing, and the address is never dereferenced).
                        for q in 0..8 {
                            let ahead = w.as_ptr().wrapping_add((c0 + NR + q) * k + kb + p);
                            _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                        }
                    }
                    // SAFETY: rows c0..c0+8 ≤ je of W, terms kb+p..kb+p+8 ≤ kb+kc ≤ k;
                    // panel rows p..p+8 ≤ kc, lanes half·8..half·8+8 ≤ NR.
                    unsafe {
                        let r: [__m256; 8] = std::array::from_fn(|q| {
                            _mm256_loadu_ps(w.as_ptr().add((c0 + q) * k + kb + p))
                        });
                        for (e, v) in transpose8(r).iter().enumerate() {
                            _mm256_storeu_ps(panel.as_mut_ptr().add((p + e) * NR + half * 8), *v);
                        }
                    }
                    p += 8;
                }
            }
            for pp in p..kc {
                for q in 0..8 {
                    let j = c0 + q;
                    panel[pp * NR + half * 8 + q] = if j < je { w[j * k + kb + pp] } else { 0.0 };
                }
            }
        }
    }

    /// Columns j0..j1 of one row c = a · Wᵀ + b, W read in place: 8 columns at a time,
    /// each 8 × 8 block of W transposed in registers so that every column keeps its own
    /// chain over p in order (the kernel's order); the last n mod 8 columns one at a time
    /// as the twin computes them.
    ///
    /// # Safety
    /// AVX2 + FMA present; c covers j1 numbers, a k, w j1 rows of k, bias (if any) j1;
    /// j0 ≤ j1.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn one_row(
        c: &mut [f32],
        a: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        k: usize,
        j0: usize,
        j1: usize,
    ) {
        let mut j = j0;
        while j + 8 <= j1 {
            let mut sum = match bias {
                // SAFETY: columns j..j+8 ≤ j1 of the bias.
                Some(b) => unsafe { _mm256_loadu_ps(b.as_ptr().add(j)) },
                None => _mm256_setzero_ps(),
            };
            let mut kb = 0;
            // The eight rows are one stretch of W read as eight interleaved streams,
            // which the hardware prefetcher does not follow: each step of 8 terms asks
            // for the stretch ONE_ROW_AHEAD bytes on, as many bytes as it reads (a
            // hint: it cannot fault).
            let mut ahead = w
                .as_ptr()
                .wrapping_add(j * k)
                .cast::<i8>()
                .wrapping_add(ONE_ROW_AHEAD);
            while kb < k {
                let ke = (kb + KC).min(k);
                let mut acc = _mm256_setzero_ps();
                let mut p = kb;
                // SAFETY (all accesses): rows j..j+8 ≤ j1 of W, positions p..p+8 ≤ ke ≤ k.
                unsafe {
                    while p + 8 <= ke {
                        for line in 0..4 {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line));
                        }
                        ahead = ahead.wrapping_add(256);
                        let r: [__m256; 8] = std::array::from_fn(|q| {
                            _mm256_loadu_ps(w.as_ptr().add((j + q) * k + p))
                        });
                        let t = transpose8(r); // t[e] = column block's terms at p + e
                        for (e, t) in t.iter().enumerate() {
                            acc = _mm256_fmadd_ps(_mm256_set1_ps(a[p + e]), *t, acc);
                        }
                        p += 8;
                    }
                    while p < ke {
                        let col = _mm256_setr_ps(
                            w[j * k + p],
                            w[(j + 1) * k + p],
                            w[(j + 2) * k + p],
                            w[(j + 3) * k + p],
                            w[(j + 4) * k + p],
                            w[(j + 5) * k + p],
                            w[(j + 6) * k + p],
                            w[(j + 7) * k + p],
                        );
                        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[p]), col, acc);
                        p += 1;
                    }
                }
                sum = _mm256_add_ps(sum, acc);
                kb = ke;
            }
            // SAFETY: columns j..j+8 ≤ j1 of c.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr().add(j), sum) };
            j += 8;
        }
        for j in j..j1 {
            let start = bias.map_or(0.0, |b| b[j]);
            c[j] = super::reference::dot_from(start, a, &w[j * k..(j + 1) * k]);
        }
    }

    /// How far ahead [`one_row`] prefetches W, in bytes (a decode step's scores over
    /// the cross-attention keys of a 30-s window: 1,500 rows per head).
    const ONE_ROW_AHEAD: usize = 8192;

    /// The 8 × 8 transpose: out[e] lane q = rows[q] lane e.
    #[inline(always)]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        // SAFETY: register shuffles only (AVX present: called from AVX2 code).
        unsafe {
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ]
        }
    }

    /// C = P · V in the order of [`super::weighted_rows`]. Many rows (a query block of
    /// an encoder): per strip of 16 columns and block of [`KC`] keys, that stretch of V
    /// (KC × 16 numbers, 16 KB: L1) is passed by every row, 6 rows at a time sharing
    /// each loaded row of V, the block's sums added to C so far. The columns past the
    /// last whole strip, and a single row (a decode step), as [`rows_pv`] takes them.
    /// The same chain per number either way.
    ///
    /// # Safety
    /// AVX2 + FMA present; c covers m×n, p m×k, v k×n.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn weighted_rows(c: &mut [f32], p: &[f32], v: &[f32], m: usize, k: usize, n: usize) {
        // SAFETY: forwarded from this function's contract.
        unsafe { weighted_rows_with::<false>(c, p, v, m, k, n) }
    }

    /// [`weighted_rows`] with strips of 12 rows × 16 columns in 512-bit registers
    /// ([`strip_pv512`]): the same chains, so the same bits.
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and FMA present; the slices as [`weighted_rows`]'s.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn weighted_rows512(
        c: &mut [f32],
        p: &[f32],
        v: &[f32],
        m: usize,
        k: usize,
        n: usize,
    ) {
        // SAFETY: forwarded from this function's contract (AVX-512 F for WIDE).
        unsafe { weighted_rows_with::<true>(c, p, v, m, k, n) }
    }

    /// [`weighted_rows`]'s loops; `WIDE`: [`strip_pv512`]'s strips of [`MR512`] rows
    /// (the caller has AVX-512 F), else [`strip_pv`]'s of 6.
    ///
    /// # Safety
    /// As [`weighted_rows`]'s, and AVX-512 F present if `WIDE`.
    #[inline(always)]
    unsafe fn weighted_rows_with<const WIDE: bool>(
        c: &mut [f32],
        p: &[f32],
        v: &[f32],
        m: usize,
        k: usize,
        n: usize,
    ) {
        let mr = if WIDE { MR512 } else { 6 };
        let (cp, pp, vp) = (c.as_mut_ptr(), p.as_ptr(), v.as_ptr());
        let mut j0 = 0;
        if m > 1 && k > 0 {
            while j0 + 16 <= n {
                for q0 in (0..k).step_by(KC) {
                    let q1 = (q0 + KC).min(k);
                    let mut i = 0;
                    while i < m {
                        let rows = (m - i).min(mr);
                        // SAFETY: rows i..i+rows < m of P and C; columns j0..j0+16 ≤ n of
                        // V and C; keys q0..q1 ≤ k.
                        unsafe {
                            let (ct, pt) = (cp.add(i * n + j0), pp.add(i * k));
                            let at = (q0, q1, q0 == 0);
                            if WIDE {
                                let s = (ct, pt, vp.add(j0), k, n, at);
                                match rows {
                                    12 => strip_pv512::<12>(s),
                                    11 => strip_pv512::<11>(s),
                                    10 => strip_pv512::<10>(s),
                                    9 => strip_pv512::<9>(s),
                                    8 => strip_pv512::<8>(s),
                                    7 => strip_pv512::<7>(s),
                                    6 => strip_pv512::<6>(s),
                                    5 => strip_pv512::<5>(s),
                                    4 => strip_pv512::<4>(s),
                                    3 => strip_pv512::<3>(s),
                                    2 => strip_pv512::<2>(s),
                                    _ => strip_pv512::<1>(s),
                                }
                                i += rows;
                                continue;
                            }
                            match rows {
                                6 => strip_pv::<6>(ct, pt, vp.add(j0), k, n, at),
                                5 => strip_pv::<5>(ct, pt, vp.add(j0), k, n, at),
                                4 => strip_pv::<4>(ct, pt, vp.add(j0), k, n, at),
                                3 => strip_pv::<3>(ct, pt, vp.add(j0), k, n, at),
                                2 => strip_pv::<2>(ct, pt, vp.add(j0), k, n, at),
                                _ => strip_pv::<1>(ct, pt, vp.add(j0), k, n, at),
                            }
                        }
                        i += rows;
                    }
                }
                j0 += 16;
            }
        }
        let mut i = 0;
        while i < m && j0 < n {
            let rows = (m - i).min(4);
            // SAFETY: rows i..i+rows < m of P and C; columns j0..n of V and C.
            unsafe {
                match rows {
                    4 => rows_pv::<4>(cp.add(i * n), pp.add(i * k), vp, k, n, j0),
                    3 => rows_pv::<3>(cp.add(i * n), pp.add(i * k), vp, k, n, j0),
                    2 => rows_pv::<2>(cp.add(i * n), pp.add(i * k), vp, k, n, j0),
                    _ => rows_pv::<1>(cp.add(i * n), pp.add(i * k), vp, k, n, j0),
                }
            }
            i += rows;
        }
    }

    /// R rows × 16 columns of C = P · V over keys q0..q1 (one block of [`KC`]): a chain
    /// from 0 per number over the block's keys in order, added to 0 on the first block
    /// (`first`), else to C so far (row strides n for C and V, k for P; c and v point at
    /// the strip's first column).
    ///
    /// # Safety
    /// AVX2 + FMA present; c covers R rows of 16 at stride n, p R rows of k, v rows
    /// q0..q1 of 16 at stride n, q1 ≤ k.
    #[inline(always)]
    unsafe fn strip_pv<const R: usize>(
        c: *mut f32,
        p: *const f32,
        v: *const f32,
        k: usize,
        n: usize,
        (q0, q1, first): (usize, usize, bool),
    ) {
        // SAFETY (all accesses): as the contract says.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for q in q0..q1 {
                let v0 = _mm256_loadu_ps(v.add(q * n));
                let v1 = _mm256_loadu_ps(v.add(q * n + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let w = _mm256_set1_ps(*p.add(r * k + q));
                    acc[0] = _mm256_fmadd_ps(w, v0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(w, v1, acc[1]);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                let (c0, c1) = (c.add(r * n), c.add(r * n + 8));
                let (b0, b1) = if first {
                    (_mm256_setzero_ps(), _mm256_setzero_ps())
                } else {
                    (_mm256_loadu_ps(c0), _mm256_loadu_ps(c1))
                };
                _mm256_storeu_ps(c0, _mm256_add_ps(b0, acc[0]));
                _mm256_storeu_ps(c1, _mm256_add_ps(b1, acc[1]));
            }
        }
    }

    /// The arguments of one strip: C, P, V (at the strip's first column), k, n, and
    /// (q0, q1, first) as [`strip_pv`]'s.
    type StripArgs = (
        *mut f32,
        *const f32,
        *const f32,
        usize,
        usize,
        (usize, usize, bool),
    );

    /// [`strip_pv`] with one 512-bit register a row (up to 12 rows): per key one load
    /// of V's 16 columns and R fused multiply-adds, each number the same chain from 0
    /// over the block's keys in order, added to 0 or to C: [`strip_pv`]'s bits.
    ///
    /// # Safety
    /// AVX-512 F present; the pointers as [`strip_pv`]'s.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn strip_pv512<const R: usize>((c, p, v, k, n, (q0, q1, first)): StripArgs) {
        // SAFETY (all accesses): as the contract says.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); R];
            for q in q0..q1 {
                let vq = _mm512_loadu_ps(v.add(q * n));
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(_mm512_set1_ps(*p.add(r * k + q)), vq, *acc);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                let cr = c.add(r * n);
                let b = if first {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(cr)
                };
                _mm512_storeu_ps(cr, _mm512_add_ps(b, *acc));
            }
        }
    }

    /// R rows of C = P · V, columns j0..n (row strides n for C and V, k for P).
    ///
    /// # Safety
    /// AVX2 + FMA present; c covers R rows of n, p R rows of k, v k rows of n; j0 ≤ n.
    #[inline(always)]
    unsafe fn rows_pv<const R: usize>(
        c: *mut f32,
        p: *const f32,
        v: *const f32,
        k: usize,
        n: usize,
        j0: usize,
    ) {
        // SAFETY (all accesses): columns j + 16 ≤ n (or j + 8 ≤ n, or j < n) of rows
        // q < k of V, rows r < R of P and C.
        unsafe {
            let mut j = j0;
            // One row of P (a decode step's weights over the keys): 64 columns at once,
            // so V is read in one pass, row after row, with eight chains in flight (the
            // same chain per number as below).
            while R == 1 && j + 64 <= n {
                let mut sum = [_mm256_setzero_ps(); 8];
                for q0 in (0..k).step_by(KC) {
                    let mut acc = [_mm256_setzero_ps(); 8];
                    for q in q0..(q0 + KC).min(k) {
                        let w = _mm256_set1_ps(*p.add(q));
                        let row = v.add(q * n + j);
                        for (e, acc) in acc.iter_mut().enumerate() {
                            *acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(row.add(8 * e)), *acc);
                        }
                    }
                    for (s, a) in sum.iter_mut().zip(&acc) {
                        *s = _mm256_add_ps(*s, *a);
                    }
                }
                for (e, s) in sum.iter().enumerate() {
                    _mm256_storeu_ps(c.add(j + 8 * e), *s);
                }
                j += 64;
            }
            while j + 16 <= n {
                let mut sum = [[_mm256_setzero_ps(); 2]; R];
                for q0 in (0..k).step_by(KC) {
                    let mut acc = [[_mm256_setzero_ps(); 2]; R];
                    for q in q0..(q0 + KC).min(k) {
                        let v0 = _mm256_loadu_ps(v.add(q * n + j));
                        let v1 = _mm256_loadu_ps(v.add(q * n + j + 8));
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let w = _mm256_set1_ps(*p.add(r * k + q));
                            acc[0] = _mm256_fmadd_ps(w, v0, acc[0]);
                            acc[1] = _mm256_fmadd_ps(w, v1, acc[1]);
                        }
                    }
                    for (s, a) in sum.iter_mut().zip(&acc) {
                        s[0] = _mm256_add_ps(s[0], a[0]);
                        s[1] = _mm256_add_ps(s[1], a[1]);
                    }
                }
                for (r, acc) in sum.iter().enumerate() {
                    _mm256_storeu_ps(c.add(r * n + j), acc[0]);
                    _mm256_storeu_ps(c.add(r * n + j + 8), acc[1]);
                }
                j += 16;
            }
            while j + 8 <= n {
                let mut sum = [_mm256_setzero_ps(); R];
                for q0 in (0..k).step_by(KC) {
                    let mut acc = [_mm256_setzero_ps(); R];
                    for q in q0..(q0 + KC).min(k) {
                        let v0 = _mm256_loadu_ps(v.add(q * n + j));
                        for (r, acc) in acc.iter_mut().enumerate() {
                            *acc = _mm256_fmadd_ps(_mm256_set1_ps(*p.add(r * k + q)), v0, *acc);
                        }
                    }
                    for (s, a) in sum.iter_mut().zip(&acc) {
                        *s = _mm256_add_ps(*s, *a);
                    }
                }
                for (r, acc) in sum.iter().enumerate() {
                    _mm256_storeu_ps(c.add(r * n + j), *acc);
                }
                j += 8;
            }
            while j < n {
                for r in 0..R {
                    let mut s = 0.0f32;
                    for q0 in (0..k).step_by(KC) {
                        let mut t = 0.0f32;
                        for q in q0..(q0 + KC).min(k) {
                            t = (*p.add(r * k + q)).mul_add(*v.add(q * n + j), t);
                        }
                        s += t;
                    }
                    *c.add(r * n + j) = s;
                }
                j += 1;
            }
        }
    }

    /// One tile: R rows of A (row stride lda, kc terms from `a`) × one packed panel
    /// (kc rows of 16) → C's R rows × `cols` columns (row stride ldc). The chains start
    /// at 0; their sums are added to the bias, or 0 if it is null (`first`), or to C.
    /// `ahead`, if not null, is the next panel: this tile (the q-th of `tiles` that
    /// share it) prefetches its lines q, q + tiles, ... as it reads its own.
    ///
    /// # Safety
    /// AVX2 + FMA present; a covers R rows of kc at stride lda, panel kc × 16, c R rows of
    /// `cols` ≤ 16 at stride ldc, bias (if not null) `cols` numbers.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn tile<const R: usize>(
        c: *mut f32,
        ldc: usize,
        a: *const f32,
        lda: usize,
        panel: *const f32,
        kc: usize,
        cols: usize,
        bias: *const f32,
        first: bool,
        (ahead, q, tiles): (*const f32, usize, usize),
    ) {
        // SAFETY (all accesses): as the contract says; partial column tiles go through
        // a 16-wide buffer.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            let mut buf = [0.0f32; NR];
            // What the block's sums are added to: the bias (or 0) on the first block,
            // else C so far.
            let mut base = [[_mm256_setzero_ps(); 2]; R];
            if first && !bias.is_null() {
                std::ptr::copy_nonoverlapping(bias, buf.as_mut_ptr(), cols);
                let b = [
                    _mm256_loadu_ps(buf.as_ptr()),
                    _mm256_loadu_ps(buf.as_ptr().add(8)),
                ];
                base = [b; R];
            } else if !first {
                for (r, b) in base.iter_mut().enumerate() {
                    if cols == NR {
                        b[0] = _mm256_loadu_ps(c.add(r * ldc));
                        b[1] = _mm256_loadu_ps(c.add(r * ldc + 8));
                    } else {
                        std::ptr::copy_nonoverlapping(c.add(r * ldc), buf.as_mut_ptr(), cols);
                        b[0] = _mm256_loadu_ps(buf.as_ptr());
                        b[1] = _mm256_loadu_ps(buf.as_ptr().add(8));
                    }
                }
            }
            let mut fetch = if ahead.is_null() { usize::MAX } else { q };
            for p in 0..kc {
                if p == fetch {
                    // Lines q, q + tiles, ... of the next panel (a hint).
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(p * NR) as *const i8);
                    fetch += tiles;
                }
                let w0 = _mm256_loadu_ps(panel.add(p * NR));
                let w1 = _mm256_loadu_ps(panel.add(p * NR + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*a.add(r * lda + p));
                    acc[0] = _mm256_fmadd_ps(x, w0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, w1, acc[1]);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                let v0 = _mm256_add_ps(base[r][0], acc[0]);
                let v1 = _mm256_add_ps(base[r][1], acc[1]);
                if cols == NR {
                    _mm256_storeu_ps(c.add(r * ldc), v0);
                    _mm256_storeu_ps(c.add(r * ldc + 8), v1);
                } else {
                    _mm256_storeu_ps(buf.as_mut_ptr(), v0);
                    _mm256_storeu_ps(buf.as_mut_ptr().add(8), v1);
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), c.add(r * ldc), cols);
                }
            }
        }
    }

    /// The arguments of one tile: C (row stride), A (row stride), the panel, kc, the
    /// columns, the bias (or null), whether this is k's first block, and the prefetch
    /// of the next panel (as [`tile`]'s).
    type TileArgs = (
        *mut f32,
        usize,
        *const f32,
        usize,
        *const f32,
        usize,
        usize,
        *const f32,
        bool,
        (*const f32, usize, usize),
    );

    /// [`tile`] with one 512-bit register a row: R (up to 12) rows × the panel's 16
    /// columns, per term one load of the panel and R fused multiply-adds; each number
    /// the same chain from 0 over the block's terms in order, added to the same base
    /// (the bias or 0 on the first block, else C), so [`tile`]'s bits. Partial columns
    /// go through masks.
    ///
    /// # Safety
    /// AVX-512 F present; the pointers as [`tile`]'s.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const R: usize>(
        (c, ldc, a, lda, panel, kc, cols, bias, first, (ahead, q, tiles)): TileArgs,
    ) {
        let mask: __mmask16 = if cols >= NR {
            0xFFFF
        } else {
            ((1u32 << cols) - 1) as __mmask16
        };
        // SAFETY (all accesses): as the contract says; partial columns under `mask`.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); R];
            let mut base = [_mm512_setzero_ps(); R];
            if first && !bias.is_null() {
                base = [_mm512_maskz_loadu_ps(mask, bias); R];
            } else if !first {
                for (r, b) in base.iter_mut().enumerate() {
                    *b = _mm512_maskz_loadu_ps(mask, c.add(r * ldc));
                }
            }
            let mut fetch = if ahead.is_null() { usize::MAX } else { q };
            for p in 0..kc {
                if p == fetch {
                    // Lines q, q + tiles, ... of the next panel (a hint).
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(p * NR) as *const i8);
                    fetch += tiles;
                }
                let w = _mm512_loadu_ps(panel.add(p * NR));
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(r * lda + p)), w, *acc);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(c.add(r * ldc), mask, _mm512_add_ps(base[r], *acc));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// The kernel equals its plain twin bit for bit on every instruction-set level this
    /// CPU has, at one and two threads, for shapes with every kind of remainder.
    #[test]
    fn kernel_equals_its_twin_bit_for_bit_on_every_level() {
        // (m, k, n), also through W packed once (PackedNt): blocks of KC terms and NC
        // columns cut anywhere, and a two-thread column split across an NC block.
        let mut rng = StdRng::seed_from_u64(7);
        let shapes = [
            (1, 1, 1),
            (1, 300, 21),
            (1, 64, 1500),
            (2, 7, 3),
            (3, 8, 4),
            (5, 17, 9),
            (7, 384, 13),
            (13, 385, 64),
            (40, 1536, 18),
            (97, 64, 130),
            (300, 384, 1536),
            (9, 520, 33),
            (6, 263, 271),
            (3, 600, 700),
        ];
        for &(m, k, n) in &shapes {
            let a = random(m * k, &mut rng);
            let w = random(n * k, &mut rng);
            let b = random(n, &mut rng);
            let packed = PackedNt::new(&w, n, k);
            for bias in [None, Some(b.as_slice())] {
                let mut want = vec![0.0; m * n];
                reference::matmul_nt(&mut want, &a, &w, bias, m, k, n);
                for isa in crate::Isa::available() {
                    for t in [1, 2] {
                        let rt = crate::Runtime::builder()
                            .threads(t)
                            .isa(isa)
                            .build()
                            .expect("a runtime");
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| matmul_nt(&mut got, &a, &w, bias, m, k, n));
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "({m}, {k}, {n}) bias {} at {isa:?}, {t} threads",
                            bias.is_some()
                        );
                        // W packed once: the same numbers.
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| matmul_nt_packed(&mut got, &a, &packed, bias, m));
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "packed ({m}, {k}, {n}) bias {} at {isa:?}, {t} threads",
                            bias.is_some()
                        );
                    }
                }
            }
        }
    }

    /// P · V equals its twin bit for bit on every level, and trailing zero weights (masked
    /// keys) change nothing.
    #[test]
    fn weighted_rows_equal_the_twin_and_ignore_trailing_zeros() {
        let mut rng = StdRng::seed_from_u64(10);
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (4, 13, 16),
            (9, 40, 32),
            (6, 77, 64),
            (5, 9, 24),
            (5, 300, 40),
            (8, 3, 5),
            (13, 257, 64),
            (64, 600, 64),
            (70, 1500, 40),
            (7, 0, 33),
            (2, 256, 48),
            (12, 513, 80),
        ] {
            let p = random(m * k, &mut rng);
            let v = random(k * n, &mut rng);
            let mut want = vec![0.0; m * n];
            reference::weighted_rows(&mut want, &p, &v, m, k, n);
            for isa in crate::Isa::available() {
                let rt = crate::Runtime::builder()
                    .threads(1)
                    .isa(isa)
                    .build()
                    .expect("a runtime");
                let mut got = vec![f32::NAN; m * n];
                rt.install(|| weighted_rows(&mut got, &p, &v, m, k, n));
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "({m},{k},{n}) {isa:?}"
                );
                // The same rows one at a time, with 11 more keys of weight 0.
                for i in 0..m {
                    let k2 = k + 11;
                    let mut p2 = p[i * k..(i + 1) * k].to_vec();
                    p2.resize(k2, 0.0);
                    let mut v2 = v.clone();
                    v2.extend(random(11 * n, &mut rng));
                    let mut one = vec![0.0; n];
                    rt.install(|| weighted_rows(&mut one, &p2, &v2, 1, k2, n));
                    assert_eq!(
                        one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        want[i * n..(i + 1) * n]
                            .iter()
                            .map(|x| x.to_bits())
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    }

    /// A row's numbers do not depend on the other rows: any subset of rows, in any
    /// position, gives the same bits.
    #[test]
    fn rows_are_invariant_to_the_batch() {
        let mut rng = StdRng::seed_from_u64(8);
        let (m, k, n) = (50, 384, 37);
        let a = random(m * k, &mut rng);
        let w = random(n * k, &mut rng);
        let mut all = vec![0.0; m * n];
        matmul_nt(&mut all, &a, &w, None, m, k, n);
        for (start, len) in [(0, 1), (1, 2), (5, 3), (7, 11), (49, 1), (20, 30)] {
            let mut part = vec![0.0; len * n];
            matmul_nt(
                &mut part,
                &a[start * k..(start + len) * k],
                &w,
                None,
                len,
                k,
                n,
            );
            assert_eq!(
                part.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                all[start * n..(start + len) * n]
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "rows {start}..{}",
                start + len
            );
        }
    }

    /// Close to the exact product (f64): the order is a good one.
    #[test]
    fn close_to_the_exact_product() {
        let mut rng = StdRng::seed_from_u64(9);
        let (m, k, n) = (9, 1536, 21);
        let a = random(m * k, &mut rng);
        let w = random(n * k, &mut rng);
        let mut got = vec![0.0; m * n];
        matmul_nt(&mut got, &a, &w, None, m, k, n);
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum();
                assert!((got[i * n + j] as f64 - exact).abs() < 1e-4, "{i},{j}");
            }
        }
    }
}
