//! Thread affinity (Linux `sched_setaffinity`; a no-op elsewhere): pinning the
//! pool's helpers to cores, and [`CallerPin`], which pins a calling thread for
//! the length of a measurement and restores its mask afterwards.

#[cfg(all(target_os = "linux", not(loom)))]
mod sys {
    /// A CPU mask (`cpu_set_t`).
    pub type Mask = libc::cpu_set_t;

    /// The calling thread's mask.
    pub fn current() -> Option<Mask> {
        // SAFETY: `cpu_set_t` is plain old data; all-zero is a valid empty set.
        let mut set: Mask = unsafe { std::mem::zeroed() };
        // SAFETY: we pass the exact size of the set we own; pid 0 = this thread.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<Mask>(), &mut set) };
        (rc == 0).then_some(set)
    }

    /// Sets the calling thread's mask; `false` if the system refused.
    pub fn set(mask: &Mask) -> bool {
        // SAFETY: we pass the exact size of the set we own; pid 0 = this thread.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<Mask>(), mask) == 0 }
    }

    /// The CPUs in `mask`, in increasing order.
    pub fn cpus(mask: &Mask) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu < CPU_SETSIZE`, the bound CPU_ISSET requires.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, mask) })
            .collect()
    }

    /// A mask holding `cpu` alone (`None` if `cpu` is out of range).
    pub fn only(cpu: usize) -> Option<Mask> {
        if cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        // SAFETY: all-zero is a valid empty set.
        let mut set: Mask = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu < CPU_SETSIZE` was checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        Some(set)
    }
}

#[cfg(not(all(target_os = "linux", not(loom))))]
mod sys {
    /// No masks on this platform.
    #[derive(Clone, Copy)]
    pub enum Mask {}

    pub fn current() -> Option<Mask> {
        None
    }

    pub fn set(mask: &Mask) -> bool {
        match *mask {}
    }

    pub fn cpus(mask: &Mask) -> Vec<usize> {
        match *mask {}
    }

    pub fn only(_cpu: usize) -> Option<Mask> {
        None
    }
}

/// The CPUs this process may run on, in increasing order (empty if unknown).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    sys::current().map_or_else(Vec::new, |m| sys::cpus(&m))
}

/// Pin the calling thread to `cpu`; `false` if the system refused.
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    sys::only(cpu).is_some_and(|m| sys::set(&m))
}

/// Pins the calling thread to the first CPU it may run on — the one a pinned
/// pool leaves to its caller — and restores the thread's previous mask when
/// dropped.
///
/// The pool never pins the caller on its own (it is the user's thread); a
/// harness that measures the pool takes a `CallerPin` for the length of the
/// measurement, so the scheduler cannot park the caller on a helper's CPU,
/// where the two would take turns and every pooled launch would run on one core.
///
/// Take it after the pool is built: a pool spreads its helpers over the CPUs
/// the building thread may use, and a pinned thread may use one.
pub struct CallerPin {
    saved: Option<sys::Mask>,
    cpu: Option<usize>,
}

impl CallerPin {
    /// Pins the calling thread to the first CPU it may run on; does nothing
    /// (and [`CallerPin::cpu`] is `None`) where pinning is unavailable or refused.
    pub fn first_allowed() -> CallerPin {
        let Some(saved) = sys::current() else {
            return CallerPin::none();
        };
        let Some(&cpu) = sys::cpus(&saved).first() else {
            return CallerPin::none();
        };
        if !pin_current_thread(cpu) {
            return CallerPin::none();
        }
        CallerPin {
            saved: Some(saved),
            cpu: Some(cpu),
        }
    }

    /// Does nothing (pinning off).
    pub fn none() -> CallerPin {
        CallerPin {
            saved: None,
            cpu: None,
        }
    }

    /// The CPU the caller was pinned to, if pinning succeeded.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }
}

impl Drop for CallerPin {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            sys::set(&saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_pin_pins_to_the_first_allowed_cpu_and_restores_the_mask() {
        let before = allowed_cpus();
        {
            let pin = CallerPin::first_allowed();
            if let Some(cpu) = pin.cpu() {
                assert_eq!(Some(&cpu), before.first());
                assert_eq!(allowed_cpus(), vec![cpu]);
            }
        }
        assert_eq!(allowed_cpus(), before);
    }
}
