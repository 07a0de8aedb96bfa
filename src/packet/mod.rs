//! The packet layer: f32 SIMD packets of W lanes, chosen at run time.
//!
//! Widths and their instruction sets:
//! - W16: AVX-512F ([`x86::Avx512`]),
//! - W8: AVX2 + FMA ([`x86::Avx2`]),
//! - W4: 128-bit SSE4.1 with FMA ([`x86::Sse41`]) — on CPUs without FMA and on other
//!   architectures W4 falls back to the scalar backend,
//! - any width: [`scalar::Scalar`], a portable fallback with the same lane semantics
//!   (fused multiply-add, x86 min/max, the same horizontal-reduction tree), used where the
//!   CPU has no SIMD backend and in tests as a second opinion.
//!
//! ## Why `std::arch` behind our own trait
//! Kernels are written once, generically over [`Packet`], and instantiated per ISA
//! inside a `#[target_feature]` entry point ([`dispatch`]). Every `Packet` method is
//! `#[inline(always)]`, so after monomorphization a kernel compiles to straight-line
//! AVX2 or AVX-512 code with no per-operation dispatch. We wrote the thin layer
//! ourselves rather than use a crate because the hot paths need exact control of
//! masked tails (AVX-512 mask registers, AVX2 `maskload`), of `scalef`-style
//! exponent scaling and of reduction order, and because the surface we need is small.
//!
//! ## Safety model
//! A backend value (e.g. [`x86::Avx2`]) can only be constructed after run-time feature
//! detection, so holding one proves the CPU has the features its methods use; all
//! methods are therefore safe. All `unsafe` of the numeric code lives in this module
//! tree, each block with a `// SAFETY:` line. [`Backend`] is the opaque, detected
//! choice that the rest of the crate passes around.

pub mod math;
pub mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use crate::error::{Error, Result};

/// The widest packet of any backend, in lanes.
pub const MAX_WIDTH: usize = 16;

/// An f32 SIMD packet type of `W` lanes with its operations.
///
/// Lane semantics are fixed for every backend: `fma` is fused (one rounding),
/// `min(a, b)` is `if a < b { a } else { b }` and `max(a, b)` is `if a > b { a } else { b }`
/// (the x86 rule, so a NaN in `a` yields `b`), horizontal reductions add (or max)
/// the upper half onto the lower half until one lane is left.
pub trait Packet: Copy + Send + Sync + 'static {
    /// The vector register type.
    type V: Copy;
    /// A per-lane boolean mask.
    type M: Copy;
    /// Lanes per packet.
    const W: usize;
    /// Short name of the backend, e.g. `avx2-w8`.
    const NAME: &'static str;

    /// All lanes `x`.
    fn splat(self, x: f32) -> Self::V;
    /// All lanes zero.
    #[inline(always)]
    fn zero(self) -> Self::V {
        self.splat(0.0)
    }
    /// Loads `W` lanes from the front of `s`. Panics if `s.len() < W`.
    fn load(self, s: &[f32]) -> Self::V;
    /// Stores `W` lanes to the front of `s`. Panics if `s.len() < W`.
    fn store(self, s: &mut [f32], v: Self::V);
    /// Loads the first `n` lanes from `s` (`n ≤ W`, `n ≤ s.len()`), the other lanes are `fill`.
    /// Never reads past `s[n - 1]`.
    fn load_partial(self, s: &[f32], n: usize, fill: f32) -> Self::V;
    /// Stores the first `n` lanes to `s` (`n ≤ W`, `n ≤ s.len()`); never writes past `s[n - 1]`.
    fn store_partial(self, s: &mut [f32], n: usize, v: Self::V);
    /// Stores `W` lanes with a non-temporal hint where the backend has one
    /// (for large outputs that will not be read again soon). Such stores are
    /// weakly ordered: whoever runs the kernel calls [`publish_streamed_stores`]
    /// before another thread may read them.
    #[inline(always)]
    fn store_stream(self, s: &mut [f32], v: Self::V) {
        self.store(s, v)
    }
    /// Hints that `s[i..]` will be read soon: fetches its cache line toward L1 where the
    /// backend can. Never faults: an `i` past the end (e.g. in an empty slice) is only
    /// a wasted hint.
    #[inline(always)]
    fn prefetch(self, s: &[f32], i: usize) {
        let _ = (s, i);
    }
    /// [`Packet::prefetch`] toward L2 only: for a next row that would push the
    /// current row's operands out of L1 (layernorm's x, w and b fill the 48 KiB
    /// L1 of a 4096-column row by themselves).
    #[inline(always)]
    fn prefetch_l2(self, s: &[f32], i: usize) {
        let _ = (s, i);
    }
    /// Stores `W` lanes of a kernel's final result: [`Packet::store_stream`] when
    /// `stream`, else [`Packet::store`].
    #[inline(always)]
    fn store_result(self, s: &mut [f32], v: Self::V, stream: bool) {
        if stream {
            self.store_stream(s, v)
        } else {
            self.store(s, v)
        }
    }
    /// Loads `s[i..i + W]`; one bounds check instead of a sub-slice and a load's
    /// check. Panics if that range is not inside `s`.
    #[inline(always)]
    fn load_at(self, s: &[f32], i: usize) -> Self::V {
        self.load(&s[i..])
    }
    /// Stores to `s[i..i + W]` like [`Packet::load_at`] loads.
    #[inline(always)]
    fn store_at(self, s: &mut [f32], i: usize, v: Self::V) {
        self.store(&mut s[i..], v)
    }
    /// [`Packet::store_result`] at `s[i..i + W]`.
    #[inline(always)]
    fn store_result_at(self, s: &mut [f32], i: usize, v: Self::V, stream: bool) {
        if stream {
            self.store_stream(&mut s[i..], v)
        } else {
            self.store_at(s, i, v)
        }
    }

    /// Rows of at least this many packets are worth reading through
    /// [`Packet::funnel`] rather than with loads that straddle cache lines, on
    /// this CPU; `usize::MAX` (the default, whose funnel goes through memory):
    /// never. Shorter rows lose more to the realigned loop's extra head and
    /// tail packets than they gain. See the `realign` module of `ops`.
    #[inline(always)]
    fn realign_min_packets(self) -> usize {
        usize::MAX
    }
    /// Lanes `s..s + W` of the `2W` lanes `lo` then `hi` (`s ≤ W`): the packet
    /// starting `s` lanes into `lo`. Two aligned loads and a funnel read a packet
    /// that straddles two cache lines without a split load. The default goes
    /// through memory; backends with a two-register permute override it.
    #[inline(always)]
    fn funnel(self, lo: Self::V, hi: Self::V, s: usize) -> Self::V {
        assert!(
            Self::W <= MAX_WIDTH && s <= Self::W,
            "funnel shift out of range"
        );
        let mut lanes = [0.0f32; 2 * MAX_WIDTH];
        self.store(&mut lanes, lo);
        self.store(&mut lanes[Self::W..], hi);
        self.load(&lanes[s..])
    }

    /// `a + b`.
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a − b`.
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a / b`.
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a · b + c`, fused (one rounding).
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `c − a · b`, fused (one rounding).
    fn fnma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `if a < b { a } else { b }` per lane.
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// `if a > b { a } else { b }` per lane.
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// Correctly rounded square root.
    fn sqrt(self, a: Self::V) -> Self::V;
    /// `|a|` (clears the sign bit, NaN stays NaN).
    fn abs(self, a: Self::V) -> Self::V;
    /// `−a` (flips the sign bit).
    fn neg(self, a: Self::V) -> Self::V;
    /// `−|a|` (sets the sign bit, NaN stays NaN).
    #[inline(always)]
    fn neg_abs(self, a: Self::V) -> Self::V {
        self.neg(self.abs(a))
    }
    /// The bits of `a` shifted left by 23 as an integer, the low bits zero: with
    /// `a = 1.5·2²³ + 127 + n` for an integral n in [−126, 127] (what a fused
    /// multiply-add onto that constant rounds to), the result is 2ⁿ.
    fn shl_exponent(self, a: Self::V) -> Self::V;
    /// The magnitude of `mag` with the sign bit of `sign`.
    fn copysign(self, mag: Self::V, sign: Self::V) -> Self::V;
    /// Rounds to the nearest integer, ties to even.
    fn round(self, a: Self::V) -> Self::V;
    /// Rounds toward −∞.
    fn floor(self, a: Self::V) -> Self::V;
    /// `a · 2ⁿ` for integral-valued `n`, with one rounding for `|n| ≤ 252`
    /// (results in the subnormal range are rounded once, not twice).
    /// `n` outside ±252 is clamped to ±252.
    fn mul_pow2(self, a: Self::V, n: Self::V) -> Self::V;

    /// Lanes where `a < b`.
    fn lt(self, a: Self::V, b: Self::V) -> Self::M;
    /// Lanes where `a ≤ b`.
    fn le(self, a: Self::V, b: Self::V) -> Self::M;
    /// Lanes where `a == b` (false for NaN).
    fn eq(self, a: Self::V, b: Self::V) -> Self::M;
    /// Lanes where `a` is NaN.
    fn is_nan(self, a: Self::V) -> Self::M;
    /// Lanes where `m` or `n` holds.
    fn or_mask(self, m: Self::M, n: Self::M) -> Self::M;
    /// `true` if any lane of `m` is set (lets a kernel skip a rare slow path).
    fn any(self, m: Self::M) -> bool;
    /// The lanes of `m` as bits: bit `i` is set when lane `i` is.
    fn lane_bits(self, m: Self::M) -> u32;
    /// Per lane `if m { a } else { b }`.
    fn select(self, m: Self::M, a: Self::V, b: Self::V) -> Self::V;

    /// Runs `k` with this backend in a function of its own, never inlined,
    /// compiled with the backend's target features; costs one call. Kernels are
    /// inlined whole into their entry point, and LLVM's loop passes take time
    /// quadratic in the size of one function: [`dispatch`] runs each scalar
    /// width through `outline`, and a kernel with many large variants can run
    /// each through it, so that no function holds them all. (One function that
    /// held every graph kernel at the three scalar widths took most of the
    /// library's hour-long release build.)
    fn outline<K: WithPacket>(self, k: K) -> K::Output;

    /// Sum of the lanes, upper half onto lower half until one lane is left.
    fn reduce_add(self, a: Self::V) -> f32;
    /// Maximum of the lanes, with the same tree as [`Packet::reduce_add`].
    fn reduce_max(self, a: Self::V) -> f32;
}

/// A computation generic over the packet type, run by [`dispatch`] with the
/// backend's target features enabled.
pub trait WithPacket {
    /// What the computation returns.
    type Output;
    /// Runs the computation with backend `p`. Implementations should be
    /// `#[inline(always)]` so that they are compiled with the backend's features.
    fn run<P: Packet>(self, p: P) -> Self::Output;
}

/// Which implementation a [`Backend`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Scalar4,
    Scalar8,
    Scalar16,
    #[cfg(target_arch = "x86_64")]
    Sse41,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A detected packet backend: a width and the instruction set that runs it.
///
/// Only constructible through detection ([`Backend::native`], [`Backend::best`]) or as
/// the portable [`Backend::scalar`], so a `Backend` always runs on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backend(Kind);

impl Backend {
    /// The native SIMD backend for `width` (4, 8 or 16) if this CPU has it.
    pub fn native(width: usize) -> Result<Backend> {
        if !matches!(width, 4 | 8 | 16) {
            return Err(Error::WidthUnsupported(width));
        }
        Self::all_native()
            .into_iter()
            .find(|b| b.width() == width)
            .ok_or_else(|| Error::WidthUnavailable {
                requested: width,
                available: Self::available_widths_text(),
            })
    }

    /// The widest native backend whose width is at most `max_width` (W4 scalar if none).
    pub fn best(max_width: usize) -> Backend {
        Self::all_native()
            .into_iter()
            .filter(|b| b.width() <= max_width)
            .max_by_key(|b| b.width())
            .unwrap_or(Backend(Kind::Scalar4))
    }

    /// The portable scalar backend of `width` lanes (4, 8 or 16).
    pub fn scalar(width: usize) -> Result<Backend> {
        match width {
            4 => Ok(Backend(Kind::Scalar4)),
            8 => Ok(Backend(Kind::Scalar8)),
            16 => Ok(Backend(Kind::Scalar16)),
            w => Err(Error::WidthUnsupported(w)),
        }
    }

    /// Every native SIMD backend this CPU can run, narrowest first.
    pub fn all_native() -> Vec<Backend> {
        #[allow(unused_mut)]
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if x86::Sse41::detect().is_some() {
                v.push(Backend(Kind::Sse41));
            }
            if x86::Avx2::detect().is_some() {
                v.push(Backend(Kind::Avx2));
            }
            if x86::Avx512::detect().is_some() {
                v.push(Backend(Kind::Avx512));
            }
        }
        v
    }

    /// Native widths of this CPU, e.g. `[4, 8, 16]`; `[4]` (scalar) where it has none.
    pub fn available_widths() -> Vec<usize> {
        let v: Vec<usize> = Self::all_native().iter().map(|b| b.width()).collect();
        if v.is_empty() { vec![4] } else { v }
    }

    fn available_widths_text() -> String {
        Self::available_widths()
            .iter()
            .map(|w| format!("W{w}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Lanes per packet.
    pub fn width(self) -> usize {
        match self.0 {
            Kind::Scalar4 => 4,
            Kind::Scalar8 => 8,
            Kind::Scalar16 => 16,
            #[cfg(target_arch = "x86_64")]
            Kind::Sse41 => 4,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => 8,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx512 => 16,
        }
    }

    /// The backend's name, e.g. `avx2-w8`: it identifies the compiled kernel variant.
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Scalar4 => scalar::Scalar::<4>::NAME,
            Kind::Scalar8 => scalar::Scalar::<8>::NAME,
            Kind::Scalar16 => scalar::Scalar::<16>::NAME,
            #[cfg(target_arch = "x86_64")]
            Kind::Sse41 => x86::Sse41::NAME,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => x86::Avx2::NAME,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx512 => x86::Avx512::NAME,
        }
    }

    /// `true` for the portable scalar backends.
    pub fn is_scalar(self) -> bool {
        matches!(self.0, Kind::Scalar4 | Kind::Scalar8 | Kind::Scalar16)
    }
}

/// Makes this thread's earlier [`Packet::store_stream`] stores visible before
/// its later stores (`sfence` on x86; elsewhere streamed stores are plain).
///
/// The runners call it once per helper visit and once per caller run, before
/// completion is published, not after every work-group: a fence waits for the
/// write-combining buffers to drain, and one per 4-row group cost rmsnorm
/// 1024x4096 about 5% (W8, one worker), one per row 14%.
#[inline]
pub fn publish_streamed_stores() {
    #[cfg(target_arch = "x86_64")]
    x86::sfence();
}

/// Runs `k` with backend `b`, compiled with that backend's target features.
#[inline]
pub fn dispatch<K: WithPacket>(b: Backend, k: K) -> K::Output {
    match b.0 {
        // Each width in a function of its own (see `Packet::outline`).
        Kind::Scalar4 => scalar::Scalar::<4>::new().outline(k),
        Kind::Scalar8 => scalar::Scalar::<8>::new().outline(k),
        Kind::Scalar16 => scalar::Scalar::<16>::new().outline(k),
        #[cfg(target_arch = "x86_64")]
        Kind::Sse41 => x86::run_sse41(k),
        #[cfg(target_arch = "x86_64")]
        Kind::Avx2 => x86::run_avx2(k),
        #[cfg(target_arch = "x86_64")]
        Kind::Avx512 => x86::run_avx512(k),
    }
}

/// Every backend the tests should cover on this CPU: each native one and the
/// scalar fallback at every width.
pub fn test_backends() -> Vec<Backend> {
    let mut v = Backend::all_native();
    for w in [4, 8, 16] {
        v.push(Backend::scalar(w).expect("scalar widths are 4, 8, 16"));
    }
    v
}
