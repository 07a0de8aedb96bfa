//! `taskgrain run`: one operator, one shape, timed and optionally checked.

use super::{Outcome, parse_switch};
use crate::bench::timing::{SAMPLE_US, calls_for, median, time_calls, time_samples};
use crate::error::{Error, Result};
use crate::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use crate::packet::Backend;
use crate::plan::calibrate::ModelSource;
use crate::plan::{LaunchProfile, Plan, Strategy};
use crate::pool::{CallerPin, Grain, PoolConfig};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::simt::PacketMode;
use clap::Args;
use serde::Serialize;

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Operator: rmsnorm, layernorm, masked_softmax, swiglu, gelu_residual, rope, attention.
    op: String,
    /// RxC, or BxHqxHkvxSqxSkvxDkxDv for attention.
    #[arg(long)]
    shape: String,
    /// Packet width 4, 8 or 16 (default: the widest ≤ 8 this CPU has, the seed's setting).
    #[arg(long)]
    width: Option<usize>,
    /// Planning strategy: auto (default; refined after a few calls), whole, local,
    /// joint_legacy, joint_tasks, oracle (tuned result, or the search now).
    #[arg(long, default_value = "auto")]
    strategy: Strategy,
    /// Work-items per group (default: the strategy's choice).
    #[arg(long)]
    local: Option<usize>,
    /// Rows per group (default: the planner's choice).
    #[arg(long)]
    block: Option<usize>,
    /// Workers requested (the calling thread included); granted min(N, cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Task grain: 0 (one chunk per worker), k (tasks of k groups) or caller.
    #[arg(long)]
    grain: Option<Grain>,
    /// Grant all requested workers even beyond the available cores.
    #[arg(long)]
    oversubscribe: bool,
    /// Full-packet specialization on or off.
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    full_packet: bool,
    /// Fusion on (one launch per operator) or off (DESIGN.md's unfused chain of
    /// launches, each planned on its own).
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    fusion: bool,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pin the calling thread to the first allowed CPU while planning and
    /// measuring (the pool's helpers are pinned to the others), as `bench` does.
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    pin_caller: bool,
    /// Timed samples after warm-up: one call each, or for calls under
    /// 5 µs as many back-to-back calls as make a sample last 5 µs (the clock
    /// read itself costs tens of ns); p50 is the median µs per call of the samples.
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// Check the output against the f64 reference (exit 1 if it fails).
    #[arg(long)]
    check: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Write a Chrome trace-event timeline of one (hot) launch to FILE.json: which
    /// worker ran which work-group, when, and its idle gaps (open in Perfetto).
    #[arg(long, value_name = "FILE.json")]
    trace: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct Config {
    local: usize,
    block: usize,
    grain: u32,
}

/// One launch of the call's graph.
#[derive(Serialize)]
struct LaunchReport {
    kernel: String,
    variant: String,
    plan_source: String,
    local: usize,
    block: usize,
    grain: u32,
    groups: usize,
    predicted_us: f64,
}

#[derive(Serialize)]
struct RunReport {
    op: String,
    shape: Vec<usize>,
    width: usize,
    backend: &'static str,
    variant: String,
    strategy: String,
    plan_source: String,
    config: Config,
    predicted_us: f64,
    groups: usize,
    full_packet: bool,
    fusion: bool,
    launches: usize,
    launch_plan: Vec<LaunchReport>,
    workers_requested: usize,
    workers_granted: usize,
    tasks: usize,
    helped_pct: f64,
    reps: usize,
    /// Back-to-back calls per timed sample (1 unless a call is under [`SAMPLE_US`]).
    calls_per_sample: usize,
    p50_us: f64,
    bytes: usize,
    gbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_abs_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    output_hash: String,
}

/// The backend for a requested width; the default is the widest ≤ 8 (the seed's W8).
pub(super) fn backend_for(width: Option<usize>) -> Result<Backend> {
    match width {
        Some(w) => Backend::native(w),
        None => Ok(Backend::best(8)),
    }
}

pub(super) fn run(args: RunArgs) -> Result<Outcome> {
    let op: Op = args.op.parse()?;
    let shape = Shape::parse(op, &args.shape)?;
    let backend = backend_for(args.width)?;
    if args.reps == 0 {
        return Err(Error::BadArgument("--reps must be at least 1".into()));
    }
    if let Some(path) = &args.trace {
        crate::bench::report::check_writable(path)?;
    }
    let inputs = OwnedInputs::generate(op, shape, args.seed)?;
    let mode = PacketMode::from_switch(args.full_packet);
    let workers = args.workers.unwrap_or_else(crate::pool::available_cores);
    let runtime = Runtime::new(RuntimeConfig {
        pool: PoolConfig {
            oversubscribe: args.oversubscribe,
            ..PoolConfig::with_workers(workers)
        },
        width: Some(backend.width()),
        mode,
        model: ModelSource::CachedOrCalibrate,
        cache_dir: None,
    })?;
    for n in runtime.notes() {
        eprintln!("taskgrain: {n}");
    }
    // After the pool is built: it spreads its helpers over the CPUs its builder
    // may use. Unpinned, the caller can land on a helper's CPU, where the two
    // take turns: pooled calls of gelu_residual 64x256 ran on the caller alone
    // in 2 of 13 runs (helped in 3–10 % of calls, 18.5 µs against 8–12).
    let _pin = if args.pin_caller {
        CallerPin::first_allowed()
    } else {
        CallerPin::none()
    };
    let mut out = crate::buffer::zeros(ops::output_len(&shape));
    let graph = runtime.graph(op, &shape, args.fusion)?;
    let (tensors, n) = inputs.view().tensors();
    let tensors = &tensors[..n];
    // The library's path: `auto` refines a launch it has seen a few times, as
    // the timed calls below would be.
    let warm = if args.strategy == Strategy::Auto {
        crate::plan::strategy::REFINE_AFTER
    } else {
        1
    };
    let mut chosen: Vec<Option<(Plan, LaunchProfile)>> = vec![None; graph.launches()];
    for _ in 0..warm {
        runtime.run_graph(
            &graph,
            tensors,
            &mut out,
            &mut |i, profile, from, measure| {
                let plan = runtime.plan_launch(args.strategy, profile, from, measure)?;
                chosen[i] = Some((plan, *profile));
                Ok((plan.config, plan.grain))
            },
        )?;
    }
    if args.strategy == Strategy::Oracle {
        runtime.planner().tuning().store(runtime.cache_dir())?;
    }
    let kernels = graph.kernel_names();
    let mut plans = Vec::with_capacity(graph.launches());
    let mut launch_plan = Vec::with_capacity(graph.launches());
    for (i, c) in chosen.iter().enumerate() {
        let (plan, profile) = c.expect("every launch was planned");
        let config = LaunchConfig {
            local: args.local.unwrap_or(plan.config.local),
            block: args.block.unwrap_or(plan.config.block),
        };
        let grain = args.grain.unwrap_or(plan.grain);
        let overridden = config != plan.config || grain != plan.grain;
        plans.push((config, grain));
        launch_plan.push(LaunchReport {
            kernel: kernels[i].clone(),
            variant: String::new(),
            plan_source: if overridden {
                "overridden".into()
            } else {
                plan.source.name().into()
            },
            local: config.local,
            block: config.block,
            grain: grain.as_u32(),
            groups: profile.groups(config.block),
            predicted_us: runtime.planner().predict(&profile, config, grain),
        });
    }
    let variants = runtime.graph_variant(&graph, tensors, &plans)?;
    for (l, v) in launch_plan.iter_mut().zip(variants.split(" → ")) {
        l.variant = v.to_string();
    }
    // A failing launch (a kernel panic) ends the run with its error before timing.
    let first = runtime.run_planned(&graph, tensors, &mut out, &plans)?;
    let mut helped = 0usize;
    let mut calls = 0usize;
    let mut failure = None;
    let mut call = || {
        calls += 1;
        match runtime.run_planned(&graph, tensors, &mut out, &plans) {
            Ok(stats) => helped += stats.helped as usize,
            Err(e) => failure = Some(e),
        }
    };
    let single_us = median(&time_calls(3, 5, &mut call));
    let per_sample = calls_for(single_us, SAMPLE_US);
    let times = time_samples(0, args.reps, per_sample, &mut call);
    if let Some(e) = failure {
        return Err(e);
    }
    let p50 = median(&times);
    if let Some(path) = &args.trace {
        let trace = runtime.trace_planned(&graph, tensors, &mut out, &plans)?;
        let title = format!("taskgrain run {op} {shape}");
        let json = serde_json::to_string(&trace.to_chrome_json(&title)).expect("trace serializes");
        crate::bench::report::write_atomic(path, json.as_bytes())?;
        eprintln!(
            "taskgrain: trace of one launch ({}, {} groups, {} tasks, {} of {} workers ran groups, {:.1} µs) written to {}",
            trace.variant,
            trace.groups.len(),
            trace.stats.tasks,
            trace.active_workers(),
            trace.workers,
            trace.launch_ns as f64 / 1e3,
            path.display()
        );
    }
    // The headline geometry is the last launch's (the only one when fused).
    let (config, grain) = *plans.last().expect("a graph has a launch");
    let predicted_us: f64 = launch_plan.iter().map(|l| l.predicted_us).sum();
    let groups: usize = launch_plan.iter().map(|l| l.groups).sum();
    let plan_source = if launch_plan.iter().any(|l| l.plan_source == "overridden") {
        "overridden".to_string()
    } else {
        launch_plan[launch_plan.len() - 1].plan_source.clone()
    };
    let bytes = ops::traffic_bytes(op, &shape);
    let check = args.check.then(|| {
        let reference = ops::reference(inputs.view(), &shape);
        ops::compare(&out, &reference, ops::tolerance(op))
    });
    let report = RunReport {
        op: op.name().into(),
        shape: shape.dims(),
        width: backend.width(),
        backend: backend.name(),
        variant: variants,
        strategy: args.strategy.name().into(),
        plan_source,
        predicted_us,
        config: Config {
            local: config.local,
            block: config.block,
            grain: grain.as_u32(),
        },
        groups,
        full_packet: args.full_packet,
        fusion: args.fusion,
        launches: graph.launches(),
        launch_plan,
        workers_requested: runtime.pool().workers_requested(),
        workers_granted: runtime.pool().workers_granted(),
        tasks: first.tasks,
        helped_pct: 100.0 * helped as f64 / calls as f64,
        reps: args.reps,
        calls_per_sample: per_sample,
        p50_us: p50,
        bytes,
        gbps: bytes as f64 / p50 / 1e3,
        max_abs_err: check.map(|c| c.max_abs_err),
        ok: check.map(|c| c.ok),
        output_hash: ops::output_hash(&out),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        if report.launches > 1 {
            for (i, l) in report.launch_plan.iter().enumerate() {
                println!(
                    "launch {i}: {} local {} block {} ({} groups) grain {} [{}]",
                    l.variant, l.local, l.block, l.groups, l.grain, l.plan_source
                );
            }
        }
        println!(
            "{} {} {} [{} ({})]: {} launch{} (fusion {}), local {} block {} ({} groups) grain {} \
             ({} tasks) workers {}/{} p50 {:.3} µs (predicted {:.3}), {:.1} GB/s, hash {}",
            report.op,
            shape,
            report.variant,
            report.strategy,
            report.plan_source,
            report.launches,
            if report.launches == 1 { "" } else { "es" },
            if report.fusion { "on" } else { "off" },
            config.local,
            config.block,
            report.groups,
            grain,
            report.tasks,
            report.workers_granted,
            report.workers_requested,
            p50,
            predicted_us,
            report.gbps,
            report.output_hash
        );
        if let Some(c) = check {
            println!(
                "check: {} (max |err| {:.3e}, {} elements out of tolerance)",
                if c.ok { "ok" } else { "FAILED" },
                c.max_abs_err,
                c.failures
            );
        }
    }
    Ok(match check {
        Some(c) if !c.ok => Outcome::CheckFailed,
        _ => Outcome::Ok,
    })
}
