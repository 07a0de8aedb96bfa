//! `taskgrain bench dispatch`: what it costs to hand a near-empty launch to
//! workers, for our pool and for the alternatives a Rust user would reach for.
//!
//! Every launch runs `tasks` tasks; a task touches one cache line (its own) and
//! nothing else, so the time measured is dispatch: publishing, waking, claiming
//! and waiting. Mechanisms:
//!
//! - `caller`: the calling thread runs the tasks in a loop (the floor);
//! - `pool`: [`Pool::run_tasks`], the caller taking part (a launch of one task
//!   runs inline by design, so its row is the caller's cost plus a few checks);
//! - `rayon`: a `rayon::ThreadPool` with the granted number of threads, called
//!   from outside it as a library user would: `install(|| (0..tasks).into_par_iter()
//!   .for_each(..))`; the calling thread blocks while rayon's workers run;
//! - `thread-scope`: `std::thread::scope` spawning `min(tasks, workers)` threads
//!   per call that claim tasks from a counter; the calling thread only waits.
//!
//! Splits: 1 task, one task per granted worker, 64 tasks. Conditions: `hot`
//! (launches back to back), `idle` (a 2 ms sleep, not timed, before each
//! launch, so workers have gone to sleep), `oversubscribed` (hot, with 8
//! workers on this machine's cores; the pool built with `oversubscribe`).
//!
//! `help_pct` is measured the same way for every mechanism: the share of
//! launches in which at least one task ran on a thread other than the calling
//! thread. For `rayon` and `thread-scope` the calling thread never runs a task,
//! so it is 100 by construction; for `caller` it is 0.
//!
//! `idle_cpu_pct` is the CPU time the pool's helper threads (found by their
//! thread name, `taskgrain-*`) used during the second after a launch, as a
//! percentage of one core (from `/proc/self/task/*/schedstat`, Linux only).

use crate::error::{Error, Result};
use crate::pool::CallerPin;
use crate::pool::{Pool, PoolConfig, available_cores};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What to measure and how long. [`Default`] keeps the run under ~20 s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchConfig {
    /// Workers requested for the `hot` and `idle` conditions (the caller counts as one).
    pub workers: usize,
    /// Workers for the `oversubscribed` condition (granted even beyond the cores).
    pub oversubscribed_workers: usize,
    /// Timed back-to-back launches per row (`hot`, `oversubscribed`).
    pub hot_calls: usize,
    /// Timed launches per `thread-scope` row under `hot`/`oversubscribed` (it spawns threads per call).
    pub spawn_calls: usize,
    /// Timed launches per row under `idle`, each after `idle_gap`.
    pub idle_calls: usize,
    /// Sleep before each `idle` launch.
    pub idle_gap: Duration,
    /// Window over which the pool's idle CPU use is measured.
    pub idle_cpu_window: Duration,
    /// Pin the pool's helpers (see [`PoolConfig::pin`]).
    pub pin: bool,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            workers: available_cores(),
            oversubscribed_workers: 8,
            hot_calls: 2000,
            spawn_calls: 400,
            idle_calls: 150,
            idle_gap: Duration::from_millis(2),
            idle_cpu_window: Duration::from_secs(1),
            pin: true,
        }
    }
}

/// One mechanism × split × condition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchRow {
    /// `caller`, `pool`, `rayon` or `thread-scope`.
    pub mechanism: String,
    /// Tasks per launch.
    pub tasks: usize,
    /// `hot`, `idle` or `oversubscribed`.
    pub condition: String,
    /// Median launch latency, µs.
    pub p50_us: f64,
    /// 90th percentile launch latency, µs.
    pub p90_us: f64,
    /// Share of launches (%) in which a thread other than the caller ran ≥ 1 task.
    pub help_pct: f64,
}

/// The result of [`measure_dispatch`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchReport {
    /// Workers requested for `hot` and `idle`.
    pub workers_requested: usize,
    /// Workers granted for `hot` and `idle`.
    pub workers_granted: usize,
    /// CPU use (% of one core) of the pool's helpers during one idle second
    /// after a launch; `null` where it cannot be measured.
    pub idle_cpu_pct: Option<f64>,
    /// Every measured row.
    pub rows: Vec<DispatchRow>,
}

impl DispatchReport {
    /// The row for `mechanism`, `condition` and `tasks`, if measured.
    pub fn row(&self, mechanism: &str, condition: &str, tasks: usize) -> Option<&DispatchRow> {
        self.rows
            .iter()
            .find(|r| r.mechanism == mechanism && r.condition == condition && r.tasks == tasks)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Condition {
    Hot,
    Idle,
    Oversubscribed,
}

impl Condition {
    fn name(self) -> &'static str {
        match self {
            Condition::Hot => "hot",
            Condition::Idle => "idle",
            Condition::Oversubscribed => "oversubscribed",
        }
    }
}

/// A way to run `tasks` tasks.
enum Mechanism<'a> {
    Caller,
    Pool(&'a Pool),
    Rayon(&'a rayon::ThreadPool),
    ThreadScope(usize),
}

impl Mechanism<'_> {
    fn name(&self) -> &'static str {
        match self {
            Mechanism::Caller => "caller",
            Mechanism::Pool(_) => "pool",
            Mechanism::Rayon(_) => "rayon",
            Mechanism::ThreadScope(_) => "thread-scope",
        }
    }

    #[inline]
    fn run(&self, tasks: usize, body: &(dyn Fn(usize) + Sync)) -> Result<()> {
        match self {
            Mechanism::Caller => (0..tasks).for_each(body),
            Mechanism::Pool(p) => {
                p.run_tasks(tasks, body)?;
            }
            Mechanism::Rayon(r) => r.install(|| (0..tasks).into_par_iter().for_each(body)),
            Mechanism::ThreadScope(workers) => {
                let next = AtomicUsize::new(0);
                std::thread::scope(|s| {
                    for _ in 0..tasks.min(*workers) {
                        s.spawn(|| {
                            loop {
                                let t = next.fetch_add(1, Ordering::Relaxed);
                                if t >= tasks {
                                    break;
                                }
                                body(t);
                            }
                        });
                    }
                });
            }
        }
        Ok(())
    }
}

thread_local! {
    /// Set on the measuring thread: a task that runs elsewhere was "helped".
    static ON_CALLER: Cell<bool> = const { Cell::new(false) };
}

/// One cache line per task, plus the "someone else ran a task" flag.
struct Probe {
    lines: Vec<Line>,
    helped: AtomicBool,
}

#[repr(align(128))]
struct Line(AtomicU64);

impl Probe {
    fn new() -> Self {
        Probe {
            lines: (0..64).map(|_| Line(AtomicU64::new(0))).collect(),
            helped: AtomicBool::new(false),
        }
    }

    #[inline]
    fn touch(&self, t: usize) {
        let line = &self.lines[t % self.lines.len()].0;
        line.store(
            line.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        if !ON_CALLER.with(|c| c.get()) && !self.helped.load(Ordering::Relaxed) {
            self.helped.store(true, Ordering::Relaxed);
        }
    }
}

/// Time `calls` launches of `tasks` tasks; returns (p50 µs, p90 µs, help %).
fn time_row(
    mech: &Mechanism<'_>,
    tasks: usize,
    calls: usize,
    gap: Option<Duration>,
    probe: &Probe,
) -> Result<(f64, f64, f64)> {
    let body = |t: usize| probe.touch(t);
    let warmup = if gap.is_some() { 3 } else { 100.min(calls) };
    for _ in 0..warmup {
        mech.run(tasks, &body)?;
    }
    let mut samples = Vec::with_capacity(calls);
    let mut helped = 0usize;
    for _ in 0..calls {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        probe.helped.store(false, Ordering::Relaxed);
        let t0 = Instant::now();
        mech.run(tasks, &body)?;
        let dt = t0.elapsed();
        samples.push(dt.as_secs_f64() * 1e6);
        helped += usize::from(probe.helped.load(Ordering::Relaxed));
    }
    samples.sort_by(f64::total_cmp);
    let help_pct = 100.0 * helped as f64 / calls.max(1) as f64;
    Ok((
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        help_pct,
    ))
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn rayon_pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("bench-rayon-{i}"))
        .build()
        .map_err(|e| Error::Pool(format!("cannot build the rayon pool: {e}")))
}

/// Let threads of a dropped pool finish exiting before the next measurement.
fn settle() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Measure dispatch latency of every mechanism, split and condition, and the
/// pool's idle CPU use, in one run (~10–20 s with the default config).
pub fn measure_dispatch(cfg: &DispatchConfig) -> Result<DispatchReport> {
    if cfg.hot_calls == 0 || cfg.idle_calls == 0 || cfg.spawn_calls == 0 {
        return Err(Error::BadArgument(
            "dispatch: calls per row must be at least 1".into(),
        ));
    }
    let was_caller = ON_CALLER.with(|c| c.replace(true));
    let result = measure(cfg);
    ON_CALLER.with(|c| c.set(was_caller));
    result
}

fn measure(cfg: &DispatchConfig) -> Result<DispatchReport> {
    let probe = Probe::new();
    let mut rows = Vec::new();
    let pool_cfg = |workers, oversubscribe| PoolConfig {
        workers,
        oversubscribe,
        pin: cfg.pin,
        ..PoolConfig::default()
    };

    // Idle CPU first, while no other thread pool of this run exists.
    let pool = Pool::new(pool_cfg(cfg.workers, false))?;
    let (requested, granted) = (pool.workers_requested(), pool.workers_granted());
    let idle_cpu_pct = measure_idle_cpu(&pool, cfg.idle_cpu_window, &probe)?;

    for condition in [Condition::Hot, Condition::Idle, Condition::Oversubscribed] {
        let (workers, gap, calls) = match condition {
            Condition::Hot => (granted, None, cfg.hot_calls),
            Condition::Idle => (granted, Some(cfg.idle_gap), cfg.idle_calls),
            Condition::Oversubscribed => (cfg.oversubscribed_workers, None, cfg.hot_calls),
        };
        let splits = [1, workers, 64];
        let mut push = |mech: &Mechanism<'_>, calls: usize| -> Result<()> {
            for &tasks in &splits {
                let (p50, p90, help) = time_row(mech, tasks, calls, gap, &probe)?;
                rows.push(DispatchRow {
                    mechanism: mech.name().to_string(),
                    tasks,
                    condition: condition.name().to_string(),
                    p50_us: p50,
                    p90_us: p90,
                    help_pct: help,
                });
            }
            Ok(())
        };
        push(&Mechanism::Caller, calls)?;
        {
            let over;
            let p = if condition == Condition::Oversubscribed {
                over = Pool::new(pool_cfg(workers, true))?;
                &over
            } else {
                &pool
            };
            // The pool leaves the first allowed CPU to the caller and pins its
            // helpers to the others, so the measuring thread takes that CPU (as
            // the report harness does): left free, the scheduler sometimes parks
            // it on the helper's CPU, where the two time-share and the helper
            // never runs a task (help 0 % instead of 100 %). Pinned after the
            // pools exist, so their view of the allowed CPUs is unchanged.
            let _pin = if cfg.pin && condition != Condition::Oversubscribed {
                CallerPin::first_allowed()
            } else {
                CallerPin::none()
            };
            push(&Mechanism::Pool(p), calls)?;
        }
        settle();
        {
            let r = rayon_pool(workers)?;
            push(&Mechanism::Rayon(&r), calls)?;
        }
        settle();
        let spawn_calls = if gap.is_some() {
            calls
        } else {
            cfg.spawn_calls
        };
        push(&Mechanism::ThreadScope(workers), spawn_calls)?;
    }
    drop(pool);
    Ok(DispatchReport {
        workers_requested: requested,
        workers_granted: granted,
        idle_cpu_pct,
        rows,
    })
}

/// CPU use (% of one core) of the pool's helpers in the `window` after a launch.
fn measure_idle_cpu(pool: &Pool, window: Duration, probe: &Probe) -> Result<Option<f64>> {
    let body = |t: usize| probe.touch(t);
    pool.run_tasks(64, &body)?;
    let Some(before) = helper_cpu_ns() else {
        return Ok(None);
    };
    let t0 = Instant::now();
    std::thread::sleep(window);
    let wall = t0.elapsed().as_nanos() as f64;
    let after = helper_cpu_ns().unwrap_or(before);
    Ok(Some(100.0 * after.saturating_sub(before) as f64 / wall))
}

/// Total CPU time (ns) of this process's threads named `taskgrain-*`, from
/// `/proc/self/task/*/schedstat` (or `stat` ticks if schedstat is missing).
fn helper_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = entry.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("taskgrain-") {
            continue;
        }
        total += match std::fs::read_to_string(dir.join("schedstat")) {
            Ok(s) => s.split_whitespace().next()?.parse::<u64>().ok()?,
            Err(_) => stat_ticks_ns(&std::fs::read_to_string(dir.join("stat")).ok()?)?,
        };
    }
    Some(total)
}

/// utime + stime of a `/proc/.../stat` line, in ns (assuming 100 ticks/s).
fn stat_ticks_ns(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// The report as a Markdown table, with the headline ratios.
pub fn render_markdown(r: &DispatchReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Dispatch latency (near-empty launches)\n");
    let _ = writeln!(
        s,
        "workers requested {}, granted {}; pool idle CPU: {}\n",
        r.workers_requested,
        r.workers_granted,
        r.idle_cpu_pct.map_or("n/a".to_string(), |c| format!(
            "{c:.3} % of a core over 1 s after a launch"
        ))
    );
    let _ = writeln!(
        s,
        "| condition | mechanism | tasks | p50 µs | p90 µs | help % |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|");
    for row in &r.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.2} | {:.0} |",
            row.condition, row.mechanism, row.tasks, row.p50_us, row.p90_us, row.help_pct
        );
    }
    let ratios: Vec<String> = r
        .rows
        .iter()
        .filter(|p| p.mechanism == "pool" && p.condition == "idle")
        .filter_map(|p| {
            let ray = r.row("rayon", "idle", p.tasks)?;
            Some(format!("{} tasks {:.3}", p.tasks, p.p50_us / ray.p50_us))
        })
        .collect();
    if !ratios.is_empty() {
        let _ = writeln!(s, "\nidle p50, pool / rayon: {}", ratios.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.9), 9.0);
        assert_eq!(percentile(&[3.0], 0.9), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn stat_ticks_parse() {
        let line = "123 (taskgrain-1) S 1 2 3 4 5 6 7 8 9 10 7 3 0 0";
        assert_eq!(stat_ticks_ns(line), Some(100_000_000));
    }
}
