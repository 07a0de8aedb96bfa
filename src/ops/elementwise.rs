//! The element-wise row operators: swiglu, gelu_residual and rope; and the
//! one-function row kernels (silu, gelu, add, mul) that run the graph's unfused
//! maps (`unary_row`, `binary_row`).
//!
//! They have no reduction, so `local` only decides which packets are masked.
//! Where a row's schedule is contiguous full packets, rope places its packets
//! on cache lines instead, where the backend and CPU realign cheaply (module
//! `realign`), and gelu_residual, when asked to stream its output, finishes
//! blocks of the row in L1 before streaming them out (`staged_row`). Which
//! packet covers a lane never changes the lane's value.

use super::realign::{Funnel, lane_offset};
use super::rows::RowKernel;
use crate::packet::{MAX_WIDTH, Packet, math};
use crate::simt::{PacketVisitor, RowSchedule};
use std::iter::zip;

/// The per-packet function of a binary element-wise kernel.
///
/// A trait rather than a closure so that it is `#[inline(always)]` and therefore
/// compiled with the backend's target features.
pub(crate) trait BinaryFn {
    /// Whether the body is vector math rather than one instruction: the schedule
    /// then runs one packet per loop iteration
    /// ([`PacketVisitor::ONE_PER_ITERATION`]).
    const LONG: bool = true;
    fn apply<P: Packet>(p: P, a: P::V, b: P::V) -> P::V;
}

/// The per-packet function of a unary element-wise kernel (see [`BinaryFn`]).
pub(crate) trait UnaryFn {
    fn apply<P: Packet>(p: P, x: P::V) -> P::V;
}

/// A binary element-wise kernel `y = F(a, b)` over one row.
struct Binary<'r, P: Packet, F: BinaryFn> {
    p: P,
    a: &'r [f32],
    b: &'r [f32],
    y: &'r mut [f32],
    stream: bool,
    f: std::marker::PhantomData<F>,
}

impl<P: Packet, F: BinaryFn> PacketVisitor for Binary<'_, P, F> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    const ONE_PER_ITERATION: bool = F::LONG;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        let v = F::apply(p, p.load_at(self.a, col), p.load_at(self.b, col));
        p.store_result_at(self.y, col, v, self.stream);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let a = p.load_partial(&self.a[col..], lanes, 0.0);
        let b = p.load_partial(&self.b[col..], lanes, 0.0);
        p.store_partial(&mut self.y[col..], lanes, F::apply(p, a, b));
    }
}

/// A unary element-wise kernel `y = F(x)` over one row.
struct UnaryRow<'r, P: Packet, F: UnaryFn> {
    p: P,
    x: &'r [f32],
    y: &'r mut [f32],
    f: std::marker::PhantomData<F>,
}

impl<P: Packet, F: UnaryFn> PacketVisitor for UnaryRow<'_, P, F> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    const ONE_PER_ITERATION: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        p.store_at(self.y, col, F::apply(p, p.load_at(self.x, col)));
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let x = p.load_partial(&self.x[col..], lanes, 0.0);
        p.store_partial(&mut self.y[col..], lanes, F::apply(p, x));
    }
}

/// `y = F(x)` over one row of `sched`, compiled for `F` (no streaming).
#[inline(always)]
pub(crate) fn unary_row<P: Packet, F: UnaryFn>(
    p: P,
    sched: &RowSchedule,
    x: &[f32],
    y: &mut [f32],
) {
    sched.visit(&mut UnaryRow {
        p,
        x,
        y,
        f: std::marker::PhantomData::<F>,
    });
}

/// `y = F(a, b)` over one row of `sched`, compiled for `F` (no streaming).
#[inline(always)]
pub(crate) fn binary_row<P: Packet, F: BinaryFn>(
    p: P,
    sched: &RowSchedule,
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
) {
    sched.visit(&mut Binary {
        p,
        a,
        b,
        y,
        stream: false,
        f: std::marker::PhantomData::<F>,
    });
}

/// silu(x), as [`silu_ieee`].
pub(crate) struct SiluFn;

impl UnaryFn for SiluFn {
    #[inline(always)]
    fn apply<P: Packet>(p: P, x: P::V) -> P::V {
        silu_ieee(p, x)
    }
}

/// gelu(x), as [`gelu_ieee`].
pub(crate) struct GeluFn;

impl UnaryFn for GeluFn {
    #[inline(always)]
    fn apply<P: Packet>(p: P, x: P::V) -> P::V {
        gelu_ieee(p, x)
    }
}

/// a + b.
pub(crate) struct AddFn;

impl BinaryFn for AddFn {
    const LONG: bool = false;
    #[inline(always)]
    fn apply<P: Packet>(p: P, a: P::V, b: P::V) -> P::V {
        p.add(a, b)
    }
}

/// a · b.
pub(crate) struct MulFn;

impl BinaryFn for MulFn {
    const LONG: bool = false;
    #[inline(always)]
    fn apply<P: Packet>(p: P, a: P::V, b: P::V) -> P::V {
        p.mul(a, b)
    }
}

/// y = silu(g) · u.
struct SwiGluFn;

impl BinaryFn for SwiGluFn {
    #[inline(always)]
    fn apply<P: Packet>(p: P, g: P::V, u: P::V) -> P::V {
        p.mul(silu_ieee(p, g), u)
    }
}

/// SiLU g·sigmoid(g) as IEEE arithmetic evaluates it at g = −inf (−inf · 0 =
/// NaN, where [`math::silu`] returns its limit −0): [`math::silu_core`]'s
/// g/(1 + e^{−g}), and for the rare lanes with g < −87 g·sigmoid(g) as written.
#[inline(always)]
pub(crate) fn silu_ieee<P: Packet>(p: P, g: P::V) -> P::V {
    let (y, tail) = math::silu_core(p, g);
    if p.any(tail) {
        p.select(tail, p.mul(g, math::sigmoid(p, g)), y)
    } else {
        y
    }
}

/// y = gelu(x) + r.
struct GeluResidualFn;

impl BinaryFn for GeluResidualFn {
    #[inline(always)]
    fn apply<P: Packet>(p: P, x: P::V, r: P::V) -> P::V {
        p.add(gelu_ieee(p, x), r)
    }
}

/// swiglu: y = g · sigmoid(g) · u, computed as (g/(1 + e^{−g})) · u (g = −inf
/// gives NaN, as g · sigmoid(g) · u does in IEEE arithmetic).
#[derive(Clone, Copy, Debug)]
pub struct SwiGlu<'a> {
    /// `g[R,C]`.
    pub g: &'a [f32],
    /// `u[R,C]`.
    pub u: &'a [f32],
}

impl RowKernel for SwiGlu<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        sched.visit(&mut Binary {
            p,
            a: &self.g[r * c..(r + 1) * c],
            b: &self.u[r * c..(r + 1) * c],
            y: &mut y[..c],
            stream: sched.streams(),
            f: std::marker::PhantomData::<SwiGluFn>,
        });
    }
}

/// GELU as IEEE arithmetic evaluates 0.5·x·(1 + erf(x/√2)): at x = −inf that is
/// −inf · 0 = NaN, where [`math::gelu`] returns its limit 0.
#[inline(always)]
pub(crate) fn gelu_ieee<P: Packet>(p: P, x: P::V) -> P::V {
    let minus_inf = p.eq(x, p.splat(f32::NEG_INFINITY));
    p.select(minus_inf, p.splat(f32::NAN), math::gelu(p, x))
}

/// gelu_residual: y = 0.5 · x · (1 + erf(x/√2)) + r.
#[derive(Clone, Copy, Debug)]
pub struct GeluResidual<'a> {
    /// `x[R,C]`.
    pub x: &'a [f32],
    /// `r[R,C]`.
    pub r: &'a [f32],
}

/// Packets whose gelu tail may wait before the deferred ones are completed.
const DEFERRED: usize = 32;

/// gelu_residual's row pass with gelu's tail deferred and its lanes gathered.
///
/// A full packet stores [`math::gelu_core`] + r and notes the packet's tail lanes
/// (|x| ≥ 2.5; about 1.2 % of N(0,1) data, so a tenth of the W8 packets have one)
/// without a branch. The noted lanes are later gathered, `W` to a packet, and run
/// through the whole gelu: the tail's exponential then costs once per `W` tail
/// lanes instead of once per packet holding one. Every lane's value is exactly
/// `GeluResidualFn`'s (gelu is lane-wise, and a gathered lane is in the tail in
/// its new packet too). Branching per packet instead mispredicted on most tail
/// packets (7.0 ns per packet against 4.6 ns without a tail lane,
/// `examples/math_throughput.rs`), and completing whole noted packets still
/// cost one tail per noted packet: 257x1538 on one worker took 464 µs
/// branching, 436 µs deferring packets and 354 µs gathering lanes (with the
/// earlier tail at |x| ≥ 2.12). Never streams: a completed lane is stored twice.
struct GeluRows<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    r: &'r [f32],
    y: &'r mut [f32],
    /// (column, tail lanes as bits) of the noted packets: a separate
    /// allocation, so that storing into it (at a run-time index) cannot alias
    /// this struct's fields, which then stay in registers across the row.
    deferred: &'r mut [(usize, u32); DEFERRED],
    n: usize,
}

impl<P: Packet> GeluRows<'_, P> {
    /// Completes the noted packets' tail lanes.
    #[inline(always)]
    fn complete(&mut self) {
        let mut xs = [0.0f32; MAX_WIDTH];
        let mut at = [0usize; MAX_WIDTH];
        let mut k = 0;
        for i in 0..self.n {
            let (col, mut bits) = self.deferred[i];
            while bits != 0 {
                let j = col + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                (xs[k], at[k]) = (self.x[j], j);
                k += 1;
                if k == P::W {
                    self.gathered(&xs, &at[..k]);
                    k = 0;
                }
            }
        }
        if k > 0 {
            // The unused lanes keep earlier tail values; their results are dropped.
            self.gathered(&xs, &at[..k]);
        }
        self.n = 0;
    }

    /// y[at[i]] = gelu(xs[i]) + r[at[i]] for the gathered lanes.
    #[inline(always)]
    fn gathered(&mut self, xs: &[f32; MAX_WIDTH], at: &[usize]) {
        let p = self.p;
        let mut g = [0.0f32; MAX_WIDTH];
        p.store(&mut g, gelu_ieee(p, p.load(xs)));
        for (&j, &g) in at.iter().zip(&g) {
            self.y[j] = g + self.r[j];
        }
    }
}

impl<P: Packet> PacketVisitor for GeluRows<'_, P> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    const ONE_PER_ITERATION: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let p = self.p;
        let (core, tail) = math::gelu_core(p, p.load_at(self.x, col));
        p.store_at(self.y, col, p.add(core, p.load_at(self.r, col)));
        let bits = p.lane_bits(tail);
        self.deferred[self.n] = (col, bits);
        self.n += usize::from(bits != 0);
        if self.n == DEFERRED {
            self.complete();
        }
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let x = p.load_partial(&self.x[col..], lanes, 0.0);
        let r = p.load_partial(&self.r[col..], lanes, 0.0);
        p.store_partial(&mut self.y[col..], lanes, GeluResidualFn::apply(p, x, r));
    }
}

impl RowKernel for GeluResidual<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let c = sched.cols();
        let row = r * c..(r + 1) * c;
        let (x, residual, y) = (&self.x[row.clone()], &self.r[row], &mut y[..c]);
        let mut deferred = [(0, 0); DEFERRED];
        if sched.streams() && sched.is_full_contiguous() {
            staged_row(p, x, residual, y, &mut deferred);
            return;
        }
        let mut rows = GeluRows {
            p,
            x,
            r: residual,
            y,
            deferred: &mut deferred,
            n: 0,
        };
        sched.visit(&mut rows);
        rows.complete();
    }
}

/// Columns of a streamed gelu_residual row completed in L1 before they are
/// streamed out: 2 KiB, whole cache lines at every width.
const STAGE: usize = 512;

/// [`STAGE`] columns on cache-line boundaries.
#[repr(C, align(64))]
struct Stage([f32; STAGE]);

/// gelu_residual over a contiguous full-packet row whose output streams.
///
/// [`GeluRows`] stores a tail lane twice, which a non-temporal store cannot
/// take. Here each block of [`STAGE`] columns is computed into an L1 buffer
/// (`core + r`, then the block's deferred tail lanes), and the finished block is
/// streamed to `y` in whole lines, back to back, so every write-combining line
/// fills at once. Each lane gets the value [`GeluRows`] gives it. Not the
/// default (see `ops::streams_output`): at 1024x4096, W8, one worker, this
/// took 0.82–0.99× the time of cached stores on an earlier build on AMD Zen 4,
/// and 1.21–1.24× on an Intel Xeon (`examples/stream_ab`). Streaming packet
/// by packet while computing gained nothing.
#[inline(always)]
fn staged_row<P: Packet>(
    p: P,
    x: &[f32],
    r: &[f32],
    y: &mut [f32],
    deferred: &mut [(usize, u32); DEFERRED],
) {
    let mut stage = Stage([0.0; STAGE]);
    for ((x, r), y) in zip(zip(x.chunks(STAGE), r.chunks(STAGE)), y.chunks_mut(STAGE)) {
        let n = x.len();
        let full = n - n % P::W;
        let mut block = GeluRows {
            p,
            x,
            r,
            y: &mut stage.0[..n],
            deferred: &mut *deferred,
            n: 0,
        };
        for col in (0..full).step_by(P::W) {
            block.full(col, 0);
        }
        if full < n {
            block.masked(full, n - full, 0);
        }
        block.complete();
        for col in (0..full).step_by(P::W) {
            p.store_stream(&mut y[col..], p.load_at(&stage.0, col));
        }
        y[full..].copy_from_slice(&stage.0[full..n]);
    }
}

/// rope (rotate-half, NeoX): for i < C/2,
/// `y[i] = x[i]·cos[i] − x[i+C/2]·sin[i]`, `y[i+C/2] = x[i+C/2]·cos[i] + x[i]·sin[i]`.
///
/// Work-items stride across the C/2 rotation pairs of a row, so the schedule
/// covers C/2 columns and each packet writes both halves.
#[derive(Clone, Copy, Debug)]
pub struct Rope<'a> {
    /// `x[R,C]`.
    pub x: &'a [f32],
    /// cos[R,C/2].
    pub cos: &'a [f32],
    /// sin[R,C/2].
    pub sin: &'a [f32],
}

struct Rotate<'r, P: Packet> {
    p: P,
    x: &'r [f32],
    cos: &'r [f32],
    sin: &'r [f32],
    y: &'r mut [f32],
    half: usize,
    stream: bool,
}

/// One rotation packet: (x1·c − x2·s, x2·c + x1·s).
#[inline(always)]
fn rotate<P: Packet>(p: P, x1: P::V, x2: P::V, c: P::V, s: P::V) -> (P::V, P::V) {
    (p.fnma(x2, s, p.mul(x1, c)), p.fma(x1, s, p.mul(x2, c)))
}

impl<P: Packet> Rotate<'_, P> {
    /// The packets of both halves' results at `col` (plain loads).
    #[inline(always)]
    fn pair(&self, col: usize) -> (P::V, P::V) {
        let p = self.p;
        rotate(
            p,
            p.load_at(self.x, col),
            p.load_at(self.x, self.half + col),
            p.load_at(self.cos, col),
            p.load_at(self.sin, col),
        )
    }

    /// Whether the schedule's packets of this row straddle cache lines: when
    /// none does, realigning would only add its funnels.
    #[inline(always)]
    fn straddles_lines(&self) -> bool {
        let h = self.half;
        [
            (self.x, 0),
            (self.x, h),
            (self.cos, 0),
            (self.sin, 0),
            (self.y, 0),
            (self.y, h),
        ]
        .iter()
        .any(|&(s, i)| lane_offset::<P>(s, i) != 0)
    }

    /// The whole row in full packets: zipped exact chunks of x's halves, cos,
    /// sin and y's halves (no bounds checks, the store kind fixed at compile
    /// time), then, when `half` is not a multiple of W, the full packet that
    /// ends at the half's end (its overlap recomputes bit-identical values).
    /// Needs `half ≥ W`.
    ///
    /// A lean loop matters here: with six streams in flight and four of them
    /// missing the cache, fewer instructions per packet let more loads overlap.
    /// On aligned rows, cached, it took 0.88–0.94× the time of the schedule's
    /// generic walk ([`RowSchedule::visit`], which it replaced); streamed
    /// (`ops::streams_output`), 0.79–0.88× (`run rope --workers 1 --grain
    /// caller --strategy whole` at 4096x1024 and 1024x4096, W8 and W16, AMD
    /// Zen 4). On rows that straddle cache lines it replaced the walk where
    /// realigning does not pay: rope 257x1538 on one worker went from
    /// 58.3–60.3 to 53.8–54.7 µs at W8 on Zen and from 95.3 to 59.6–68.1 µs
    /// at W4 (`run rope --workers 1`).
    #[inline(always)]
    fn lean<const STREAM: bool>(&mut self) {
        let (p, h, w) = (self.p, self.half, P::W);
        let (x1, x2) = self.x.split_at(h);
        let (y1, y2) = self.y.split_at_mut(h);
        let ins = zip(
            zip(x1.chunks_exact(w), x2.chunks_exact(w)),
            zip(self.cos.chunks_exact(w), self.sin.chunks_exact(w)),
        );
        let outs = zip(y1.chunks_exact_mut(w), y2.chunks_exact_mut(w));
        for (((a, b), (c, s)), (o1, o2)) in zip(ins, outs) {
            let (v1, v2) = rotate(p, p.load(a), p.load(b), p.load(c), p.load(s));
            p.store_result(o1, v1, STREAM);
            p.store_result(o2, v2, STREAM);
        }
        if !h.is_multiple_of(w) {
            self.full(h - w, 0);
        }
    }

    /// The whole row in full packets whose loads and stores start on cache
    /// lines wherever the row's layout allows. Columns are chosen so that the
    /// first half's stores are aligned; x's two halves, cos and sin are read,
    /// and the second half written, through [`Funnel`]s. Every lane gets the
    /// value [`PacketVisitor::full`] computes for it. Needs `half ≥ 4W`.
    #[inline(always)]
    fn realigned<const STREAM: bool>(&mut self) {
        let (p, h, w) = (self.p, self.half, P::W);
        // The first column past one packet where the first half's stores are
        // aligned (the readers start up to W − 1 lanes before their column),
        // and the packets of the aligned loop: its readers load one ahead.
        let c0 = w + (w - lane_offset::<P>(self.y, 0)) % w;
        let n = (h - c0 - w) / w;
        // The head [0, c0): packets at 0 and c0 − W (one packet when c0 = W,
        // they overlap unless c0 = 2W).
        let lead = c0 - w;
        if lead > 0 {
            self.full(0, 0);
        }
        let (lead1, lead2) = self.pair(lead);
        let (x, cos, sin) = (self.x, self.cos, self.sin);
        let (y1, y2) = self.y.split_at_mut(h);
        p.store_result_at(y1, lead, lead1, STREAM);
        p.store_result_at(y2, lead, lead2, STREAM);
        let (mut x1, x1_lines) = Funnel::reader(p, x, c0, n);
        let (mut x2, x2_lines) = Funnel::reader(p, x, h + c0, n);
        let (mut c, c_lines) = Funnel::reader(p, cos, c0, n);
        let (mut s, s_lines) = Funnel::reader(p, sin, c0, n);
        let (mut out2, out2_lines) = Funnel::writer(y2, c0, n, lead2);
        let out1_lines = &mut y1[c0..c0 + n * w];
        let ins = zip(
            zip(x1_lines.chunks_exact(w), x2_lines.chunks_exact(w)),
            zip(c_lines.chunks_exact(w), s_lines.chunks_exact(w)),
        );
        let outs = zip(
            out1_lines.chunks_exact_mut(w),
            out2_lines.chunks_exact_mut(w),
        );
        for (((l1, l2), (lc, ls)), (o1, o2)) in zip(ins, outs) {
            let (v1, v2) = rotate(
                p,
                x1.feed(p, p.load(l1)),
                x2.feed(p, p.load(l2)),
                c.feed(p, p.load(lc)),
                s.feed(p, p.load(ls)),
            );
            p.store_result(o1, v1, STREAM);
            p.store_result(o2, out2.feed(p, v2), STREAM);
        }
        // The rest, from one packet back: the writer lags by up to W − 1 lanes.
        let mut col = c0 + n * w - w;
        while col + w < h {
            self.full(col, 0);
            col += w;
        }
        self.full(h - w, 0);
    }
}

impl<P: Packet> PacketVisitor for Rotate<'_, P> {
    const W: usize = P::W;
    const OVERLAPPING_TAIL: bool = true;
    #[inline(always)]
    fn full(&mut self, col: usize, _acc: usize) {
        let (p, h) = (self.p, self.half);
        let (y1, y2) = self.pair(col);
        p.store_result_at(self.y, col, y1, self.stream);
        p.store_result_at(self.y, h + col, y2, self.stream);
    }
    #[inline(always)]
    fn masked(&mut self, col: usize, lanes: usize, _acc: usize) {
        let p = self.p;
        let h = self.half;
        let (y1, y2) = rotate(
            p,
            p.load_partial(&self.x[col..], lanes, 0.0),
            p.load_partial(&self.x[h + col..], lanes, 0.0),
            p.load_partial(&self.cos[col..], lanes, 0.0),
            p.load_partial(&self.sin[col..], lanes, 0.0),
        );
        p.store_partial(&mut self.y[col..], lanes, y1);
        p.store_partial(&mut self.y[h + col..], lanes, y2);
    }
}

impl RowKernel for Rope<'_> {
    #[inline(always)]
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]) {
        let half = sched.cols();
        let c = 2 * half;
        let mut rotate = Rotate {
            p,
            x: &self.x[r * c..(r + 1) * c],
            cos: &self.cos[r * half..(r + 1) * half],
            sin: &self.sin[r * half..(r + 1) * half],
            y: &mut y[..c],
            half,
            stream: sched.streams(),
        };
        // Full packets may go anywhere in an element-wise row: it is realigned
        // when its streams straddle cache lines and the row is long enough to
        // pay for that, else read in one lean pass.
        let full = sched.is_full_contiguous() && half >= P::W;
        let realign = full
            && half >= p.realign_min_packets().saturating_mul(P::W).max(4 * P::W)
            && rotate.straddles_lines();
        match (full, realign, rotate.stream) {
            (true, true, true) => rotate.realigned::<true>(),
            (true, true, false) => rotate.realigned::<false>(),
            (true, false, true) => rotate.lean::<true>(),
            (true, false, false) => rotate.lean::<false>(),
            _ => sched.visit(&mut rotate),
        }
    }
}

/// f64 reference of swiglu.
pub fn swiglu_reference(g: &[f32], u: &[f32]) -> Vec<f64> {
    g.iter()
        .zip(u)
        .map(|(&g, &u)| {
            let g = g as f64;
            g * (1.0 / (1.0 + (-g).exp())) * u as f64
        })
        .collect()
}

/// f64 reference of gelu_residual (exact erf GELU).
pub fn gelu_residual_reference(x: &[f32], r: &[f32]) -> Vec<f64> {
    x.iter()
        .zip(r)
        .map(|(&x, &r)| {
            let x = x as f64;
            0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)) + r as f64
        })
        .collect()
}

/// f64 reference of rope.
pub fn rope_reference(x: &[f32], cos: &[f32], sin: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let half = cols / 2;
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        for i in 0..half {
            let x1 = x[r * cols + i] as f64;
            let x2 = x[r * cols + half + i] as f64;
            let c = cos[r * half + i] as f64;
            let s = sin[r * half + i] as f64;
            out[r * cols + i] = x1 * c - x2 * s;
            out[r * cols + half + i] = x2 * c + x1 * s;
        }
    }
    out
}
