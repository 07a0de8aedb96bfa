//! The kernels of graph nodes that are not one of the seven operators: the
//! element-wise expression interpreter (`map`, prologues and epilogues; the
//! one-function maps of the unfused chains run compiled, [`CompiledMap`]), where a
//! softmax launch reads its logits (its passes are `ops::softmax`'s, so mask-add
//! → softmax is bitwise equal fused or not), attention scores and probs·v.
//! Generic over the packet backend, like the operators' kernels, and safe code
//! only.
//!
//! ## The expression interpreter
//! A row is visited in the SIMT order of its [`RowSchedule`] (so full packets run
//! unmasked and only tail packets masked, or all masked with full-packet off),
//! but packets are evaluated [`CHUNK`] at a time: each step of the expression
//! runs over the whole chunk before the next step starts, so the dispatch on the
//! step kind costs once per chunk, and the intermediate values stay in a small
//! register block in L1 — never in memory the size of a tensor. The arithmetic of
//! each lane is exactly that of the step's function, so an expression computes the
//! same bits fused or unfused (an intermediate is f32 either way).

use super::ir::{Binary, Expr, MAX_INPUTS, MAX_STEPS, Step, Unary};
use crate::ops::AttnShape;
use crate::ops::elementwise::{
    AddFn, GeluFn, MulFn, SiluFn, binary_row, gelu_ieee, silu_ieee, unary_row,
};
use crate::ops::softmax::SoftmaxSource;
use crate::packet::{Packet, math};
use crate::simt::{PacketMode, RowSchedule};
use std::ops::Range;

/// Packets an expression step processes per dispatch.
pub const CHUNK: usize = 8;

/// `lanes` value of a packet visited as full (unmasked).
const FULL: usize = usize::MAX;

/// The interpreter's register block: one row of [`CHUNK`] packets per step.
pub(crate) type Regs<P> = [[<P as Packet>::V; CHUNK]; MAX_STEPS];

/// A fresh register block.
#[inline(always)]
pub(crate) fn regs<P: Packet>(p: P) -> Regs<P> {
    [[p.zero(); CHUNK]; MAX_STEPS]
}

/// The tensors an expression reads, as whole tensors of the row's width.
#[derive(Clone, Copy)]
pub(crate) struct Sources<'a> {
    /// Input `i` reads `tensors[i]` (unless it is the output, see `in0_is_out`).
    pub tensors: [&'a [f32]; MAX_INPUTS],
    /// Input 0 reads the output row itself (an epilogue's own value).
    pub in0_is_out: bool,
}

/// Evaluates an expression over one row: inputs at `base + col`, output `y[col]`.
struct MapRow<'r, P: Packet> {
    p: P,
    expr: &'r Expr,
    src: Sources<'r>,
    base: usize,
    y: &'r mut [f32],
    pending: [(usize, usize); CHUNK],
    n: usize,
    regs: &'r mut Regs<P>,
}

macro_rules! each {
    ($n:expr, $k:ident, $body:expr) => {
        for $k in 0..$n {
            $body;
        }
    };
}

impl<P: Packet> MapRow<'_, P> {
    #[inline(always)]
    fn load(&self, i: usize, col: usize, lanes: usize) -> P::V {
        let p = self.p;
        let (s, at) = if i == 0 && self.src.in0_is_out {
            (&*self.y, col)
        } else {
            (self.src.tensors[i], self.base + col)
        };
        if lanes == FULL {
            p.load_at(s, at)
        } else {
            p.load_partial(&s[at..], lanes, 0.0)
        }
    }

    /// Column and live lanes of chunk packet `k`: with `CONTIGUOUS`, the `k`-th
    /// full packet from `col0`; else the pending packet `k`.
    #[inline(always)]
    fn slot<const CONTIGUOUS: bool>(&self, col0: usize, k: usize) -> (usize, usize) {
        if CONTIGUOUS {
            (col0 + k * P::W, FULL)
        } else {
            self.pending[k]
        }
    }

    /// Runs the expression over one chunk: with `CONTIGUOUS`, the [`CHUNK`] full
    /// packets from `col0` (a count and columns the compiler knows, so the steps'
    /// loops unroll and no lane count is tested); else the `n` pending packets.
    /// Inlined into the one loop of [`map_row`] (out of line it would lose the
    /// backend's target features).
    #[inline(always)]
    fn flush<const CONTIGUOUS: bool>(&mut self, col0: usize) {
        let p = self.p;
        let n = if CONTIGUOUS { CHUNK } else { self.n };
        let expr = self.expr;
        for (s, step) in expr.steps().iter().enumerate() {
            match *step {
                Step::Input(i) => each!(n, k, {
                    let (col, lanes) = self.slot::<CONTIGUOUS>(col0, k);
                    self.regs[s][k] = self.load(i, col, lanes);
                }),
                Step::Unary(f, a) => {
                    let r = &mut *self.regs;
                    match f {
                        Unary::Silu => each!(n, k, r[s][k] = silu_ieee(p, r[a][k])),
                        Unary::Gelu => each!(n, k, r[s][k] = gelu_ieee(p, r[a][k])),
                        Unary::Sigmoid => each!(n, k, r[s][k] = math::sigmoid(p, r[a][k])),
                        Unary::Exp => each!(n, k, r[s][k] = math::exp(p, r[a][k])),
                        Unary::Neg => each!(n, k, r[s][k] = p.neg(r[a][k])),
                    }
                }
                Step::Binary(f, a, b) => {
                    let r = &mut *self.regs;
                    match f {
                        Binary::Add => each!(n, k, r[s][k] = p.add(r[a][k], r[b][k])),
                        Binary::Sub => each!(n, k, r[s][k] = p.sub(r[a][k], r[b][k])),
                        Binary::Mul => each!(n, k, r[s][k] = p.mul(r[a][k], r[b][k])),
                        Binary::Max => each!(n, k, r[s][k] = p.max(r[a][k], r[b][k])),
                    }
                }
            }
        }
        let last = expr.steps().len() - 1;
        for k in 0..n {
            let (col, lanes) = self.slot::<CONTIGUOUS>(col0, k);
            let v = self.regs[last][k];
            if lanes == FULL {
                p.store_at(self.y, col, v);
            } else {
                p.store_partial(&mut self.y[col..], lanes, v);
            }
        }
        self.n = 0;
    }
}

/// Evaluates `expr` over global row `r` (inputs at `r · cols`) into `y`.
#[inline(always)]
pub(crate) fn map_row<P: Packet>(
    p: P,
    sched: &RowSchedule,
    expr: &Expr,
    src: Sources<'_>,
    r: usize,
    y: &mut [f32],
    regs: &mut Regs<P>,
) {
    let mut row = MapRow {
        p,
        expr,
        src,
        base: r * sched.cols(),
        y,
        pending: [(0, 0); CHUNK],
        n: 0,
        regs,
    };
    // Contiguous full packets (`local` a multiple of W, full-packet on) run in
    // whole chunks from their first column; everything else (a contiguous
    // row's last < CHUNK full packets and its masked tail, or every packet of
    // another schedule) is gathered from the schedule's order into pending
    // chunks. Two call sites of the expression's code per backend.
    let (cols, w) = (sched.cols(), P::W);
    let contiguous = sched.is_full_contiguous();
    let packets = if contiguous { cols / w } else { 0 };
    let mut q = 0;
    while q + CHUNK <= packets {
        row.flush::<true>(q * w);
        q += CHUNK;
    }
    let mut tail = contiguous && !cols.is_multiple_of(w);
    let mut steps = sched.steps();
    loop {
        let mut n = 0;
        if contiguous {
            for q in q..packets {
                row.pending[n] = (q * w, FULL);
                n += 1;
            }
            q = packets;
            if tail {
                row.pending[n] = (packets * w, cols % w);
                n += 1;
                tail = false;
            }
        } else {
            for s in steps.by_ref().take(CHUNK) {
                row.pending[n] = (s.col, if s.full { FULL } else { s.lanes });
                n += 1;
            }
        }
        if n == 0 {
            break;
        }
        row.n = n;
        row.flush::<false>(0);
    }
}

/// A map launch run as compiled code instead of through the interpreter: the
/// one-function expressions of DESIGN.md's unfused chains (swiglu's silu and
/// mul, gelu_residual's gelu and add, masked_softmax's mask-add). Interpreted,
/// such a launch cost more in dispatch and register-block traffic than in
/// arithmetic (mul 64x1024 on one worker: 21.4 µs, most of a 63 µs unfused
/// swiglu). Each lane's arithmetic is the step's function either way, so the
/// bits are the interpreter's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompiledMap {
    /// silu(in0).
    Silu,
    /// gelu(in0).
    Gelu,
    /// in0 + in1.
    Add,
    /// in0 · in1.
    Mul,
}

impl CompiledMap {
    /// The compiled form of `expr`, if it has one.
    pub(crate) fn of(expr: &Expr) -> Option<CompiledMap> {
        match expr.steps() {
            [Step::Input(0), Step::Unary(Unary::Silu, 0)] => Some(CompiledMap::Silu),
            [Step::Input(0), Step::Unary(Unary::Gelu, 0)] => Some(CompiledMap::Gelu),
            [Step::Input(0), Step::Input(1), Step::Binary(f, 0, 1)] => match f {
                Binary::Add => Some(CompiledMap::Add),
                Binary::Mul => Some(CompiledMap::Mul),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Evaluates the compiled map `map` over global row `r` of its `inputs`
/// (tensors of the row's width, distinct from `y`) into `y`.
#[inline(always)]
pub(crate) fn compiled_row<P: Packet>(
    p: P,
    sched: &RowSchedule,
    map: CompiledMap,
    inputs: [&[f32]; 2],
    r: usize,
    y: &mut [f32],
) {
    let c = sched.cols();
    let row = |i: usize| &inputs[i][r * c..(r + 1) * c];
    match map {
        CompiledMap::Silu => unary_row::<P, SiluFn>(p, sched, row(0), y),
        CompiledMap::Gelu => unary_row::<P, GeluFn>(p, sched, row(0), y),
        CompiledMap::Add => binary_row::<P, AddFn>(p, sched, row(0), row(1), y),
        CompiledMap::Mul => binary_row::<P, MulFn>(p, sched, row(0), row(1), y),
    }
}

/// A softmax launch's logits: a tensor row, or the output row itself when a
/// prologue has just written them there.
#[derive(Clone, Copy)]
pub(crate) struct Logits<'r>(pub Option<&'r [f32]>);

impl<P: Packet> SoftmaxSource<P> for Logits<'_> {
    #[inline(always)]
    fn load(&self, p: P, y: &[f32], col: usize) -> P::V {
        p.load_at(self.0.unwrap_or(y), col)
    }
    #[inline(always)]
    fn load_partial(&self, p: P, y: &[f32], col: usize, lanes: usize) -> P::V {
        p.load_partial(&self.0.unwrap_or(y)[col..], lanes, f32::NEG_INFINITY)
    }
    #[inline(always)]
    fn rereadable(&self) -> bool {
        self.0.is_some()
    }
}

/// Loads `lanes` lanes at `s[at..]`: unmasked when the packet is full and the
/// mode allows it, else masked with zero fill.
#[inline(always)]
fn load_lanes<P: Packet>(p: P, s: &[f32], at: usize, lanes: usize, masked: bool) -> P::V {
    if lanes == P::W && !masked {
        p.load_at(s, at)
    } else {
        p.load_partial(&s[at..], lanes, 0.0)
    }
}

/// The kv head's first row and the group's first global query row.
fn heads(a: &AttnShape, segment: usize) -> (usize, usize) {
    let (b, h) = (segment / a.q_heads, segment % a.q_heads);
    let kv = b * a.kv_heads + h / (a.q_heads / a.kv_heads);
    (kv * a.kv_len, segment * a.q_len)
}

/// Scores of query rows `rows` of segment `segment` (batch × query head):
/// `out[i][j] = (q_i · k_j) / √Dk`, four keys at a time, packets along Dk.
#[inline(always)]
pub(crate) fn scores_group<P: Packet>(
    p: P,
    a: &AttnShape,
    mode: PacketMode,
    (q, k): (&[f32], &[f32]),
    segment: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let (dk, skv, w) = (a.dk, a.kv_len, P::W);
    let masked = !mode.full_packet();
    let scale = 1.0 / (dk as f32).sqrt();
    let (kv_row, q_row) = heads(a, segment);
    for (i, s) in rows.zip(out.chunks_exact_mut(skv)) {
        let qr = &q[(q_row + i) * dk..(q_row + i + 1) * dk];
        let key = |j: usize| &k[(kv_row + j) * dk..(kv_row + j + 1) * dk];
        let mut j = 0;
        while j + 4 <= skv {
            let (k0, k1, k2, k3) = (key(j), key(j + 1), key(j + 2), key(j + 3));
            let mut acc = [p.zero(); 4];
            let mut d = 0;
            while d < dk {
                let lanes = w.min(dk - d);
                let qv = load_lanes(p, qr, d, lanes, masked);
                acc[0] = p.fma(qv, load_lanes(p, k0, d, lanes, masked), acc[0]);
                acc[1] = p.fma(qv, load_lanes(p, k1, d, lanes, masked), acc[1]);
                acc[2] = p.fma(qv, load_lanes(p, k2, d, lanes, masked), acc[2]);
                acc[3] = p.fma(qv, load_lanes(p, k3, d, lanes, masked), acc[3]);
                d += w;
            }
            for (t, acc) in acc.iter().enumerate() {
                s[j + t] = p.reduce_add(*acc) * scale;
            }
            j += 4;
        }
        while j < skv {
            let kj = key(j);
            let mut acc = p.zero();
            let mut d = 0;
            while d < dk {
                let lanes = w.min(dk - d);
                let qv = load_lanes(p, qr, d, lanes, masked);
                acc = p.fma(qv, load_lanes(p, kj, d, lanes, masked), acc);
                d += w;
            }
            s[j] = p.reduce_add(acc) * scale;
            j += 1;
        }
    }
}

/// Output columns of probs·v one pass accumulates in registers.
const PV_PACKETS: usize = 4;

/// `out[i] = Σ_j p_i[j] · v_j` for query rows `rows` of segment `segment`:
/// per key, a broadcast probability times up to four packets of the value row.
#[inline(always)]
pub(crate) fn probs_v_group<P: Packet>(
    p: P,
    a: &AttnShape,
    mode: PacketMode,
    (probs, v): (&[f32], &[f32]),
    segment: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let (dv, skv, w) = (a.dv, a.kv_len, P::W);
    let masked = !mode.full_packet();
    let (kv_row, q_row) = heads(a, segment);
    for (i, o) in rows.zip(out.chunks_exact_mut(dv)) {
        let pr = &probs[(q_row + i) * skv..(q_row + i + 1) * skv];
        let mut c0 = 0;
        while c0 < dv {
            let packets = (dv - c0).div_ceil(w).min(PV_PACKETS);
            let lanes = |t: usize| w.min(dv - c0 - t * w);
            let mut acc = [p.zero(); PV_PACKETS];
            for (j, &pj) in pr.iter().enumerate() {
                let vr = &v[(kv_row + j) * dv..(kv_row + j + 1) * dv];
                let pj = p.splat(pj);
                for (t, acc) in acc.iter_mut().enumerate().take(packets) {
                    let vv = load_lanes(p, vr, c0 + t * w, lanes(t), masked);
                    *acc = p.fma(pj, vv, *acc);
                }
            }
            for (t, acc) in acc.iter().enumerate().take(packets) {
                let (col, n) = (c0 + t * w, lanes(t));
                if n == w && !masked {
                    p.store_at(o, col, *acc);
                } else {
                    p.store_partial(&mut o[col..], n, *acc);
                }
            }
            c0 += packets * w;
        }
    }
}
