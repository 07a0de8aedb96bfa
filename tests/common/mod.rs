//! Shared test helpers.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Aborts the whole test process if it is still alive after `secs` seconds
/// (a deadlocked test must fail, not hang). Disarmed when dropped.
pub struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

/// Arm a [`Watchdog`] for the current test.
pub fn watchdog(secs: u64, what: &'static str) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
            eprintln!("watchdog: `{what}` still running after {secs} s: deadlock? aborting");
            std::process::abort();
        }
    });
    Watchdog { _disarm: tx }
}
