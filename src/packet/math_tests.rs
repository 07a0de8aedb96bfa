//! Accuracy tests of the vector math against f64 references, on every backend.
//!
//! Inputs per function: every 256th (exp, erf) or 1024th (the others) f32 bit pattern over
//! the whole line (low bits jittered, NaNs and infinities included), a dense 2²⁰-point
//! sweep of the interesting interval, and edge values. (Every 64th pattern on all six
//! backends would take about a minute; `bit_sweep(6)` is there for a local deep run.) Error is the distance in ulps to the f32 rounding of the
//! f64 reference (in the subnormal range 1 ulp = 2⁻¹⁴⁹). Each native backend must also
//! agree bit for bit with the scalar backend of the same width.
//!
//! `cargo test --release packet::math -- --nocapture` prints the measured maxima.

// The mpmath reference values below carry more digits than f64 holds, on purpose.
#![allow(clippy::excessive_precision)]

use super::*;
use crate::packet::{Backend, Packet, WithPacket, dispatch, test_backends};
use rayon::prelude::*;

// ---------------------------------------------------------------- f64 references

const SQRT_PI: f64 = 1.772_453_850_905_516;

/// e^{−a²} with a² split into hi + lo, so its rounding does not leak into the result.
fn exp_neg_sq(a: f64) -> f64 {
    let hi = a * a;
    let lo = a.mul_add(a, -hi);
    (-hi).exp() * (-lo).exp()
}

/// erf(a) for 0 ≤ a, by the all-positive series
/// erf(a) = 2/√π · e^{−a²} · Σ 2ⁿ a^{2n+1} / (1·3·…·(2n+1)) (no cancellation).
fn erf_series(a: f64) -> f64 {
    let a2 = 2.0 * a * a;
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    loop {
        n += 1.0;
        term *= a2 / (2.0 * n + 1.0);
        sum += term;
        if term <= sum * 1e-18 {
            break;
        }
    }
    std::f64::consts::FRAC_2_SQRT_PI * exp_neg_sq(a) * sum
}

/// erfc(a) for a ≥ 3 by the continued fraction
/// erfc(a) = e^{−a²}/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + …)))).
fn erfc_cf(a: f64) -> f64 {
    let mut f = a;
    for k in (1..=80).rev() {
        f = a + (k as f64 * 0.5) / f;
    }
    exp_neg_sq(a) / (f * SQRT_PI)
}

fn erf64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 3.0 {
        erf_series(a)
    } else if a < 7.0 {
        1.0 - erfc_cf(a)
    } else {
        1.0
    };
    r.copysign(x)
}

/// erfc(a) for a ≥ 0.
fn erfc64(a: f64) -> f64 {
    if a < 3.0 {
        1.0 - erf_series(a)
    } else if a < 30.0 {
        erfc_cf(a)
    } else {
        0.0
    }
}

fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn reference(f: Func, x: f32) -> f64 {
    let x = x as f64;
    match f {
        Func::Exp => x.exp(),
        // Its contract: flushed to 0 below −125, clamped at 127.
        Func::Exp2Flush if x < -125.0 => 0.0,
        Func::Exp2Flush => x.clamp(-125.0, 127.0).exp2(),
        // Its contract: 2ᵗ with t clamped to [−125, 127].
        Func::Exp2Softmax => x.clamp(-125.0, 127.0).exp2(),
        Func::Erf => erf64(x),
        Func::Sigmoid => sigmoid64(x),
        Func::Silu => {
            if x == f64::NEG_INFINITY {
                -0.0
            } else {
                x * sigmoid64(x)
            }
        }
        Func::Gelu => {
            let u = x * std::f64::consts::FRAC_1_SQRT_2;
            if x.is_nan() || x >= 0.0 {
                0.5 * x * (1.0 + erf64(u))
            } else if x == f64::NEG_INFINITY {
                -0.0
            } else {
                0.5 * x * erfc64(-u)
            }
        }
        Func::Rsqrt => 1.0 / x.sqrt(),
    }
}

#[test]
fn reference_erf_matches_mpmath() {
    // mpmath at 30 digits
    let erf = [
        (1e-3, 0.001_128_378_790_969_236_4),
        (0.3, 0.328_626_759_459_127_43),
        (0.9, 0.796_908_212_422_832_13),
        (1.5, 0.966_105_146_475_310_7),
        (2.5, 0.999_593_047_982_555_04),
        (2.999, 0.999_977_769_831_400_17),
        (3.001, 0.999_978_048_339_082_26),
        (3.5, 0.999_999_256_901_627_66),
        (5.0, 0.999_999_999_998_462_54),
    ];
    for (x, want) in erf {
        let got = erf64(x);
        assert!(
            ((got - want) / want).abs() < 1e-14,
            "erf({x}) = {got}, want {want}"
        );
        assert_eq!(erf64(-x), -got);
    }
    let erfc = [
        (0.5, 0.479_500_122_186_953_46),
        (2.9, 4.109_787_809_945_883_6e-5),
        (3.1, 1.164_865_736_719_959_6e-5),
        (5.0, 1.537_459_794_428_034_9e-12),
        (8.0, 1.122_429_717_298_292_7e-29),
        (10.0, 2.088_487_583_762_544_8e-45),
        (14.0, 3.037_229_847_750_311_7e-87),
    ];
    for (x, want) in erfc {
        let got = erfc64(x);
        assert!(
            ((got - want) / want).abs() < 1e-10, // 1 − erf below 3 loses ~1e-11
            "erfc({x}) = {got}, want {want}"
        );
    }
}

// ---------------------------------------------------------------- running the functions

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Func {
    Exp,
    Exp2Flush,
    Exp2Softmax,
    Erf,
    Sigmoid,
    Silu,
    Gelu,
    Rsqrt,
}

struct Apply<'a> {
    f: Func,
    x: &'a [f32],
    y: &'a mut [f32],
}

/// Applies math function `$f` to `$x` into `$y`, full packets then a partial tail.
/// A macro, not a function taking `impl Fn`: a function value's call shim is compiled
/// without the backend's target features, and then no intrinsic inside it is inlined.
macro_rules! each {
    ($p:expr, $x:expr, $y:expr, $f:ident) => {{
        let (p, x, y) = ($p, $x, $y);
        let w = P::W;
        let full = x.len() / w * w;
        for i in (0..full).step_by(w) {
            p.store(&mut y[i..], $f(p, p.load(&x[i..])));
        }
        let n = x.len() - full;
        if n > 0 {
            p.store_partial(&mut y[full..], n, $f(p, p.load_partial(&x[full..], n, 0.0)));
        }
    }};
}

impl WithPacket for Apply<'_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let (x, y) = (self.x, self.y);
        match self.f {
            Func::Exp => each!(p, x, y, exp),
            Func::Exp2Flush => each!(p, x, y, exp2_flush),
            Func::Exp2Softmax => each!(p, x, y, exp2_softmax),
            Func::Erf => each!(p, x, y, erf),
            Func::Sigmoid => each!(p, x, y, sigmoid),
            Func::Silu => each!(p, x, y, silu),
            Func::Gelu => each!(p, x, y, gelu),
            Func::Rsqrt => each!(p, x, y, rsqrt),
        }
    }
}

fn apply(b: Backend, f: Func, x: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    dispatch(b, Apply { f, x, y: &mut y });
    y
}

// ---------------------------------------------------------------- measuring

/// Position of `v` on the line of f32 values (−0 and +0 coincide).
fn ordinal(v: f32) -> i64 {
    let b = v.to_bits();
    if b >> 31 == 1 {
        -((b & 0x7fff_ffff) as i64)
    } else {
        b as i64
    }
}

/// ulps between `y` and the correctly rounded f32 of `r`; NaN matches only NaN.
fn ulps(y: f32, r: f64) -> u64 {
    let rr = r as f32;
    match (y.is_nan(), rr.is_nan()) {
        (true, true) => 0,
        (false, false) => (ordinal(y) - ordinal(rr)).unsigned_abs(),
        _ => u64::MAX,
    }
}

/// The worst case seen: error and its input.
#[derive(Clone, Copy, Debug, Default)]
struct Worst {
    ulps: u64,
    x: f32,
    y: f32,
}

impl Worst {
    fn see(&mut self, ulps: u64, x: f32, y: f32) {
        if ulps > self.ulps {
            *self = Worst { ulps, x, y };
        }
    }
    fn merge(self, o: Worst) -> Worst {
        if o.ulps > self.ulps { o } else { self }
    }
}

/// Which accuracy class an input belongs to (`gelu` has three; the others one).
type Region = fn(f32) -> usize;

/// Runs `f` on every backend over `inputs` (in blocks, in parallel), returns the worst
/// error per backend and region, and checks that each native backend matches the
/// scalar backend of its width bit for bit.
fn measure(f: Func, inputs: &[f32], region: Region, nregions: usize) -> Vec<(Backend, Vec<Worst>)> {
    let backends = test_backends();
    let per_block: Vec<Vec<Vec<Worst>>> = inputs
        .par_chunks(1 << 16)
        .map(|x| {
            let refs: Vec<f64> = x.iter().map(|&v| reference(f, v)).collect();
            let outs: Vec<Vec<f32>> = backends.iter().map(|&b| apply(b, f, x)).collect();
            for (i, &b) in backends.iter().enumerate() {
                if b.is_scalar() {
                    continue;
                }
                let s = backends
                    .iter()
                    .position(|&s| s.is_scalar() && s.width() == b.width())
                    .expect("a scalar backend of every width");
                for (k, (&yb, &ys)) in outs[i].iter().zip(&outs[s]).enumerate() {
                    // NaN payloads and the quiet bit are not preserved by Rust's (LLVM's)
                    // float semantics, so two NaNs count as the same result.
                    assert!(
                        yb.to_bits() == ys.to_bits() || (yb.is_nan() && ys.is_nan()),
                        "{f:?}({:e}): {} gives {yb:e} ({:#x}), {} gives {ys:e} ({:#x})",
                        x[k],
                        b.name(),
                        yb.to_bits(),
                        backends[s].name(),
                        ys.to_bits()
                    );
                }
            }
            outs.iter()
                .map(|y| {
                    let mut w = vec![Worst::default(); nregions];
                    for ((&xv, &yv), &r) in x.iter().zip(y).zip(&refs) {
                        w[region(xv)].see(ulps(yv, r), xv, yv);
                    }
                    w
                })
                .collect()
        })
        .collect();
    backends
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let mut w = vec![Worst::default(); nregions];
            for blk in &per_block {
                for (r, wr) in w.iter_mut().enumerate() {
                    *wr = wr.merge(blk[i][r]);
                }
            }
            (b, w)
        })
        .collect()
}

/// Every 2^`shift`-th bit pattern (low bits jittered): 2^(32 − shift) inputs across the
/// whole line, NaNs and infinities included.
fn bit_sweep(shift: u32) -> Vec<f32> {
    (0u32..1 << (32 - shift))
        .map(|k| f32::from_bits(k << shift | (k.wrapping_mul(0x9e37_79b9) >> (32 - shift))))
        .collect()
}

/// `n` evenly spaced points of [lo, hi].
fn dense(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (lo as f64 + (hi as f64 - lo as f64) * i as f64 / (n - 1) as f64) as f32)
        .collect()
}

fn neighbours(v: f32) -> [f32; 3] {
    [v.next_down(), v, v.next_up()]
}

/// Edge values every function is tried on.
fn edges() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0x7f80_0001),
        1.0,
        0.5,
        2.0,
        1e-30,
        1e30,
    ];
    for t in [
        88.722_83,   // exp overflow
        -87.336_55,  // exp: subnormal results below
        -103.972_08, // exp underflow to 0
        -103.278_93,
        1.5,         // erf branch switch
        3.919_205_5, // erf saturates
        2.121_320_3, // erf branch switch (1.5·√2)
        2.5,         // gelu: core / tail switch
        5.656_854,   // gelu: end of the tail fit (4·√2)
        14.4,
        16.635_532, // sigmoid(x) rounds to 1 above
        120.0,
    ] {
        v.extend(neighbours(t));
    }
    let mut all: Vec<f32> = v.iter().flat_map(|&x| [x, -x]).collect();
    all.extend((0..64).map(f32::from_bits)); // smallest subnormals
    all
}

fn inputs(shift: u32, lo: f32, hi: f32) -> Vec<f32> {
    let mut v = bit_sweep(shift);
    v.extend(dense(lo, hi, 1 << 20));
    v.extend(edges());
    v
}

fn one_region(_: f32) -> usize {
    0
}

fn report_and_check(f: Func, res: &[(Backend, Vec<Worst>)], names: &[&str], bounds: &[u64]) {
    for (b, w) in res {
        for ((wr, name), &bound) in w.iter().zip(names).zip(bounds) {
            println!(
                "{f:?} {name} on {}: max {} ulp (x = {:e} → {:e})",
                b.name(),
                wr.ulps,
                wr.x,
                wr.y
            );
            assert!(
                wr.ulps <= bound,
                "{f:?} {name} on {}: {} ulp > {bound} at x = {:e} (bits {:#x}): got {:e}, want {:e}",
                b.name(),
                wr.ulps,
                wr.x,
                wr.x.to_bits(),
                wr.y,
                reference(f, wr.x)
            );
        }
    }
}

fn check(f: Func, shift: u32, lo: f32, hi: f32, bound: u64) {
    let x = inputs(shift, lo, hi);
    let res = measure(f, &x, one_region, 1);
    report_and_check(f, &res, &["all"], &[bound]);
}

/// Runs `f` on one value with every backend (in a lane other than 0, too) and
/// checks all results are `want` bit for bit.
fn exactly(f: Func, x: f32, want: f32) {
    for b in test_backends() {
        let mut xs = vec![1.0; b.width() + 3];
        xs[0] = x;
        xs[b.width() - 1] = x;
        xs[b.width() + 2] = x;
        let y = apply(b, f, &xs);
        for k in [0, b.width() - 1, b.width() + 2] {
            let ok = if want.is_nan() {
                y[k].is_nan()
            } else {
                y[k].to_bits() == want.to_bits()
            };
            assert!(
                ok,
                "{f:?}({x:e}) on {} lane {k} = {:e}, want {want:e}",
                b.name(),
                y[k]
            );
        }
    }
}

// ---------------------------------------------------------------- the tests

#[test]
fn exp_within_2_ulp() {
    check(Func::Exp, 8, -104.0, 89.0, 2);
}

#[test]
fn exp_special_values() {
    use Func::Exp;
    exactly(Exp, 0.0, 1.0);
    exactly(Exp, -0.0, 1.0);
    exactly(Exp, f32::INFINITY, f32::INFINITY);
    exactly(Exp, f32::NEG_INFINITY, 0.0);
    exactly(Exp, f32::NAN, f32::NAN);
    exactly(Exp, 88.722_84, f32::INFINITY);
    exactly(Exp, 1e30, f32::INFINITY);
    exactly(Exp, -1e30, 0.0);
    exactly(Exp, -103.98, 0.0);
    exactly(Exp, -103.96, f32::from_bits(1));
    exactly(Exp, 1.0, std::f32::consts::E);
}

#[test]
fn exp2_flush_within_2_ulp() {
    check(Func::Exp2Flush, 8, -126.0, 128.0, 2);
}

#[test]
fn exp2_softmax_within_2_ulp() {
    check(Func::Exp2Softmax, 8, -126.0, 128.0, 2);
}

/// The special values of the softmaxes' base-2 exponentials, which differ only
/// in what t < −125 gives: `below`.
fn exp2_special_values(f: Func, below: f32) {
    let two_pow = |n: i32| 2f32.powi(n);
    exactly(f, 0.0, 1.0);
    exactly(f, -0.0, 1.0);
    exactly(f, 1.0, 2.0);
    exactly(f, -1.0, 0.5);
    exactly(f, -125.0, two_pow(-125));
    exactly(f, -125.000_01, below);
    exactly(f, -1e30, below);
    exactly(f, f32::NEG_INFINITY, below);
    exactly(f, 127.0, two_pow(127));
    exactly(f, f32::INFINITY, two_pow(127));
    exactly(f, f32::NAN, f32::NAN);
}

#[test]
fn exp2_softmax_special_values() {
    exp2_special_values(Func::Exp2Softmax, 2f32.powi(-125));
}

#[test]
fn exp2_flush_special_values() {
    exp2_special_values(Func::Exp2Flush, 0.0);
}

#[test]
fn erf_within_4_ulp() {
    check(Func::Erf, 8, -4.0, 4.0, 4);
}

#[test]
fn erf_special_values() {
    use Func::Erf;
    exactly(Erf, 0.0, 0.0);
    exactly(Erf, -0.0, -0.0);
    exactly(Erf, f32::INFINITY, 1.0);
    exactly(Erf, f32::NEG_INFINITY, -1.0);
    exactly(Erf, f32::NAN, f32::NAN);
    exactly(Erf, 3.92, 1.0);
    exactly(Erf, -1e30, -1.0);
    exactly(Erf, f32::from_bits(1), f32::from_bits(1)); // 2/√π·2⁻¹⁴⁹ rounds to 2⁻¹⁴⁹
    exactly(Erf, f32::from_bits(8), f32::from_bits(9));
}

#[test]
fn sigmoid_within_3_ulp() {
    check(Func::Sigmoid, 10, -110.0, 20.0, 3);
}

#[test]
fn sigmoid_special_values() {
    use Func::Sigmoid;
    exactly(Sigmoid, 0.0, 0.5);
    exactly(Sigmoid, -0.0, 0.5);
    exactly(Sigmoid, f32::INFINITY, 1.0);
    exactly(Sigmoid, f32::NEG_INFINITY, 0.0);
    exactly(Sigmoid, f32::NAN, f32::NAN);
    exactly(Sigmoid, 1e30, 1.0);
    exactly(Sigmoid, -1e30, 0.0);
    exactly(Sigmoid, 20.0, 1.0);
}

#[test]
fn silu_within_4_ulp() {
    check(Func::Silu, 10, -110.0, 20.0, 4);
}

#[test]
fn silu_special_values() {
    use Func::Silu;
    exactly(Silu, 0.0, 0.0);
    exactly(Silu, -0.0, -0.0);
    exactly(Silu, f32::INFINITY, f32::INFINITY);
    exactly(Silu, f32::NEG_INFINITY, -0.0);
    exactly(Silu, f32::NAN, f32::NAN);
    exactly(Silu, -1e30, -0.0);
    exactly(Silu, 1e30, 1e30);
    exactly(Silu, f32::MAX, f32::MAX);
}

/// gelu's accuracy classes, see the module docs: 0 = x ≥ −1 (few ulp),
/// 1 = −2.5 < x < −1 (the core's 1/2 + x·h cancels), 2 = −4√2 < x ≤ −2.5 (the
/// erfc tail), 3 = x ≤ −4√2 (beyond the tail fit).
fn gelu_region(x: f32) -> usize {
    if x.is_nan() || x >= -1.0 {
        0
    } else if x > -2.5 {
        1
    } else if x > -5.6568 {
        2
    } else {
        3
    }
}

#[test]
fn gelu_accuracy() {
    let x = inputs(10, -15.0, 6.0);
    let res = measure(Func::Gelu, &x, gelu_region, 4);
    report_and_check(
        Func::Gelu,
        &res,
        &[
            "x >= -1",
            "-2.5 < x < -1",
            "-5.6568 < x <= -2.5",
            "x <= -5.6568",
        ],
        &[4, 256, 32, u64::MAX - 1],
    );
    // The operator bound, everywhere (scalar W8 computes the same bits as every backend).
    let b = Backend::scalar(8).unwrap();
    let y = apply(b, Func::Gelu, &x);
    for (&xv, &yv) in x.iter().zip(&y) {
        let r = reference(Func::Gelu, xv);
        if r.is_finite() {
            assert!(
                (yv as f64 - r).abs() <= 1e-6 + 1e-5 * r.abs(),
                "gelu({xv:e}) = {yv:e}, want {r:e}"
            );
        } else {
            assert!(
                yv.is_nan() && r.is_nan() || yv as f64 == r,
                "gelu({xv:e}) = {yv:e}"
            );
        }
    }
}

#[test]
fn gelu_special_values() {
    use Func::Gelu;
    exactly(Gelu, 0.0, 0.0);
    exactly(Gelu, -0.0, -0.0);
    exactly(Gelu, f32::INFINITY, f32::INFINITY);
    exactly(Gelu, f32::NEG_INFINITY, -0.0);
    exactly(Gelu, f32::NAN, f32::NAN);
    exactly(Gelu, -1e30, -0.0);
    exactly(Gelu, 1e30, 1e30);
    exactly(Gelu, f32::MAX, f32::MAX);
}

#[test]
fn rsqrt_within_1_ulp() {
    check(Func::Rsqrt, 10, 1e-3, 1e3, 1);
}

#[test]
fn rsqrt_special_values() {
    use Func::Rsqrt;
    exactly(Rsqrt, 0.0, f32::INFINITY);
    exactly(Rsqrt, -0.0, f32::NEG_INFINITY);
    exactly(Rsqrt, f32::INFINITY, 0.0);
    exactly(Rsqrt, -1.0, f32::NAN);
    exactly(Rsqrt, f32::NAN, f32::NAN);
    exactly(Rsqrt, 4.0, 0.5);
}

/// The rare slow paths (exp's subnormal/overflow lanes, sigmoid's and silu's x < −87,
/// gelu's tail and far tail) are taken per packet, but each lane's value must not
/// depend on its neighbours: every value alone (among 1.0s) equals itself among
/// neighbours that force the slow path.
#[test]
fn results_do_not_depend_on_neighbouring_lanes() {
    let probes: Vec<f32> = dense(-20.0, 20.0, 4001)
        .into_iter()
        .chain(edges())
        .collect();
    for f in [
        Func::Exp,
        Func::Exp2Flush,
        Func::Erf,
        Func::Sigmoid,
        Func::Silu,
        Func::Gelu,
    ] {
        for b in test_backends() {
            let w = b.width();
            let alone: Vec<f32> = probes
                .iter()
                .flat_map(|&x| {
                    let mut v = vec![1.0; w];
                    v[w / 2] = x;
                    v
                })
                .collect();
            let forced: Vec<f32> = probes
                .iter()
                .flat_map(|&x| {
                    let mut v = vec![-95.0; w];
                    v[0] = 100.0;
                    v[w - 1] = -15.0;
                    v[w / 2] = x;
                    v
                })
                .collect();
            let (ya, yf) = (apply(b, f, &alone), apply(b, f, &forced));
            for (k, &x) in probes.iter().enumerate() {
                let (a, c) = (ya[k * w + w / 2], yf[k * w + w / 2]);
                assert!(
                    a.to_bits() == c.to_bits() || (a.is_nan() && c.is_nan()),
                    "{f:?}({x:e}) on {}: {a:e} alone, {c:e} among slow lanes",
                    b.name()
                );
            }
        }
    }
}
