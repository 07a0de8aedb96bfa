//! Vector math over any [`Packet`]: `exp` (and the softmaxes' `exp2_flush` and
//! `exp2_softmax`), `erf`,
//! `sigmoid`, `silu`, `gelu` (also in two parts, `gelu_core` and `gelu_tail`), `rsqrt`.
//!
//! Every function is generic over the backend, `#[inline(always)]`, and built only from
//! the [`Packet`] primitives, so the scalar backend of the same width computes
//! bit-identical results to the SIMD backends (the tests check this). Lanes are combined
//! with `select`; the only branches skip a rare slow path (subnormal or overflowing
//! results, gelu's tails) when no lane of the packet needs it, and a lane's value never
//! depends on its neighbours (tested).
//!
//! ## Speed
//!
//! The fast paths are built for throughput at W8 and up: eˣ in the normal range is one
//! product q·2ⁿ with 2ⁿ made from the bits of the rounded exponent (a fused multiply-add
//! onto 1.5·2²³ + 127, then [`Packet::shl_exponent`]), without `round`, conversion or
//! two-step scaling; their polynomials are evaluated by Estrin's scheme, whose dependency
//! chain is about half as long as Horner's (an out-of-order core overlaps packets only as
//! far as its scheduler reaches). gelu's core is the exception: it is short enough that
//! Horner's fewer instructions won (in-cache gelu_residual 30.4 µs against 31.9 µs at
//! 16x4096, W8). `examples/math_throughput.rs` prints ns per packet.
//!
//! ## Accuracy
//!
//! Error is the distance in ulps between the f32 result and the correctly rounded f32
//! of an f64 reference (`f64::exp`; for `erf`/`erfc` an all-positive series and a
//! continued fraction in f64, written in the tests and checked against mpmath values; in
//! the subnormal range one ulp is 2⁻¹⁴⁹). Measured by `src/packet/math_tests.rs` on every
//! backend of the test machine (SSE4.1+FMA W4, AVX2 W8, AVX-512 W16, scalar W4/8/16, which
//! all compute identical bits — the tests check that too) over: every 256th f32 bit pattern
//! of the whole line for `exp`/`erf` (2²⁴ inputs, low bits jittered, NaNs and infinities
//! included), every 1024th for the others (2²²), a dense 2²⁰-point sweep of the interesting
//! interval (exp [−104, 89], erf [−4, 4], sigmoid/silu [−110, 20], gelu [−15, 6], rsqrt
//! [1e-3, 1e3]) and edge values (±0, subnormals, ±inf, NaNs, overflow / underflow /
//! branch thresholds ±1 ulp).
//!
//! | function | max measured error | asserted bound | notes |
//! |---|---|---|---|
//! | [`exp`] | 1 ulp | 2 ulp | whole domain incl. subnormal results |
//! | [`exp2_softmax`] | 1 ulp | 2 ulp | 2ᵗ, t clamped to [−125, 127] |
//! | [`exp2_flush`] | 1 ulp | 2 ulp | 2ᵗ, t ≤ 127; exactly 0 below −125 |
//! | [`erf`] | 3 ulp | 4 ulp | whole domain incl. subnormal `x` |
//! | [`sigmoid`] | 2 ulp | 3 ulp | whole domain incl. subnormal results |
//! | [`silu`] | 2 ulp | 4 ulp | whole domain incl. subnormal results |
//! | [`gelu`], x ≥ −1 | 2 ulp | 4 ulp | |
//! | [`gelu`], −2.5 < x < −1 | 177 ulp (relative 1.1e-5, absolute 1.7e-7) | 256 ulp | cancellation in 1/2 + x·h(x²) near x = −2.5, see below |
//! | [`gelu`], −4√2 < x ≤ −2.5 | 19 ulp | 32 ulp | the erfc tail |
//! | [`gelu`], x ≤ −4√2 | relative error up to ≈ 2× | \|y − ref\| ≤ 1e-6 + 1e-5·\|ref\| | \|gelu\| < 4.4e-8 there, see below |
//! | [`rsqrt`] | 1 ulp | 1 ulp | correctly rounded `sqrt`, then one division |
//!
//! [`gelu`] = x·Φ(x), Φ(x) = (1 + erf(x/√2))/2, is computed in two parts. For |x| < 2.5
//! (99 % of N(0,1) data) the core: Φ = fma(x, h(x²), 1/2) with h a degree-8 polynomial in
//! x² (Horner: 8 fma; the packets of a row are independent, so its latency hides), then
//! one product. For |x| ≥ 2.5 the tail, built from the erf pieces: 0.5·x·(2 − erfc(u))
//! for u = x/√2 ≥ 1.77, and 0.5·x·erfc(|u|) with erfc = exp(S(u) − x·(x/2)) (x²/2 rounded
//! once, inside an `fnma`) for x ≤ −2.5, so the negative tail does not cancel in 1 + erf.
//! Its error is not ulp-tight in two places, both far inside the operator bound
//! |y − ref| ≤ 1e-6 + 1e-5·|ref|:
//! - −2.5 < x < −1 (Φ down to 0.0062): the f32 rounding of h(x²) ≈ 0.2 is multiplied by
//!   |x| and then compared with Φ, so it is amplified up to 80× (177 ulp measured,
//!   relative 1.1e-5, absolute ≤ 1.7e-7). A correctly rounded erf would still leave
//!   0.5·x·(1 + erf) with the same absolute error from the rounding of 1 + erf; the
//!   tail's form avoids it, but costs an exponential; moving the switch to −2.12 would
//!   cost the core's tail mask two more instructions per packet (it would no longer be
//!   one compare of x²) and send 1.7 % of N(0,1) lanes to the tail instead of 0.6 %.
//! - x < −5.66 (|gelu| < 4.4e-8): the tail fit S ends at u = 4, beyond it S(4) is used, so
//!   the result keeps the right order of magnitude and sign and underflows to −0 at the
//!   right place, but its relative error grows to a factor ≈ 2 (absolute < 4.4e-8).
//!   (An asymptotic form e^{−x²/2}·h(2/x²)/√(2π) with a short fit of h would fix this for
//!   one division and a few fma; not done yet.)
//!
//! Coefficients were fitted by `tools/fit_math.py` (weighted least squares iterated
//! toward minimax in 60-digit arithmetic, rounded to f32 one coefficient at a time).

use super::Packet;

// ---------------------------------------------------------------- exp

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 with 9 significant bits (0x3f317200): `n · LN2_HI` is exact for |n| < 2¹⁵.
const LN2_HI: f32 = 0.693_359_4;
/// ln 2 − `LN2_HI`, rounded to f32.
const LN2_LO: f32 = -2.121_944_4e-4;
/// eʳ ≈ 1 + r + c₂r² + … + c₆r⁶ on [−ln2/2, ln2/2], relative error 3.1e-9 (fit).
const EXP_C: [f32; 7] = [
    1.0,
    1.0,
    0.499_999_94,
    0.166_665_21,
    0.041_668_262,
    0.008_368_671,
    0.001_382_1,
];
/// Below this, exp(x) < 2⁻¹⁵⁰ for `exp` and x·eˣ < 2⁻¹⁵⁰ for `silu`: the result is 0.
const EXP_LO: f32 = -120.0;
/// Above this, exp overflows to +inf.
const EXP_HI: f32 = 89.0;
/// Below this, eˣ rounds to +0 (e^−103.98 is half the smallest subnormal).
const EXP_ZERO: f32 = -104.0;

/// 1.5·2²³ + 127: `fma(x, LOG2E, EXP_SHIFTER)` rounds x·log₂e to an integer n in the low
/// mantissa bits, biased so that [`Packet::shl_exponent`] turns it into 2ⁿ.
const EXP_SHIFTER: f32 = 12_583_039.0;
/// The fast paths take eˣ for x in [`EXP_NORMAL_LO`, `EXP_NORMAL_HI`] only: there
/// n ∈ [−126, 127], so 2ⁿ is a normal number.
const EXP_NORMAL_LO: f32 = -87.0;
const EXP_NORMAL_HI: f32 = 88.0;

/// Evaluates `c[0] + c[1]·t + … ` by Horner's rule with fused multiply-adds.
#[inline(always)]
fn horner<P: Packet>(p: P, t: P::V, c: &[f32]) -> P::V {
    let (last, rest) = c.split_last().expect("at least one coefficient");
    let mut acc = p.splat(*last);
    for &ck in rest.iter().rev() {
        acc = p.fma(acc, t, p.splat(ck));
    }
    acc
}

/// Evaluates `c[0] + c[1]·t + … + c[N−1]·t^{N−1}` (N = 8 or 9) by Estrin's scheme:
/// pairs c₂ₖ + c₂ₖ₊₁·t, then pairs of those with t², then with t⁴ — four dependent
/// steps instead of eight, for two or three more multiplications.
#[inline(always)]
fn estrin<P: Packet, const N: usize>(p: P, t: P::V, c: &[f32; N]) -> P::V {
    const { assert!(N == 8 || N == 9) };
    let pair = |k: usize| p.fma(p.splat(c[k + 1]), t, p.splat(c[k]));
    let t2 = p.mul(t, t);
    let t4 = p.mul(t2, t2);
    let lo = p.fma(pair(2), t2, pair(0));
    let hi = p.fma(pair(6), t2, pair(4));
    let hi = if N == 9 {
        p.fma(p.splat(c[N - 1]), t4, hi)
    } else {
        hi
    };
    p.fma(hi, t4, lo)
}

/// eˣ = `q · 2ⁿ` for finite `x` in [`EXP_LO`, `EXP_HI`]: returns (q, n) with
/// q ∈ [0.7, 1.42] (relative error < 0.6 ulp) and integral n.
#[inline(always)]
fn exp_parts<P: Packet>(p: P, x: P::V) -> (P::V, P::V) {
    let n = p.round(p.mul(x, p.splat(LOG2E)));
    // Cody–Waite: r = x − n·ln2 in two fused steps (the first is exact).
    let r = p.fnma(n, p.splat(LN2_HI), x);
    let r = p.fnma(n, p.splat(LN2_LO), r);
    (horner(p, r, &EXP_C), n)
}

/// eˣ for x in [[`EXP_NORMAL_LO`], [`EXP_NORMAL_HI`]] (or NaN, which propagates), as one product
/// q·2ⁿ with the power of two built from the bits of the rounded exponent (no
/// `round`, no conversion, no two-step scaling). Relative error < 0.6 ulp + one rounding.
#[inline(always)]
fn exp_normal<P: Packet>(p: P, x: P::V) -> P::V {
    let kf = p.fma(x, p.splat(LOG2E), p.splat(EXP_SHIFTER));
    let n = p.sub(kf, p.splat(EXP_SHIFTER));
    let r = p.fnma(n, p.splat(LN2_HI), x);
    let r = p.fnma(n, p.splat(LN2_LO), r);
    p.mul(exp_poly_short(p, r), p.shl_exponent(kf))
}

/// eʳ on [−ln2/2, ln2/2] by the [`EXP_C`] polynomial with a short dependency chain:
/// 1 + (r + r²·(c₂ + c₃r + r²(c₄ + c₅r + c₆r²))), Estrin's scheme above r².
#[inline(always)]
fn exp_poly_short<P: Packet>(p: P, r: P::V) -> P::V {
    let c = |k: usize| p.splat(EXP_C[k]);
    let r2 = p.mul(r, r);
    let lo = p.fma(c(3), r, c(2));
    let hi = p.fma(p.fma(c(6), r, c(5)), r, c(4));
    let t = p.fma(p.fma(hi, r2, lo), r2, r);
    p.add(p.splat(1.0), t)
}

/// eˣ, within 1 ulp (measured; 2 ulp asserted) over the whole f32 domain, including
/// results in the subnormal range. exp(x) = +inf for x > 88.7228, 0 for x < −103.972,
/// exp(±0) = 1, exp(−inf) = 0, exp(+inf) = +inf, NaN → NaN.
///
/// For x in [−87, 88] (and NaN, which propagates) one product q·2ⁿ with 2ⁿ built from
/// the bits of the rounded exponent, and x < −104 (e.g. the −inf of a softmax mask)
/// gives 0; a packet with a lane in [−104, −87] (subnormal results) or above 88 takes
/// `exp_wide` for those lanes, the others keep their values.
#[inline(always)]
pub fn exp<P: Packet>(p: P, x: P::V) -> P::V {
    // `min`/`max` with the constant first keep a NaN.
    let xc = p.min(p.splat(EXP_NORMAL_HI), p.max(p.splat(EXP_NORMAL_LO), x));
    let y = p.select(p.lt(x, p.splat(EXP_ZERO)), p.zero(), exp_normal(p, xc));
    // |x + 95.5| ≤ 8.5 ⇔ −104 ≤ x ≤ −87 (both sums are exact).
    let mid = 0.5 * (EXP_ZERO + EXP_NORMAL_LO);
    let subnormal = p.le(
        p.abs(p.sub(x, p.splat(mid))),
        p.splat(0.5 * (EXP_NORMAL_LO - EXP_ZERO)),
    );
    let wide = p.or_mask(subnormal, p.lt(p.splat(EXP_NORMAL_HI), x));
    if p.any(wide) {
        p.select(wide, exp_wide(p, x), y)
    } else {
        y
    }
}

/// eˣ for any x with two-step exponent scaling (see [`exp`]).
#[inline(always)]
fn exp_wide<P: Packet>(p: P, x: P::V) -> P::V {
    // Lanes whose result is certainly 0 (x < −104, e.g. the −inf of a softmax mask)
    // compute e⁰ instead and are zeroed at the end: scaling to zero through the
    // subnormal range would cost a microcode assist per packet on x86.
    let zero = p.lt(x, p.splat(EXP_ZERO));
    // max/min have the x86 rule: a NaN `x` becomes EXP_LO here and is restored below.
    let xc = p.min(p.max(x, p.splat(EXP_LO)), p.splat(EXP_HI));
    let xc = p.select(zero, p.zero(), xc);
    let (q, n) = exp_parts(p, xc);
    let y = p.select(zero, p.zero(), p.mul_pow2(q, n));
    p.select(p.is_nan(x), x, y)
}

/// 2ʳ ≈ c₀ + c₁r + … + c₆r⁶ on [−1/2, 1/2]: [`EXP_C`] with (ln 2)ᵏ folded into cₖ (the
/// same fit, eᵘ at u = r·ln 2 on [−ln2/2, ln2/2]), rounded to f32; relative error
/// 6.4e-8 when evaluated in f32.
const EXP2_C: [f32; 7] = [
    1.0,
    std::f32::consts::LN_2,
    0.240_226_48,
    0.055_503_625,
    0.009_618_497,
    0.001_339_01,
    0.000_153_282_38,
];
/// [`exp2_softmax`] clamps its argument to [`EXP2_LO`], [`EXP2_HI`]: 2ⁿ and the
/// result stay normal numbers.
const EXP2_LO: f32 = -125.0;
const EXP2_HI: f32 = 127.0;

/// 2ᵗ for the arguments of a base-2 softmax (attention folds log₂e into its 1/√Dk
/// scale): within 1 ulp (measured; 2 asserted) for −125 ≤ t ≤ 127, with t clamped to
/// that range, so t < −125 (−inf included) gives 2⁻¹²⁵ ≈ 2.4·10⁻³⁸ — never a subnormal,
/// and an absolute error far below any softmax's tolerance, whose sum is ≥ 1 — and
/// t > 127 gives 2¹²⁷. NaN → NaN.
///
/// Eleven vector instructions where eˣ's fast path takes sixteen: the clamp; n = t
/// rounded to an integer by one addition onto 1.5·2²³ + 127, which leaves n + 127 in the
/// low mantissa bits for [`Packet::shl_exponent`] to make 2ⁿ; the exact r = t − n (no
/// two-step ln 2 reduction); a degree-6 Horner polynomial (a softmax row's packets are
/// independent, so fewer instructions beat a shorter chain); one product.
#[inline(always)]
pub fn exp2_softmax<P: Packet>(p: P, t: P::V) -> P::V {
    // `min`/`max` with the constant first keep a NaN.
    let tc = p.min(p.splat(EXP2_HI), p.max(p.splat(EXP2_LO), t));
    let kf = p.add(tc, p.splat(EXP_SHIFTER));
    let n = p.sub(kf, p.splat(EXP_SHIFTER));
    let r = p.sub(tc, n);
    p.mul(horner(p, r, &EXP2_C), p.shl_exponent(kf))
}

/// 2ᵗ for the arguments of a masked softmax: [`exp2_softmax`], except that t < −125
/// (−inf included) gives exactly 0, so a masked entry's probability is exactly 0.
/// Within 1 ulp (measured; 2 asserted) for −125 ≤ t ≤ 127; t > 127 gives 2¹²⁷;
/// NaN → NaN. Thirteen vector instructions where eˣ of the same argument, with the
/// same flush, takes sixteen plus the subtraction that forms it: the caller folds
/// log₂e into the one fused multiply-add that subtracts its shift.
#[inline(always)]
pub fn exp2_flush<P: Packet>(p: P, t: P::V) -> P::V {
    // NaN compares false: it propagates through `exp2_softmax`.
    p.select(p.lt(t, p.splat(EXP2_LO)), p.zero(), exp2_softmax(p, t))
}

// ---------------------------------------------------------------- erf

/// 2/√π split as hi + lo, hi rounded down so that lo > 0: then x·(lo + …) at x = ±0 has
/// the sign of x and erf(−0) = −0.
const TWO_OVER_SQRT_PI_HI: f32 = f32::from_bits(0x3f90_6eba); // 1.1283791 < 2/√π
const TWO_OVER_SQRT_PI_LO: f32 = 6.057_39e-8;
/// erf(x)/x ≈ 2/√π + c₁t + … + c₈t⁸, t = x², on |x| ≤ [`ERF_SMALL`]; relative error 9.1e-10
/// (fit). `ERF_P[0]` is the low half of 2/√π; the high half is added last.
const ERF_P: [f32; 9] = [
    TWO_OVER_SQRT_PI_LO,
    -0.376_126_35,
    0.112_837_34,
    -0.026_863_309,
    0.005_217_099,
    -0.000_845_572,
    0.000_113_132_04,
    -1.133_414_4e-5,
    6.208_062_5e-7,
];
/// Below this |x| the odd polynomial is used, at and above it 1 − erfc.
const ERF_SMALL: f32 = 1.5;
/// ln(erfc(u)·e^{u²}) ≈ Σ cₖ (u − `ERFC_MID`)ᵏ on [`ERF_SMALL`], [`ERFC_MAX`], absolute error
/// 7.5e-8 (fit) — a relative error of erfc, which `gelu`'s negative tail needs (for `erf`
/// alone a degree-5 fit weighted by erfc would do).
const ERFC_S: [f32; 8] = [
    -1.641_640_4,
    -0.326_535_9,
    0.048_714_33,
    -0.008_933_605,
    0.001_701_068_8,
    -0.000_319_936_25,
    6.186_894_5e-5,
    -1.015_203_3e-5,
];
const ERFC_MID: f32 = 2.75;
/// erf(u) rounds to 1 for u ≥ 3.9192; the tail fit ends here.
const ERFC_MAX: f32 = 4.0;

/// erf(x)/x − 2/√π_hi for |x| < [`ERF_SMALL`], so erf(x) = fma(x, 2/√π_hi, x·this).
#[inline(always)]
fn erf_small_rest<P: Packet>(p: P, x: P::V) -> P::V {
    estrin(p, p.mul(x, x), &ERF_P)
}

/// ln(erfc(u)·e^{u²}) for `u` in [`ERF_SMALL`], [`ERFC_MAX`] (`u` is clamped there).
#[inline(always)]
fn erfc_s<P: Packet>(p: P, u: P::V) -> P::V {
    let u = p.min(p.max(u, p.splat(ERF_SMALL)), p.splat(ERFC_MAX));
    estrin(p, p.sub(u, p.splat(ERFC_MID)), &ERFC_S)
}

/// The error function, within 3 ulp (measured; 4 ulp asserted) over the whole f32
/// domain: erf(±0) = ±0, erf(x) = 2x/√π correctly rounded for tiny and subnormal x,
/// erf(x) = ±1 for |x| ≥ 3.9192, erf(±inf) = ±1, NaN → NaN.
///
/// |x| < 1.5: x·P(x²) with the leading 2/√π in two parts. |x| ≥ 1.5:
/// 1 − erfc(|x|), erfc(u) = exp(S(u) − u²) with S a polynomial fit of ln(erfc(u)e^{u²})
/// and S − u² formed by one `fnma` (no rounding error from u²).
#[inline(always)]
pub fn erf<P: Packet>(p: P, x: P::V) -> P::V {
    let small = p.fma(
        x,
        p.splat(TWO_OVER_SQRT_PI_HI),
        p.mul(x, erf_small_rest(p, x)),
    );
    let a = p.abs(x);
    let u = p.min(a, p.splat(ERFC_MAX)); // +inf → ERFC_MAX (NaN lanes take `small`)
    // S(u) − u² ≥ −18.6: no subnormal or zero results.
    let erfc = exp_normal(p, p.fnma(u, u, erfc_s(p, u)));
    let one_minus = p.sub(p.splat(1.0), erfc);
    // (`select` rather than `copysign`: x < 0 here, never NaN or ±0.)
    let big = p.select(p.lt(x, p.zero()), p.neg(one_minus), one_minus);
    // NaN compares false, so NaN lanes take `small`, which is NaN.
    p.select(p.le(p.splat(ERF_SMALL), a), big, small)
}

// ---------------------------------------------------------------- sigmoid, silu

/// The logistic function 1/(1 + e⁻ˣ), within 2 ulp (measured; 3 asserted) over the whole
/// domain, including subnormal results for x < −87.3: sigmoid(−inf) = 0,
/// sigmoid(+inf) = 1, NaN → NaN; no overflow or inf/inf for any input.
///
/// With e = e^{−|x|} (|x| clamped to 87, so e is normal and built with one product):
/// x ≥ 0 gives 1/(1 + e), x < 0 gives e/(1 + e). Lanes with x < −87, where 1 + e = 1 and
/// the result may be subnormal, take [`exp`]`(x)` instead; a packet without such a lane
/// (every packet of N(0,1)-like data) skips that path, with the same lane values.
#[inline(always)]
pub fn sigmoid<P: Packet>(p: P, x: P::V) -> P::V {
    // `max(c, ·)` keeps a NaN: it propagates to the result without a select.
    let e = exp_normal(p, p.max(p.splat(EXP_NORMAL_LO), p.neg_abs(x)));
    let d = p.add(p.splat(1.0), e);
    let num = p.select(p.lt(x, p.zero()), e, p.splat(1.0));
    let y = p.div(num, d);
    let tail = p.lt(x, p.splat(EXP_NORMAL_LO));
    if p.any(tail) {
        p.select(tail, exp(p, x), y)
    } else {
        y
    }
}

/// SiLU (swish) x·sigmoid(x), within 2 ulp (measured; 4 asserted) over the whole domain,
/// including subnormal results: silu(−inf) = −0, silu(+inf) = +inf, NaN → NaN.
///
/// [`silu_core`], then `silu_tail` for the lanes with x < −87 (a packet without one
/// skips it).
#[inline(always)]
pub fn silu<P: Packet>(p: P, x: P::V) -> P::V {
    let (y, tail) = silu_core(p, x);
    if p.any(tail) {
        p.select(tail, silu_tail(p, x), y)
    } else {
        y
    }
}

/// The part of [`silu`] every packet runs: x/(1 + e^{−x}) on the lanes with x ≥ −87
/// (and NaN), and the mask of the other lanes (the tail, where e^{−x} would overflow).
///
/// e^{−x} is made with its argument clamped below at −87 (for x > 87 it is e^{−87} and
/// 1 + e rounds to 1), so it is always one normal-range product; one division gives
/// the result. No select: about 18 vector instructions per packet, where
/// x·(e or 1)/(1 + e) with e = e^{−|x|} took 24.
#[inline(always)]
pub fn silu_core<P: Packet>(p: P, x: P::V) -> (P::V, P::M) {
    // `max(c, ·)` keeps a NaN; it propagates through the division.
    let e = exp_normal(p, p.max(p.splat(EXP_NORMAL_LO), p.neg(x)));
    let y = p.div(x, p.add(p.splat(1.0), e));
    (y, p.lt(x, p.splat(EXP_NORMAL_LO)))
}

/// [`silu`] for x < −87 (and −inf): x·eˣ = (x·q)·2ⁿ with the power of two applied last, so
/// that subnormal results are rounded once; below [`EXP_LO`] the result is −0.
#[inline(always)]
fn silu_tail<P: Packet>(p: P, x: P::V) -> P::V {
    let xc = p.max(x, p.splat(EXP_LO));
    let (q, n) = exp_parts(p, xc);
    p.mul_pow2(p.mul(xc, q), n)
}

// ---------------------------------------------------------------- gelu

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// gelu(x) rounds to −0 below about −14.4; clamping keeps −inf out of the product.
const GELU_LO: f32 = -20.0;

/// Below this the tail's e^{S − x²/2} may leave the normal range (S ≥ −2.6 there):
/// those lanes scale the product once, with [`Packet::mul_pow2`].
const GELU_FAR: f32 = -12.9;

/// Exact-erf GELU 0.5·x·(1 + erf(x/√2)); see the module table for its accuracy.
///
/// u = x/√2. For |u| < 1.5 the odd erf polynomial; for u ≥ 1.5, 1 + erf = 2 − erfc(u);
/// for u ≤ −1.5, 1 + erf = erfc(|u|) = exp(S(|u|) − x²/2) with x·(x/2) fused into the
/// exponent, so the tail keeps relative accuracy (no cancellation in 1 + erf).
/// gelu(−inf) = −0, gelu(+inf) = +inf, NaN → NaN.
///
/// Most packets of N(0,1)-like data have no lane in the tail, and skip its
/// exponential: this is [`gelu_core`], then [`gelu_tail`] when a lane needs it.
#[inline(always)]
pub fn gelu<P: Packet>(p: P, x: P::V) -> P::V {
    let (y, tail) = gelu_core(p, x);
    if p.any(tail) {
        gelu_tail(p, x, y, tail)
    } else {
        y
    }
}

/// gelu(x) = x·(1/2 + x·h(x²)) with h(s) = erf(√(s/2))/(2√s) ≈ Σ cₖ sᵏ on
/// |x| < [`GELU_CORE_MAX`], fitted for the relative error of Φ(x) = 1/2 + x·h(x²) on
/// both sides (8.2e-8 before f32 rounding; in f32 the rounding of h, amplified by the
/// cancellation in 1/2 + x·h where Φ is small, dominates: see the module table).
const GELU_H: [f32; 9] = [
    0.398_942_1,
    -0.066_489_294,
    0.009_971_254,
    -0.001_184_942_1,
    0.000_114_019_15,
    -8.925_581e-6,
    5.441_324_3e-7,
    -2.275_740_3e-8,
    4.763_307_5e-10,
];
/// |x| below which [`gelu_core`] completes a lane with the polynomial; at and above it
/// the lane is in the tail.
const GELU_CORE_MAX: f32 = 2.5;

/// The part of [`gelu`] every packet runs: its value on the lanes with
/// |x| < 2.5 (and NaN), and the mask of the other lanes, the tail, which
/// [`gelu_tail`] completes. A caller that meets many packets may defer the tail
/// of the few that have one and complete them later (see gelu_residual): the
/// lanes' values are the same either way.
///
/// x·fma(x, h(x²), 1/2): one multiply for x², the polynomial (Horner: fewer
/// instructions than Estrin, and a row's packets are independent), an fma and a
/// multiply, about 13 vector instructions where the erf form took 22; Φ is rounded
/// once, by the fma, and gelu(−0) = −0.
#[inline(always)]
pub fn gelu_core<P: Packet>(p: P, x: P::V) -> (P::V, P::M) {
    let s = p.mul(x, x);
    let phi = p.fma(x, horner(p, s, &GELU_H), p.splat(0.5));
    // s ≥ 6.25 ⇔ |x| ≥ 2.5 (6.25 is exact and x² rounds monotonically); ±inf are in
    // the tail, NaN is not (it compares false), and its product below is NaN.
    let tail = p.le(p.splat(GELU_CORE_MAX * GELU_CORE_MAX), s);
    (p.mul(x, phi), tail)
}

/// [`gelu`] from [`gelu_core`]'s `(y, tail)`: the tail lanes computed, the others
/// kept.
#[inline(always)]
pub fn gelu_tail<P: Packet>(p: P, x: P::V, y: P::V, tail: P::M) -> P::V {
    let u = p.mul(x, p.splat(FRAC_1_SQRT_2));
    // x/2 with x clamped to GELU_LO, the factor of the tail's product.
    let xh = p.mul(p.max(x, p.splat(GELU_LO)), p.splat(0.5));
    let half_x = p.mul(x, p.splat(0.5));
    let z = p.fnma(x, half_x, erfc_s(p, p.abs(u)));
    // For x > 12.9 the clamp only changes how tiny the (ignored) erfc is.
    let erfc = exp_normal(p, p.max(p.splat(EXP_NORMAL_LO), z));
    let one_plus_erf = p.select(p.lt(u, p.zero()), erfc, p.sub(p.splat(2.0), erfc));
    let y = p.select(tail, p.mul(xh, one_plus_erf), y);
    let far = p.lt(x, p.splat(GELU_FAR));
    if p.any(far) {
        // (x/2)·q·2ⁿ with the power of two last: subnormal results are rounded once,
        // and gelu(x) is −0 below about −14.4 (x = −inf included: z = −inf).
        let (q, n) = exp_parts(p, p.max(z, p.splat(EXP_LO)));
        p.select(far, p.mul_pow2(p.mul(xh, q), n), y)
    } else {
        y
    }
}

// ---------------------------------------------------------------- rsqrt

/// 1/√x as a correctly rounded square root followed by a correctly rounded division:
/// within 1 ulp. rsqrt(+0) = +inf, rsqrt(−0) = −inf, rsqrt(+inf) = 0, x < 0 → NaN.
#[inline(always)]
pub fn rsqrt<P: Packet>(p: P, x: P::V) -> P::V {
    p.div(p.splat(1.0), p.sqrt(x))
}

#[cfg(test)]
#[path = "math_tests.rs"]
mod tests;
