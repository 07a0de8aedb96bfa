//! layernorm: y = (x − mean) / sqrt(var + 1e-5) · w + b, population variance.
//!
//! Three passes per row: the mean; then the sums of `d = x − mean` and `d²` (the
//! corrected two-pass algorithm, so inputs with a large common offset stay accurate);
//! then the affine output.

use super::rows::{RowKernel, fold};
use crate::packet::Packet;
use crate::simt::{PacketVisitor, RowSchedule};

/// ε of layernorm.
pub const EPS: f32 = 1e-5;

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

struct Sum<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    acc: [P::V; 8],
}

impl<P: Packet> PacketVisitor for Sum<'_, P> {
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        self.acc[acc] = self.p.add(self.acc[acc], self.p.load_at(self.x, col));
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let v = self.p.load_partial(&self.x[col..], lanes, 0.0);
        self.acc[acc] = self.p.add(self.acc[acc], v);
    }
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
    #[inline(always)]
    fn tail(&mut self, col: usize, lanes: usize, acc: usize) {
        // Element-wise into a separate output: the overlapping full packet is exact.
        self.full(col + lanes - P::W, acc);
    }
}

impl RowKernel for LayerNorm<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let x = &self.x[r * c..(r + 1) * c];
        let a = sched.accumulators();
        let mut sum = Sum {
            p,
            x,
            acc: [p.zero(); 8],
        };
        sched.visit(&mut sum);
        let mean = p.reduce_add(fold(p, &mut sum.acc, a)) / c as f32;
        let mut centred = Centred {
            p,
            x,
            mean,
            sum: [p.zero(); 8],
            acc: [p.zero(); 8],
        };
        sched.visit(&mut centred);
        // `x − mean` is exact for x near the mean, so `delta` recovers the rounding
        // error of the first mean even when the row has a large common offset.
        let delta = p.reduce_add(fold(p, &mut centred.sum, a)) / c as f32;
        let var = (p.reduce_add(fold(p, &mut centred.acc, a)) / c as f32 - delta * delta).max(0.0);
        let rstd = 1.0 / (var + EPS).sqrt();
        sched.visit(&mut Affine {
            p,
            x,
            next: self.x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]),
            w: self.w,
            b: self.b,
            y,
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
