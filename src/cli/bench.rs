//! `taskgrain bench`: with no subcommand, the seed's report (pilot, validation,
//! fixed-grain); `bench roofline` and `bench dispatch` as before.

use super::{Outcome, parse_switch};
use crate::bench::report::{self, Format, Harness, Lang, ReportConfig, SectionSpec};
use crate::bench::suite_file;
use crate::bench::suites::{Suite, seed_cases};
use crate::error::{Error, Result};
use crate::plan::Strategy;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct BenchArgs {
    #[command(subcommand)]
    what: Option<BenchWhat>,
    #[command(flatten)]
    report: ReportArgs,
}

#[derive(Debug, Subcommand)]
enum BenchWhat {
    /// Launch latency of the pool against the caller, rayon and thread::scope.
    Dispatch {
        /// Workers requested for the hot and idle conditions.
        #[arg(long)]
        workers: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// taskgrain side by side with ONNX Runtime, JAX, PyTorch, candle, rten and
    /// numpy on the same inputs (run bench/peers/setup.sh once first).
    Peers(PeersArgs),
    /// Each operator on one worker against a same-run copy and FMA ceiling.
    Roofline {
        /// Packet width (4, 8 or 16); default: the widest this CPU has.
        #[arg(long)]
        width: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    Md,
    Json,
    Csv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LangArg {
    En,
    Zh,
}

impl From<LangArg> for Lang {
    fn from(lang: LangArg) -> Self {
        match lang {
            LangArg::En => Lang::En,
            LangArg::Zh => Lang::Zh,
        }
    }
}

/// The report's options (plain `taskgrain bench`).
#[derive(Debug, Args)]
struct ReportArgs {
    /// Which section(s) to run: pilot, validation, fixed-grain, auto (our policy
    /// against the oracle on every distinct row of the three), all (the four);
    /// or a suite FILE (.toml or .json list of op/shape rows, see README), run as
    /// a strategies section plus an auto section over its rows.
    #[arg(long, default_value = "all", value_name = "NAME|FILE")]
    suite: String,
    /// Strategies compared in pilot, validation and suite-file sections
    /// (comma-separated: whole, local, joint_legacy, joint_tasks, auto, oracle).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    strategies: Option<Vec<Strategy>>,
    /// Rounds per row (each round times every candidate, interleaved; the
    /// rows of all the sections are timed round by round).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Timed samples per candidate per round: one call each, or for a row
    /// whose calls are under 5 µs, as many back-to-back calls as last 5 µs.
    #[arg(long, default_value_t = 50)]
    reps: usize,
    /// Untimed calls per candidate before each round of a row.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Workers requested (the calling thread included); granted min(N, cores).
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Packet width 4, 8 or 16 (default: the widest ≤ 8, the seed's W8).
    #[arg(long)]
    width: Option<usize>,
    /// Full-packet specialization on or off.
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    full_packet: bool,
    /// Fusion on (one launch per operator) or off (the seed's chains of launches).
    #[arg(long, default_value = "off", value_parser = parse_switch, action = clap::ArgAction::Set)]
    fusion: bool,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pin the calling thread to the first allowed CPU while measuring (the
    /// pool's helpers are pinned to the others).
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    pin_caller: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Md)]
    format: FormatArg,
    /// Language of the Markdown captions and column names (and the plot).
    #[arg(long, value_enum, default_value_t = LangArg::En)]
    lang: LangArg,
    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also write an SVG chart of the paired ratios per section.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

pub(super) fn run(args: BenchArgs) -> Result<Outcome> {
    match args.what {
        Some(BenchWhat::Roofline { width, json }) => roofline(width, json),
        Some(BenchWhat::Dispatch { workers, json }) => dispatch(workers, json),
        Some(BenchWhat::Peers(p)) => peers(p),
        None => run_report(args.report),
    }
}

fn run_report(a: ReportArgs) -> Result<Outcome> {
    let cfg = ReportConfig {
        rounds: a.rounds,
        reps: a.reps,
        warmup: a.warmup,
        workers: a.workers,
        width: a.width,
        full_packet: a.full_packet,
        fusion: a.fusion,
        seed: a.seed,
        pin_caller: a.pin_caller,
        ..ReportConfig::default()
    };
    cfg.validate()?;
    // Refuse an unwritable destination before a run of several minutes.
    for p in [&a.out, &a.plot].into_iter().flatten() {
        report::check_writable(p)?;
    }
    let specs = section_specs(&a.suite, a.strategies.as_deref())?;
    let harness = Harness::new(cfg)?;
    for n in harness.notes() {
        eprintln!("taskgrain: {n}");
    }
    let bar = progress_bar(harness.total_rounds(&specs) as u64);
    let report = harness.run(&specs, &mut |p| {
        if p.round == 0 {
            bar.set_message(format!("{} {} (planned and verified)", p.section, p.row));
        } else {
            bar.set_message(format!("{} {} (round {})", p.section, p.row, p.round));
            bar.inc(1);
        }
    });
    bar.finish_and_clear();
    let report = report?;

    let lang = Lang::from(a.lang);
    let format = match a.format {
        FormatArg::Md => Format::Md,
        FormatArg::Json => Format::Json,
        FormatArg::Csv => Format::Csv,
    };
    let text = report::render(&report, format, lang);
    match &a.out {
        Some(p) => {
            report::write_atomic(p, text.as_bytes())?;
            eprintln!("taskgrain: report written to {}", p.display());
        }
        None => print!("{text}"),
    }
    if let Some(p) = &a.plot {
        report::write_atomic(p, report::plot::render(&report, lang).as_bytes())?;
        eprintln!("taskgrain: plot written to {}", p.display());
    }
    if report.passed() {
        Ok(Outcome::Ok)
    } else {
        for s in &report.sections {
            for r in s.rows.iter().filter(|r| !r.passed()) {
                for p in &r.problems {
                    eprintln!("taskgrain: check failed: {} {}: {p}", s.name, r.label());
                }
            }
        }
        Ok(Outcome::CheckFailed)
    }
}

/// The options of `bench peers`.
#[derive(Debug, Args)]
pub(super) struct PeersArgs {
    /// Thread counts, comma-separated; every runtime gets the same count.
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// seed (every distinct row of the seed's three sections), pilot,
    /// validation, fixed-grain, a suite FILE (.toml or .json, as for
    /// `bench --suite`), or any other file of `OP SHAPE` lines.
    #[arg(long, default_value = "seed", value_name = "NAME|FILE")]
    suite: String,
    /// Rounds per row (each round times every runtime, interleaved).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Most timed calls per runtime per round.
    #[arg(long, default_value_t = 30)]
    reps: usize,
    /// Fewest timed calls per runtime per round.
    #[arg(long, default_value_t = 3)]
    min_reps: usize,
    /// Target time of one runtime's calls in a round, ms (sets the calls between
    /// --min-reps and --reps).
    #[arg(long, default_value_t = 15.0)]
    round_ms: f64,
    /// Untimed calls per runtime before the first round.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Per-call timeout in seconds: a peer that takes longer is killed and
    /// reported, and the run goes on.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Idle ms after each runtime's calls in a round (lets spinning workers park).
    #[arg(long, default_value_t = 2.0)]
    gap_ms: f64,
    /// Let the other runtimes' processes run while one is timed (by default they
    /// are stopped, so that no worker left spinning by one takes a core from another).
    #[arg(long)]
    no_freeze: bool,
    /// Only these peers (comma-separated: onnxruntime, jax, torch, candle, rten, numpy).
    #[arg(long, value_name = "LIST")]
    peers: Option<String>,
    /// Where setup.sh put the environment (default: $TASKGRAIN_PEERS_DIR, then
    /// ./bench/peers, then the source tree's bench/peers).
    #[arg(long, value_name = "DIR")]
    peers_dir: Option<PathBuf>,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Md)]
    format: FormatArg,
    /// Language of the Markdown captions and column names.
    #[arg(long, value_enum, default_value_t = LangArg::En)]
    lang: LangArg,
    /// Write the comparison to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn peers(a: PeersArgs) -> Result<Outcome> {
    use crate::bench::peers::{self, PeersConfig, table};
    let (suite, cases) = peers::parse_suite(&a.suite)?;
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout < 1e6) {
        return Err(Error::BadArgument(
            "--timeout must be a positive number of seconds".into(),
        ));
    }
    let mut cfg = PeersConfig::new(peers::discover_hosts(a.peers_dir.as_deref()));
    cfg.threads = peers::parse_threads(&a.threads)?;
    cfg.cases = cases;
    cfg.suite = suite;
    cfg.rounds = a.rounds;
    cfg.reps = a.reps;
    cfg.min_reps = a.min_reps;
    cfg.round_ms = a.round_ms;
    cfg.warmup = a.warmup;
    cfg.timeout = std::time::Duration::from_secs_f64(a.timeout);
    cfg.seed = a.seed;
    if !(a.gap_ms.is_finite() && (0.0..1e5).contains(&a.gap_ms)) {
        return Err(Error::BadArgument(
            "--gap-ms must be between 0 and 100000".into(),
        ));
    }
    cfg.gap = std::time::Duration::from_secs_f64(a.gap_ms / 1000.0);
    cfg.freeze = !a.no_freeze;
    cfg.only = a
        .peers
        .as_deref()
        .map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    cfg.validate()?;
    if let Some(p) = &a.out {
        report::check_writable(p)?;
    }
    for h in &cfg.hosts {
        if let Some(why) = &h.missing {
            eprintln!("taskgrain: peer {} unavailable: {why}", h.peers.join(", "));
        }
    }
    let bar = progress_bar((cfg.cases.len() * cfg.threads.len()) as u64);
    let r = peers::run(&cfg, &mut |msg| {
        bar.set_message(msg.to_string());
        if msg.contains(" row ") {
            bar.inc(1);
        }
    });
    bar.finish_and_clear();
    let r = r?;
    let lang = Lang::from(a.lang);
    let text = match a.format {
        FormatArg::Md => table::markdown(&r, lang),
        FormatArg::Json => table::json(&r),
        FormatArg::Csv => table::csv(&r),
    };
    match &a.out {
        Some(p) => {
            report::write_atomic(p, text.as_bytes())?;
            eprintln!("taskgrain: comparison written to {}", p.display());
        }
        None => print!("{text}"),
    }
    eprintln!("taskgrain: bench peers took {:.0} s", r.meta.wall_s);
    if r.taskgrain_passed() {
        Ok(Outcome::Ok)
    } else {
        eprintln!(
            "taskgrain: check failed: taskgrain's own answer outside tolerance (see the notes)"
        );
        Ok(Outcome::CheckFailed)
    }
}

/// The sections `--suite` (and `--strategies`) ask for.
fn section_specs(suite: &str, strategies: Option<&[Strategy]>) -> Result<Vec<SectionSpec>> {
    let with_strategies = |spec: SectionSpec| -> Result<SectionSpec> {
        match strategies {
            Some(list) => SectionSpec::strategies(&spec.name, list.to_vec(), spec.cases),
            None => Ok(spec),
        }
    };
    let seed = |s: Suite| with_strategies(SectionSpec::for_suite(s));
    Ok(match suite {
        "pilot" => vec![seed(Suite::Pilot)?],
        "validation" => vec![seed(Suite::Validation)?],
        "fixed-grain" => vec![SectionSpec::for_suite(Suite::FixedGrain)],
        "auto" => vec![SectionSpec::auto(seed_cases())],
        "all" => {
            let mut v = Vec::new();
            for s in Suite::ALL {
                v.push(match s {
                    Suite::FixedGrain => SectionSpec::for_suite(s),
                    _ => seed(s)?,
                });
            }
            v.push(SectionSpec::auto(seed_cases()));
            v
        }
        file => {
            let path = Path::new(file);
            let looks_like_file =
                path.exists() || file.contains('/') || suite_file::has_suite_extension(path);
            if !looks_like_file {
                return Err(Error::BadArgument(format!(
                    "unknown suite {file:?} (known: pilot, validation, fixed-grain, auto, all, \
                     or a suite file .toml/.json)"
                )));
            }
            let cases = suite_file::load(path)?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "suite".into());
            let list = strategies
                .map(<[Strategy]>::to_vec)
                .unwrap_or_else(|| Strategy::SEED.to_vec());
            vec![
                SectionSpec::strategies(&name, list, cases.clone())?,
                SectionSpec::auto(cases),
            ]
        }
    })
}

/// A bar on stderr, hidden when stderr is not a terminal.
fn progress_bar(len: u64) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} rounds  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn roofline(width: Option<usize>, json: bool) -> Result<Outcome> {
    let backend = super::run::backend_for(width)?;
    let r = crate::bench::roofline::run(backend)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("report serializes")
        );
    } else {
        print!("{}", crate::bench::roofline::render_markdown(&r));
    }
    Ok(Outcome::Ok)
}

fn dispatch(workers: Option<usize>, json: bool) -> Result<Outcome> {
    use crate::bench::dispatch::{DispatchConfig, measure_dispatch, render_markdown};
    let mut cfg = DispatchConfig::default();
    if let Some(w) = workers {
        if w == 0 {
            return Err(Error::BadArgument("--workers must be at least 1".into()));
        }
        cfg.workers = w;
    }
    let r = measure_dispatch(&cfg)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("report serializes")
        );
    } else {
        print!("{}", render_markdown(&r));
    }
    Ok(Outcome::Ok)
}
