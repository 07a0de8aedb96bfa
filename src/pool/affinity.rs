//! Pinning helper threads to cores (Linux `sched_setaffinity`; a no-op elsewhere).

/// The CPUs this process may run on, in increasing order (empty if unknown).
#[cfg(all(target_os = "linux", not(loom)))]
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain old data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass the exact size of the set we own; pid 0 = this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu < CPU_SETSIZE`, the bound CPU_ISSET requires.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pin the calling thread to `cpu`; `false` if the system refused.
#[cfg(all(target_os = "linux", not(loom)))]
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE` was checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: we pass the exact size of the set we own; pid 0 = this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// The CPUs this process may run on (unknown on this platform).
#[cfg(not(all(target_os = "linux", not(loom))))]
pub(crate) fn allowed_cpus() -> Vec<usize> {
    Vec::new()
}

/// Pinning is not supported on this platform.
#[cfg(not(all(target_os = "linux", not(loom))))]
pub(crate) fn pin_current_thread(_cpu: usize) -> bool {
    false
}
