//! A vocabulary head's logits in 8-bit integers, with every row that can be the
//! largest computed exactly: `--precision int8` for a head too wide to read in f16 or
//! f32 at every decoded token (Whisper's 51,864 × d table is 40 MB in f16, 20 MB in
//! int8), without changing which token greedy decoding chooses.
//!
//! # The bound
//!
//! The int8 product ([`Int8Matrix`]) of row j with the activations x is
//! I_j = s_w[j] · s_x · Σ_p Wq[j, p] · Xq[p], where W[j, p] = s_w[j] · Wq[j, p] + e_p with
//! |e_p| ≤ s_w[j] / 2, and x[p] = s_x · Xq[p] + d_p with |d_p| ≤ s_x / 2. So
//!
//! W[j] · x − I_j = Σ_p e_p · x[p] + Σ_p s_w[j] · Wq[j, p] · d_p, and
//! |W[j] · x − I_j| ≤ s_w[j] / 2 · ‖x‖₁ + s_x / 2 · s_w[j] · Σ_p |Wq[j, p]|.
//!
//! The exact kernel's own f32 sums lie within k · 2⁻²³ · Σ_p |W[j, p] · x[p]| ≤
//! k · 2⁻²³ · 127.5 · s_w[j] · ‖x‖₁ of W[j] · x (a generous γ_k), and the int8 kernel's
//! last float steps within 2⁻²⁰ · |I_j|. Their sum, widened by 2⁻¹⁰ for the roundings of
//! the bound's own arithmetic, is β_j: the exact kernel's number lies in
//! [I_j − β_j, I_j + β_j].
//!
//! # The screen
//!
//! A decoding rule may mask rows (Whisper suppresses ~90 ids at every step, and its
//! timestamp rules mask the special and timestamp tokens as whole ranges). So the rows
//! are split: `exact` rows (a range given per call: Whisper's special and timestamp
//! tokens) are always computed exactly, and in the rest, the rows whose I_j + β_j reaches
//! the (K + 1)-th largest I_j − β_j (K = [`MASKED_ROWS`]) are computed exactly too; every
//! other row keeps I_j. If a rule masks at most K of those rows, the largest unmasked
//! number is an exactly computed one: among the K + 1 rows of the largest lower bounds
//! one is unmasked, so the largest unmasked exact number reaches that bound T; the row
//! holding it has I + β ≥ T and was computed exactly, and every row left in int8 has
//! I ≤ I + β < T. Greedy decoding therefore chooses the exact head's token (for the same
//! hidden state). More: the K + 1 largest exact numbers (outside the always-masked rows)
//! all reach T, so they are computed exactly, and every int8 row lies below them: the
//! K + 1 largest logits are the exact head's, rows and numbers (a beam search of up to
//! K + 1 beams sees the exact head's candidates). The rest carry int8's error (the
//! softmax's normaliser, a sampled token's odds).
//!
//! A row of x that is not finite, or whose bound is not, is computed exactly whole.

use crate::ops::linear_int8::{quantize_row, Int8Matrix};

/// K: how many rows besides [`HeadRules`]' a decoding rule may mask at one step while
/// the largest unmasked logit stays an exactly computed one (module docs): Whisper's
/// first step masks two (blank and end of text), a logit bias may mask a few.
pub const MASKED_ROWS: usize = 8;

/// What the decoding rules do to a head's rows, for [`ScreenedHead::logits`]: rows they
/// mask as whole ranges (computed exactly at every step) and rows they always mask
/// (never the largest: left in int8 and out of the ranking).
#[derive(Clone, Debug, Default)]
pub struct HeadRules {
    /// Rows computed exactly at every step (Whisper's special and timestamp tokens, from
    /// end of text on: its timestamp rules mask them as whole ranges).
    pub exact: std::ops::Range<usize>,
    /// Whether row j is masked at every step (Whisper's `suppress_ids`), j < its length.
    masked: Vec<bool>,
}

impl HeadRules {
    /// The rules of a head: `exact` rows computed at every step, `masked` ids masked at
    /// every step.
    pub fn new(exact: std::ops::Range<usize>, masked: &[usize]) -> HeadRules {
        let len = masked.iter().map(|&j| j + 1).max().unwrap_or(0);
        let mut bits = vec![false; len];
        for &j in masked {
            bits[j] = true;
        }
        HeadRules {
            exact,
            masked: bits,
        }
    }

    /// Whether row j is masked at every step.
    pub fn is_masked(&self, j: usize) -> bool {
        self.masked.get(j).copied().unwrap_or(false)
    }
}

/// A head W (n × k) in int8 with the numbers that bound each row's error, for
/// [`ScreenedHead::logits`].
#[derive(Clone, Debug)]
pub struct ScreenedHead {
    /// W quantised per row ([`Int8Matrix::quantize`]).
    int8: Int8Matrix,
    /// Per row j: ‖ŵ_j‖₁, ‖ŵ_j‖₂ (the copy ŵ_j = s_w[j] · Wq[j, ·]), ‖e_j‖∞, ‖e_j‖₂ (its
    /// rounding e_j = W[j] − ŵ_j), each rounded up.
    norms: Vec<[f32; 4]>,
}

/// What one call of [`ScreenedHead::logits`] computed exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScreenCounts {
    /// Rows of x.
    pub rows: usize,
    /// Head rows computed exactly over all rows of x, the always-exact range included.
    pub exact: usize,
}

/// `v` (≥ 0, computed in f64) as an f32 no smaller.
fn up(v: f64) -> f32 {
    let f = v as f32;
    if f64::from(f) < v {
        f.next_up()
    } else {
        f
    }
}

impl ScreenedHead {
    /// Quantise W (n × k, row-major) once, and measure each row's copy and rounding.
    ///
    /// Panics if `w.len() != n · k` (an internal invariant).
    ///
    /// # Shapes
    /// w: (n, k)
    pub fn new(w: &[f32], n: usize, k: usize) -> ScreenedHead {
        let int8 = Int8Matrix::quantize(w, n, k);
        let mut q = vec![0i8; k.next_multiple_of(4)];
        let norms = w
            .chunks_exact(k.max(1))
            .take(n)
            .map(|row| {
                // The same bytes as the copy's row (quantize's own rounding).
                let s = f64::from(quantize_row(row, &mut q));
                let (mut a1, mut a2, mut e_inf, mut e2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
                for (&v, &qv) in row.iter().zip(&q) {
                    let c = s * f64::from(qv);
                    let e = (f64::from(v) - c).abs();
                    a1 += c.abs();
                    a2 += c * c;
                    e_inf = e_inf.max(e);
                    e2 += e * e;
                }
                [up(a1), up(a2.sqrt()), up(e_inf), up(e2.sqrt())]
            })
            .collect();
        ScreenedHead { int8, norms }
    }

    /// The int8 copy.
    pub fn int8(&self) -> &Int8Matrix {
        &self.int8
    }

    /// W's rows (the vocabulary).
    pub fn n(&self) -> usize {
        self.int8.n()
    }

    /// W's columns (the model width).
    pub fn k(&self) -> usize {
        self.int8.k()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.int8.bytes() + 16 * self.norms.len()
    }

    /// y (m × n) = x (m × k) · Wᵀ in int8 (module docs: each row of x and its rounding's
    /// residue, one pass over W), then for each row of x the head rows that can be the
    /// largest, and every row in `exact`, overwritten by `exact_rows(x_row, rows, y_row)`:
    /// it must write y_row[j] for each j in `rows` (ascending) with the exact kernel's
    /// number. Each row of x is screened alone.
    ///
    /// Panics if a slice's length does not match (an internal invariant).
    ///
    /// # Shapes
    /// y: (m, n), x: (m, k)
    pub fn logits(
        &self,
        y: &mut [f32],
        x: &[f32],
        m: usize,
        rules: &HeadRules,
        exact_rows: impl Fn(&[f32], &[usize], &mut [f32]),
    ) -> ScreenCounts {
        let (n, k) = (self.n(), self.k());
        assert!(
            y.len() == m * n && x.len() == m * k,
            "ScreenedHead::logits sizes"
        ); // ok: internal invariant
        let mut counts = ScreenCounts { rows: m, exact: 0 };
        if m == 0 || n == 0 {
            return counts;
        }
        // Each row x and its residue r = x − s_x · Xq, quantised in turn by the kernel:
        // x ≈ s_x · Xq + s_r · Rq, within d = r − s_r · Rq.
        let mut xr = vec![0.0f32; 2 * m * k];
        let mut q = vec![0i8; k.next_multiple_of(4)];
        let mut residues = Vec::with_capacity(m);
        for (row, pair) in x
            .chunks_exact(k.max(1))
            .zip(xr.chunks_exact_mut(2 * k.max(1)))
        {
            let (xa, r) = pair.split_at_mut(k);
            xa.copy_from_slice(row);
            residues.push(residue(row, r, &mut q));
        }
        let mut both = vec![0.0f32; 2 * m * n];
        self.int8.matmul(&mut both, &xr, None, 2 * m);
        for (yr, pair) in y.chunks_exact_mut(n).zip(both.chunks_exact(2 * n)) {
            let (a, b) = pair.split_at(n);
            for ((y, &a), &b) in yr.iter_mut().zip(a).zip(b) {
                *y = a + b;
            }
        }
        let exact = rules.exact.start.min(n)..rules.exact.end.min(n);
        let mut bounds = vec![0.0f32; n];
        for ((xr, yr), &(d_inf, d2)) in x
            .chunks_exact(k.max(1))
            .zip(y.chunks_exact_mut(n))
            .zip(&residues)
        {
            let rows = match self.bound(xr, d_inf, d2, yr, &mut bounds) {
                Some(()) => self.screen(yr, &bounds, &exact, rules),
                None => (0..n).collect(),
            };
            exact_rows(xr, &rows, yr);
            counts.exact += rows.len();
        }
        counts
    }

    /// β_j for every row j into `bounds` (module docs), for the activations `x`, the
    /// norms ‖d‖∞ and ‖d‖₂ of what their two int8 rows leave, and their int8 numbers
    /// `y`; None if x or a bound is not finite.
    fn bound(&self, x: &[f32], d_inf: f64, d2: f64, y: &[f32], bounds: &mut [f32]) -> Option<()> {
        let (x1, x2) = x.iter().fold((0.0f64, 0.0f64), |(a, b), &v| {
            let v = f64::from(v);
            (a + v.abs(), b + v * v)
        });
        let (x1, x2, d_inf, d2) = (up(x1), up(x2.sqrt()), up(d_inf), up(d2));
        if !(x1.is_finite() && x2.is_finite() && d_inf.is_finite() && d2.is_finite()) {
            return None;
        }
        // The exact kernel's own f32 sums: a generous γ_k = k · 2⁻²³ of Σ|W x| ≤ ‖W‖₂ ‖x‖₂.
        let gamma = x.len() as f32 * f32::EPSILON * x2;
        let widen = 1.0 + 1.0 / 1024.0;
        let last_steps = 1.0 / (1u32 << 20) as f32;
        let mut finite = true;
        for ((b, &[a1, a2, e_inf, e2]), &v) in bounds.iter_mut().zip(&self.norms).zip(y) {
            let weights = (e_inf * x1).min(e2 * x2);
            let activations = (d_inf * a1).min(d2 * a2);
            *b = (weights + activations + gamma * (a2 + e2) + v.abs() * last_steps) * widen;
            finite &= b.is_finite();
        }
        finite.then_some(())
    }

    /// The rows of one row of logits `y` to compute exactly: every row in `exact`, and
    /// of the rest, leaving out those `rules` always mask, those whose upper bound
    /// reaches the (K + 1)-th largest lower bound (module docs), ascending.
    fn screen(
        &self,
        y: &[f32],
        bounds: &[f32],
        exact: &std::ops::Range<usize>,
        rules: &HeadRules,
    ) -> Vec<usize> {
        let n = y.len();
        let screened = |j: &usize| !rules.is_masked(*j);
        let outside = || (0..exact.start).chain(exact.end..n).filter(screened);
        // Fewer rows than K + 1 outside: every one is computed exactly.
        let threshold = kth_largest(outside().map(|j| y[j] - bounds[j]), MASKED_ROWS + 1)
            .unwrap_or(f32::NEG_INFINITY);
        let can_win = |j: &usize| screened(j) && y[*j] + bounds[*j] >= threshold;
        // Ascending: the rows before the range, the range, the rows after it.
        (0..exact.start)
            .filter(can_win)
            .chain(exact.clone())
            .chain((exact.end..n).filter(can_win))
            .collect()
    }
}

/// The residue r = x − s_x · Xq of x's int8 rounding into `r`, and the norms ‖d‖∞ and
/// ‖d‖₂ of what r's own rounding leaves, d = r − s_r · Rq, in f64 (each product and
/// difference nearly exact); `q` is scratch of k rounded up to 4 bytes.
fn residue(x: &[f32], r: &mut [f32], q: &mut [i8]) -> (f64, f64) {
    let s = quantize_row(x, q);
    for ((r, &v), &qv) in r.iter_mut().zip(x).zip(q.iter()) {
        *r = v - s * f32::from(qv);
    }
    let s_r = f64::from(quantize_row(r, q));
    let (mut d_inf, mut d2) = (0.0f64, 0.0f64);
    for (&rv, &qv) in r.iter().zip(q.iter()) {
        let d = (f64::from(rv) - s_r * f64::from(qv)).abs();
        d_inf = d_inf.max(d);
        d2 += d * d;
    }
    (d_inf, d2.sqrt())
}

/// The r-th largest of the numbers `v` yields (r ≥ 1, no NaN), or None when it yields
/// fewer than r: one pass that keeps only the numbers above a rising floor, so a long
/// run costs about one comparison each and no copy of it.
fn kth_largest(v: impl IntoIterator<Item = f32>, r: usize) -> Option<f32> {
    let r = r.max(1);
    let keep = 4 * r.max(16);
    let mut top: Vec<f32> = Vec::with_capacity(keep + 1);
    let mut floor = f32::NEG_INFINITY;
    for x in v {
        if x > floor || top.len() < r {
            top.push(x);
            if top.len() >= keep {
                // Keep the r largest; the r-th is the new floor (anything not above it
                // cannot be among the r largest).
                top.select_nth_unstable_by(r - 1, |a, b| b.total_cmp(a));
                top.truncate(r);
                floor = top[r - 1];
            }
        }
    }
    if top.len() < r {
        return None;
    }
    top.select_nth_unstable_by(r - 1, |a, b| b.total_cmp(a));
    Some(top[r - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::{gemv_t_f16, gemv_t_f16_rows};
    use crate::runtime::Isa;
    use crate::{Runtime, Tensor};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn kth_largest_equals_a_sort() {
        let mut rng = StdRng::seed_from_u64(3);
        for len in [1usize, 2, 17, 300, 5000] {
            let v: Vec<f32> = (0..len).map(|_| rng.random_range(-9.0f32..9.0)).collect();
            let mut sorted = v.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            for r in [1, 2, 5, 129, 4999] {
                let got = kth_largest(v.iter().copied(), r);
                if r <= len {
                    assert_eq!(got, Some(sorted[r - 1]), "len {len} r {r}");
                } else {
                    assert_eq!(got, None, "len {len} r {r}: fewer numbers than r");
                }
            }
        }
        // ties and an ascending run (the floor rises at every compaction)
        let v: Vec<f32> = (0..1000).map(|i| (i / 3) as f32).collect();
        assert_eq!(kth_largest(v, 129), Some(290.0));
    }

    /// The exact kernel's numbers for `rows` of W (f16 values) at x, through the
    /// row-subset kernel.
    fn f16_rows(
        w16: &[half::f16],
        k: usize,
        n: usize,
    ) -> impl Fn(&[f32], &[usize], &mut [f32]) + '_ {
        move |x, rows, y| gemv_t_f16_rows(y, x, w16, k, n, rows)
    }

    /// A head of f16 numbers (W and its f32 widening) with near-ties, and `m` hidden
    /// states, some with an outlier channel: rows 0..16 are copies of one row with
    /// small changes, so their numbers for the states aligned with it are close and
    /// the largest (a near-tie that int8 alone gets wrong on some rows of x).
    fn head_case(
        rng: &mut StdRng,
        n: usize,
        k: usize,
        m: usize,
    ) -> (Vec<half::f16>, Vec<f32>, Tensor) {
        let mut w = Tensor::randn(&[n, k], 0.05, rng);
        let lead: Vec<f32> = w.data()[..k].to_vec();
        for j in 1..16 {
            for (p, v) in w.data_mut()[j * k..(j + 1) * k].iter_mut().enumerate() {
                *v = lead[p] + rng.random_range(-0.004f32..0.004);
            }
        }
        let w16: Vec<half::f16> = w.data().iter().map(|&v| half::f16::from_f32(v)).collect();
        let w: Vec<f32> = w16.iter().map(|h| h.to_f32()).collect();
        let mut x = Tensor::randn(&[m, k], 1.0, rng);
        for i in 0..m {
            let row = &mut x.data_mut()[i * k..(i + 1) * k];
            for (v, &l) in row.iter_mut().zip(&lead) {
                *v += 60.0 * l; // aligned with the copies
            }
            if i % 2 == 0 {
                row[(5 * i) % k] = 14.0;
            }
        }
        (w16, w, x)
    }

    /// On every level and at 1 and 2 threads: each screened row holds the exact
    /// kernel's number bit for bit, each int8 row lies within its bound of it, and with
    /// the rules' masked rows and any K more masked (the K of largest lower bound, the
    /// worst case, or K of the largest exact numbers), the largest unmasked logit is
    /// exact's, row and bits — where the int8 numbers alone choose another row on some
    /// rows of x.
    #[test]
    fn the_largest_unmasked_logit_is_the_exact_kernels() {
        let mut rng = StdRng::seed_from_u64(11);
        let (n, k, m) = (3_000, 96, 12);
        let (w16, w, x) = head_case(&mut rng, n, k, m);
        let head = ScreenedHead::new(&w, n, k);
        let always: Vec<usize> = (3..n).step_by(37).collect();
        let rules = HeadRules::new(2_900..n, &always);
        let outside: Vec<usize> = (0..rules.exact.start)
            .filter(|&j| !rules.is_masked(j))
            .collect();
        let mut int8_wrong = 0;
        for isa in Isa::available() {
            for t in [1, 2] {
                let rt = Runtime::builder().threads(t).isa(isa).build().unwrap();
                rt.install(|| {
                    let mut y = vec![f32::NAN; m * n];
                    let counts = head.logits(&mut y, x.data(), m, &rules, f16_rows(&w16, k, n));
                    assert_eq!(counts.rows, m);
                    assert!(
                        counts.exact < m * (100 + 4 + rules.exact.len()),
                        "{isa:?}: {counts:?}"
                    );
                    for (i, (xr, yr)) in x.data().chunks(k).zip(y.chunks(n)).enumerate() {
                        let mut want = vec![0.0f32; n];
                        gemv_t_f16(&mut want, xr, &w16, k, n);
                        // The int8 numbers: a screen that computes nothing exactly.
                        let mut int8 = vec![f32::NAN; n];
                        head.logits(&mut int8, xr, 1, &rules, |_, _, _| {});
                        let mut bounds = vec![0.0f32; n];
                        let (mut r, mut q) = (vec![0.0f32; k], vec![0i8; k + 3]);
                        let (d_inf, d2) = residue(xr, &mut r, &mut q);
                        head.bound(xr, d_inf, d2, &int8, &mut bounds).unwrap();
                        let rows = head.screen(&int8, &bounds, &rules.exact, &rules);
                        for j in 0..n {
                            if rows.binary_search(&j).is_ok() {
                                assert_eq!(
                                    yr[j].to_bits(),
                                    want[j].to_bits(),
                                    "{isa:?} t {t} x {i} row {j}"
                                );
                            } else {
                                assert_eq!(yr[j].to_bits(), int8[j].to_bits());
                                assert!(
                                    (yr[j] - want[j]).abs() <= bounds[j],
                                    "row {j} outside its bound"
                                );
                            }
                        }
                        let argmax = |v: &[f32], masked: &[usize]| {
                            outside
                                .iter()
                                .copied()
                                .filter(|j| !masked.contains(j))
                                .max_by(|&a, &b| v[a].total_cmp(&v[b]))
                                .unwrap()
                        };
                        let mut by_low = outside.clone();
                        by_low.sort_by(|&a, &b| {
                            (int8[b] - bounds[b]).total_cmp(&(int8[a] - bounds[a]))
                        });
                        let mut by_exact = outside.clone();
                        by_exact.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
                        for masked in [
                            &[][..],
                            &by_low[..MASKED_ROWS],
                            &by_exact[..MASKED_ROWS],
                            &by_exact[1..2],
                        ] {
                            let top = argmax(&want, masked);
                            assert_eq!(argmax(yr, masked), top, "{isa:?} t {t} x {i}");
                            assert_eq!(yr[top].to_bits(), want[top].to_bits());
                            int8_wrong += usize::from(argmax(&int8, masked) != top);
                        }
                        // The K + 1 largest: the exact head's rows, with its bits.
                        let top_k = |v: &[f32]| {
                            let mut o = outside.clone();
                            o.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
                            o.truncate(MASKED_ROWS + 1);
                            o
                        };
                        let (got, exact_top) = (top_k(yr), top_k(&want));
                        assert_eq!(got, exact_top, "{isa:?} t {t} x {i}: the K + 1 largest");
                        for &j in &got {
                            assert_eq!(yr[j].to_bits(), want[j].to_bits());
                        }
                    }
                });
            }
        }
        assert!(
            int8_wrong > 0,
            "no case where int8 alone chooses another row: the test proves nothing"
        );
    }

    /// The row-subset kernel gives each named row the full kernel's bits, including the
    /// last n mod 4 rows, at every level.
    #[test]
    fn row_subsets_equal_the_whole_product() {
        let mut rng = StdRng::seed_from_u64(12);
        for (n, k) in [(7usize, 5usize), (130, 33), (1027, 64)] {
            let w = Tensor::randn(&[n, k], 0.1, &mut rng);
            let w16: Vec<half::f16> = w.data().iter().map(|&v| half::f16::from_f32(v)).collect();
            let w32: Vec<f32> = w16.iter().map(|h| h.to_f32()).collect();
            let x = Tensor::randn(&[k], 1.0, &mut rng);
            let rows: Vec<usize> = (0..n).filter(|j| j % 3 == 0 || *j + 2 >= n).collect();
            for isa in Isa::available() {
                for t in [1, 2] {
                    let rt = Runtime::builder().threads(t).isa(isa).build().unwrap();
                    rt.install(|| {
                        let mut want = vec![0.0f32; n];
                        gemv_t_f16(&mut want, x.data(), &w16, k, n);
                        let mut got = vec![f32::NAN; n];
                        gemv_t_f16_rows(&mut got, x.data(), &w16, k, n, &rows);
                        let mut want32 = vec![0.0f32; n];
                        crate::ops::matmul::gemm_into(&mut want32, x.data(), &w32, 1, k, n, true);
                        let mut got32 = vec![f32::NAN; n];
                        crate::ops::matmul::gemv_t_rows(&mut got32, x.data(), &w32, k, n, &rows);
                        for &j in &rows {
                            assert_eq!(
                                got[j].to_bits(),
                                want[j].to_bits(),
                                "{isa:?} f16 n {n} row {j}"
                            );
                            if isa >= Isa::Avx2 {
                                assert_eq!(
                                    got32[j].to_bits(),
                                    want32[j].to_bits(),
                                    "{isa:?} f32 n {n} row {j}"
                                );
                            }
                        }
                    });
                }
            }
        }
    }

    /// A row with a NaN or an infinity is computed exactly whole (no bound holds).
    #[test]
    fn a_row_that_is_not_finite_is_computed_exactly_whole() {
        let mut rng = StdRng::seed_from_u64(13);
        let (n, k) = (300, 16);
        let (w16, w, mut x) = head_case(&mut rng, n, k, 3);
        x.data_mut()[k + 3] = f32::INFINITY;
        let head = ScreenedHead::new(&w, n, k);
        let mut y = vec![0.0f32; 3 * n];
        let counts = head.logits(
            &mut y,
            x.data(),
            3,
            &HeadRules::default(),
            f16_rows(&w16, k, n),
        );
        assert!(counts.exact >= n, "the infinite row is exact whole");
        let mut want = vec![0.0f32; n];
        gemv_t_f16(&mut want, &x.data()[k..2 * k], &w16, k, n);
        let same = y[n..2 * n]
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same);
    }
}
