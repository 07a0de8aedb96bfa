//! Real kernels through the pool: output bytes identical for every grain and
//! worker count (including oversubscribed pools), for every native backend.

use taskgrain::bench::suites::seed_cases;
use taskgrain::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;
use taskgrain::plan::calibrate::ModelSource;
use taskgrain::pool::{Grain, PoolConfig};
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
use taskgrain::simt::PacketMode;

fn runtime(workers: usize, width: usize) -> Runtime {
    Runtime::new(RuntimeConfig {
        pool: PoolConfig {
            oversubscribe: true,
            ..PoolConfig::with_workers(workers)
        },
        width: Some(width),
        mode: PacketMode::FullPacket,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn hash(rt: &Runtime, inputs: &OwnedInputs, config: LaunchConfig, grain: Grain) -> String {
    let shape = inputs.shape();
    let launch = rt.prepare(inputs.view(), &shape, config).unwrap();
    let mut out = vec![f32::NAN; ops::output_len(&shape)];
    rt.launch(&launch, grain, &mut out).unwrap();
    ops::output_hash(&out)
}

const GRAINS: [u32; 5] = [0, 1, 3, 7, u32::MAX];

#[test]
fn issue_rows_are_byte_identical_across_grains_and_workers() {
    for (op, s) in [
        (Op::RmsNorm, "129x768"),
        (Op::Attention, "1x4x2x16x32x16x16"),
    ] {
        let shape = Shape::parse(op, s).unwrap();
        let inputs = OwnedInputs::generate(op, shape, 1).unwrap();
        for b in Backend::all_native() {
            let w = b.width();
            let config = match op {
                Op::Attention => LaunchConfig {
                    local: 16usize.div_ceil(w) * w,
                    block: 4,
                },
                _ => LaunchConfig {
                    local: 8,
                    block: 32,
                },
            };
            let mut seen = None;
            for workers in [1, 2, 8] {
                let rt = runtime(workers, w);
                for g in GRAINS {
                    let h = hash(&rt, &inputs, config, Grain::from_u32(g));
                    let first = seen.get_or_insert_with(|| h.clone());
                    assert_eq!(&h, first, "{op} {s} W{w} workers {workers} grain {g}");
                }
            }
        }
    }
}

#[test]
fn every_seed_row_is_identical_on_the_pool_and_on_the_caller() {
    let b = Backend::best(8);
    let rt = runtime(3, b.width());
    for (op, shape) in seed_cases() {
        if ops::output_len(&shape) > 1 << 20 {
            continue;
        }
        let inputs = OwnedInputs::generate(op, shape, 2).unwrap();
        let config = taskgrain::plan::default_config(op, &shape, b.width());
        let config = LaunchConfig {
            block: config.block.div_ceil(4).max(1),
            ..config
        };
        let caller = hash(&rt, &inputs, config, Grain::Caller);
        for g in [0, 1, 2] {
            assert_eq!(
                hash(&rt, &inputs, config, Grain::from_u32(g)),
                caller,
                "{op} {shape} grain {g}"
            );
        }
    }
}

/// Streamed (non-temporal) stores are weakly ordered, and the pool publishes
/// them once per helper visit and once per caller run, not per work-group: every
/// row operator, forced to stream, gives on the pool (helpers writing most of the
/// groups) the bytes its cached launch gives on the caller, call after call.
#[test]
fn streamed_launches_on_the_pool_match_the_caller() {
    let b = Backend::best(8);
    let rt = runtime(3, b.width());
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        let shape = Shape::rows(96, 1030);
        let inputs = OwnedInputs::generate(op, shape, 3).unwrap();
        let config = LaunchConfig {
            block: 2,
            ..taskgrain::plan::default_config(op, &shape, b.width())
        };
        let launch = rt.prepare(inputs.view(), &shape, config).unwrap();
        let mut cached = vec![f32::NAN; ops::output_len(&shape)];
        rt.launch(&launch, Grain::Caller, &mut cached).unwrap();
        let streamed = launch.with_stream(true);
        for call in 0..20 {
            for g in [0, 1, 5] {
                let mut out = vec![f32::NAN; cached.len()];
                rt.launch(&streamed, Grain::from_u32(g), &mut out).unwrap();
                assert!(
                    out.iter()
                        .zip(&cached)
                        .all(|(a, c)| a.to_bits() == c.to_bits()),
                    "{op} {shape} grain {g} call {call}: streamed bytes differ"
                );
            }
        }
    }
}

/// `auto` picks `local` (which fixes a row's reduction order) per shape, not per
/// pool: what a user gets from `Runtime::run` is the same bytes on 1, 2 or 8
/// workers, before and after refinement, whatever grain it settles on — fused,
/// and as the chain of launches, whose refinement reruns each launch's
/// producers before timing it (and writes intermediates and the output).
#[test]
fn auto_output_does_not_depend_on_the_worker_count() {
    let b = Backend::best(8);
    for (op, s) in [
        (Op::RmsNorm, "129x768"),
        (Op::LayerNorm, "257x1538"),
        (Op::MaskedSoftmax, "17x65"),
        (Op::SwiGlu, "64x256"),
        (Op::Rope, "129x768"),
        (Op::GeluResidual, "17x66"),
        (Op::Attention, "1x4x2x16x32x16x16"),
    ] {
        let shape = Shape::parse(op, s).unwrap();
        let inputs = OwnedInputs::generate(op, shape, 4).unwrap();
        let reference = ops::reference(inputs.view(), &shape);
        for fusion in [true, false] {
            let opts = RunOptions {
                fusion,
                ..RunOptions::default()
            };
            let mut seen = None;
            for workers in [1, 2, 8] {
                let rt = Runtime::new(RuntimeConfig {
                    pool: PoolConfig::with_workers(workers),
                    width: Some(b.width()),
                    model: ModelSource::Builtin,
                    cache_dir: Some(std::env::temp_dir().join("taskgrain-test-auto-determinism")),
                    ..RuntimeConfig::default()
                })
                .unwrap();
                for call in 0..6 {
                    let mut out = vec![f32::NAN; ops::output_len(&shape)];
                    rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                    let what = format!("{op} {s} fusion {fusion} workers {workers} call {call}");
                    assert!(
                        ops::compare(&out, &reference, ops::tolerance(op)).ok,
                        "{what}"
                    );
                    let h = ops::output_hash(&out);
                    let first = seen.get_or_insert_with(|| h.clone());
                    assert_eq!(&h, first, "{what}");
                }
            }
        }
    }
}

/// `auto` chooses `local` freely for element-wise work (no row reduction), so
/// those kernels' bits must not depend on `local` — nor on `block`, the packet
/// mode or whether the operator runs fused or as its chain of launches.
#[test]
fn element_wise_output_does_not_depend_on_local() {
    for (op, s) in [
        (Op::SwiGlu, "17x66"),
        (Op::SwiGlu, "3x1025"),
        (Op::GeluResidual, "17x66"),
        (Op::GeluResidual, "5x1031"),
        (Op::Rope, "17x66"),
        (Op::Rope, "3x1026"),
    ] {
        let shape = Shape::parse(op, s).unwrap();
        let mut inputs = OwnedInputs::generate(op, shape, 9).unwrap();
        if op == Op::GeluResidual {
            // Many lanes in gelu's tail path (|x| ≥ 2.12), where packets are gathered.
            for (i, x) in inputs.tensors_mut()[0].iter_mut().enumerate() {
                if i % 3 == 0 {
                    *x *= 4.0;
                }
            }
        }
        let cols = shape.dims()[1];
        for b in Backend::all_native() {
            let w = b.width();
            let mut seen = None;
            for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
                let rt = Runtime::new(RuntimeConfig {
                    pool: PoolConfig::with_workers(1),
                    width: Some(w),
                    mode,
                    model: ModelSource::Builtin,
                    cache_dir: Some(std::env::temp_dir().join("taskgrain-test-local-free")),
                })
                .unwrap();
                for local in [1, w - 1, w, 2 * w + 1, 3 * w, cols.div_ceil(w) * w] {
                    for block in [1, 5] {
                        for fusion in [true, false] {
                            let mut out = vec![f32::NAN; ops::output_len(&shape)];
                            let opts = RunOptions {
                                config: Some(LaunchConfig {
                                    local: local.max(1),
                                    block,
                                }),
                                grain: Some(Grain::Caller),
                                strategy: None,
                                fusion,
                            };
                            rt.run(inputs.view(), &shape, &mut out, &opts).unwrap();
                            let h = ops::output_hash(&out);
                            let first = seen.get_or_insert_with(|| h.clone());
                            assert_eq!(
                                &h, first,
                                "{op} {s} W{w} {mode:?} local {local} block {block} fusion {fusion}"
                            );
                        }
                    }
                }
            }
        }
    }
}
