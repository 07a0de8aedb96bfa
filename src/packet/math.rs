//! Vector math over any [`Packet`]: `exp`, `erf`, `sigmoid`, `silu`, `gelu`, `rsqrt`.
//!
//! Every function is generic over the backend, `#[inline(always)]`, branch-free
//! (lane-wise `select`), and built only from the [`Packet`] primitives, so the scalar
//! backend of the same width computes bit-identical results to the SIMD backends (the
//! tests check this).
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
//! | [`erf`] | 2 ulp | 4 ulp | whole domain incl. subnormal `x` |
//! | [`sigmoid`] | 2 ulp | 3 ulp | whole domain incl. subnormal results |
//! | [`silu`] | 3 ulp | 4 ulp | whole domain incl. subnormal results |
//! | [`gelu`], x ≥ −1 | 2 ulp | 4 ulp | |
//! | [`gelu`], −4√2 < x < −1 | 37 ulp | 64 ulp | cancellation in 1 + erf near x ≈ −2.1, see below |
//! | [`gelu`], x ≤ −4√2 | relative error up to ≈ 2× | \|y − ref\| ≤ 1e-6 + 1e-5·\|ref\| | \|gelu\| < 4.4e-8 there, see below |
//! | [`rsqrt`] | 1 ulp | 1 ulp | correctly rounded `sqrt`, then one division |
//!
//! [`gelu`] = 0.5·x·(1 + erf(x/√2)) is computed from the same pieces: for |x/√2| < 1.5
//! as 0.5·x·(1 + erf_small), for x/√2 ≥ 1.5 as 0.5·x·(2 − erfc), and for x/√2 ≤ −1.5 as
//! 0.5·x·erfc(|x|/√2) with erfc = exp(S(u) − x·(x/2)) (x²/2 rounded once, inside an
//! `fnma`), so the negative tail does not cancel in 1 + erf. Its error is not ulp-tight in
//! two places, both far inside the operator bound |y − ref| ≤ 1e-6 + 1e-5·|ref|:
//! - −2.13 < x < −1 (1 + erf(u) down to 0.034): the ulp-level error of erf is amplified by
//!   the cancellation in 1 + erf (37 ulp measured, relative ≈ 2e-6);
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

/// eˣ, within 1 ulp (measured; 2 ulp asserted) over the whole f32 domain, including
/// results in the subnormal range. exp(x) = +inf for x > 88.7228, 0 for x < −103.972,
/// exp(±0) = 1, exp(−inf) = 0, exp(+inf) = +inf, NaN → NaN.
#[inline(always)]
pub fn exp<P: Packet>(p: P, x: P::V) -> P::V {
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
    horner(p, p.mul(x, x), &ERF_P)
}

/// ln(erfc(u)·e^{u²}) for `u` in [`ERF_SMALL`], [`ERFC_MAX`] (`u` is clamped there).
#[inline(always)]
fn erfc_s<P: Packet>(p: P, u: P::V) -> P::V {
    let u = p.min(p.max(u, p.splat(ERF_SMALL)), p.splat(ERFC_MAX));
    horner(p, p.sub(u, p.splat(ERFC_MID)), &ERFC_S)
}

/// exp(a) for a finite or −inf argument `a` ≤ 0 (no NaN handling).
#[inline(always)]
fn exp_nonpos<P: Packet>(p: P, a: P::V) -> P::V {
    let (q, n) = exp_parts(p, p.max(a, p.splat(EXP_LO)));
    p.mul_pow2(q, n)
}

/// The error function, within 2 ulp (measured; 4 ulp asserted) over the whole f32
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
    let erfc = exp_nonpos(p, p.fnma(u, u, erfc_s(p, u)));
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
/// With e = e^{−|x|} = q·2ⁿ: x ≥ 0 gives 1/(1 + e), x < 0 gives (q/(1 + e))·2ⁿ, the
/// power of two applied last so that tiny results are rounded once.
#[inline(always)]
pub fn sigmoid<P: Packet>(p: P, x: P::V) -> P::V {
    let na = p.max(p.neg(p.abs(x)), p.splat(EXP_LO));
    let (q, n) = exp_parts(p, na);
    let d = p.add(p.splat(1.0), p.mul_pow2(q, n));
    let negative = p.lt(x, p.zero());
    let num = p.select(negative, q, p.splat(1.0));
    let k = p.select(negative, n, p.zero());
    let y = p.mul_pow2(p.div(num, d), k);
    p.select(p.is_nan(x), x, y)
}

/// SiLU (swish) x·sigmoid(x), within 3 ulp (measured; 4 asserted) over the whole domain,
/// including subnormal results: silu(−inf) = −0, silu(+inf) = +inf, NaN → NaN.
///
/// x ≥ 0: x/(1 + e); x < 0: (x·q/(1 + e))·2ⁿ with e = e^{−|x|} = q·2ⁿ.
#[inline(always)]
pub fn silu<P: Packet>(p: P, x: P::V) -> P::V {
    // For x < EXP_LO the result is −0 anyway; clamping keeps −inf out of the products.
    let xc = p.max(x, p.splat(EXP_LO));
    let na = p.max(p.neg(p.abs(x)), p.splat(EXP_LO));
    let (q, n) = exp_parts(p, na);
    let d = p.add(p.splat(1.0), p.mul_pow2(q, n));
    let negative = p.lt(x, p.zero());
    let num = p.select(negative, p.mul(xc, q), x); // NaN x: not negative → NaN
    let k = p.select(negative, n, p.zero());
    p.mul_pow2(p.div(num, d), k)
}

// ---------------------------------------------------------------- gelu

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// gelu(x) rounds to −0 below about −14.4; clamping keeps −inf out of the product.
const GELU_LO: f32 = -20.0;

/// Exact-erf GELU 0.5·x·(1 + erf(x/√2)); see the module table for its accuracy.
///
/// u = x/√2. For |u| < 1.5 the odd erf polynomial; for u ≥ 1.5, 1 + erf = 2 − erfc(u);
/// for u ≤ −1.5, 1 + erf = erfc(|u|) = exp(S(|u|) − x²/2) with x·(x/2) fused into the
/// exponent, so the tail keeps relative accuracy (no cancellation in 1 + erf).
/// gelu(−inf) = −0, gelu(+inf) = +inf, NaN → NaN.
#[inline(always)]
pub fn gelu<P: Packet>(p: P, x: P::V) -> P::V {
    let u = p.mul(x, p.splat(FRAC_1_SQRT_2));
    let small = p.fma(
        u,
        p.splat(TWO_OVER_SQRT_PI_HI),
        p.mul(u, erf_small_rest(p, u)),
    );
    let a = p.abs(u);
    let big = p.le(p.splat(ERF_SMALL), a);
    // Most packets of N(0,1)-like data have no lane in the tail: skip its exp then.
    // The lanes' values are the same either way, so results do not depend on it.
    let one_plus_erf = if p.any(big) {
        let half_x = p.mul(x, p.splat(0.5));
        let erfc = exp_nonpos(p, p.fnma(x, half_x, erfc_s(p, a)));
        p.select(
            big,
            p.select(p.lt(u, p.zero()), erfc, p.sub(p.splat(2.0), erfc)),
            p.add(p.splat(1.0), small),
        )
    } else {
        p.add(p.splat(1.0), small)
    };
    let xh = p.mul(p.max(x, p.splat(GELU_LO)), p.splat(0.5));
    let y = p.mul(xh, one_plus_erf);
    p.select(p.is_nan(x), x, y)
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
