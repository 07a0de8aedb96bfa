//! Calibration: measures every constant of the [`CostModel`] on this machine, in
//! well under 2 s, with the real kernels and the real pool.
//!
//! - **kernels** (per native width, on the calling thread, data in L2): each row
//!   operator at 32 rows × {256, 1024} columns with `local` = the row (8 packet
//!   accumulators) gives the per-element and per-row costs; `local` = W, 2W, 4W
//!   the per-element cost with 1, 2, 4 accumulators; 1025 columns the tail
//!   packet; `block` = 1 against `block` = 32 the per-group cost. Attention at
//!   1×2×1×16×256×64×64 with `block` 1, 2, 4, 8, 16 gives its per-flop costs.
//! - **pool** (all cores): an empty launch of one task per worker, hot, against
//!   the caller path (launch overheads); 256 empty tasks against one chunk per
//!   worker (per-task cost); 16 busy tasks of 2 µs, back-to-back and after an
//!   idle gap of 1 ms, give the hot and the cold helper arrival.
//! - **memory**: `c = a + b` over 2× the LLC and over ¼ of it, on the caller and
//!   on every worker (DRAM and LLC bandwidth).
//!
//! Each figure is the fastest of 7 batches of calls lasting ≥ 100 µs each (the
//! cold arrival: the lower quartile of 12 launches).

use super::cache::{self, Loaded};
use super::cost::{ATTN_BLOCKS, CostModel, KernelCost, ROW_OPS, WidthCost};
use crate::error::Result;
use crate::ops::{self, AttnShape, LaunchConfig, Op, OwnedInputs, Shape};
use crate::packet::Backend;
use crate::pool::{Grain, Pool, PoolConfig};
use crate::simt::{PacketMode, Tiling};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// µs per call of `f`: the fastest of 7 batches of ≥ `batch_us` each. Other
/// work on the machine only ever adds time, so the minimum is the machine's own
/// cost (a median would calibrate the load of the moment into the model).
fn time_us(batch_us: f64, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64() * 1e6;
    let n = ((batch_us / one.max(0.01)).ceil() as usize).clamp(1, 20_000);
    (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn run_caller(
    op: Op,
    shape: &Shape,
    b: Backend,
    c: LaunchConfig,
    inputs: &OwnedInputs,
) -> Result<f64> {
    let launch = ops::prepare(inputs.view(), shape, b, c, PacketMode::FullPacket)?;
    let mut out = vec![0.0f32; ops::output_len(shape)];
    let _ = op;
    Ok(time_us(100.0, || {
        let _ = launch.run_on_caller(&mut out);
    }))
}

/// The costs of the row operators and attention at one width; also returns the
/// per-group cost measured on the way.
fn calibrate_width(b: Backend) -> Result<(WidthCost, f64)> {
    let w = b.width();
    let r = 32usize;
    let (c1, c2) = (256usize, 1024usize);
    let mut rows = WidthCost::guess(w).rows;
    let mut per_group = Vec::new();
    for (i, &op) in ROW_OPS.iter().enumerate() {
        // Shape columns for a schedule of `s` columns (rope schedules C/2).
        let shape_of = |s: usize| Shape::rows(r, if op == Op::Rope { 2 * s } else { s });
        let s1 = shape_of(c1);
        let s2 = shape_of(c2);
        let s3 = shape_of(c2 + 1);
        let in1 = OwnedInputs::generate(op, s1, 1)?;
        let in2 = OwnedInputs::generate(op, s2, 1)?;
        let in3 = OwnedInputs::generate(op, s3, 1)?;
        let whole = |s: usize, block| LaunchConfig {
            local: s.div_ceil(w) * w,
            block,
        };
        let t1 = run_caller(op, &s1, b, whole(c1, r), &in1)?;
        let t2 = run_caller(op, &s2, b, whole(c2, r), &in2)?;
        let t3 = run_caller(op, &s3, b, whole(c2 + 1, r), &in3)?;
        let tg = run_caller(op, &s2, b, whole(c2, 1), &in2)?;
        let (r1, r2, r3) = (t1 / r as f64, t2 / r as f64, t3 / r as f64);
        let elem8 = ((r2 - r1) / (c2 - c1) as f64).max(1e-4);
        let row_ns = ((r1 - c1 as f64 * elem8) * 1e3).max(0.0);
        let mut elem = [elem8 * 1e3; 4];
        for (ai, a) in [1usize, 2, 4].into_iter().enumerate() {
            let t = run_caller(
                op,
                &s2,
                b,
                LaunchConfig {
                    local: a * w,
                    block: r,
                },
                &in2,
            )?;
            elem[ai] = ((t / r as f64 * 1e3 - row_ns) / c2 as f64).max(elem8 * 1e3 * 0.5);
        }
        rows[i] = KernelCost {
            elem_ns: elem,
            row_ns,
            tail_ns: ((r3 - r2) * 1e3 - elem8 * 1e3).max(0.0),
        };
        per_group.push(((tg - t2) / (r - 1) as f64).max(0.0));
    }
    // Attention.
    let a = AttnShape {
        batch: 1,
        q_heads: 2,
        kv_heads: 1,
        q_len: 16,
        kv_len: 256,
        dk: 64,
        dv: 64,
    };
    let shape = Shape::Attention(a);
    let inputs = OwnedInputs::generate(Op::Attention, shape, 1)?;
    let local = ops::attention::local_for(&a, w);
    let mut attn = [0.0; 5];
    per_group.sort_by(f64::total_cmp);
    let pg = per_group[per_group.len() / 2];
    for (j, &block) in ATTN_BLOCKS.iter().enumerate() {
        let t = run_caller(
            Op::Attention,
            &shape,
            b,
            LaunchConfig { local, block },
            &inputs,
        )?;
        let groups = a.batch * a.q_heads * a.q_len.div_ceil(block);
        attn[j] = ((t - groups as f64 * pg) * 1e3 / a.flops()).max(1e-4);
    }
    Ok((
        WidthCost {
            width: w,
            rows,
            attn_flop_ns: attn,
        },
        pg,
    ))
}

/// Pool constants: (caller launch, pool launch, per task, hot arrival, cold arrival), µs.
fn calibrate_pool(pool: &Pool) -> Result<(f64, f64, f64, f64, f64)> {
    let p = pool.workers_granted();
    let empty = |_: usize, _: &mut [f32]| {};
    let t_p = Tiling::rows(p, 1, 1)?;
    let mut out = vec![0.0f32; p];
    let mut err = None;
    let mut launch =
        |t: &Tiling, g: Grain, out: &mut [f32], k: &(dyn Fn(usize, &mut [f32]) + Sync)| {
            if let Err(e) = pool.launch(t, g, out, k) {
                err = Some(e);
            }
        };
    let caller = time_us(100.0, || launch(&t_p, Grain::Caller, &mut out, &empty));
    let pooled = time_us(200.0, || {
        launch(&t_p, Grain::tasks(1).expect("1 ≠ 0"), &mut out, &empty)
    });
    let t_many = Tiling::rows(256, 1, 1)?;
    let mut out_many = vec![0.0f32; 256];
    let many = time_us(200.0, || {
        launch(
            &t_many,
            Grain::tasks(1).expect("1 ≠ 0"),
            &mut out_many,
            &empty,
        )
    });
    let chunks = time_us(200.0, || {
        launch(&t_many, Grain::Legacy, &mut out_many, &empty)
    });
    let per_task = ((many - chunks) * p as f64 / 256.0).max(0.0);
    // Busy tasks: 16 × 2 µs.
    let d = Duration::from_micros(2);
    let busy = |_: usize, _: &mut [f32]| {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    };
    let t16 = Tiling::rows(16, 1, 1)?;
    let mut out16 = vec![0.0f32; 16];
    let work = 16.0 * 2.0;
    let arrival = |t: f64| {
        if p <= 1 {
            0.0
        } else {
            ((p as f64 * (t - pooled) - work) / (p - 1) as f64).clamp(0.0, work)
        }
    };
    let hot = time_us(300.0, || {
        launch(&t16, Grain::tasks(1).expect("1 ≠ 0"), &mut out16, &busy)
    });
    let mut cold = Vec::new();
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(1));
        let t = Instant::now();
        launch(&t16, Grain::tasks(1).expect("1 ≠ 0"), &mut out16, &busy);
        cold.push(t.elapsed().as_secs_f64() * 1e6);
    }
    cold.sort_by(f64::total_cmp);
    let cold_t = cold[cold.len() / 4];
    if let Some(e) = err {
        return Err(e);
    }
    Ok((
        caller,
        (pooled - caller).max(0.0),
        per_task,
        arrival(hot),
        arrival(cold_t),
    ))
}

/// Bandwidth of `c = a + b` over `bytes` of traffic: (one worker, all workers), GB/s.
fn calibrate_bandwidth(pool: &Pool, bytes: usize) -> Result<(f64, f64)> {
    let cols = 1024;
    let rows = (bytes / 12 / cols).max(1);
    let n = rows * cols;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b = a.clone();
    let mut c = vec![0.0f32; n];
    let block = 16;
    let tiling = Tiling::rows(rows, cols, block)?;
    let kernel = |g: usize, span: &mut [f32]| {
        let start = g * block * cols;
        for (i, y) in span.iter_mut().enumerate() {
            *y = a[start + i] + b[start + i];
        }
    };
    let mut err = None;
    let mut go = |g: Grain, c: &mut [f32]| {
        if let Err(e) = pool.launch(&tiling, g, c, &kernel) {
            err = Some(e);
        }
    };
    let one = time_us(1.0, || go(Grain::Caller, &mut c));
    let all = time_us(1.0, || go(Grain::Legacy, &mut c));
    if let Some(e) = err {
        return Err(e);
    }
    let gb = (12 * n) as f64 / 1e3;
    Ok((gb / one, gb / all.min(one)))
}

/// Cache sizes from sysfs: (L2 per core, LLC), when known.
fn cache_sizes() -> (Option<usize>, Option<usize>) {
    let mut l2 = None;
    let mut llc = None;
    for i in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(size)) = (read("level"), read("size")) else {
            continue;
        };
        let size = size.trim();
        let bytes = if let Some(k) = size.strip_suffix('K') {
            k.parse::<usize>().ok().map(|k| k << 10)
        } else if let Some(m) = size.strip_suffix('M') {
            m.parse::<usize>().ok().map(|m| m << 20)
        } else {
            size.parse().ok()
        };
        match level.trim() {
            "2" => l2 = bytes,
            "3" => llc = bytes,
            _ => {}
        }
    }
    (l2, llc.or(l2))
}

/// What calibration measured and how long it took.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The calibrated model.
    pub model: CostModel,
    /// Wall time of the calibration, s.
    pub seconds: f64,
}

/// Measures a [`CostModel`] for this machine: every native width, a pool on all cores.
pub fn calibrate() -> Result<Calibration> {
    let start = Instant::now();
    let mut m = CostModel::default();
    let (l2, llc) = cache_sizes();
    if let Some(l2) = l2 {
        m.private_cache_bytes = l2;
    }
    if let Some(llc) = llc {
        m.llc_bytes = llc;
    }
    let mut widths = Vec::new();
    let mut groups = Vec::new();
    let backends = match Backend::all_native() {
        v if v.is_empty() => vec![Backend::best(16)],
        v => v,
    };
    for b in backends {
        let (wc, pg) = calibrate_width(b)?;
        widths.push(wc);
        groups.push(pg);
    }
    groups.sort_by(f64::total_cmp);
    m.per_group_us = groups[groups.len() / 2];
    m.widths = widths;
    let pool = Pool::new(PoolConfig::default())?;
    let (caller, pooled, per_task, hot, cold) = calibrate_pool(&pool)?;
    m.caller_launch_us = caller;
    m.pool_launch_us = pooled;
    m.per_task_us = per_task;
    m.helper_arrival_us = hot;
    m.helper_arrival_cold_us = cold;
    let (one, all) = calibrate_bandwidth(&pool, 2 * m.llc_bytes)?;
    m.bw_one_gbps = one;
    m.bw_all_gbps = all;
    let (one, all) = calibrate_bandwidth(&pool, m.llc_bytes / 4)?;
    m.llc_one_gbps = one.max(m.bw_one_gbps);
    m.llc_all_gbps = all.max(m.bw_all_gbps);
    m.calibrated = true;
    Ok(Calibration {
        model: m,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The kind name of calibration files.
pub const KIND: &str = "calibration";

/// The file name of the calibration cache in a cache directory.
pub const FILE: &str = "calibration.json";

/// Where a planner's cost model comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelSource {
    /// The built-in, uncalibrated constants.
    Builtin,
    /// The calibration cache if it is valid for this machine and build, else the
    /// built-in constants (the default: never calibrates implicitly).
    #[default]
    Cached,
    /// The calibration cache if valid, else calibrate now (≤ 2 s) and store it.
    CachedOrCalibrate,
    /// Calibrate now and store it, whatever the cache holds.
    Recalibrate,
}

/// The calibration file in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The outcome of [`load_or_calibrate`].
#[derive(Clone, Debug)]
pub struct ModelLoad {
    /// The model.
    pub model: CostModel,
    /// `true` if it was read from a valid cache file.
    pub reused: bool,
    /// Seconds spent calibrating (0 when reused or built-in).
    pub seconds: f64,
    /// Warnings and notes (a rejected file, a store that failed, a calibration).
    pub notes: Vec<String>,
}

/// The cost model `source` asks for, with the cache of `dir`: a corrupted or
/// foreign file is ignored with a note and, when allowed, rebuilt.
pub fn load_or_calibrate(dir: &Path, source: ModelSource) -> Result<ModelLoad> {
    let mut notes = Vec::new();
    let file = path(dir);
    if matches!(source, ModelSource::Cached | ModelSource::CachedOrCalibrate) {
        match cache::load::<CostModel>(&file, KIND) {
            Loaded::Valid(model) => {
                return Ok(ModelLoad {
                    model,
                    reused: true,
                    seconds: 0.0,
                    notes,
                });
            }
            Loaded::Missing => {}
            Loaded::Rejected(why) => notes.push(format!("calibration cache ignored: {why}")),
        }
    }
    if matches!(source, ModelSource::Builtin | ModelSource::Cached) {
        return Ok(ModelLoad {
            model: CostModel::default(),
            reused: false,
            seconds: 0.0,
            notes,
        });
    }
    let c = calibrate()?;
    match cache::store(&file, KIND, &c.model) {
        Ok(()) => notes.push(format!(
            "calibrated in {:.2} s, stored in {}",
            c.seconds,
            file.display()
        )),
        Err(e) => notes.push(format!(
            "calibrated in {:.2} s but not stored: {e}",
            c.seconds
        )),
    }
    Ok(ModelLoad {
        model: c.model,
        reused: false,
        seconds: c.seconds,
        notes,
    })
}

/// [`load_or_calibrate`]'s model and notes.
pub fn load_model(dir: &Path, source: ModelSource) -> Result<(CostModel, Vec<String>)> {
    let l = load_or_calibrate(dir, source)?;
    Ok((l.model, l.notes))
}
