//! The portable scalar backend: `W` lanes as an array, with the exact lane
//! semantics of the SIMD backends (fused multiply-add, x86 min/max, the same
//! reduction tree). It runs wherever Rust runs and serves tests as a second opinion.

use super::{Packet, WithPacket};

/// Scalar packets of `W` lanes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar<const W: usize>(());

impl<const W: usize> Scalar<W> {
    /// The scalar backend (always available).
    pub fn new() -> Self {
        Scalar(())
    }
}

#[inline(always)]
fn map<const W: usize>(a: [f32; W], f: impl Fn(f32) -> f32) -> [f32; W] {
    a.map(f)
}

#[inline(always)]
fn zip<const W: usize>(a: [f32; W], b: [f32; W], f: impl Fn(f32, f32) -> f32) -> [f32; W] {
    std::array::from_fn(|i| f(a[i], b[i]))
}

#[inline(always)]
fn tree<const W: usize>(a: [f32; W], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut v = a;
    let mut n = W;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] = f(v[i], v[i + n]);
        }
    }
    v[0]
}

/// [`Packet::outline`] of the scalar backend.
#[inline(never)]
fn outlined<K: WithPacket, const W: usize>(k: K, p: Scalar<W>) -> K::Output {
    k.run(p)
}

fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

impl<const W: usize> Packet for Scalar<W> {
    type V = [f32; W];
    type M = [bool; W];
    const W: usize = W;
    const NAME: &'static str = match W {
        4 => "scalar-w4",
        8 => "scalar-w8",
        16 => "scalar-w16",
        _ => "scalar",
    };

    #[inline(always)]
    fn splat(self, x: f32) -> Self::V {
        [x; W]
    }
    #[inline(always)]
    fn load(self, s: &[f32]) -> Self::V {
        s[..W].try_into().expect("slice of W lanes")
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], v: Self::V) {
        s[..W].copy_from_slice(&v)
    }
    #[inline(always)]
    fn load_partial(self, s: &[f32], n: usize, fill: f32) -> Self::V {
        let mut v = [fill; W];
        v[..n].copy_from_slice(&s[..n]);
        v
    }
    #[inline(always)]
    fn store_partial(self, s: &mut [f32], n: usize, v: Self::V) {
        s[..n].copy_from_slice(&v[..n])
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x * y)
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x / y)
    }
    #[inline(always)]
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        std::array::from_fn(|i| a[i].mul_add(b[i], c[i]))
    }
    #[inline(always)]
    fn fnma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        std::array::from_fn(|i| (-a[i]).mul_add(b[i], c[i]))
    }
    #[inline(always)]
    fn min(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| if x < y { x } else { y })
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| if x > y { x } else { y })
    }
    #[inline(always)]
    fn sqrt(self, a: Self::V) -> Self::V {
        map(a, f32::sqrt)
    }
    #[inline(always)]
    fn abs(self, a: Self::V) -> Self::V {
        map(a, f32::abs)
    }
    #[inline(always)]
    fn neg(self, a: Self::V) -> Self::V {
        map(a, |x| -x)
    }
    #[inline(always)]
    fn neg_abs(self, a: Self::V) -> Self::V {
        map(a, |x| f32::from_bits(x.to_bits() | 0x8000_0000))
    }
    #[inline(always)]
    fn shl_exponent(self, a: Self::V) -> Self::V {
        map(a, |x| f32::from_bits(x.to_bits() << 23))
    }
    #[inline(always)]
    fn copysign(self, mag: Self::V, sign: Self::V) -> Self::V {
        zip(mag, sign, f32::copysign)
    }
    #[inline(always)]
    fn round(self, a: Self::V) -> Self::V {
        map(a, f32::round_ties_even)
    }
    #[inline(always)]
    fn floor(self, a: Self::V) -> Self::V {
        map(a, f32::floor)
    }
    #[inline(always)]
    fn mul_pow2(self, a: Self::V, n: Self::V) -> Self::V {
        zip(a, n, |x, k| {
            let k = k.clamp(-252.0, 252.0) as i32;
            let k1 = k >> 1;
            x * pow2i(k1) * pow2i(k - k1)
        })
    }
    #[inline(always)]
    fn lt(self, a: Self::V, b: Self::V) -> Self::M {
        std::array::from_fn(|i| a[i] < b[i])
    }
    #[inline(always)]
    fn le(self, a: Self::V, b: Self::V) -> Self::M {
        std::array::from_fn(|i| a[i] <= b[i])
    }
    #[inline(always)]
    fn eq(self, a: Self::V, b: Self::V) -> Self::M {
        std::array::from_fn(|i| a[i] == b[i])
    }
    #[inline(always)]
    fn is_nan(self, a: Self::V) -> Self::M {
        a.map(f32::is_nan)
    }
    #[inline(always)]
    fn or_mask(self, m: Self::M, n: Self::M) -> Self::M {
        std::array::from_fn(|i| m[i] | n[i])
    }
    #[inline(always)]
    fn any(self, m: Self::M) -> bool {
        m.iter().any(|&b| b)
    }
    #[inline(always)]
    fn lane_bits(self, m: Self::M) -> u32 {
        m.iter()
            .enumerate()
            .fold(0, |bits, (i, &b)| bits | (u32::from(b) << i))
    }
    #[inline(always)]
    fn select(self, m: Self::M, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|i| if m[i] { a[i] } else { b[i] })
    }
    #[inline(always)]
    fn outline<K: WithPacket>(self, k: K) -> K::Output {
        outlined(k, self)
    }
    #[inline(always)]
    fn reduce_add(self, a: Self::V) -> f32 {
        tree(a, |x, y| x + y)
    }
    #[inline(always)]
    fn reduce_max(self, a: Self::V) -> f32 {
        tree(a, |x, y| if x > y { x } else { y })
    }
}
