//! Operators as graphs: launch counts with fusion on and off, fused and unfused
//! results checked against the f64 reference on every native width with
//! full-packet on and off, bitwise equality where the docs promise it, and
//! output bytes independent of grain and worker count for unfused graphs.

use taskgrain::graph::{self, Binary, Expr, GraphBuilder, Kernel, Step, TensorShape, Unary};
use taskgrain::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;
use taskgrain::plan::calibrate::ModelSource;
use taskgrain::pool::{Grain, PoolConfig};
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
use taskgrain::simt::PacketMode;

fn runtime(workers: usize, width: usize, mode: PacketMode) -> Runtime {
    Runtime::new(RuntimeConfig {
        pool: PoolConfig {
            oversubscribe: true,
            ..PoolConfig::with_workers(workers)
        },
        width: Some(width),
        mode,
        model: ModelSource::Builtin,
        cache_dir: Some(std::env::temp_dir().join("taskgrain-test-graph")),
    })
    .unwrap()
}

fn shape(op: Op, s: &str) -> Shape {
    Shape::parse(op, s).unwrap()
}

/// Rows that exercise tails (1×1, W±1, primes, 257×1538) and both seed
/// attention shapes, plus a decode-style attention row.
fn cases(w: usize) -> Vec<(Op, Shape)> {
    let mut v = Vec::new();
    for op in Op::ALL.into_iter().filter(|o| o.is_row_op()) {
        let even = |c: usize| if op == Op::Rope { c + c % 2 } else { c };
        for (r, c) in [
            (1, 1),
            (3, w - 1),
            (2, w + 1),
            (7, 13),
            (257, 1538),
            (5, 97),
        ] {
            v.push((op, Shape::rows(r, even(c))));
        }
    }
    for s in [
        "1x4x2x16x32x16x16",
        "1x4x1x64x128x32x32",
        "2x4x2x1x37x24x40",
    ] {
        v.push((Op::Attention, shape(Op::Attention, s)));
    }
    v
}

#[test]
fn launch_counts_follow_the_design() {
    let rt = runtime(2, 8.min(Backend::best(8).width()), PacketMode::FullPacket);
    for (op, s, unfused) in [
        (Op::RmsNorm, "4x8", 1),
        (Op::LayerNorm, "4x8", 1),
        (Op::Rope, "4x8", 1),
        (Op::MaskedSoftmax, "4x8", 2),
        (Op::SwiGlu, "4x8", 2),
        (Op::GeluResidual, "4x8", 2),
        (Op::Attention, "1x4x2x3x5x8x8", 3),
    ] {
        let sh = shape(op, s);
        assert_eq!(rt.graph(op, &sh, true).unwrap().launches(), 1, "{op} fused");
        assert_eq!(
            rt.graph(op, &sh, false).unwrap().launches(),
            unfused,
            "{op}"
        );
    }
}

#[test]
fn fused_and_unfused_match_the_reference_everywhere() {
    for b in Backend::all_native() {
        for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
            let rt = runtime(2, b.width(), mode);
            for (op, sh) in cases(b.width()) {
                let inputs = OwnedInputs::generate(op, sh, 7).unwrap();
                let reference = ops::reference(inputs.view(), &sh);
                for fusion in [true, false] {
                    let mut out = vec![f32::NAN; ops::output_len(&sh)];
                    let opts = RunOptions {
                        fusion,
                        ..RunOptions::default()
                    };
                    rt.run(inputs.view(), &sh, &mut out, &opts).unwrap();
                    let c = ops::compare(&out, &reference, ops::tolerance(op));
                    assert!(
                        c.ok,
                        "{op} {sh} {} {mode:?} fusion {fusion}: max |err| {:.3e}",
                        b.name(),
                        c.max_abs_err
                    );
                }
            }
        }
    }
}

fn run_planned(
    rt: &Runtime,
    inputs: &OwnedInputs,
    fusion: bool,
    c: LaunchConfig,
    g: Grain,
) -> String {
    let sh = inputs.shape();
    let graph = rt.graph(inputs.op(), &sh, fusion).unwrap();
    let (t, n) = inputs.view().tensors();
    let mut out = vec![f32::NAN; ops::output_len(&sh)];
    let plans = vec![(c, g); graph.launches()];
    rt.run_planned(&graph, &t[..n], &mut out, &plans).unwrap();
    ops::output_hash(&out)
}

#[test]
fn elementwise_chains_are_bitwise_equal_fused_and_unfused() {
    for b in Backend::all_native() {
        let w = b.width();
        for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
            let rt = runtime(1, w, mode);
            for op in [Op::SwiGlu, Op::GeluResidual, Op::MaskedSoftmax] {
                for s in ["1x1", "3x17", "257x1538", "129x768"] {
                    let inputs = OwnedInputs::generate(op, shape(op, s), 3).unwrap();
                    for local in [w, 3 * w + 1, 2048] {
                        let c = LaunchConfig { local, block: 5 };
                        assert_eq!(
                            run_planned(&rt, &inputs, true, c, Grain::Caller),
                            run_planned(&rt, &inputs, false, c, Grain::Caller),
                            "{op} {s} {} {mode:?} local {local}",
                            b.name()
                        );
                    }
                }
            }
        }
    }
}

/// gelu_residual gathers the lanes in gelu's tail of many packets into whole
/// packets: with x spread wide (most lanes in the tail, more noted packets per
/// row than one batch holds) and extreme values, the fused kernel must still give
/// the unfused chain's bits and pass the reference.
#[test]
fn gelu_residual_tail_lanes_gathered_keep_their_bits() {
    let shape = Shape::rows(3, 1001);
    let mut inputs = OwnedInputs::generate(Op::GeluResidual, shape, 5).unwrap();
    {
        let x = &mut inputs.tensors_mut()[0];
        for v in x.iter_mut() {
            *v *= 6.0;
        }
        let specials = [
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -30.0,
            -13.0,
            2.2,
            -2.2,
        ];
        for (i, v) in specials.into_iter().enumerate() {
            x[1001 + 97 * i] = v;
        }
    }
    let reference = ops::reference(inputs.view(), &shape);
    for b in Backend::all_native() {
        let w = b.width();
        for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
            let rt = runtime(1, w, mode);
            for local in [w, 1008] {
                let c = LaunchConfig { local, block: 2 };
                assert_eq!(
                    run_planned(&rt, &inputs, true, c, Grain::Caller),
                    run_planned(&rt, &inputs, false, c, Grain::Caller),
                    "{} {mode:?} local {local}",
                    b.name()
                );
                let mut out = vec![f32::NAN; ops::output_len(&shape)];
                let graph = rt.graph(Op::GeluResidual, &shape, true).unwrap();
                let (t, n) = inputs.view().tensors();
                rt.run_planned(&graph, &t[..n], &mut out, &[(c, Grain::Caller)])
                    .unwrap();
                let r = ops::compare(&out, &reference, ops::tolerance(Op::GeluResidual));
                assert!(r.ok, "{} {mode:?} local {local}: {r:?}", b.name());
            }
        }
    }
}

#[test]
fn unfused_outputs_do_not_depend_on_grain_or_workers() {
    let w = Backend::best(8).width();
    for (op, s) in [
        (Op::MaskedSoftmax, "129x768"),
        (Op::SwiGlu, "257x1538"),
        (Op::GeluResidual, "129x768"),
        (Op::Attention, "1x4x2x16x32x16x16"),
        (Op::Attention, "1x4x1x64x128x32x32"),
    ] {
        let sh = shape(op, s);
        let inputs = OwnedInputs::generate(op, sh, 5).unwrap();
        let local = match sh {
            Shape::Attention(a) => ops::attention::local_for(&a, w),
            Shape::Rows { .. } => 8,
        };
        let c = LaunchConfig { local, block: 3 };
        let mut hashes = Vec::new();
        for workers in [1, 2, 8] {
            let rt = runtime(workers, w, PacketMode::FullPacket);
            for g in [0, 1, 3, u32::MAX] {
                for fusion in [true, false] {
                    let h = run_planned(&rt, &inputs, fusion, c, Grain::from_u32(g));
                    hashes.push((fusion, workers, g, h));
                }
            }
        }
        for fusion in [true, false] {
            let mut of = hashes.iter().filter(|h| h.0 == fusion);
            let first = of.next().unwrap().3.clone();
            for h in of {
                assert_eq!(
                    h.3, first,
                    "{op} {s} fusion {fusion} workers {} grain {}",
                    h.1, h.2
                );
            }
        }
    }
}

/// A one-function map runs compiled, any other expression through the
/// interpreter (in chunks of packets, whole chunks straight from contiguous
/// rows): `f(g(x), y)` as one interpreted launch must give the bits of the
/// compiled `g` then `f`, on every width, packet mode, a contiguous and a
/// ragged `local`, and rows with and without a tail.
#[test]
fn interpreted_maps_give_the_compiled_maps_bits() {
    for (inner, outer) in [(Unary::Silu, Binary::Mul), (Unary::Gelu, Binary::Add)] {
        for (rows, cols) in [(1, 1), (3, 17), (5, 130), (4, 1538)] {
            let full = TensorShape::new(rows, cols);
            let mut rng = ops::Rng::new(11);
            let mut normal = |n: usize| (0..n).map(|_| 3.0 * rng.normal()).collect::<Vec<f32>>();
            let (xv, yv) = (normal(rows * cols), normal(rows * cols));
            let inputs: [&[f32]; 2] = [&xv, &yv];

            let mut g = GraphBuilder::new();
            let (x, y) = (g.input("x", full), g.input("y", full));
            let t = g.node(Kernel::Map(Expr::unary(inner)), &[x]).unwrap();
            let out = g.node(Kernel::Map(Expr::binary(outer)), &[t, y]).unwrap();
            let compiled = g.finish(out).unwrap();

            let steps = vec![
                Step::Input(0),
                Step::Unary(inner, 0),
                Step::Input(1),
                Step::Binary(outer, 1, 2),
            ];
            let mut g = GraphBuilder::new();
            let (x, y) = (g.input("x", full), g.input("y", full));
            let expr = Expr::new(steps, 2).unwrap();
            let out = g.node(Kernel::Map(expr), &[x, y]).unwrap();
            let interpreted = g.finish(out).unwrap();
            assert_eq!((compiled.launches(), interpreted.launches()), (2, 1));

            for b in Backend::all_native() {
                let w = b.width();
                for mode in [PacketMode::FullPacket, PacketMode::AllMasked] {
                    let rt = runtime(1, w, mode);
                    for local in [w, 3 * w + 1, 2048] {
                        let c = LaunchConfig { local, block: 2 };
                        let hash = |graph: &graph::Graph| {
                            let plans = vec![(c, Grain::Caller); graph.launches()];
                            let mut o = vec![f32::NAN; rows * cols];
                            rt.run_planned(graph, &inputs, &mut o, &plans).unwrap();
                            ops::output_hash(&o)
                        };
                        assert_eq!(
                            hash(&compiled),
                            hash(&interpreted),
                            "{inner:?}/{outer:?} {rows}x{cols} {} {mode:?} local {local}",
                            b.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_custom_chain_fuses_into_one_launch_and_stays_correct() {
    // y = gelu(rmsnorm(x) · s) + r: a norm with a three-step epilogue.
    let (rows, cols) = (37, 203);
    let mut g = GraphBuilder::new();
    let full = TensorShape::new(rows, cols);
    let x = g.input("x", full);
    let w = g.input("w", TensorShape::new(1, cols));
    let s = g.input("s", full);
    let r = g.input("r", full);
    let n = g.node(Kernel::RmsNorm, &[x, w]).unwrap();
    let m = g
        .node(Kernel::Map(Expr::binary(Binary::Mul)), &[n, s])
        .unwrap();
    let e = g.node(Kernel::Map(Expr::unary(Unary::Gelu)), &[m]).unwrap();
    let y = g
        .node(Kernel::Map(Expr::binary(Binary::Add)), &[e, r])
        .unwrap();
    let unfused = g.finish(y).unwrap();
    let fused = graph::fuse(&unfused);
    assert_eq!((unfused.launches(), fused.launches()), (4, 1));

    let mut rng = ops::Rng::new(9);
    let mut normal = |n: usize| (0..n).map(|_| rng.normal()).collect::<Vec<f32>>();
    let (xv, wv, sv, rv) = (
        normal(rows * cols),
        normal(cols),
        normal(rows * cols),
        normal(rows * cols),
    );
    let inputs: [&[f32]; 4] = [&xv, &wv, &sv, &rv];
    let norm = ops::rmsnorm::reference(&xv, &wv, rows, cols);
    let reference: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let v = norm[i] * sv[i] as f64;
            0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)) + rv[i] as f64
        })
        .collect();
    for b in Backend::all_native() {
        let rt = runtime(2, b.width(), PacketMode::FullPacket);
        let mut outs = Vec::new();
        for graph in [&unfused, &fused] {
            let c = LaunchConfig {
                local: 64,
                block: 4,
            };
            let plans = vec![(c, Grain::tasks(2).unwrap()); graph.launches()];
            let mut out = vec![f32::NAN; rows * cols];
            rt.run_planned(graph, &inputs, &mut out, &plans).unwrap();
            let check = ops::compare(&out, &reference, ops::Tolerance::DEFAULT);
            assert!(
                check.ok,
                "{} launches {}: {:.3e}",
                b.name(),
                graph.launches(),
                check.max_abs_err
            );
            outs.push(out);
        }
        // The norm's output is rounded to f32 either way: the same bits.
        assert_eq!(
            ops::output_hash(&outs[0]),
            ops::output_hash(&outs[1]),
            "{}",
            b.name()
        );
    }
}

#[test]
fn bad_bindings_are_typed_errors() {
    let rt = runtime(1, Backend::best(8).width(), PacketMode::FullPacket);
    let graph = rt.graph(Op::SwiGlu, &Shape::rows(4, 8), false).unwrap();
    let x = vec![0.0f32; 32];
    let mut out = vec![0.0f32; 32];
    let plan = (LaunchConfig { local: 8, block: 1 }, Grain::Caller);
    let e = rt
        .run_planned(&graph, &[&x], &mut out, &[plan, plan])
        .unwrap_err();
    assert!(e.to_string().contains("takes 2 inputs"), "{e}");
    let e = rt
        .run_planned(&graph, &[&x, &x], &mut out, &[plan])
        .unwrap_err();
    assert!(
        e.to_string().contains("1 plans for a graph of 2 launches"),
        "{e}"
    );
    let short = vec![0.0f32; 31];
    let e = rt
        .run_planned(&graph, &[&x, &short], &mut out, &[plan, plan])
        .unwrap_err();
    assert!(e.to_string().contains("needs 32 elements, got 31"), "{e}");
}

#[test]
fn a_builders_operator_kernel_still_validates_its_shape() {
    // The builder checks that tensors chain, not the operator's own rules:
    // Hq = 3 is not a multiple of Hkv = 2, which the launch must refuse.
    let a = ops::AttnShape {
        batch: 1,
        q_heads: 3,
        kv_heads: 2,
        q_len: 2,
        kv_len: 4,
        dk: 8,
        dv: 8,
    };
    let mut g = GraphBuilder::new();
    let q = g.input("q", graph::ir::q_shape(&a));
    let k = g.input("k", graph::ir::kv_shape(&a, a.dk));
    let v = g.input("v", graph::ir::kv_shape(&a, a.dv));
    let o = g.node(Kernel::Attention(a), &[q, k, v]).unwrap();
    let graph = g.finish(o).unwrap();
    let (qv, kv, vv) = (vec![0.0f32; 48], vec![0.0f32; 64], vec![0.0f32; 64]);
    let inputs: [&[f32]; 3] = [&qv, &kv, &vv];
    let mut out = vec![0.0f32; 48];
    let rt = runtime(1, 4, PacketMode::FullPacket);
    let local = ops::attention::local_for(&a, 4);
    let plans = [(LaunchConfig { local, block: 1 }, Grain::Caller)];
    let err = rt
        .run_planned(&graph, &inputs, &mut out, &plans)
        .unwrap_err();
    assert!(
        matches!(err, taskgrain::Error::BadDimension(ref m) if m.contains("Hkv")),
        "{err}"
    );
}
