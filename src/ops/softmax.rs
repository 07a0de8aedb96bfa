//! masked_softmax: y = softmax(x + mask) along each row.
//!
//! Softmax is shift-invariant: exp(v − K) / Σ exp(v − K) is the same for any K,
//! and the usual K = max(v) only keeps the exponentials in range. So a row
//! normally takes two passes: `e = exp(x + mask − K)` written to the output while
//! summing, with K the largest logit of the row's first packet, then the output
//! scaled by `1 / sum`. The result is kept if the sum is at most `SUM_LIMIT`
//! (e⁶⁴): every term is at most the sum, so no logit exceeded K by more than 64
//! and no exponential was clamped. Otherwise (a rare row, an infinity, a NaN), or
//! when the first packet has no finite logit (a masked start), the exp pass runs
//! again around the true maximum: the classic three-pass softmax, which a source
//! that reads its logits from the output row itself always takes. (Checking the
//! sum instead of tracking the row's maximum during the exp pass saves a `max` per
//! packet.)
//!
//! The exp pass also prefetches the next row's inputs (measured 1.2× faster at
//! 1024x4096 than prefetching in the last pass, which was no faster than not
//! prefetching). The exponential is 2ᵗ ([`math::exp2_flush`]) with
//! t = (x + mask − K)·log₂e formed by one fused multiply-add with K·log₂e folded
//! in when |K| < 2²⁰ (three vector instructions fewer per packet than eˣ of
//! x + mask − K, in a pass paced by its arithmetic: in-cache 16x4096 at W8,
//! 30.0 → 26.2 µs): its arguments are ≤ 0 around the
//! maximum (≤ 64·log₂e around K when the two-pass result is kept), and it
//! flushes results below 2⁻¹²⁵ (≈ 2.4·10⁻³⁸, far inside the tolerance) to 0
//! instead of taking a subnormal path. A row whose every entry is −inf
//! gives zeros, never NaN; a NaN in a row makes the whole row NaN (it reaches
//! the sum), as IEEE arithmetic would.

use super::rows::{RowKernel, fold, fold_max};
use crate::packet::{Packet, math};
use crate::simt::{PacketVisitor, RowSchedule};

/// The fused masked-softmax kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct MaskedSoftmax<'a> {
    /// `x[R,C]`.
    pub x: &'a [f32],
    /// `mask[R,C]`, additive.
    pub mask: &'a [f32],
}

/// Where a softmax row's logits come from. The max and exp passes load them
/// through this, so every softmax in the crate (this kernel, and the graph's
/// softmax launch) shares one arithmetic, lane for lane.
///
/// `y` is the output row: a source may read the logits from it (in place).
/// Lanes past the row's end must read −inf, so they add nothing to the sum.
pub(crate) trait SoftmaxSource<P: Packet>: Copy {
    /// The logits of a full packet at `col`.
    fn load(&self, p: P, y: &[f32], col: usize) -> P::V;
    /// The logits of a packet of `lanes` live lanes at `col`, −inf beyond.
    fn load_partial(&self, p: P, y: &[f32], col: usize, lanes: usize) -> P::V;
    /// Whether the logits can be loaded again after `y` has been written: false
    /// for a source that reads them from `y` itself, which then takes the
    /// three-pass softmax (its exp pass runs once, around the true maximum).
    #[inline(always)]
    fn rereadable(&self) -> bool {
        true
    }
    /// Hints the next row's inputs at `col` into cache (during the exp pass).
    #[inline(always)]
    fn prefetch_next(&self, _p: P, _col: usize) {}
}

/// `x + mask`, prefetching the next row's x and mask.
#[derive(Clone, Copy)]
struct MaskedRow<'r> {
    x: &'r [f32],
    m: &'r [f32],
    /// The next row's x and mask (empty for the last row), prefetched toward L2
    /// during this row's exp pass, the longest one, so that their reads overlap
    /// its arithmetic. Into L1 they evicted this row's x, mask and y (1024x4096,
    /// W8, one worker: 2.41–2.46 → 2.33–2.36 ms).
    next: [&'r [f32]; 2],
}

impl<P: Packet> SoftmaxSource<P> for MaskedRow<'_> {
    #[inline(always)]
    fn load(&self, p: P, _y: &[f32], col: usize) -> P::V {
        p.add(p.load_at(self.x, col), p.load_at(self.m, col))
    }
    #[inline(always)]
    fn load_partial(&self, p: P, _y: &[f32], col: usize, lanes: usize) -> P::V {
        let x = p.load_partial(&self.x[col..], lanes, f32::NEG_INFINITY);
        let m = p.load_partial(&self.m[col..], lanes, 0.0);
        p.add(x, m)
    }
    #[inline(always)]
    fn prefetch_next(&self, p: P, col: usize) {
        p.prefetch_l2(self.next[0], col);
        p.prefetch_l2(self.next[1], col);
    }
}

struct Max<'r, P: Packet, S> {
    p: P,
    src: S,
    y: &'r [f32],
    acc: [P::V; 8],
}

impl<P: Packet, S: SoftmaxSource<P>> PacketVisitor for Max<'_, P, S> {
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        let v = self.src.load(self.p, self.y, col);
        self.acc[acc] = self.p.max(self.acc[acc], v);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let v = self.src.load_partial(self.p, self.y, col, lanes);
        self.acc[acc] = self.p.max(self.acc[acc], v);
    }
}

/// `y = exp(logits − shift)`, summed, as 2ᵗ with t = (logits − shift)·log₂e.
///
/// `FOLDED` forms t in one fused multiply-add, `logits·log₂e + offset` with
/// `offset` = −shift·log₂e rounded once: the rounding moves every t of the row
/// by the same amount, which the division by the sum cancels (shift
/// invariance). Rows whose shift is too large for that offset to stay small
/// (see [`FOLD_LIMIT`]) subtract first and scale after.
struct ExpSum<'r, P: Packet, S, const FOLDED: bool> {
    p: P,
    src: S,
    y: &'r mut [f32],
    /// −shift·log₂e if `FOLDED`, else the shift.
    offset: P::V,
    acc: [P::V; 8],
}

impl<P: Packet, S, const FOLDED: bool> ExpSum<'_, P, S, FOLDED> {
    /// e^(v − shift), 0 for a masked (−inf) logit.
    #[inline(always)]
    fn exp(&self, v: P::V) -> P::V {
        let p = self.p;
        let log2e = p.splat(std::f32::consts::LOG2_E);
        let t = if FOLDED {
            p.fma(v, log2e, self.offset)
        } else {
            p.mul(p.sub(v, self.offset), log2e)
        };
        math::exp2_flush(p, t)
    }
}

impl<P: Packet, S: SoftmaxSource<P>, const FOLDED: bool> PacketVisitor
    for ExpSum<'_, P, S, FOLDED>
{
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, acc: usize) {
        let p = self.p;
        self.src.prefetch_next(p, col);
        let e = self.exp(self.src.load(p, self.y, col));
        p.store_at(self.y, col, e);
        self.acc[acc] = p.add(self.acc[acc], e);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
        let p = self.p;
        let e = self.exp(self.src.load_partial(p, self.y, col, lanes));
        p.store_partial(&mut self.y[col..], lanes, e);
        self.acc[acc] = p.add(self.acc[acc], e);
    }
}

/// Shifts below this magnitude are folded into the exponent's multiply-add:
/// −shift·log₂e < 2²¹ is rounded by at most 2⁻⁴, so every exponential of the
/// row is off by the same factor of at most 2^(1/16) and the row's largest
/// stays near 1. Larger shifts (finite logits of a million and more) would
/// move t by whole powers of two, or overflow.
const FOLD_LIMIT: f32 = 1_048_576.0;

/// The largest sum the two-pass softmax keeps: e⁶⁴. Each exponential is at
/// most the sum, so none was clamped (`exp2_flush` clamps at 2¹²⁷ ≈ e⁸⁸), and the
/// shift was within 64 of the row's maximum.
const SUM_LIMIT: f32 = 6.235_149e27;

/// The exp pass around `shift`: the sum of the exponentials.
#[inline(always)]
fn exp_sum<P: Packet, S: SoftmaxSource<P>>(
    p: P,
    sched: &RowSchedule,
    src: S,
    y: &mut [f32],
    shift: f32,
) -> f32 {
    /// One exp pass; `offset` is `ExpSum::offset` (−shift·log₂e if `FOLDED`).
    #[inline(always)]
    fn pass<P: Packet, S: SoftmaxSource<P>, const FOLDED: bool>(
        p: P,
        sched: &RowSchedule,
        src: S,
        y: &mut [f32],
        offset: f32,
    ) -> f32 {
        let mut es = ExpSum::<P, S, FOLDED> {
            p,
            src,
            y,
            offset: p.splat(offset),
            acc: [p.zero(); 8],
        };
        sched.visit(&mut es);
        p.reduce_add(fold(p, &mut es.acc, sched.accumulators()))
    }
    if shift.abs() < FOLD_LIMIT {
        pass::<P, S, true>(p, sched, src, y, -(shift * std::f32::consts::LOG2_E))
    } else {
        pass::<P, S, false>(p, sched, src, y, shift)
    }
}

/// Softmax of one row of `src`'s logits into `y`: usually two passes (exp and
/// sum around the first packet's maximum, then scale), three when that shift is
/// unusable (see the module doc). A row whose every entry is −inf gives zeros.
#[inline(always)]
pub(crate) fn softmax_row<P: Packet, S: SoftmaxSource<P>>(
    p: P,
    sched: &RowSchedule,
    src: S,
    y: &mut [f32],
) {
    let c = sched.cols();
    // Exactly a row long, like the source's slices: their bounds checks coincide.
    let y = &mut y[..c];
    let head = c.min(P::W);
    let shift = p.reduce_max(if head == P::W {
        src.load(p, y, 0)
    } else {
        src.load_partial(p, y, 0, head)
    });
    let mut sum = f32::NAN;
    // NaN and −inf fail the comparison: no usable shift.
    if shift > f32::NEG_INFINITY && src.rereadable() {
        let s = exp_sum(p, sched, src, y, shift);
        // NaN fails the comparison too (the classic pass gives the same NaNs).
        if s <= SUM_LIMIT {
            sum = s;
        }
    }
    if sum.is_nan() {
        let mut max = Max {
            p,
            src,
            y,
            acc: [p.splat(f32::NEG_INFINITY); 8],
        };
        sched.visit(&mut max);
        let row_max = p.reduce_max(fold_max(p, &mut max.acc, sched.accumulators()));
        if row_max == f32::NEG_INFINITY {
            y.fill(0.0);
            return;
        }
        sum = exp_sum(p, sched, src, y, row_max);
    }
    sched.visit(&mut ScaleInPlace {
        p,
        y,
        s: p.splat(1.0 / sum),
        stream: sched.streams(),
    });
}

/// Multiplies a row in place by a scalar: the last pass of softmax.
struct ScaleInPlace<'r, P: Packet> {
    p: P,
    y: &'r mut [f32],
    s: P::V,
    stream: bool,
}

impl<P: Packet> PacketVisitor for ScaleInPlace<'_, P> {
    const W: usize = P::W;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        let v = p.mul(p.load_at(self.y, col), self.s);
        p.store_result_at(self.y, col, v, self.stream);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let v = p.mul(p.load_partial(&self.y[col..], lanes, 0.0), self.s);
        p.store_partial(&mut self.y[col..], lanes, v);
    }
}

impl RowKernel for MaskedSoftmax<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let next = (r + 1) * c..(r + 2) * c;
        let src = MaskedRow {
            x: &self.x[r * c..(r + 1) * c],
            m: &self.mask[r * c..(r + 1) * c],
            next: [
                self.x.get(next.clone()).unwrap_or(&[]),
                self.mask.get(next).unwrap_or(&[]),
            ],
        };
        softmax_row(p, sched, src, y);
    }
}

/// The f64 reference.
pub fn reference(x: &[f32], mask: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let v: Vec<f64> = (r * cols..(r + 1) * cols)
            .map(|i| x[i] as f64 + mask[i] as f64)
            .collect();
        if v.iter().any(|v| v.is_nan()) {
            out.extend(std::iter::repeat_n(f64::NAN, cols));
            continue;
        }
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            out.extend(std::iter::repeat_n(0.0, cols));
            continue;
        }
        let e: Vec<f64> = v.iter().map(|&v| (v - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        out.extend(e.iter().map(|&e| e / sum));
    }
    out
}
