//! The kernels of graph nodes that are not one of the seven operators: the
//! element-wise expression interpreter (`map`, prologues and epilogues), where a
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
use crate::ops::elementwise::{gelu_ieee, silu_ieee};
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

    /// Runs the expression over the pending packets. Inlined into the one loop
    /// of [`map_row`] (out of line it would lose the backend's target features).
    #[inline(always)]
    fn flush(&mut self) {
        let (p, n) = (self.p, self.n);
        let expr = self.expr;
        for (s, step) in expr.steps().iter().enumerate() {
            match *step {
                Step::Input(i) => each!(n, k, {
                    let (col, lanes) = self.pending[k];
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
            let (col, lanes) = self.pending[k];
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
    // Chunks of the row's SIMT packets, gathered from the schedule's iterator so
    // the expression's code is emitted at this one call site.
    let mut steps = sched.steps();
    loop {
        let mut n = 0;
        for s in steps.by_ref().take(CHUNK) {
            row.pending[n] = (s.col, if s.full { FULL } else { s.lanes });
            n += 1;
        }
        if n == 0 {
            break;
        }
        row.n = n;
        row.flush();
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
