//! What the paired A/B examples share: their command line
//! (`[workers] [rounds] [calls] [op:shape ...]`), their runtime, and the p50 of
//! a fallible call. (`timing_ab` and `phases` use the pinned runtime and the
//! plan parser alone.)

use taskgrain::bench::timing::{median, time_calls};
use taskgrain::ops::{LaunchConfig, Op, Shape};
use taskgrain::pool::{CallerPin, Grain, PoolConfig};
use taskgrain::runtime::{Runtime, RuntimeConfig};

/// The parsed command line.
pub struct Args {
    pub rounds: usize,
    pub calls: usize,
    pub rows: Vec<(Op, Shape)>,
}

/// Parses the command line (defaults: 2 workers, 7 rounds, `calls` calls,
/// `rows`), builds the runtime (widest packet ≤ 8) and prints the header line.
pub fn setup(calls: usize, rows: &[&str]) -> Result<(Args, Runtime), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (workers, rounds, calls) = (num(1, 2), num(2, 7), num(3, calls));
    let given: Vec<&str> = args.iter().skip(4).map(String::as_str).collect();
    let rows = if given.is_empty() { rows } else { &given[..] }
        .iter()
        .map(|row| {
            let (op, dims) = row.split_once(':').unwrap_or((row, ""));
            let op: Op = op.parse()?;
            Ok((op, Shape::parse(op, dims)?))
        })
        .collect::<Result<_, taskgrain::Error>>()?;
    let rt = runtime(workers)?;
    println!(
        "workers {}/{} granted, {rounds} rounds × {calls} calls, {}",
        rt.pool().workers_granted(),
        workers,
        rt.backend().name()
    );
    Ok((
        Args {
            rounds,
            calls,
            rows,
        },
        rt,
    ))
}

/// The examples' runtime: `workers` workers, the widest packet ≤ 8 lanes.
pub fn runtime(workers: usize) -> Result<Runtime, taskgrain::Error> {
    Runtime::new(RuntimeConfig {
        pool: PoolConfig::with_workers(workers),
        width: Some(taskgrain::packet::Backend::best(8).width()),
        ..RuntimeConfig::default()
    })
}

/// [`runtime`], and the calling thread pinned for as long as the pin lives,
/// in that order: the pool spreads its helpers over the CPUs its builder may
/// use, so a caller pinned first would share its CPU with a helper.
#[allow(dead_code)] // `timing_ab` and `phases` alone
pub fn pinned_runtime(workers: usize) -> Result<(Runtime, CallerPin), taskgrain::Error> {
    let rt = runtime(workers)?;
    Ok((rt, CallerPin::first_allowed()))
}

/// The median µs of `calls` timed calls of `f`, or the first error one returned.
pub fn p50(
    calls: usize,
    mut f: impl FnMut() -> Result<(), taskgrain::Error>,
) -> Result<f64, taskgrain::Error> {
    let mut failure = None;
    let t = median(&time_calls(1, calls, || {
        if let Err(e) = f() {
            failure.get_or_insert(e);
        }
    }));
    failure.map_or(Ok(t), Err)
}

/// Parses a plan of a launch chain: one `local,block[,grain]` per launch,
/// joined by `/` (grain: `caller`, the default, 0 = legacy, k = tasks of k
/// groups), e.g. `8,3/1024,3,caller` or `32,32,0`.
#[allow(dead_code)] // `timing_ab` and `phases` alone
pub fn plans(s: &str) -> Result<Vec<(LaunchConfig, Grain)>, taskgrain::Error> {
    let bad = || {
        taskgrain::Error::BadArgument(format!(
            "plan {s:?}: expected local,block[,grain] per launch, joined by /"
        ))
    };
    s.split('/')
        .map(|launch| {
            let parts: Vec<&str> = launch.split(',').collect();
            let (local, block, grain) = match parts[..] {
                [l, b] => (l, b, "caller"),
                [l, b, g] => (l, b, g),
                _ => return Err(bad()),
            };
            let config = LaunchConfig {
                local: local.parse().map_err(|_| bad())?,
                block: block.parse().map_err(|_| bad())?,
            };
            Ok((config, grain.parse()?))
        })
        .collect()
}
