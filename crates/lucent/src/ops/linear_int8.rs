//! 8-bit integer products for [`Precision::Int8`](crate::Precision::Int8):
//! C = A · Wᵀ + b with W (out, in) quantised once at load and each row of A quantised as
//! it arrives.
//!
//! # The arithmetic
//!
//! - W: one scale per output channel (row j of W), symmetric:
//!   s_w[j] = max_p |W[j, p]| / 127, Wq[j, p] = round(W[j, p] / s_w[j]) ∈ [−127, 127].
//! - A: one scale per row, symmetric, computed from the row alone (so a row's result
//!   never depends on the rows beside it: batch invariance holds):
//!   s_a[i] = max_p |A[i, p]| / 127, Aq[i, p] = round(A[i, p] · 127 / max) ∈ [−127, 127]
//!   (rounding half to even).
//! - C[i, j] = fma(float(Σ_p Aq[i, p] · Wq[j, p]), s_a[i] · s_w[j], b[j]).
//!
//! The sum is over integers, exact in i32 (|Σ| ≤ k · 127² < 2³¹ for k < 133,000), so
//! every path gives the same integer whatever its order; the float steps after it are
//! the same operations in every path. The result is therefore the same bits on every
//! instruction-set level, for any number of rows, threads or tiles: the kernels and
//! their plain twin ([`reference`]) are compared bit for bit.
//!
//! # The kernels
//!
//! W is packed once in panels of 16 columns: per group of 4 terms, 16 columns × 4
//! bytes, one 64-byte vector. AVX-512 VNNI (`vpdpbusd`: four u8 × i8 products summed
//! into each i32 lane) multiplies unsigned bytes by signed ones, so the activations go
//! in shifted by 128 (Aq + 128 ∈ [1, 255]) and the shift comes back out through each
//! column's sum: Σ (Aq + 128) · Wq = Σ Aq · Wq + 128 · Σ Wq. A tile is up to 8 rows × 32
//! columns (16 accumulators; per group of 4 terms two loads of W and eight broadcasts
//! of A). Without VNNI, AVX2 takes the signs of the activations onto the weights
//! (`vpsignb`) and multiplies |Aq| (unsigned) by them with `vpmaddubsw`: each pair sums
//! at most 2 · 127² = 32,258, inside i16, so nothing saturates.
//!
//! # Groups
//!
//! [`Int8Matrix::quantize_groups`] keeps the same weights (one scale per output row)
//! but quantises each row of A in groups of G consecutive inputs (G a multiple of 4),
//! each group's symmetric scale from that row's group alone (so batch invariance still
//! holds): s_a[i, g] = max_{p∈g} |A[i, p]| / 127, and
//! C[i, j] = fma(Σ_g s_a[i, g] · float(Σ_{p∈g} Aq[i, p] · Wq[j, p]), s_w[j], b[j]),
//! the groups summed in order, each term one fused multiply-add into an f32 sum that
//! starts at 0. One outlier input then coarsens only its own group's rounding, not the
//! row's (docs/precision.md measures what that buys a decoder). The kernels keep the
//! group's i32 sums in the lanes, convert them and fused-multiply-add them by the
//! broadcast s_a[i, g] into f32 lanes (no horizontal sum per group). VNNI's shift comes
//! out per group: 128 · Σ_{p∈g} Wq[j, p] is kept per panel and group at quantisation
//! and subtracted from the group's sums before the conversion. AVX2 needs no shift
//! (`vpsignb`, as above). There is no AMX kernel for groups: the AMX path runs the VNNI
//! tiles.

use std::sync::OnceLock;

use crate::runtime::Isa;
use crate::threads::threads;

/// Columns of a packed panel (one 512-bit vector of i32 lanes).
const NR: usize = 16;
/// Rows of a tile.
const MR: usize = 8;
/// Multiply-adds from which a product is split over threads.
const PARALLEL_MIN: usize = 1 << 20;

/// A weight matrix W (n × k) quantised to 8 bits for [`matmul`](Int8Matrix::matmul):
/// one scale per row (output channel), packed in 16-column panels.
#[derive(Clone, Debug)]
pub struct Int8Matrix {
    n: usize,
    k: usize,
    /// k rounded up to a multiple of 64 (whole groups of 4 terms for `vpdpbusd`, whole
    /// 64-byte rows for the AMX tiles); the terms past k are zeros.
    kp: usize,
    /// Panels: for panel P (columns 16P..16P+16) and group g (terms 4g..4g+4), 64
    /// bytes at (P · kp/4 + g) · 64: column c's four terms at 4c.
    data: Vec<i8>,
    /// s_w[j], n of them (padded to whole panels with 0).
    scales: Vec<f32>,
    /// 128 · Σ_p Wq[j, p] (the VNNI path's shift), padded to whole panels with 0.
    shift: Vec<i32>,
    /// The largest |W − s_w · Wq| of the whole matrix (how far the copy is from W).
    max_error: f32,
    /// G: activations quantised in groups of G consecutive inputs (one scale each), or
    /// 0 for one scale per row ([`Int8Matrix::quantize_groups`]).
    group: usize,
    /// Per panel P and activation group g (terms gG..gG+G), the 16 columns'
    /// 128 · Σ_{p∈g} Wq[j, p] at (P · groups + g) · 16 (the VNNI path's shift, group by
    /// group); empty when `group` is 0.
    group_shift: Vec<i32>,
}

impl Int8Matrix {
    /// Quantise W (n × k, row-major): one scale per row.
    ///
    /// Panics if `w.len() != n · k` (an internal invariant: callers pass a checked
    /// tensor's dimensions).
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn quantize(w: &[f32], n: usize, k: usize) -> Int8Matrix {
        assert_eq!(w.len(), n * k, "Int8Matrix::quantize sizes"); // ok: internal invariant
        let kp = k.next_multiple_of(64);
        let panels = n.div_ceil(NR);
        let mut data = vec![0i8; panels * NR * kp];
        let mut scales = vec![0.0f32; panels * NR];
        let mut shift = vec![0i32; panels * NR];
        let mut max_error = 0.0f32;
        let mut q = vec![0i8; kp];
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let s = quantize_row(row, &mut q);
            scales[j] = s;
            shift[j] = 128 * q.iter().map(|&x| i32::from(x)).sum::<i32>();
            for (p, (&x, &qx)) in row.iter().zip(&q).enumerate() {
                max_error = max_error.max((x - s * f32::from(qx)).abs());
                let (panel, c, g, t) = (j / NR, j % NR, p / 4, p % 4);
                data[(panel * (kp / 4) + g) * 64 + 4 * c + t] = qx;
            }
        }
        Int8Matrix {
            n,
            k,
            kp,
            data,
            scales,
            shift,
            max_error,
            group: 0,
            group_shift: Vec::new(),
        }
    }

    /// Quantise W (n × k, row-major) as [`Int8Matrix::quantize`] does (one scale per
    /// row), for products whose activations are quantised in groups of `group`
    /// consecutive inputs, each group its own scale (module docs, "Groups").
    ///
    /// Panics if `w.len() != n · k` (an internal invariant); errors if `group` is not
    /// a positive multiple of 4.
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn quantize_groups(
        w: &[f32],
        n: usize,
        k: usize,
        group: usize,
    ) -> crate::Result<Int8Matrix> {
        if group == 0 || !group.is_multiple_of(4) {
            return Err(crate::Error::Argument(format!(
                "int8 activation group {group}: must be a positive multiple of 4 (32, 64, 128, ...)"
            )));
        }
        let mut q = Int8Matrix::quantize(w, n, k);
        q.group = group;
        let groups = q.groups();
        let panels = n.div_ceil(NR);
        q.group_shift = vec![0i32; panels * NR * groups];
        for j in 0..n {
            let row = q.row(j);
            for (g, terms) in row.chunks(group).enumerate() {
                let sum: i32 = terms.iter().map(|&x| i32::from(x)).sum();
                q.group_shift[((j / NR) * groups + g) * NR + j % NR] = 128 * sum;
            }
        }
        Ok(q)
    }

    /// G, the activation group ([`Int8Matrix::quantize_groups`]), or 0 for one scale
    /// per row.
    pub fn group(&self) -> usize {
        self.group
    }

    /// The activation groups of a row: ⌈k / G⌉ (0 when G is 0).
    fn groups(&self) -> usize {
        if self.group == 0 {
            0
        } else {
            self.k.div_ceil(self.group)
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

    /// The largest |W − s_w · Wq| over the matrix: the weights' own rounding.
    pub fn max_error(&self) -> f32 {
        self.max_error
    }

    /// s_w[j] for each of W's n rows: row j's copy is s_w[j] · Wq[j, ·].
    pub fn scales(&self) -> &[f32] {
        &self.scales[..self.n]
    }

    /// Σ_p |Wq[j, p]| for each of W's n rows, read out of the panels: with
    /// [`Int8Matrix::scales`], the copy's ‖s_w[j] · Wq[j, ·]‖₁ (what bounds the error the
    /// activations' rounding makes in row j's number).
    pub fn row_abs_sums(&self) -> Vec<u32> {
        let mut sums = vec![0u32; self.n];
        for (j, sum) in sums.iter_mut().enumerate() {
            let panel = &self.data[(j / NR) * (self.kp / 4) * 64..];
            *sum = (0..self.kp / 4)
                .map(|g| {
                    let at = g * 64 + 4 * (j % NR);
                    panel[at..at + 4]
                        .iter()
                        .map(|&q| u32::from(q.unsigned_abs()))
                        .sum::<u32>()
                })
                .sum();
        }
        sums
    }

    /// Bytes held (the packed weights, scales and shifts).
    pub fn bytes(&self) -> usize {
        self.data.len() + 4 * (self.scales.len() + self.shift.len() + self.group_shift.len())
    }

    /// Row j of Wq (k numbers), read out of the panels.
    fn row(&self, j: usize) -> Vec<i8> {
        (0..self.k)
            .map(|p| self.data[((j / NR) * (self.kp / 4) + p / 4) * 64 + 4 * (j % NR) + p % 4])
            .collect()
    }

    /// C (m × n) = A (m × k) · Wᵀ + bias in 8-bit integers (module docs), split over
    /// the runtime's threads when large; the numbers do not depend on the split, the
    /// level or m.
    ///
    /// Panics if a slice's length does not match (an internal invariant).
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    pub fn matmul(&self, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k) = (self.n, self.k);
        assert!(
            c.len() == m * n && a.len() == m * k && bias.is_none_or(|b| b.len() == n),
            "Int8Matrix::matmul sizes: c {}, a {} for m {m}, k {k}, n {n}",
            c.len(),
            a.len()
        ); // ok: internal invariant
        if m == 0 || n == 0 {
            return;
        }
        self.matmul_on(Path::at(crate::runtime::isa()), c, a, bias, m);
    }

    /// [`Int8Matrix::matmul`] on `path` (which the CPU must be able to run).
    fn matmul_on(&self, path: Path, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k, kp) = (self.n, self.k, self.kp);
        if m == 0 || n == 0 {
            return;
        }
        if self.group > 0 {
            self.matmul_groups_on(path, c, a, bias, m);
            return;
        }
        // Each row quantised once for every column: (m, kp) bytes and m scales.
        let mut aq = vec![0i8; m * kp];
        let mut sa = vec![0.0f32; m];
        for ((row, q), s) in a
            .chunks_exact(k.max(1))
            .zip(aq.chunks_exact_mut(kp.max(1)))
            .zip(&mut sa)
        {
            *s = quantize_row(row, q);
        }
        let sa = &sa[..];
        let level = path;
        if path == Path::Vnni {
            // vpdpbusd reads unsigned bytes: Aq + 128 (module docs), flipped once here
            for b in &mut aq {
                *b ^= i8::MIN;
            }
        }
        let workers = threads();
        let packed = self.packed();
        let job = Job {
            m: &packed,
            aq: &aq,
            sa,
            bias,
        };
        if workers <= 1 || m * n * k < PARALLEL_MIN {
            job.run(c, level, 0, m, 0, n);
            return;
        }
        if m >= workers * MR * 2 {
            // Row blocks: every task owns whole rows of C.
            // (whole AMX blocks of 16 rows; the split changes no number)
            let rows = m.div_ceil(workers * 2).next_multiple_of(2 * MR);
            crate::threads::for_each_chunk_mut(c, rows * n, |t, c| {
                let i0 = t * rows;
                job.run_rows(c, level, i0, i0 + c.len() / n);
            });
        } else {
            // Few rows: column blocks (whole panels), every task owns whole columns.
            let cols = n.div_ceil(workers).next_multiple_of(NR);
            // SAFETY: each call writes only its columns j0..j1 of C's m rows.
            unsafe {
                crate::threads::for_each_column_block(c, n, cols, |c, j0, j1| {
                    job.run(c, level, 0, m, j0, j1);
                })
            };
        }
    }

    /// [`Int8Matrix::matmul`] with activations in groups (module docs, "Groups") on
    /// `path`; the AMX path runs the VNNI tiles (no AMX kernel for groups).
    fn matmul_groups_on(
        &self,
        path: Path,
        c: &mut [f32],
        a: &[f32],
        bias: Option<&[f32]>,
        m: usize,
    ) {
        let (n, k, kp, group) = (self.n, self.k, self.kp, self.group);
        let groups = self.groups();
        // Each row quantised once for every column, group by group: (m, kp) bytes and
        // (m, groups) scales; the last group's bytes run on to kp (zeros past k).
        let mut aq = vec![0i8; m * kp];
        let mut sa = vec![0.0f32; m * groups];
        for i in 0..m {
            let row = &a[i * k..(i + 1) * k];
            let q = &mut aq[i * kp..(i + 1) * kp];
            for g in 0..groups {
                let (p0, p1) = (g * group, ((g + 1) * group).min(k));
                let end = if g + 1 == groups { kp } else { p1 };
                sa[i * groups + g] = quantize_row(&row[p0..p1], &mut q[p0..end]);
            }
        }
        let path = if path == Path::Amx { Path::Vnni } else { path };
        if path == Path::Vnni {
            // vpdpbusd reads unsigned bytes: Aq + 128, flipped once here
            for b in &mut aq {
                *b ^= i8::MIN;
            }
        }
        let packed = self.packed();
        let job = GroupJob {
            m: &packed,
            aq: &aq,
            sa: &sa,
            groups,
            steps: group / 4,
            bias,
        };
        let workers = threads();
        if workers <= 1 || m * n * k < PARALLEL_MIN {
            job.run(c, path, 0, m, 0, n);
        } else if m >= workers * MR * 2 {
            // Row blocks: every task owns whole rows of C (the split changes no number).
            let rows = m.div_ceil(workers * 2).next_multiple_of(MR);
            crate::threads::for_each_chunk_mut(c, rows * n, |t, c| {
                let i0 = t * rows;
                let i1 = i0 + c.len() / n;
                let sub = GroupJob {
                    aq: &aq[i0 * kp..i1 * kp],
                    sa: &sa[i0 * groups..i1 * groups],
                    ..job
                };
                sub.run(c, path, 0, i1 - i0, 0, n);
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

    /// A view of the packed parts for the kernels.
    fn packed(&self) -> Packed<'_> {
        Packed {
            n: self.n,
            kp: self.kp,
            data: &self.data,
            scales: &self.scales,
            shift: &self.shift,
            group_shift: &self.group_shift,
        }
    }
}

/// The packed parts of an [`Int8Matrix`], borrowed by a product's tasks.
#[derive(Clone, Copy)]
struct Packed<'a> {
    n: usize,
    kp: usize,
    data: &'a [i8],
    scales: &'a [f32],
    shift: &'a [i32],
    group_shift: &'a [i32],
}

/// One grouped product's shared inputs: the packed W, the quantised rows and their
/// group scales.
#[derive(Clone, Copy)]
struct GroupJob<'a> {
    m: &'a Packed<'a>,
    /// Aq (rows, kp), plus 128 on the VNNI path.
    aq: &'a [i8],
    /// s_a (rows, groups).
    sa: &'a [f32],
    /// Activation groups per row.
    groups: usize,
    /// 4-term steps per group (G / 4).
    steps: usize,
    bias: Option<&'a [f32]>,
}

impl GroupJob<'_> {
    /// Rows i0..i1 and columns j0..j1 (j0 a multiple of 16) of C (m × n, all of it),
    /// one panel (16 columns) × up to 8 rows at a time.
    fn run(&self, c: &mut [f32], path: Path, i0: usize, i1: usize, j0: usize, j1: usize) {
        let (n, kp) = (self.m.n, self.m.kp);
        let ksteps = kp / 4;
        let mut j = j0;
        while j < j1 {
            let jn = (j + NR).min(j1);
            let p = j / NR;
            let w = &self.m.data[p * ksteps * 64..(p + 1) * ksteps * 64];
            let mut i = i0;
            while i < i1 {
                let rows = (i1 - i).min(MR);
                let a = &self.aq[i * kp..(i + rows) * kp];
                let sa = &self.sa[i * self.groups..(i + rows) * self.groups];
                #[cfg(target_arch = "x86_64")]
                if path == Path::Vnni {
                    let shift =
                        &self.m.group_shift[p * self.groups * NR..(p + 1) * self.groups * NR];
                    // SAFETY: the Avx512 level includes AVX-512 F/BW/VL/VNNI; the panel,
                    // the rows of Aq and their scales, the panel's group shifts and C's
                    // rows i..i+rows, columns j..jn are in bounds; scales are padded to
                    // whole panels.
                    unsafe {
                        x86::tile_groups_vnni(
                            w,
                            a,
                            x86::GroupTile {
                                kp,
                                rows,
                                groups: self.groups,
                                steps: self.steps,
                                sa,
                                shift,
                            },
                            x86::Epilogue {
                                out: c[i * n + j..].as_mut_ptr(),
                                ldc: n,
                                cols: jn - j,
                                sa: &[],
                                scales: &self.m.scales[j..j + NR],
                                shift: &[],
                                bias: self.bias.map(|b| &b[j..jn]),
                            },
                        )
                    };
                    i += rows;
                    continue;
                }
                let mut acc = [[0.0f32; NR]; MR];
                tile_groups(
                    w,
                    a,
                    kp,
                    rows,
                    self.groups,
                    self.steps,
                    sa,
                    path.level(),
                    &mut acc,
                );
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    let out = &mut c[(i + r) * n + j..(i + r) * n + jn];
                    for (col, o) in out.iter_mut().enumerate() {
                        let b = self.bias.map_or(0.0, |b| b[j + col]);
                        *o = acc[col].mul_add(self.m.scales[j + col], b);
                    }
                }
                i += rows;
            }
            j = jn;
        }
    }
}

/// A grouped tile's f32 sums below the VNNI level: for `rows` rows of Aq (kp bytes
/// each) against one panel `w`, acc[r][c] = Σ_g s_a[r, g] · float(Σ_{p∈g} Aq[r, p] ·
/// Wq[c, p]), the groups in order, each a fused multiply-add.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn tile_groups(
    w: &[i8],
    a: &[i8],
    kp: usize,
    rows: usize,
    groups: usize,
    steps: usize,
    sa: &[f32],
    level: Isa,
    acc: &mut [[f32; NR]; MR],
) {
    #[cfg(target_arch = "x86_64")]
    if level >= Isa::Avx2 {
        // SAFETY: the Avx2 level includes AVX2 and FMA; `w` is one panel of kp / 4
        // steps, `a` `rows` rows of kp bytes, `sa` `rows` × `groups` scales.
        unsafe { x86::tile_groups_avx2(w, a, kp, rows, groups, steps, sa, acc) };
        return;
    }
    let _ = level;
    let ksteps = kp / 4;
    for r in 0..rows {
        let ar = &a[r * kp..(r + 1) * kp];
        for c in 0..NR {
            let mut f = 0.0f32;
            for g in 0..groups {
                let mut s = 0i32;
                for step in g * steps..((g + 1) * steps).min(ksteps) {
                    let wg = &w[step * 64 + 4 * c..][..4];
                    for t in 0..4 {
                        s += i32::from(ar[4 * step + t]) * i32::from(wg[t]);
                    }
                }
                f = (s as f32).mul_add(sa[r * groups + g], f);
            }
            acc[r][c] = f;
        }
    }
}

/// One product's shared inputs: the packed W, the quantised rows and their scales.
struct Job<'a> {
    m: &'a Packed<'a>,
    aq: &'a [i8],
    sa: &'a [f32],
    bias: Option<&'a [f32]>,
}

/// Which tiles a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// AMX tiles (`tdpbssd`: 16 rows × 16 columns × 64 terms per instruction), where the
    /// CPU has AMX-INT8 and the kernel lets the process use it (at the Avx512 level).
    Amx,
    /// AVX-512 VNNI (`vpdpbusd`).
    Vnni,
    /// AVX2 (`vpmaddubsw`).
    Avx2,
    /// Plain code.
    Plain,
}

impl Path {
    /// The path at instruction-set level `isa` on this CPU.
    fn at(isa: Isa) -> Path {
        if !cfg!(target_arch = "x86_64") {
            Path::Plain
        } else if isa >= Isa::Avx512 {
            if amx_ready() {
                Path::Amx
            } else {
                Path::Vnni
            }
        } else if isa >= Isa::Avx2 {
            Path::Avx2
        } else {
            Path::Plain
        }
    }

    /// The instruction-set level whose helpers (rounding, float steps) the path uses.
    fn level(self) -> Isa {
        match self {
            Path::Amx | Path::Vnni => Isa::Avx512,
            Path::Avx2 => Isa::Avx2,
            Path::Plain => Isa::Scalar,
        }
    }

    /// Every path this CPU can run, whichever [`Path::at`] picks (the tests hold each
    /// one to the twin).
    #[cfg(test)]
    fn available() -> Vec<Path> {
        let levels = Isa::available();
        let mut all = vec![Path::Plain];
        if cfg!(target_arch = "x86_64") && levels.contains(&Isa::Avx2) {
            all.push(Path::Avx2);
        }
        if cfg!(target_arch = "x86_64") && levels.contains(&Isa::Avx512) {
            all.push(Path::Vnni);
            if amx_ready() {
                all.push(Path::Amx);
            }
        }
        all
    }
}

/// Whether AMX-INT8 can run here: the CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX
/// bits 24 and 25) and Linux grants this process the tile registers
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked once).
fn amx_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            use std::arch::x86_64::{__cpuid, __cpuid_count};
            if __cpuid(0).eax < 7 || !crate::runtime::CpuFeatures::get().avx512f {
                return false;
            }
            let edx = __cpuid_count(7, 0).edx;
            if edx & (1 << 24) == 0 || edx & (1 << 25) == 0 {
                return false;
            }
            // arch_prctl (158), ARCH_REQ_XCOMP_PERM (0x1023), XFEATURE_XTILEDATA (18)
            let ret: i64;
            // SAFETY: the system call only changes which register state this process
            // may use; it reads no memory of ours.
            unsafe {
                std::arch::asm!(
                    "syscall",
                    inlateout("rax") 158i64 => ret,
                    in("rdi") 0x1023i64,
                    in("rsi") 18i64,
                    lateout("rcx") _,
                    lateout("r11") _,
                    options(nostack, nomem, preserves_flags)
                );
            }
            ret == 0
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

impl Job<'_> {
    /// Rows i0..i1 of C, where `c` holds exactly those rows.
    fn run_rows(&self, c: &mut [f32], level: Path, i0: usize, i1: usize) {
        let sub = Job {
            m: self.m,
            aq: &self.aq[i0 * self.m.kp..i1 * self.m.kp],
            sa: &self.sa[i0..i1],
            bias: self.bias,
        };
        sub.run(c, level, 0, i1 - i0, 0, self.m.n);
    }

    /// Rows i0..i1 and columns j0..j1 (j0 a multiple of 16) of C (m × n, all of it).
    fn run(&self, c: &mut [f32], path: Path, i0: usize, i1: usize, j0: usize, j1: usize) {
        #[cfg(target_arch = "x86_64")]
        if path == Path::Amx {
            self.run_amx(c, i0, i1, j0, j1);
            return;
        }
        let level = path.level();
        let n = self.m.n;
        let mut j = j0;
        while j < j1 {
            let panels = if j + NR < j1 { 2 } else { 1 };
            let jn = (j + panels * NR).min(j1);
            let mut i = i0;
            while i < i1 {
                let rows = (i1 - i).min(MR);
                #[cfg(target_arch = "x86_64")]
                if path == Path::Vnni {
                    let groups = self.m.kp / 4;
                    let p = j / NR;
                    // SAFETY: the Avx512 level includes AVX-512 F/BW/VL/VNNI; W's
                    // panels, the rows of Aq and C's rows i..i+rows, columns j..jn are
                    // in bounds; scales and shifts are padded to whole panels.
                    unsafe {
                        x86::tile_vnni_out(
                            &self.m.data[p * groups * 64..(p + panels) * groups * 64],
                            &self.aq[i * self.m.kp..(i + rows) * self.m.kp],
                            self.m.kp,
                            rows,
                            panels,
                            x86::Epilogue {
                                out: c[i * n + j..].as_mut_ptr(),
                                ldc: n,
                                cols: jn - j,
                                sa: &self.sa[i..i + rows],
                                scales: &self.m.scales[j..j + panels * NR],
                                shift: &self.m.shift[j..j + panels * NR],
                                bias: self.bias.map(|b| &b[j..jn]),
                            },
                        )
                    };
                    i += rows;
                    continue;
                }
                let mut acc = [[0i32; 2 * NR]; MR];
                tile(self.m, self.aq, i, rows, j / NR, panels, level, &mut acc);
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    let out = &mut c[(i + r) * n + j..(i + r) * n + jn];
                    finish(
                        out,
                        acc,
                        self.sa[i + r],
                        &self.m.scales[j..],
                        self.bias.map(|b| &b[j..]),
                        level,
                    );
                }
                i += rows;
            }
            j = jn;
        }
    }

    /// [`Job::run`] on AMX tiles: blocks of up to 16 rows × 32 columns, each summed over
    /// k in 64-term steps (`tdpbssd`: Aq and Wq as signed bytes, no shift), then the
    /// float steps of [`finish`] from the block's sums.
    #[cfg(target_arch = "x86_64")]
    fn run_amx(&self, c: &mut [f32], i0: usize, i1: usize, j0: usize, j1: usize) {
        let (n, kp) = (self.m.n, self.m.kp);
        let groups = kp / 4;
        let mut sums = [[0i32; 2 * NR]; x86::AMX_ROWS];
        let mut configured = 0;
        let mut i = i0;
        while i < i1 {
            let rows = (i1 - i).min(x86::AMX_ROWS);
            if rows != configured {
                // SAFETY: amx_ready() was true (the Amx path is taken only then).
                unsafe { x86::amx_configure(rows) };
                configured = rows;
            }
            let mut j = j0;
            while j < j1 {
                let panels = if j + NR < j1 { 2 } else { 1 };
                let jn = (j + panels * NR).min(j1);
                let p = j / NR;
                // SAFETY: the tiles are configured for `rows` rows; W's panels p, p+1
                // hold `groups` 64-byte groups each and Aq's rows i..i+rows kp bytes.
                unsafe {
                    x86::amx_sums(
                        &self.m.data[p * groups * 64..(p + panels) * groups * 64],
                        &self.aq[i * kp..(i + rows) * kp],
                        kp,
                        panels,
                        &mut sums,
                    )
                };
                for (r, acc) in sums.iter().enumerate().take(rows) {
                    let out = &mut c[(i + r) * n + j..(i + r) * n + jn];
                    finish(
                        out,
                        acc,
                        self.sa[i + r],
                        &self.m.scales[j..],
                        self.bias.map(|b| &b[j..]),
                        Isa::Avx2,
                    );
                }
                j = jn;
            }
            i += rows;
        }
        // SAFETY: as above; the tile registers go back to their initial state.
        unsafe { x86::amx_release() };
    }
}

/// The integer sums of `rows` rows (from row i) with `panels` panels (from panel p),
/// below the VNNI level (which has its own tile, `x86::tile_vnni_out`):
/// acc[r][c] = Σ_p Aq[i + r, p] · Wq[16P + c, p].
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn tile(
    m: &Packed,
    aq: &[i8],
    i: usize,
    rows: usize,
    p: usize,
    panels: usize,
    level: Isa,
    acc: &mut [[i32; 2 * NR]; MR],
) {
    let groups = m.kp / 4;
    let w = &m.data[p * groups * 64..(p + panels) * groups * 64];
    let a = &aq[i * m.kp..(i + rows) * m.kp];
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx2 {
            // SAFETY: the Avx2 level includes AVX2.
            unsafe { x86::tile_avx2(w, a, m.kp, rows, panels, acc) };
            return;
        }
    }
    let _ = level;
    for r in 0..rows {
        let ar = &a[r * m.kp..(r + 1) * m.kp];
        for pc in 0..panels * NR {
            let (panel, c) = (pc / NR, pc % NR);
            let mut s = 0i32;
            for g in 0..groups {
                let wg = &w[(panel * groups + g) * 64 + 4 * c..][..4];
                for t in 0..4 {
                    s += i32::from(ar[4 * g + t]) * i32::from(wg[t]);
                }
            }
            acc[r][pc] = s;
        }
    }
}

/// One row's outputs from its integer sums: out[c] = fma(float(sum), s_a · s_w[c],
/// b[c]) for the columns `out` holds (the same operations, one correctly rounded fused
/// multiply-add each, on every level; the VNNI tiles do them in their registers).
fn finish(
    out: &mut [f32],
    sums: &[i32; 2 * NR],
    sa: f32,
    scales: &[f32],
    bias: Option<&[f32]>,
    level: Isa,
) {
    #[cfg(target_arch = "x86_64")]
    if level >= Isa::Avx2 {
        // SAFETY: the Avx2 level includes AVX2 and FMA; `out.len() ≤ 32` columns, each
        // with its scale (and bias) at the same index.
        unsafe { x86::finish(out, sums, sa, scales, bias) };
        return;
    }
    for (c, o) in out.iter_mut().enumerate() {
        *o = (sums[c] as f32).mul_add(sa * scales[c], bias.map_or(0.0, |b| b[c]));
    }
}

/// Quantise one row to 8 bits (module docs), writing `q` (its length rounded up to 4,
/// the rest 0); returns the row's scale. Every level gives the same bytes.
pub(crate) fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= Isa::Avx2 {
        // SAFETY: the Avx2 level includes AVX2; `q` holds at least x.len() bytes.
        return unsafe { x86::quantize_row(x, q) };
    }
    quantize_row_plain(x, q)
}

/// [`quantize_row`]'s arithmetic, plainly: max |x|, then round-half-even(x · 127/max).
fn quantize_row_plain(x: &[f32], q: &mut [i8]) -> f32 {
    let max = x.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
    let inv = if max > 0.0 { 127.0 / max } else { 0.0 };
    for (qv, &v) in q.iter_mut().zip(x) {
        *qv = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    for qv in q.iter_mut().skip(x.len()) {
        *qv = 0;
    }
    max / 127.0
}

/// Whether this CPU runs the VNNI path (the report of `lucent bench precision`).
pub fn int8_path() -> &'static str {
    static PATH: OnceLock<&'static str> = OnceLock::new();
    PATH.get_or_init(|| match Path::at(Isa::detected()) {
        Path::Amx => "AMX-INT8 (tdpbssd)",
        Path::Vnni => "AVX-512 VNNI (vpdpbusd)",
        Path::Avx2 => "AVX2 (vpmaddubsw; no VNNI on this CPU)",
        Path::Plain => "scalar (no AVX2 on this CPU)",
    })
}

// The tiles index their register arrays by row and panel, as the layout reads.
#[allow(clippy::needless_range_loop)]
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// [`super::quantize_row`] on AVX2: the same max, product, ties-to-even rounding
    /// and clamp, eight numbers at a time.
    ///
    /// # Safety
    /// AVX2; `q.len() >= x.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
        let n = x.len();
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut m8 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            m8 = _mm256_max_ps(m8, _mm256_and_ps(_mm256_loadu_ps(x.as_ptr().add(i)), abs));
            i += 8;
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m8);
        let mut max = lanes.iter().fold(0.0f32, |m, &v| m.max(v));
        for &v in &x[i..] {
            max = max.max(v.abs());
        }
        let inv = if max > 0.0 { 127.0 / max } else { 0.0 };
        let (inv8, lo, hi) = (
            _mm256_set1_ps(inv),
            _mm256_set1_ps(-127.0),
            _mm256_set1_ps(127.0),
        );
        let mut i = 0;
        while i + 8 <= n {
            let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), inv8);
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
            let w = _mm256_cvtps_epi32(r); // exact: r is a whole number in [-127, 127]
                                           // eight i32 → eight i8 (no saturation: each is in [-127, 127])
            let w16 = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
            let w8 = _mm_packs_epi16(w16, w16);
            q.as_mut_ptr()
                .add(i)
                .cast::<i64>()
                .write_unaligned(_mm_cvtsi128_si64(w8));
            i += 8;
        }
        for (qv, &v) in q[i..].iter_mut().zip(&x[i..]) {
            *qv = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
        }
        for qv in q.iter_mut().skip(n) {
            *qv = 0;
        }
        max / 127.0
    }

    /// [`super::finish`]'s float steps on AVX2 + FMA, eight columns at a time.
    ///
    /// # Safety
    /// AVX2 and FMA; `scales` (and `bias`) hold at least `out.len() ≤ 32` numbers.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn finish(
        out: &mut [f32],
        sums: &[i32; 2 * NR],
        sa: f32,
        scales: &[f32],
        bias: Option<&[f32]>,
    ) {
        let n = out.len();
        let sa8 = _mm256_set1_ps(sa);
        let mut c = 0;
        while c + 8 <= n {
            let s = _mm256_cvtepi32_ps(_mm256_loadu_si256(sums.as_ptr().add(c).cast()));
            let scale = _mm256_mul_ps(sa8, _mm256_loadu_ps(scales.as_ptr().add(c)));
            let b = match bias {
                Some(b) => _mm256_loadu_ps(b.as_ptr().add(c)),
                None => _mm256_setzero_ps(),
            };
            _mm256_storeu_ps(out.as_mut_ptr().add(c), _mm256_fmadd_ps(s, scale, b));
            c += 8;
        }
        for c in c..n {
            let b = bias.map_or(0.0, |b| b[c]);
            out[c] = _mm_cvtss_f32(_mm_fmadd_ss(
                _mm_set_ss(sums[c] as f32),
                _mm_set_ss(sa * scales[c]),
                _mm_set_ss(b),
            ));
        }
    }

    /// Where a VNNI tile writes its outputs, and what it needs to finish them.
    pub(super) struct Epilogue<'a> {
        /// C at the tile's first row and column.
        pub out: *mut f32,
        /// C's row stride.
        pub ldc: usize,
        /// Columns of the tile that are in C (≤ 32).
        pub cols: usize,
        /// The rows' scales.
        pub sa: &'a [f32],
        /// The columns' scales, whole panels.
        pub scales: &'a [f32],
        /// The columns' shifts (128 · Σ Wq), whole panels.
        pub shift: &'a [i32],
        /// The columns' biases (`cols` of them).
        pub bias: Option<&'a [f32]>,
    }

    /// The integer sums of a tile with `vpdpbusd` (`a` holds Aq + 128 as bytes, against Wq; up to
    /// 8 rows × 2 panels), then [`super::finish`]'s steps done in the registers:
    /// C = fma(float(sum − shift), s_a · s_w, b), stored under a mask for a partial
    /// panel. The same operations as the twin's, so the same bits.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `w` holds `panels` panels of `kp / 4` groups, `a` `rows`
    /// rows of `kp` bytes; `e.out` points at `rows` rows of `e.ldc` floats with `e.cols`
    /// writable columns each.
    /// Rows up to which a tile prefetches the next tile's weights.
    const FEW_ROWS: usize = 2;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn tile_vnni_out(
        w: &[i8],
        a: &[i8],
        kp: usize,
        rows: usize,
        panels: usize,
        e: Epilogue,
    ) {
        let groups = kp / 4;
        let mut s = [[_mm512_setzero_si512(); 2]; MR];
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        if panels == 2 {
            // Few rows (a decoded token's head): W streams through once, faster than
            // the hardware prefetcher follows two panels' interleaved lines, so each
            // step asks for the same lines of the next tile (a hint: it cannot fault).
            let (prefetch, ahead) = (rows <= FEW_ROWS, 2 * groups * 64);
            for g in 0..groups {
                if prefetch {
                    _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(g * 64 + ahead));
                    _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add((groups + g) * 64 + ahead));
                }
                let w0 = _mm512_loadu_si512(wp.add(g * 64).cast());
                let w1 = _mm512_loadu_si512(wp.add((groups + g) * 64).cast());
                for r in 0..MR {
                    if r < rows {
                        let four = ap.add(r * kp + 4 * g).cast::<i32>().read_unaligned();
                        let x = _mm512_set1_epi32(four); // four bytes Aq + 128
                        s[r][0] = _mm512_dpbusd_epi32(s[r][0], x, w0);
                        s[r][1] = _mm512_dpbusd_epi32(s[r][1], x, w1);
                    }
                }
            }
        } else {
            for g in 0..groups {
                let w0 = _mm512_loadu_si512(wp.add(g * 64).cast());
                for r in 0..MR {
                    if r < rows {
                        let four = ap.add(r * kp + 4 * g).cast::<i32>().read_unaligned();
                        let x = _mm512_set1_epi32(four); // four bytes Aq + 128
                        s[r][0] = _mm512_dpbusd_epi32(s[r][0], x, w0);
                    }
                }
            }
        }
        for h in 0..panels {
            let c0 = h * NR;
            if c0 >= e.cols {
                break;
            }
            let n = (e.cols - c0).min(NR);
            let mask: __mmask16 = if n == NR { 0xffff } else { (1u16 << n) - 1 };
            let shift = _mm512_loadu_si512(e.shift.as_ptr().add(c0).cast());
            let scales = _mm512_loadu_ps(e.scales.as_ptr().add(c0));
            let bias = match e.bias {
                Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr().add(c0)),
                None => _mm512_setzero_ps(),
            };
            for r in 0..rows {
                let sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][h], shift));
                let scale = _mm512_mul_ps(_mm512_set1_ps(e.sa[r]), scales);
                let y = _mm512_fmadd_ps(sum, scale, bias);
                _mm512_mask_storeu_ps(e.out.add(r * e.ldc + c0), mask, y);
            }
        }
    }

    /// The shape and scales of a grouped VNNI tile ([`tile_groups_vnni`]).
    pub(super) struct GroupTile<'a> {
        /// Bytes per row of Aq (a multiple of 64).
        pub kp: usize,
        /// Rows of the tile (≤ 8).
        pub rows: usize,
        /// Activation groups per row.
        pub groups: usize,
        /// 4-term steps per group.
        pub steps: usize,
        /// The rows' group scales, (rows, groups).
        pub sa: &'a [f32],
        /// The panel's group shifts, (groups, 16).
        pub shift: &'a [i32],
    }

    /// A grouped tile with `vpdpbusd` (`a` holds Aq + 128 against Wq; up to 8 rows × one
    /// panel): per group the i32 sums, less the group's shift, converted and
    /// fused-multiply-added by the row's group scale into f32 sums; then
    /// C = fma(f32 sum, s_w, b), stored under a mask for a partial panel. The same
    /// operations as [`super::tile_groups`]' twin, so the same bits.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `w` holds one panel of `t.kp / 4` steps, `a` `t.rows` rows
    /// of `t.kp` bytes, `t.sa` and `t.shift` their shapes; `e.out` points at `t.rows`
    /// rows of `e.ldc` floats with `e.cols` writable columns each; `e.scales` holds 16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn tile_groups_vnni(w: &[i8], a: &[i8], t: GroupTile, e: Epilogue) {
        let ksteps = t.kp / 4;
        let mut s = [_mm512_setzero_si512(); MR];
        let mut f = [_mm512_setzero_ps(); MR];
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        for g in 0..t.groups {
            for step in g * t.steps..((g + 1) * t.steps).min(ksteps) {
                let w0 = _mm512_loadu_si512(wp.add(step * 64).cast());
                for r in 0..MR {
                    if r < t.rows {
                        let four = ap.add(r * t.kp + 4 * step).cast::<i32>().read_unaligned();
                        let x = _mm512_set1_epi32(four); // four bytes Aq + 128
                        s[r] = _mm512_dpbusd_epi32(s[r], x, w0);
                    }
                }
            }
            let shift = _mm512_loadu_si512(t.shift.as_ptr().add(g * NR).cast());
            for r in 0..MR {
                if r < t.rows {
                    let sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r], shift));
                    let sa = _mm512_set1_ps(*t.sa.get_unchecked(r * t.groups + g));
                    f[r] = _mm512_fmadd_ps(sum, sa, f[r]);
                    s[r] = _mm512_setzero_si512();
                }
            }
        }
        let mask: __mmask16 = if e.cols >= NR {
            0xffff
        } else {
            (1u16 << e.cols) - 1
        };
        let scales = _mm512_loadu_ps(e.scales.as_ptr());
        let bias = match e.bias {
            Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr()),
            None => _mm512_setzero_ps(),
        };
        for r in 0..t.rows {
            let y = _mm512_fmadd_ps(f[r], scales, bias);
            _mm512_mask_storeu_ps(e.out.add(r * e.ldc), mask, y);
        }
    }

    /// [`super::tile_groups`] on AVX2 + FMA: `vpmaddubsw` as in [`tile_avx2`] (|Aq|
    /// against Wq carrying Aq's signs), four rows at a time, each group's i32 sums
    /// converted and fused-multiply-added by the row's group scale.
    ///
    /// # Safety
    /// AVX2 and FMA; `w` holds one panel of `kp / 4` steps, `a` `rows` rows of `kp`
    /// bytes, `sa` `rows` × `groups` scales.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_groups_avx2(
        w: &[i8],
        a: &[i8],
        kp: usize,
        rows: usize,
        groups: usize,
        steps: usize,
        sa: &[f32],
        acc: &mut [[f32; NR]; MR],
    ) {
        let ksteps = kp / 4;
        let ones = _mm256_set1_epi16(1);
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        let mut r0 = 0;
        while r0 < rows {
            let rn = (rows - r0).min(4);
            let mut f = [[_mm256_setzero_ps(); 2]; 4];
            for g in 0..groups {
                let mut s = [[_mm256_setzero_si256(); 2]; 4];
                for step in g * steps..((g + 1) * steps).min(ksteps) {
                    let base = wp.add(step * 64);
                    let w0 = _mm256_loadu_si256(base.cast());
                    let w1 = _mm256_loadu_si256(base.add(32).cast());
                    for r in 0..4 {
                        if r < rn {
                            let four = ap
                                .add((r0 + r) * kp + 4 * step)
                                .cast::<i32>()
                                .read_unaligned();
                            let x = _mm256_set1_epi32(four);
                            let ax = _mm256_abs_epi8(x);
                            let p0 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, x));
                            let p1 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, x));
                            s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(p0, ones));
                            s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(p1, ones));
                        }
                    }
                }
                for r in 0..4 {
                    if r < rn {
                        let scale = _mm256_set1_ps(sa[(r0 + r) * groups + g]);
                        for h in 0..2 {
                            f[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][h]), scale, f[r][h]);
                        }
                    }
                }
            }
            for r in 0..rn {
                let row = acc[r0 + r].as_mut_ptr();
                _mm256_storeu_ps(row, f[r][0]);
                _mm256_storeu_ps(row.add(8), f[r][1]);
            }
            r0 += rn;
        }
    }

    /// Rows of an AMX block.
    pub(super) const AMX_ROWS: usize = 16;

    /// Configure the tile registers (palette 1) for blocks of `rows` rows: tiles 0 and 1
    /// the sums (rows × 16 i32), tile 2 the rows of Aq (rows × 64 bytes), tiles 3 and 4
    /// a panel's 16 groups of W (16 × 64 bytes).
    ///
    /// # Safety
    /// AMX-TILE, granted to the process (`super::amx_ready`); 1 ≤ rows ≤ 16.
    pub(super) unsafe fn amx_configure(rows: usize) {
        #[repr(C, align(64))]
        struct Config([u8; 64]);
        let mut cfg = Config([0; 64]);
        cfg.0[0] = 1; // palette 1
        for t in 0..5 {
            cfg.0[16 + 2 * t] = 64; // bytes per row (little-endian u16)
            cfg.0[48 + t] = if t >= 3 { 16 } else { rows as u8 };
        }
        std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, preserves_flags));
    }

    /// Return the tile registers to their initial state.
    ///
    /// # Safety
    /// AMX-TILE, granted to the process.
    pub(super) unsafe fn amx_release() {
        std::arch::asm!("tilerelease", options(nostack, preserves_flags));
    }

    /// The integer sums of a block (the configured rows × `panels` panels) with
    /// `tdpbssd`: sums[r][16h + c] = Σ_p Aq[r, p] · Wq[16h + c, p], exact in i32.
    ///
    /// # Safety
    /// AMX-TILE and AMX-INT8, granted, configured by [`amx_configure`] for the rows `a`
    /// holds (kp bytes each, kp a multiple of 64); `w` holds `panels` panels of kp / 4
    /// groups.
    pub(super) unsafe fn amx_sums(
        w: &[i8],
        a: &[i8],
        kp: usize,
        panels: usize,
        sums: &mut [[i32; 2 * NR]; AMX_ROWS],
    ) {
        let groups = kp / 4;
        let (ap, wp) = (a.as_ptr(), w.as_ptr());
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            options(nostack, nomem, preserves_flags)
        );
        for step in 0..kp / 64 {
            std::arch::asm!(
                "tileloadd tmm2, [{a} + {lda}*1]",
                "tileloadd tmm3, [{w} + {ldw}*1]",
                "tdpbssd tmm0, tmm2, tmm3",
                a = in(reg) ap.add(64 * step),
                lda = in(reg) kp,
                w = in(reg) wp.add(64 * 16 * step),
                ldw = in(reg) 64usize,
                options(nostack, preserves_flags)
            );
            if panels == 2 {
                std::arch::asm!(
                    "tileloadd tmm4, [{w} + {ldw}*1]",
                    "tdpbssd tmm1, tmm2, tmm4",
                    w = in(reg) wp.add(64 * (groups + 16 * step)),
                    ldw = in(reg) 64usize,
                    options(nostack, preserves_flags)
                );
            }
        }
        let out = sums.as_mut_ptr().cast::<u8>();
        std::arch::asm!(
            "tilestored [{o} + {ld}*1], tmm0",
            "tilestored [{o2} + {ld}*1], tmm1",
            o = in(reg) out,
            o2 = in(reg) out.add(64),
            ld = in(reg) 4 * 2 * NR,
            options(nostack, preserves_flags)
        );
    }

    /// [`super::tile`] with `vpmaddubsw`: |Aq| against Wq carrying Aq's signs, pairs
    /// summed in i16 (≤ 32,258: no saturation), then in i32.
    ///
    /// # Safety
    /// AVX2; `w` holds `panels` panels of `kp / 4` groups, `a` `rows` rows of `kp`
    /// bytes.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn tile_avx2(
        w: &[i8],
        a: &[i8],
        kp: usize,
        rows: usize,
        panels: usize,
        acc: &mut [[i32; 2 * NR]; MR],
    ) {
        let groups = kp / 4;
        let ones = _mm256_set1_epi16(1);
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        for panel in 0..panels {
            // four rows at a time: 4 rows × 16 columns = 8 accumulators
            let mut r0 = 0;
            while r0 < rows {
                let rn = (rows - r0).min(4);
                let mut s = [[_mm256_setzero_si256(); 2]; 4];
                for g in 0..groups {
                    let base = wp.add((panel * groups + g) * 64);
                    let w0 = _mm256_loadu_si256(base.cast());
                    let w1 = _mm256_loadu_si256(base.add(32).cast());
                    for r in 0..4 {
                        if r < rn {
                            let four = ap.add((r0 + r) * kp + 4 * g).cast::<i32>().read_unaligned();
                            let x = _mm256_set1_epi32(four);
                            let ax = _mm256_abs_epi8(x);
                            let p0 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, x));
                            let p1 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, x));
                            s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(p0, ones));
                            s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(p1, ones));
                        }
                    }
                }
                for r in 0..rn {
                    let row = acc[r0 + r].as_mut_ptr().add(panel * NR);
                    _mm256_storeu_si256(row.cast(), s[r][0]);
                    _mm256_storeu_si256(row.add(8).cast(), s[r][1]);
                }
                r0 += rn;
            }
        }
    }
}

/// The plain twin: each row quantised, each output an integer dot product over k in
/// order, then the same float steps.
pub mod reference {
    use super::{quantize_row_plain, Int8Matrix};

    /// The grouped product (module docs, "Groups"), one number at a time: each row's
    /// groups quantised alone, per output the groups' integer sums in order, each
    /// fused-multiply-added by its scale, then fma(sum, s_w, b).
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    fn matmul_groups(w: &Int8Matrix, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k, group) = (w.n, w.k, w.group);
        let rows: Vec<Vec<i8>> = (0..n).map(|j| w.row(j)).collect();
        for i in 0..m {
            let row = &a[i * k..(i + 1) * k];
            // (scale, integers) per group
            let parts: Vec<(f32, Vec<i8>)> = row
                .chunks(group)
                .map(|x| {
                    let mut q = vec![0i8; x.len()];
                    (quantize_row_plain(x, &mut q), q)
                })
                .collect();
            for (j, wq) in rows.iter().enumerate() {
                let mut f = 0.0f32;
                for ((s, q), wg) in parts.iter().zip(wq.chunks(group)) {
                    let sum: i32 = q
                        .iter()
                        .zip(wg)
                        .map(|(&x, &y)| i32::from(x) * i32::from(y))
                        .sum();
                    f = (sum as f32).mul_add(*s, f);
                }
                c[i * n + j] = f.mul_add(w.scales[j], bias.map_or(0.0, |b| b[j]));
            }
        }
    }

    /// [`Int8Matrix::matmul`], one number at a time.
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    pub fn matmul(w: &Int8Matrix, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) {
        if w.group > 0 {
            matmul_groups(w, c, a, bias, m);
            return;
        }
        let (n, k) = (w.n, w.k);
        let rows: Vec<Vec<i8>> = (0..n).map(|j| w.row(j)).collect();
        let mut q = vec![0i8; w.kp];
        for i in 0..m {
            let sa = quantize_row_plain(&a[i * k..(i + 1) * k], &mut q);
            for (j, wq) in rows.iter().enumerate() {
                let sum: i32 = q
                    .iter()
                    .zip(wq)
                    .map(|(&x, &y)| i32::from(x) * i32::from(y))
                    .sum();
                c[i * n + j] = (sum as f32).mul_add(sa * w.scales[j], bias.map_or(0.0, |b| b[j]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Runtime, Tensor};
    use rand::{rngs::StdRng, SeedableRng};

    /// Whether `a` and `b` hold the same numbers, bit for bit.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// `got` lies within 3 % of the f32 product `exact`'s largest magnitude.
    fn assert_near(exact: &Tensor, got: &[f32], what: String) {
        let scale = exact.data().iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = exact
            .data()
            .iter()
            .zip(got)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst <= 0.03 * scale, "{what}: {worst} of {scale}");
    }

    /// Every level, thread count and row count gives the twin's bits, for shapes with
    /// partial panels, k not a multiple of 4, one row and many.
    #[test]
    fn int8_products_equal_the_twin_on_every_level() {
        let mut rng = StdRng::seed_from_u64(8);
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
            let q = Int8Matrix::quantize(w.data(), n, k);
            let mut want = vec![f32::NAN; m * n];
            reference::matmul(&q, &mut want, a.data(), Some(b.data()), m);
            for isa in Isa::available() {
                for t in [1, 2] {
                    let rt = Runtime::builder().threads(t).isa(isa).build().unwrap();
                    let mut got = vec![f32::NAN; m * n];
                    rt.install(|| q.matmul(&mut got, a.data(), Some(b.data()), m));
                    assert!(
                        same_bits(&got, &want),
                        "{isa:?} threads {t}: m {m} k {k} n {n}"
                    );
                    // one row alone = the same row in the batch
                    let last = m - 1;
                    let mut one = vec![f32::NAN; n];
                    rt.install(|| q.matmul(&mut one, &a.data()[last * k..], Some(b.data()), 1));
                    assert!(same_bits(&one, &want[last * n..]));
                }
            }
            // and the result is near the f32 product
            let exact = crate::ops::linear(&a, &w, Some(&b)).unwrap();
            assert_near(&exact, &want, format!("m {m} k {k} n {n}"));
        }
    }

    /// Every path this CPU can run (not only the one each level picks: on a CPU with
    /// AMX the Avx512 level runs the AMX tiles, not VNNI) gives the twin's bits, with
    /// and without a bias, on row counts that leave partial AMX blocks and k that is
    /// not a multiple of 64.
    #[test]
    fn every_int8_path_equals_the_twin() {
        let mut rng = StdRng::seed_from_u64(9);
        let paths = Path::available();
        assert!(paths.contains(&Path::Plain));
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 7, 5),
            (3, 33, 17),
            (17, 100, 48),
            (16, 384, 384),
            (47, 384, 1536),
            (130, 1536, 384),
        ] {
            let w = Tensor::randn(&[n, k], 0.05, &mut rng);
            let a = Tensor::randn(&[m, k], 1.0, &mut rng);
            let b = Tensor::randn(&[n], 0.1, &mut rng);
            let q = Int8Matrix::quantize(w.data(), n, k);
            for bias in [Some(b.data()), None] {
                let mut want = vec![f32::NAN; m * n];
                reference::matmul(&q, &mut want, a.data(), bias, m);
                for &path in &paths {
                    for t in [1, 2] {
                        let rt = Runtime::builder().threads(t).build().unwrap();
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| q.matmul_on(path, &mut got, a.data(), bias, m));
                        assert!(
                            same_bits(&got, &want),
                            "{path:?} threads {t}: m {m} k {k} n {n}"
                        );
                    }
                }
            }
        }
    }

    /// Grouped products: every path and level, at 1 and 2 threads, gives the twin's
    /// bits, for several groups, row counts (one row, partial tiles, row blocks), k
    /// not a multiple of G or of 64, with and without a bias; a row alone equals the
    /// same row among others; and the result is near the f32 product.
    #[test]
    fn grouped_int8_products_equal_the_twin_on_every_path() {
        let mut rng = StdRng::seed_from_u64(10);
        let paths = Path::available();
        for &(m, k, n, group) in &[
            (1, 7, 5, 4),
            (3, 33, 17, 8),
            (9, 100, 48, 32),
            (8, 576, 192, 64),
            (17, 384, 40, 128),
            (70, 1536, 384, 256),
            (130, 576, 64, 32),
        ] {
            let w = Tensor::randn(&[n, k], 0.05, &mut rng);
            let mut a = Tensor::randn(&[m, k], 1.0, &mut rng).data().to_vec();
            for row in a.chunks_exact_mut(k) {
                row[k / 2] *= 40.0; // an outlier input
            }
            let b = Tensor::randn(&[n], 0.1, &mut rng);
            let q = Int8Matrix::quantize_groups(w.data(), n, k, group).unwrap();
            for bias in [Some(b.data()), None] {
                let mut want = vec![f32::NAN; m * n];
                reference::matmul(&q, &mut want, &a, bias, m);
                for isa in Isa::available() {
                    for t in [1, 2] {
                        let rt = Runtime::builder().threads(t).isa(isa).build().unwrap();
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| q.matmul(&mut got, &a, bias, m));
                        assert!(
                            same_bits(&got, &want),
                            "{isa:?} threads {t}: m {m} k {k} n {n} G {group}"
                        );
                        let last = m - 1;
                        let mut one = vec![f32::NAN; n];
                        rt.install(|| q.matmul(&mut one, &a[last * k..], bias, 1));
                        assert!(
                            same_bits(&one, &want[last * n..]),
                            "{isa:?} threads {t}: the last row alone, m {m} G {group}"
                        );
                    }
                }
                for &path in &paths {
                    for t in [1, 2] {
                        let rt = Runtime::builder().threads(t).build().unwrap();
                        let mut got = vec![f32::NAN; m * n];
                        rt.install(|| q.matmul_on(path, &mut got, &a, bias, m));
                        assert!(
                            same_bits(&got, &want),
                            "{path:?} threads {t}: m {m} k {k} n {n} G {group}"
                        );
                    }
                }
            }
            let at = Tensor::new(a.clone(), &[m, k]).unwrap();
            let exact = crate::ops::linear(&at, &w, Some(&b)).unwrap();
            let mut got = vec![f32::NAN; m * n];
            reference::matmul(&q, &mut got, &a, Some(b.data()), m);
            assert_near(&exact, &got, format!("m {m} k {k} n {n} G {group}"));
        }
    }

    /// A group that is not a positive multiple of 4 is refused, by name.
    #[test]
    fn a_bad_group_is_refused() {
        for group in [0, 6] {
            let e = Int8Matrix::quantize_groups(&[0.0; 8], 1, 8, group).unwrap_err();
            assert!(e.to_string().contains("multiple of 4"), "{e}");
        }
    }

    /// Rows of zeros, a column of zeros and extreme values quantise without a NaN.
    #[test]
    fn zero_rows_and_columns_are_exact() {
        let (n, k) = (20, 10);
        let mut w = vec![0.5f32; n * k];
        w[..k].fill(0.0); // row 0 of W all zero
        let q = Int8Matrix::quantize(&w, n, k);
        let a = vec![0.0f32; 2 * k];
        let mut c = vec![f32::NAN; 2 * n];
        q.matmul(&mut c, &a, None, 2);
        assert!(c.iter().all(|&x| x == 0.0));
        assert!(q.max_error() <= 1e-6, "{}", q.max_error());
    }
}
