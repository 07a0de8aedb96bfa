//! Paired A/B of fusion on against fusion off, as a user runs it: the library's
//! default path (`auto`, refined after a few calls), each launch of the unfused
//! graph planned on its own. Rounds interleave the two, each timing N calls;
//! the paired ratio is unfused p50 / fused p50 of the same round.
//!
//! `cargo run --release --example fusion_ab -- [workers] [rounds] [calls] [op:shape ...]`
//! (default: 2 workers, 7 rounds, 20 calls, the rows).

use taskgrain::bench::report::stats::{paired_ratios, summarize};
use taskgrain::bench::timing::{median, time_calls};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::pool::PoolConfig;
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};

const ROWS: [&str; 6] = [
    "masked_softmax:4096x1024",
    "swiglu:4096x1024",
    "gelu_residual:4096x1024",
    "attention:1x4x2x16x32x16x16",
    "attention:1x4x1x64x128x32x32",
    "attention:1x8x8x512x2048x64x64",
];

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (workers, rounds, calls) = (num(1, 2), num(2, 7), num(3, 20));
    let rows: Vec<String> = if args.len() > 4 {
        args[4..].to_vec()
    } else {
        ROWS.iter().map(|s| s.to_string()).collect()
    };
    let rt = Runtime::new(RuntimeConfig {
        pool: PoolConfig::with_workers(workers),
        width: Some(taskgrain::packet::Backend::best(8).width()),
        ..RuntimeConfig::default()
    })?;
    println!(
        "workers {}/{} granted, {rounds} rounds × {calls} calls, {}",
        rt.pool().workers_granted(),
        workers,
        rt.backend().name()
    );
    println!("op shape | launches off/on | unfused µs | fused µs | unfused/fused (range)");
    for row in rows {
        let (op, dims) = row.split_once(':').unwrap_or((row.as_str(), ""));
        let op: Op = op.parse()?;
        let shape = Shape::parse(op, dims)?;
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let mut out = vec![0.0f32; ops::output_len(&shape)];
        let opts = |fusion| RunOptions {
            fusion,
            ..RunOptions::default()
        };
        let mut call = |fusion: bool| rt.run(inputs.view(), &shape, &mut out, &opts(fusion));
        // Past refinement for both, so the rounds time the kept plans.
        for _ in 0..4 {
            call(false)?;
            call(true)?;
        }
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            for fusion in if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            } {
                let mut failure = None;
                let t = median(&time_calls(1, calls, || {
                    if let Err(e) = call(fusion) {
                        failure = Some(e);
                    }
                }));
                if let Some(e) = failure {
                    return Err(e);
                }
                if fusion { on.push(t) } else { off.push(t) }
            }
        }
        let s = summarize(&paired_ratios(&off, &on));
        let l = |f| rt.graph(op, &shape, f).map(|g| g.launches());
        println!(
            "{op} {shape} | {}/{} | {:.1} | {:.1} | {:.2} ({:.2}–{:.2})",
            l(false)?,
            l(true)?,
            median(&off),
            median(&on),
            s.median.unwrap_or(f64::NAN),
            s.min.unwrap_or(f64::NAN),
            s.max.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
