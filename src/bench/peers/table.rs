//! The comparison's writers: a Markdown table per thread count (op / shape,
//! taskgrain, each peer, ratio taskgrain / fastest peer, range), JSON with the
//! same rows, and CSV with one line per row × candidate.

use super::{Cell, PeersReport, PeersRow, PeersTable};
use crate::bench::report::Lang;
use crate::bench::report::lang::UNSUPPORTED;
use std::fmt::Write;

/// The mark of a measured answer outside tolerance.
pub const WRONG: &str = "⚠";
/// The mark of a peer that crashed, hung, refused or answered the wrong shape.
pub const FAILED: &str = "✗";

fn t(lang: Lang, en: &'static str, zh: &'static str) -> &'static str {
    match lang {
        Lang::En => en,
        Lang::Zh => zh,
    }
}

/// A time in µs with three decimals below 1000 and one above.
pub fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.3}")
    }
}

/// A table cell.
pub fn cell_text(c: &Cell) -> String {
    match c {
        Cell::Ok { time_us } => fmt_us(*time_us),
        Cell::Wrong { time_us, .. } => format!("{} {WRONG}", fmt_us(*time_us)),
        Cell::Unavailable | Cell::Unsupported { .. } => UNSUPPORTED.into(),
        Cell::Failed { .. } => FAILED.into(),
    }
}

/// Renders the whole comparison as Markdown.
pub fn markdown(r: &PeersReport, lang: Lang) -> String {
    let m = &r.meta;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# {}\n",
        t(
            lang,
            "taskgrain side by side with its peers",
            "taskgrain 与同类运行时对比"
        )
    );
    let _ = match lang {
        Lang::En => writeln!(
            s,
            "{} inputs generated once per row (seed {}) and handed to every runtime as bytes; \
             every answer checked against the same f64 reference. Times are the median over {} \
             rounds of each round's p50 (µs), taskgrain and the peers interleaved, order rotated \
             each round; {}–{} calls per candidate per round (about {} ms each), {} warm-up calls. \
             The ratio is taskgrain / the fastest valid peer, paired round by round: its median \
             and min–max. Each peer times its own calls inside its process (no start-up, no IPC){}. \
             taskgrain: {}, backend {}. Suite: {}. Wall time {:.0} s.\n",
            m.dtype,
            m.seed,
            m.rounds,
            m.min_reps,
            m.reps,
            m.round_ms,
            m.warmup,
            if m.freeze {
                "; while one runtime is timed, the other runtimes' processes are stopped \
                 (SIGSTOP), so no worker left spinning by one takes a core from another"
            } else {
                ""
            },
            m.taskgrain_policy,
            m.backend,
            m.suite,
            m.wall_s
        ),
        Lang::Zh => writeln!(
            s,
            "全部为 {}；每行输入只生成一次（seed {}），以字节形式交给每个运行时；所有结果都与同一 f64 \
             参考比对。时间为 {} 轮中各轮 p50 的中位数（µs），taskgrain 与各对手交错执行、每轮轮换顺序；\
             每个候选每轮 {}–{} 次调用（约 {} ms），预热 {} 次。配对比值为 taskgrain / 当轮最快的有效对手，\
             逐轮计算，给出中位数与最小–最大。各对手在自身进程内计时（不含启动与进程间通信）{}。\
             taskgrain：{}，后端 {}。用例集：{}。总耗时 {:.0} 秒。\n",
            m.dtype,
            m.seed,
            m.rounds,
            m.min_reps,
            m.reps,
            m.round_ms,
            m.warmup,
            if m.freeze {
                "；计时某一运行时期间，其他运行时的进程被暂停（SIGSTOP），\
                 以免某一方残留的自旋线程占用另一方的核"
            } else {
                ""
            },
            m.taskgrain_policy,
            m.backend,
            m.suite,
            m.wall_s
        ),
    };
    let load = |l: Option<f64>| l.map_or("?".to_string(), |v| format!("{v:.2}"));
    let _ = writeln!(
        s,
        "{}: {} ({} {}; ISA {}); {} {} → {}.\n",
        t(lang, "Machine", "机器"),
        m.cpu,
        m.cores,
        t(lang, "cores", "核"),
        m.isa.join(" "),
        t(lang, "load average", "负载均值"),
        load(m.load_start),
        load(m.load_end)
    );
    for table in &r.tables {
        markdown_table(&mut s, table, lang);
    }
    s
}

fn markdown_table(s: &mut String, tb: &PeersTable, lang: Lang) {
    let _ = writeln!(
        s,
        "## {} {}\n",
        tb.threads,
        match (lang, tb.threads) {
            (Lang::En, 1) => "thread",
            (Lang::En, _) => "threads",
            (Lang::Zh, _) => "线程",
        }
    );
    let _ = writeln!(
        s,
        "{} {}{}\n",
        t(
            lang,
            "taskgrain workers granted:",
            "taskgrain 获准 workers："
        ),
        tb.workers_granted,
        t(
            lang,
            "; every peer is given the same thread count and runs in its own process.",
            "；每个对手使用相同线程数，各自在独立进程中运行。"
        )
    );
    let names: Vec<&str> = tb.peers.iter().map(|p| p.name.as_str()).collect();
    let _ = write!(
        s,
        "| {} | taskgrain |",
        t(lang, "op / shape", "算子 / 尺寸")
    );
    for n in &names {
        let _ = write!(s, " {n} |");
    }
    let _ = writeln!(
        s,
        " {} | {} | {} |",
        t(
            lang,
            "ratio (taskgrain / fastest peer)",
            "配对比值（taskgrain / 最快对手）"
        ),
        t(lang, "range", "配对范围"),
        t(lang, "fastest peer", "最快对手")
    );
    let _ = write!(s, "|---|---:|");
    for _ in &names {
        let _ = write!(s, "---:|");
    }
    let _ = writeln!(s, "---:|---:|---|");
    // The per-call floor of each runtime: a 1-element op.
    let _ = write!(
        s,
        "| *{}* | *{}* |",
        t(
            lang,
            "per-call floor (1 element)",
            "单次调用下限（1 个元素）"
        ),
        tb.taskgrain_floor_us
            .map_or(UNSUPPORTED.to_string(), fmt_us)
    );
    for p in &tb.peers {
        let _ = write!(
            s,
            " *{}* |",
            p.floor_us.map_or(UNSUPPORTED.to_string(), fmt_us)
        );
    }
    let _ = writeln!(s, " | | |");
    for row in &tb.rows {
        markdown_row(s, row, &names);
    }
    let _ = writeln!(s);
    footnotes(s, tb, lang);
}

fn markdown_row(s: &mut String, row: &PeersRow, names: &[&str]) {
    let tg = row.taskgrain_us.map_or(UNSUPPORTED.to_string(), fmt_us);
    let tg = if row.taskgrain_ok {
        tg
    } else {
        format!("{tg} {WRONG}")
    };
    let _ = write!(s, "| {} | {tg} |", row.label());
    for n in names {
        let c = row.peers.get(n).map_or(UNSUPPORTED.to_string(), cell_text);
        let _ = write!(s, " {c} |");
    }
    let (ratio, range) = match (row.ratio.median, row.ratio.min, row.ratio.max) {
        (Some(m), Some(lo), Some(hi)) => {
            let mark = if m > 1.0 { " ▲" } else { "" };
            (format!("{m:.3}{mark}"), format!("{lo:.3}–{hi:.3}"))
        }
        _ => (UNSUPPORTED.into(), UNSUPPORTED.into()),
    };
    let _ = writeln!(
        s,
        " {ratio} | {range} | {} |",
        row.fastest_peer.as_deref().unwrap_or(UNSUPPORTED)
    );
}

fn footnotes(s: &mut String, tb: &PeersTable, lang: Lang) {
    let _ = writeln!(
        s,
        "{}",
        t(
            lang,
            "`—`: peer missing or without this operator (never counted as a win); `⚠`: answer \
             outside tolerance (shown, not counted as the fastest peer); `✗`: the peer crashed, \
             hung, refused or answered the wrong shape; `▲`: taskgrain slower than the fastest \
             peer. The floor row is each runtime's median time of a 1-element call (an add; \
             taskgrain: swiglu 1×1).\n",
            "`—`：对手缺失或不支持该算子（不计作胜利）；`⚠`：结果超出容差（照常列出，但不计为最快对手）；\
             `✗`：对手崩溃、超时、拒绝或返回错误形状；`▲`：taskgrain 慢于最快对手。下限一行是各运行时 \
             1 个元素调用的中位时间（加法；taskgrain 为 swiglu 1×1）。\n"
        )
    );
    for p in &tb.peers {
        if p.available {
            let _ = writeln!(
                s,
                "- {} {}: {}",
                p.name,
                p.version.as_deref().unwrap_or("?"),
                p.detail.as_deref().unwrap_or("")
            );
        } else {
            let _ = writeln!(
                s,
                "- {} — {}: {}",
                p.name,
                t(lang, "missing", "缺失"),
                p.reason.as_deref().unwrap_or("unavailable")
            );
        }
    }
    // Which graph each ONNX-based peer ran, when not the same on every row.
    for p in tb.peers.iter().filter(|p| p.available) {
        let mut used: Vec<String> = Vec::new();
        for row in &tb.rows {
            if let Some(Some(v)) = row.variants.get(&p.name)
                && v != "ops"
            {
                let e = format!("{} {v}", row.op);
                if !used.contains(&e) {
                    used.push(e);
                }
            }
        }
        if !used.is_empty() {
            let _ = writeln!(
                s,
                "- {} {}: {}",
                p.name,
                t(lang, "graphs", "计算图"),
                used.join(", ")
            );
        }
    }
    let mut notes = Vec::new();
    for row in &tb.rows {
        for n in &row.notes {
            notes.push(format!("- {}: {n}", row.label()));
        }
        for (name, c) in row.peers.iter() {
            if let Cell::Unsupported { why } = c {
                notes.push(format!(
                    "- {}: {name} {}: {why}",
                    row.label(),
                    t(lang, "unsupported", "不支持")
                ));
            }
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(s, "\n{}:\n", t(lang, "Notes", "说明"));
        for n in notes {
            let _ = writeln!(s, "{n}");
        }
    }
    let losses: Vec<&PeersRow> = tb
        .rows
        .iter()
        .filter(|r| r.ratio.median.is_some_and(|m| m > 1.0))
        .collect();
    let _ = writeln!(
        s,
        "\n{} ({}/{}):\n",
        t(
            lang,
            "Rows where taskgrain is slower than the fastest peer",
            "taskgrain 慢于最快对手的行"
        ),
        losses.len(),
        tb.rows.len()
    );
    if losses.is_empty() {
        let _ = writeln!(s, "{}\n", t(lang, "none.", "无。"));
    }
    for r in losses {
        let m = r.ratio.median.unwrap_or(f64::NAN);
        let _ = writeln!(
            s,
            "- {}: {:.2}× {} {} ({} µs vs {} µs)",
            r.label(),
            m,
            t(lang, "slower than", "慢于"),
            r.fastest_peer.as_deref().unwrap_or("?"),
            r.taskgrain_us.map_or("?".into(), fmt_us),
            r.fastest_peer
                .as_deref()
                .and_then(|p| r.peers.get(p))
                .and_then(Cell::time_us)
                .map_or("?".into(), fmt_us)
        );
    }
    let _ = writeln!(s);
}

/// The comparison as pretty JSON (the [`PeersReport`] model).
pub fn json(r: &PeersReport) -> String {
    let mut s = serde_json::to_string_pretty(r).expect("the report serializes");
    s.push('\n');
    s
}

/// One CSV line per thread count × row × candidate.
pub fn csv(r: &PeersReport) -> String {
    let mut s = String::from(
        "threads,op,shape,candidate,time_us,status,ratio_median,ratio_min,ratio_max,fastest_peer\n",
    );
    let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.6}"));
    for tb in &r.tables {
        for row in &tb.rows {
            let shape = row
                .shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("x");
            let tail = format!(
                "{},{},{},{}",
                f(row.ratio.median),
                f(row.ratio.min),
                f(row.ratio.max),
                row.fastest_peer.as_deref().unwrap_or("")
            );
            let tg_status = if row.taskgrain_ok { "ok" } else { "wrong" };
            let _ = writeln!(
                s,
                "{},{},{shape},taskgrain,{},{tg_status},{tail}",
                tb.threads,
                row.op,
                f(row.taskgrain_us)
            );
            for (name, c) in row.peers.iter() {
                let status = match c {
                    Cell::Ok { .. } => "ok",
                    Cell::Wrong { .. } => "wrong",
                    Cell::Unavailable => "unavailable",
                    Cell::Unsupported { .. } => "unsupported",
                    Cell::Failed { .. } => "failed",
                };
                let _ = writeln!(
                    s,
                    "{},{},{shape},{name},{},{status},{tail}",
                    tb.threads,
                    row.op,
                    f(c.time_us())
                );
            }
        }
    }
    s
}
