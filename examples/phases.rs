//! The host's speed over time: one or two plans of a launch chain, on the
//! caller (pinned), timed in alternating batches of about 100 µs for a while;
//! prints, per window, each plan's fastest batch (µs per call) and B / A.
//! Shows whether the machine runs in phases, how long they last (a
//! calibration samples one stretch of them), and whether two plans' ratio
//! depends on the phase.
//!
//! `cargo run --release --example phases -- OP SHAPE PLAN_A [PLAN_B] [seconds] [window_ms] [fused]`
//! where a plan is one `local,block` per launch of the graph, joined by `/`
//! (the pool has one worker: every launch runs on the caller), e.g.
//! `masked_softmax 3x1024 8,3/8,3 8,3/1024,3 20 100 unfused`.

#[allow(dead_code)] // only `common::pinned_runtime` and `common::plans`
mod common;

use std::time::Instant;
use taskgrain::Error;
use taskgrain::ops::{self, Op, OwnedInputs, Shape};

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err(Error::BadArgument(
            "usage: phases OP SHAPE PLAN_A [PLAN_B] [seconds] [window_ms] [fused|unfused]".into(),
        ));
    }
    let op: Op = args[1].parse()?;
    let shape = Shape::parse(op, &args[2])?;
    let mut plans = vec![common::plans(&args[3])?];
    let mut rest = &args[4..];
    if let Some(b) = rest.first().filter(|b| b.contains(',')) {
        plans.push(common::plans(b)?);
        rest = &rest[1..];
    }
    let seconds: f64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let window_ms: f64 = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(100.0);
    let fused = rest.get(2).is_none_or(|f| f != "unfused");
    let (rt, _pin) = common::pinned_runtime(1)?;
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let (tensor_array, count) = inputs.view().tensors();
    let tensors = &tensor_array[..count];
    let graph = rt.graph(op, &shape, fused)?;
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let mut calls = Vec::new();
    for p in &plans {
        let t = Instant::now();
        rt.run_planned(&graph, tensors, &mut out, p)?;
        let once = t.elapsed().as_secs_f64() * 1e6;
        calls.push(((100.0 / once.max(0.01)).ceil() as usize).clamp(1, 20_000));
    }
    let start = Instant::now();
    let mut window_start = 0.0;
    let mut best = vec![f64::INFINITY; plans.len()];
    while start.elapsed().as_secs_f64() < seconds {
        for (i, p) in plans.iter().enumerate() {
            let t = Instant::now();
            for _ in 0..calls[i] {
                rt.run_planned(&graph, tensors, &mut out, p)?;
            }
            best[i] = best[i].min(t.elapsed().as_secs_f64() * 1e6 / calls[i] as f64);
        }
        let now = start.elapsed().as_secs_f64() * 1e3;
        if now - window_start >= window_ms {
            let times: Vec<String> = best.iter().map(|t| format!("{t:8.3}")).collect();
            let ratio = if best.len() == 2 {
                best[1] / best[0]
            } else {
                1.0
            };
            println!("{window_start:8.0} ms {} µs {ratio:.3}", times.join(" "));
            window_start = now;
            best.fill(f64::INFINITY);
        }
    }
    Ok(())
}
