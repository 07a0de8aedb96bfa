//! Every operator against its f64 reference: the seed's shapes and awkward ones,
//! for every backend this CPU has (and the scalar fallback), full-packet on and off.

use std::iter::zip;
use taskgrain::bench::suites::seed_cases;
use taskgrain::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use taskgrain::packet::{Backend, test_backends};
use taskgrain::plan::default_config;
use taskgrain::simt::PacketMode;

const MODES: [PacketMode; 2] = [PacketMode::FullPacket, PacketMode::AllMasked];

fn run(inputs: &OwnedInputs, backend: Backend, config: LaunchConfig, mode: PacketMode) -> Vec<f32> {
    let shape = inputs.shape();
    let launch = ops::prepare(inputs.view(), &shape, backend, config, mode).unwrap();
    let mut out = vec![f32::NAN; ops::output_len(&shape)];
    launch.run_on_caller(&mut out).unwrap();
    out
}

fn check(
    inputs: &OwnedInputs,
    backend: Backend,
    config: LaunchConfig,
    mode: PacketMode,
) -> Vec<f32> {
    let out = run(inputs, backend, config, mode);
    let shape = inputs.shape();
    let reference = ops::reference(inputs.view(), &shape);
    let r = ops::compare(&out, &reference, ops::tolerance(inputs.op()));
    assert!(
        r.ok,
        "{} {} {} {:?} {:?}: {} failures, first at {:?}: got {} want {}, max err {:e}",
        inputs.op(),
        shape,
        backend.name(),
        config,
        mode,
        r.failures,
        r.first_failure,
        out[r.first_failure.unwrap()],
        reference[r.first_failure.unwrap()],
        r.max_abs_err
    );
    out
}

/// Geometries worth covering for a row operator: whole row, powers of W, and
/// locals that are not multiples of W (masked packets mid-row), with several blocks.
fn row_configs(op: Op, cols: usize, w: usize) -> Vec<LaunchConfig> {
    let sched = if op == Op::Rope { cols / 2 } else { cols };
    let mut v = vec![
        LaunchConfig {
            local: sched.div_ceil(w) * w,
            block: 1,
        },
        LaunchConfig {
            local: w,
            block: 32,
        },
        LaunchConfig {
            local: 4 * w,
            block: 3,
        },
        LaunchConfig {
            local: 8,
            block: 32,
        },
        LaunchConfig {
            local: w + 3,
            block: 5,
        },
        LaunchConfig { local: 1, block: 2 },
    ];
    if sched > 3 * w {
        v.push(LaunchConfig {
            local: 3 * w,
            block: 7,
        });
    }
    v
}

#[test]
fn seed_shapes_pass_for_every_backend_and_mode() {
    for (op, shape) in seed_cases() {
        let inputs = OwnedInputs::generate(op, shape, 7).unwrap();
        for b in test_backends() {
            if b.is_scalar() && ops::output_len(&shape) > 300_000 {
                continue; // the scalar fallback is covered on the smaller shapes
            }
            for mode in MODES {
                check(&inputs, b, default_config(op, &shape, b.width()), mode);
            }
        }
    }
}

#[test]
fn awkward_row_shapes_pass_under_many_geometries() {
    for b in test_backends() {
        let w = b.width();
        let mut sizes = vec![
            (1, 1),
            (1, w - 1),
            (1, w + 1),
            (3, w),
            (2, 2 * w + 1),
            (5, 13),
            (7, 31),
            (257, 1538),
            (11, 97),
        ];
        sizes.push((2, 64 * w + 3));
        for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
            for &(r, c) in &sizes {
                let c = if op == Op::Rope { c + c % 2 } else { c };
                let shape = Shape::rows(r, c);
                let inputs = OwnedInputs::generate(op, shape, 3).unwrap();
                for config in row_configs(op, c, w) {
                    for mode in MODES {
                        check(&inputs, b, config, mode);
                    }
                }
            }
        }
    }
}

#[test]
fn awkward_attention_shapes_pass() {
    for b in test_backends() {
        for s in [
            "1x1x1x1x1x1x1",
            "2x4x2x5x7x3x5",
            "1x2x1x9x33x17x15",
            "1x8x2x3x64x64x64",
            "1x4x4x17x19x16x16",
        ] {
            let shape = Shape::parse(Op::Attention, s).unwrap();
            let inputs = OwnedInputs::generate(Op::Attention, shape, 5).unwrap();
            let Shape::Attention(a) = shape else {
                unreachable!()
            };
            for block in [1, 2, 16] {
                let config = LaunchConfig {
                    local: ops::attention::local_for(&a, b.width()),
                    block,
                };
                for mode in MODES {
                    check(&inputs, b, config, mode);
                }
            }
        }
    }
}

#[test]
fn output_does_not_depend_on_block_or_packet_mode() {
    let b = Backend::best(16);
    let w = b.width();
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        let shape = Shape::rows(37, 130);
        let inputs = OwnedInputs::generate(op, shape, 11).unwrap();
        let sched: usize = if op == Op::Rope { 65 } else { 130 };
        for local in [w, 2 * w, sched.div_ceil(w) * w, 12] {
            let first = run(
                &inputs,
                b,
                LaunchConfig { local, block: 1 },
                PacketMode::FullPacket,
            );
            for block in [2, 5, 37, 64] {
                for mode in MODES {
                    let out = run(&inputs, b, LaunchConfig { local, block }, mode);
                    assert_eq!(
                        ops::output_hash(&out),
                        ops::output_hash(&first),
                        "{op} local {local} block {block} {mode:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn layernorm_is_stable_with_a_large_common_offset() {
    let shape = Shape::rows(4, 1000);
    let mut inputs = OwnedInputs::generate(Op::LayerNorm, shape, 1).unwrap();
    for x in inputs.tensors_mut()[0].iter_mut() {
        *x += 10_000.0;
    }
    for b in test_backends() {
        check(
            &inputs,
            b,
            default_config(Op::LayerNorm, &shape, b.width()),
            PacketMode::FullPacket,
        );
    }
}

/// Rows whose first elements are far from the rest: the shifted one-pass
/// statistics would cancel, so the kernel must take its careful path.
#[test]
fn layernorm_is_stable_when_the_first_element_is_an_outlier() {
    let shape = Shape::rows(5, 333);
    let mut inputs = OwnedInputs::generate(Op::LayerNorm, shape, 2).unwrap();
    let x = &mut inputs.tensors_mut()[0];
    x[0] = 1.0e4;
    x[333..340].fill(-3.0e3);
    for v in &mut x[666..999] {
        *v += 5.0e3;
    }
    x[666..670].fill(0.0);
    for b in test_backends() {
        for mode in MODES {
            check(
                &inputs,
                b,
                default_config(Op::LayerNorm, &shape, b.width()),
                mode,
            );
        }
    }
}

#[test]
fn fully_masked_softmax_rows_give_zeros_and_nan_propagates() {
    let shape = Shape::rows(3, 37);
    let mut inputs = OwnedInputs::generate(Op::MaskedSoftmax, shape, 1).unwrap();
    inputs.tensors_mut()[1][..37].fill(f32::NEG_INFINITY);
    inputs.tensors_mut()[0][37 + 5] = f32::NAN;
    for b in test_backends() {
        for mode in MODES {
            let out = check(
                &inputs,
                b,
                LaunchConfig {
                    local: b.width(),
                    block: 2,
                },
                mode,
            );
            assert!(out[..37].iter().all(|&v| v == 0.0));
            assert!(out[37..74].iter().all(|v| v.is_nan()));
            let sum: f32 = out[74..].iter().sum();
            assert!((sum - 1.0).abs() < 1e-5);
        }
    }
}

/// The two-pass softmax shifts by the first packet's maximum and falls back to
/// the row's true maximum when that shift is unusable: a large logit after the
/// first packet, a masked first packet, +inf; every row must still match the
/// reference (and a +inf row gives NaN where the reference does).
#[test]
fn softmax_falls_back_when_the_first_packet_is_a_poor_shift() {
    let cols = 41;
    let shape = Shape::rows(5, cols);
    let mut inputs = OwnedInputs::generate(Op::MaskedSoftmax, shape, 3).unwrap();
    {
        let t = inputs.tensors_mut();
        // Row 0: a logit 100 above the rest, past the first packet of any width.
        t[0][..cols].fill(0.5);
        t[0][37] = 100.5;
        t[1][..cols].fill(0.0);
        // Row 1: the first 16 entries masked (a whole first packet at any width).
        t[1][cols..cols + 16].fill(f32::NEG_INFINITY);
        // Row 2: +inf late in the row.
        t[0][2 * cols + 30] = f32::INFINITY;
        // Row 3: a logit 60 above the first packet: its sum stays below e⁶⁴, two passes.
        t[0][3 * cols..4 * cols].fill(-1.0);
        t[0][3 * cols + 40] = 59.0;
        t[1][3 * cols..4 * cols].fill(0.0);
    }
    for b in test_backends() {
        for mode in MODES {
            for local in [b.width(), cols.div_ceil(b.width()) * b.width()] {
                let out = check(&inputs, b, LaunchConfig { local, block: 2 }, mode);
                assert!((out[37] - 1.0).abs() < 1e-6, "row 0 is one-hot");
                assert!(out[cols..cols + 16].iter().all(|&v| v == 0.0));
                assert!(out[3 * cols + 40] > 0.99);
            }
        }
    }
}

/// Softmax folds its shift into the exponent's multiply-add only while the shift
/// is small; rows of large finite logits, on either side of that limit and up
/// to the largest f32, first packet maximal or not, must still match the
/// reference.
#[test]
fn softmax_matches_the_reference_for_large_logits() {
    let cols = 37;
    let offsets: [f32; 11] = [
        1e3, -1e3, 1e5, 1.04e6, 1.05e6, -2e6, 1e12, 1e30, -1e30, 3e38, -3e38,
    ];
    let shape = Shape::rows(2 * offsets.len(), cols);
    let mut inputs = OwnedInputs::generate(Op::MaskedSoftmax, shape, 5).unwrap();
    {
        let t = inputs.tensors_mut();
        for (k, &offset) in offsets.iter().enumerate() {
            for late_max in [false, true] {
                let row = (2 * k + usize::from(late_max)) * cols;
                for i in 0..cols {
                    // Distinct logits around the offset, 1/8 apart (exact where
                    // the offset's ulp allows); the maximum first or last.
                    let step = if late_max { i } else { cols - i };
                    t[0][row + i] = offset + (step as f32) / 8.0 * (offset.abs() * 1e-7).max(1.0);
                    t[1][row + i] = 0.0;
                }
            }
        }
    }
    for b in test_backends() {
        for mode in MODES {
            for local in [b.width(), cols.div_ceil(b.width()) * b.width()] {
                let out = check(&inputs, b, LaunchConfig { local, block: 3 }, mode);
                assert!(out.iter().all(|v| v.is_finite()));
            }
        }
    }
}

#[test]
fn infinities_and_nans_propagate_in_elementwise_ops() {
    let shape = Shape::rows(1, 4);
    for op in [Op::SwiGlu, Op::GeluResidual] {
        let inputs = OwnedInputs::from_tensors(
            op,
            shape,
            vec![
                vec![f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0],
                vec![1.0; 4],
            ],
        )
        .unwrap();
        for b in test_backends() {
            check(
                &inputs,
                b,
                LaunchConfig { local: 4, block: 1 },
                PacketMode::FullPacket,
            );
        }
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    use taskgrain::Error;
    let shape = Shape::rows(2, 4);
    let x = vec![0.0f32; 8];
    let w = vec![0.0f32; 3];
    assert!(matches!(
        ops::OpInputs::new(Op::RmsNorm, &shape, &[&x, &w]),
        Err(Error::ShapeMismatch(_))
    ));
    assert!(matches!(
        ops::OpInputs::new(Op::RmsNorm, &shape, &[&x]),
        Err(Error::ShapeMismatch(_))
    ));
    let inputs = OwnedInputs::generate(Op::RmsNorm, shape, 1).unwrap();
    let b = Backend::best(8);
    for config in [
        LaunchConfig { local: 0, block: 1 },
        LaunchConfig { local: 4, block: 0 },
    ] {
        assert!(matches!(
            ops::prepare(inputs.view(), &shape, b, config, PacketMode::FullPacket),
            Err(Error::BadGeometry(_))
        ));
    }
    let launch = ops::prepare(
        inputs.view(),
        &shape,
        b,
        LaunchConfig { local: 4, block: 1 },
        PacketMode::FullPacket,
    )
    .unwrap();
    assert!(matches!(
        launch.run_on_caller(&mut [0.0; 7]),
        Err(Error::ShapeMismatch(_))
    ));
    assert!(matches!(
        Backend::native(5),
        Err(Error::WidthUnsupported(5))
    ));
    assert!(matches!(
        Backend::native(32),
        Err(Error::WidthUnsupported(32))
    ));
    let att = Shape::parse(Op::Attention, "1x2x1x4x4x8x8").unwrap();
    let ai = OwnedInputs::generate(Op::Attention, att, 1).unwrap();
    assert!(matches!(
        ops::prepare(
            ai.view(),
            &att,
            b,
            LaunchConfig { local: 3, block: 1 },
            PacketMode::FullPacket
        ),
        Err(Error::BadGeometry(_))
    ));
}

/// Streaming is skipped for an output a few cache lines after its input modulo
/// 4 KiB, where streamed stores stall the input's loads.
#[test]
fn streaming_skips_outputs_that_alias_the_input() {
    let buf = vec![0.0f32; 2048];
    let x = &buf[..1024];
    for (floats, safe) in [
        (0, true),
        (1, true),
        (8, false),
        (16, false),
        (256, true),
        (1000, true),
    ] {
        assert_eq!(
            ops::stream_is_safe(x, &buf[floats..]),
            safe,
            "+{} bytes",
            4 * floats
        );
    }
}

/// rope keeps an output a few cache lines after its input cached only when
/// the halves of its rows are whole multiples of 4 KiB (they alias each other).
#[test]
fn rope_streams_unless_its_halves_alias_a_nearby_output() {
    let buf = vec![0.0f32; 4096];
    let x = &buf[..2048];
    for (cols, floats, width, safe) in [
        (2048, 0, 8, true),
        (2048, 4, 8, false),
        (2048, 16, 8, false),
        (2048, 32, 8, true),
        (2048, 32, 4, false),
        (2048, 64, 4, true),
        (8192, 16, 16, false),
        (1024, 16, 8, true),
        (3072, 16, 4, true),
    ] {
        assert_eq!(
            ops::rope_stream_is_safe(x, &buf[floats..], cols, width),
            safe,
            "C = {cols}, +{} bytes, W{width}",
            4 * floats
        );
    }
}

/// gelu_residual's and masked_softmax's inputs with the values their paths
/// treat apart: gelu lanes in the tail (|x| ≥ 2.5, most of them
/// here, so blocks overflow the deferred list), at its edge, ±inf and NaN;
/// softmax rows fully masked, with a NaN, with an infinity, and with a first
/// packet far below the row's maximum (the three-pass fallback).
fn special_inputs(op: Op, rows: usize, cols: usize, seed: u64) -> OwnedInputs {
    let shape = Shape::rows(rows, cols);
    let mut inputs = OwnedInputs::generate(op, shape, seed).unwrap();
    let x = &mut inputs.tensors_mut()[0];
    match op {
        Op::GeluResidual => {
            let specials = [
                2.5,
                -2.5,
                2.499_999_8,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                -30.0,
                12.0,
            ];
            for (i, v) in x.iter_mut().enumerate() {
                *v = if i % 97 < specials.len() {
                    specials[i % 97]
                } else {
                    *v * 4.0
                };
            }
        }
        Op::MaskedSoftmax => {
            for (r, row) in x.chunks_mut(cols).enumerate() {
                match r % 5 {
                    1 => row.fill(f32::NEG_INFINITY),
                    2 => row[cols / 2] = f32::NAN,
                    3 => row[cols - 1] = f32::INFINITY,
                    4 => row[cols - 1] = 200.0,
                    _ => {}
                }
            }
        }
        _ => {}
    }
    inputs
}

/// Streaming never changes a bit: each row operator, streamed (gelu_residual
/// through its L1 stage) and cached, on every backend,
/// packet mode and a ragged local, over shapes that leave partial packets and
/// partial stage blocks.
#[test]
fn streamed_and_cached_outputs_are_the_same_bits() {
    let shapes = [
        (1, 1),
        (2, 7),
        (2, 9),
        (3, 17),
        (5, 130),
        (3, 1031),
        (3, 1538),
        (3, 4096),
        (2, 4097),
    ];
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        for (rows, cols) in shapes {
            if op == Op::Rope && cols % 2 == 1 {
                continue;
            }
            let shape = Shape::rows(rows, cols);
            let inputs = special_inputs(op, rows, cols, 5);
            for backend in test_backends() {
                let w = backend.width();
                let tuned = default_config(op, &shape, w);
                let ragged = LaunchConfig {
                    local: 3 * w + 1,
                    ..tuned
                };
                for (config, mode) in [tuned, ragged]
                    .into_iter()
                    .flat_map(|c| MODES.map(|m| (c, m)))
                {
                    let outputs = [false, true].map(|stream| {
                        let launch =
                            ops::prepare(inputs.view(), &shape, backend, config, mode).unwrap();
                        let mut out = vec![f32::NAN; ops::output_len(&shape)];
                        launch.with_stream(stream).run_on_caller(&mut out).unwrap();
                        out
                    });
                    assert!(
                        zip(&outputs[0], &outputs[1]).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{op} {rows}x{cols} {} local {} {mode:?}: streamed bits differ",
                        backend.name(),
                        config.local
                    );
                }
            }
        }
    }
}

/// Large outputs are written with non-temporal stores, which need aligned
/// addresses: every backend, at every misalignment of the output slice, must give
/// the same bytes, within tolerance of the reference. Also streamed, forced: a
/// small ragged shape, whose rows end in a partial packet.
#[test]
fn streamed_outputs_are_correct_at_every_alignment() {
    let large = Shape::rows(512, 4096);
    for shape in [large, Shape::rows(9, 1030)] {
        streamed_outputs_are_correct(shape, shape == large);
    }
}

fn streamed_outputs_are_correct(shape: Shape, large: bool) {
    let streaming = |op| matches!(op, Op::RmsNorm | Op::LayerNorm | Op::Rope);
    let Shape::Rows { rows, cols } = shape else {
        unreachable!("row shapes")
    };
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        assert_eq!(
            ops::streams_output(op, rows, cols),
            large && streaming(op),
            "{op}"
        );
    }
    // gelu_residual stays cached at any size unless asked to stream (below);
    // the streaming operators stream any row of a large output.
    assert!(!ops::streams_output(Op::GeluResidual, 1024, 3072));
    assert!(!ops::streams_output(Op::GeluResidual, 4096, 4096));
    assert!(ops::streams_output(Op::Rope, 8192, 256));
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        let inputs = OwnedInputs::generate(op, shape, 11).unwrap();
        let reference = ops::reference(inputs.view(), &shape);
        let len = ops::output_len(&shape);
        for backend in test_backends() {
            let config = default_config(op, &shape, backend.width());
            let launch = ops::prepare(
                inputs.view(),
                &shape,
                backend,
                config,
                PacketMode::FullPacket,
            )
            .unwrap();
            assert_eq!(launch.streams(), large && streaming(op), "{op}");
            let launch = launch.with_stream(true);
            assert!(
                launch.variant().ends_with("/stream"),
                "{}",
                launch.variant()
            );
            // The output at byte distances (mod 4 KiB) after x on both sides of
            // every placement rule: streamed rows walk down below 2 KiB
            // (`ops::walks_down`); gelu_residual stays cached at 16–191 bytes
            // (`ops::stream_is_safe`), rope where its halves alias at 16–127
            // (W4: 16–255, `ops::rope_stream_is_safe`).
            let x = inputs.view().tensors().0[0].as_ptr() as usize;
            let mut buf = vec![f32::NAN; len + 1024];
            let mut first: Option<Vec<f32>> = None;
            for distance in [0, 4, 16, 64, 128, 192, 256, 1984, 2048, 3968] {
                buf.fill(f32::NAN);
                let at = (buf.as_ptr() as usize).wrapping_sub(x) % 4096;
                let offset = (distance + 4096 - at) % 4096 / 4;
                let out = &mut buf[offset..offset + len];
                assert_eq!((out.as_ptr() as usize).wrapping_sub(x) % 4096, distance);
                launch.run_on_caller(out).unwrap();
                let r = ops::compare(out, &reference, ops::tolerance(op));
                assert!(
                    r.ok,
                    "{op} {shape} {} output {distance} bytes after x: {} failures",
                    backend.name(),
                    r.failures
                );
                match &first {
                    None => first = Some(out.to_vec()),
                    Some(f) => assert!(
                        f.iter()
                            .zip(out.iter())
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{op} {shape} {} output {distance} bytes after x: bytes differ from 0",
                        backend.name()
                    ),
                }
            }
        }
    }
}

/// Rope places its full packets on cache lines where the backend and CPU
/// realign streams cheaply (W16; W8 except on Zen cores): at every
/// misalignment of x, cos, sin and the output,
/// and at half-row lengths around the realigned path's minimum, its bytes must
/// equal the all-masked run's (which keeps the packets the schedule gives).
#[test]
fn rope_output_does_not_depend_on_alignment() {
    // (x, cos, sin, y) offsets in lanes: each stream alone, and mixed.
    let offsets = [
        [0, 0, 0, 0],
        [1, 0, 0, 0],
        [0, 3, 0, 0],
        [0, 0, 7, 0],
        [0, 0, 0, 15],
        [1, 1, 1, 1],
        [8, 8, 8, 8],
        [15, 2, 9, 4],
        [5, 11, 13, 1],
        [3, 14, 6, 12],
    ];
    for half in [64, 127, 128, 129, 143, 257, 512, 513, 769] {
        let shape = Shape::rows(3, 2 * half);
        let inputs = OwnedInputs::generate(Op::Rope, shape, 5).unwrap();
        let ([x, cos, sin], _) = inputs.view().tensors();
        let len = ops::output_len(&shape);
        for backend in test_backends() {
            let config = default_config(Op::Rope, &shape, backend.width());
            let expected = run(&inputs, backend, config, PacketMode::AllMasked);
            for [ox, oc, os, oy] in offsets {
                // Offsets from a cache-line-aligned start, so offset 0 is aligned.
                let at = |t: &[f32], o: usize| {
                    let mut v = taskgrain::buffer::filled(f32::NAN, o + t.len());
                    v[o..].copy_from_slice(t);
                    v
                };
                let (xb, cb, sb) = (at(x, ox), at(cos, oc), at(sin, os));
                let view = ops::OpInputs::Rope {
                    x: &xb[ox..],
                    cos: &cb[oc..],
                    sin: &sb[os..],
                };
                for stream in [false, true] {
                    let launch =
                        ops::prepare(view, &shape, backend, config, PacketMode::FullPacket)
                            .unwrap()
                            .with_stream(stream);
                    let mut yb = taskgrain::buffer::filled(f32::NAN, oy + len);
                    launch.run_on_caller(&mut yb[oy..]).unwrap();
                    assert!(
                        expected
                            .iter()
                            .zip(&yb[oy..])
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "rope half {half} {} offsets {:?} stream {stream}",
                        backend.name(),
                        [ox, oc, os, oy]
                    );
                }
            }
        }
    }
}
