//! layernorm: y = (x − mean) / sqrt(var + 1e-5) · w + b, population variance.
//!
//! Usually two passes per row. The first sums `d = x − K` and `d²` around a
//! shift `K`, the mean of the row's first 128 elements: with `K` near the mean,
//! `x − K` is exact even for inputs with a large common offset, and
//! `mean = K + Σd/C`, `var = Σd²/C − (Σd/C)²` cancel almost nothing. The second
//! pass writes the affine output. When `K` is far from the mean
//! (`(Σd/C)² > Σd²/C / 16`, so the variance would lose bits), a second
//! statistics pass around the first mean runs the corrected two-pass algorithm
//! instead. For N(0, 1) rows that is about one row in 200 (with a 32-element
//! `K` it was one in 6, and the extra pass cost about 3% of layernorm
//! 1024x4096).
//!
//! The output pass prefetches the next row toward L2 only: x, w and b of a
//! 4096-column row fill a 48 KiB L1 by themselves, and a next row hinted into
//! L1 evicted them (1024x4096, W8, one worker, in a stand-alone copy of this
//! loop: 1.46–1.53 → 1.33–1.40 ms).

use super::rows::{RowKernel, fold_n};
use crate::packet::Packet;
use crate::simt::{PacketVisitor, RowSchedule};

/// ε of layernorm.
pub const EPS: f32 = 1e-5;

/// The first pass sums around the mean of the row's first this-many elements.
const SHIFT_SAMPLE: usize = 128;

/// The mean of `head`, summed in 8 lanes (the compiler vectorizes it), so the
/// shift is the same at every packet width.
#[inline(always)]
fn head_mean(head: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = head.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (l, v) in lanes.iter_mut().zip(chunk) {
            *l += v;
        }
    }
    lanes.iter().chain(rest).sum::<f32>() / head.len() as f32
}

/// The layernorm kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct LayerNorm<'a> {
    /// `x[R,C]`.
    pub x: &'a [f32],
    /// `w[C]`.
    pub w: &'a [f32],
    /// `b[C]`.
    pub b: &'a [f32],
}

/// Accumulators per sum: at most 4 of the schedule's `A`, so that both sums'
/// accumulators fit in 8 of the 16 registers of AVX2 and SSE (two sets of 8
/// spilled to the stack on every packet: layernorm 1024x4096 ran 25% slower).
const MAX_ACC: usize = 4;

/// Sums `d = x − shift` and `d²` together. Packet accumulator `acc` of the
/// schedule (`0..A`) reduces into `acc mod 4`: the order is still fixed by
/// `(cols, local, W)` alone.
struct Centred<'r, P: Packet, const A: usize> {
    p: P,
    x: &'r [f32],
    shift: P::V,
    /// The shift as a scalar: the fill of masked lanes, which then add exactly 0.
    fill: f32,
    sum: [P::V; MAX_ACC],
    sq: [P::V; MAX_ACC],
}

impl<P: Packet, const A: usize> Centred<'_, P, A> {
    #[inline(always)]
    fn add(&mut self, v: P::V, acc: usize) {
        let p = self.p;
        let d = p.sub(v, self.shift);
        let i = acc % MAX_ACC;
        self.sum[i] = p.add(self.sum[i], d);
        self.sq[i] = p.fma(d, d, self.sq[i]);
    }

    /// Folds the live accumulators (`min(A, 4)`) pairwise and reduces the lanes.
    #[inline(always)]
    fn fold(&self, acc: &[P::V; MAX_ACC]) -> f32 {
        let p = self.p;
        let add = |a, b| p.add(a, b);
        p.reduce_add(match A {
            1 => fold_n([acc[0]], add),
            2 => fold_n([acc[0], acc[1]], add),
            _ => fold_n(*acc, add),
        })
    }
}

impl<P: Packet, const A: usize> PacketVisitor for Centred<'_, P, A> {
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        let v = self.p.load_at(self.x, col);
        self.add(v, acc);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let v = self.p.load_partial(&self.x[col..], lanes, self.fill);
        self.add(v, acc);
    }
}

/// The output pass; `STREAM` is compile-time so that the packet code carries
/// no branch for it.
struct Affine<'r, P: Packet, const STREAM: bool> {
    p: P,
    x: &'r [f32],
    /// The next row of x (empty for the last row), prefetched while this one is written.
    next: &'r [f32],
    w: &'r [f32],
    b: &'r [f32],
    y: &'r mut [f32],
    mean: P::V,
    delta: P::V,
    rstd: P::V,
}

impl<P: Packet, const STREAM: bool> PacketVisitor for Affine<'_, P, STREAM> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        p.prefetch_l2(self.next, col);
        let n = p.mul(
            p.sub(p.sub(p.load_at(self.x, col), self.mean), self.delta),
            self.rstd,
        );
        let v = p.fma(n, p.load_at(self.w, col), p.load_at(self.b, col));
        p.store_result_at(self.y, col, v, STREAM);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let x = p.load_partial(&self.x[col..], lanes, 0.0);
        let w = p.load_partial(&self.w[col..], lanes, 0.0);
        let b = p.load_partial(&self.b[col..], lanes, 0.0);
        let n = p.mul(p.sub(p.sub(x, self.mean), self.delta), self.rstd);
        p.store_partial(&mut self.y[col..], lanes, p.fma(n, w, b));
    }
}

/// Σ(x − shift)/C and Σ(x − shift)²/C of row `x`, in the schedule's reduction
/// order (`A` is its accumulator count).
#[inline(always)]
fn centred<P: Packet, const A: usize>(
    p: P,
    sched: &RowSchedule,
    x: &[f32],
    shift: f32,
) -> (f32, f32) {
    let c = sched.cols() as f32;
    let mut v = Centred::<P, A> {
        p,
        x,
        shift: p.splat(shift),
        fill: shift,
        sum: [p.zero(); MAX_ACC],
        sq: [p.zero(); MAX_ACC],
    };
    sched.visit_with::<_, A>(&mut v);
    (v.fold(&v.sum) / c, v.fold(&v.sq) / c)
}

impl LayerNorm<'_> {
    /// Row `r` with the schedule's accumulator count `A`.
    #[inline(always)]
    fn row_with<P: Packet, const A: usize>(
        &self,
        p: P,
        sched: &RowSchedule,
        r: usize,
        y: &mut [f32],
    ) {
        let c = sched.cols();
        let x = &self.x[r * c..(r + 1) * c];
        let head = &x[..c.min(SHIFT_SAMPLE)];
        let shift = head_mean(head);
        let (mut delta, mut mean_sq) = centred::<P, A>(p, sched, x, shift);
        let mut mean = shift;
        // NaN fails the comparison too and takes the careful path.
        let shift_is_close = delta * delta <= mean_sq * (1.0 / 16.0);
        if !shift_is_close {
            // `x − mean` is exact for x near the mean, so the new `delta`
            // recovers the rounding error of the first mean.
            mean = shift + delta;
            (delta, mean_sq) = centred::<P, A>(p, sched, x, mean);
        }
        let var = (mean_sq - delta * delta).max(0.0);
        let rstd = 1.0 / (var + EPS).sqrt();
        // Every slice of the pass is exactly `c` long, so one bounds check per
        // packet covers x, w, b and y (and frees the registers of their lengths).
        let next = self.x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]);
        let (w, b, y) = (&self.w[..c], &self.b[..c], &mut y[..c]);
        let (mean, delta, rstd) = (p.splat(mean), p.splat(delta), p.splat(rstd));
        if sched.streams() {
            sched.visit_with::<_, A>(&mut Affine::<P, true> {
                p,
                x,
                next,
                w,
                b,
                y,
                mean,
                delta,
                rstd,
            });
        } else {
            sched.visit_with::<_, A>(&mut Affine::<P, false> {
                p,
                x,
                next,
                w,
                b,
                y,
                mean,
                delta,
                rstd,
            });
        }
    }
}

impl RowKernel for LayerNorm<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        match sched.accumulators() {
            1 => self.row_with::<P, 1>(p, sched, r, y),
            2 => self.row_with::<P, 2>(p, sched, r, y),
            4 => self.row_with::<P, 4>(p, sched, r, y),
            _ => self.row_with::<P, 8>(p, sched, r, y),
        }
    }
}

/// The f64 reference (two-pass).
pub fn reference(x: &[f32], w: &[f32], b: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + EPS as f64).sqrt();
        out.extend(
            row.iter()
                .zip(w.iter().zip(b))
                .map(|(&v, (&w, &b))| (v as f64 - mean) * rstd * w as f64 + b as f64),
        );
    }
    out
}
