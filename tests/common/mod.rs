//! Shared test helpers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Aborts the whole test process if the test is still running after `secs`
/// seconds (a deadlocked test must fail, not hang). Disarmed when dropped.
///
/// The watchdog thread only sleeps and polls an atomic flag, so once started it
/// never allocates (it does not disturb `tests/pool_alloc.rs`).
pub struct Watchdog {
    disarmed: Arc<AtomicBool>,
}

/// Arm a [`Watchdog`] for the current test.
pub fn watchdog(secs: u64, what: &'static str) -> Watchdog {
    let disarmed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&disarmed);
    let started = Arc::new(AtomicBool::new(false));
    let started2 = Arc::clone(&started);
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        started2.store(true, Ordering::Release);
        while !flag.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                eprintln!("watchdog: `{what}` still running after {secs} s: deadlock? aborting");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    while !started.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    Watchdog { disarmed }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarmed.store(true, Ordering::Release);
    }
}
