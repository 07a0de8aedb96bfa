//! The dispatch protocol between the caller of a launch and the helper threads.
//! The states, who waits on what and why no wake-up is lost are described in
//! the docs of the [`pool`](super) module; this file is that description in code.

use super::split::Split;
use super::stats::LaunchStats;
#[cfg(not(loom))]
use super::sync::thread;
use super::sync::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering, WaitWord, fence,
    lock, thread_local,
};
use crate::packet;
use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
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

/// A worker's range of unclaimed tasks, `hi << 32 | lo`: tasks `lo..hi`.
#[inline]
fn range(lo: u32, hi: u32) -> u64 {
    (u64::from(hi) << 32) | u64::from(lo)
}

#[inline]
fn bounds(r: u64) -> (u32, u32) {
    (r as u32, (r >> 32) as u32)
}

/// Most tasks one launch can have (ranges count them in 32 bits).
pub(crate) const MAX_TASKS: usize = u32::MAX as usize;

/// What a helper needs to run a task of the current launch. Lives on the
/// caller's stack; helpers reach it only after claiming a task of its launch,
/// and the caller does not return before every claimed task is accounted for.
struct Frame<'a> {
    f: &'a (dyn Fn(usize) + Sync + 'a),
    /// Under loom: written when the frame dies, read by a helper after its last
    /// access, so loom reports a helper that could touch a dead frame.
    #[cfg(loom)]
    live: loom::cell::UnsafeCell<bool>,
}

impl Frame<'_> {
    #[inline]
    fn check_live(&self) {
        #[cfg(loom)]
        // SAFETY: loom checks this read against the write in `drop`; reading a
        // `bool` through its own cell's pointer is otherwise always valid.
        self.live
            .with(|p| assert!(unsafe { *p }, "helper touched a finished launch"));
    }
}

#[cfg(loom)]
impl Drop for Frame<'_> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other reference to the cell exists here
        // (loom verifies that no helper read is concurrent with this write).
        self.live.with_mut(|p| unsafe { *p = false });
    }
}

/// One worker's range of unclaimed tasks, on its own line.
#[repr(align(128))]
struct Slot {
    /// `hi << 32 | lo`: tasks `lo..hi`, popped by the owner from the front,
    /// stolen by others from the back.
    range: AtomicU64,
    /// The owning helper is spinning for the next launch, so the caller gives
    /// it a share when it publishes (a hint: the caller can steal it back).
    spinning: AtomicBool,
}

/// What a steal brought.
enum Stolen {
    /// Every other range was empty.
    Nothing,
    /// This many tasks moved into the thief's range.
    Stored(u32),
    /// Tasks `lo..hi`, claimed, that the thief must run itself.
    InHand(u32, u32),
}

/// Most helpers the caller pre-assigns a share to at publication.
const MAX_PREASSIGNED: usize = 32;

/// Written by the caller once per launch, polled by idle helpers: one line.
#[repr(align(128))]
struct Announce {
    /// Launch counter; idle helpers spin on it, then sleep on it (futex).
    epoch: WaitWord,
    /// The current launch's [`Frame`] (type-erased).
    frame: AtomicPtr<()>,
    /// Set once by `Pool::drop`, before its final epoch bump.
    shutdown: AtomicBool,
}

/// Written by helpers when they finish, read by the waiting caller: one line.
#[repr(align(128))]
struct Completion {
    /// Tasks helpers ran (or cancelled) in the current launch; the caller
    /// sleeps on it until it reaches the number of tasks it did not run.
    helper_done: WaitWord,
    /// Helpers that ran at least one task in the current launch.
    helpers: AtomicUsize,
    /// A task of the current launch panicked.
    panicked: AtomicBool,
    /// The caller is (about to be) asleep on `helper_done`.
    caller_waiting: AtomicBool,
}

/// The state a pool's caller side and helper threads share.
pub(crate) struct Shared {
    announce: Announce,
    completion: Completion,
    /// One range of unclaimed tasks per worker (0 = the caller, `i` = helper
    /// `i`). Owners pop from the front; thieves take the back half.
    slots: Box<[Slot]>,
    /// Helpers asleep on `announce.epoch` (or about to check it and sleep).
    sleepers: Padded<AtomicU32>,
    /// Helper threads that have started (`Pool::new` waits for all of them).
    started: AtomicUsize,
    /// The message of the first kernel panic of the current launch.
    panic_msg: Mutex<Option<String>>,
    /// Serializes launches from several caller threads.
    pub(crate) launch: Mutex<()>,
    tuning: Tuning,
}

impl Shared {
    /// Shared state for `workers` workers (the caller included).
    pub(crate) fn new(tuning: Tuning, workers: usize) -> Self {
        Shared {
            announce: Announce {
                epoch: WaitWord::new(0),
                frame: AtomicPtr::new(std::ptr::null_mut()),
                shutdown: AtomicBool::new(false),
            },
            completion: Completion {
                helper_done: WaitWord::new(0),
                helpers: AtomicUsize::new(0),
                panicked: AtomicBool::new(false),
                caller_waiting: AtomicBool::new(false),
            },
            slots: (0..workers.max(1))
                .map(|_| Slot {
                    range: AtomicU64::new(range(0, 0)),
                    spinning: AtomicBool::new(false),
                })
                .collect(),
            sleepers: Padded(AtomicU32::new(0)),
            started: AtomicUsize::new(0),
            panic_msg: Mutex::new(None),
            launch: Mutex::new(()),
            tuning,
        }
    }

    // ----- caller side -------------------------------------------------------

    /// Run tasks `0..tasks` with the helpers' help; returns who ran them and
    /// whether a task panicked. Must be called with `launch` held and
    /// `1 ≤ tasks ≤ MAX_TASKS`.
    ///
    /// Returns only after every task has finished; from then on no helper can
    /// reach `f` (a helper reaches it only through a claim of this launch).
    pub(crate) fn run_pooled(
        &self,
        tasks: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> (LaunchStats, bool) {
        debug_assert!((1..=MAX_TASKS).contains(&tasks));
        let n = tasks as u32;
        let frame = Frame {
            f,
            #[cfg(loom)]
            live: loom::cell::UnsafeCell::new(true),
        };
        let a = &self.announce;
        let c = &self.completion;
        // Publish. Every slot is empty (the previous launch claimed them all)
        // and no helper holds a claim. Nothing between here and the end of
        // `wait_for_helpers` can unwind: every call of `f` is under `catch_unwind`.
        a.frame
            .store(&frame as *const Frame<'_> as *mut (), Ordering::Relaxed);
        c.helper_done.word().store(0, Ordering::Relaxed);
        c.helpers.store(0, Ordering::Relaxed);
        c.panicked.store(false, Ordering::Relaxed);
        // Share the tasks between the caller and the helpers that are spinning
        // right now (they will see the epoch within ~100 ns); the others are
        // woken below and steal. Release: a claim that reads a range (directly
        // or through steals) sees the frame and the reset counters above.
        let mut awake = [0usize; MAX_PREASSIGNED];
        let mut k = 0;
        for (i, slot) in self.slots.iter().enumerate().skip(1) {
            if k == awake.len() || k + 1 >= tasks {
                break;
            }
            if slot.spinning.load(Ordering::Relaxed) {
                awake[k] = i;
                k += 1;
            }
        }
        let shares = Split::Even {
            groups: tasks,
            tasks: k + 1,
        };
        // Highest share first; a slot that is not empty (a helper still busy
        // with a stolen range, which only happens in rare races) is skipped and
        // its share merged into the next share down, so no task is lost.
        let mut end = n;
        for (j, &i) in awake[..k].iter().enumerate().rev() {
            let start = shares.groups(j + 1).start as u32;
            if self.fill_empty(i, range(start, end)) {
                end = start;
            }
        }
        // Only the caller ever fills slot 0, and it left it empty.
        self.slots[0].range.store(range(0, end), Ordering::Release);
        let epoch = a.epoch.word().load(Ordering::Relaxed).wrapping_add(1);
        a.epoch.word().store(epoch, Ordering::Release);
        // Dekker pair with `wait_for_launch`.
        fence(Ordering::SeqCst);
        self.wake_helpers((tasks - 1).min(self.tuning.wake_limit));

        let mine = self.work(&frame);

        // Every task is claimed; the helpers ran (or cancelled) the rest.
        let helper_tasks = n - mine;
        self.wait_for_helpers(helper_tasks);
        let stats = LaunchStats {
            tasks,
            caller_tasks: mine as usize,
            helper_tasks: helper_tasks as usize,
            helpers: c.helpers.load(Ordering::Relaxed),
            helped: helper_tasks > 0,
        };
        (stats, c.panicked.load(Ordering::Relaxed))
    }

    /// Wake up to `want` sleeping helpers (a hint: correctness never depends on it).
    #[inline]
    fn wake_helpers(&self, want: usize) {
        let sleeping = self.sleepers.0.load(Ordering::Relaxed) as usize;
        let n = want.min(sleeping);
        if n > 0 {
            self.announce.epoch.wake(n as u32);
        }
    }

    /// Wait until the helpers have accounted for `target` tasks.
    fn wait_for_helpers(&self, target: u32) {
        let c = &self.completion;
        let done = c.helper_done.word();
        if done.load(Ordering::Acquire) == target {
            return;
        }
        #[cfg(not(loom))]
        {
            // A helper holding a claim is running that task: spin for it
            // (unless oversubscribed: it may not be running), then yield to it.
            if !self.tuning.oversubscribed
                && spin_until(self.tuning.spin, || done.load(Ordering::Acquire) == target)
            {
                return;
            }
            for _ in 0..OVERSUBSCRIBED_YIELDS {
                thread::yield_now();
                if done.load(Ordering::Acquire) == target {
                    return;
                }
            }
        }
        loop {
            c.caller_waiting.store(true, Ordering::Relaxed);
            // Dekker pair with `finish_visit`: we see its count, or it sees our flag.
            fence(Ordering::SeqCst);
            let d = done.load(Ordering::Acquire);
            if d == target {
                break;
            }
            c.helper_done.wait(d);
        }
        c.caller_waiting.store(false, Ordering::Relaxed);
    }

    /// The message of the launch's first panic, clearing it for the next launch.
    pub(crate) fn take_panic(&self) -> String {
        lock(&self.panic_msg)
            .take()
            .unwrap_or_else(|| "a kernel panicked".to_string())
    }

    /// Remember a kernel panic's message (the first one of a launch wins).
    fn record_panic(&self, payload: Box<dyn Any + Send>) {
        let msg = panic_message(payload.as_ref());
        // A payload whose own drop panics must not unwind out of a helper.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
        let mut slot = lock(&self.panic_msg);
        if slot.is_none() {
            *slot = Some(msg);
        }
    }

    // ----- both sides --------------------------------------------------------

    /// Claim the first task of worker `me`'s range.
    #[inline]
    fn pop(&self, me: usize) -> Option<u32> {
        let slot = &self.slots[me].range;
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let (lo, hi) = bounds(cur);
            if lo >= hi {
                return None;
            }
            // Acquire: the range came (through steals) from the caller's
            // Release publication, so this claim sees the launch's frame.
            match slot.compare_exchange_weak(
                cur,
                range(lo + 1, hi),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(lo),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Put `r` into slot `i` if that slot is empty; `false` if it is not.
    /// Release: whoever claims from `r` sees the launch's publication.
    fn fill_empty(&self, i: usize, r: u64) -> bool {
        let slot = &self.slots[i].range;
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let (lo, hi) = bounds(cur);
            if lo < hi {
                return false;
            }
            match slot.compare_exchange_weak(cur, r, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Take the back half of another worker's range. It goes into `me`'s range
    /// if that is still empty (`Stolen::Stored`); if the caller has meanwhile
    /// given `me` a share, the stolen tasks stay claimed "in hand" and the
    /// thief runs them itself (`Stolen::InHand`).
    fn steal(&self, me: usize) -> Stolen {
        let n = self.slots.len();
        for k in 1..n {
            let victim = &self.slots[(me + k) % n].range;
            let mut cur = victim.load(Ordering::Relaxed);
            loop {
                let (lo, hi) = bounds(cur);
                if lo >= hi {
                    break;
                }
                let mid = lo + (hi - lo) / 2;
                match victim.compare_exchange_weak(
                    cur,
                    range(lo, mid),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) if self.fill_empty(me, range(mid, hi)) => {
                        return Stolen::Stored(hi - mid);
                    }
                    Ok(_) => return Stolen::InHand(mid, hi),
                    Err(actual) => cur = actual,
                }
            }
        }
        Stolen::Nothing
    }

    /// The caller's share: claim and run tasks until every range is empty;
    /// returns how many tasks it ran or cancelled.
    fn work(&self, frame: &Frame<'_>) -> u32 {
        let mut ran = 0;
        loop {
            while let Some(t) = self.pop(0) {
                ran += 1 + self.run_task(frame, t);
            }
            match self.steal(0) {
                Stolen::Nothing => return ran,
                Stolen::Stored(_) => {}
                Stolen::InHand(lo, hi) => {
                    for t in lo..hi {
                        ran += 1 + self.run_task(frame, t);
                    }
                }
            }
        }
    }

    /// Run claimed task `t`. If it panics, record the panic and cancel every
    /// task not claimed yet; returns how many were cancelled (the canceller
    /// accounts for them as if it had run them).
    #[inline]
    fn run_task(&self, frame: &Frame<'_>, t: u32) -> u32 {
        match catch_unwind(AssertUnwindSafe(|| (frame.f)(t as usize))) {
            Ok(()) => 0,
            Err(payload) => {
                self.completion.panicked.store(true, Ordering::Relaxed);
                self.record_panic(payload);
                self.cancel()
            }
        }
    }

    /// Empty every range; returns how many tasks that removed.
    fn cancel(&self) -> u32 {
        let mut cancelled = 0;
        for slot in self.slots.iter() {
            let mut cur = slot.range.load(Ordering::Relaxed);
            loop {
                let (lo, hi) = bounds(cur);
                if lo >= hi {
                    break;
                }
                match slot.range.compare_exchange_weak(
                    cur,
                    range(hi, hi),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cancelled += hi - lo;
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        cancelled
    }

    // ----- helper side -------------------------------------------------------

    /// The life of helper `me` (1-based): wait for a launch, help, repeat.
    pub(crate) fn helper_main(&self, me: usize) {
        IN_POOL.with(|c| c.set(true));
        self.started.fetch_add(1, Ordering::Release);
        let mut seen = 0;
        loop {
            seen = self.wait_for_launch(me, seen);
            if self.announce.shutdown.load(Ordering::Relaxed) {
                return;
            }
            self.visit(me);
        }
    }

    /// Wait until the epoch differs from `seen` (or shutdown); returns it.
    fn wait_for_launch(&self, me: usize, seen: u32) -> u32 {
        let a = &self.announce;
        let epoch = a.epoch.word();
        #[cfg(loom)]
        {
            // The model of the spin phase: one poll while advertised as spinning
            // (so loom explores the caller pre-assigning a share to us).
            // The hint stays up through the visit, as below.
            let spinning = &self.slots[me].spinning;
            spinning.store(true, Ordering::Relaxed);
            let e = epoch.load(Ordering::Acquire);
            if e != seen {
                return e;
            }
            spinning.store(false, Ordering::Relaxed);
        }
        #[cfg(not(loom))]
        {
            let mut e = seen;
            // Acquire: seeing the new epoch makes the launch's published range
            // visible, so the first steal cannot miss it.
            let mut poll = || {
                e = epoch.load(Ordering::Acquire);
                e != seen
            };
            let spinning = &self.slots[me].spinning;
            spinning.store(true, Ordering::Relaxed);
            let found = if self.tuning.oversubscribed {
                // Spinning here would steal the core from a thread with work.
                (0..OVERSUBSCRIBED_YIELDS).any(|_| {
                    let found = poll();
                    if !found {
                        thread::yield_now();
                    }
                    found
                })
            } else {
                spin_until(self.tuning.spin, &mut poll)
            };
            if found {
                // Still awake: the hint stays up through the visit, so a launch
                // published while we look for work gives us a share too.
                return e;
            }
            spinning.store(false, Ordering::Relaxed);
        }
        loop {
            self.sleepers.0.fetch_add(1, Ordering::Relaxed);
            // Dekker pair with `run_pooled`'s publication: either we see the new
            // epoch here, or the caller sees us in `sleepers` and wakes us.
            fence(Ordering::SeqCst);
            if epoch.load(Ordering::Relaxed) == seen && !a.shutdown.load(Ordering::Relaxed) {
                // Sleeps only while the epoch still equals `seen` (atomically).
                a.epoch.wait(seen);
            }
            self.sleepers.0.fetch_sub(1, Ordering::Relaxed);
            let e = epoch.load(Ordering::Acquire);
            if e != seen || a.shutdown.load(Ordering::Relaxed) {
                return e;
            }
        }
    }

    /// Help with the current launch: steal, run, repeat until nothing is left.
    fn visit(&self, me: usize) {
        let mut ran = 0;
        let mut frame: Option<&Frame<'_>> = None;
        let mut first_steal = true;
        // SAFETY (of the dereference below): we load the frame pointer only
        // once we hold a claim on a task of the current launch, obtained by an
        // Acquire claim from (a steal chain starting at) its Release
        // publication, so the pointer is that launch's frame. Its caller counts
        // every task it did not run as a helper task and returns only once
        // `helper_done` accounts for all of them; ours are added in
        // `finish_visit`, after the last use of the frame.
        let load_frame =
            || unsafe { &*(self.announce.frame.load(Ordering::Relaxed) as *const Frame<'static>) };
        loop {
            while let Some(t) = self.pop(me) {
                let fr = *frame.get_or_insert_with(load_frame);
                ran += 1 + self.run_task(fr, t);
            }
            match self.steal(me) {
                Stolen::Nothing => break,
                Stolen::Stored(stolen) => {
                    if first_steal && stolen > 1 {
                        // Work is left: pass the wake-up on (fan-out beyond the caller's wakes).
                        self.wake_helpers(1);
                    }
                }
                Stolen::InHand(lo, hi) => {
                    let fr = *frame.get_or_insert_with(load_frame);
                    for t in lo..hi {
                        ran += 1 + self.run_task(fr, t);
                    }
                }
            }
            first_steal = false;
        }
        if let Some(fr) = frame {
            fr.check_live();
            self.finish_visit(ran);
        }
    }

    /// Account for `ran` tasks of the current launch; wake the caller if it sleeps.
    fn finish_visit(&self, ran: u32) {
        // Streamed (non-temporal) stores are not ordered by the Release below.
        packet::publish_streamed_stores();
        let c = &self.completion;
        c.helpers.fetch_add(1, Ordering::Relaxed);
        // Release: our tasks' writes happen-before the caller's return.
        c.helper_done.word().fetch_add(ran, Ordering::Release);
        // Dekker pair with `wait_for_helpers`.
        fence(Ordering::SeqCst);
        if c.caller_waiting.load(Ordering::Relaxed) {
            c.helper_done.wake(1);
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

    /// Announce shutdown with a last epoch bump and wake every helper (`Pool::drop`).
    pub(crate) fn shut_down(&self) {
        let a = &self.announce;
        a.shutdown.store(true, Ordering::Relaxed);
        a.epoch.word().fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        a.epoch.wake(u32::MAX);
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
