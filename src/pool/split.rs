//! How a grain cuts a launch's work-groups into tasks, and how a task hands
//! each of its groups the group's own span of the output.

use super::grain::Grain;
use crate::simt::{GroupFn, Tiling};
use std::marker::PhantomData;
use std::ops::Range;

/// A partition of `0..groups` into `tasks` runs of consecutive groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// `tasks` chunks whose sizes differ by at most one (the legacy split).
    Even { groups: usize, tasks: usize },
    /// Runs of `k` groups; the last may be shorter.
    Runs { groups: usize, k: usize },
}

impl Split {
    /// The split of `groups` groups for a pooled grain with `workers` granted.
    /// `Grain::Caller` is one run of everything.
    pub(crate) fn new(grain: Grain, groups: usize, workers: usize) -> Self {
        match grain {
            Grain::Legacy => Split::Even {
                groups,
                tasks: workers.clamp(1, groups.max(1)),
            },
            Grain::Tasks(k) => Split::Runs { groups, k: k.get() },
            Grain::Caller => Split::Runs {
                groups,
                k: groups.max(1),
            },
        }
    }

    /// Number of tasks.
    pub(crate) fn tasks(&self) -> usize {
        match *self {
            Split::Even { tasks, .. } => tasks,
            Split::Runs { groups, k } => groups.div_ceil(k),
        }
    }

    /// The groups of task `t` (`t < tasks()`).
    #[inline]
    pub(crate) fn groups(&self, t: usize) -> Range<usize> {
        match *self {
            Split::Even { groups, tasks } => {
                let (base, extra) = (groups / tasks, groups % tasks);
                let start = t * base + t.min(extra);
                start..start + base + usize::from(t < extra)
            }
            Split::Runs { groups, k } => {
                let start = t * k;
                start..groups.min(start.saturating_add(k))
            }
        }
    }
}

/// The output of a launch, shared by the threads that run its tasks.
///
/// Holds the exclusive borrow of `out` for the lifetime `'a`; hands out the
/// span of one group at a time through [`SharedOut::run_group`].
pub(crate) struct SharedOut<'a> {
    base: *mut f32,
    len: usize,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: `SharedOut` is only a pointer to an `&'a mut [f32]` (which is Send and
// Sync); concurrent access through it is limited to disjoint group spans, see
// `run_group`.
unsafe impl Sync for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    /// Take the exclusive borrow of a launch's output.
    pub(crate) fn new(out: &'a mut [f32]) -> Self {
        SharedOut {
            base: out.as_mut_ptr(),
            len: out.len(),
            _out: PhantomData,
        }
    }

    /// Run `kernel` for group `g` on exactly `out[tiling.span(g)]`.
    ///
    /// # Safety
    /// Across all threads, each group `g` of `tiling` may be passed to this
    /// function at most once while `self` lives, and `tiling.len()` must equal
    /// the output's length.
    #[inline]
    pub(crate) unsafe fn run_group(&self, tiling: &Tiling, g: usize, kernel: &GroupFn<'_>) {
        let span = tiling.span(g);
        debug_assert!(span.start <= span.end && span.end <= self.len);
        // SAFETY: `span` lies inside the output (a tiling's spans cover exactly
        // `0..tiling.len()` = `0..self.len`), spans of distinct groups are
        // disjoint (`Tiling`'s contract), and the caller guarantees this group
        // is handed out once, so no other `&mut` to these elements exists; the
        // borrow of `out` is held for `'a`, which outlives every task because a
        // launch returns only after all its tasks finished.
        let span_out =
            unsafe { std::slice::from_raw_parts_mut(self.base.add(span.start), span.len()) };
        kernel(g, span_out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_partition(s: Split, groups: usize) {
        let mut next = 0;
        for t in 0..s.tasks() {
            let r = s.groups(t);
            assert_eq!(r.start, next, "{s:?} task {t}");
            assert!(!r.is_empty(), "{s:?} task {t} is empty");
            next = r.end;
        }
        assert_eq!(next, groups, "{s:?}");
    }

    #[test]
    fn splits_partition_the_groups() {
        for groups in [1, 2, 3, 7, 8, 64, 100] {
            for workers in [1, 2, 3, 8, 200] {
                let s = Split::new(Grain::Legacy, groups, workers);
                assert_eq!(s.tasks(), workers.min(groups));
                check_partition(s, groups);
            }
            for k in [1, 2, 3, 5, 64, 1000] {
                let s = Split::new(Grain::tasks(k).unwrap(), groups, 2);
                assert_eq!(s.tasks(), groups.div_ceil(k));
                check_partition(s, groups);
            }
            let s = Split::new(Grain::Caller, groups, 2);
            assert_eq!(s.tasks(), 1);
            check_partition(s, groups);
        }
    }

    #[test]
    fn legacy_chunks_differ_by_at_most_one() {
        let s = Split::new(Grain::Legacy, 10, 4);
        let sizes: Vec<_> = (0..4).map(|t| s.groups(t).len()).collect();
        assert_eq!(sizes, vec![3, 3, 2, 2]);
    }
}
