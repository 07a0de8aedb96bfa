//! `taskgrain calibrate` and `taskgrain tune`: the planner's caches.

use super::Outcome;
use crate::error::{Error, Result};
use crate::ops::{self, Op, OwnedInputs, Shape};
use crate::plan::calibrate::{self, ModelSource};
use crate::pool::PoolConfig;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::simt::PacketMode;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(super) struct CalibrateArgs {
    /// Measure again even if a valid calibration is cached.
    #[arg(long)]
    force: bool,
    /// Cache directory (default: $TASKGRAIN_CACHE_DIR, $XDG_CACHE_HOME/taskgrain, ~/.cache/taskgrain).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Print the calibrated model as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TuneArgs {
    /// Operator.
    op: String,
    /// RxC, or BxHqxHkvxSqxSkvxDkxDv for attention.
    #[arg(long)]
    shape: String,
    /// Packet width 4, 8 or 16 (default: the widest ≤ 8).
    #[arg(long)]
    width: Option<usize>,
    /// Workers requested (the calling thread included).
    #[arg(long)]
    workers: Option<usize>,
    /// Full-packet specialization on or off.
    #[arg(long, default_value = "on", value_parser = super::parse_switch, action = clap::ArgAction::Set)]
    full_packet: bool,
    /// Cache directory (as for calibrate).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub(super) fn calibrate(a: CalibrateArgs) -> Result<Outcome> {
    let dir = a.cache_dir.unwrap_or_else(crate::plan::cache::default_dir);
    let source = if a.force {
        ModelSource::Recalibrate
    } else {
        ModelSource::CachedOrCalibrate
    };
    let l = calibrate::load_or_calibrate(&dir, source)?;
    for n in &l.notes {
        eprintln!("taskgrain: {n}");
    }
    let file = calibrate::path(&dir);
    if a.json {
        let v = serde_json::json!({
            "file": file.display().to_string(),
            "reused": l.reused,
            "seconds": l.seconds,
            "stored": l.stored,
            "interference": l.interference,
            "build": crate::plan::cache::build_id(),
            "model": l.model,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
    } else {
        let m = &l.model;
        if l.reused {
            println!("calibration reused from {}", file.display());
        } else if l.stored {
            println!("calibrated in {:.2} s → {}", l.seconds, file.display());
        } else {
            println!("calibrated in {:.2} s (not stored)", l.seconds);
        }
        println!(
            "launch: caller {:.2} µs, pool {:.2} µs; helper arrival {:.2} µs hot, {:.1} µs cold; \
             per task {:.3} µs, per group {:.3} µs",
            m.caller_launch_us,
            m.pool_launch_us,
            m.helper_arrival_us,
            m.helper_arrival_cold_us,
            m.per_task_us,
            m.per_group_us
        );
        let curve: Vec<String> = m
            .bandwidth
            .iter()
            .map(|b| {
                format!(
                    "{:.0} MB {:.1}/{:.1}",
                    b.bytes / 1e6,
                    b.one_gbps,
                    b.all_gbps
                )
            })
            .collect();
        println!(
            "bandwidth, GB/s (1 worker/all) by traffic per launch: {}",
            curve.join(", ")
        );
        for w in &m.widths {
            let e: Vec<String> = crate::plan::cost::ROW_OPS
                .iter()
                .zip(&w.rows)
                .map(|(op, k)| format!("{op} {:.3}", k.elem_ns[3]))
                .collect();
            println!(
                "W{}: ns/element {}; attention {:.4} ns/flop (block 16)",
                w.width,
                e.join(", "),
                w.attn_flop_ns[4]
            );
            let g = &w.graph;
            println!(
                "W{} graph kernels: map {:.3} ns/tensor + {:.3} ns/flop per element; \
                 softmax {} ns/element (1, 2, 4, 8 accumulators); scores, probs·v {:.4} ns/flop (block 16), {:.4} (block 1)",
                w.width,
                g.map_tensor_ns,
                g.map_flop_ns,
                g.softmax_elem_ns.map(|x| format!("{x:.3}")).join(", "),
                g.attn_flop_ns[1],
                g.attn_flop_ns[0]
            );
        }
    }
    Ok(Outcome::Ok)
}

pub(super) fn tune(a: TuneArgs) -> Result<Outcome> {
    let op: Op = a.op.parse()?;
    let shape = Shape::parse(op, &a.shape)?;
    let backend = super::run::backend_for(a.width)?;
    if a.workers == Some(0) {
        return Err(Error::BadArgument("--workers must be at least 1".into()));
    }
    let runtime = Runtime::new(RuntimeConfig {
        pool: PoolConfig::with_workers(a.workers.unwrap_or_else(crate::pool::available_cores)),
        width: Some(backend.width()),
        mode: PacketMode::from_switch(a.full_packet),
        model: ModelSource::CachedOrCalibrate,
        cache_dir: a.cache_dir,
    })?;
    for n in runtime.notes() {
        eprintln!("taskgrain: {n}");
    }
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let mut out = crate::buffer::zeros(ops::output_len(&shape));
    let profile = crate::plan::LaunchProfile::for_op(op, &shape)?;
    let t = std::time::Instant::now();
    let plan = runtime.planner().oracle(&profile, &mut |c, g, n| {
        runtime.time_launch(inputs.view(), &shape, &mut out, c, g, n)
    })?;
    let seconds = t.elapsed().as_secs_f64();
    let candidates = runtime.planner().joint_space(&profile).len();
    let table = runtime.planner().tuning();
    table.store(runtime.cache_dir())?;
    let key = runtime.planner().key(&profile);
    let measured = table.entries.get(&key).map(|t| t.measured_us);
    let file = crate::plan::tuning::TuningTable::path(runtime.cache_dir());
    if a.json {
        let v = serde_json::json!({
            "op": op.name(),
            "shape": shape.dims(),
            "key": key,
            "config": { "local": plan.config.local, "block": plan.config.block, "grain": plan.grain.as_u32() },
            "measured_us": measured,
            "predicted_us": plan.predicted_us,
            "candidates": candidates,
            "seconds": seconds,
            "file": file.display().to_string(),
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
    } else {
        println!(
            "{op} {shape}: local {} block {} grain {} — {:.3} µs measured ({:.3} predicted); \
             {candidates} candidates searched in {seconds:.1} s; stored in {}",
            plan.config.local,
            plan.config.block,
            plan.grain,
            measured.unwrap_or(f64::NAN),
            plan.predicted_us,
            file.display()
        );
    }
    Ok(Outcome::Ok)
}
