//! Dropping a pool joins every helper thread. Alone in its own test binary so
//! that the thread count of the process is not disturbed by other tests.

mod common;

use common::watchdog;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use taskgrain::pool::{Pool, PoolConfig};

fn threads() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).ok()
}

/// The thread count once it has come back to `want`, or after a second. A
/// joined thread can stay listed in /proc/self/task for a moment: `join` returns
/// when the kernel clears the thread's id, slightly before it reaps the task.
fn settled_threads(want: Option<usize>) -> Option<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let now = threads();
        if now == want || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn dropping_the_pool_joins_every_worker() {
    let _w = watchdog(60, "drop");
    let count_threads = threads;
    for (workers, over) in [(2, false), (8, true)] {
        let before = count_threads();
        let observed = Arc::new(AtomicUsize::new(0));
        {
            let pool = Pool::new(PoolConfig {
                workers,
                oversubscribe: over,
                ..PoolConfig::default()
            })
            .unwrap();
            // Helpers are live: keep one busy so it is certainly running.
            pool.run_tasks(64, &|_| std::thread::sleep(Duration::from_micros(50)))
                .unwrap();
            if let (Some(b), Some(now)) = (before, count_threads()) {
                observed.store(now - b, Ordering::Relaxed);
            }
            // Idle long enough that every helper has parked, then drop.
            std::thread::sleep(Duration::from_millis(20));
        }
        if let (Some(b), Some(after)) = (before, settled_threads(before)) {
            assert_eq!(
                observed.load(Ordering::Relaxed),
                workers - 1,
                "helpers = granted − 1"
            );
            assert_eq!(after, b, "every helper thread has exited after drop");
        }
        // Dropping right after a launch, while helpers still spin, joins too.
        for _ in 0..50 {
            let pool = Pool::new(PoolConfig {
                workers,
                oversubscribe: over,
                ..PoolConfig::default()
            })
            .unwrap();
            pool.run_tasks(16, &|_| {}).unwrap();
        }
    }
}
