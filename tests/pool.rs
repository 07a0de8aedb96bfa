//! The worker pool: determinism across grains and worker counts, faults,
//! concurrency, drop. Every test runs under a watchdog; none asserts timings.

mod common;

use common::watchdog;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use taskgrain::Error;
use taskgrain::pool::{Grain, Pool, PoolConfig};
use taskgrain::simt::Tiling;

fn pool(workers: usize, oversubscribe: bool) -> Pool {
    Pool::new(PoolConfig {
        workers,
        oversubscribe,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// A deterministic kernel whose every element depends on the group, the
/// position in the span and the data, with a little float work.
fn kernel(g: usize, span: &mut [f32]) {
    for (i, y) in span.iter_mut().enumerate() {
        let x = (g * 131 + i * 7) as f32 * 0.001;
        *y = (x.sin() * 3.0 + x * x).sqrt() + g as f32;
    }
}

fn grains() -> Vec<Grain> {
    vec![
        Grain::Legacy,
        Grain::tasks(1).unwrap(),
        Grain::tasks(3).unwrap(),
        Grain::Caller,
    ]
}

#[test]
fn outputs_are_byte_identical_across_grains_and_workers() {
    let _w = watchdog(60, "determinism");
    let tilings = [
        Tiling::rows(1, 5, 1).unwrap(),
        Tiling::rows(37, 19, 4).unwrap(),
        Tiling::rows(256, 64, 1).unwrap(),
        Tiling::segmented(3, 10, 8, 3).unwrap(),
    ];
    for tiling in &tilings {
        let mut reference = vec![0.0f32; tiling.len()];
        taskgrain::simt::run_groups(tiling, 0..tiling.groups(), &mut reference, &kernel);
        let reference: Vec<u32> = reference.iter().map(|x| x.to_bits()).collect();
        for (workers, over) in [(1, false), (2, false), (8, false), (2, true), (8, true)] {
            let pool = pool(workers, over);
            for grain in grains() {
                for _rep in 0..20 {
                    let mut out = vec![f32::NAN; tiling.len()];
                    let stats = pool.launch(tiling, grain, &mut out, &kernel).unwrap();
                    let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(
                        bits, reference,
                        "{tiling:?} workers {workers} over {over} grain {grain}"
                    );
                    assert_eq!(stats.caller_tasks + stats.helper_tasks, stats.tasks);
                    assert_eq!(stats.helped, stats.helper_tasks > 0);
                }
            }
        }
    }
}

#[test]
fn each_group_runs_exactly_once_on_its_own_span() {
    let _w = watchdog(60, "exactly once");
    let tiling = Tiling::segmented(4, 33, 3, 5).unwrap();
    for (workers, over) in [(2, false), (8, true)] {
        let pool = pool(workers, over);
        for grain in grains().into_iter().chain([Grain::tasks(64).unwrap()]) {
            for _ in 0..50 {
                let runs: Vec<AtomicUsize> =
                    (0..tiling.groups()).map(|_| AtomicUsize::new(0)).collect();
                let mut out = vec![0.0f32; tiling.len()];
                let k = |g: usize, span: &mut [f32]| {
                    assert_eq!(span.len(), tiling.span(g).len());
                    runs[g].fetch_add(1, Ordering::Relaxed);
                    span.fill(g as f32);
                };
                pool.launch(&tiling, grain, &mut out, &k).unwrap();
                assert!(
                    runs.iter().all(|r| r.load(Ordering::Relaxed) == 1),
                    "grain {grain}"
                );
                for g in 0..tiling.groups() {
                    assert!(out[tiling.span(g)].iter().all(|&y| y == g as f32));
                }
            }
        }
    }
}

#[test]
fn run_tasks_runs_every_task_once() {
    let _w = watchdog(60, "run_tasks");
    for (workers, over) in [(1, false), (2, false), (8, true)] {
        let pool = pool(workers, over);
        for tasks in [0, 1, 2, 3, 64, 1000] {
            for _ in 0..20 {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                let stats = pool
                    .run_tasks(tasks, &|t| {
                        hits[t].fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap();
                assert_eq!(stats.tasks, tasks);
                assert_eq!(stats.caller_tasks + stats.helper_tasks, tasks);
                assert!(stats.helpers < pool.workers_granted());
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }
}

#[test]
fn workers_are_granted_up_to_the_cores() {
    let cores = taskgrain::pool::available_cores();
    assert!(matches!(
        Pool::new(PoolConfig::with_workers(0)),
        Err(Error::BadArgument(_))
    ));
    let p = pool(64, false);
    assert_eq!(
        (p.workers_requested(), p.workers_granted()),
        (64, cores.min(64))
    );
    let p = pool(8, true);
    assert_eq!((p.workers_requested(), p.workers_granted()), (8, 8));
    assert_eq!(p.is_oversubscribed(), cores < 8);
    let p = pool(1, false);
    assert_eq!(p.workers_granted(), 1);
}

#[test]
fn a_wrong_output_length_is_a_typed_error() {
    let pool = pool(2, false);
    let tiling = Tiling::rows(4, 4, 1).unwrap();
    let mut out = vec![0.0; 15];
    for grain in grains() {
        let r = pool.launch(&tiling, grain, &mut out, &kernel);
        assert!(matches!(r, Err(Error::ShapeMismatch(_))), "{r:?}");
    }
}

#[test]
fn a_kernel_panic_is_an_error_and_the_pool_stays_usable() {
    let _w = watchdog(60, "panic");
    quiet_expected_panics();
    let tiling = Tiling::rows(64, 4, 1).unwrap();
    for (workers, over) in [(1, false), (2, false), (8, true)] {
        let pool = pool(workers, over);
        for grain in grains() {
            for bad in [0, 17, 63] {
                let mut out = vec![0.0; tiling.len()];
                let k = |g: usize, span: &mut [f32]| {
                    if g == bad {
                        panic!("boom in group {g}");
                    }
                    span.fill(1.0);
                };
                match pool.launch(&tiling, grain, &mut out, &k) {
                    Err(Error::KernelPanicked(msg)) => {
                        assert_eq!(msg, format!("boom in group {bad}"))
                    }
                    other => panic!("expected a kernel panic, got {other:?}"),
                }
                // The pool is still fully usable afterwards.
                let mut out = vec![0.0; tiling.len()];
                pool.launch(&tiling, grain, &mut out, &kernel).unwrap();
                let mut reference = vec![0.0; tiling.len()];
                taskgrain::simt::run_groups(&tiling, 0..tiling.groups(), &mut reference, &kernel);
                assert_eq!(out, reference);
            }
        }
        // Panics with a non-string payload, from run_tasks, on several threads at once.
        let r = pool.run_tasks(64, &|t| {
            if t % 2 == 1 {
                std::panic::panic_any(t);
            }
        });
        assert!(matches!(r, Err(Error::KernelPanicked(_))), "{r:?}");
        assert!(pool.run_tasks(64, &|_| {}).is_ok());
    }
}

/// Silence the panics these tests provoke on purpose (message "boom…" or a
/// `usize` payload); report every other panic as usual.
fn quiet_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let expected = p.downcast_ref::<usize>().is_some()
                || p.downcast_ref::<String>()
                    .is_some_and(|s| s.starts_with("boom"));
            if !expected {
                prev(info);
            }
        }));
    });
}

#[test]
fn a_launch_waits_for_slow_helpers() {
    let _w = watchdog(60, "slow helpers");
    let pool = pool(2, false);
    for _ in 0..20 {
        let done = AtomicUsize::new(0);
        pool.run_tasks(4, &|t| {
            if t % 2 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            done.fetch_add(1, Ordering::Release);
        })
        .unwrap();
        assert_eq!(done.load(Ordering::Acquire), 4);
    }
}

#[test]
fn concurrent_callers_are_serialized_safely() {
    let _w = watchdog(120, "concurrent callers");
    for (workers, over) in [(2, false), (8, true)] {
        let pool = Arc::new(pool(workers, over));
        let tiling = Tiling::rows(50, 8, 2).unwrap();
        let mut reference = vec![0.0f32; tiling.len()];
        taskgrain::simt::run_groups(&tiling, 0..tiling.groups(), &mut reference, &kernel);
        std::thread::scope(|s| {
            for c in 0..4 {
                let pool = &pool;
                let reference = &reference;
                s.spawn(move || {
                    for i in 0..300 {
                        let grain = grains()[(i + c) % 4];
                        let mut out = vec![0.0f32; tiling.len()];
                        pool.launch(&tiling, grain, &mut out, &kernel).unwrap();
                        assert_eq!(&out, reference);
                    }
                });
            }
        });
    }
}

#[test]
fn nested_launches_run_inline() {
    let _w = watchdog(60, "nested");
    let pool = pool(2, false);
    let total = AtomicUsize::new(0);
    pool.run_tasks(8, &|_| {
        let inner = pool.run_tasks(4, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
        assert!(!inner.unwrap().helped);
    })
    .unwrap();
    assert_eq!(total.load(Ordering::Relaxed), 32);
}
