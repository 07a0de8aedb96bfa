//! x86-64 backends: SSE4.1+FMA (W4), AVX2+FMA (W8) and AVX-512F (W16).
//!
//! Each backend is a zero-sized token that [`Sse41::detect`], [`Avx2::detect`] or
//! [`Avx512::detect`] hands out only when the CPU reports the features, so every
//! intrinsic call below runs on a CPU that has it.

use super::{Packet, WithPacket};
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether the CPU has AMD's Zen cores: its vendor (CPUID leaf 0, read once)
/// is AMD or Hygon.
fn is_zen() -> bool {
    static ZEN: OnceLock<bool> = OnceLock::new();
    *ZEN.get_or_init(|| {
        let id = __cpuid(0);
        let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
        vendor == b"AuthenticAMD" || vendor == b"HygonGenuine"
    })
}

/// Lane masks for partial AVX2/SSE loads: `MASKS[8 - n..][..8]` has `n` leading −1s.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// W4: 128-bit SSE4.1 with FMA.
#[derive(Clone, Copy, Debug)]
pub struct Sse41(());
/// W8: 256-bit AVX2 with FMA.
#[derive(Clone, Copy, Debug)]
pub struct Avx2(());
/// W16: 512-bit AVX-512F.
#[derive(Clone, Copy, Debug)]
pub struct Avx512(());

impl Sse41 {
    /// The backend if this CPU has SSE4.1 and FMA.
    pub fn detect() -> Option<Self> {
        (is_x86_feature_detected!("sse4.1") && is_x86_feature_detected!("fma")).then_some(Sse41(()))
    }
}
impl Avx2 {
    /// The backend if this CPU has AVX2 and FMA.
    pub fn detect() -> Option<Self> {
        (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")).then_some(Avx2(()))
    }
}
impl Avx512 {
    /// The backend if this CPU has AVX-512F (and AVX2/FMA, which every AVX-512F CPU has).
    pub fn detect() -> Option<Self> {
        (is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma"))
        .then_some(Avx512(()))
    }
}

#[inline(never)]
#[target_feature(enable = "sse4.1,fma")]
fn sse41_entry<K: WithPacket>(k: K, p: Sse41) -> K::Output {
    k.run(p)
}
#[inline(never)]
#[target_feature(enable = "avx2,fma")]
fn avx2_entry<K: WithPacket>(k: K, p: Avx2) -> K::Output {
    k.run(p)
}
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma")]
fn avx512_entry<K: WithPacket>(k: K, p: Avx512) -> K::Output {
    k.run(p)
}

/// Runs `k` with the SSE4.1 backend. Only called for a detected [`super::Backend`].
#[inline]
pub(super) fn run_sse41<K: WithPacket>(k: K) -> K::Output {
    Sse41::detect()
        .expect("Backend holds a detected SSE4.1 CPU")
        .outline(k)
}
/// Runs `k` with the AVX2 backend. Only called for a detected [`super::Backend`].
#[inline]
pub(super) fn run_avx2<K: WithPacket>(k: K) -> K::Output {
    Avx2::detect()
        .expect("Backend holds a detected AVX2 CPU")
        .outline(k)
}
/// Runs `k` with the AVX-512 backend. Only called for a detected [`super::Backend`].
#[inline]
pub(super) fn run_avx512<K: WithPacket>(k: K) -> K::Output {
    Avx512::detect()
        .expect("Backend holds a detected AVX-512 CPU")
        .outline(k)
}

/// Orders this thread's earlier non-temporal stores before its later stores.
#[inline]
pub(crate) fn sfence() {
    // SAFETY: SSE is baseline on x86_64.
    unsafe { _mm_sfence() }
}

/// Hints the cache line of `s[i]` toward the cache level of `HINT`
/// (`_MM_HINT_T0`: L1, `_MM_HINT_T1`: L2), without a bounds check: a prefetch
/// never faults, and a hint past `s` (the last row's empty "next row") is only a
/// wasted hint. Kernels call this once per packet, so the check was a compare
/// and a branch, and a register for the length, in their hottest loops.
#[inline(always)]
fn prefetch_hint<const HINT: i32>(s: &[f32], i: usize) {
    // SAFETY: the pointer is formed with wrapping arithmetic and never
    // dereferenced; a prefetch is a hint that never faults, whatever the
    // address. SSE is baseline on x86_64.
    unsafe { _mm_prefetch::<HINT>(s.as_ptr().wrapping_add(i).cast::<i8>()) }
}

macro_rules! feature_ops {
    // Wraps the body in an unsafe block whose safety rests on the token.
    ($body:expr) => {
        // SAFETY: the backend token proves the CPU has this intrinsic's features.
        unsafe { $body }
    };
}

impl Packet for Sse41 {
    type V = __m128;
    type M = __m128;
    const W: usize = 4;
    const NAME: &'static str = "sse41-w4";

    #[inline(always)]
    fn splat(self, x: f32) -> __m128 {
        feature_ops!(_mm_set1_ps(x))
    }
    #[inline(always)]
    fn load(self, s: &[f32]) -> __m128 {
        let s = &s[..4];
        // SAFETY: `s` holds 4 f32s; unaligned load; features by token.
        unsafe { _mm_loadu_ps(s.as_ptr()) }
    }
    #[inline(always)]
    fn load_at(self, s: &[f32], i: usize) -> __m128 {
        assert!(s.len() >= 4 && i <= s.len() - 4, "load_at out of bounds");
        // SAFETY: `s[i..i + 4]` is in bounds (checked above); unaligned load.
        unsafe { _mm_loadu_ps(s.as_ptr().add(i)) }
    }
    #[inline(always)]
    fn store_at(self, s: &mut [f32], i: usize, v: __m128) {
        assert!(s.len() >= 4 && i <= s.len() - 4, "store_at out of bounds");
        // SAFETY: `s[i..i + 4]` is in bounds (checked above); unaligned store.
        unsafe { _mm_storeu_ps(s.as_mut_ptr().add(i), v) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], v: __m128) {
        let s = &mut s[..4];
        // SAFETY: `s` holds 4 f32s; unaligned store; features by token.
        unsafe { _mm_storeu_ps(s.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn store_stream(self, s: &mut [f32], v: __m128) {
        let s = &mut s[..4];
        let ptr = s.as_mut_ptr();
        if (ptr as usize).is_multiple_of(16) {
            // SAFETY: `s` holds 4 f32s at a 16-byte aligned address.
            unsafe { _mm_stream_ps(ptr, v) }
        } else {
            // SAFETY: as in `store`.
            unsafe { _mm_storeu_ps(ptr, v) }
        }
    }
    #[inline(always)]
    fn prefetch(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T0>(s, i)
    }
    #[inline(always)]
    fn prefetch_l2(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T1>(s, i)
    }
    #[inline(always)]
    fn load_partial(self, s: &[f32], n: usize, fill: f32) -> __m128 {
        let mut buf = [fill; 4];
        buf[..n].copy_from_slice(&s[..n]);
        self.load(&buf)
    }
    #[inline(always)]
    fn store_partial(self, s: &mut [f32], n: usize, v: __m128) {
        let mut buf = [0.0; 4];
        self.store(&mut buf, v);
        s[..n].copy_from_slice(&buf[..n]);
    }
    #[inline(always)]
    fn add(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m128, b: __m128, c: __m128) -> __m128 {
        feature_ops!(_mm_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn fnma(self, a: __m128, b: __m128, c: __m128) -> __m128 {
        feature_ops!(_mm_fnmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn min(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_min_ps(a, b))
    }
    #[inline(always)]
    fn max(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_max_ps(a, b))
    }
    #[inline(always)]
    fn sqrt(self, a: __m128) -> __m128 {
        feature_ops!(_mm_sqrt_ps(a))
    }
    #[inline(always)]
    fn abs(self, a: __m128) -> __m128 {
        feature_ops!(_mm_andnot_ps(_mm_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn neg(self, a: __m128) -> __m128 {
        feature_ops!(_mm_xor_ps(_mm_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn neg_abs(self, a: __m128) -> __m128 {
        feature_ops!(_mm_or_ps(_mm_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn shl_exponent(self, a: __m128) -> __m128 {
        feature_ops!(_mm_castsi128_ps(_mm_slli_epi32::<23>(_mm_castps_si128(a))))
    }
    #[inline(always)]
    fn copysign(self, mag: __m128, sign: __m128) -> __m128 {
        feature_ops!({
            let m = _mm_set1_ps(-0.0);
            _mm_or_ps(_mm_andnot_ps(m, mag), _mm_and_ps(m, sign))
        })
    }
    #[inline(always)]
    fn round(self, a: __m128) -> __m128 {
        feature_ops!(_mm_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn floor(self, a: __m128) -> __m128 {
        feature_ops!(_mm_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(a))
    }
    #[inline(always)]
    fn mul_pow2(self, a: __m128, n: __m128) -> __m128 {
        feature_ops!({
            let n = _mm_min_ps(_mm_max_ps(n, _mm_set1_ps(-252.0)), _mm_set1_ps(252.0));
            let k = _mm_cvtps_epi32(n);
            let k1 = _mm_srai_epi32::<1>(k);
            let k2 = _mm_sub_epi32(k, k1);
            let bias = _mm_set1_epi32(127);
            let s1 = _mm_castsi128_ps(_mm_slli_epi32::<23>(_mm_add_epi32(k1, bias)));
            let s2 = _mm_castsi128_ps(_mm_slli_epi32::<23>(_mm_add_epi32(k2, bias)));
            _mm_mul_ps(_mm_mul_ps(a, s1), s2)
        })
    }
    #[inline(always)]
    fn lt(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_cmplt_ps(a, b))
    }
    #[inline(always)]
    fn le(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_cmple_ps(a, b))
    }
    #[inline(always)]
    fn eq(self, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_cmpeq_ps(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: __m128) -> __m128 {
        feature_ops!(_mm_cmpunord_ps(a, a))
    }
    #[inline(always)]
    fn or_mask(self, m: __m128, n: __m128) -> __m128 {
        feature_ops!(_mm_or_ps(m, n))
    }
    #[inline(always)]
    fn any(self, m: __m128) -> bool {
        feature_ops!(_mm_movemask_ps(m) != 0)
    }
    #[inline(always)]
    fn lane_bits(self, m: __m128) -> u32 {
        feature_ops!(_mm_movemask_ps(m) as u32)
    }
    #[inline(always)]
    fn select(self, m: __m128, a: __m128, b: __m128) -> __m128 {
        feature_ops!(_mm_blendv_ps(b, a, m))
    }
    #[inline(always)]
    fn outline<K: WithPacket>(self, k: K) -> K::Output {
        // SAFETY: `self` exists, so the CPU has SSE4.1 and FMA.
        unsafe { sse41_entry(k, self) }
    }
    #[inline(always)]
    fn reduce_add(self, a: __m128) -> f32 {
        feature_ops!({
            let s = _mm_add_ps(a, _mm_movehl_ps(a, a));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
    #[inline(always)]
    fn reduce_max(self, a: __m128) -> f32 {
        feature_ops!({
            let s = _mm_max_ps(a, _mm_movehl_ps(a, a));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
}

impl Packet for Avx2 {
    type V = __m256;
    type M = __m256;
    const W: usize = 8;
    const NAME: &'static str = "avx2-w8";
    /// The funnel is two permutes and a blend. On the Intel Xeon measured it
    /// paid on rows of 64 packets (rope, 17 rows of half 513: 5.3 → 4.8 µs), not
    /// of 16 (129: 1.3 → 1.5 µs). On Zen cores never: there a load straddling
    /// two lines costs little (Zen 4 EPYC: rope 257x1538 73.1 µs realigned
    /// against 60.3 µs with plain loads).
    #[inline(always)]
    fn realign_min_packets(self) -> usize {
        if is_zen() { usize::MAX } else { 64 }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        feature_ops!(_mm256_set1_ps(x))
    }
    #[inline(always)]
    fn load(self, s: &[f32]) -> __m256 {
        let s = &s[..8];
        // SAFETY: `s` holds 8 f32s; unaligned load; features by token.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }
    #[inline(always)]
    fn load_at(self, s: &[f32], i: usize) -> __m256 {
        assert!(s.len() >= 8 && i <= s.len() - 8, "load_at out of bounds");
        // SAFETY: `s[i..i + 8]` is in bounds (checked above); unaligned load.
        unsafe { _mm256_loadu_ps(s.as_ptr().add(i)) }
    }
    #[inline(always)]
    fn store_at(self, s: &mut [f32], i: usize, v: __m256) {
        assert!(s.len() >= 8 && i <= s.len() - 8, "store_at out of bounds");
        // SAFETY: `s[i..i + 8]` is in bounds (checked above); unaligned store.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr().add(i), v) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], v: __m256) {
        let s = &mut s[..8];
        // SAFETY: `s` holds 8 f32s; unaligned store; features by token.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn store_stream(self, s: &mut [f32], v: __m256) {
        let s = &mut s[..8];
        let ptr = s.as_mut_ptr();
        let addr = ptr as usize;
        // Non-temporal stores need natural alignment; a 16-byte aligned row (what
        // malloc guarantees) streams as two halves, which fill the same write-
        // combining line as one full store would.
        if addr.is_multiple_of(32) {
            // SAFETY: `s` holds 8 f32s at a 32-byte aligned address; AVX by token.
            unsafe { _mm256_stream_ps(ptr, v) }
        } else if addr.is_multiple_of(16) {
            // SAFETY: both halves lie inside `s` at 16-byte aligned addresses.
            unsafe {
                _mm_stream_ps(ptr, _mm256_castps256_ps128(v));
                _mm_stream_ps(ptr.add(4), _mm256_extractf128_ps::<1>(v));
            }
        } else {
            // SAFETY: as in `store`.
            unsafe { _mm256_storeu_ps(ptr, v) }
        }
    }
    #[inline(always)]
    fn funnel(self, lo: __m256, hi: __m256, s: usize) -> __m256 {
        assert!(s <= 8, "funnel shift out of range");
        // Lane i takes lane (i + s) mod 8 of lo, or of hi where i + s ≥ 8.
        let at = feature_ops!(_mm256_add_epi32(
            _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
            _mm256_set1_epi32(s as i32),
        ));
        let from_hi = feature_ops!(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
            at,
            _mm256_set1_epi32(7)
        )));
        feature_ops!(_mm256_blendv_ps(
            _mm256_permutevar8x32_ps(lo, at),
            _mm256_permutevar8x32_ps(hi, at),
            from_hi
        ))
    }
    #[inline(always)]
    fn prefetch(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T0>(s, i)
    }
    #[inline(always)]
    fn prefetch_l2(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T1>(s, i)
    }
    #[inline(always)]
    fn load_partial(self, s: &[f32], n: usize, fill: f32) -> __m256 {
        let s = &s[..n];
        // SAFETY: the mask enables exactly the first n ≤ 8 lanes, all inside `s`;
        // masked-off lanes are not read. `MASKS[8 - n..]` has 8 elements.
        unsafe {
            let m = _mm256_loadu_si256(MASKS[8 - n..].as_ptr().cast());
            let v = _mm256_maskload_ps(s.as_ptr(), m);
            _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m))
        }
    }
    #[inline(always)]
    fn store_partial(self, s: &mut [f32], n: usize, v: __m256) {
        let s = &mut s[..n];
        // SAFETY: the mask enables exactly the first n ≤ 8 lanes, all inside `s`;
        // masked-off lanes are not written.
        unsafe {
            let m = _mm256_loadu_si256(MASKS[8 - n..].as_ptr().cast());
            _mm256_maskstore_ps(s.as_mut_ptr(), m, v)
        }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        feature_ops!(_mm256_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn fnma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        feature_ops!(_mm256_fnmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_min_ps(a, b))
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_max_ps(a, b))
    }
    #[inline(always)]
    fn sqrt(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_sqrt_ps(a))
    }
    #[inline(always)]
    fn abs(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_andnot_ps(_mm256_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn neg(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_xor_ps(_mm256_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn neg_abs(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_or_ps(_mm256_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn shl_exponent(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(
            _mm256_castps_si256(a)
        )))
    }
    #[inline(always)]
    fn copysign(self, mag: __m256, sign: __m256) -> __m256 {
        feature_ops!({
            let m = _mm256_set1_ps(-0.0);
            _mm256_or_ps(_mm256_andnot_ps(m, mag), _mm256_and_ps(m, sign))
        })
    }
    #[inline(always)]
    fn round(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn floor(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn mul_pow2(self, a: __m256, n: __m256) -> __m256 {
        feature_ops!({
            let n = _mm256_min_ps(
                _mm256_max_ps(n, _mm256_set1_ps(-252.0)),
                _mm256_set1_ps(252.0),
            );
            let k = _mm256_cvtps_epi32(n);
            let k1 = _mm256_srai_epi32::<1>(k);
            let k2 = _mm256_sub_epi32(k, k1);
            let bias = _mm256_set1_epi32(127);
            let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k1, bias)));
            let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k2, bias)));
            _mm256_mul_ps(_mm256_mul_ps(a, s1), s2)
        })
    }
    #[inline(always)]
    fn lt(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    fn le(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_cmp_ps::<_CMP_LE_OQ>(a, b))
    }
    #[inline(always)]
    fn eq(self, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: __m256) -> __m256 {
        feature_ops!(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, a))
    }
    #[inline(always)]
    fn or_mask(self, m: __m256, n: __m256) -> __m256 {
        feature_ops!(_mm256_or_ps(m, n))
    }
    #[inline(always)]
    fn any(self, m: __m256) -> bool {
        feature_ops!(_mm256_movemask_ps(m) != 0)
    }
    #[inline(always)]
    fn lane_bits(self, m: __m256) -> u32 {
        feature_ops!(_mm256_movemask_ps(m) as u32)
    }
    #[inline(always)]
    fn select(self, m: __m256, a: __m256, b: __m256) -> __m256 {
        feature_ops!(_mm256_blendv_ps(b, a, m))
    }
    #[inline(always)]
    fn outline<K: WithPacket>(self, k: K) -> K::Output {
        // SAFETY: `self` exists, so the CPU has AVX2 and FMA.
        unsafe { avx2_entry(k, self) }
    }
    #[inline(always)]
    fn reduce_add(self, a: __m256) -> f32 {
        feature_ops!({
            let h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let s = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
    #[inline(always)]
    fn reduce_max(self, a: __m256) -> f32 {
        feature_ops!({
            let h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let s = _mm_max_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
}

#[inline(always)]
fn lane_mask16(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

impl Packet for Avx512 {
    type V = __m512;
    type M = __mmask16;
    const W: usize = 16;
    const NAME: &'static str = "avx512-w16";
    /// One permute per funnel: rope rows of half 129 already gain
    /// (17 rows: 1.5 → 1.3 µs), of half 65 not (0.5 → 0.6 µs); on the AMD
    /// EPYC too (257x1538: 58.2 µs realigned, 69.0 µs with plain loads).
    #[inline(always)]
    fn realign_min_packets(self) -> usize {
        8
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        feature_ops!(_mm512_set1_ps(x))
    }
    #[inline(always)]
    fn load(self, s: &[f32]) -> __m512 {
        let s = &s[..16];
        // SAFETY: `s` holds 16 f32s; unaligned load; features by token.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    }
    #[inline(always)]
    fn load_at(self, s: &[f32], i: usize) -> __m512 {
        assert!(s.len() >= 16 && i <= s.len() - 16, "load_at out of bounds");
        // SAFETY: `s[i..i + 16]` is in bounds (checked above); unaligned load.
        unsafe { _mm512_loadu_ps(s.as_ptr().add(i)) }
    }
    #[inline(always)]
    fn store_at(self, s: &mut [f32], i: usize, v: __m512) {
        assert!(s.len() >= 16 && i <= s.len() - 16, "store_at out of bounds");
        // SAFETY: `s[i..i + 16]` is in bounds (checked above); unaligned store.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr().add(i), v) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], v: __m512) {
        let s = &mut s[..16];
        // SAFETY: `s` holds 16 f32s; unaligned store; features by token.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn store_stream(self, s: &mut [f32], v: __m512) {
        let s = &mut s[..16];
        let ptr = s.as_mut_ptr();
        let addr = ptr as usize;
        // See `Avx2::store_stream`: stream in naturally aligned pieces.
        if addr.is_multiple_of(64) {
            // SAFETY: `s` holds 16 f32s at a 64-byte aligned address; AVX-512F by token.
            unsafe { _mm512_stream_ps(ptr, v) }
        } else if addr.is_multiple_of(16) {
            // SAFETY: the four quarters lie inside `s` at 16-byte aligned addresses.
            unsafe {
                _mm_stream_ps(ptr, _mm512_extractf32x4_ps::<0>(v));
                _mm_stream_ps(ptr.add(4), _mm512_extractf32x4_ps::<1>(v));
                _mm_stream_ps(ptr.add(8), _mm512_extractf32x4_ps::<2>(v));
                _mm_stream_ps(ptr.add(12), _mm512_extractf32x4_ps::<3>(v));
            }
        } else {
            // SAFETY: as in `store`.
            unsafe { _mm512_storeu_ps(ptr, v) }
        }
    }
    #[inline(always)]
    fn funnel(self, lo: __m512, hi: __m512, s: usize) -> __m512 {
        assert!(s <= 16, "funnel shift out of range");
        // Lane i takes lane s + i of lo ++ hi (indices 16..31 select hi).
        let index = feature_ops!(_mm512_add_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32(s as i32),
        ));
        feature_ops!(_mm512_permutex2var_ps(lo, index, hi))
    }
    #[inline(always)]
    fn prefetch(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T0>(s, i)
    }
    #[inline(always)]
    fn prefetch_l2(self, s: &[f32], i: usize) {
        prefetch_hint::<_MM_HINT_T1>(s, i)
    }
    #[inline(always)]
    fn load_partial(self, s: &[f32], n: usize, fill: f32) -> __m512 {
        let s = &s[..n];
        // SAFETY: the mask enables exactly the first n ≤ 16 lanes, all inside `s`;
        // masked-off lanes are neither read nor fault.
        unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(fill), lane_mask16(n), s.as_ptr()) }
    }
    #[inline(always)]
    fn store_partial(self, s: &mut [f32], n: usize, v: __m512) {
        let s = &mut s[..n];
        // SAFETY: the mask enables exactly the first n ≤ 16 lanes, all inside `s`;
        // masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_ps(s.as_mut_ptr(), lane_mask16(n), v) }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        feature_ops!(_mm512_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn fnma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        feature_ops!(_mm512_fnmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_min_ps(a, b))
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_max_ps(a, b))
    }
    #[inline(always)]
    fn sqrt(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_sqrt_ps(a))
    }
    #[inline(always)]
    fn abs(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_abs_ps(a))
    }
    #[inline(always)]
    fn neg(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(a),
            _mm512_set1_epi32(i32::MIN)
        )))
    }
    #[inline(always)]
    fn neg_abs(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(a),
            _mm512_set1_epi32(i32::MIN)
        )))
    }
    #[inline(always)]
    fn shl_exponent(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(
            _mm512_castps_si512(a)
        )))
    }
    #[inline(always)]
    fn copysign(self, mag: __m512, sign: __m512) -> __m512 {
        // ternary logic 0xCA = a ? b : c per bit: the sign bit from `sign`, the rest from `mag`.
        feature_ops!(_mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xCA>(
            _mm512_set1_epi32(i32::MIN),
            _mm512_castps_si512(sign),
            _mm512_castps_si512(mag)
        )))
    }
    #[inline(always)]
    fn round(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn floor(self, a: __m512) -> __m512 {
        feature_ops!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn mul_pow2(self, a: __m512, n: __m512) -> __m512 {
        feature_ops!({
            let n = _mm512_min_ps(
                _mm512_max_ps(n, _mm512_set1_ps(-252.0)),
                _mm512_set1_ps(252.0),
            );
            _mm512_scalef_ps(a, n)
        })
    }
    #[inline(always)]
    fn lt(self, a: __m512, b: __m512) -> __mmask16 {
        feature_ops!(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    fn le(self, a: __m512, b: __m512) -> __mmask16 {
        feature_ops!(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b))
    }
    #[inline(always)]
    fn eq(self, a: __m512, b: __m512) -> __mmask16 {
        feature_ops!(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b))
    }
    #[inline(always)]
    fn is_nan(self, a: __m512) -> __mmask16 {
        feature_ops!(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a))
    }
    #[inline(always)]
    fn or_mask(self, m: __mmask16, n: __mmask16) -> __mmask16 {
        m | n
    }
    #[inline(always)]
    fn any(self, m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn lane_bits(self, m: __mmask16) -> u32 {
        u32::from(m)
    }
    #[inline(always)]
    fn select(self, m: __mmask16, a: __m512, b: __m512) -> __m512 {
        feature_ops!(_mm512_mask_blend_ps(m, b, a))
    }
    #[inline(always)]
    fn outline<K: WithPacket>(self, k: K) -> K::Output {
        // SAFETY: `self` exists, so the CPU has AVX-512F, AVX2 and FMA.
        unsafe { avx512_entry(k, self) }
    }
    #[inline(always)]
    fn reduce_add(self, a: __m512) -> f32 {
        feature_ops!({
            let lo = _mm512_castps512_ps256(a);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
            let q = _mm256_add_ps(lo, hi);
            let h = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps::<1>(q));
            let s = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
    #[inline(always)]
    fn reduce_max(self, a: __m512) -> f32 {
        feature_ops!({
            let lo = _mm512_castps512_ps256(a);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
            let q = _mm256_max_ps(lo, hi);
            let h = _mm_max_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps::<1>(q));
            let s = _mm_max_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
}
