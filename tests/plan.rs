//! The planner: strategies, auto, the oracle, the caches and suite files.

use std::process::Command;
use taskgrain::Error;
use taskgrain::bench::suite_file;
use taskgrain::bench::suites::seed_cases;
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;
use taskgrain::plan::calibrate::{self, ModelSource};
use taskgrain::plan::tuning::TuningTable;
use taskgrain::plan::{LaunchProfile, PlanSource, Planner, Strategy, cache};
use taskgrain::pool::PoolConfig;
use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
use taskgrain::simt::PacketMode;
use tempfile::TempDir;

/// A fresh cache directory, removed when the test ends.
fn temp_dir(name: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("taskgrain-plan-{name}-"))
        .tempdir()
        .unwrap()
}

fn runtime(dir: &std::path::Path, model: ModelSource) -> Runtime {
    Runtime::new(RuntimeConfig {
        pool: PoolConfig::with_workers(2),
        width: Some(Backend::best(8).width()),
        mode: PacketMode::FullPacket,
        model,
        cache_dir: Some(dir.to_path_buf()),
    })
    .unwrap()
}

#[test]
fn every_strategy_plans_a_launch_that_runs() {
    let b = Backend::best(8);
    let p = Planner::new(b, 2);
    for (op, shape) in seed_cases() {
        let inputs = OwnedInputs::generate(op, shape, 1).unwrap();
        for s in Strategy::SEED.into_iter().chain([Strategy::Auto]) {
            match p.plan(s, op, &shape).unwrap() {
                None => assert!(s == Strategy::Local && op == Op::Attention),
                Some(plan) => {
                    assert!(plan.predicted_us.is_finite() && plan.predicted_us > 0.0);
                    ops::prepare(
                        inputs.view(),
                        &shape,
                        b,
                        plan.config,
                        PacketMode::FullPacket,
                    )
                    .unwrap_or_else(|e| panic!("{s} {op} {shape}: {e}"));
                }
            }
        }
        assert!(matches!(
            p.plan(Strategy::Oracle, op, &shape),
            Err(Error::NotTuned(_))
        ));
    }
}

#[test]
fn auto_refines_then_matches_the_reference() {
    let tmp = temp_dir("auto");
    let dir = tmp.path();
    let rt = runtime(dir, ModelSource::Builtin);
    let (op, shape) = (Op::RmsNorm, Shape::rows(33, 200));
    let inputs = OwnedInputs::generate(op, shape, 3).unwrap();
    let reference = ops::reference(inputs.view(), &shape);
    let profile = LaunchProfile::for_op(op, &shape).unwrap();
    for i in 0..5 {
        let mut out = vec![f32::NAN; ops::output_len(&shape)];
        rt.run(inputs.view(), &shape, &mut out, &RunOptions::default())
            .unwrap();
        assert!(
            ops::compare(&out, &reference, ops::tolerance(op)).ok,
            "call {i}"
        );
    }
    let plan = rt
        .planner()
        .plan_launch(Strategy::Auto, &profile)
        .unwrap()
        .unwrap();
    assert_eq!(plan.source, PlanSource::Refined);
    assert!(rt.planner().refined(&profile).is_some());
    // The settled plan is remembered (same plan, prediction included) until a
    // tuning search replaces it.
    let again = rt.planner().plan_launch(Strategy::Auto, &profile);
    assert_eq!(again.unwrap().unwrap(), plan);
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let tuned = rt
        .plan_call(Strategy::Oracle, inputs.view(), &shape, &mut out)
        .unwrap();
    let after = rt
        .planner()
        .plan_launch(Strategy::Auto, &profile)
        .unwrap()
        .unwrap();
    assert_eq!(after.source, PlanSource::Tuned);
    assert_eq!((after.config, after.grain), (tuned.config, tuned.grain));
}

#[test]
fn oracle_search_is_stored_and_reused_by_auto() {
    let tmp = temp_dir("oracle");
    let dir = tmp.path();
    let rt = runtime(dir, ModelSource::Builtin);
    let (op, shape) = (Op::SwiGlu, Shape::rows(9, 40));
    let inputs = OwnedInputs::generate(op, shape, 1).unwrap();
    let mut out = vec![0.0f32; ops::output_len(&shape)];
    let plan = rt
        .plan_call(Strategy::Oracle, inputs.view(), &shape, &mut out)
        .unwrap();
    assert_eq!(plan.source, PlanSource::Tuned);
    rt.planner().tuning().store(rt.cache_dir()).unwrap();
    // A new runtime reads the tuning cache: oracle and auto both return it.
    let rt2 = runtime(dir, ModelSource::Builtin);
    let p = LaunchProfile::for_op(op, &shape).unwrap();
    let o = rt2
        .planner()
        .plan_launch(Strategy::Oracle, &p)
        .unwrap()
        .unwrap();
    let a = rt2
        .planner()
        .plan_launch(Strategy::Auto, &p)
        .unwrap()
        .unwrap();
    assert_eq!((o.config, o.grain), (plan.config, plan.grain));
    assert_eq!(a.source, PlanSource::Tuned);
    let reference = ops::reference(inputs.view(), &shape);
    let mut y = vec![f32::NAN; ops::output_len(&shape)];
    rt2.run(inputs.view(), &shape, &mut y, &RunOptions::default())
        .unwrap();
    assert!(ops::compare(&y, &reference, ops::tolerance(op)).ok);
}

#[test]
fn custom_launch_profiles_are_planned() {
    let p = Planner::new(Backend::best(8), 2);
    let prof = LaunchProfile::rows(64, 1000, 1000, 8.0, 3.0, 0);
    for s in Strategy::SEED {
        let plan = p.plan_launch(s, &prof).unwrap().unwrap();
        assert!(plan.config.local >= 1 && plan.config.block >= 1);
    }
    let bad = LaunchProfile::rows(0, 10, 10, 8.0, 3.0, 0);
    assert!(p.plan_launch(Strategy::Auto, &bad).is_err());
    let nan = LaunchProfile::rows(4, 10, 10, f64::NAN, 3.0, 0);
    assert!(p.plan_launch(Strategy::Auto, &nan).is_err());
}

#[test]
fn corrupted_or_foreign_caches_are_ignored_and_rebuilt() {
    let tmp = temp_dir("cache");
    let dir = tmp.path();
    let file = calibrate::path(dir);
    // Garbage: ignored with a note, the built-in model is used, no panic.
    std::fs::write(&file, b"{ not json").unwrap();
    let l = calibrate::load_or_calibrate(dir, ModelSource::Cached).unwrap();
    assert!(!l.reused && !l.model.calibrated);
    assert!(
        l.notes.iter().any(|n| n.contains("ignored")),
        "{:?}",
        l.notes
    );
    // A valid file from another machine: rejected.
    let mut v: serde_json::Value = serde_json::json!({
        "header": cache::Header::current(calibrate::KIND),
        "body": taskgrain::plan::CostModel::default(),
    });
    v["header"]["cpu"] = "Another CPU".into();
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    let l = calibrate::load_or_calibrate(dir, ModelSource::Cached).unwrap();
    assert!(!l.reused);
    assert!(
        l.notes.iter().any(|n| n.contains("another machine")),
        "{:?}",
        l.notes
    );
    // Another build, another format version: rejected.
    v["header"]["cpu"] = cache::cpu_model().into();
    v["header"]["build"] = "0.0.0+deadbeef".into();
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(
        !calibrate::load_or_calibrate(dir, ModelSource::Cached)
            .unwrap()
            .reused
    );
    v["header"]["build"] = cache::build_id().into();
    v["header"]["version"] = 999.into();
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(
        !calibrate::load_or_calibrate(dir, ModelSource::Cached)
            .unwrap()
            .reused
    );
    // The right header but a broken body: rejected as corrupted.
    v["header"]["version"] = cache::FORMAT_VERSION.into();
    v["body"] = serde_json::json!({"caller_launch_us": "fast"});
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    let l = calibrate::load_or_calibrate(dir, ModelSource::Cached).unwrap();
    assert!(
        l.notes.iter().any(|n| n.contains("corrupted")),
        "{:?}",
        l.notes
    );
    // Rebuilt, then reused. A calibration that other work disturbed (a test
    // of this binary may be running `taskgrain` meanwhile) is used but not
    // stored, and says so; the next one measures again.
    let mut stored = None;
    for _ in 0..3 {
        let l = calibrate::load_or_calibrate(dir, ModelSource::CachedOrCalibrate).unwrap();
        assert!(!l.reused && l.model.calibrated);
        if l.stored {
            stored = Some(l);
            break;
        }
        assert!(
            l.interference.unwrap() > calibrate::MAX_INTERFERENCE
                && l.notes.iter().any(|n| n.contains("not stored")),
            "{:?}",
            l.notes
        );
    }
    if let Some(l) = stored {
        let again = calibrate::load_or_calibrate(dir, ModelSource::CachedOrCalibrate).unwrap();
        assert!(again.reused);
        // (JSON round-trips floats to within an ulp)
        assert!(again.model.calibrated);
        assert_eq!(again.model.widths.len(), l.model.widths.len());
        assert!(
            (again.model.pool_launch_us - l.model.pool_launch_us).abs()
                <= 1e-9 * l.model.pool_launch_us.abs().max(1.0)
        );
    }
    // A corrupted tuning cache: an empty table and a warning; a runtime still
    // starts. A read-only runtime leaves the file; one that may write the
    // caches rebuilds it, so the next runtime starts without a warning.
    std::fs::write(TuningTable::path(dir), b"\x00\x01garbage").unwrap();
    let (t, why) = TuningTable::load(dir);
    assert!(t.entries.is_empty() && why.is_some());
    for (model, rebuilt) in [
        (ModelSource::Cached, false),
        (ModelSource::CachedOrCalibrate, true),
    ] {
        let rt = runtime(dir, model);
        assert!(rt.notes().iter().any(|n| {
            n.contains("tuning cache ignored") && n.contains("rebuilt empty") == rebuilt
        }));
    }
    let (t, why) = TuningTable::load(dir);
    assert!(t.entries.is_empty() && why.is_none(), "{why:?}");
    let rt = runtime(dir, ModelSource::Cached);
    assert!(!rt.notes().iter().any(|n| n.contains("tuning cache")));
}

#[test]
fn suite_files_parse_and_bad_rows_name_their_line() {
    let tmp = temp_dir("suite");
    let dir = tmp.path();
    let good = dir.join("ok.toml");
    std::fs::write(
        &good,
        "# rows\n[[row]]\nop = \"rmsnorm\"\nshape = \"1x4096\"\n\n[[row]]\nop = \"attention\"\nshape = \"1x32x8x1x512x128x128\"\n",
    )
    .unwrap();
    assert_eq!(suite_file::load(&good).unwrap().len(), 2);
    let json = dir.join("ok.json");
    std::fs::write(&json, r#"[{"op": "swiglu", "shape": "7x11008"}]"#).unwrap();
    assert_eq!(suite_file::load(&json).unwrap().len(), 1);
    let cases: [(&str, &str, usize); 6] = [
        (
            "a.toml",
            "[[row]]\nop = \"rmsnorm\"\nshape = \"4x4\"\n[[row]]\nop = \"rmsnorm\"\nshape = \"4x0\"\n",
            6,
        ),
        ("b.toml", "[[row]]\nop = \"softmax\"\nshape = \"4x4\"\n", 2),
        ("c.toml", "[[row]]\nop = \"rope\"\nshape = \"4x5\"\n", 3),
        (
            "d.toml",
            "[[row]]\nop = \"rope\"\n\n[[row]]\nop = \"rope\"\nshape = \"4x4\"\n",
            1,
        ),
        (
            "e.json",
            "[\n  {\"op\": \"rmsnorm\", \"shape\": \"2x2\"},\n  {\"op\": \"rmsnorm\", \"shape\": \"2xx\"}\n]",
            3,
        ),
        (
            "f.json",
            "[\n  {\"op\": \"rmsnorm\",\n   \"shape\": 4}\n]",
            2,
        ),
    ];
    for (name, text, line) in cases {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        match suite_file::load(&f) {
            Err(Error::SuiteFile { line: l, .. }) => assert_eq!(l, line, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    // The CLI: exit 2 and the line in the message.
    let out = Command::new(env!("CARGO_BIN_EXE_taskgrain"))
        .args(["bench", "--suite", dir.join("c.toml").to_str().unwrap()])
        .env("TASKGRAIN_CACHE_DIR", dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("c.toml:3:"), "{err}");
}

#[test]
fn cli_run_reports_strategy_and_prediction() {
    let tmp = temp_dir("cli");
    let dir = tmp.path();
    let out = Command::new(env!("CARGO_BIN_EXE_taskgrain"))
        .args([
            "run",
            "rmsnorm",
            "--shape",
            "16x256",
            "--strategy",
            "joint_tasks",
            "--reps",
            "5",
            "--check",
            "--json",
        ])
        .env("TASKGRAIN_CACHE_DIR", dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["strategy"], "joint_tasks");
    assert!(v["predicted_us"].as_f64().unwrap() > 0.0);
    assert_eq!(v["ok"], true);
    assert!(v["calls_per_sample"].as_u64().unwrap() >= 1);
    assert_eq!(v["reps"], 5);
    assert!(v["p50_us"].as_f64().unwrap() > 0.0);
    let bad = Command::new(env!("CARGO_BIN_EXE_taskgrain"))
        .args([
            "run",
            "attention",
            "--shape",
            "1x2x1x4x8x8x8",
            "--strategy",
            "local",
        ])
        .env("TASKGRAIN_CACHE_DIR", dir)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does not apply"));
}
