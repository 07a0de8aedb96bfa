//! The benchmark report: statistics, verification, writers, captions and the
//! command line's contract. Timings are never asserted.

mod common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use taskgrain::bench::report::stats::{paired_ratios, summarize};
use taskgrain::bench::report::{
    self, CandidateSet, Format, Harness, Lang, Report, ReportConfig, SectionSpec,
};
use taskgrain::bench::suites::Suite;
use taskgrain::ops::{Op, Shape};

fn tiny_config() -> ReportConfig {
    ReportConfig {
        rounds: 3,
        reps: 2,
        warmup: 1,
        ..ReportConfig::default()
    }
}

fn attn_small() -> Shape {
    Shape::parse(Op::Attention, "1x4x2x16x32x16x16").unwrap()
}

/// A fast report with the three seed sections on a few small rows, one of them
/// attention (whose `local` candidate is unsupported).
fn tiny_report() -> Report {
    let harness = Harness::new(tiny_config()).unwrap();
    let specs = [
        SectionSpec::for_suite_with(
            Suite::Pilot,
            vec![
                (Op::RmsNorm, Shape::rows(17, 65)),
                (Op::SwiGlu, Shape::rows(8, 40)),
            ],
        ),
        SectionSpec::for_suite_with(
            Suite::Validation,
            vec![
                (Op::Rope, Shape::rows(3, 64)),
                (Op::Attention, attn_small()),
            ],
        ),
        SectionSpec::for_suite_with(
            Suite::FixedGrain,
            vec![
                (Op::RmsNorm, Shape::rows(17, 66)),
                (Op::LayerNorm, Shape::rows(70, 96)),
                (Op::MaskedSoftmax, Shape::rows(65, 130)),
                (Op::GeluResidual, Shape::rows(40, 33)),
            ],
        ),
    ];
    // Every row is reported once prepared (round 0), then after each of its
    // rounds, which are timed round-major over the rows of all the sections.
    let mut events: Vec<(String, String, usize)> = Vec::new();
    let r = harness
        .run(&specs, &mut |p| {
            events.push((p.section.to_string(), p.row.to_string(), p.round))
        })
        .unwrap();
    let timed = events.iter().filter(|e| e.2 > 0).count();
    assert_eq!(timed, harness.total_rounds(&specs));
    let rows: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.2 == 0)
        .map(|e| (e.0.clone(), e.1.clone()))
        .collect();
    let sections: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    let in_order: Vec<&str> = specs
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.name.as_str(), s.cases.len()))
        .collect();
    assert_eq!(
        sections, in_order,
        "rows are prepared in the sections' order"
    );
    let mut want = Vec::new();
    for round in 0..=tiny_config().rounds {
        want.extend(rows.iter().map(|(s, r)| (s.clone(), r.clone(), round)));
    }
    assert_eq!(
        events, want,
        "every row prepared, then round 1 of every row, then round 2, …"
    );
    r
}

fn report_once() -> &'static Report {
    static R: std::sync::OnceLock<Report> = std::sync::OnceLock::new();
    R.get_or_init(tiny_report)
}

#[test]
fn paired_ratios_on_synthetic_rounds() {
    // Round-to-round drift cancels in the pairing; the range keeps the outlier.
    let den = [10.0, 20.0, 40.0, 10.0, 10.0];
    let num = [5.0, 10.0, 20.0, 5.0, 15.0];
    let r = paired_ratios(&num, &den);
    assert_eq!(r, vec![0.5, 0.5, 0.5, 0.5, 1.5]);
    let s = summarize(&r);
    assert_eq!(s.median, Some(0.5));
    assert_eq!(s.min, Some(0.5));
    assert_eq!(s.max, Some(1.5));
}

#[test]
fn seed_sections_have_the_seed_rows_and_candidates() {
    let p = SectionSpec::for_suite(Suite::Pilot);
    assert_eq!(
        p.candidate_names(),
        ["whole", "local", "joint_legacy", "joint_tasks"]
    );
    assert_eq!(p.ratio, ("joint_tasks".into(), "joint_legacy".into()));
    assert_eq!(p.cases.len(), 5);
    assert_eq!(SectionSpec::for_suite(Suite::Validation).cases.len(), 26);
    let f = SectionSpec::for_suite(Suite::FixedGrain);
    assert_eq!(
        f.candidate_names(),
        ["grain_0", "grain_1", "grain_3", "grain_4294967295"]
    );
    assert_eq!(f.ratio, ("grain_4294967295".into(), "grain_0".into()));
    assert_eq!(f.cases.len(), 18);
    assert!(f.requires_identical);
    match f.candidates {
        CandidateSet::FixedGrain { config, .. } => {
            assert_eq!((config.local, config.block), (8, 32));
        }
        _ => panic!("fixed-grain has fixed geometry"),
    }
}

#[test]
fn fixed_grain_rows_run_one_kernel_with_identical_outputs() {
    let _w = common::watchdog(300, "fixed-grain identity");
    let r = report_once();
    let fg = r.section("fixed-grain").unwrap();
    assert_eq!(fg.rows.len(), 4);
    for row in &fg.rows {
        assert_eq!(row.outputs_identical, Some(true), "{}", row.label());
        assert_eq!(row.kernel_identical, Some(true), "{}", row.label());
        assert!(row.ok, "{}: {:?}", row.label(), row.problems);
        let variants: Vec<&String> = row
            .variants
            .iter()
            .filter_map(|(_, v)| v.as_ref())
            .collect();
        assert_eq!(variants.len(), 4);
        assert!(variants.iter().all(|v| *v == variants[0]));
        // Single-launch rows run the operator's kernel; unfused chains list
        // every launch's kernel.
        if row.launches == 1 {
            assert!(variants[0].starts_with(&row.op), "{}", variants[0]);
        } else {
            assert_eq!(variants[0].matches(" → ").count(), row.launches - 1);
        }
        let hashes: Vec<&String> = row
            .output_hashes
            .iter()
            .filter_map(|(_, h)| h.as_ref())
            .collect();
        assert!(hashes.iter().all(|h| *h == hashes[0]));
        for (_, cfg) in row.configs.iter() {
            let c = cfg.unwrap();
            assert_eq!((c.local, c.block), (8, 32));
        }
        let grains: Vec<u32> = row.configs.iter().map(|(_, c)| c.unwrap().grain).collect();
        assert_eq!(grains, [0, 1, 3, u32::MAX]);
        assert_eq!(row.round_ratios.len(), 3);
    }
    assert!(r.passed());
}

#[test]
fn every_row_is_checked_and_attention_local_is_unsupported() {
    let _w = common::watchdog(300, "checked rows");
    let r = report_once();
    for s in &r.sections {
        for row in &s.rows {
            assert!(row.ok, "{} {}: {:?}", s.name, row.label(), row.problems);
            assert!(row.max_abs_err.is_finite());
        }
    }
    let v = r.section("validation").unwrap();
    let attn = v.rows.iter().find(|x| x.op == "attention").unwrap();
    assert_eq!(attn.times_us.get("local"), Some(&None));
    assert_eq!(attn.configs.get("local"), Some(&None));
    assert!(attn.times_us.get("joint_tasks").unwrap().is_some());
    assert!(attn.ratio.median.is_some());
    // Planner sections do not claim identity.
    assert_eq!(attn.outputs_identical, None);
    assert_eq!(attn.kernel_identical, None);
}

#[test]
fn markdown_speaks_the_seeds_chinese_and_english() {
    let r = report_once();
    let zh = report::render(r, Format::Md, Lang::Zh);
    assert!(zh.starts_with("# Task-grain 完整结果\n"));
    assert!(
        zh.contains(
            "全部为 FP32、W8、8 个请求的 CPU workers、full-packet 特化开启、fusion 关闭。\
         时间为各轮 p50 的中位数（µs），配对比值单独复算；不把不同尺寸合并成一个平均加速比。"
        ) || r.meta.width != 8
    );
    for name in ["## pilot", "## validation", "## fixed-grain"] {
        assert!(zh.contains(name), "{name}");
    }
    assert!(zh.contains(
        "候选策略见 notes.md；attention 不支持 local 候选，用 — 明确标出，未把未实现的路径计作胜利。"
    ));
    assert!(zh.contains(
        "固定 local=8、block=32；最后一列候选将整个 launch 放在 caller 执行。代码与输出逐字节相同。"
    ));
    assert!(zh.contains(
        "| 算子 / 尺寸 | whole | local | joint_legacy | joint_tasks | 配对比值 | 配对范围 |"
    ));
    assert!(zh.contains(
        "| 算子 / 尺寸 | grain_0 | grain_1 | grain_3 | grain_4294967295 | 配对比值 | 配对范围 |"
    ));
    // The unsupported attention `local` cell is an em dash.
    let attn_line = zh
        .lines()
        .find(|l| l.starts_with("| attention 1×4×2×16×32×16×16 |"))
        .unwrap();
    let cells: Vec<&str> = attn_line.split('|').map(str::trim).collect();
    assert_eq!(cells[2 + 1], "—", "{attn_line}");
    assert!(cells[2].parse::<f64>().is_ok());

    let en = report::render(r, Format::Md, Lang::En);
    assert!(en.starts_with("# Task-grain: complete results\n"));
    assert!(en.contains(
        "| op / size | whole | local | joint_legacy | joint_tasks | paired ratio | paired range |"
    ));
    assert!(en.contains("Code and output are byte-for-byte identical."));
    assert!(en.contains("marked —"));
    assert!(!en.contains("算子"));
    // Rows read `op R×C`, ranges `min–max`.
    assert!(en.contains("| rmsnorm 17×65 |"));
    let line = en
        .lines()
        .find(|l| l.starts_with("| rmsnorm 17×66 |"))
        .unwrap();
    assert!(
        line.trim_end_matches(" |")
            .rsplit(" | ")
            .next()
            .unwrap()
            .contains('–')
    );
}

#[test]
fn json_has_the_contract_names() {
    let r = report_once();
    let v: Value = serde_json::from_str(&report::render(r, Format::Json, Lang::En)).unwrap();
    let meta = &v["meta"];
    for k in [
        "dtype",
        "width",
        "workers_requested",
        "workers_granted",
        "full_packet",
        "fusion",
        "rounds",
        "reps",
        "cpu",
    ] {
        assert!(!meta[k].is_null(), "meta.{k}");
    }
    assert_eq!(meta["dtype"], "FP32");
    assert_eq!(meta["workers_requested"], 8);
    assert_eq!(meta["full_packet"], true);
    assert_eq!(meta["fusion"], false);
    assert_eq!(meta["rounds"], 3);
    assert_eq!(meta["reps"], 2);
    let sections = v["sections"].as_array().unwrap();
    assert_eq!(sections.len(), 3);
    for s in sections {
        let cands: Vec<&str> = s["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert!(s["name"].is_string());
        assert!(cands.contains(&s["ratio"]["num"].as_str().unwrap()));
        assert!(cands.contains(&s["ratio"]["den"].as_str().unwrap()));
        for row in s["rows"].as_array().unwrap() {
            assert!(row["op"].is_string());
            assert!(row["shape"].as_array().unwrap().iter().all(Value::is_u64));
            let times = row["times_us"].as_object().unwrap();
            let keys: Vec<&str> = times.keys().map(String::as_str).collect();
            let mut sorted_keys = keys.clone();
            sorted_keys.sort();
            let mut sorted_cands = cands.clone();
            sorted_cands.sort();
            assert_eq!(sorted_keys, sorted_cands);
            for c in &cands {
                let t = &times[*c];
                let cfg = &row["configs"][*c];
                assert!(t.is_number() || t.is_null());
                assert_eq!(t.is_null(), cfg.is_null());
                if !cfg.is_null() {
                    for k in ["local", "block", "grain"] {
                        assert!(cfg[k].is_u64(), "{k}");
                    }
                }
            }
            for k in ["median", "min", "max"] {
                assert!(row["ratio"][k].is_number() || row["ratio"][k].is_null());
            }
            for k in ["outputs_identical", "kernel_identical"] {
                assert!(row[k].is_boolean() || row[k].is_null(), "{k}");
            }
            assert!(row["max_abs_err"].is_number());
            assert!(row["ok"].is_boolean());
            assert!(row["calls_per_sample"].as_u64().is_some_and(|k| k >= 1));
        }
    }
    let fg = sections
        .iter()
        .find(|s| s["name"] == "fixed-grain")
        .unwrap();
    for row in fg["rows"].as_array().unwrap() {
        assert_eq!(row["outputs_identical"], true);
        assert_eq!(row["kernel_identical"], true);
    }
}

#[test]
fn csv_has_one_line_per_row_and_candidate() {
    let r = report_once();
    let csv = report::render(r, Format::Csv, Lang::En);
    let lines: Vec<&str> = csv.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header, report::csv::HEADER);
    let expected: usize = r
        .sections
        .iter()
        .map(|s| s.rows.len() * s.candidates.len())
        .sum();
    assert_eq!(lines.len(), 1 + expected);
    for l in &lines[1..] {
        // Split outside quotes (a fused variant may hold commas).
        let mut fields = 1;
        let mut quoted = false;
        for ch in l.chars() {
            match ch {
                '"' => quoted = !quoted,
                ',' if !quoted => fields += 1,
                _ => {}
            }
        }
        assert_eq!(fields, header.len(), "{l}");
    }
    let attn_local = lines
        .iter()
        .find(|l| l.starts_with("validation,attention,") && l.contains(",local,"))
        .unwrap();
    let f: Vec<&str> = attn_local.split(',').collect();
    assert_eq!(f[4], "false");
    assert_eq!(f[5], "");
}

#[test]
fn plot_is_svg_with_a_line_per_row() {
    let r = report_once();
    let svg = report::plot::render(r, Lang::En);
    assert!(svg.starts_with("<svg"));
    assert!(svg.trim_end().ends_with("</svg>"));
    let rows: usize = r.sections.iter().map(|s| s.rows.len()).sum();
    assert!(svg.matches("<circle").count() == rows);
    assert!(svg.contains("stroke-dasharray"));
    assert!(svg.contains("fixed-grain: grain_4294967295 / grain_0"));
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("taskgrain-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn atomic_write_leaves_nothing_on_failure_and_no_temp_on_success() {
    let d = scratch("atomic");
    let bad = d.join("missing-dir").join("report.md");
    assert!(report::write_atomic(&bad, b"x").is_err());
    assert!(report::check_writable(&bad).is_err());
    assert!(!bad.exists() && !d.join("missing-dir").exists());
    // A directory is not a file.
    assert!(report::check_writable(&d).is_err());
    let good = d.join("report.md");
    std::fs::write(&good, b"old").unwrap();
    report::write_atomic(&good, b"new").unwrap();
    assert_eq!(std::fs::read(&good).unwrap(), b"new");
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

fn taskgrain(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_taskgrain"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bad_input_exits_2() {
    for args in [
        &["bench", "--suite", "nope"][..],
        &["bench", "--format", "xml"],
        &["bench", "--lang", "fr"],
        &["bench", "--rounds", "0"],
        &["bench", "--reps", "0"],
        &["bench", "--workers", "0"],
        &["bench", "--fusion", "maybe"],
        &["bench", "--full-packet", "maybe"],
        &["bench", "--width", "5"],
        &["bench", "roofline", "--suite", "pilot"],
    ] {
        let o = taskgrain(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.stdout.is_empty(), "{args:?}");
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn unwritable_out_exits_2_and_leaves_nothing() {
    let d = scratch("unwritable");
    let out = d.join("no-such-dir").join("r.md");
    let plot = d.join("no-such-dir").join("r.svg");
    for args in [
        vec!["bench", "--suite", "pilot", "--out", out.to_str().unwrap()],
        vec![
            "bench",
            "--suite",
            "pilot",
            "--plot",
            plot.to_str().unwrap(),
        ],
        vec!["bench", "--suite", "pilot", "--out", d.to_str().unwrap()],
    ] {
        let o = taskgrain(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("i/o error"));
    }
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert!(left.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn cli_writes_json_report_and_plot() {
    let _w = common::watchdog(300, "cli report");
    let d = scratch("cli");
    let out = d.join("pilot.json");
    let plot = d.join("pilot.svg");
    let o = taskgrain(&[
        "bench",
        "--suite",
        "pilot",
        "--rounds",
        "1",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--full-packet",
        "off",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["sections"][0]["name"], "pilot");
    assert_eq!(v["meta"]["full_packet"], false);
    assert_eq!(v["meta"]["fusion"], false);
    assert_eq!(v["sections"][0]["rows"].as_array().unwrap().len(), 5);
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    let mut names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["pilot.json", "pilot.svg"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn run_trace_is_a_chrome_timeline_of_every_group() {
    let d = scratch("trace");
    let path = d.join("t.json");
    let o = taskgrain(&[
        "run",
        "rmsnorm",
        "--shape",
        "256x512",
        "--block",
        "4",
        "--grain",
        "2",
        "--workers",
        "2",
        "--reps",
        "3",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let mut groups: Vec<u64> = ev
        .iter()
        .filter(|e| e["cat"] == "group")
        .map(|e| {
            assert_eq!(e["ph"], "X");
            assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
            e["args"]["group"].as_u64().unwrap()
        })
        .collect();
    groups.sort();
    assert_eq!(groups, (0..64).collect::<Vec<u64>>());
    assert!(ev.iter().any(|e| e["cat"] == "launch"));
    assert!(ev.iter().any(|e| e["name"] == "thread_name"));
    std::fs::remove_dir_all(&d).unwrap();
}
