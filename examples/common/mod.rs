//! What the paired A/B examples share: their command line
//! (`[workers] [rounds] [calls] [op:shape ...]`), their runtime, and the p50 of
//! a fallible call. (`timing_ab` and `phases` use the runtime alone.)

use taskgrain::bench::timing::{median, time_calls};
use taskgrain::ops::{Op, Shape};
use taskgrain::pool::PoolConfig;
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
