//! Tests of the packet primitives, on every backend of [`test_backends`].

use super::{Backend, Packet, WithPacket, dispatch, publish_streamed_stores, test_backends};

/// The lane-wise primitives under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Abs,
    Neg,
    NegAbs,
    ShlExponent,
    Copysign,
    Round,
    Floor,
    Min,
    Max,
    MulPow2,
    Sqrt,
    Div,
    Fma,
    Fnma,
    Lt,
    Le,
    Eq,
    IsNan,
    LtOrNan,
}

/// Applies `op` lane-wise to `a`, `b` (and `c` for fma), whose lengths are multiples of 16.
struct Lanewise<'a> {
    op: Op,
    a: &'a [f32],
    b: &'a [f32],
    c: &'a [f32],
    out: &'a mut [f32],
}

impl WithPacket for Lanewise<'_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let w = P::W;
        for i in (0..self.a.len()).step_by(w) {
            let (a, b, c) = (
                p.load(&self.a[i..]),
                p.load(&self.b[i..]),
                p.load(&self.c[i..]),
            );
            let (one, zero) = (p.splat(1.0), p.zero());
            let r = match self.op {
                Op::Abs => p.abs(a),
                Op::Neg => p.neg(a),
                Op::NegAbs => p.neg_abs(a),
                Op::ShlExponent => p.shl_exponent(a),
                Op::Copysign => p.copysign(a, b),
                Op::Round => p.round(a),
                Op::Floor => p.floor(a),
                Op::Min => p.min(a, b),
                Op::Max => p.max(a, b),
                Op::MulPow2 => p.mul_pow2(a, b),
                Op::Sqrt => p.sqrt(a),
                Op::Div => p.div(a, b),
                Op::Fma => p.fma(a, b, c),
                Op::Fnma => p.fnma(a, b, c),
                Op::Lt => p.select(p.lt(a, b), one, zero),
                Op::Le => p.select(p.le(a, b), one, zero),
                Op::Eq => p.select(p.eq(a, b), one, zero),
                Op::IsNan => p.select(p.is_nan(a), one, zero),
                Op::LtOrNan => p.select(p.or_mask(p.lt(a, b), p.is_nan(a)), one, zero),
            };
            p.store(&mut self.out[i..], r);
        }
    }
}

fn pad(v: &[f32]) -> Vec<f32> {
    let mut v = v.to_vec();
    while !v.len().is_multiple_of(16) {
        v.push(1.0);
    }
    v
}

fn lanewise3(b: Backend, op: Op, a: &[f32], x: &[f32], c: &[f32]) -> Vec<f32> {
    let (a, x, c) = (pad(a), pad(x), pad(c));
    let mut out = vec![0.0; a.len()];
    dispatch(
        b,
        Lanewise {
            op,
            a: &a,
            b: &x,
            c: &c,
            out: &mut out,
        },
    );
    out
}

fn lanewise(b: Backend, op: Op, a: &[f32], x: &[f32]) -> Vec<f32> {
    lanewise3(b, op, a, x, &vec![0.0; a.len()])
}

/// Checks `op` on every backend against `want(a, b)` bit for bit (any NaN matches NaN
/// unless `exact_nan`).
fn check2(op: Op, pairs: &[(f32, f32)], want: impl Fn(f32, f32) -> f32, exact_nan: bool) {
    let a: Vec<f32> = pairs.iter().map(|p| p.0).collect();
    let x: Vec<f32> = pairs.iter().map(|p| p.1).collect();
    for b in test_backends() {
        let got = lanewise(b, op, &a, &x);
        for (i, &(u, v)) in pairs.iter().enumerate() {
            let (g, w) = (got[i], want(u, v));
            let ok = if w.is_nan() && !exact_nan {
                g.is_nan()
            } else {
                g.to_bits() == w.to_bits()
            };
            assert!(
                ok,
                "{op:?}({u:e} [{:#x}], {v:e} [{:#x}]) on {} = {g:e} [{:#x}], want {w:e} [{:#x}]",
                u.to_bits(),
                v.to_bits(),
                b.name(),
                g.to_bits(),
                w.to_bits()
            );
        }
    }
}

fn check1(op: Op, xs: &[f32], want: impl Fn(f32) -> f32, exact_nan: bool) {
    let pairs: Vec<(f32, f32)> = xs.iter().map(|&x| (x, 1.0)).collect();
    check2(op, &pairs, |a, _| want(a), exact_nan);
}

const NEG_NAN: f32 = f32::from_bits(0xffc0_0000);

fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        NEG_NAN,
        f32::from_bits(0x7fc1_2345),
    ];
    v.extend((0..16).map(|i| (i as f32 - 7.5) * 0.75));
    v
}

#[test]
fn partial_loads_and_stores_stay_in_bounds() {
    struct Partial;
    impl WithPacket for Partial {
        type Output = ();
        #[inline(always)]
        fn run<P: Packet>(self, p: P) {
            let w = P::W;
            for n in 0..=w {
                // A slice of exactly n elements inside a buffer of NaN sentinels: a lane
                // read from past the slice would show a sentinel instead of `fill`.
                let mut buf = vec![f32::NAN; w + 2];
                for i in 0..n {
                    buf[1 + i] = i as f32 + 1.0;
                }
                let v = p.load_partial(&buf[1..1 + n], n, -7.0);
                let mut out = vec![0.0; w];
                p.store(&mut out, v);
                for (i, &o) in out.iter().enumerate() {
                    let want = if i < n { i as f32 + 1.0 } else { -7.0 };
                    assert_eq!(
                        o.to_bits(),
                        want.to_bits(),
                        "{} load_partial n={n} lane {i}",
                        P::NAME
                    );
                }
                let src: Vec<f32> = (0..w).map(|i| 100.0 + i as f32).collect();
                let mut dst = vec![-1.0f32; w + 2];
                p.store_partial(&mut dst[1..1 + n], n, p.load(&src));
                for (i, &d) in dst.iter().enumerate() {
                    let want = if (1..=n).contains(&i) {
                        100.0 + (i - 1) as f32
                    } else {
                        -1.0
                    };
                    assert_eq!(d, want, "{} store_partial n={n} slot {i}", P::NAME);
                }
            }
        }
    }
    for b in test_backends() {
        dispatch(b, Partial);
    }
}

#[test]
fn indexed_and_streaming_stores_match_plain_ones() {
    struct Indexed;
    impl WithPacket for Indexed {
        type Output = ();
        #[inline(always)]
        fn run<P: Packet>(self, p: P) {
            let w = P::W;
            let src: Vec<f32> = (0..3 * w).map(|i| i as f32 * 0.5).collect();
            for i in 0..=2 * w {
                let v = p.load_at(&src, i);
                let mut want = vec![0.0; w];
                p.store(&mut want, p.load(&src[i..]));
                for stream in [false, true] {
                    let mut got = vec![-1.0f32; 3 * w];
                    p.store_result_at(&mut got, i, v, stream);
                    publish_streamed_stores();
                    assert_eq!(
                        &got[i..i + w],
                        &want[..],
                        "{} at {i} stream {stream}",
                        P::NAME
                    );
                    assert!(got[..i].iter().chain(&got[i + w..]).all(|&g| g == -1.0));
                }
            }
            let out_of_bounds = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                p.load_at(&src, 2 * w + 1)
            }));
            assert!(out_of_bounds.is_err(), "{} load_at past the end", P::NAME);
        }
    }
    for b in test_backends() {
        dispatch(b, Indexed);
    }
}

#[test]
fn funnel_takes_w_lanes_of_the_concatenation() {
    struct Funnel;
    impl WithPacket for Funnel {
        type Output = ();
        #[inline(always)]
        fn run<P: Packet>(self, p: P) {
            let w = P::W;
            let lanes: Vec<f32> = (0..2 * w).map(|i| i as f32 + 0.25).collect();
            let (lo, hi) = (p.load(&lanes), p.load(&lanes[w..]));
            for s in 0..=w {
                let mut got = vec![0.0; w];
                p.store(&mut got, p.funnel(lo, hi, s));
                assert_eq!(got, &lanes[s..s + w], "{} shift {s}", P::NAME);
            }
            let too_far =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.funnel(lo, hi, w + 1)));
            assert!(too_far.is_err(), "{} shift W + 1", P::NAME);
        }
    }
    for b in test_backends() {
        dispatch(b, Funnel);
    }
}

#[test]
fn reductions_match_the_scalar_tree() {
    struct Reduce<'a>(&'a [f32]);
    impl WithPacket for Reduce<'_> {
        type Output = Vec<(u32, u32)>;
        #[inline(always)]
        fn run<P: Packet>(self, p: P) -> Self::Output {
            self.0
                .chunks_exact(P::W)
                .map(|c| {
                    let v = p.load(c);
                    (p.reduce_add(v).to_bits(), p.reduce_max(v).to_bits())
                })
                .collect()
        }
    }
    // Pseudo-random values of mixed magnitude (so that the summation order shows in the
    // rounding), then rows with ±0, NaN and ±inf in varying lanes.
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut data: Vec<f32> = (0..16 * 4096)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let m = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            m * 2f32.powi((s % 40) as i32 - 20)
        })
        .collect();
    let sp = specials();
    let len = data.len();
    for k in 0..16 * 64 {
        data[k * 7 % len] = sp[k % sp.len()];
    }
    for b in test_backends() {
        let got = dispatch(b, Reduce(&data));
        let want = dispatch(Backend::scalar(b.width()).unwrap(), Reduce(&data));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (ga, wa) = (f32::from_bits(g.0), f32::from_bits(w.0));
            assert!(
                g.0 == w.0 || ga.is_nan() && wa.is_nan(),
                "{} reduce_add of packet {i}: {ga:e}, scalar {wa:e}",
                b.name()
            );
            let (gm, wm) = (f32::from_bits(g.1), f32::from_bits(w.1));
            assert!(
                g.1 == w.1 || gm.is_nan() && wm.is_nan(),
                "{} reduce_max of packet {i}: {gm:e}, scalar {wm:e}",
                b.name()
            );
        }
    }
    // And the tree itself, on one packet: ((0+8)+(4+12)) + ((2+10)+(6+14)) + … for W16.
    let v: Vec<f32> = vec![
        1e8, 1.0, -1e8, 1.0, 0.5, 0.25, 3.0, 7.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0,
    ];
    for b in test_backends() {
        let w = b.width();
        let mut t = v[..w].to_vec();
        let mut n = w;
        while n > 1 {
            n /= 2;
            for i in 0..n {
                t[i] += t[i + n];
            }
        }
        assert_eq!(
            dispatch(b, Reduce(&v[..w]))[0].0,
            t[0].to_bits(),
            "{}",
            b.name()
        );
    }
}

#[test]
fn mul_pow2_rounds_once_into_the_subnormal_range() {
    // a in [0.5, 2) and beyond, n down to the underflow: a·2ⁿ rounded once, as f64 says.
    let mut pairs = Vec::new();
    for a in [
        1.0f32,
        1.5,
        0.75,
        1.999_999_9,
        0.500_000_06,
        1.234_567_9,
        -1.7,
        0.999_999_94,
    ] {
        for n in -160..=130 {
            pairs.push((a, n as f32));
        }
        pairs.push((a, 252.0));
        pairs.push((a, -252.0));
        pairs.push((a, 1000.0)); // clamped to 252
        pairs.push((a, -1000.0)); // clamped to −252
    }
    for a in [3.0e10f32, -7.5e-20, 123.456] {
        for n in -252..=252 {
            pairs.push((a, n as f32));
        }
    }
    check2(
        Op::MulPow2,
        &pairs,
        |a, n| (a as f64 * 2f64.powi(n.clamp(-252.0, 252.0) as i32)) as f32,
        true,
    );
    check2(
        Op::MulPow2,
        &[(0.0, -5.0), (-0.0, 7.0), (f32::INFINITY, -3.0)],
        |a, n| a * 2f32.powi(n as i32),
        true,
    );
}

/// Known issue: on the two-multiplication implementations (scalar, SSE4.1, AVX2) a tiny or
/// subnormal `a` with a small negative `n` is rounded twice (a·2^⌊n/2⌋ lands in the
/// subnormal range, then is scaled again): mul_pow2(5·2⁻¹⁴⁹, −3) gives 0 instead of 2⁻¹⁴⁹.
/// AVX-512 (`scalef`) rounds once. No math function hits this (their `a` is near 1).
#[test]
#[ignore = "known bug in the scalar/SSE/AVX2 mul_pow2 for subnormal inputs; see the doc comment"]
fn mul_pow2_rounds_once_for_subnormal_inputs() {
    let mut pairs = Vec::new();
    for k in 1..64u32 {
        for n in -30..=0 {
            pairs.push((f32::from_bits(k * 37 + 5), n as f32));
            pairs.push((f32::from_bits(0x0080_0000 + k * 12_345), n as f32));
        }
    }
    check2(
        Op::MulPow2,
        &pairs,
        |a, n| (a as f64 * 2f64.powi(n as i32)) as f32,
        true,
    );
}

/// Fails on AVX-512 while `x86.rs` builds `copysign` with `_mm512_ternarylogic_epi32`
/// immediate 0xE4 (that is `c ? a : b`; the operands are (mask, sign, mag), so
/// `a ? b : c` = 0xCA is needed): today it returns garbage mantissa bits.
#[test]
fn sign_operations_on_zeros_and_nans() {
    let xs = specials();
    check1(
        Op::Abs,
        &xs,
        |x| f32::from_bits(x.to_bits() & 0x7fff_ffff),
        true,
    );
    check1(
        Op::Neg,
        &xs,
        |x| f32::from_bits(x.to_bits() ^ 0x8000_0000),
        true,
    );
    check1(
        Op::NegAbs,
        &xs,
        |x| f32::from_bits(x.to_bits() | 0x8000_0000),
        true,
    );
    let mut pairs = Vec::new();
    for &m in &xs {
        for &s in &xs {
            pairs.push((m, s));
        }
    }
    check2(
        Op::Copysign,
        &pairs,
        |m, s| f32::from_bits(m.to_bits() & 0x7fff_ffff | s.to_bits() & 0x8000_0000),
        true,
    );
}

#[test]
fn round_is_ties_to_even_and_floor_goes_down() {
    let mut xs = specials();
    xs.extend([
        0.5,
        1.5,
        2.5,
        3.5,
        -0.5,
        -1.5,
        -2.5,
        0.499_999_97,
        8_388_607.5,
        8_388_609.0,
        1e10,
        -1e-30,
        4_194_304.5,
        -4_194_304.5,
    ]);
    check1(Op::Round, &xs, f32::round_ties_even, true);
    check1(Op::Floor, &xs, f32::floor, true);
    check1(Op::Round, &[-0.5, -0.0, -0.25], |_| -0.0, true);
}

#[test]
fn min_max_follow_the_x86_rule() {
    let xs = specials();
    let mut pairs = Vec::new();
    for &a in &xs {
        for &b in &xs {
            pairs.push((a, b));
        }
    }
    check2(Op::Min, &pairs, |a, b| if a < b { a } else { b }, true);
    check2(Op::Max, &pairs, |a, b| if a > b { a } else { b }, true);
    // spelled out: a NaN first operand yields the second, ±0 ties yield the second
    check2(
        Op::Min,
        &[(f32::NAN, 1.0), (-0.0, 0.0), (0.0, -0.0)],
        |_, b| b,
        true,
    );
    check2(
        Op::Max,
        &[(f32::NAN, 1.0), (-0.0, 0.0), (0.0, -0.0)],
        |_, b| b,
        true,
    );
    check2(Op::Min, &[(1.0, f32::NAN)], |_, _| f32::NAN, false);
}

#[test]
fn comparisons_and_masks() {
    let xs = specials();
    let mut pairs = Vec::new();
    for &a in &xs {
        for &b in &xs {
            pairs.push((a, b));
        }
    }
    let f = |c: bool| if c { 1.0 } else { 0.0 };
    check2(Op::Lt, &pairs, |a, b| f(a < b), true);
    check2(Op::Le, &pairs, |a, b| f(a <= b), true);
    check2(Op::Eq, &pairs, |a, b| f(a == b), true);
    check2(Op::IsNan, &pairs, |a, _| f(a.is_nan()), true);
    check2(Op::LtOrNan, &pairs, |a, b| f(a < b || a.is_nan()), true);
}

#[test]
fn sqrt_div_and_fused_ops_round_once() {
    let xs = specials();
    check1(Op::Sqrt, &xs, f32::sqrt, false);
    let mut pairs = Vec::new();
    for &a in &xs {
        for &b in &xs {
            pairs.push((a, b));
        }
    }
    check2(Op::Div, &pairs, |a, b| a / b, false);
    // fma: 1 + 2⁻²⁴ squared has a 2⁻⁴⁸ term that only a fused operation keeps.
    let e = 1.0 + f32::EPSILON;
    let (a, b, c) = (vec![e, e, 3.0], vec![e, e, 0.1], vec![-1.0, -e, 0.7]);
    for bk in test_backends() {
        let got = lanewise3(bk, Op::Fma, &a, &b, &c);
        let got_n = lanewise3(bk, Op::Fnma, &a, &b, &c);
        for i in 0..3 {
            assert_eq!(
                got[i],
                a[i].mul_add(b[i], c[i]),
                "{} fma lane {i}",
                bk.name()
            );
            assert_eq!(
                got_n[i],
                (-a[i]).mul_add(b[i], c[i]),
                "{} fnma lane {i}",
                bk.name()
            );
        }
    }
}

#[test]
fn shl_exponent_shifts_bits_and_builds_powers_of_two() {
    let mut xs = specials();
    xs.extend([1.5, -3.25, 12_583_039.0, f32::from_bits(0x1234_5678)]);
    check1(
        Op::ShlExponent,
        &xs,
        |x| f32::from_bits(x.to_bits() << 23),
        true,
    );
    // fma(x, log2 e, 1.5·2²³ + 127) rounds to 1.5·2²³ + 127 + n; shifted, that is 2ⁿ.
    let ns: Vec<f32> = (-126..=127).map(|n| 12_583_039.0 + n as f32).collect();
    check1(
        Op::ShlExponent,
        &ns,
        |k| 2f32.powi((k - 12_583_039.0) as i32),
        true,
    );
}

struct Prefetches<'a>(&'a [f32]);

impl WithPacket for Prefetches<'_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        for i in [0, 1, self.0.len() - 1, self.0.len(), usize::MAX] {
            p.prefetch(self.0, i);
            p.prefetch_l2(self.0, i);
        }
        p.prefetch(&[], 0);
        p.prefetch(&[], 7);
        p.prefetch_l2(&[], 7);
    }
}

#[test]
fn prefetch_is_a_no_op_anywhere() {
    let v = vec![1.0f32; 100];
    for b in test_backends() {
        dispatch(b, Prefetches(&v));
    }
    assert!(v.iter().all(|&x| x == 1.0));
}

/// `lane_bits` of `a < 0` for the first packet of `a`.
struct NegativeLanes<'a>(&'a [f32]);

impl WithPacket for NegativeLanes<'_> {
    type Output = u32;
    #[inline(always)]
    fn run<P: Packet>(self, p: P) -> u32 {
        p.lane_bits(p.lt(p.load(self.0), p.zero()))
    }
}

#[test]
fn lane_bits_number_the_lanes_from_bit_zero() {
    for b in test_backends() {
        let w = b.width();
        for pattern in [
            0u32,
            1,
            0b1010,
            1 << (w - 1),
            (1u32 << w) - 1,
            0x8421 & ((1 << w) - 1),
        ] {
            let a: Vec<f32> = (0..w)
                .map(|i| if pattern >> i & 1 == 1 { -1.0 } else { 1.0 })
                .collect();
            assert_eq!(
                dispatch(b, NegativeLanes(&a)),
                pattern,
                "{} pattern {pattern:#b}",
                b.name()
            );
        }
    }
}

/// An exp of every lane of `x`, written to `y`, and the backend's name.
struct Exps<'a> {
    x: &'a [f32],
    y: &'a mut [f32],
}

impl WithPacket for Exps<'_> {
    type Output = &'static str;
    #[inline(always)]
    fn run<P: Packet>(self, p: P) -> &'static str {
        for (x, y) in self.x.chunks_exact(P::W).zip(self.y.chunks_exact_mut(P::W)) {
            p.store(y, super::math::exp(p, p.load(x)));
        }
        P::NAME
    }
}

/// Runs `Exps` through [`Packet::outline`] from inside the backend.
struct Outlined<'a>(Exps<'a>);

impl WithPacket for Outlined<'_> {
    type Output = &'static str;
    #[inline(always)]
    fn run<P: Packet>(self, p: P) -> &'static str {
        p.outline(self.0)
    }
}

#[test]
fn outline_runs_the_same_backend_with_the_same_bits() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) * 0.73).collect();
    for b in test_backends() {
        let (mut inline, mut outlined) = (vec![0.0; 64], vec![0.0; 64]);
        let name = dispatch(
            b,
            Exps {
                x: &x,
                y: &mut inline,
            },
        );
        let outlined_name = dispatch(
            b,
            Outlined(Exps {
                x: &x,
                y: &mut outlined,
            }),
        );
        assert_eq!((name, outlined_name), (b.name(), b.name()));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&inline), bits(&outlined), "{}", b.name());
    }
}
