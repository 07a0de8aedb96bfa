//! rmsnorm: y = x / sqrt(mean(x²) + 1e-6) · w, one row per work-group step.
//!
//! Two passes over each row (the row stays in L1/L2 between them): the sum of
//! squares in the SIMT reduction order of [`RowSchedule`], then the scaled product,
//! which also prefetches the next row so that its reads overlap this row's writes.

use super::rows::{RowKernel, fold};
use crate::packet::Packet;
use crate::simt::{PacketVisitor, RowSchedule};

/// ε of rmsnorm.
pub const EPS: f32 = 1e-6;

/// The rmsnorm kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct RmsNorm<'a> {
    /// x[R,C].
    pub x: &'a [f32],
    /// w[C].
    pub w: &'a [f32],
}

struct SumSq<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    acc: [P::V; 8],
}

impl<P: Packet> PacketVisitor for SumSq<'_, P> {
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        let v = self.p.load_at(self.x, col);
        self.acc[acc] = self.p.fma(v, v, self.acc[acc]);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let v = self.p.load_partial(&self.x[col..], lanes, 0.0);
        self.acc[acc] = self.p.fma(v, v, self.acc[acc]);
    }
}

struct Scale<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    /// The next row of x (empty for the last row), prefetched while this one is written.
    next: &'r [f32],
    w: &'r [f32],
    y: &'r mut [f32],
    s: P::V,
    stream: bool,
}

impl<P: Packet> PacketVisitor for Scale<'_, P> {
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        p.prefetch(self.next, col);
        let v = p.mul(
            p.mul(p.load_at(self.x, col), self.s),
            p.load_at(self.w, col),
        );
        p.store_result_at(self.y, col, v, self.stream);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let x = p.load_partial(&self.x[col..], lanes, 0.0);
        let w = p.load_partial(&self.w[col..], lanes, 0.0);
        p.store_partial(&mut self.y[col..], lanes, p.mul(p.mul(x, self.s), w));
    }
}

impl RowKernel for RmsNorm<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let x = &self.x[r * c..(r + 1) * c];
        let mut sum = SumSq {
            p,
            x,
            acc: [p.zero(); 8],
        };
        sched.visit(&mut sum);
        let ss = p.reduce_add(fold(p, &mut sum.acc, sched.accumulators()));
        let s = 1.0 / (ss / c as f32 + EPS).sqrt();
        sched.visit(&mut Scale {
            p,
            x,
            next: self.x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]),
            w: self.w,
            y,
            s: p.splat(s),
            stream: sched.streams(),
        });
    }
}

/// The f64 reference.
pub fn reference(x: &[f32], w: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
        let s = 1.0 / (ms + EPS as f64).sqrt();
        out.extend(row.iter().zip(w).map(|(&v, &w)| v as f64 * s * w as f64));
    }
    out
}
