//! Calibration: measures every constant of the [`CostModel`] on this machine, in
//! well under 2 s, with the real kernels and the real pool.
//!
//! - **kernels** (per native width, on the calling thread, data in L2): each row
//!   operator at 32 rows × {256, 1024} columns with `local` = the row (8 packet
//!   accumulators), W, 2W and 4W (1, 2, 4 accumulators) gives the per-element
//!   and per-row costs for each accumulator count (no count's per-element
//!   cost below a larger count's: `no_cheaper_with_fewer`); 1025 columns the
//!   tail packet; `block` = 1 against `block` = 32 the per-group cost. Attention at
//!   1×2×1×16×256×64×64 with `block` 1, 2, 4, 8, 16 gives its per-flop costs.
//! - **graph kernels** (per native width, caller): every launch of the unfused
//!   chains of masked_softmax, swiglu, gelu_residual (32×1024) and attention
//!   but attention's softmax, timed alone: the element-wise maps' cost per
//!   tensor and per flop, the row softmax's per element (on masked_softmax's
//!   1024-column row), scores' and probs·v's per flop.
//! - **pool** (all cores): an empty launch of one task per worker, hot, against
//!   the caller path (launch overheads); 256 empty tasks against one chunk per
//!   worker (per-task cost); 16 busy tasks of 2 µs, back-to-back and after an
//!   idle gap of 1 ms, give the hot and the cold helper arrival.
//! - **memory**: rmsnorm moving 4× the private cache, 8×, … up to 2× the LLC,
//!   on the caller and on every worker, less its predicted compute: the
//!   bandwidth curve, as the kernels stream.
//!
//! The calling thread is pinned to the first allowed CPU while it measures (see
//! [`CallerPin`]), as the bench harnesses do.
//!
//! Each figure is the fastest of 7 batches of calls lasting ≥ 100 µs each (the
//! cold arrival: the lower quartile of 12 launches). The kernels and graph
//! kernels that one fit compares run their batches interleaved, round by
//! round, so that a change in the machine's speed lands on all of them alike,
//! and each is the first one's fastest batch times its median ratio to the
//! first one within a round (see `paired_rounds`).

use super::cache::{self, Loaded};
use super::cost::{
    ATTN_BLOCKS, Bandwidth, CostModel, GraphCost, KernelCost, OVERLAP_EXPONENT, ROW_OPS, WidthCost,
};
use super::interference::{self, CpuTimes};
use super::profile::{LaunchProfile, Work};
use crate::buffer;
use crate::error::Result;
use crate::ops::{self, AttnShape, LaunchConfig, Op, OpInputs, OwnedInputs, Shape};
use crate::packet::Backend;
use crate::pool::{CallerPin, Grain, Pool, PoolConfig};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::simt::{PacketMode, Tiling};
use crate::stats::median;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The attention shape calibration measures: one KV head shared by two query
/// heads, 16 query rows, 256 keys, head dimension 64.
const ATTN_SHAPE: AttnShape = AttnShape {
    batch: 1,
    q_heads: 2,
    kv_heads: 1,
    q_len: 16,
    kv_len: 256,
    dk: 64,
    dv: 64,
};

/// Rounds of [`paired_rounds`].
const ROUNDS: usize = 7;

/// µs per call of each of `count` workloads, timed in [`ROUNDS`] interleaved
/// rounds of one batch each: workload 0's fastest batch, and each other
/// workload's as that times the median, over the rounds, of its batch's
/// ratio to workload 0's batch of the same round. `batch(i, calls)` times
/// `calls` back-to-back calls of workload `i` (already warm) and returns µs
/// per call; one call of each first sizes its batches to about `batch_us`
/// (at most 20 000 calls). Other work on the machine only ever adds time, so
/// the minimum is the machine's own cost (a median would calibrate the load
/// of the moment into the model).
///
/// The others are paired with it because this host runs in phases, one ~1.4×
/// faster than the other (`examples/phases.rs`), that can switch between two
/// batches: with each workload's own fastest batch, a switch in the last
/// round gives the workloads timed after it a fast batch the others never
/// had (the likeliest reading of what follows). One calibration put the graph softmax's costs with 1, 2, 4 and 8 accumulators
/// at [0.816, 0.74, 0.873, 0.614] ns per element — 8 the cheapest by 17 % —
/// where in 12 s series of masked_softmax 3x1024 to 257x1538 the whole row
/// (8) never ran more than 1 % faster than local W (1) in a fast window, and
/// 15–25 % slower in a slow one; `auto` ran the whole row at 1.11–1.14× the
/// oracle (3x1024, 129x768; AMD EPYC, W8, 2026-12-07). A switch in the
/// middle of a round now moves that round's ratios, which the median drops.
fn paired_rounds<E>(
    count: usize,
    batch_us: f64,
    mut batch: impl FnMut(usize, usize) -> std::result::Result<f64, E>,
) -> std::result::Result<Vec<f64>, E> {
    let mut calls = Vec::with_capacity(count);
    for i in 0..count {
        let once = batch(i, 1)?;
        calls.push(((batch_us / once.max(0.01)).ceil() as usize).clamp(1, 20_000));
    }
    let mut rounds = vec![Vec::with_capacity(ROUNDS); count];
    for _ in 0..ROUNDS {
        for (i, times) in rounds.iter_mut().enumerate() {
            times.push(batch(i, calls[i])?);
        }
    }
    let Some(reference) = rounds.first() else {
        return Ok(Vec::new());
    };
    let fastest = reference.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(rounds
        .iter()
        .map(|times| {
            let ratios: Vec<f64> = times
                .iter()
                .zip(reference)
                .map(|(&t, &r)| t / r.max(1e-9))
                .collect();
            fastest * median(&ratios)
        })
        .collect())
}

/// µs per call of `f`: the fastest of [`ROUNDS`] batches of ≥ `batch_us`
/// each, after one untimed call (see [`paired_rounds`]).
fn time_us(batch_us: f64, mut f: impl FnMut()) -> f64 {
    f();
    let Ok(best) = paired_rounds(1, batch_us, |_, calls| {
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        Ok::<f64, std::convert::Infallible>(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    });
    best[0]
}

/// One launch [`paired_on_caller`] times: its shape, geometry and inputs.
type CallerLaunch<'a> = (&'a Shape, LaunchConfig, &'a OwnedInputs);

/// µs per call of each of `launches` on the caller: [`paired_rounds`] of
/// batches of about 100 µs each. Interleaved, a change
/// in the machine's speed lands on every launch alike; timed one after the
/// other, it landed on one row length of a fit: one calibration, taken while
/// a neighbour shared the core, put rmsnorm's W8 cost per element at
/// 0.26 ns for 8 accumulators (0.12 on a quiet machine), level with 2 and 4,
/// and `auto` then ran 2 accumulators, 1.3–1.5× slower than the oracle's
/// plans (4 or 8 accumulators) on rmsnorm 129x768 and 3x1024 (Intel Xeon,
/// 2 vCPUs, 2026-12-06).
fn paired_on_caller(b: Backend, launches: &[CallerLaunch<'_>]) -> Result<Vec<f64>> {
    let mut prepared = Vec::with_capacity(launches.len());
    for &(shape, c, inputs) in launches {
        let launch = ops::prepare(inputs.view(), shape, b, c, PacketMode::FullPacket)?;
        let mut out = buffer::zeros(ops::output_len(shape));
        launch.run_on_caller(&mut out)?;
        prepared.push((launch, out));
    }
    paired_rounds(prepared.len(), 100.0, |i, calls| {
        let (launch, out) = &mut prepared[i];
        let t = Instant::now();
        for _ in 0..calls {
            launch.run_on_caller(out)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    })
}

/// Per-element costs for 1, 2, 4 and 8 packet accumulators, with none below
/// that of more accumulators: a row's elements cost the same instructions at
/// every count, and more accumulators only shorten the reduction's dependency
/// chain, so a fit that puts fewer below more measured noise. Unchecked, such
/// noise decided `auto`'s `local` (see `ACCUMULATORS_TOLERANCE`): one
/// calibration put layernorm's W8 costs at [0.336, 0.207, 0.223, 0.208] ns, auto
/// took 2 accumulators on 1024x4096, and they ran 15–35 % slower than 4 there
/// (1.61–1.69 against 1.39–1.47 ms on one worker). On a quiet machine 2
/// accumulators cost 15–27 % more per element than 4 for layernorm and
/// rmsnorm, below 1024 columns and past them (Intel Xeon, W8, 2026-12-06).
/// The per-row costs stay as fitted.
fn no_cheaper_with_fewer(mut elem_ns: [f64; 4]) -> [f64; 4] {
    for i in (0..3).rev() {
        elem_ns[i] = elem_ns[i].max(elem_ns[i + 1]);
    }
    elem_ns
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
        // The whole row (8 accumulators) at both lengths, one column more,
        // groups of one row, then locals W, 2W and 4W (1, 2 and 4
        // accumulators) at both lengths.
        let mut launches: Vec<CallerLaunch<'_>> = vec![
            (&s1, whole(c1, r), &in1),
            (&s2, whole(c2, r), &in2),
            (&s3, whole(c2 + 1, r), &in3),
            (&s2, whole(c2, 1), &in2),
        ];
        for a in [1usize, 2, 4] {
            let config = LaunchConfig {
                local: a * w,
                block: r,
            };
            launches.extend([(&s1, config, &in1), (&s2, config, &in2)]);
        }
        let t = paired_on_caller(b, &launches)?;
        let (t1, t2, t3, tg) = (t[0], t[1], t[2], t[3]);
        // ns per element and per row from the two row lengths.
        let fit = |t1: f64, t2: f64| {
            let (r1, r2) = (t1 * 1e3 / r as f64, t2 * 1e3 / r as f64);
            let elem = ((r2 - r1) / (c2 - c1) as f64).max(1e-4);
            (elem, (r1 - c1 as f64 * elem).max(0.0))
        };
        let (elem8, row8) = fit(t1, t2);
        let mut elem = [elem8; 4];
        let mut row_ns = [row8; 4];
        for ai in 0..3 {
            let (e, f) = fit(t[4 + 2 * ai], t[5 + 2 * ai]);
            elem[ai] = e.max(elem8 * 0.5);
            row_ns[ai] = f;
        }
        rows[i] = KernelCost {
            elem_ns: no_cheaper_with_fewer(elem),
            row_ns,
            tail_ns: ((t3 - t2) * 1e3 / r as f64 - elem8).max(0.0),
        };
        per_group.push(((tg - t2) / (r - 1) as f64).max(0.0));
    }
    // Attention.
    let a = ATTN_SHAPE;
    let shape = Shape::Attention(a);
    let inputs = OwnedInputs::generate(Op::Attention, shape, 1)?;
    let local = ops::attention::local_for(&a, w);
    let mut attn = [0.0; 5];
    let pg = median(&per_group);
    let launches: Vec<CallerLaunch<'_>> = ATTN_BLOCKS
        .iter()
        .map(|&block| (&shape, LaunchConfig { local, block }, &inputs))
        .collect();
    let times = paired_on_caller(b, &launches)?;
    for ((slot, &block), t) in attn.iter_mut().zip(&ATTN_BLOCKS).zip(times) {
        let groups = a.batch * a.q_heads * a.q_len.div_ceil(block);
        *slot = ((t - groups as f64 * pg) * 1e3 / a.flops()).max(1e-4);
    }
    Ok((
        WidthCost {
            width: w,
            rows,
            attn_flop_ns: attn,
            // Measured later, with a runtime of this width (`calibrate_graph`).
            graph: WidthCost::guess(w).graph,
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

/// Streaming bandwidth as the kernels see it, at each traffic of `sizes`
/// (bytes, increasing): rmsnorm (the lightest row operator) on the caller and
/// on every worker, with its compute time (as the model calibrated so far
/// predicts it) taken out of the smooth maximum the model adds the two with.
///
/// A plain `c = a + b` loop measured 15–16 GB/s from DRAM here, where the
/// kernels stream 30–35 GB/s with non-temporal stores: the model must be
/// calibrated with the stores the kernels use. And the same kernel streamed
/// 3 MB at 60 GB/s but 8 MB at 30: the curve is measured, not derived from
/// cache sizes.
fn calibrate_bandwidth(
    pool: &Pool,
    b: Backend,
    m: &CostModel,
    sizes: &[usize],
) -> Result<Vec<Bandwidth>> {
    let cols = 4096;
    let rows_of = |bytes: usize| (bytes / 8 / cols).max(1);
    let max_rows = sizes.iter().map(|&s| rows_of(s)).max().unwrap_or(1);
    let x: Vec<f32> = (0..max_rows * cols)
        .map(|i| (i % 251) as f32 / 64.0 - 2.0)
        .collect();
    let x = buffer::from_slice(&x);
    let weight = buffer::filled(1.0, cols);
    let mut out = buffer::zeros(max_rows * cols);
    let mut curve = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let rows = rows_of(size);
        let n = rows * cols;
        let shape = Shape::rows(rows, cols);
        let inputs = OpInputs::new(Op::RmsNorm, &shape, &[&x[..n], &weight])?;
        let config = super::default_config(Op::RmsNorm, &shape, b.width());
        let launch = ops::prepare(inputs, &shape, b, config, PacketMode::FullPacket)?;
        let mut err = None;
        let mut go = |g: Grain, out: &mut [f32]| {
            if let Err(e) = pool.launch(launch.tiling(), g, out, &|i, o| launch.run_group(i, o)) {
                err = Some(e);
            }
        };
        let one = time_us(1.0, || go(Grain::Caller, &mut out[..n]));
        let all = time_us(1.0, || go(Grain::Legacy, &mut out[..n])).min(one);
        if let Some(e) = err {
            return Err(e);
        }
        let profile = LaunchProfile::for_op(Op::RmsNorm, &shape)?;
        let gbps = |t: f64, grain: Grain, workers: usize| {
            let c = m.breakdown(&profile, b.width(), config, grain, workers);
            let body = (t - c.overhead_us).max(1e-3);
            // t = smooth_max(compute, memory), solved for memory; a launch
            // that measured as compute-bound leaves memory at half its time.
            let p = OVERLAP_EXPONENT;
            let memory = (body.powi(p) - c.compute_us.powi(p))
                .max(0.0)
                .powf(1.0 / p as f64)
                .max(0.5 * body);
            profile.bytes() / memory / 1e3
        };
        curve.push(Bandwidth {
            bytes: profile.bytes(),
            one_gbps: gbps(one, Grain::Caller, 1),
            all_gbps: gbps(all, Grain::Legacy, pool.workers_granted()),
        });
    }
    Ok(curve)
}

/// The costs of the graph's own kernels at `rt`'s width: every launch of the
/// unfused chains of masked_softmax, swiglu and gelu_residual at 32×1024 and of
/// attention at 1×2×1×16×256×64×64 (but attention's softmax), each timed alone
/// on the caller (data in L2). The maps give ns per tensor and per flop (a
/// least-squares fit over add, mul, silu and gelu), masked_softmax's softmax
/// ns per element with 1, 2, 4 and 8 accumulators (locals W, 2W, 4W and the
/// whole row), scores and probs·v ns per flop in groups of 16 query rows and
/// of one (the fused attention's sensitivity to the block measured 5×, theirs
/// far less). `wc` holds this width's operator costs, calibrated already.
fn calibrate_graph(rt: &Runtime, m: &CostModel, wc: &WidthCost) -> Result<GraphCost> {
    let w = rt.backend().width();
    let mut maps: Vec<(f64, f64, f64)> = Vec::new();
    let mut softmax: Option<[f64; 4]> = None;
    let mut attn: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let a = ATTN_SHAPE;
    let rows = Shape::rows(32, 1024);
    for (op, shape) in [
        (Op::MaskedSoftmax, rows),
        (Op::SwiGlu, rows),
        (Op::GeluResidual, rows),
        (Op::Attention, Shape::Attention(a)),
    ] {
        let graph = crate::graph::for_op(op, &shape, false)?;
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let view = inputs.view();
        let (list, n) = view.tensors();
        let mut out = buffer::zeros(ops::output_len(&shape));
        rt.run_graph(&graph, &list[..n], &mut out, &mut |_, p, _, measure| {
            let config = match p.work {
                Work::Rows { rows, cols, .. } => LaunchConfig {
                    local: cols.div_ceil(w) * w,
                    block: rows,
                },
                Work::Attention(a) => LaunchConfig {
                    local: ops::attention::local_for(&a, w),
                    block: a.q_len.min(ATTN_BLOCKS[4]),
                },
            };
            // ns per call of each of `configs` on the caller, net of the
            // launch and its groups: `paired_rounds` of batches of about
            // 100 µs, so that a drift of the machine's speed during the
            // calibration lands on every config alike.
            let mut paired_ns = |configs: &[LaunchConfig]| -> Result<Vec<f64>> {
                let best = paired_rounds(configs.len(), 100.0, |j, calls| {
                    measure(configs[j], Grain::Caller, calls)
                })?;
                Ok(best
                    .iter()
                    .zip(configs)
                    .map(|(&t, c)| {
                        let groups = p.groups(c.block) as f64;
                        (t - m.caller_launch_us - m.per_group_us * groups).max(0.0) * 1e3
                    })
                    .collect())
            };
            match p.work {
                Work::Rows {
                    rows,
                    cols,
                    reduce_passes,
                    ..
                } => {
                    // ns per element of a body with `a_index` = log2 of its
                    // accumulator count, after the fixed per-row costs.
                    let per = |ns: f64, a_index: usize| {
                        let fixed = wc.rows[0].row_ns[a_index] * reduce_passes.max(1) as f64;
                        (ns / rows as f64 - fixed).max(0.0) / cols as f64
                    };
                    if reduce_passes == 0 {
                        let body_ns = paired_ns(&[config])?[0];
                        maps.push((p.bytes_per_elem / 4.0, p.flops_per_elem, per(body_ns, 3)));
                    } else if op == Op::MaskedSoftmax {
                        // Locals W, 2W and 4W reduce into 1, 2 and 4
                        // accumulators (the row is longer than 4W); the whole
                        // row into 8. The counts differ by a few percent, so
                        // one row measures them all, interleaved: each count's
                        // median over this row and attention's 256-column
                        // one, measured one after the other, put 8
                        // accumulators 13 % cheaper than 1 where this graph
                        // ran them 4 % dearer (Intel Xeon, W8, 2026-12-05).
                        let configs: Vec<LaunchConfig> = (0..3)
                            .map(|k| LaunchConfig {
                                local: w << k,
                                ..config
                            })
                            .chain([config])
                            .collect();
                        let ns = paired_ns(&configs)?;
                        softmax = Some(std::array::from_fn(|k| per(ns[k], k)));
                    }
                }
                Work::Attention(_) => {
                    // Groups of 16 query rows (`config`), and of one.
                    let flops = p.flops_per_elem * p.elements() as f64;
                    let ns = paired_ns(&[LaunchConfig { block: 1, ..config }, config])?;
                    attn[0].push(ns[0] / flops);
                    attn[1].push(ns[1] / flops);
                }
            }
            Ok((config, Grain::Caller))
        })?;
    }
    let mut cost = wc.graph;
    if let Some((t, f)) = fit_map(&maps) {
        cost.map_tensor_ns = t;
        cost.map_flop_ns = f;
    }
    if let Some(by_a) = softmax {
        cost.softmax_elem_ns = by_a;
    }
    for (slot, v) in cost.attn_flop_ns.iter_mut().zip(&attn) {
        if !v.is_empty() {
            *slot = median(v).max(1e-5);
        }
    }
    Ok(cost)
}

/// Least squares `ns = tensors · a + flops · b` (both ≥ 0) over `(tensors,
/// flops, ns)` points; `None` without points.
fn fit_map(points: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    if points.is_empty() {
        return None;
    }
    let sum = |f: &dyn Fn(&(f64, f64, f64)) -> f64| points.iter().map(f).sum::<f64>();
    let (xx, xy, yy) = (
        sum(&|p| p.0 * p.0),
        sum(&|p| p.0 * p.1),
        sum(&|p| p.1 * p.1),
    );
    let (xz, yz) = (sum(&|p| p.0 * p.2), sum(&|p| p.1 * p.2));
    let det = xx * yy - xy * xy;
    let (a, b) = if det.abs() > 1e-9 * xx * yy {
        ((xz * yy - yz * xy) / det, (yz * xx - xz * xy) / det)
    } else {
        (-1.0, -1.0)
    };
    Some(if a >= 0.0 && b >= 0.0 {
        (a, b)
    } else if b < 0.0 || yy == 0.0 {
        ((xz / xx).max(0.0), 0.0)
    } else {
        (0.0, (yz / yy).max(0.0))
    })
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
    /// The share (0–1) of the allowed CPUs' time that other work (other
    /// processes, the hypervisor's steal) took while it measured; `None`
    /// where unknown (see [`super::interference`]).
    pub interference: Option<f64>,
}

/// The most [`Calibration::interference`] a calibration may have seen and
/// still be cached. Under load every figure is off, and not alike: one
/// calibration taken while a cargo build shared both vCPUs measured the
/// pool's launch at 0.63 µs (0.11 quiet), a hot helper's arrival at 2.5 µs
/// (1.1), and every worker streaming 4 and 16 MB at half one worker's rate
/// (53 against 102 GB/s); `auto`, planning with it, kept the first launch of
/// the unfused swiglu 257x1538 on the caller and ran 1.70× the oracle (AMD
/// EPYC, 2 vCPUs, 2026-12-07). On a quiet machine the share stays under
/// a few percent.
pub const MAX_INTERFERENCE: f64 = 0.25;

/// Measures a [`CostModel`] for this machine: every native width, a pool on all cores.
pub fn calibrate() -> Result<Calibration> {
    let start = Instant::now();
    // The CPUs the pool may use, before the caller is pinned to one of them.
    let cpus = crate::pool::allowed_cpus();
    let before = CpuTimes::now(&cpus);
    // The pool's helpers are pinned to the CPUs after the first; an unpinned
    // caller could share a helper's CPU and calibrate a pool that never helps.
    // (The pool is built first: it spreads its helpers over the CPUs its
    // builder may use.)
    let pool = Pool::new(PoolConfig::default())?;
    let _pin = CallerPin::first_allowed();
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
    for &b in &backends {
        let (wc, pg) = calibrate_width(b)?;
        widths.push(wc);
        groups.push(pg);
    }
    m.per_group_us = median(&groups);
    m.widths = widths;
    let (caller, pooled, per_task, hot, cold) = calibrate_pool(&pool)?;
    m.caller_launch_us = caller;
    m.pool_launch_us = pooled;
    m.per_task_us = per_task;
    m.helper_arrival_us = hot;
    m.helper_arrival_cold_us = cold;
    for (i, &b) in backends.iter().enumerate() {
        let rt = Runtime::new(RuntimeConfig {
            pool: PoolConfig {
                workers: 1,
                ..PoolConfig::default()
            },
            // (`None` = the scalar fallback, on a CPU without a native width.)
            width: Backend::native(b.width()).ok().map(|_| b.width()),
            mode: PacketMode::FullPacket,
            model: ModelSource::Builtin,
            cache_dir: None,
        })?;
        m.widths[i].graph = calibrate_graph(&rt, &m, &m.widths[i])?;
    }
    let widest = *backends
        .iter()
        .max_by_key(|b| b.width())
        .expect("at least one backend");
    // Traffic from 4× the private cache (at least 1 MiB) to 2× the LLC
    // (bounded for huge caches), in doublings.
    let mut sizes = Vec::new();
    let mut size = (4 * m.private_cache_bytes).max(1 << 20);
    let top = (2 * m.llc_bytes).clamp(16 << 20, 512 << 20);
    while size < top {
        sizes.push(size);
        size *= 2;
    }
    sizes.push(top);
    m.bandwidth = calibrate_bandwidth(&pool, widest, &m, &sizes)?;
    m.calibrated = true;
    let interference = before
        .zip(CpuTimes::now(&cpus))
        .and_then(|(a, b)| interference::share(a, b));
    Ok(Calibration {
        model: m,
        seconds: start.elapsed().as_secs_f64(),
        interference,
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
    /// `true` if this call calibrated and stored the result in the cache.
    pub stored: bool,
    /// The calibration's [`Calibration::interference`] (`None` when reused,
    /// built-in or unknown).
    pub interference: Option<f64>,
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
                    stored: false,
                    interference: None,
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
            stored: false,
            interference: None,
            notes,
        });
    }
    let c = calibrate()?;
    let (stored, note) = store(&c, &file);
    notes.push(note);
    Ok(ModelLoad {
        model: c.model,
        reused: false,
        seconds: c.seconds,
        stored,
        interference: c.interference,
        notes,
    })
}

/// Stores calibration `c` in `file` unless other work took more than
/// [`MAX_INTERFERENCE`] of the CPUs while it measured; whether it did, and
/// the note that says what happened.
fn store(c: &Calibration, file: &Path) -> (bool, String) {
    if let Some(share) = c.interference.filter(|&s| s > MAX_INTERFERENCE) {
        let note = format!(
            "calibrated in {:.2} s while other work took {:.0} % of the CPUs' time; \
             not stored, so later runs do not plan with a model measured under load \
             (run `taskgrain calibrate` on a quiet machine)",
            c.seconds,
            100.0 * share
        );
        return (false, note);
    }
    match cache::store(file, KIND, &c.model) {
        Ok(()) => (
            true,
            format!(
                "calibrated in {:.2} s, stored in {}",
                c.seconds,
                file.display()
            ),
        ),
        Err(e) => (
            false,
            format!("calibrated in {:.2} s but not stored: {e}", c.seconds),
        ),
    }
}

/// [`load_or_calibrate`]'s model and notes.
pub fn load_model(dir: &Path, source: ModelSource) -> Result<(CostModel, Vec<String>)> {
    let l = load_or_calibrate(dir, source)?;
    Ok((l.model, l.notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_disturbed_by_other_work_is_not_stored() {
        let dir = std::env::temp_dir().join(format!("taskgrain-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = path(&dir);
        let calibration = |interference| Calibration {
            model: CostModel::default(),
            seconds: 0.5,
            interference,
        };
        let (stored, note) = store(&calibration(Some(0.4)), &file);
        assert!(!stored && !file.exists());
        assert!(
            note.contains("40 %") && note.contains("not stored"),
            "{note}"
        );
        for quiet in [Some(0.02), None] {
            let (stored, note) = store(&calibration(quiet), &file);
            assert!(stored && file.exists(), "{note}");
            std::fs::remove_file(&file).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Workloads of equal cost, timed in a slow phase that ends just before
    /// the last workload's batch of the last round.
    #[test]
    fn a_phase_switch_within_a_round_does_not_cheapen_one_workload() {
        let (count, slow, fast) = (4usize, 1.4, 1.0);
        let mut batches = vec![0usize; count];
        let times = paired_rounds(count, 100.0, |i, _| {
            // Batch 0 of each workload sizes its batches; 1..=ROUNDS are rounds.
            let round = batches[i];
            batches[i] += 1;
            let switched = i == count - 1 && round == ROUNDS;
            Ok::<f64, ()>(if switched { fast } else { slow })
        })
        .unwrap();
        assert_eq!(times, vec![slow; count]);
        assert!(batches.iter().all(|&b| b == ROUNDS + 1));
        // Costs that differ keep their ratios: the reference's fastest round
        // times each one's median ratio to it.
        let costs = [2.0, 1.0, 3.0];
        let mut round = 0usize;
        let times = paired_rounds(costs.len(), 100.0, |i, _| {
            round += usize::from(i == 0);
            let phase = if round.is_multiple_of(3) { fast } else { slow };
            Ok::<f64, ()>(costs[i] * phase)
        })
        .unwrap();
        for (t, c) in times.iter().zip(costs) {
            assert!((t - c * fast).abs() < 1e-12, "{times:?}");
        }
    }

    #[test]
    fn fewer_accumulators_never_cost_less_per_element() {
        // The calibration that sent layernorm 1024x4096 to 2 accumulators.
        assert_eq!(
            no_cheaper_with_fewer([0.336, 0.207, 0.223, 0.208]),
            [0.336, 0.223, 0.223, 0.208]
        );
        assert_eq!(
            no_cheaper_with_fewer([0.1, 0.2, 0.3, 0.4]),
            [0.4, 0.4, 0.4, 0.4]
        );
        let ordered = [0.4, 0.3, 0.2, 0.1];
        assert_eq!(no_cheaper_with_fewer(ordered), ordered);
    }
}
