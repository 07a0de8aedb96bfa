//! The SIMT kernel model: launch geometry, how a launch's output is tiled into
//! work-groups, and the caller path that runs every group in a loop.
//!
//! A launch is a grid of work-groups. For row operators a group owns `block`
//! consecutive rows and has `local` work-items that stride across the columns
//! of each row: step `k` covers columns `[k·local, (k+1)·local)`, executed as
//! `ceil(local / W)` packets. [`RowSteps`] enumerates exactly those packets,
//! with how many lanes of each are live, so every row kernel follows the same
//! SIMT schedule and full-packet specialization is decided in one place.
//!
//! The output tensor of a launch is cut into disjoint, consecutive spans, one
//! per group ([`Tiling`]). A kernel is a function `(group, &mut span)`; because
//! spans are disjoint, a launch's result cannot depend on which worker ran a
//! group or in which order — the property the pool's determinism rests on.

use crate::error::{Error, Result};
use std::ops::Range;

/// Whether packets whose lanes are all in bounds run the unmasked code variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PacketMode {
    /// Full packets unmasked, only tail packets masked (the default).
    FullPacket,
    /// Every packet runs the masked variant, to measure what specialization gains.
    AllMasked,
}

impl PacketMode {
    /// `true` for [`PacketMode::FullPacket`].
    pub fn full_packet(self) -> bool {
        self == PacketMode::FullPacket
    }

    /// The mode for an on/off switch.
    pub fn from_switch(full_packet: bool) -> Self {
        if full_packet {
            PacketMode::FullPacket
        } else {
            PacketMode::AllMasked
        }
    }
}

/// How the output of a launch is cut into work-groups.
///
/// The output is `segments` segments of `seg_rows` rows of `row_len` elements;
/// each segment is split into blocks of `block` rows (the last one may be
/// shorter), and each block is one work-group. Row operators use one segment;
/// attention uses one segment per (batch, query head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    segments: usize,
    seg_rows: usize,
    row_len: usize,
    block: usize,
    blocks_per_segment: usize,
}

impl Tiling {
    /// `rows` rows of `row_len` elements in groups of `block` rows.
    #[inline]
    pub fn rows(rows: usize, row_len: usize, block: usize) -> Result<Self> {
        Self::segmented(1, rows, row_len, block)
    }

    /// `segments` × `seg_rows` rows of `row_len` elements; groups never span two segments.
    #[inline]
    pub fn segmented(
        segments: usize,
        seg_rows: usize,
        row_len: usize,
        block: usize,
    ) -> Result<Self> {
        if block == 0 {
            return Err(Error::BadGeometry("block must be at least 1".into()));
        }
        if segments == 0 || seg_rows == 0 || row_len == 0 {
            return Err(Error::BadGeometry(
                "a launch needs at least one group".into(),
            ));
        }
        segments
            .checked_mul(seg_rows)
            .and_then(|r| r.checked_mul(row_len))
            .filter(|&n| n <= isize::MAX as usize / 4)
            .ok_or_else(|| Error::BadDimension("launch output is too large".into()))?;
        let blocks_per_segment = seg_rows.div_ceil(block);
        Ok(Tiling {
            segments,
            seg_rows,
            row_len,
            block,
            blocks_per_segment,
        })
    }

    /// Number of work-groups in the grid.
    pub fn groups(&self) -> usize {
        self.segments * self.blocks_per_segment
    }

    /// Elements of one row of output.
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// Total elements of output.
    pub fn len(&self) -> usize {
        self.segments * self.seg_rows * self.row_len
    }

    /// `true` if the output holds no element (never, for a valid tiling).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segment a group belongs to, and its rows within that segment.
    pub fn group_rows(&self, group: usize) -> (usize, Range<usize>) {
        let segment = group / self.blocks_per_segment;
        let b = group % self.blocks_per_segment;
        let start = b * self.block;
        let end = (start + self.block).min(self.seg_rows);
        (segment, start..end)
    }

    /// The global rows (counting across segments) that a group owns.
    pub fn global_rows(&self, group: usize) -> Range<usize> {
        let (segment, rows) = self.group_rows(group);
        let base = segment * self.seg_rows;
        base + rows.start..base + rows.end
    }

    /// The element range of the output that a group writes.
    pub fn span(&self, group: usize) -> Range<usize> {
        let rows = self.global_rows(group);
        rows.start * self.row_len..rows.end * self.row_len
    }
}

/// The signature every kernel launch runs: fill the output span of one group.
/// Streamed stores in it are left for the runner to publish before it reports
/// the group done ([`crate::packet::publish_streamed_stores`]).
pub type GroupFn<'a> = dyn Fn(usize, &mut [f32]) + Sync + 'a;

/// Run groups `range` of a launch on the calling thread, in order, then
/// publish their streamed stores ([`crate::packet::publish_streamed_stores`]).
///
/// `out` must be the launch's whole output (`tiling.len()` elements).
pub fn run_groups(tiling: &Tiling, range: Range<usize>, out: &mut [f32], kernel: &GroupFn<'_>) {
    assert_eq!(out.len(), tiling.len(), "output does not match the tiling");
    if range.is_empty() {
        return;
    }
    let first = tiling.span(range.start).start;
    let mut rest = &mut out[first..];
    for g in range {
        let span = tiling.span(g);
        let (head, tail) = rest.split_at_mut(span.len());
        kernel(g, head);
        rest = tail;
    }
    crate::packet::publish_streamed_stores();
}

/// One packet of a row's SIMT schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketSlot {
    /// First column of the packet.
    pub col: usize,
    /// Live lanes (1..=W).
    pub lanes: usize,
    /// Index of this packet within its step, `0..ceil(local/W)`.
    pub slot: usize,
    /// Whether this packet runs the unmasked variant.
    pub full: bool,
}

/// The packets that a group of `local` work-items executes across one row of
/// `cols` columns, in SIMT order: step by step, packet by packet.
///
/// Within a step, packet `j` covers work-items `[j·W, min((j+1)·W, local))`;
/// lanes beyond the row's end are masked off. A packet runs unmasked only if
/// all `W` lanes are live and the mode is [`PacketMode::FullPacket`].
#[derive(Clone, Debug)]
pub struct RowSteps {
    cols: usize,
    local: usize,
    width: usize,
    full_packet: bool,
    step_base: usize,
    slot: usize,
    slots_per_step: usize,
}

impl RowSteps {
    /// The schedule for one row.
    #[inline]
    pub fn new(cols: usize, local: usize, width: usize, mode: PacketMode) -> Self {
        RowSteps {
            cols,
            local,
            width,
            full_packet: mode.full_packet(),
            step_base: 0,
            slot: 0,
            slots_per_step: local.div_ceil(width),
        }
    }

    /// Packets per step, `ceil(local / W)`.
    pub fn slots_per_step(&self) -> usize {
        self.slots_per_step
    }
}

impl Iterator for RowSteps {
    type Item = PacketSlot;

    #[inline]
    fn next(&mut self) -> Option<PacketSlot> {
        loop {
            if self.step_base >= self.cols {
                return None;
            }
            let item = self.slot * self.width;
            let col = self.step_base + item;
            let slot = self.slot;
            self.slot += 1;
            if self.slot == self.slots_per_step {
                self.slot = 0;
                self.step_base += self.local;
            }
            if col >= self.cols {
                continue;
            }
            let lanes = self.width.min(self.local - item).min(self.cols - col);
            return Some(PacketSlot {
                col,
                lanes,
                slot,
                full: self.full_packet && lanes == self.width,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_spans_are_consecutive_and_cover_the_output() {
        let t = Tiling::segmented(3, 10, 4, 4).unwrap();
        assert_eq!(t.groups(), 9);
        let mut next = 0;
        for g in 0..t.groups() {
            let s = t.span(g);
            assert_eq!(s.start, next);
            next = s.end;
        }
        assert_eq!(next, t.len());
        assert_eq!(t.group_rows(5), (1, 8..10));
    }

    #[test]
    fn zero_sized_tilings_are_errors() {
        assert!(Tiling::rows(0, 4, 1).is_err());
        assert!(Tiling::rows(4, 0, 1).is_err());
        assert!(Tiling::rows(4, 4, 0).is_err());
    }

    #[test]
    fn row_steps_follow_the_simt_schedule() {
        // local 12 on W8 over 30 columns: steps at 0, 12, 24; packets of 8 then 4 lanes.
        let p: Vec<_> = RowSteps::new(30, 12, 8, PacketMode::FullPacket)
            .map(|s| (s.col, s.lanes, s.full))
            .collect();
        assert_eq!(
            p,
            vec![
                (0, 8, true),
                (8, 4, false),
                (12, 8, true),
                (20, 4, false),
                (24, 6, false)
            ]
        );
        let masked = RowSteps::new(16, 8, 8, PacketMode::AllMasked).all(|s| !s.full);
        assert!(masked);
        let covered: usize = RowSteps::new(1538, 256, 16, PacketMode::FullPacket)
            .map(|s| s.lanes)
            .sum();
        assert_eq!(covered, 1538);
    }
}

/// What a row kernel does with each packet of the SIMT schedule.
///
/// `acc` is the index of the packet accumulator that the packet's work-items
/// reduce into (see [`RowSchedule::accumulators`]); element-wise kernels ignore it.
pub trait PacketVisitor {
    /// The packet width the visitor runs (`P::W` of its backend), known at
    /// compile time so that packet offsets are constants in the hot loops.
    const W: usize;
    /// A packet with all `W` lanes live, run unmasked.
    fn full(&mut self, col: usize, acc: usize);
    /// A packet with `lanes` live lanes (`1..=W`), run masked.
    fn masked(&mut self, col: usize, lanes: usize, acc: usize);
    /// `true` for a visitor whose packets are pure element-wise functions from
    /// inputs to a separate output. In full-packet mode the schedule then runs a
    /// row's partial last packet (row of at least `W` columns) as the full packet
    /// that ends at the row's end: its overlap recomputes bit-identical values,
    /// and it avoids a masked store, which is slow on some CPUs. Reductions and
    /// in-place passes keep the default, the masked packet.
    const OVERLAPPING_TAIL: bool = false;
    /// `true` for a visitor whose packet body is long (vector math: erf, exp,
    /// sigmoid) and that ignores the accumulator index: the schedule then runs
    /// one packet per loop iteration. Unrolled eight times, such a body's
    /// constants no longer fit in the 16 registers of AVX2 and are reloaded for
    /// every packet (gelu_residual on inputs with no lane in gelu's tail, in L2:
    /// 9.0 ns per packet unrolled, 5.5 ns one per iteration).
    const ONE_PER_ITERATION: bool = false;
}

/// The SIMT schedule of one row, fixed for a whole launch.
///
/// Reductions are deterministic for a given `(cols, local, W)`: each packet slot
/// `s` of a step (work-items `[sW, (s+1)W)`) reduces into accumulator `s mod A`,
/// where `A` is the largest power of two ≤ 8 that divides the slots per step (or 8
/// when a row is a single step, so every slot holds one packet); the group then
/// folds the `A` accumulators pairwise and reduces the lanes with the packet tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSchedule {
    cols: usize,
    local: usize,
    width: usize,
    full_packet: bool,
    accumulators: usize,
    /// `local` is a multiple of `width`: steps tile a row without gaps.
    contiguous: bool,
    stream: bool,
    /// Streamed element-wise passes walk rows last packet first.
    descending: bool,
}

impl RowSchedule {
    /// The schedule for rows of `cols` columns run by `local` work-items in packets of `width`.
    pub fn new(cols: usize, local: usize, width: usize, mode: PacketMode) -> Self {
        let slots = local.div_ceil(width);
        let accumulators = if local >= cols {
            8
        } else {
            1usize << slots.trailing_zeros().min(3)
        };
        RowSchedule {
            cols,
            local,
            width,
            full_packet: mode.full_packet(),
            accumulators,
            contiguous: local.is_multiple_of(width),
            stream: false,
            descending: false,
        }
    }

    /// The same schedule, with the kernel's final results stored past the caches
    /// (non-temporal stores) when `stream`: for outputs too large to be read
    /// again from cache, this saves the read-for-ownership of every line.
    pub fn with_stream(self, stream: bool) -> Self {
        RowSchedule { stream, ..self }
    }

    /// The same schedule, with element-wise visitors of a streamed full-packet
    /// row walking it last packet first when `descending` (see
    /// `RowSchedule::descending` for when that pays).
    pub fn with_descending(self, descending: bool) -> Self {
        RowSchedule { descending, ..self }
    }

    /// Whether final results are stored with non-temporal stores.
    pub fn streams(&self) -> bool {
        self.stream
    }

    /// Number of packet accumulators `A` (1, 2, 4 or 8) a row reduction uses.
    pub fn accumulators(&self) -> usize {
        self.accumulators
    }

    /// Columns per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Whether the row is contiguous full packets (`local` a multiple of `W`,
    /// full-packet specialization on) with at most one partial packet at its
    /// end. An element-wise kernel, whose output does not depend on how its
    /// lanes are grouped into packets, may then place its full packets freely,
    /// e.g. on cache-line boundaries.
    pub fn is_full_contiguous(&self) -> bool {
        self.contiguous && self.full_packet
    }

    /// The packets of one row in SIMT order, as an iterator.
    #[inline]
    pub fn steps(&self) -> RowSteps {
        RowSteps::new(
            self.cols,
            self.local,
            self.width,
            PacketMode::from_switch(self.full_packet),
        )
    }

    /// Visits every packet of one row in SIMT order.
    #[inline(always)]
    pub fn visit<V: PacketVisitor>(&self, v: &mut V) {
        match self.accumulators {
            1 => self.visit_with::<V, 1>(v),
            2 => self.visit_with::<V, 2>(v),
            4 => self.visit_with::<V, 4>(v),
            _ => self.visit_with::<V, 8>(v),
        }
    }

    /// [`RowSchedule::visit`] with the accumulator count `A` known at compile
    /// time: `A` must be [`RowSchedule::accumulators`]. A kernel that runs many
    /// small rows dispatches on `A` once per group instead of once per pass, and
    /// indexes its accumulators only with constants, so they stay in registers.
    #[inline(always)]
    pub fn visit_with<V: PacketVisitor, const A: usize>(&self, v: &mut V) {
        debug_assert_eq!(A, self.accumulators, "visit_with needs the schedule's A");
        if self.contiguous {
            // Steps tile the row without gaps: packets are contiguous and
            // packet q reduces into accumulator q mod A (A divides the slots per step).
            self.visit_contiguous::<V, A>(v)
        } else {
            for s in RowSteps::new(
                self.cols,
                self.local,
                self.width,
                PacketMode::from_switch(self.full_packet),
            ) {
                // A constant index per arm, as in the contiguous tail.
                let slot = s.slot % A;
                for j in 0..A {
                    if j == slot {
                        if s.full {
                            v.full(s.col, j);
                        } else {
                            v.masked(s.col, s.lanes, j);
                        }
                    }
                }
            }
        }
    }

    /// Full packet `q` of a contiguous row (masked with all lanes live unless
    /// `FULL`), reducing into accumulator `acc`. A method rather than a
    /// closure: closures do not inherit the caller's target features, and an
    /// uninlined one runs the packet code without them.
    #[inline(always)]
    fn packet<V: PacketVisitor, const FULL: bool>(&self, v: &mut V, q: usize, acc: usize) {
        if FULL {
            v.full(q * V::W, acc)
        } else {
            v.masked(q * V::W, V::W, acc)
        }
    }

    /// The partial last packet of a contiguous row, reducing into `acc`.
    #[inline(always)]
    fn tail_packet<V: PacketVisitor>(&self, v: &mut V, acc: usize) {
        let (w, packets) = (V::W, self.cols / V::W);
        if V::OVERLAPPING_TAIL && self.full_packet && packets > 0 {
            v.full(self.cols - w, acc);
        } else {
            v.masked(packets * w, self.cols % w, acc);
        }
    }

    /// Visits a row whose steps tile it without gaps: packet `q` reduces into
    /// accumulator `q mod A`.
    ///
    /// For reductions every accumulator index is a compile-time constant, so
    /// that the `A` accumulators stay in registers: packets run in blocks of 8
    /// (A divides 8, so packet `q + j` of a block starting at a multiple of 8
    /// reduces into `j mod A`), then the last < 8 packets and the tail
    /// unrolled, each at its own constant index.
    #[inline(always)]
    fn visit_contiguous<V: PacketVisitor, const A: usize>(&self, v: &mut V) {
        debug_assert_eq!(V::W, self.width, "visitor and schedule widths differ");
        let packets = self.cols / V::W;
        let tail = self.cols % V::W;
        let mut q = 0;
        if V::ONE_PER_ITERATION || V::OVERLAPPING_TAIL {
            // Element-wise visitors (the accumulator is only passed along):
            // loops, unrolled eight times unless the body is long.
            if self.full_packet && self.stream && self.descending && packets > 0 {
                return self.descending::<V, A>(v);
            }
            if self.full_packet {
                while !V::ONE_PER_ITERATION && q + 8 <= packets {
                    for j in 0..8 {
                        v.full((q + j) * V::W, j % A);
                    }
                    q += 8;
                }
                while q < packets {
                    v.full(q * V::W, q % A);
                    q += 1;
                }
            } else {
                while q < packets {
                    v.masked(q * V::W, V::W, q % A);
                    q += 1;
                }
            }
            if tail > 0 {
                self.tail_packet(v, packets % A);
            }
            return;
        }
        // The packet mode is a compile-time constant here (branches between
        // the unrolled packets would cost the accumulators their registers).
        if self.full_packet {
            self.reduce::<V, A, true>(v)
        } else {
            self.reduce::<V, A, false>(v)
        }
    }

    /// The element-wise path of [`RowSchedule::visit_contiguous`] for a streamed
    /// row: the same packets, last to first (the overlapping tail packet first).
    ///
    /// A load waits for an older pending store whose address matches it in the
    /// low 12 bits ("4K aliasing"), and a streamed store stays pending long.
    /// When the output starts `d` bytes (mod 4 KiB) after an input, an
    /// ascending walk loads the input bytes that alias the store it issued `d`
    /// bytes earlier, and a descending walk those of the store `4096 − d` bytes
    /// earlier: rmsnorm and layernorm descend when `d` < 2 KiB (see
    /// `ops::walks_down`). `malloc` places consecutive large buffers a few
    /// cache lines apart, where an ascending walk stalls on every packet.
    #[inline(always)]
    fn descending<V: PacketVisitor, const A: usize>(&self, v: &mut V) {
        let packets = self.cols / V::W;
        if !self.cols.is_multiple_of(V::W) {
            self.tail_packet(v, packets % A);
        }
        let mut q = packets;
        while !V::ONE_PER_ITERATION && q >= 8 {
            q -= 8;
            for j in (0..8).rev() {
                v.full((q + j) * V::W, j % A);
            }
        }
        while q > 0 {
            q -= 1;
            v.full(q * V::W, q % A);
        }
    }

    /// The reduction path of [`RowSchedule::visit_contiguous`] in one packet mode.
    #[inline(always)]
    fn reduce<V: PacketVisitor, const A: usize, const FULL: bool>(&self, v: &mut V) {
        let packets = self.cols / V::W;
        let mut q = 0;
        while q + 8 <= packets {
            for j in 0..8 {
                self.packet::<V, FULL>(v, q + j, j % A);
            }
            q += 8;
        }
        // q is a multiple of 8: packet q + j reduces into j mod A, and so does
        // the tail packet (number `packets`) at j = packets − q.
        let rest = packets - q;
        let tail = self.cols % V::W;
        for j in 0..8 {
            if j < rest {
                self.packet::<V, FULL>(v, q + j, j % A);
            } else if j == rest && tail > 0 {
                self.tail_packet(v, j % A);
            }
        }
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    struct Record(Vec<(usize, usize, bool, usize)>);
    impl PacketVisitor for Record {
        const W: usize = 8;
        fn full(&mut self, col: usize, acc: usize) {
            self.0.push((col, 8, true, acc));
        }
        fn masked(&mut self, col: usize, lanes: usize, acc: usize) {
            self.0.push((col, lanes, false, acc));
        }
    }

    #[test]
    fn contiguous_and_generic_paths_agree_with_the_step_iterator() {
        for cols in [1, 7, 8, 9, 31, 64, 65, 130] {
            for local in [1, 3, 8, 12, 16, 24, 32, 64, 136] {
                for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
                    let sched = RowSchedule::new(cols, local, 8, mode);
                    let mut r = Record(Vec::new());
                    sched.visit(&mut r);
                    let a = sched.accumulators();
                    let want: Vec<_> = RowSteps::new(cols, local, 8, mode)
                        .map(|s| (s.col, s.lanes, s.full, s.slot % a))
                        .collect();
                    let got: Vec<_> = r.0.iter().map(|&(c, l, f, acc)| (c, l, f, acc)).collect();
                    // Full packets report 8 lanes.
                    assert_eq!(got, want, "cols {cols} local {local} {mode:?}");
                }
            }
        }
    }

    struct Elementwise(Vec<(usize, bool)>);
    impl PacketVisitor for Elementwise {
        const W: usize = 8;
        const OVERLAPPING_TAIL: bool = true;
        fn full(&mut self, col: usize, _acc: usize) {
            self.0.push((col, true));
        }
        fn masked(&mut self, col: usize, _lanes: usize, _acc: usize) {
            self.0.push((col, false));
        }
    }

    #[test]
    fn streamed_elementwise_rows_visit_the_same_packets_last_first() {
        for cols in [1, 7, 8, 9, 63, 64, 65, 130, 1024] {
            for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
                let sched = RowSchedule::new(cols, 64, 8, mode);
                let (mut cached, mut streamed) = (Elementwise(Vec::new()), Elementwise(Vec::new()));
                sched.visit(&mut cached);
                sched
                    .with_stream(true)
                    .with_descending(true)
                    .visit(&mut streamed);
                let descends = mode.full_packet() && cols >= 8;
                let mut want = cached.0.clone();
                if descends {
                    want.reverse();
                }
                assert_eq!(streamed.0, want, "cols {cols} {mode:?}");
                if descends {
                    assert!(
                        streamed.0.windows(2).all(|w| w[0].0 > w[1].0),
                        "cols {cols}"
                    );
                }
            }
        }
    }
}
