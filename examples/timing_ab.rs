//! Two plans of an operator's launch chain (fused by default), paired in
//! rounds and timed two ways in each round: every call alone (a clock read
//! per call, as refinement and the oracle time calls) and in samples of
//! back-to-back calls lasting 5 µs (as `bench` and `run` time calls under
//! 5 µs). Shows what the clock's steps do
//! to a sub-µs ratio: on a host whose clock moves in 10 ns steps, a call
//! timed alone reads 0.29 or 0.30 µs, and the paired ratio jumps by 3 %.
//!
//! `cargo run --release --example timing_ab -- OP SHAPE PLAN_A PLAN_B [rounds] [fused|unfused]`
//! where a plan is `local,block[,grain]` per launch of the graph, joined by
//! `/` (grain: `caller`, the default, 0 = legacy, k = tasks of k groups), e.g.
//! `rmsnorm 17x65 32,17 72,17` or `gelu_residual 64x256 16,8,1/8,64 16,8,1/32,32,0 12 unfused`;
//! 2 workers, the calling thread pinned (after the pool is built), 12 rounds
//! by default. Ratios are B / A.

#[allow(dead_code)] // only `common::pinned_runtime` and `common::plans`
mod common;

use taskgrain::Error;
use taskgrain::bench::report::stats::{paired_ratios, summarize};
use taskgrain::bench::timing::{SAMPLE_US, calls_for, median, time_calls, time_samples};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};

/// Samples per candidate per round, in each of the two methods.
const SAMPLES: usize = 50;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        return Err(Error::BadArgument(
            "usage: timing_ab OP SHAPE PLAN_A PLAN_B [rounds] [fused|unfused]".into(),
        ));
    }
    let op: Op = args[1].parse()?;
    let shape = Shape::parse(op, &args[2])?;
    let plans = [common::plans(&args[3])?, common::plans(&args[4])?];
    let rounds: usize = args.get(5).and_then(|r| r.parse().ok()).unwrap_or(12);
    let fused = args.get(6).is_none_or(|f| f != "unfused");
    let (rt, _pin) = common::pinned_runtime(2)?;
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let (tensor_array, count) = inputs.view().tensors();
    let tensors = &tensor_array[..count];
    let graph = rt.graph(op, &shape, fused)?;
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let mut failure = None;
    let mut call = |i: usize| {
        if let Err(e) = rt.run_planned(&graph, tensors, &mut out, &plans[i]) {
            failure.get_or_insert(e);
        }
    };
    let single = (0..2)
        .map(|i| median(&time_calls(100, 20, || call(i))))
        .fold(f64::INFINITY, f64::min);
    let per_sample = calls_for(single, SAMPLE_US);
    println!(
        "{op} {shape}: B = {} / A = {}, {per_sample} calls per batched sample",
        args[4], args[3]
    );
    // p50s[method][plan]: one per round.
    let mut p50s = vec![vec![Vec::new(); 2]; 2];
    for round in 0..rounds {
        for i in [round % 2, 1 - round % 2] {
            p50s[0][i].push(median(&time_calls(0, SAMPLES, || call(i))));
            p50s[1][i].push(median(&time_samples(0, SAMPLES, per_sample, || call(i))));
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    for (method, p) in ["each call alone", "batched"].iter().zip(&p50s) {
        let ratios = paired_ratios(&p[1], &p[0]);
        let s = summarize(&ratios);
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "{method:>16}: A {:.3} µs, B {:.3} µs, B/A {:.3} [{:.3}, {:.3}]; rounds {}",
            median(&p[0]),
            median(&p[1]),
            s.median.unwrap_or(f64::NAN),
            s.min.unwrap_or(f64::NAN),
            s.max.unwrap_or(f64::NAN),
            list.join(" ")
        );
    }
    Ok(())
}
