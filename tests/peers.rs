//! `bench peers`: the protocol, a peer that hangs, crashes, answers garbage or
//! the wrong shape, missing peers as `—`, the tables and the CLI's bad input.
//! Runs without Python, onnxruntime or candle: the peers here are a fake host
//! (tests/fixtures/fake_peer.sh) or absent.

use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use taskgrain::bench::peers::protocol::times_of;
use taskgrain::bench::peers::table;
use taskgrain::bench::peers::{
    Cell, Host, HostSpec, PeerError, PeerInfo, PeersConfig, PeersMeta, PeersReport, PeersRow,
    PeersTable, parse_suite, parse_threads, run,
};
use taskgrain::bench::report::Lang;
use taskgrain::bench::report::model::{NamedMap, RatioSummary};
use taskgrain::ops::{Op, Shape};

fn fake(mode: &str, name: &str) -> HostSpec {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_peer.sh");
    HostSpec {
        label: name.into(),
        program: PathBuf::from("bash"),
        args: vec![script.display().to_string()],
        env: vec![
            ("FAKE_MODE".into(), mode.into()),
            ("FAKE_NAME".into(), name.into()),
            // swiglu 2×8: 16 outputs.
            ("FAKE_BYTES".into(), "64".into()),
        ],
        env_remove: vec![],
        peers: vec![name.into()],
        missing: None,
    }
}

fn config(hosts: Vec<HostSpec>) -> PeersConfig {
    let mut c = PeersConfig::new(hosts);
    c.threads = vec![1];
    // Two rows with 16 outputs each (the fake writes FAKE_BYTES = 64 bytes).
    c.cases = vec![
        (Op::SwiGlu, Shape::rows(2, 8)),
        (Op::SwiGlu, Shape::rows(4, 4)),
    ];
    c.rounds = 2;
    c.reps = 3;
    c.min_reps = 1;
    c.warmup = 1;
    c.floor_reps = 3;
    c.timeout = Duration::from_millis(300);
    c.first_call_timeout = Duration::from_millis(500);
    c.start_timeout = Duration::from_secs(10);
    c.gap = Duration::ZERO;
    c
}

fn cell<'a>(row: &'a PeersRow, name: &str) -> &'a Cell {
    row.peers.get(name).expect("column present")
}

fn gone(pid: u32) -> bool {
    // Reaped: no /proc entry (a zombie would still have one).
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn protocol_hello_load_run_and_refusals() {
    let mut h = Host::start(&fake("ok", "fake"), 1).expect("starts");
    let t = Duration::from_secs(5);
    let hello = h.request(&json!({"cmd": "hello"}), t).unwrap();
    assert_eq!(hello["peers"][0]["name"], "fake");
    h.request(&json!({"cmd": "load", "peer": "fake"}), t)
        .unwrap();
    let v = h
        .request(&json!({"cmd": "run", "peer": "fake", "reps": 4}), t)
        .unwrap();
    assert_eq!(times_of(&v, 4).unwrap(), vec![1.5; 4]);
    assert!(matches!(times_of(&v, 3), Err(PeerError::Protocol(_))));
    let e = h.request(&json!({"cmd": "nonsense"}), t).unwrap_err();
    assert!(matches!(e, PeerError::Refused(_)), "{e:?}");
    assert!(h.alive(), "a refusal does not kill the host");
    let pid = h.pid();
    h.shutdown();
    assert!(gone(pid));

    let mut u = Host::start(&fake("unsupported", "fake"), 1).unwrap();
    let e = u
        .request(&json!({"cmd": "load", "peer": "fake"}), t)
        .unwrap_err();
    assert!(matches!(e, PeerError::Unsupported(_)), "{e:?}");
}

#[test]
fn protocol_timeout_kills_and_reaps_the_host() {
    let mut h = Host::start(&fake("hang", "fake"), 1).unwrap();
    let pid = h.pid();
    let t0 = Instant::now();
    let e = h
        .request(
            &json!({"cmd": "run", "peer": "fake", "reps": 1}),
            Duration::from_millis(200),
        )
        .unwrap_err();
    assert!(matches!(e, PeerError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(!h.alive());
    assert!(gone(pid), "the hung host must be killed and reaped");
}

#[test]
fn protocol_crash_and_garbage_are_errors_not_panics() {
    let t = Duration::from_secs(5);
    let mut h = Host::start(&fake("crash", "fake"), 1).unwrap();
    let pid = h.pid();
    let e = h
        .request(&json!({"cmd": "run", "peer": "fake", "reps": 1}), t)
        .unwrap_err();
    match &e {
        PeerError::Crashed { status, stderr } => {
            assert!(status.contains('3'), "{status}");
            assert!(stderr.contains("crashing on purpose"), "{stderr}");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
    assert!(gone(pid));
    let e = h.request(&json!({"cmd": "hello"}), t).unwrap_err();
    assert!(matches!(e, PeerError::Protocol(_)));

    let mut g = Host::start(&fake("garbage", "fake"), 1).unwrap();
    let e = g
        .request(&json!({"cmd": "run", "peer": "fake", "reps": 1}), t)
        .unwrap_err();
    assert!(matches!(e, PeerError::Protocol(_)), "{e:?}");

    let missing = HostSpec {
        program: PathBuf::from("/nonexistent/taskgrain-peers"),
        ..fake("ok", "fake")
    };
    assert!(matches!(
        Host::start(&missing, 1),
        Err(PeerError::Spawn { .. })
    ));
}

#[test]
fn misbehaving_peers_are_reported_in_their_columns_and_the_run_goes_on() {
    let cfg = config(vec![
        fake("hang", "hangs"),
        fake("crash", "crashes"),
        fake("short", "short"),
        fake("ok", "zeros"),
        fake("unsupported", "nope"),
        HostSpec {
            missing: Some("not installed: run setup.sh".into()),
            ..fake("ok", "absent")
        },
    ]);
    let t0 = Instant::now();
    let r = run(&cfg, &mut |_| {}).expect("the run goes on");
    assert!(t0.elapsed() < Duration::from_secs(60));
    let tb = &r.tables[0];
    assert_eq!(tb.rows.len(), 2);
    for row in &tb.rows {
        assert!(row.taskgrain_ok);
        assert!(row.taskgrain_us.is_some());
        assert!(
            matches!(cell(row, "hangs"), Cell::Failed { why } if why.contains("no answer")),
            "{:?}",
            cell(row, "hangs")
        );
        assert!(
            matches!(cell(row, "crashes"), Cell::Failed { why } if why.contains("exited")),
            "{:?}",
            cell(row, "crashes")
        );
        assert!(
            matches!(cell(row, "short"), Cell::Failed { why } if why.contains("wrong shape")),
            "{:?}",
            cell(row, "short")
        );
        // All zeros: measured, flagged, and never the fastest peer.
        assert!(
            matches!(cell(row, "zeros"), Cell::Wrong { .. }),
            "{:?}",
            cell(row, "zeros")
        );
        assert!(matches!(cell(row, "nope"), Cell::Unsupported { .. }));
        assert_eq!(cell(row, "absent"), &Cell::Unavailable);
        assert_eq!(row.fastest_peer, None);
        assert_eq!(row.ratio.median, None);
    }
    let absent = tb.peers.iter().find(|p| p.name == "absent").unwrap();
    assert!(!absent.available);
    assert_eq!(
        absent.reason.as_deref(),
        Some("not installed: run setup.sh")
    );
    let md = table::markdown(&r, Lang::En);
    assert!(md.contains("| — |"), "{md}");
    assert!(
        md.contains("absent — missing: not installed: run setup.sh"),
        "{md}"
    );
    assert!(md.contains("✗"), "{md}");
    assert!(md.contains("⚠"), "{md}");
}

#[test]
fn a_peers_round_p50s_are_its_own_timings() {
    let cfg = config(vec![fake("ok", "zeros")]);
    let r = run(&cfg, &mut |_| {}).unwrap();
    let row = &r.tables[0].rows[0];
    let p50 = row.round_p50_us.get("zeros").unwrap().as_ref().unwrap();
    assert_eq!(
        p50,
        &vec![1.5, 1.5],
        "the peer's own timings, one p50 per round"
    );
    assert_eq!(
        row.round_p50_us
            .get("taskgrain")
            .unwrap()
            .as_ref()
            .unwrap()
            .len(),
        2
    );
    let floor = r.tables[0].peers[0].floor_us;
    assert_eq!(floor, Some(1.5));
}

fn sample_report() -> PeersReport {
    let row = |op: &str, shape: Vec<usize>, tg: f64, ort: Cell, ratio: f64| PeersRow {
        op: op.into(),
        shape,
        taskgrain_us: Some(tg),
        taskgrain_ok: true,
        peers: NamedMap(vec![
            ("onnxruntime".into(), ort.clone()),
            ("numpy".into(), Cell::Unavailable),
        ]),
        variants: NamedMap(vec![
            ("onnxruntime".into(), Some("rms23".into())),
            ("numpy".into(), None),
        ]),
        fastest_peer: ort.time_us().map(|_| "onnxruntime".into()),
        ratio: RatioSummary {
            median: Some(ratio),
            min: Some(ratio * 0.9),
            max: Some(ratio * 1.1),
        },
        round_ratios: vec![ratio],
        round_p50_us: NamedMap(vec![("taskgrain".into(), Some(vec![tg]))]),
        reps: NamedMap(vec![("taskgrain".into(), 3)]),
        notes: vec![],
    };
    PeersReport {
        meta: PeersMeta {
            dtype: "FP32".into(),
            suite: "seed".into(),
            rounds: 7,
            reps: 30,
            min_reps: 3,
            round_ms: 15.0,
            warmup: 3,
            timeout_s: 10.0,
            freeze: true,
            seed: 1,
            backend: "avx2-w8".into(),
            taskgrain_policy: "default".into(),
            cpu: "cpu".into(),
            isa: vec!["avx2".into()],
            cores: 2,
            load_start: Some(0.5),
            load_end: Some(0.7),
            wall_s: 12.0,
            version: "0".into(),
        },
        tables: vec![PeersTable {
            threads: 2,
            workers_granted: 2,
            peers: vec![
                PeerInfo {
                    name: "onnxruntime".into(),
                    host: "rust".into(),
                    available: true,
                    version: Some("1.32.0".into()),
                    detail: Some("intra-op threads = 2".into()),
                    reason: None,
                    floor_us: Some(2.25),
                },
                PeerInfo {
                    name: "numpy".into(),
                    host: "python".into(),
                    available: false,
                    version: None,
                    detail: None,
                    reason: Some("no Python environment: run setup.sh".into()),
                    floor_us: None,
                },
            ],
            taskgrain_floor_us: Some(0.2),
            rows: vec![
                row(
                    "rmsnorm",
                    vec![17, 65],
                    1.0,
                    Cell::Ok { time_us: 4.0 },
                    0.25,
                ),
                row(
                    "rmsnorm",
                    vec![1024, 4096],
                    2000.0,
                    Cell::Ok { time_us: 1000.0 },
                    2.0,
                ),
            ],
        }],
    }
}

#[test]
fn markdown_table_has_the_columns_the_floor_and_the_losses() {
    let md = table::markdown(&sample_report(), Lang::En);
    assert!(md.contains("## 2 threads"), "{md}");
    assert!(md.contains(
        "| op / shape | taskgrain | onnxruntime | numpy | ratio (taskgrain / fastest peer) | range | fastest peer |"
    ));
    assert!(md.contains("| *per-call floor (1 element)* | *0.200* | *2.250* | *—* |"));
    assert!(
        md.contains("| rmsnorm 17×65 | 1.000 | 4.000 | — | 0.250 | 0.225–0.275 | onnxruntime |")
    );
    assert!(md.contains(
        "| rmsnorm 1024×4096 | 2000.0 | 1000.0 | — | 2.000 ▲ | 1.800–2.200 | onnxruntime |"
    ));
    assert!(
        md.contains("- rmsnorm 1024×4096: 2.00× slower than onnxruntime"),
        "{md}"
    );
    assert!(md.contains("(1/2)"));
    assert!(md.contains("numpy — missing: no Python environment: run setup.sh"));
    let zh = table::markdown(&sample_report(), Lang::Zh);
    assert!(zh.contains("算子 / 尺寸") && zh.contains("配对范围") && zh.contains("2 线程"));
}

#[test]
fn json_and_csv_carry_the_same_rows() {
    let r = sample_report();
    let v: serde_json::Value = serde_json::from_str(&table::json(&r)).unwrap();
    let rows = &v["tables"][0]["rows"];
    assert_eq!(rows.as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["peers"]["onnxruntime"]["status"], "ok");
    assert_eq!(rows[0]["peers"]["numpy"]["status"], "unavailable");
    assert_eq!(rows[1]["ratio"]["median"], 2.0);
    assert_eq!(v["tables"][0]["peers"][0]["floor_us"], 2.25);
    let csv = table::csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 3, "{csv}");
    assert!(lines[1].starts_with("2,rmsnorm,17x65,taskgrain,1.000000,ok,0.250000"));
    assert!(lines[3].starts_with("2,rmsnorm,17x65,numpy,,unavailable,"));
}

#[test]
fn threads_and_suites_parse_or_fail_with_typed_errors() {
    assert_eq!(parse_threads("1,2").unwrap(), vec![1, 2]);
    assert_eq!(parse_threads(" 4 ").unwrap(), vec![4]);
    for bad in ["", "0", "1,,2", "x", "-1", "1,0"] {
        assert!(parse_threads(bad).is_err(), "{bad:?}");
    }
    let (name, seed) = parse_suite("seed").unwrap();
    assert_eq!(name, "seed");
    assert_eq!(
        seed.len(),
        42,
        "distinct op/shape rows of the seed's three sections"
    );
    assert_eq!(parse_suite("pilot").unwrap().1.len(), 5);
    assert!(parse_suite("nope").is_err());
    let dir = std::env::temp_dir().join(format!("tg-peers-suite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("rows.txt");
    std::fs::write(
        &f,
        "# rows\nrmsnorm 4x8\nattention 1x2x1x3x5x4x4  # gqa\nrmsnorm 4x8\n",
    )
    .unwrap();
    let (_, rows) = parse_suite(f.to_str().unwrap()).unwrap();
    assert_eq!(rows.len(), 2);
    std::fs::write(&f, "rmsnorm\n").unwrap();
    assert!(parse_suite(f.to_str().unwrap()).is_err());
    std::fs::write(&f, "rope 4x7\n").unwrap();
    assert!(parse_suite(f.to_str().unwrap()).is_err(), "odd C for rope");
    // The suite files of `taskgrain bench --suite FILE` work here too.
    let toml = dir.join("rows.toml");
    std::fs::write(
        &toml,
        "[[row]]\nop = \"rmsnorm\"\nshape = \"4x8\"\n\n[[row]]\nop = \"attention\"\nshape = \"1x2x1x3x5x4x4\"\n",
    )
    .unwrap();
    let (_, from_toml) = parse_suite(toml.to_str().unwrap()).unwrap();
    assert_eq!(from_toml, rows);
    let json = dir.join("rows.json");
    std::fs::write(
        &json,
        r#"[{"op": "rmsnorm", "shape": "4x8"}, {"op": "attention", "shape": "1x2x1x3x5x4x4"}]"#,
    )
    .unwrap();
    assert_eq!(parse_suite(json.to_str().unwrap()).unwrap().1, rows);
    std::fs::write(&toml, "[[row]]\nop = \"rmsnorm\"\n").unwrap();
    let err = parse_suite(toml.to_str().unwrap()).unwrap_err().to_string();
    assert!(err.contains("rows.toml:"), "names the file and line: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn taskgrain() -> Command {
    Command::new(env!("CARGO_BIN_EXE_taskgrain"))
}

#[test]
fn cli_bad_input_exits_2() {
    for args in [
        vec!["bench", "peers", "--threads", "0"],
        vec!["bench", "peers", "--threads", "a,b"],
        vec!["bench", "peers", "--suite", "no-such-suite"],
        vec!["bench", "peers", "--peers", "tensorflow"],
        vec!["bench", "peers", "--rounds", "0"],
    ] {
        let o = taskgrain().args(&args).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn cli_without_any_peer_installed_prints_dashes_and_how_to_set_up() {
    let dir = std::env::temp_dir().join(format!("tg-peers-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let suite = dir.join("rows.txt");
    std::fs::write(&suite, "swiglu 2x8\n").unwrap();
    let o = taskgrain()
        .args([
            "bench",
            "peers",
            "--threads",
            "1",
            "--rounds",
            "2",
            "--peers",
            "jax,torch,numpy",
        ])
        .arg("--suite")
        .arg(&suite)
        .arg("--peers-dir")
        .arg(&dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("| swiglu 2×8 |"), "{out}");
    assert!(out.contains("| — | — | — |"), "{out}");
    assert!(out.contains("setup.sh"), "{out}");
    assert!(err.contains("setup.sh"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
