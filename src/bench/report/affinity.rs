//! Pins the benchmark's calling thread for the length of a run.
//!
//! The pool pins helper `i` to the `(i + 1)`-th allowed CPU and leaves the first
//! one to the caller, but it does not pin the caller itself: the scheduler may
//! park the benchmark thread on a helper's CPU for seconds at a time, and the
//! pool's timings then switch between two regimes from one round to the next.
//! The harness therefore pins the calling thread to the first allowed CPU while
//! it measures (stated in the report) and restores the original mask afterwards.

/// Restores the calling thread's CPU mask when dropped.
pub struct CallerPin {
    #[cfg(target_os = "linux")]
    saved: Option<libc::cpu_set_t>,
    cpu: Option<usize>,
}

impl CallerPin {
    /// The CPU the caller was pinned to, if pinning succeeded.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Does nothing (pinning off).
    pub fn none() -> CallerPin {
        CallerPin {
            #[cfg(target_os = "linux")]
            saved: None,
            cpu: None,
        }
    }

    /// Pins the calling thread to the first CPU it may run on.
    #[cfg(target_os = "linux")]
    pub fn first_allowed() -> CallerPin {
        // SAFETY: `cpu_set_t` is plain old data; all-zero is a valid empty set.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: we pass the exact size of the set we own; pid 0 = this thread.
        if unsafe { libc::sched_getaffinity(0, size, &mut saved) } != 0 {
            return CallerPin::none();
        }
        // SAFETY: every index is below CPU_SETSIZE, the bound CPU_ISSET requires.
        let Some(cpu) =
            (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, &saved) })
        else {
            return CallerPin::none();
        };
        // SAFETY: all-zero is a valid empty set; `cpu < CPU_SETSIZE`.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu, &mut one) };
        // SAFETY: as above.
        if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
            return CallerPin::none();
        }
        CallerPin {
            saved: Some(saved),
            cpu: Some(cpu),
        }
    }

    /// Pinning is not available on this platform.
    #[cfg(not(target_os = "linux"))]
    pub fn first_allowed() -> CallerPin {
        CallerPin::none()
    }
}

impl Drop for CallerPin {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(saved) = self.saved.take() {
            // SAFETY: restoring the mask read by sched_getaffinity, exact size.
            unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &saved);
            }
        }
    }
}
