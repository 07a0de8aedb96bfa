//! The synchronisation primitives the pool is built from, in one place so that
//! the dispatch protocol can be model-checked.
//!
//! Normally these are `std`'s atomics, mutexes and threads, plus a [`WaitWord`]
//! (an atomic `u32` that threads can sleep on) implemented with the Linux
//! `futex(2)` system call. Under `--cfg loom` every primitive comes from
//! [loom](https://docs.rs/loom) and [`WaitWord`] is modelled with a loom mutex
//! and condition variable, so that `tests/pool_loom.rs` explores every
//! interleaving of the real protocol code. On other operating systems the same
//! mutex/condvar model backs [`WaitWord`] with `std` types.
//!
//! Loom treats `SeqCst` loads, stores and read-modify-writes as `AcqRel`, but
//! models `fence(SeqCst)` exactly, so every store→load handshake of the
//! protocol (the "Dekker" pairs described in the module docs of `pool`) is
//! written with an explicit `fence(SeqCst)` between the store and the load.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex};
#[cfg(not(loom))]
pub(crate) use std::thread;
#[cfg(not(loom))]
pub(crate) use std::thread_local;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(loom)]
pub(crate) use loom::thread_local;

#[cfg(any(loom, not(target_os = "linux")))]
use self::model::CondvarModel;

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// Lock a mutex, ignoring poisoning: the pool never panics while holding one
/// (kernel panics are caught before they can reach a lock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An atomic `u32` that threads can sleep on until it changes: a futex.
///
/// [`WaitWord::wait`] returns when the word no longer holds `expected`, when
/// woken by [`WaitWord::wake`], or spuriously; callers always re-check their
/// condition in a loop. The check "word == expected, then sleep" is atomic with
/// respect to `wake`, so a wake that follows a change of the word is never lost.
pub(crate) struct WaitWord {
    word: AtomicU32,
    #[cfg(any(loom, not(target_os = "linux")))]
    model: CondvarModel,
}

impl WaitWord {
    pub(crate) fn new(v: u32) -> Self {
        WaitWord {
            word: AtomicU32::new(v),
            #[cfg(any(loom, not(target_os = "linux")))]
            model: CondvarModel::new(),
        }
    }

    /// The word itself.
    #[inline]
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Sleep while the word holds `expected` (or until woken; may return spuriously).
    #[cfg(all(target_os = "linux", not(loom)))]
    pub(crate) fn wait(&self, expected: u32) {
        // SAFETY: FUTEX_WAIT only reads the aligned u32 behind `as_ptr()`, which
        // lives as long as `&self`; a null timeout means "no timeout". Errors
        // (EAGAIN when the word changed, EINTR) are spurious returns by contract.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }

    /// Wake up to `n` threads sleeping in [`WaitWord::wait`].
    #[cfg(all(target_os = "linux", not(loom)))]
    pub(crate) fn wake(&self, n: u32) {
        let n = n.min(i32::MAX as u32) as libc::c_int;
        // SAFETY: FUTEX_WAKE does not access the word's memory; the address only
        // identifies the wait queue. It cannot fail for a valid private futex.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
            );
        }
    }

    /// Sleep while the word holds `expected` (or until woken; may return spuriously).
    #[cfg(any(loom, not(target_os = "linux")))]
    pub(crate) fn wait(&self, expected: u32) {
        self.model.wait(&self.word, expected);
    }

    /// Wake up to `n` threads sleeping in [`WaitWord::wait`] (the model wakes all).
    #[cfg(any(loom, not(target_os = "linux")))]
    pub(crate) fn wake(&self, _n: u32) {
        self.model.wake_all();
    }
}

#[cfg(any(loom, not(target_os = "linux")))]
mod model {
    //! A futex modelled with a mutex and a condition variable: the waiter checks
    //! the word while holding the mutex and releases it atomically as it sleeps;
    //! the waker takes the mutex after changing the word, so it either runs
    //! before the check (which then sees the new value) or after the waiter
    //! sleeps (and wakes it).

    use super::{AtomicU32, Mutex, Ordering, lock};
    #[cfg(loom)]
    use loom::sync::Condvar;
    #[cfg(not(loom))]
    use std::sync::Condvar;

    pub(super) struct CondvarModel {
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl CondvarModel {
        pub(super) fn new() -> Self {
            CondvarModel {
                lock: Mutex::new(()),
                cv: Condvar::new(),
            }
        }

        pub(super) fn wait(&self, word: &AtomicU32, expected: u32) {
            let guard = lock(&self.lock);
            if word.load(Ordering::Acquire) == expected {
                drop(self.cv.wait(guard));
            }
        }

        pub(super) fn wake_all(&self) {
            drop(lock(&self.lock));
            self.cv.notify_all();
        }
    }
}
