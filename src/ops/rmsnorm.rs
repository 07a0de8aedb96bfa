//! rmsnorm: y = x / sqrt(mean(x²) + 1e-6) · w, one row per work-group step.
//!
//! Two passes over each row (the row stays in L1/L2 between them): the sum of
//! squares in the SIMT reduction order of [`RowSchedule`], then the scaled product,
//! which also prefetches the next row so that its reads overlap this row's writes.
//! Small rows go in batches: a batch's sums first, its scales in one vectorized
//! step, then its outputs, so no row waits on its own divide and square root.

use super::rows::{RowKernel, each_row, fold_n};
use crate::packet::Packet;
use crate::simt::{PacketVisitor, RowSchedule};
use std::ops::Range;

/// ε of rmsnorm.
pub const EPS: f32 = 1e-6;

/// The rmsnorm kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct RmsNorm<'a> {
    /// `x[R,C]`.
    pub x: &'a [f32],
    /// `w[C]`.
    pub w: &'a [f32],
}

/// Σx² of one row into `A` packet accumulators (see [`RowSchedule`]).
struct SumSq<'r, P: Packet, const A: usize> {
    p: P,
    x: &'r [f32],
    acc: [P::V; A],
}

impl<P: Packet, const A: usize> PacketVisitor for SumSq<'_, P, A> {
    const W: usize = P::W;
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

/// The output pass. `PREFETCH` and `STREAM` are compile-time so that the
/// per-packet code of small rows (neither) carries no branch for them.
struct Scale<'r, P: Packet, const PREFETCH: bool, const STREAM: bool> {
    p: P,
    x: &'r [f32],
    /// The next row of x (empty for the last row), prefetched while this one is written.
    next: &'r [f32],
    w: &'r [f32],
    y: &'r mut [f32],
    s: P::V,
}

impl<'r, P: Packet> Scale<'r, P, false, false> {
    /// Runs the pass over the row with `PREFETCH` and `STREAM` chosen.
    #[inline(always)]
    fn visit<const PREFETCH: bool, const STREAM: bool>(self, sched: &RowSchedule) {
        let Scale {
            p,
            x,
            next,
            w,
            y,
            s,
        } = self;
        sched.visit(&mut Scale::<P, PREFETCH, STREAM> {
            p,
            x,
            next,
            w,
            y,
            s,
        });
    }
}

impl<P: Packet, const PREFETCH: bool, const STREAM: bool> PacketVisitor
    for Scale<'_, P, PREFETCH, STREAM>
{
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        if PREFETCH {
            p.prefetch(self.next, col);
        }
        let v = p.mul(
            p.mul(p.load_at(self.x, col), self.s),
            p.load_at(self.w, col),
        );
        p.store_result_at(self.y, col, v, STREAM);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let x = p.load_partial(&self.x[col..], lanes, 0.0);
        let w = p.load_partial(&self.w[col..], lanes, 0.0);
        p.store_partial(&mut self.y[col..], lanes, p.mul(p.mul(x, self.s), w));
    }
}

/// Rows of at most this many bytes are normalized in batches of [`BATCH`]: all
/// of a batch's scales first, then its outputs, so the rows' serial
/// reduce → divide → square root → divide chains overlap instead of each
/// stalling its own row. Larger rows gain nothing and would leave L1.
const BATCHED_ROW_BYTES: usize = 2048;
/// Rows per batch, at most: their scales are four independent 8-lane chains,
/// which overlap (8 rows per batch left one chain per batch to wait on:
/// rmsnorm 17x65 on one worker, 0.53 → 0.35 µs in a stand-alone AVX2 model of
/// this loop).
const BATCH: usize = 32;
/// Bytes of x per batch, at most: a batch's rows stay in L1 between the two
/// passes. 32 rows of 2 KiB (64 KiB) did not fit a 48 KiB L1: rmsnorm 64x512,
/// W16, one worker, 5.6–5.9 µs in such batches, 4.9 µs in batches of 16 rows.
const BATCH_BYTES: usize = 32 * 1024;
/// Scales are computed in chunks of this many lanes: a batch of `n` rows
/// computes ceil(n / 8) chunks, not all of [`BATCH`].
const SCALE_CHUNK: usize = 8;

/// 1 / sqrt(Σx² / C + ε).
#[inline(always)]
fn scale(sum_sq: f32, cols: usize) -> f32 {
    1.0 / (sum_sq / cols as f32 + EPS).sqrt()
}

impl RmsNorm<'_> {
    /// Σx² of row `x`, in the schedule's reduction order (`A` is its accumulator count).
    #[inline(always)]
    fn sum_sq<P: Packet, const A: usize>(p: P, sched: &RowSchedule, x: &[f32]) -> f32 {
        let mut sum = SumSq {
            p,
            x,
            acc: [p.zero(); A],
        };
        sched.visit_with::<_, A>(&mut sum);
        p.reduce_add(fold_n(sum.acc, |a, b| p.add(a, b)))
    }

    /// Σx² of row `x`, dispatching on the schedule's accumulator count.
    #[inline(always)]
    fn sum_sq_any<P: Packet>(p: P, sched: &RowSchedule, x: &[f32]) -> f32 {
        match sched.accumulators() {
            1 => Self::sum_sq::<P, 1>(p, sched, x),
            2 => Self::sum_sq::<P, 2>(p, sched, x),
            4 => Self::sum_sq::<P, 4>(p, sched, x),
            _ => Self::sum_sq::<P, 8>(p, sched, x),
        }
    }

    /// Writes row `r` scaled by `s` into `y`, prefetching row `r + 1` of x (if any).
    #[inline(always)]
    fn apply<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, s: f32, y: &mut [f32]) {
        let c = sched.cols();
        let v = Scale {
            p,
            x: &self.x[r * c..(r + 1) * c],
            next: self.x.get((r + 1) * c..(r + 2) * c).unwrap_or(&[]),
            // Exactly `c` long, like x: one bounds check per packet covers all three.
            w: &self.w[..c],
            y: &mut y[..c],
            s: p.splat(s),
        };
        if sched.streams() {
            v.visit::<true, true>(sched)
        } else {
            v.visit::<true, false>(sched)
        }
    }

    /// Σx² of a row whose schedule is full-contiguous
    /// ([`RowSchedule::is_full_contiguous`]), in that schedule's reduction
    /// order: packet `q` into accumulator `q mod A`, and the partial last
    /// packet, zero-filled, as packet number `C / W`. The same bits as
    /// [`RmsNorm::sum_sq`] (tested against the one-row path); the
    /// row is walked in chunks of `A` packets, so no packet needs a bounds
    /// check and every accumulator index is a constant.
    #[inline(always)]
    fn sum_sq_contiguous<P: Packet, const A: usize>(p: P, x: &[f32]) -> f32 {
        let w = P::W;
        let mut acc = [p.zero(); A];
        let mut blocks = x.chunks_exact(A * w);
        for block in blocks.by_ref() {
            for (j, a) in acc.iter_mut().enumerate() {
                let v = p.load(&block[j * w..]);
                *a = p.fma(v, v, *a);
            }
        }
        let rest = blocks.remainder();
        for (j, a) in acc.iter_mut().enumerate() {
            if (j + 1) * w <= rest.len() {
                let v = p.load(&rest[j * w..]);
                *a = p.fma(v, v, *a);
            } else if j * w < rest.len() {
                let v = p.load_partial(&rest[j * w..], rest.len() - j * w, 0.0);
                *a = p.fma(v, v, *a);
            }
        }
        p.reduce_add(fold_n(acc, |a, b| p.add(a, b)))
    }

    /// The output pass of a full-contiguous row (see
    /// [`RmsNorm::sum_sq_contiguous`]): the packets of the schedule's visit,
    /// an overlapping last packet for a partial one, as packet-sized chunks.
    #[inline(always)]
    fn apply_contiguous<P: Packet>(p: P, x: &[f32], w: &[f32], s: f32, y: &mut [f32]) {
        let (c, n) = (x.len(), P::W);
        let s = p.splat(s);
        let out = |x: &[f32], w: &[f32]| p.mul(p.mul(p.load(x), s), p.load(w));
        // Eight packets per iteration, then one at a time.
        let (x8, w8, mut y8) = (
            x.chunks_exact(8 * n),
            w.chunks_exact(8 * n),
            y.chunks_exact_mut(8 * n),
        );
        let (x1, w1) = (x8.remainder(), w8.remainder());
        for ((x, w), y) in x8.zip(w8).zip(y8.by_ref()) {
            for j in 0..8 {
                p.store(&mut y[j * n..], out(&x[j * n..], &w[j * n..]));
            }
        }
        let y1 = y8.into_remainder();
        for ((x, w), y) in x1
            .chunks_exact(n)
            .zip(w1.chunks_exact(n))
            .zip(y1.chunks_exact_mut(n))
        {
            p.store(y, out(x, w));
        }
        if c % n != 0 {
            if c > n {
                p.store(&mut y[c - n..], out(&x[c - n..], &w[c - n..]));
            } else {
                let x = p.load_partial(x, c, 0.0);
                let w = p.load_partial(w, c, 0.0);
                p.store_partial(y, c, p.mul(p.mul(x, s), w));
            }
        }
    }

    /// Rows `rows` of at most [`BATCHED_ROW_BYTES`], in batches of at most
    /// [`BATCH`] rows and [`BATCH_BYTES`], with the schedule's accumulator
    /// count `A` fixed for the whole group, and `CONTIGUOUS` = whether the
    /// schedule is full-contiguous. Such rows take
    /// [`RmsNorm::sum_sq_contiguous`] and [`RmsNorm::apply_contiguous`]: the
    /// schedule's visitor pays a bounds check per packet and reads its flags
    /// per row, as much as a short row's arithmetic (the kernel alone, W8, one
    /// worker: rmsnorm 17x65 0.23 → 0.18 µs, 64x256 3.3 → 2.2 µs).
    #[inline(always)]
    fn batched<P: Packet, const A: usize, const CONTIGUOUS: bool>(
        &self,
        p: P,
        sched: &RowSchedule,
        rows: Range<usize>,
        out: &mut [f32],
        out_row_len: usize,
    ) {
        let c = sched.cols();
        let x = &self.x[rows.start * c..rows.end * c];
        let w = &self.w[..c];
        let mut first = 0;
        while first < rows.len() {
            let n = (rows.len() - first)
                .min(BATCH)
                .min((BATCH_BYTES / (4 * c)).max(1));
            let batch = &x[first * c..][..n * c];
            let mut scales = [0.0f32; BATCH];
            for (s, row) in scales.iter_mut().zip(batch.chunks_exact(c)) {
                *s = if CONTIGUOUS {
                    Self::sum_sq_contiguous::<P, A>(p, row)
                } else {
                    Self::sum_sq::<P, A>(p, sched, row)
                };
            }
            // Eight lanes at a time (lanes past `n` are ignored): one vector
            // division and square root per chunk instead of one chain per row,
            // the chunks independent of each other. The same correctly rounded
            // operations as `scale` on one row, so the result is bit-identical.
            let chunks = n.div_ceil(SCALE_CHUNK) * SCALE_CHUNK;
            for chunk in scales[..chunks].chunks_exact_mut(SCALE_CHUNK) {
                for s in chunk {
                    *s = scale(*s, c);
                }
            }
            // Small rows need no prefetch (the hardware prefetcher keeps up) and
            // are not streamed (the caller checks).
            for (i, (&s, row)) in scales.iter().zip(batch.chunks_exact(c)).enumerate() {
                let y = &mut out[(first + i) * out_row_len..][..c];
                if CONTIGUOUS {
                    Self::apply_contiguous(p, row, w, s, y);
                } else {
                    sched.visit_with::<_, A>(&mut Scale::<P, false, false> {
                        p,
                        x: row,
                        next: &[],
                        w,
                        y,
                        s: p.splat(s),
                    });
                }
            }
            first += n;
        }
    }

    /// [`RmsNorm::batched`] with `CONTIGUOUS` chosen.
    #[inline(always)]
    fn batched_any<P: Packet, const A: usize>(
        &self,
        p: P,
        sched: &RowSchedule,
        rows: Range<usize>,
        out: &mut [f32],
        out_row_len: usize,
    ) {
        if sched.is_full_contiguous() {
            self.batched::<P, A, true>(p, sched, rows, out, out_row_len)
        } else {
            self.batched::<P, A, false>(p, sched, rows, out, out_row_len)
        }
    }
}

impl RowKernel for RmsNorm<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let s = scale(Self::sum_sq_any(p, sched, &self.x[r * c..(r + 1) * c]), c);
        self.apply(p, sched, r, s, y);
    }

    #[inline(always)]
    fn rows<P: Packet>(
        &self,
        p: P,
        sched: &RowSchedule,
        rows: Range<usize>,
        out: &mut [f32],
        out_row_len: usize,
    ) {
        // Streamed outputs are large, memory-bound ones: batching gains nothing there.
        if out_row_len * 4 > BATCHED_ROW_BYTES || sched.streams() {
            return each_row(self, p, sched, rows, out, out_row_len);
        }
        match sched.accumulators() {
            1 => self.batched_any::<P, 1>(p, sched, rows, out, out_row_len),
            2 => self.batched_any::<P, 2>(p, sched, rows, out, out_row_len),
            4 => self.batched_any::<P, 4>(p, sched, rows, out, out_row_len),
            _ => self.batched_any::<P, 8>(p, sched, rows, out, out_row_len),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{WithPacket, dispatch, test_backends};
    use crate::simt::PacketMode;

    /// The batched rows and the one-row path, on one backend.
    struct BothPaths<'a> {
        kernel: RmsNorm<'a>,
        sched: RowSchedule,
        rows: usize,
    }

    impl WithPacket for BothPaths<'_> {
        type Output = (Vec<f32>, Vec<f32>);
        #[inline(always)]
        fn run<P: Packet>(self, p: P) -> Self::Output {
            let c = self.sched.cols();
            let mut batched = vec![f32::NAN; self.rows * c];
            let mut single = batched.clone();
            self.kernel
                .rows(p, &self.sched, 0..self.rows, &mut batched, c);
            each_row(&self.kernel, p, &self.sched, 0..self.rows, &mut single, c);
            (batched, single)
        }
    }

    /// The batched small-row path (chunked on full-contiguous schedules, the
    /// schedule's visitor otherwise) gives the bits of the one-row path, which
    /// every large row takes: for every backend, packet mode and accumulator
    /// count, rows shorter than a packet, a packet ± 1 and longer.
    #[test]
    fn batched_rows_give_the_bits_of_single_rows() {
        let mut rng = crate::ops::inputs::Rng::new(3);
        for b in test_backends() {
            let w = b.width();
            for cols in [1, w - 1, w, w + 1, 2 * w + 3, 65, 130, 8 * w + 5, 512] {
                let rows = 37;
                let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 3.0).collect();
                let wt: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
                let kernel = RmsNorm { x: &x, w: &wt };
                for local in [w, 2 * w, 4 * w, 8 * w, cols.div_ceil(w) * w, w + 3] {
                    for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
                        let sched = RowSchedule::new(cols, local, w, mode);
                        let (batched, single) = dispatch(
                            b,
                            BothPaths {
                                kernel,
                                sched,
                                rows,
                            },
                        );
                        let same = batched
                            .iter()
                            .zip(&single)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{} cols {cols} local {local} {mode:?}", b.name());
                    }
                }
            }
        }
    }
}
