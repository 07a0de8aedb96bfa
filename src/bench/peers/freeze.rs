//! Freezes the other runtimes' processes while one runtime is timed.
//!
//! ONNX Runtime's intra-op pool, XLA's Eigen pool and PyTorch's OpenMP team keep
//! their workers spinning for a while after a call returns. On a machine with as
//! many cores as threads, a worker still spinning in the runtime timed before
//! takes a core from the runtime timed now: measured here, taskgrain's swiglu
//! 129x768 on 2 threads took 76 µs among all six peers and 43 µs beside ONNX
//! Runtime alone, and every runtime's range widened the same way. So while one
//! runtime's calls are timed, every other host process is stopped (`SIGSTOP`) and
//! continued (`SIGCONT`) afterwards: each runtime is timed as if it ran alone on
//! the machine, as its users run it.
//!
//! Only the processes of live [`super::Host`]s are signalled: a host's child is
//! reaped only when the host is dropped, so its pid cannot have been reused by an
//! unrelated process. If taskgrain dies while hosts are stopped, they are left in
//! an orphaned process group, and the kernel sends them `SIGHUP` and `SIGCONT`.

/// Processes stopped until this is dropped, when they are continued.
#[must_use = "the processes are continued when this is dropped"]
pub struct Frozen {
    pids: Vec<u32>,
}

impl Frozen {
    /// Freezes nothing (freezing off).
    pub fn none() -> Frozen {
        Frozen { pids: Vec::new() }
    }

    /// Stops every process of `pids` except `keep` (the runtime about to be timed).
    pub fn all_but(pids: impl IntoIterator<Item = u32>, keep: Option<u32>) -> Frozen {
        let mut stopped = Vec::new();
        for pid in pids {
            if Some(pid) == keep || stopped.contains(&pid) {
                continue;
            }
            if signal(pid, Signal::Stop) {
                stopped.push(pid);
            }
        }
        Frozen { pids: stopped }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.pids {
            signal(pid, Signal::Continue);
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Stop,
    Continue,
}

/// Sends `sig` to process `pid`; `true` if it was delivered.
#[cfg(unix)]
fn signal(pid: u32, sig: Signal) -> bool {
    use nix::sys::signal::{Signal as Sig, kill};
    use nix::unistd::Pid;
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false; // 0 and negative pids name process groups
    }
    let sig = match sig {
        Signal::Stop => Sig::SIGSTOP,
        Signal::Continue => Sig::SIGCONT,
    };
    kill(Pid::from_raw(pid), sig).is_ok()
}

/// Other platforms time every runtime without freezing the others.
#[cfg(not(unix))]
fn signal(_pid: u32, _sig: Signal) -> bool {
    false
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::process::Command;

    /// The state letter of `/proc/PID/stat` (`T` = stopped).
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')').next()?.trim().chars().next()
    }

    /// Whether `pid` is (or, within a second, becomes) stopped as `want` says:
    /// signals are delivered asynchronously.
    fn settles(pid: u32, want: bool) -> bool {
        (0..100).any(|_| {
            let now = state(pid) == Some('T');
            if now != want {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            now == want
        })
    }

    #[test]
    fn stops_the_others_and_continues_them_when_dropped() {
        let mut a = Command::new("sleep").arg("30").spawn().expect("sleep");
        let mut b = Command::new("sleep").arg("30").spawn().expect("sleep");
        let (pa, pb) = (a.id(), b.id());
        if state(pa).is_none() {
            // No procfs: nothing to observe.
            let _ = (a.kill(), b.kill(), a.wait(), b.wait());
            return;
        }
        {
            let f = Frozen::all_but([pa, pb, pa], Some(pb));
            assert_eq!(f.pids, vec![pa]);
            assert!(settles(pa, true), "the other process is stopped");
            assert!(settles(pb, false), "the kept process runs");
        }
        assert!(settles(pa, false), "continued when dropped");
        let _ = (a.kill(), b.kill(), a.wait(), b.wait());
    }
}
