//! The command line: a thin client of the library.
//!
//! Exit codes: 0 success, 1 a check failed (or a kernel panicked), 2 bad input or usage.

mod info;
mod run;

use crate::error::Error;
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// taskgrain: SIMT-style transformer kernels on CPUs.
#[derive(Debug, Parser)]
#[command(name = "taskgrain", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// CPU model, ISA features, available packet widths, cores.
    Info {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run one operator on one shape, timed, optionally checked against the f64 reference.
    Run(run::RunArgs),
    /// Benchmarks: the roofline of each operator on one worker.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
struct BenchArgs {
    #[command(subcommand)]
    what: Option<BenchWhat>,
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

/// How a command ended, mapped to the exit code.
pub enum Outcome {
    /// Everything ran and every check passed.
    Ok,
    /// A check failed.
    CheckFailed,
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match dispatch(cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Err(e) => {
            eprintln!("taskgrain: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// 1 for a failed run (a kernel panicked), 2 for bad input.
fn exit_code(e: &Error) -> u8 {
    match e {
        Error::KernelPanicked(_) => 1,
        _ => 2,
    }
}

fn dispatch(cli: Cli) -> Result<Outcome, Error> {
    match cli.command {
        Command::Info { json } => info::run(json),
        Command::Run(args) => run::run(args),
        Command::Bench(b) => match b.what {
            Some(BenchWhat::Roofline { width, json }) => bench_roofline(width, json),
            Some(BenchWhat::Dispatch { workers, json }) => bench_dispatch(workers, json),
            None => bench_roofline(None, false),
        },
    }
}

fn bench_roofline(width: Option<usize>, json: bool) -> Result<Outcome, Error> {
    let backend = run::backend_for(width)?;
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

fn bench_dispatch(workers: Option<usize>, json: bool) -> Result<Outcome, Error> {
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

/// Parses `on` / `off`.
fn parse_switch(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}
