//! One small launch on the caller, many times, directly, through the graph
//! executor (fused and unfused) and through `Runtime::run` (the same plan, then
//! `auto`): for instruction counts
//! (`valgrind --tool=callgrind target/release/examples/small_launch rmsnorm 17x65 10000`).
//! An optional fourth argument sets `local` (default: the planner's default
//! geometry, one step per row).

use taskgrain::ops::{Op, OwnedInputs, Shape};
use taskgrain::pool::Grain;
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let op: Op = args.get(1).map_or("rmsnorm", String::as_str).parse()?;
    let shape = Shape::parse(op, args.get(2).map_or("17x65", String::as_str))?;
    let calls: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let rt = Runtime::new(RuntimeConfig {
        width: Some(8),
        ..RuntimeConfig::default()
    })?;
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let mut config = taskgrain::plan::default_config(op, &shape, 8);
    if let Some(local) = args.get(4).and_then(|l| l.parse().ok()) {
        config.local = local;
    }
    let launch = rt.prepare(inputs.view(), &shape, config)?;
    let mut out = vec![0.0f32; taskgrain::ops::output_len(&shape)];
    let t = std::time::Instant::now();
    for _ in 0..calls {
        rt.launch(&launch, Grain::Caller, &mut out)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    println!(
        "{} {shape} local {}: {us:.3} µs per call",
        launch.variant(),
        config.local
    );
    // The same geometry through the graph executor, fused and unfused.
    let (tensors, n) = inputs.view().tensors();
    for fusion in [true, false] {
        let graph = rt.graph(op, &shape, fusion)?;
        let plans = vec![(config, Grain::Caller); graph.launches()];
        let t = std::time::Instant::now();
        for _ in 0..calls {
            rt.run_planned(&graph, &tensors[..n], &mut out, &plans)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
        let variant = rt.graph_variant(&graph, &tensors[..n], &plans)?;
        println!("{variant} {shape}: {us:.3} µs per call");
    }
    // The library's own call: `Runtime::run` with the same geometry, on the
    // caller, then planned by `auto` (its default; refined over the first calls).
    let fixed = RunOptions {
        config: Some(config),
        grain: Some(Grain::Caller),
        ..RunOptions::default()
    };
    for (name, opts) in [
        ("Runtime::run, fixed", fixed),
        ("Runtime::run, auto", RunOptions::default()),
    ] {
        for _ in 0..calls.min(1000) {
            rt.run(inputs.view(), &shape, &mut out, &opts)?;
        }
        let t = std::time::Instant::now();
        for _ in 0..calls {
            rt.run(inputs.view(), &shape, &mut out, &opts)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
        println!("{name} {shape}: {us:.3} µs per call");
    }
    Ok(())
}
