//! attention: o = softmax(q·kᵀ/√Dk)·v with grouped query heads (GQA).
//!
//! A work-group owns `block` query rows of one (batch, query head); query head `h`
//! reads kv head `h / (Hq/Hkv)`. Its `local` is fixed by the head dimensions.
//!
//! ## Kernel design (flash-style, one pass over the keys)
//!
//! The group's query rows are cut into *row tiles* of up to [`ROW_TILE`] = 16 rows; each
//! tile walks the keys in *key blocks* of [`KEY_BLOCK`] = 128 keys with an online softmax
//! (running row max `m` and row sum `l`; the output rows are rescaled by
//! `2^((m_old − m_new)·log₂e/√Dk)` when a later block raises the max). Per key block:
//!
//! 1. **Scores, rows as lanes** ("tall" tiles): the tile's query rows are packed once per
//!    tile into a transposed buffer `qᵀ[d][row]` (NP = ⌈rows/W⌉ packets per `d`, zero
//!    padded), so a score packet holds one key against W query rows and the softmax
//!    max/sum are plain vertical packet ops. Register tile: KT keys × NP row packets of
//!    accumulators (W16: 16×1, W8: 6×2, W4: 3×4); per `d` it loads NP packets of `qᵀ` and
//!    broadcasts KT scalars `k[j][d]` straight from the key rows (an embedded broadcast
//!    operand of the FMA on AVX-512), so Kᵀ is never packed. Dk ∈ {16, 32, 64, 128} is a
//!    compile-time constant in this tile, so the KT key-row addresses are displacements
//!    of one pointer instead of a serial chain of address adds.
//! 2. **Softmax**, in base 2: `p = 2^(s·c − m·c)` with `c = log₂e/√Dk` (one FMA into
//!    [`math::exp2_softmax`], whose reduction is cheaper than e's) overwrites the scores in
//!    place; `l` is updated, and on the last block `1/l` is kept.
//! 3. **p·v, output rows as accumulators**: register tile RR rows × DC packets of the Dv
//!    columns (W16: 8×2, W8: 6×2, W4: 4×2, decode rows 1×4); per key it loads DC packets of
//!    the value row and broadcasts RR probabilities. The accumulators start from zero on
//!    the first key block or from `o·alpha` (the online rescale) on later ones, and the
//!    last block stores `acc·(1/l)`, so `o` itself is the only running output state.
//!
//! Tiles with fewer than W/2 rows (decode, Sq = 1, and small tails) would waste most
//! lanes of a row packet, so they take the "short" path instead: scores are dot products
//! along Dk (keys 4 at a time, one horizontal reduction each), the softmax runs with keys
//! as lanes, and the probabilities are transposed into the same `[key][row]` layout the
//! p·v micro-kernel reads.
//!
//! Head dimensions that are not multiples of W are handled by masked packets at the
//! column tail only (`load_partial`/`store_partial`); with [`PacketMode::AllMasked`]
//! every packet of the kernel runs the masked variant with `n = W`.
//!
//! The packed `qᵀ`, the score block and the probability block live in a per-thread
//! scratch vector (`SCRATCH`), grown once to `16·Dk + 2·16·128` floats and reused by
//! every later call on that thread: no allocation per call in steady state. Its contents
//! are fully rewritten before they are read, so results do not depend on which thread
//! runs a group or in what order. For a given shape, backend, `block` and packet mode
//! the arithmetic (and so the output) is fixed; it may differ in the last bits between
//! geometries because the row tiling (tall vs short tiles) follows `block`.

use crate::packet::{Backend, Packet, WithPacket, dispatch, math};
use crate::simt::PacketMode;
use std::cell::Cell;
use std::ops::Range;

use super::shape::AttnShape;

/// The attention kernel over borrowed inputs.
#[derive(Clone, Copy, Debug)]
pub struct Attention<'a> {
    /// `q[B,Hq,Sq,Dk]`.
    pub q: &'a [f32],
    /// `k[B,Hkv,Skv,Dk]`.
    pub k: &'a [f32],
    /// `v[B,Hkv,Skv,Dv]`.
    pub v: &'a [f32],
    /// The shape.
    pub shape: AttnShape,
    /// Full-packet specialization on, or every packet masked.
    pub mode: PacketMode,
}

/// Attention's fixed `local`: the larger head dimension rounded up to the width.
pub fn local_for(shape: &AttnShape, width: usize) -> usize {
    shape.dk.max(shape.dv).div_ceil(width) * width
}

/// Query rows per row tile (lanes of up to 16/W row packets).
pub const ROW_TILE: usize = 16;
/// Keys per key block of the online softmax.
pub const KEY_BLOCK: usize = 128;

thread_local! {
    /// Per-thread scratch: packed qᵀ, scores and probabilities. Grown once, never shrunk.
    static SCRATCH: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Loads a packet: unmasked, or (`M`) masked with `n` live lanes.
#[inline(always)]
fn ld<P: Packet, const M: bool>(p: P, s: &[f32], n: usize) -> P::V {
    if M {
        p.load_partial(s, n, 0.0)
    } else {
        p.load(s)
    }
}

/// Stores a packet: unmasked, or (`M`) masked with `n` live lanes.
#[inline(always)]
fn st<P: Packet, const M: bool>(p: P, s: &mut [f32], n: usize, v: P::V) {
    if M {
        p.store_partial(s, n, v)
    } else {
        p.store(s, v)
    }
}

/// Everything a row tile needs, fixed for the group.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    /// The group's query rows that this tile covers, `rows · dk` values.
    q: &'a [f32],
    /// The kv head's keys, `skv · dk`.
    keys: &'a [f32],
    /// The kv head's values, `skv · dv`.
    vals: &'a [f32],
    dk: usize,
    dv: usize,
    skv: usize,
    /// log₂e/√Dk: scores times this are the base-2 softmax's arguments.
    scale: f32,
}

/// Scores of `KT` keys against the tile's rows (rows as lanes, `NP` packets):
/// `s[t·L + lane] = Σ_d qt[d·L + lane] · keys[t·dk + d]` with `L = NP·W`; `mx`
/// (per lane) becomes the maximum of itself and these scores.
#[inline(always)]
fn qk<P: Packet, const NP: usize, const KT: usize, const DK: usize, const M: bool>(
    p: P,
    qt: &[f32],
    keys: &[f32],
    dk: usize,
    s: &mut [f32],
    mx: &mut [P::V; NP],
) {
    // A compile-time `DK` turns the KT key-row addresses into constant displacements
    // of one pointer (a run-time one costs a serial chain of address adds).
    let dk = if DK > 0 { DK } else { dk };
    let w = P::W;
    let l = NP * w;
    let qt = &qt[..dk * l];
    let keys = &keys[..KT * dk];
    let mut acc = [[p.zero(); NP]; KT];
    for (d, qd) in qt.chunks_exact(l).enumerate() {
        let mut qv = [p.zero(); NP];
        for (i, x) in qv.iter_mut().enumerate() {
            *x = ld::<P, M>(p, &qd[i * w..], w);
        }
        for t in 0..KT {
            let b = p.splat(keys[t * dk + d]);
            for i in 0..NP {
                acc[t][i] = p.fma(qv[i], b, acc[t][i]);
            }
        }
    }
    let s = &mut s[..KT * l];
    for (t, st_row) in s.chunks_exact_mut(l).enumerate() {
        for i in 0..NP {
            st::<P, M>(p, &mut st_row[i * w..], w, acc[t][i]);
            mx[i] = p.max(mx[i], acc[t][i]);
        }
    }
}

/// `o[r][c0..] (+)= Σ_j pm[j·pl + r] · v[j][c0..]` for `RR` rows and `DC` packets of
/// columns starting at `c0` (the last packet has `last_n` lanes), with the online
/// rescale on load (`alpha`, unless `first`) and the final `1/l` on store (`inv_l`, if
/// `last`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv_tile<P: Packet, const RR: usize, const DC: usize, const M: bool>(
    p: P,
    pm: &[f32],
    pl: usize,
    vals: &[f32],
    nk: usize,
    dv: usize,
    c0: usize,
    last_n: usize,
    out: &mut [f32],
    rs: &RowState,
) {
    let w = P::W;
    let lanes = |c: usize| if c + 1 == DC { last_n } else { w };
    let width = (DC - 1) * w + last_n;
    let mut acc = [[p.zero(); DC]; RR];
    if !rs.first {
        for (r, a) in acc.iter_mut().enumerate() {
            let o = &out[r * dv + c0..][..width];
            let al = p.splat(rs.alpha[r]);
            for (c, x) in a.iter_mut().enumerate() {
                *x = p.mul(ld::<P, M>(p, &o[c * w..], lanes(c)), al);
            }
        }
    }
    let vals = &vals[..nk * dv];
    for (prow, vrow) in pm.chunks(pl).zip(vals.chunks_exact(dv)) {
        let vr = &vrow[c0..c0 + width];
        let mut vv = [p.zero(); DC];
        for (c, x) in vv.iter_mut().enumerate() {
            *x = ld::<P, M>(p, &vr[c * w..], lanes(c));
        }
        let prow = &prow[..RR];
        for r in 0..RR {
            let b = p.splat(prow[r]);
            for c in 0..DC {
                acc[r][c] = p.fma(b, vv[c], acc[r][c]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let o = &mut out[r * dv + c0..][..width];
        let inv = p.splat(rs.inv_l[r]);
        for (c, &x) in a.iter().enumerate() {
            let y = if rs.last { p.mul(x, inv) } else { x };
            st::<P, M>(p, &mut o[c * w..], lanes(c), y);
        }
    }
}

/// The online-softmax state of a row tile for one key block, as the p·v kernel reads it.
struct RowState {
    first: bool,
    last: bool,
    alpha: [f32; ROW_TILE],
    inv_l: [f32; ROW_TILE],
}

impl RowState {
    fn shifted(&self, r: usize) -> RowState {
        let mut alpha = [0.0; ROW_TILE];
        let mut inv_l = [0.0; ROW_TILE];
        alpha[..ROW_TILE - r].copy_from_slice(&self.alpha[r..]);
        inv_l[..ROW_TILE - r].copy_from_slice(&self.inv_l[r..]);
        RowState {
            first: self.first,
            last: self.last,
            alpha,
            inv_l,
        }
    }
}

/// All Dv columns of `RR` rows: chunks of `DC` full packets, then single packets, then
/// the masked tail packet.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv_rows<P: Packet, const RR: usize, const DC: usize, const M: bool>(
    p: P,
    pm: &[f32],
    pl: usize,
    vals: &[f32],
    nk: usize,
    dv: usize,
    out: &mut [f32],
    rs: &RowState,
) {
    let w = P::W;
    let mut c0 = 0;
    while c0 + DC * w <= dv {
        pv_tile::<P, RR, DC, M>(p, pm, pl, vals, nk, dv, c0, w, out, rs);
        c0 += DC * w;
    }
    while c0 + w <= dv {
        pv_tile::<P, RR, 1, M>(p, pm, pl, vals, nk, dv, c0, w, out, rs);
        c0 += w;
    }
    if c0 < dv {
        pv_tile::<P, RR, 1, true>(p, pm, pl, vals, nk, dv, c0, dv - c0, out, rs);
    }
}

/// p·v for all `rows` rows of a tile: `RR`-row register tiles, then 4, 2, 1-row tails.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv<P: Packet, const RR: usize, const DC: usize, const M: bool>(
    p: P,
    pm: &[f32],
    pl: usize,
    rows: usize,
    vals: &[f32],
    nk: usize,
    dv: usize,
    out: &mut [f32],
    rs: &RowState,
) {
    if rows == 1 {
        // Decode: one row, more column packets in flight.
        return pv_rows::<P, 1, 4, M>(p, pm, pl, vals, nk, dv, out, rs);
    }
    let mut r = 0;
    while r + RR <= rows {
        let sub = rs.shifted(r);
        pv_rows::<P, RR, DC, M>(p, &pm[r..], pl, vals, nk, dv, &mut out[r * dv..], &sub);
        r += RR;
    }
    if RR > 4 && r + 4 <= rows {
        let sub = rs.shifted(r);
        pv_rows::<P, 4, DC, M>(p, &pm[r..], pl, vals, nk, dv, &mut out[r * dv..], &sub);
        r += 4;
    }
    if RR > 2 && r + 2 <= rows {
        let sub = rs.shifted(r);
        pv_rows::<P, 2, DC, M>(p, &pm[r..], pl, vals, nk, dv, &mut out[r * dv..], &sub);
        r += 2;
    }
    if r < rows {
        let sub = rs.shifted(r);
        pv_rows::<P, 1, DC, M>(p, &pm[r..], pl, vals, nk, dv, &mut out[r * dv..], &sub);
    }
}

/// p·v with the register tile chosen for the width.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv_for<P: Packet, const M: bool>(
    p: P,
    pm: &[f32],
    pl: usize,
    rows: usize,
    vals: &[f32],
    nk: usize,
    dv: usize,
    out: &mut [f32],
    rs: &RowState,
) {
    if P::W >= 16 {
        pv::<P, 8, 2, M>(p, pm, pl, rows, vals, nk, dv, out, rs)
    } else if P::W == 8 {
        pv::<P, 6, 2, M>(p, pm, pl, rows, vals, nk, dv, out, rs)
    } else {
        pv::<P, 4, 2, M>(p, pm, pl, rows, vals, nk, dv, out, rs)
    }
}

/// A tall row tile (`rows` ≤ `NP·W` query rows, rows as lanes), `KT` keys per score tile.
#[inline(always)]
fn tall<P: Packet, const NP: usize, const KT: usize, const M: bool>(
    p: P,
    c: Ctx<'_>,
    rows: usize,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let w = P::W;
    let l = NP * w;
    let Ctx {
        q,
        keys,
        vals,
        dk,
        dv,
        skv,
        scale,
    } = c;
    let (qt, rest) = scratch.split_at_mut(dk * l);
    let s = &mut rest[..KEY_BLOCK * l];

    // Pack qᵀ[d][lane]: query row `lane` becomes lane `lane` of every `d`, read
    // contiguously; lanes past the tile's rows are zero.
    if rows < l {
        qt.fill(0.0);
    }
    for (lane, qrow) in q.chunks_exact(dk).take(rows.min(l)).enumerate() {
        for (qd, &x) in qt.chunks_exact_mut(l).zip(qrow) {
            qd[lane] = x;
        }
    }

    let sc = p.splat(scale);
    let neg_sc = p.splat(-scale);
    let mut m = [p.splat(f32::NEG_INFINITY); NP];
    let mut lsum = [p.zero(); NP];
    let mut kb0 = 0;
    while kb0 < skv {
        let nk = KEY_BLOCK.min(skv - kb0);
        let first = kb0 == 0;
        let last = kb0 + nk == skv;
        let bkeys = &keys[kb0 * dk..(kb0 + nk) * dk];

        // Scores, and their maximum per row.
        let mut mx = [p.splat(f32::NEG_INFINITY); NP];
        let mut j = 0;
        while j + KT <= nk {
            let (kt, sj) = (&bkeys[j * dk..], &mut s[j * l..]);
            match dk {
                16 => qk::<P, NP, KT, 16, M>(p, qt, kt, dk, sj, &mut mx),
                32 => qk::<P, NP, KT, 32, M>(p, qt, kt, dk, sj, &mut mx),
                64 => qk::<P, NP, KT, 64, M>(p, qt, kt, dk, sj, &mut mx),
                128 => qk::<P, NP, KT, 128, M>(p, qt, kt, dk, sj, &mut mx),
                _ => qk::<P, NP, KT, 0, M>(p, qt, kt, dk, sj, &mut mx),
            }
            j += KT;
        }
        if KT > 4 {
            while j + 4 <= nk {
                qk::<P, NP, 4, 0, M>(p, qt, &bkeys[j * dk..], dk, &mut s[j * l..], &mut mx);
                j += 4;
            }
        }
        while j < nk {
            qk::<P, NP, 1, 0, M>(p, qt, &bkeys[j * dk..], dk, &mut s[j * l..], &mut mx);
            j += 1;
        }

        // Online softmax, rows as lanes.
        let sb = &mut s[..nk * l];
        let mut alpha = [p.zero(); NP];
        let mut negm = [p.zero(); NP];
        for i in 0..NP {
            let mn = if first { mx[i] } else { p.max(m[i], mx[i]) };
            if !first {
                alpha[i] = math::exp2_softmax(p, p.mul(p.sub(m[i], mn), sc));
            }
            negm[i] = p.mul(mn, neg_sc);
            m[i] = mn;
        }
        let mut sum = [p.zero(); NP];
        for srow in sb.chunks_exact_mut(l) {
            for i in 0..NP {
                let x = ld::<P, M>(p, &srow[i * w..], w);
                let e = math::exp2_softmax(p, p.fma(x, sc, negm[i]));
                sum[i] = p.add(sum[i], e);
                st::<P, M>(p, &mut srow[i * w..], w, e);
            }
        }
        let mut rs = RowState {
            first,
            last,
            alpha: [0.0; ROW_TILE],
            inv_l: [0.0; ROW_TILE],
        };
        for i in 0..NP {
            lsum[i] = if first {
                sum[i]
            } else {
                p.fma(lsum[i], alpha[i], sum[i])
            };
            if !first {
                st::<P, M>(p, &mut rs.alpha[i * w..], w, alpha[i]);
            }
            if last {
                let inv = p.div(p.splat(1.0), lsum[i]);
                st::<P, M>(p, &mut rs.inv_l[i * w..], w, inv);
            }
        }

        // p·v.
        pv_for::<P, M>(p, sb, l, rows, &vals[kb0 * dv..], nk, dv, out, &rs);
        kb0 += nk;
    }
}

/// `Σ_d a[d]·b_t[d]` for 4 key rows at once (`n` = dk), one reduction per key.
#[inline(always)]
fn dot4<P: Packet, const M: bool>(p: P, a: &[f32], b: [&[f32]; 4], n: usize) -> [f32; 4] {
    let w = P::W;
    let a = &a[..n];
    let b: [&[f32]; 4] = b.map(|x| &x[..n]);
    let mut acc = [p.zero(); 4];
    let mut d = 0;
    while d + w <= n {
        let av = ld::<P, M>(p, &a[d..], w);
        for t in 0..4 {
            acc[t] = p.fma(av, ld::<P, M>(p, &b[t][d..], w), acc[t]);
        }
        d += w;
    }
    if d < n {
        let k = n - d;
        let av = p.load_partial(&a[d..], k, 0.0);
        for t in 0..4 {
            acc[t] = p.fma(av, p.load_partial(&b[t][d..], k, 0.0), acc[t]);
        }
    }
    let mut r = [0.0; 4];
    for t in 0..4 {
        r[t] = p.reduce_add(acc[t]);
    }
    r
}

/// `2^t` of one scalar through the vector [`math::exp2_softmax`].
#[inline(always)]
fn exp2_one<P: Packet>(p: P, t: f32) -> f32 {
    p.reduce_max(math::exp2_softmax(p, p.splat(t)))
}

/// A short row tile (`rows` < W/2): dot-product scores, keys as lanes in the softmax.
#[inline(always)]
fn short<P: Packet, const M: bool>(
    p: P,
    c: Ctx<'_>,
    rows: usize,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let w = P::W;
    let Ctx {
        q,
        keys,
        vals,
        dk,
        dv,
        skv,
        scale,
    } = c;
    let (s, rest) = scratch.split_at_mut(ROW_TILE * KEY_BLOCK);
    let pt = &mut rest[..ROW_TILE * KEY_BLOCK];
    let sc = p.splat(scale);
    let mut m = [f32::NEG_INFINITY; ROW_TILE];
    let mut lsum = [0.0f32; ROW_TILE];
    let mut kb0 = 0;
    while kb0 < skv {
        let nk = KEY_BLOCK.min(skv - kb0);
        let first = kb0 == 0;
        let last = kb0 + nk == skv;
        let mut rs = RowState {
            first,
            last,
            alpha: [0.0; ROW_TILE],
            inv_l: [0.0; ROW_TILE],
        };
        for r in 0..rows {
            let qr = &q[r * dk..(r + 1) * dk];
            let srow = &mut s[r * KEY_BLOCK..][..nk];
            let bkeys = &keys[kb0 * dk..(kb0 + nk) * dk];
            let mut j = 0;
            while j + 4 <= nk {
                let kr: [&[f32]; 4] = std::array::from_fn(|t| &bkeys[(j + t) * dk..]);
                srow[j..j + 4].copy_from_slice(&dot4::<P, M>(p, qr, kr, dk));
                j += 4;
            }
            if j < nk {
                // Pad the last dot4 with repeats of the last key.
                let kr: [&[f32]; 4] = std::array::from_fn(|t| &bkeys[(j + t).min(nk - 1) * dk..]);
                let d = dot4::<P, M>(p, qr, kr, dk);
                srow[j..].copy_from_slice(&d[..nk - j]);
            }

            // Softmax with keys as lanes.
            let mut mx = p.splat(f32::NEG_INFINITY);
            let mut jj = 0;
            while jj + w <= nk {
                mx = p.max(mx, ld::<P, M>(p, &srow[jj..], w));
                jj += w;
            }
            if jj < nk {
                mx = p.max(mx, p.load_partial(&srow[jj..], nk - jj, f32::NEG_INFINITY));
            }
            let bmax = p.reduce_max(mx);
            let mn = if first { bmax } else { m[r].max(bmax) };
            let alpha = if first {
                0.0
            } else {
                exp2_one(p, (m[r] - mn) * scale)
            };
            m[r] = mn;
            let negm = p.splat(-(mn * scale));
            let mut sum = p.zero();
            let mut jj = 0;
            while jj + w <= nk {
                let e = math::exp2_softmax(p, p.fma(ld::<P, M>(p, &srow[jj..], w), sc, negm));
                sum = p.add(sum, e);
                st::<P, M>(p, &mut srow[jj..], w, e);
                jj += w;
            }
            if jj < nk {
                let n = nk - jj;
                let x = p.load_partial(&srow[jj..], n, f32::NEG_INFINITY);
                // The padding lanes (−inf) give 2⁻¹²⁵ each, not 0: far below the
                // rounding of `l`, which is ≥ 1 once the row's maximum is in it.
                let e = math::exp2_softmax(p, p.fma(x, sc, negm));
                sum = p.add(sum, e);
                p.store_partial(&mut srow[jj..], n, e);
            }
            let bsum = p.reduce_add(sum);
            lsum[r] = if first { bsum } else { lsum[r] * alpha + bsum };
            rs.alpha[r] = alpha;
            if last {
                rs.inv_l[r] = 1.0 / lsum[r];
            }
            // Transpose into the [key][row] layout of the p·v kernel.
            for (x, dst) in srow.iter().zip(pt.chunks_exact_mut(rows)) {
                dst[r] = *x;
            }
        }
        pv_for::<P, M>(p, pt, rows, rows, &vals[kb0 * dv..], nk, dv, out, &rs);
        kb0 += nk;
    }
}

struct Group<'k, 'o> {
    k: &'k Attention<'k>,
    segment: usize,
    q_rows: Range<usize>,
    out: &'o mut [f32],
}

impl Group<'_, '_> {
    #[inline(always)]
    fn run_mode<P: Packet, const M: bool>(self, p: P, scratch: &mut [f32]) {
        let a = self.k.shape;
        let (dk, dv, skv) = (a.dk, a.dv, a.kv_len);
        let head = self.segment % a.q_heads;
        let batch = self.segment / a.q_heads;
        let kv_head = batch * a.kv_heads + head / (a.q_heads / a.kv_heads);
        let keys = &self.k.k[kv_head * skv * dk..(kv_head + 1) * skv * dk];
        let vals = &self.k.v[kv_head * skv * dv..(kv_head + 1) * skv * dv];
        let q0 = self.segment * a.q_len;
        let w = P::W;
        let mut r0 = self.q_rows.start;
        let mut out = self.out;
        while r0 < self.q_rows.end {
            let rows = ROW_TILE.min(self.q_rows.end - r0);
            let (o, rest) = out.split_at_mut(rows * dv);
            out = rest;
            let c = Ctx {
                q: &self.k.q[(q0 + r0) * dk..(q0 + r0 + rows) * dk],
                keys,
                vals,
                dk,
                dv,
                skv,
                scale: std::f32::consts::LOG2_E / (dk as f32).sqrt(),
            };
            if 2 * rows < w {
                short::<P, M>(p, c, rows, scratch, o);
            } else {
                match (w >= 16, rows.div_ceil(w)) {
                    (true, _) => tall::<P, 1, 16, M>(p, c, rows, scratch, o),
                    (false, 1) => tall::<P, 1, 8, M>(p, c, rows, scratch, o),
                    (false, 2) => tall::<P, 2, 6, M>(p, c, rows, scratch, o),
                    _ => tall::<P, 4, 3, M>(p, c, rows, scratch, o),
                }
            }
            r0 += rows;
        }
    }
}

impl WithPacket for Group<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let need = ROW_TILE * (self.k.shape.dk + 2 * KEY_BLOCK);
        let mut scratch = SCRATCH.take();
        if scratch.len() < need {
            scratch.resize(need, 0.0);
        }
        if self.k.mode.full_packet() {
            self.run_mode::<P, false>(p, &mut scratch);
        } else {
            self.run_mode::<P, true>(p, &mut scratch);
        }
        SCRATCH.set(scratch);
    }
}

impl Attention<'_> {
    /// Runs the group owning query rows `q_rows` of segment `segment` (= batch·Hq + head),
    /// writing `out` (those rows of o, `Dv` elements each).
    pub fn run_group(
        &self,
        backend: Backend,
        segment: usize,
        q_rows: Range<usize>,
        out: &mut [f32],
    ) {
        dispatch(
            backend,
            Group {
                k: self,
                segment,
                q_rows,
                out,
            },
        )
    }
}

/// The f64 reference.
pub fn reference(q: &[f32], k: &[f32], v: &[f32], a: &AttnShape) -> Vec<f64> {
    let (dk, dv, sq, skv) = (a.dk, a.dv, a.q_len, a.kv_len);
    let group = a.q_heads / a.kv_heads;
    let mut out = vec![0.0f64; a.lens()[3]];
    let scale = 1.0 / (dk as f64).sqrt();
    for b in 0..a.batch {
        for h in 0..a.q_heads {
            let kvh = b * a.kv_heads + h / group;
            for i in 0..sq {
                let qrow = &q[((b * a.q_heads + h) * sq + i) * dk..][..dk];
                let s: Vec<f64> = (0..skv)
                    .map(|j| {
                        let krow = &k[(kvh * skv + j) * dk..][..dk];
                        qrow.iter()
                            .zip(krow)
                            .map(|(&x, &y)| x as f64 * y as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|&s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                let o = &mut out[((b * a.q_heads + h) * sq + i) * dv..][..dv];
                for (j, &ej) in e.iter().enumerate() {
                    let vrow = &v[(kvh * skv + j) * dv..][..dv];
                    for (oo, &vv) in o.iter_mut().zip(vrow) {
                        *oo += ej / sum * vv as f64;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
    use crate::packet::test_backends;

    fn run(inputs: &OwnedInputs, b: Backend, block: usize, mode: PacketMode) -> Vec<f32> {
        let shape = inputs.shape();
        let Shape::Attention(a) = shape else {
            unreachable!()
        };
        let config = LaunchConfig {
            local: local_for(&a, b.width()),
            block,
        };
        let launch = ops::prepare(inputs.view(), &shape, b, config, mode).unwrap();
        let mut out = vec![f32::NAN; ops::output_len(&shape)];
        launch.run_on_caller(&mut out).unwrap();
        out
    }

    /// Several key blocks (online rescale), tall and short tiles, odd head dims,
    /// every backend and both packet modes; and the two modes agree bit for bit.
    #[test]
    fn multi_block_shapes_match_the_reference() {
        for s in [
            "2x6x3x21x300x33x17",
            "1x2x1x3x257x5x70",
            "1x1x1x1x129x1x1",
            "1x2x2x19x260x64x32",
        ] {
            let shape = Shape::parse(Op::Attention, s).unwrap();
            let inputs = OwnedInputs::generate(Op::Attention, shape, 3).unwrap();
            let reference = ops::reference(inputs.view(), &shape);
            for b in test_backends() {
                for block in [1, 5, 16, 21] {
                    let full = run(&inputs, b, block, PacketMode::FullPacket);
                    let r = ops::compare(&full, &reference, ops::tolerance(Op::Attention));
                    assert!(
                        r.ok,
                        "{s} {} block {block}: max err {:e}",
                        b.name(),
                        r.max_abs_err
                    );
                    let masked = run(&inputs, b, block, PacketMode::AllMasked);
                    assert_eq!(
                        ops::output_hash(&full),
                        ops::output_hash(&masked),
                        "{s} {}",
                        b.name()
                    );
                }
            }
        }
    }

    /// The scratch is fully rewritten: a call after a larger one gives the same bits.
    #[test]
    fn scratch_reuse_does_not_leak_between_calls() {
        let b = Backend::best(16);
        let small = Shape::parse(Op::Attention, "1x2x1x7x40x24x8").unwrap();
        let big = Shape::parse(Op::Attention, "1x2x1x33x300x96x8").unwrap();
        let si = OwnedInputs::generate(Op::Attention, small, 1).unwrap();
        let bi = OwnedInputs::generate(Op::Attention, big, 2).unwrap();
        let first = run(&si, b, 16, PacketMode::FullPacket);
        run(&bi, b, 16, PacketMode::FullPacket);
        let again = run(&si, b, 16, PacketMode::FullPacket);
        assert_eq!(ops::output_hash(&first), ops::output_hash(&again));
    }
}
