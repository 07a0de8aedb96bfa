//! `taskgrain bench roofline`: each operator on one worker against the same-run
//! ceilings of this machine — a plain copy of the same bytes, and an FMA loop.

use super::timing::{median, time_calls};
use crate::buffer::{self, AlignedBuf};
use crate::error::Result;
use crate::ops::{self, Op, OwnedInputs, Shape};
use crate::packet::{Backend, Packet, WithPacket, dispatch};
use crate::plan::default_config;
use crate::simt::PacketMode;
use serde::Serialize;
use std::hint::black_box;

/// One operator's row of the roofline.
#[derive(Clone, Debug, Serialize)]
pub struct RooflineRow {
    /// Operator name.
    pub op: String,
    /// Shape dimensions.
    pub shape: Vec<usize>,
    /// Median call time, µs.
    pub p50_us: f64,
    /// Bytes read and written by one call.
    pub bytes: usize,
    /// Achieved bandwidth, GB/s.
    pub gbps: f64,
    /// Bandwidth of a copy of the same bytes, timed in rounds alternating with
    /// this operator's (row operators), GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_gbps: Option<f64>,
    /// Median over the paired rounds of this operator's GB/s over the copy's
    /// (row operators).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_of_copy: Option<f64>,
    /// Achieved GFLOP/s (attention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    /// Throughput of the FMA loop, timed in rounds alternating with this
    /// operator's (attention), GFLOP/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_gflops: Option<f64>,
    /// Median over the paired rounds of this operator's GFLOP/s over the FMA
    /// loop's (attention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_of_peak: Option<f64>,
}

/// Per-element cost of an awkward row width against its aligned neighbour.
#[derive(Clone, Debug, Serialize)]
pub struct TailRow {
    /// Operator name.
    pub op: String,
    /// p50 at 256×1536, µs.
    pub aligned_us: f64,
    /// p50 at 257×1538, µs.
    pub awkward_us: f64,
    /// Per-element time at 257×1538 over that at 256×1536 (median of paired rounds).
    pub per_element_ratio: f64,
}

/// The roofline report.
#[derive(Clone, Debug, Serialize)]
pub struct Roofline {
    /// Packet width used.
    pub width: usize,
    /// Backend name.
    pub backend: String,
    /// Bandwidth of a plain copy of as many bytes as the row operators move,
    /// measured once before the operators, GB/s (each row carries its paired one).
    pub copy_gbps: f64,
    /// FMA throughput of one core at this width, measured once before the
    /// operators, GFLOP/s (attention's row carries its paired one).
    pub peak_gflops: f64,
    /// One row per operator.
    pub rows: Vec<RooflineRow>,
    /// The tail-cliff check: 257×1538 against 256×1536 per element, per row operator.
    pub tail: Vec<TailRow>,
}

/// The shape every row operator is measured at.
pub const ROW_SHAPE: Shape = Shape::Rows {
    rows: 1024,
    cols: 4096,
};

/// The attention shape of the roofline.
pub const ATTN_SHAPE: &str = "1x4x1x64x128x32x32";

struct FmaLoop {
    iters: usize,
}

impl WithPacket for FmaLoop {
    type Output = f32;
    #[inline(always)]
    fn run<P: Packet>(self, p: P) -> f32 {
        let mut acc = [p.splat(1.0); 12];
        let a = p.splat(black_box(0.999_999));
        let b = p.splat(black_box(1e-7));
        for _ in 0..self.iters {
            for x in acc.iter_mut() {
                *x = p.fma(*x, a, b);
            }
        }
        let mut s = p.zero();
        for x in acc {
            s = p.add(s, x);
        }
        p.reduce_add(s)
    }
}

/// GFLOP/s of a register-resident FMA loop on the calling thread: the median of
/// `calls` timed loops of `iters` iterations after `warmup` untimed ones.
fn fma_gflops(backend: Backend, iters: usize, warmup: usize, calls: usize) -> f64 {
    let times = time_calls(warmup, calls, || {
        black_box(dispatch(
            backend,
            FmaLoop {
                iters: black_box(iters),
            },
        ));
    });
    let flops = (iters * 12 * backend.width() * 2) as f64;
    flops / median(&times) / 1e3
}

/// GFLOP/s of a register-resident FMA loop on the calling thread.
pub fn peak_gflops(backend: Backend) -> f64 {
    fma_gflops(backend, 200_000, 2, 9)
}

/// A plain copy of `bytes` in total (half read, half written), ready to time.
struct CopyLoop {
    src: AlignedBuf,
    dst: AlignedBuf,
}

impl CopyLoop {
    fn new(bytes: usize) -> Self {
        let n = (bytes / 8).max(1);
        CopyLoop {
            // Aligned like the operators' tensors, so the ceiling is as high.
            src: buffer::from_slice(&(0..n).map(|i| i as f32).collect::<Vec<_>>()),
            dst: buffer::zeros(n),
        }
    }

    fn bytes(&self) -> usize {
        2 * self.src.len() * 4
    }

    /// Median µs of `calls` timed copies after `warmup` untimed ones.
    fn p50_us(&mut self, warmup: usize, calls: usize) -> f64 {
        let (src, dst) = (&self.src, &mut self.dst);
        median(&time_calls(warmup, calls, || {
            dst.copy_from_slice(black_box(src));
            black_box(&mut *dst);
        }))
    }
}

/// GB/s of a plain copy moving `bytes` in total (half read, half written).
pub fn copy_gbps(bytes: usize) -> f64 {
    let mut copy = CopyLoop::new(bytes);
    copy.bytes() as f64 / copy.p50_us(2, 15) / 1e3
}

/// Rounds in which an operator and its copy ceiling are timed alternately.
const PAIRED_ROUNDS: usize = 9;

/// One operator measured on the caller. It alternates, round by round, with
/// its ceiling — row operators with a copy of exactly their bytes, attention
/// with the FMA loop — so both see the same machine state; the fraction is the
/// median of the per-round ratios.
struct Measured {
    p50_us: f64,
    bytes: usize,
    /// The ceiling's median over the rounds: copy GB/s or FMA GFLOP/s.
    ceiling: f64,
    fraction: f64,
}

fn measure(op: Op, shape: Shape, backend: Backend) -> Result<Measured> {
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let config = default_config(op, &shape, backend.width());
    let launch = ops::prepare(
        inputs.view(),
        &shape,
        backend,
        config,
        PacketMode::FullPacket,
    )?;
    let bytes = ops::traffic_bytes(op, &shape);
    let mut out = buffer::zeros(ops::output_len(&shape));
    let mut time_op = |warmup, calls| {
        median(&time_calls(warmup, calls, || {
            launch
                .run_on_caller(&mut out)
                .expect("output sized for the launch");
        }))
    };
    let (mut op_p50s, mut ceilings, mut fractions) = (Vec::new(), Vec::new(), Vec::new());
    if let Shape::Attention(a) = shape {
        for _ in 0..PAIRED_ROUNDS {
            let op_us = time_op(2, 25);
            let peak = fma_gflops(backend, 20_000, 1, 5);
            op_p50s.push(op_us);
            ceilings.push(peak);
            fractions.push(a.flops() / op_us / 1e3 / peak);
        }
    } else {
        let mut copy = CopyLoop::new(bytes);
        for _ in 0..PAIRED_ROUNDS {
            let op_us = time_op(1, 5);
            let copy_us = copy.p50_us(1, 5);
            op_p50s.push(op_us);
            ceilings.push(copy.bytes() as f64 / copy_us / 1e3);
            fractions.push((bytes as f64 / op_us) / (copy.bytes() as f64 / copy_us));
        }
    }
    Ok(Measured {
        p50_us: median(&op_p50s),
        bytes,
        ceiling: median(&ceilings),
        fraction: median(&fractions),
    })
}

/// Median p50s of two shapes of `op` and the median paired per-element ratio,
/// measured in interleaved rounds on the caller.
fn tail_check(op: Op, backend: Backend) -> Result<TailRow> {
    let shapes = [Shape::rows(256, 1536), Shape::rows(257, 1538)];
    let inputs = shapes
        .iter()
        .map(|&s| OwnedInputs::generate(op, s, 1))
        .collect::<Result<Vec<_>>>()?;
    let launches = inputs
        .iter()
        .zip(&shapes)
        .map(|(i, s)| {
            let config = default_config(op, s, backend.width());
            ops::prepare(i.view(), s, backend, config, PacketMode::FullPacket)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut outs: Vec<_> = shapes
        .iter()
        .map(|s| buffer::zeros(ops::output_len(s)))
        .collect();
    let elems: Vec<f64> = shapes.iter().map(|s| ops::output_len(s) as f64).collect();
    let (mut p50s, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    for _ in 0..7 {
        let mut round = [0.0; 2];
        for (k, launch) in launches.iter().enumerate() {
            let out = &mut outs[k];
            let t = time_calls(2, 15, || {
                launch
                    .run_on_caller(out)
                    .expect("output sized for the launch");
            });
            round[k] = median(&t);
            p50s[k].push(round[k]);
        }
        ratios.push((round[1] / elems[1]) / (round[0] / elems[0]));
    }
    Ok(TailRow {
        op: op.name().to_string(),
        aligned_us: median(&p50s[0]),
        awkward_us: median(&p50s[1]),
        per_element_ratio: median(&ratios),
    })
}

/// Measures every operator on one worker (the caller) at `backend`'s width.
pub fn run(backend: Backend) -> Result<Roofline> {
    let row_bytes = ops::traffic_bytes(Op::RmsNorm, &ROW_SHAPE);
    let copy = copy_gbps(row_bytes);
    let peak = peak_gflops(backend);
    let mut rows = Vec::new();
    for op in Op::ALL {
        let shape = if op == Op::Attention {
            Shape::parse(op, ATTN_SHAPE)?
        } else {
            ROW_SHAPE
        };
        let m = measure(op, shape, backend)?;
        let gbps = m.bytes as f64 / m.p50_us / 1e3;
        let attention = match shape {
            Shape::Attention(a) => Some(a.flops() / m.p50_us / 1e3),
            Shape::Rows { .. } => None,
        };
        let (row_op, attn) = (attention.is_none(), attention.is_some());
        rows.push(RooflineRow {
            op: op.name().to_string(),
            shape: shape.dims(),
            p50_us: m.p50_us,
            bytes: m.bytes,
            gbps,
            copy_gbps: row_op.then_some(m.ceiling),
            fraction_of_copy: row_op.then_some(m.fraction),
            gflops: attention,
            peak_gflops: attn.then_some(m.ceiling),
            fraction_of_peak: attn.then_some(m.fraction),
        });
    }
    let tail = Op::ALL
        .into_iter()
        .filter(|op| op.is_row_op())
        .map(|op| tail_check(op, backend))
        .collect::<Result<Vec<_>>>()?;
    Ok(Roofline {
        tail,
        width: backend.width(),
        backend: backend.name().to_string(),
        copy_gbps: copy,
        peak_gflops: peak,
        rows,
    })
}

/// The roofline as a Markdown table.
pub fn render_markdown(r: &Roofline) -> String {
    let mut s = format!(
        "# roofline ({}, one worker)\n\ncopy: {:.1} GB/s · FMA peak: {:.1} GFLOP/s\n\n\
         | op / shape | p50 µs | MB | GB/s | copy GB/s | of copy | GFLOP/s | peak GFLOP/s | of peak |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        r.backend, r.copy_gbps, r.peak_gflops
    );
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("—".to_string(), |v| format!("{v:.digits$}"));
    for row in &r.rows {
        let dims: Vec<String> = row.shape.iter().map(|d| d.to_string()).collect();
        s += &format!(
            "| {} {} | {:.2} | {:.1} | {:.1} | {} | {} | {} | {} | {} |\n",
            row.op,
            dims.join("×"),
            row.p50_us,
            row.bytes as f64 / 1e6,
            row.gbps,
            opt(row.copy_gbps, 1),
            opt(row.fraction_of_copy, 2),
            opt(row.gflops, 1),
            opt(row.peak_gflops, 1),
            opt(row.fraction_of_peak, 2),
        );
    }
    s += "\n## tail cliff: 257×1538 against 256×1536, per element\n\n\
          | op | 256×1536 µs | 257×1538 µs | per-element ratio |\n|---|---:|---:|---:|\n";
    for t in &r.tail {
        s += &format!(
            "| {} | {:.2} | {:.2} | {:.3} |\n",
            t.op, t.aligned_us, t.awkward_us, t.per_element_ratio
        );
    }
    s
}
