//! A graph call performs no heap allocation after the first: the executor's
//! arena keeps the intermediates, and planned launches allocate nothing. A
//! counting global allocator watches many calls of every operator's graph,
//! fused and unfused, with explicit plans, through `run_planned`, through
//! `Runtime::run` with a fixed geometry and grain, and through `Runtime::run`
//! planned by `auto` (once its refinement has run: the planner remembers each
//! launch under a key that allocates nothing). Alone in
//! its own binary without the libtest harness (`harness = false`), whose threads
//! would allocate while the window is open.

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, allocations};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::plan::{calibrate::ModelSource, default_config};
use taskgrain::pool::{Grain, PoolConfig};
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
use taskgrain::simt::PacketMode;

#[global_allocator]
static GLOBAL: Counting = Counting;

const SHAPES: [(Op, &str); 7] = [
    (Op::RmsNorm, "17x65"),
    (Op::LayerNorm, "33x100"),
    (Op::MaskedSoftmax, "64x130"),
    (Op::SwiGlu, "64x256"),
    (Op::GeluResidual, "40x77"),
    (Op::Rope, "16x64"),
    (Op::Attention, "1x4x2x16x32x16x16"),
];

fn main() {
    graph_calls_do_not_allocate();
    println!("graph_alloc: graph_calls_do_not_allocate ... ok");
}

fn graph_calls_do_not_allocate() {
    let _w = common::watchdog(300, "graph allocation count");
    let rt = Runtime::new(RuntimeConfig {
        pool: PoolConfig::with_workers(2),
        width: None,
        mode: PacketMode::FullPacket,
        model: ModelSource::Builtin,
        cache_dir: Some(std::env::temp_dir().join("taskgrain-test-graph-alloc")),
    })
    .unwrap();
    let w = rt.backend().width();
    grow_every_attention_scratch(&rt);
    for (op, dims) in SHAPES {
        let shape = Shape::parse(op, dims).unwrap();
        let inputs = OwnedInputs::generate(op, shape, 3).unwrap();
        let (tensors, n) = inputs.view().tensors();
        let mut out = vec![0.0f32; ops::output_len(&shape)];
        for fusion in [true, false] {
            let graph = rt.graph(op, &shape, fusion).unwrap();
            let config = default_config(op, &shape, w);
            for grain in [
                Grain::Caller,
                Grain::tasks(1).unwrap(),
                Grain::tasks(3).unwrap(),
            ] {
                let plans = vec![(config, grain); graph.launches()];
                let opts = RunOptions {
                    fusion,
                    config: Some(config),
                    grain: Some(grain),
                    ..RunOptions::default()
                };
                let auto = RunOptions {
                    fusion,
                    ..RunOptions::default()
                };
                // Warm up: the arena's first intermediates, the helpers' first
                // wake-ups, auto's refinement.
                for _ in 0..50 {
                    rt.run_planned(&graph, &tensors[..n], &mut out, &plans)
                        .unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &auto).unwrap();
                }
                let before = allocations();
                for _ in 0..200 {
                    rt.run_planned(&graph, &tensors[..n], &mut out, &plans)
                        .unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &auto).unwrap();
                }
                let allocs = allocations() - before;
                assert_eq!(
                    allocs, 0,
                    "{op} {dims} fusion {fusion} grain {grain:?}: {allocs} allocations in 600 calls"
                );
            }
        }
    }
}

/// The attention kernel keeps a scratch vector per thread, grown on the thread's
/// first attention group and then reused. A small launch may never reach the
/// helper in warm-up, so grow it first with launches of a larger head (more
/// scratch than the tested shapes need) until the helper has run part of one.
fn grow_every_attention_scratch(rt: &Runtime) {
    let shape = Shape::parse(Op::Attention, "1x8x8x128x512x64x64").unwrap();
    let inputs = OwnedInputs::generate(Op::Attention, shape, 5).unwrap();
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let opts = RunOptions {
        config: Some(default_config(Op::Attention, &shape, rt.backend().width())),
        grain: Some(Grain::tasks(1).unwrap()),
        ..RunOptions::default()
    };
    let helped = (0..1000).any(|_| {
        rt.run(inputs.view(), &shape, &mut out, &opts)
            .unwrap()
            .helped
    });
    assert!(helped, "the helper never joined an attention launch");
}
