//! Model-checks the pool's dispatch protocol with loom: every interleaving of
//! the caller and a helper thread (within loom's preemption bound).
//!
//! Run with:
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release --test pool_loom
//! ```
//! (`LOOM_MAX_PREEMPTIONS=N` overrides the default bound of 3 used here.)
//!
//! What is checked:
//! - **no early return**: when `run_tasks` returns, every task has run exactly
//!   once and its writes are visible (loom's `UnsafeCell` reports any access
//!   not ordered by happens-before), and no helper touches the job afterwards
//!   (the job's loom-only liveness cell is written when it dies);
//! - **no lost wake-up**: a task that can only finish once *another* thread
//!   has run the other task (so a helper must have been woken), launches
//!   back to back, and shutdown of a pool whose helper may be asleep all
//!   terminate — loom reports a deadlock if any thread could sleep forever.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Condvar, Mutex};
use std::time::Duration;
use taskgrain::pool::{Pool, PoolConfig};

/// A pool of the caller plus one helper, as small as the protocol gets.
fn pool() -> Pool {
    Pool::new(PoolConfig {
        workers: 2,
        oversubscribe: true,
        pin: false,
        spin: Duration::ZERO,
    })
    .unwrap()
}

fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Per-task cells written by the task and read by the caller after the launch.
struct Cells(Vec<UnsafeCell<usize>>);

// SAFETY: loom checks every access to the cells for data races; that is the test.
unsafe impl Sync for Cells {}

impl Cells {
    fn new(n: usize) -> Self {
        Cells((0..n).map(|_| UnsafeCell::new(0)).collect())
    }
    fn hit(&self, t: usize) {
        // SAFETY: checked by loom (a concurrent access would be reported).
        self.0[t].with_mut(|p| unsafe { *p += 1 });
    }
    fn assert_each_once(&self) {
        for c in &self.0 {
            // SAFETY: checked by loom.
            c.with(|p| assert_eq!(unsafe { *p }, 1));
        }
    }
}

#[test]
fn a_launch_returns_only_after_every_task_ran() {
    check(|| {
        let pool = pool();
        let cells = Cells::new(2);
        let stats = pool.run_tasks(2, &|t| cells.hit(t)).unwrap();
        cells.assert_each_once();
        assert_eq!(stats.caller_tasks + stats.helper_tasks, 2);
    });
}

#[test]
fn a_helper_is_never_left_asleep_when_work_needs_it() {
    check(|| {
        let pool = pool();
        // Task 0 cannot finish before task 1 ran on another thread: if the
        // helper's wake-up were lost, every thread would block for ever.
        let done1 = Mutex::new(false);
        let cv = Condvar::new();
        let stats = pool
            .run_tasks(2, &|t| {
                if t == 1 {
                    *done1.lock().unwrap() = true;
                    cv.notify_all();
                } else {
                    let mut d = done1.lock().unwrap();
                    while !*d {
                        d = cv.wait(d).unwrap();
                    }
                }
            })
            .unwrap();
        assert!(stats.helped);
    });
}

#[test]
fn back_to_back_launches_and_late_helpers() {
    check(|| {
        let pool = pool();
        for _ in 0..2 {
            let cells = Cells::new(2);
            pool.run_tasks(2, &|t| cells.hit(t)).unwrap();
            cells.assert_each_once();
        }
    });
}

#[test]
fn drop_wakes_and_joins_a_sleeping_helper() {
    check(|| {
        let pool = pool();
        drop(pool);
    });
}
