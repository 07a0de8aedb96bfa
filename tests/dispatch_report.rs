//! The dispatch benchmark runs end to end and produces a complete report
//! (shape only: timings are never asserted).

mod common;

use std::time::Duration;
use taskgrain::bench::dispatch::{
    DispatchConfig, DispatchReport, measure_dispatch, render_markdown,
};

#[test]
fn dispatch_report_has_every_row() {
    let _w = common::watchdog(120, "dispatch report");
    let cfg = DispatchConfig {
        hot_calls: 50,
        spawn_calls: 10,
        idle_calls: 5,
        idle_cpu_window: Duration::from_millis(50),
        ..DispatchConfig::default()
    };
    let r = measure_dispatch(&cfg).unwrap();
    assert_eq!(r.workers_requested, cfg.workers);
    assert_eq!(r.rows.len(), 3 * 4 * 3);
    for m in ["caller", "pool", "rayon", "thread-scope"] {
        for (c, per_worker) in [
            ("hot", r.workers_granted),
            ("idle", r.workers_granted),
            ("oversubscribed", 8),
        ] {
            for tasks in [1, per_worker, 64] {
                let row = r
                    .row(m, c, tasks)
                    .unwrap_or_else(|| panic!("missing {m} {c} {tasks}"));
                assert!(row.p50_us.is_finite() && row.p50_us <= row.p90_us);
                assert!((0.0..=100.0).contains(&row.help_pct));
            }
        }
    }
    // What is true by construction.
    assert!(
        r.rows
            .iter()
            .filter(|x| x.mechanism == "caller")
            .all(|x| x.help_pct == 0.0)
    );
    assert!(
        r.rows
            .iter()
            .filter(|x| x.mechanism == "thread-scope")
            .all(|x| x.help_pct == 100.0)
    );
    assert!(
        r.rows
            .iter()
            .filter(|x| x.mechanism == "pool" && x.tasks == 1)
            .all(|x| x.help_pct == 0.0)
    );
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "workers_requested",
        "workers_granted",
        "idle_cpu_pct",
        "rows",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    for key in [
        "mechanism",
        "tasks",
        "condition",
        "p50_us",
        "p90_us",
        "help_pct",
    ] {
        assert!(json["rows"][0].get(key).is_some(), "{key}");
    }
    let back: DispatchReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, r);
    let md = render_markdown(&r);
    assert!(md.contains("| hot | pool | 64 |"));
}
