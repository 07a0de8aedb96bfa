//! The command line: a thin client of the library.
//!
//! Exit codes: 0 success, 1 a check failed (or a kernel panicked), 2 bad input or usage.

mod bench;
mod info;
mod plan;
mod run;

use crate::error::Error;
use clap::{Parser, Subcommand};
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
    /// The benchmark report (the seed's pilot, validation and fixed-grain tables);
    /// `bench roofline` and `bench dispatch` for the other benchmarks.
    Bench(bench::BenchArgs),
    /// Measure the planner's cost model on this machine (≤ 2 s) and cache it;
    /// reuses a valid cache for this machine and build.
    Calibrate(plan::CalibrateArgs),
    /// The oracle: exhaustive measured search of local × block × grain for one
    /// operator and shape; the result goes to the tuning cache (used by auto).
    Tune(plan::TuneArgs),
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
        Command::Bench(b) => bench::run(b),
        Command::Calibrate(a) => plan::calibrate(a),
        Command::Tune(a) => plan::tune(a),
    }
}

/// Parses `on` / `off`.
fn parse_switch(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}
