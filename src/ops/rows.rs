//! The machinery shared by the six row operators: a kernel is written per row,
//! and one generic runner executes a work-group's rows with the chosen backend.

use crate::packet::{Backend, Packet, WithPacket, dispatch};
use crate::simt::RowSchedule;
use std::ops::Range;

/// A row operator's per-row computation, generic over the packet backend.
pub trait RowKernel: Sync {
    /// Computes output row `r` into `y` (one row of output) following `sched`.
    fn row<P: Packet>(&self, p: P, sched: &RowSchedule, r: usize, y: &mut [f32]);

    /// Computes output rows `rows` into `out` (`out_row_len` elements each). The
    /// default runs [`RowKernel::row`] row after row; a kernel may interleave
    /// rows, as long as each row's arithmetic stays that of `row`.
    #[inline(always)]
    fn rows<P: Packet>(
        &self,
        p: P,
        sched: &RowSchedule,
        rows: Range<usize>,
        out: &mut [f32],
        out_row_len: usize,
    ) {
        each_row(self, p, sched, rows, out, out_row_len);
    }
}

/// Runs [`RowKernel::row`] for each of `rows`, in order: the default of
/// [`RowKernel::rows`], for kernels that interleave rows only sometimes.
#[inline(always)]
pub fn each_row<K: RowKernel + ?Sized, P: Packet>(
    kernel: &K,
    p: P,
    sched: &RowSchedule,
    rows: Range<usize>,
    out: &mut [f32],
    out_row_len: usize,
) {
    for (y, r) in out.chunks_exact_mut(out_row_len).zip(rows) {
        kernel.row(p, sched, r, y);
    }
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
        // Streamed stores are published by the runner before it reports its
        // groups done (`packet::publish_streamed_stores`), not here after
        // every group.
        self.kernel
            .rows(p, &self.sched, self.rows, self.out, self.out_row_len);
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
    fold_with(acc, a, |x, y| p.add(x, y))
}

/// Folds packet maxima like [`fold`].
#[inline(always)]
pub fn fold_max<P: Packet>(p: P, acc: &mut [P::V; 8], a: usize) -> P::V {
    fold_with(acc, a, |x, y| p.max(x, y))
}

/// The pairwise fold of [`fold`] with operation `f`, unrolled for each `a`.
#[inline(always)]
fn fold_with<V: Copy>(acc: &[V; 8], a: usize, f: impl Fn(V, V) -> V) -> V {
    match a {
        1 => fold_n([acc[0]], f),
        2 => fold_n([acc[0], acc[1]], f),
        4 => fold_n([acc[0], acc[1], acc[2], acc[3]], f),
        _ => fold_n(*acc, f),
    }
}

/// Folds `A` (1, 2, 4 or 8) accumulators pairwise with `f`:
/// `acc[i] = f(acc[i], acc[i + n])` for `n` = A/2, A/4, …, 1, then `acc[0]`.
/// The order of [`fold`], for accumulators held in an array of length `A`.
#[inline(always)]
pub fn fold_n<V: Copy, const A: usize>(mut acc: [V; A], f: impl Fn(V, V) -> V) -> V {
    let mut n = A / 2;
    while n > 0 {
        for i in 0..n {
            acc[i] = f(acc[i], acc[i + n]);
        }
        n /= 2;
    }
    acc[0]
}
