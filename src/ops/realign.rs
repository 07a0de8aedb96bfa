//! Misaligned streams read and written with aligned packets.
//!
//! A row whose start is not on a cache line makes every W16 packet (64 bytes,
//! one line) and every other W8 packet straddle two lines. A kernel that only
//! streams memory pays for it: rope 257x1538 (its second half starts 769 lanes
//! in) ran 1.4× slower per element at W16 than the aligned 256x1536. A
//! [`Funnel`] reader loads the lines themselves and assembles each packet with
//! [`Packet::funnel`]; a writer assembles line-aligned packets from consecutive
//! results and stores those. Kernels use them on rows of at least
//! [`Packet::realign_min_packets`]; the values are those of plain loads and
//! stores, only the memory accesses differ.
//!
//! Whether that pays depends on the CPU as much as on the width. At W16 the
//! funnel is one two-register permute, and realigning won on both machines
//! measured. At W8 AVX2's funnel is two permutes and a blend (five funnels per
//! rope packet pair, all on the shuffle port): on the Intel Xeon it still won
//! from 64 packets per row, but on an AMD EPYC (Zen 4), where a load straddling
//! two lines costs little, it lost everywhere: rope 257x1538 W8 on one worker
//! took 73.1 µs realigned against 60.3 µs with plain loads (medians of 8
//! alternating runs; funnelling only the misaligned output, 64.6), 17x1026 4.6
//! against 3.4 µs, and 1024x4098, where memory sets the pace, 2205 against
//! 1971 µs. So AVX2 realigns except on Zen cores (AMD, Hygon).

use crate::packet::Packet;

/// Lane offset of `s[i]` within its packet-aligned block of `W` lanes (the
/// cache line at W16).
#[inline(always)]
pub(crate) fn lane_offset<P: Packet>(s: &[f32], i: usize) -> usize {
    (s.as_ptr() as usize / size_of::<f32>() + i) % P::W
}

/// A stream shifted by a constant number of lanes: each packet fed in comes
/// out as lanes `shift..shift + W` of the previous packet followed by it.
pub(crate) struct Funnel<P: Packet> {
    prev: P::V,
    shift: usize,
}

impl<P: Packet> Funnel<P> {
    /// Reads `s[i..i + nW]` as `n` packets with aligned loads: the funnel,
    /// primed with the aligned packet holding `s[i]`, and the `nW` lanes of
    /// the `n` aligned packets after it, to load and feed one by one. Needs
    /// `lane_offset(s, i) ≤ i` (true for `i ≥ W`) and the aligned packet after
    /// the last one read inside `s`.
    #[inline(always)]
    pub(crate) fn reader(p: P, s: &[f32], i: usize, n: usize) -> (Self, &[f32]) {
        let shift = lane_offset::<P>(s, i);
        let start = i - shift;
        let prev = p.load_at(s, start);
        let lines = &s[start + P::W..start + (n + 1) * P::W];
        (Funnel { prev, shift }, lines)
    }

    /// Writes `n` packets for `s[i..i + nW]` with aligned stores, `t =
    /// lane_offset(s, i)` lanes behind: the funnel, primed with `prev` (the
    /// values of `s[i − W..i]`, `i ≥ W`), and the `nW` lanes `s[i − t..i − t +
    /// nW]` where its outputs go, packet by packet. `s[i + nW − t..i + nW]`
    /// is left for the caller.
    #[inline(always)]
    pub(crate) fn writer(s: &mut [f32], i: usize, n: usize, prev: P::V) -> (Self, &mut [f32]) {
        let t = lane_offset::<P>(s, i);
        let shift = P::W - t;
        (Funnel { prev, shift }, &mut s[i - t..i - t + n * P::W])
    }

    /// The next packet of the shifted stream.
    #[inline(always)]
    pub(crate) fn feed(&mut self, p: P, next: P::V) -> P::V {
        let v = p.funnel(self.prev, next, self.shift);
        self.prev = next;
        v
    }
}
