//! A timeline of one launch in the Chrome trace-event format (load it in
//! Perfetto or chrome://tracing): which worker ran which work-group, when, and
//! where each worker sat idle.
//!
//! It works by wrapping the kernel closure handed to the pool: each group's
//! start and end time and the running thread's worker index are stored into a
//! buffer preallocated with one slot per group (each group runs exactly once, so
//! each slot is written once). The pool itself is not changed.

use crate::error::Result;
use crate::pool::{Grain, LaunchStats};
use crate::runtime::Runtime;
use crate::simt::{GroupFn, Tiling};
use serde_json::{Value, json};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const NOT_RUN: u64 = u64::MAX;

/// Idle gaps shorter than this (ns) are not drawn: between consecutive groups of
/// one task they are the loop and the clock reads themselves.
pub const MIN_IDLE_NS: u64 = 500;

struct Slot {
    worker: AtomicU64,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

thread_local! {
    static WORKER: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The pool's index of the current thread: helpers are named `taskgrain-<k>`;
/// any other thread is the caller, worker 0.
fn worker_index() -> u64 {
    WORKER.with(|c| {
        c.get().unwrap_or_else(|| {
            let i = std::thread::current()
                .name()
                .and_then(|n| n.strip_prefix("taskgrain-"))
                .and_then(|k| k.parse().ok())
                .unwrap_or(0);
            c.set(Some(i));
            i
        })
    })
}

/// One group as it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSpan {
    /// Work-group index.
    pub group: usize,
    /// Worker that ran it (0 = the calling thread).
    pub worker: usize,
    /// Start, ns after the launch began.
    pub start_ns: u64,
    /// End, ns after the launch began.
    pub end_ns: u64,
}

/// The record of one traced launch.
#[derive(Clone, Debug)]
pub struct LaunchTrace {
    /// Every group, in group order.
    pub groups: Vec<GroupSpan>,
    /// The launch's duration as the caller saw it, ns.
    pub launch_ns: u64,
    /// Workers granted by the pool.
    pub workers: usize,
    /// The grain used.
    pub grain: Grain,
    /// The pool's own account of the launch.
    pub stats: LaunchStats,
    /// What ran, e.g. `rmsnorm/avx2-w8/full-packet`.
    pub variant: String,
}

/// Runs `launch` once on `rt` with `grain`, recording every group.
pub fn trace_launch(
    rt: &Runtime,
    tiling: &Tiling,
    run_group: &GroupFn<'_>,
    variant: String,
    grain: Grain,
    out: &mut [f32],
) -> Result<LaunchTrace> {
    let groups = tiling.groups();
    let slots: Vec<Slot> = (0..groups)
        .map(|_| Slot {
            worker: AtomicU64::new(0),
            start_ns: AtomicU64::new(NOT_RUN),
            end_ns: AtomicU64::new(NOT_RUN),
        })
        .collect();
    worker_index();
    let base = Instant::now();
    let ns = || base.elapsed().as_nanos() as u64;
    let stats = rt.pool().launch(tiling, grain, out, &|g, o| {
        let w = worker_index();
        let s = ns();
        run_group(g, o);
        let e = ns();
        let slot = &slots[g];
        slot.worker.store(w, Ordering::Relaxed);
        slot.start_ns.store(s, Ordering::Relaxed);
        slot.end_ns.store(e, Ordering::Relaxed);
    })?;
    let launch_ns = ns();
    Ok(LaunchTrace {
        groups: slots
            .iter()
            .enumerate()
            .map(|(g, s)| GroupSpan {
                group: g,
                worker: s.worker.load(Ordering::Relaxed) as usize,
                start_ns: s.start_ns.load(Ordering::Relaxed),
                end_ns: s.end_ns.load(Ordering::Relaxed),
            })
            .collect(),
        launch_ns,
        workers: rt.pool().workers_granted(),
        grain,
        stats,
        variant,
    })
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

impl LaunchTrace {
    /// Workers that ran at least one group.
    pub fn active_workers(&self) -> usize {
        let mut seen: Vec<usize> = self.groups.iter().map(|g| g.worker).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Busy time of `worker` inside the launch, ns.
    pub fn busy_ns(&self, worker: usize) -> u64 {
        self.groups
            .iter()
            .filter(|g| g.worker == worker)
            .map(|g| g.end_ns.saturating_sub(g.start_ns))
            .sum()
    }

    /// The Chrome trace-event JSON: one track per worker with an `X` event per
    /// group and per idle gap (of at least [`MIN_IDLE_NS`]), plus a `launch`
    /// track spanning the whole call. Times are µs from the launch's start.
    pub fn to_chrome_json(&self, title: &str) -> Value {
        const PID: u64 = 1;
        let launch_tid = self.workers.max(self.active_workers()) as u64 + 1;
        let mut ev: Vec<Value> = vec![
            json!({"name": "process_name", "ph": "M", "pid": PID, "args": {"name": title}}),
            json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": launch_tid,
                   "args": {"name": "launch"}}),
            json!({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": launch_tid,
                   "args": {"sort_index": -1}}),
            json!({"name": format!("launch ({} groups, grain {}, {} tasks)",
                                   self.groups.len(), self.grain, self.stats.tasks),
                   "cat": "launch", "ph": "X", "pid": PID, "tid": launch_tid,
                   "ts": 0.0, "dur": us(self.launch_ns),
                   "args": {"variant": self.variant, "grain": self.grain.as_u32(),
                            "tasks": self.stats.tasks, "caller_tasks": self.stats.caller_tasks,
                            "helper_tasks": self.stats.helper_tasks}}),
        ];
        let workers = self
            .workers
            .max(self.groups.iter().map(|g| g.worker + 1).max().unwrap_or(1));
        for w in 0..workers {
            let name = if w == 0 {
                "worker 0 (caller)".to_string()
            } else {
                format!("worker {w} (taskgrain-{w})")
            };
            ev.push(
                json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": w,
                           "args": {"name": name}}),
            );
            ev.push(
                json!({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": w,
                           "args": {"sort_index": w}}),
            );
            let mut mine: Vec<&GroupSpan> = self
                .groups
                .iter()
                .filter(|g| g.worker == w && g.start_ns != NOT_RUN)
                .collect();
            mine.sort_by_key(|g| g.start_ns);
            let mut t = 0u64;
            for g in &mine {
                if g.start_ns >= t + MIN_IDLE_NS {
                    ev.push(idle(PID, w, t, g.start_ns));
                }
                ev.push(
                    json!({"name": format!("group {}", g.group), "cat": "group", "ph": "X",
                               "pid": PID, "tid": w, "ts": us(g.start_ns),
                               "dur": us(g.end_ns.saturating_sub(g.start_ns)),
                               "args": {"group": g.group, "worker": w}}),
                );
                t = t.max(g.end_ns);
            }
            if self.launch_ns >= t + MIN_IDLE_NS {
                ev.push(idle(PID, w, t, self.launch_ns));
            }
        }
        json!({
            "traceEvents": ev,
            "displayTimeUnit": "ns",
            "otherData": {
                "variant": self.variant,
                "groups": self.groups.len(),
                "workers_granted": self.workers,
                "grain": self.grain.as_u32(),
                "tasks": self.stats.tasks,
                "launch_us": us(self.launch_ns),
            }
        })
    }
}

fn idle(pid: u64, w: usize, from: u64, to: u64) -> Value {
    json!({"name": "idle", "cat": "idle", "ph": "X", "pid": pid, "tid": w,
           "ts": us(from), "dur": us(to - from), "cname": "grey"})
}
