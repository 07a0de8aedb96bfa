//! layernorm: y = (x − mean) / sqrt(var + 1e-5) · w + b, population variance.
//!
//! Usually two passes per row. The first sums `d = x − K` and `d²` around a
//! shift `K`, the mean of the row's first 32 elements: with `K` near the mean,
//! `x − K` is exact even for inputs with a large common offset, and
//! `mean = K + Σd/C`, `var = Σd²/C − (Σd/C)²` cancel almost nothing. The second
//! pass writes the affine output. When `K` is far from the mean
//! (`(Σd/C)² > Σd²/C / 16`, so the variance would lose bits), a second
//! statistics pass around the first mean runs the corrected two-pass algorithm
//! instead.

use super::rows::{RowKernel, fold};
use crate::packet::Packet;
use crate::simt::{PacketVisitor, RowSchedule};

/// ε of layernorm.
pub const EPS: f32 = 1e-5;

/// The first pass sums around the mean of the row's first this-many elements.
const SHIFT_SAMPLE: usize = 32;

/// The layernorm kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct LayerNorm<'a> {
    /// x[R,C].
    pub x: &'a [f32],
    /// w[C].
    pub w: &'a [f32],
    /// b[C].
    pub b: &'a [f32],
}

/// Sums `d = x − mean` and `d²` together: the first corrects the mean, the second
/// gives the variance (the corrected two-pass algorithm).
struct Centred<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    mean: f32,
    sum: [P::V; 8],
    acc: [P::V; 8],
}

impl<P: Packet> PacketVisitor for Centred<'_, P> {
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        let p = self.p;
        let d = p.sub(p.load_at(self.x, col), p.splat(self.mean));
        self.sum[acc] = p.add(self.sum[acc], d);
        self.acc[acc] = p.fma(d, d, self.acc[acc]);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let p = self.p;
        // Lanes past the row hold the mean itself, so they add exactly 0.
        let d = p.sub(
            p.load_partial(&self.x[col..], lanes, self.mean),
            p.splat(self.mean),
        );
        self.sum[acc] = p.add(self.sum[acc], d);
        self.acc[acc] = p.fma(d, d, self.acc[acc]);
    }
}

struct Affine<'r, P: Packet> {
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
    stream: bool,
}

impl<P: Packet> PacketVisitor for Affine<'_, P> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        p.prefetch(self.next, col);
        let n = p.mul(
            p.sub(p.sub(p.load_at(self.x, col), self.mean), self.delta),
            self.rstd,
        );
        let v = p.fma(n, p.load_at(self.w, col), p.load_at(self.b, col));
        p.store_result_at(self.y, col, v, self.stream);
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

/// Σ(x − shift)/C and Σ(x − shift)²/C of row `x`, in the schedule's reduction order.
#[inline(always)]
fn centred<P: Packet>(p: P, sched: &RowSchedule, x: &[f32], shift: f32) -> (f32, f32) {
    let a = sched.accumulators();
    let c = sched.cols() as f32;
    let mut v = Centred {
        p,
        x,
        mean: shift,
        sum: [p.zero(); 8],
        acc: [p.zero(); 8],
    };
    sched.visit(&mut v);
    let delta = p.reduce_add(fold(p, &mut v.sum, a)) / c;
    let mean_sq = p.reduce_add(fold(p, &mut v.acc, a)) / c;
    (delta, mean_sq)
}

impl RowKernel for LayerNorm<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let x = &self.x[r * c..(r + 1) * c];
        let head = &x[..c.min(SHIFT_SAMPLE)];
        let shift = head.iter().sum::<f32>() / head.len() as f32;
        let (mut delta, mut mean_sq) = centred(p, sched, x, shift);
        let mut mean = shift;
        // NaN fails the comparison too and takes the careful path.
        let shift_is_close = delta * delta <= mean_sq * (1.0 / 16.0);
        if !shift_is_close {
            // `x − mean` is exact for x near the mean, so the new `delta`
            // recovers the rounding error of the first mean.
            mean = shift + delta;
            (delta, mean_sq) = centred(p, sched, x, mean);
        }
        let var = (mean_sq - delta * delta).max(0.0);
        let rstd = 1.0 / (var + EPS).sqrt();
        // Every slice of the pass is exactly `c` long, so one bounds check per
        // packet covers x, w, b and y (and frees the registers of their lengths).
        sched.visit(&mut Affine {
            p,
            x,
            next: self.x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]),
            w: &self.w[..c],
            b: &self.b[..c],
            y: &mut y[..c],
            mean: p.splat(mean),
            delta: p.splat(delta),
            rstd: p.splat(rstd),
            stream: sched.streams(),
        });
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
