//! The machinery shared by the six row operators: a kernel is written per row,
//! and one generic runner executes a work-group's rows with the chosen backend.

use crate::packet::{Backend, Packet, WithPacket, dispatch};
use crate::simt::RowSchedule;
use std::ops::Range;

/// A row operator's per-row computation, generic over the packet backend.
pub trait RowKernel: Sync {
    /// Computes output row `r` into `y` (one row of output) following `sched`.
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]);
}

struct GroupRun<'k, 'o, K: RowKernel> {
    kernel: &'k K,
    sched: RowSchedule,
    rows: Range<usize>,
    out: &'o mut [f32],
    out_row_len: usize,
}

impl<K: RowKernel> WithPacket for GroupRun<'_, '_, K> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let len = self.out_row_len;
        for (y, r) in self.out.chunks_exact_mut(len).zip(self.rows) {
            self.kernel.row(p, &self.sched, r, y);
        }
    }
}

/// Runs rows `rows` of kernel `k` with `backend`, writing `out` (exactly those rows,
/// `out_row_len` elements each).
#[inline]
pub fn run_group<K: RowKernel>(
    kernel: &K,
    backend: Backend,
    sched: RowSchedule,
    rows: Range<usize>,
    out: &mut [f32],
    out_row_len: usize,
) {
    debug_assert_eq!(out.len(), rows.len() * out_row_len);
    dispatch(
        backend,
        GroupRun {
            kernel,
            sched,
            rows,
            out,
            out_row_len,
        },
    );
}

/// Folds the first `a` (1, 2, 4 or 8) packet accumulators pairwise into one:
/// `acc[i] += acc[i + a/2]` until one is left.
#[inline(always)]
pub fn fold<P: Packet>(p: P, acc: &mut [P::V; 8], a: usize) -> P::V {
    let mut n = a;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            acc[i] = p.add(acc[i], acc[i + n]);
        }
    }
    acc[0]
}

/// Folds packet maxima like [`fold`].
#[inline(always)]
pub fn fold_max<P: Packet>(p: P, acc: &mut [P::V; 8], a: usize) -> P::V {
    let mut n = a;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            acc[i] = p.max(acc[i], acc[i + n]);
        }
    }
    acc[0]
}
