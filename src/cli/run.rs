//! `taskgrain run`: one operator, one shape, timed and optionally checked.

use super::{Outcome, parse_switch};
use crate::bench::timing::{median, time_calls};
use crate::error::{Error, Result};
use crate::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use crate::packet::Backend;
use crate::plan::default_config;
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
    /// Work-items per group (default: the planner's choice).
    #[arg(long)]
    local: Option<usize>,
    /// Rows per group (default: the planner's choice).
    #[arg(long)]
    block: Option<usize>,
    /// Full-packet specialization on or off.
    #[arg(long, default_value = "on", value_parser = parse_switch)]
    full_packet: bool,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed calls after warm-up.
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// Check the output against the f64 reference (exit 1 if it fails).
    #[arg(long)]
    check: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Config {
    local: usize,
    block: usize,
    grain: u32,
}

#[derive(Serialize)]
struct RunReport {
    op: String,
    shape: Vec<usize>,
    width: usize,
    backend: &'static str,
    variant: String,
    config: Config,
    groups: usize,
    full_packet: bool,
    reps: usize,
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
    let planned = default_config(op, &shape, backend.width());
    let config = LaunchConfig {
        local: args.local.unwrap_or(planned.local),
        block: args.block.unwrap_or(planned.block),
    };
    let inputs = OwnedInputs::generate(op, shape, args.seed)?;
    let mode = PacketMode::from_switch(args.full_packet);
    let launch = ops::prepare(inputs.view(), &shape, backend, config, mode)?;
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let times = time_calls(3, args.reps, || {
        launch
            .run_on_caller(&mut out)
            .expect("output sized for the launch");
    });
    let p50 = median(&times);
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
        variant: launch.variant(),
        config: Config {
            local: config.local,
            block: config.block,
            grain: u32::MAX,
        },
        groups: launch.tiling().groups(),
        full_packet: args.full_packet,
        reps: args.reps,
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
        println!(
            "{} {} {}: local {} block {} ({} groups) p50 {:.3} µs, {:.1} GB/s, hash {}",
            report.op,
            shape,
            report.variant,
            config.local,
            config.block,
            report.groups,
            p50,
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
