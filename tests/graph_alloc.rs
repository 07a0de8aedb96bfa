//! A graph call performs no heap allocation after the first: the executor's
//! arena keeps the intermediates, and planned launches allocate nothing. A
//! counting global allocator watches many calls of every operator's graph,
//! fused and unfused, with explicit plans, through `run_planned` and through
//! `Runtime::run` with a fixed geometry and grain. (The `auto` planner's lookups
//! still build string keys per call; that is planning, not execution.) Alone in its own
//! binary without the libtest harness (`harness = false`), whose threads would
//! allocate while the window is open.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::plan::{calibrate::ModelSource, default_config};
use taskgrain::pool::{Grain, PoolConfig};
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
use taskgrain::simt::PacketMode;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

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
                // Warm up: the arena's first intermediates, the helpers' first
                // wake-ups.
                for _ in 0..50 {
                    rt.run_planned(&graph, &tensors[..n], &mut out, &plans)
                        .unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                }
                let before = ALLOCS.load(Ordering::SeqCst);
                for _ in 0..200 {
                    rt.run_planned(&graph, &tensors[..n], &mut out, &plans)
                        .unwrap();
                    rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                }
                let allocs = ALLOCS.load(Ordering::SeqCst) - before;
                assert_eq!(
                    allocs, 0,
                    "{op} {dims} fusion {fusion} grain {grain:?}: {allocs} allocations in 400 calls"
                );
            }
        }
    }
}
