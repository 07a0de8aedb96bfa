//! The dispatch protocol between the caller of a launch and the helper threads.
//! The states, who waits on what and why no wake-up is lost are described in
//! the docs of the [`pool`](super) module; this file is that description in code.

use super::stats::LaunchStats;
#[cfg(not(loom))]
use super::sync::thread;
use super::sync::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Mutex, Ordering, WaitWord, fence, lock,
    thread_local,
};
use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
#[cfg(not(loom))]
use std::time::{Duration, Instant};

/// Keeps a hot field on its own pair of cache lines (the adjacent-line
/// prefetcher pulls lines in pairs), so caller and helpers do not false-share.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// Yields an idle helper makes before parking when the pool is oversubscribed.
#[cfg(not(loom))]
const OVERSUBSCRIBED_YIELDS: usize = 4;

/// How the threads of one pool behave while waiting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    /// Spin budget of an idle helper (and of a caller waiting for helpers).
    #[cfg(not(loom))]
    pub(crate) spin: Duration,
    /// More workers than cores: never spin, yield a little, then park.
    #[cfg(not(loom))]
    pub(crate) oversubscribed: bool,
    /// Most helpers the caller wakes itself (cores − 1): more could not run at once.
    pub(crate) wake_limit: usize,
}

#[cfg(not(loom))]
thread_local! {
    /// Set on helper threads for their whole life, and on a caller thread while
    /// it runs a launch: a launch issued from inside a task runs inline.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

#[cfg(loom)]
thread_local! {
    static IN_POOL: Cell<bool> = Cell::new(false);
}

/// `true` if this thread is a helper or is inside a pooled launch.
pub(crate) fn in_pool() -> bool {
    IN_POOL.with(|c| c.get())
}

/// Marks the calling thread as inside a launch until dropped.
pub(crate) struct InPoolGuard(bool);

impl InPoolGuard {
    pub(crate) fn enter() -> Self {
        InPoolGuard(IN_POOL.with(|c| c.replace(true)))
    }
}

impl Drop for InPoolGuard {
    fn drop(&mut self) {
        let was = self.0;
        IN_POOL.with(|c| c.set(was));
    }
}

/// One published launch. It lives on the caller's stack; helpers reach it
/// through [`Shared::job`] only while they are counted in [`Shared::active`].
pub(crate) struct Job<'a> {
    /// Next task index to claim; claims past `tasks` mean "nothing left".
    next: Padded<AtomicUsize>,
    tasks: usize,
    f: &'a (dyn Fn(usize) + Sync + 'a),
    helper_tasks: AtomicUsize,
    helpers: AtomicUsize,
    panicked: AtomicBool,
    /// Under loom: written when the job dies, read by every helper after its
    /// last access, so loom reports a helper that could touch a dead job.
    #[cfg(loom)]
    live: loom::cell::UnsafeCell<bool>,
}

impl<'a> Job<'a> {
    fn new(tasks: usize, f: &'a (dyn Fn(usize) + Sync + 'a)) -> Self {
        Job {
            next: Padded(AtomicUsize::new(0)),
            tasks,
            f,
            helper_tasks: AtomicUsize::new(0),
            helpers: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            #[cfg(loom)]
            live: loom::cell::UnsafeCell::new(true),
        }
    }

    #[inline]
    fn check_live(&self) {
        #[cfg(loom)]
        // SAFETY: loom checks this read against the write in `drop`; a read of
        // a `bool` through its own cell's pointer is otherwise always valid.
        self.live
            .with(|p| assert!(unsafe { *p }, "helper touched a finished job"));
    }
}

#[cfg(loom)]
impl Drop for Job<'_> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other reference to the cell exists here
        // (loom verifies that no helper read is concurrent with this write).
        self.live.with_mut(|p| unsafe { *p = false });
    }
}

/// The state a pool's caller side and helper threads share.
pub(crate) struct Shared {
    /// Bumped by the caller to publish a job (and by `Pool::drop` to announce
    /// shutdown). Idle helpers spin on it, then sleep on it.
    epoch: Padded<WaitWord>,
    /// The published job, or null. Written only by the caller holding `launch`.
    job: Padded<AtomicPtr<Job<'static>>>,
    /// Helpers that are asleep on `epoch` (or about to check it and sleep).
    sleepers: Padded<AtomicU32>,
    /// Helpers currently visiting (between reading `job` and being done with it).
    /// The caller sleeps on it until it drops to 0.
    active: Padded<WaitWord>,
    /// The caller is (about to be) asleep on `active`.
    caller_waiting: AtomicBool,
    /// Set once by `Pool::drop`, before its final `epoch` bump.
    shutdown: AtomicBool,
    /// Helper threads that have started (`Pool::new` waits for all of them).
    started: AtomicUsize,
    /// The message of the first kernel panic of the current launch.
    panic_msg: Mutex<Option<String>>,
    /// Serializes launches from several caller threads.
    pub(crate) launch: Mutex<()>,
    tuning: Tuning,
}

impl Shared {
    pub(crate) fn new(tuning: Tuning) -> Self {
        Shared {
            epoch: Padded(WaitWord::new(0)),
            job: Padded(AtomicPtr::new(ptr::null_mut())),
            sleepers: Padded(AtomicU32::new(0)),
            active: Padded(WaitWord::new(0)),
            caller_waiting: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            panic_msg: Mutex::new(None),
            launch: Mutex::new(()),
            tuning,
        }
    }

    // ----- caller side -------------------------------------------------------

    /// Run tasks `0..tasks` with the helpers' help; returns who ran them and
    /// whether a task panicked. Must be called with `launch` held and `tasks ≥ 1`.
    ///
    /// Returns only after every task has finished and no helper can touch the
    /// job any more.
    pub(crate) fn run_pooled(
        &self,
        tasks: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> (LaunchStats, bool) {
        let job = Job::new(tasks, f);
        let publication = Publication::publish(self, &job);
        let mine = self.claim(&job, false);
        drop(publication); // unpublish and wait for visiting helpers
        let helper_tasks = job.helper_tasks.load(Ordering::Relaxed);
        let stats = LaunchStats {
            tasks,
            caller_tasks: mine,
            helper_tasks,
            helpers: job.helpers.load(Ordering::Relaxed),
            helped: helper_tasks > 0,
        };
        (stats, job.panicked.load(Ordering::Relaxed))
    }

    /// Wake up to `want` sleeping helpers (a hint: correctness never depends on it).
    #[inline]
    fn wake_helpers(&self, want: usize) {
        let sleeping = self.sleepers.0.load(Ordering::Relaxed) as usize;
        let n = want.min(sleeping);
        if n > 0 {
            self.epoch.0.wake(n as u32);
        }
    }

    /// Wait until no helper is visiting. Called after the job was unpublished.
    fn wait_for_visitors(&self) {
        let active = self.active.0.word();
        if active.load(Ordering::Acquire) == 0 {
            return;
        }
        #[cfg(not(loom))]
        {
            // A visiting helper normally leaves within a task's time: spin for it
            // (unless oversubscribed: it may not be running), then yield to it.
            if !self.tuning.oversubscribed
                && spin_until(self.tuning.spin, || active.load(Ordering::Acquire) == 0)
            {
                return;
            }
            for _ in 0..OVERSUBSCRIBED_YIELDS {
                thread::yield_now();
                if active.load(Ordering::Acquire) == 0 {
                    return;
                }
            }
        }
        loop {
            self.caller_waiting.store(true, Ordering::Relaxed);
            // Dekker pair with `leave`: either we see its decrement, or it sees our flag.
            fence(Ordering::SeqCst);
            let a = active.load(Ordering::Acquire);
            if a == 0 {
                break;
            }
            self.active.0.wait(a);
        }
        self.caller_waiting.store(false, Ordering::Relaxed);
    }

    /// The message of the launch's first panic, clearing it for the next launch.
    pub(crate) fn take_panic(&self) -> String {
        lock(&self.panic_msg)
            .take()
            .unwrap_or_else(|| "a kernel panicked".to_string())
    }

    /// Remember a kernel panic's message (the first one of a launch wins).
    pub(crate) fn record_panic(&self, payload: Box<dyn Any + Send>) {
        let msg = panic_message(payload.as_ref());
        // A payload whose own drop panics must not unwind out of a helper.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
        let mut slot = lock(&self.panic_msg);
        if slot.is_none() {
            *slot = Some(msg);
        }
    }

    // ----- both sides --------------------------------------------------------

    /// Claim and run tasks of `job` until none is left; returns how many ran here.
    fn claim(&self, job: &Job<'_>, helper: bool) -> usize {
        let mut ran = 0;
        loop {
            let t = job.next.0.fetch_add(1, Ordering::Relaxed);
            if t >= job.tasks {
                return ran;
            }
            if helper && ran == 0 && t + 1 < job.tasks {
                // Work is left: pass the wake-up on (fan-out beyond the caller's wakes).
                self.wake_helpers(1);
            }
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (job.f)(t))) {
                job.panicked.store(true, Ordering::Relaxed);
                // Cancel the tasks nobody claimed yet.
                job.next.0.fetch_max(job.tasks, Ordering::Relaxed);
                self.record_panic(payload);
            }
            ran += 1;
        }
    }

    // ----- helper side -------------------------------------------------------

    /// The life of a helper thread: wait for a launch, visit it, repeat.
    pub(crate) fn helper_main(&self, mut seen: u32) {
        IN_POOL.with(|c| c.set(true));
        self.started.fetch_add(1, Ordering::Release);
        loop {
            seen = self.wait_for_launch(seen);
            if self.shutdown.load(Ordering::Relaxed) {
                return;
            }
            self.visit();
        }
    }

    /// Wait until `epoch` differs from `seen` (or shutdown); returns the new epoch.
    fn wait_for_launch(&self, seen: u32) -> u32 {
        let epoch = self.epoch.0.word();
        #[cfg(not(loom))]
        {
            let mut e = seen;
            let changed = |e: &mut u32| {
                *e = epoch.load(Ordering::Acquire);
                *e != seen
            };
            if self.tuning.oversubscribed {
                // Spinning here would steal the core from a thread with work.
                for _ in 0..OVERSUBSCRIBED_YIELDS {
                    if changed(&mut e) {
                        return e;
                    }
                    thread::yield_now();
                }
            } else if spin_until(self.tuning.spin, || changed(&mut e)) {
                return e;
            }
        }
        loop {
            self.sleepers.0.fetch_add(1, Ordering::Relaxed);
            // Dekker pair with `Publication::publish`: either we see the new
            // epoch here, or the caller sees us in `sleepers` and wakes us.
            fence(Ordering::SeqCst);
            if epoch.load(Ordering::Acquire) == seen && !self.shutdown.load(Ordering::Relaxed) {
                // Sleeps only if `epoch` still equals `seen` (atomically).
                self.epoch.0.wait(seen);
            }
            self.sleepers.0.fetch_sub(1, Ordering::Relaxed);
            let e = epoch.load(Ordering::Acquire);
            if e != seen || self.shutdown.load(Ordering::Relaxed) {
                return e;
            }
        }
    }

    /// Enter, help with the published job if there is one, leave.
    fn visit(&self) {
        self.active.0.word().fetch_add(1, Ordering::Relaxed);
        // Dekker pair with `Publication::drop`: either we see the job withdrawn
        // (null or a later job), or the caller sees us in `active` and waits.
        fence(Ordering::SeqCst);
        let p = self.job.0.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` was published by a caller that, before its job dies,
            // withdraws it and then waits until `active` is 0 (`Publication::drop`).
            // We incremented `active` before loading `p` (SeqCst fences on both
            // sides), so that caller sees us and waits until we decrement it
            // below: the job outlives this reference.
            let job = unsafe { &*p };
            let ran = self.claim(job, true);
            if ran > 0 {
                job.helper_tasks.fetch_add(ran, Ordering::Relaxed);
                job.helpers.fetch_add(1, Ordering::Relaxed);
            }
            job.check_live();
        }
        self.leave();
    }

    fn leave(&self) {
        // Release: our tasks' writes happen-before the caller's return.
        if self.active.0.word().fetch_sub(1, Ordering::Release) == 1 {
            // Dekker pair with `wait_for_visitors`.
            fence(Ordering::SeqCst);
            if self.caller_waiting.load(Ordering::Relaxed) {
                self.active.0.wake(1);
            }
        }
    }

    /// Wait until `helpers` helper threads have started, so that a new pool's
    /// first launches do not race its threads' start-up.
    pub(crate) fn wait_started(&self, helpers: usize) {
        #[cfg(not(loom))]
        while self.started.load(Ordering::Acquire) < helpers {
            thread::yield_now();
        }
        #[cfg(loom)]
        let _ = helpers; // loom explores start-up orders instead
    }

    /// Announce shutdown and wake every helper (called by `Pool::drop`).
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
        self.epoch.0.word().fetch_add(1, Ordering::Release);
        self.epoch.0.wake(u32::MAX);
    }
}

/// A job while it is visible to helpers. Dropping it (also during an unwind)
/// withdraws the job and waits for every visiting helper, so the job can never
/// die while a helper holds a reference to it.
struct Publication<'s> {
    shared: &'s Shared,
}

impl<'s> Publication<'s> {
    fn publish(shared: &'s Shared, job: &Job<'_>) -> Self {
        let p = job as *const Job<'_> as *mut Job<'static>;
        shared.job.0.store(p, Ordering::Release);
        // Release: a helper that sees the new epoch sees the job pointer.
        shared.epoch.0.word().fetch_add(1, Ordering::Release);
        // Dekker pair with `wait_for_launch`.
        fence(Ordering::SeqCst);
        let tuning = &shared.tuning;
        shared.wake_helpers((job.tasks - 1).min(tuning.wake_limit));
        Publication { shared }
    }
}

impl Drop for Publication<'_> {
    fn drop(&mut self) {
        self.shared.job.0.store(ptr::null_mut(), Ordering::Relaxed);
        // Dekker pair with `visit`.
        fence(Ordering::SeqCst);
        self.shared.wait_for_visitors();
    }
}

/// Busy-wait (with `spin_loop` hints) until `done()` or `budget` elapsed;
/// returns whether `done()` became true. Reads the clock every 64 polls.
#[cfg(not(loom))]
#[inline]
fn spin_until(budget: Duration, mut done: impl FnMut() -> bool) -> bool {
    if budget.is_zero() {
        return done();
    }
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= budget {
            return false;
        }
    }
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a kernel panicked (non-string payload)".to_string()
    }
}
