//! `taskgrain bench`: the seed's report, reproduced with this machine's numbers.
//!
//! - [`harness`]: rounds and statistics — inputs once per row, a verification
//!   launch per candidate against the f64 reference, warm-up, then R rounds of N
//!   timed samples per candidate (a sample: one call, or back-to-back calls
//!   lasting 5 µs where calls are shorter), interleaved in turns of up to 10
//!   samples, with the order rotated every round.
//! - [`stats`]: per-round p50s, their median, paired ratios and their range.
//! - [`model`]: the report's data (the JSON contract).
//! - [`markdown`], [`json`], [`csv`], [`plot`]: the writers; [`lang`]: the words, en/zh.
//!
//! ```no_run
//! use taskgrain::bench::report::{Harness, ReportConfig, SectionSpec, Lang, markdown};
//! use taskgrain::bench::suites::Suite;
//!
//! let harness = Harness::new(ReportConfig { rounds: 3, reps: 10, ..ReportConfig::default() })?;
//! let report = harness.run(&[SectionSpec::for_suite(Suite::FixedGrain)], &mut |_| {})?;
//! print!("{}", markdown::render(&report, Lang::En));
//! assert!(report.passed());
//! # Ok::<(), taskgrain::Error>(())
//! ```

pub mod csv;
pub mod harness;
pub mod json;
pub mod lang;
pub mod markdown;
pub mod model;
pub mod plot;
pub mod stats;

pub use crate::plan::{Plan, Planner, Strategy};

pub use harness::{CandidateSet, Harness, Progress, ReportConfig, SectionSpec};
pub use lang::Lang;
pub use model::{Report, RowResult, SectionResult};

use crate::error::{Error, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Output format of the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Markdown shaped like the seed (the default).
    #[default]
    Md,
    /// The JSON contract.
    Json,
    /// One CSV line per section × row × candidate.
    Csv,
}

impl std::str::FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Format> {
        match s {
            "md" | "markdown" => Ok(Format::Md),
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            _ => Err(Error::BadArgument(format!(
                "unknown format {s:?} (known: md, json, csv)"
            ))),
        }
    }
}

/// Renders `report` in `format` (captions in `lang` for Markdown).
pub fn render(report: &Report, format: Format, lang: Lang) -> String {
    match format {
        Format::Md => markdown::render(report, lang),
        Format::Json => json::render(report),
        Format::Csv => csv::render(report),
    }
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The temporary sibling `path` is written to before the rename.
fn temp_path(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::BadArgument(format!("{} does not name a file", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// flushed to disk, then renamed over `path`. On any error nothing is left
/// behind (neither a partial `path` nor the temporary file).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path)?;
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path, e));
    }
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_error(path, e)
    })
}

/// Fails early, before a long run, if `path` cannot be written: creates and
/// removes the temporary file `write_atomic` will use. Refuses a directory.
pub fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(io_error(
            path,
            std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
        ));
    }
    let tmp = temp_path(path)?;
    fs::File::create(&tmp).map_err(|e| io_error(path, e))?;
    let _ = fs::remove_file(&tmp);
    Ok(())
}
