//! The planner's files: the calibration and the tuning cache, per machine and build.
//!
//! Each file is JSON `{ "header": {…}, "body": … }`. The header records the
//! file's kind and format version, the CPU model, its SIMD features, the cores
//! and the build ([`build_id`]: crate version and a hash of the executable). A
//! file whose header does not match this process — another machine, another
//! build, another format — or that does not parse is *rejected*: the caller gets
//! the reason (to print as a warning), ignores the file and rebuilds it. A
//! missing file is not an error. Files are written atomically (temporary file,
//! then rename).
//!
//! Location ([`default_dir`]): `$TASKGRAIN_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/taskgrain`, else `$HOME/.cache/taskgrain`, else
//! `<temp dir>/taskgrain-cache`.

use crate::error::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Format version of the planner's files; bump when a body changes shape.
pub const FORMAT_VERSION: u32 = 3;

/// What a cache file was made for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// `calibration` or `tuning`.
    pub kind: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// CPU model.
    pub cpu: String,
    /// SIMD features.
    pub isa: Vec<String>,
    /// Cores available to the process.
    pub cores: usize,
    /// [`build_id`] of the writer.
    pub build: String,
}

impl Header {
    /// The header this process writes (and accepts) for files of `kind`.
    pub fn current(kind: &str) -> Header {
        Header {
            kind: kind.into(),
            version: FORMAT_VERSION,
            cpu: cpu_model(),
            isa: isa_features(),
            cores: crate::pool::available_cores(),
            build: build_id().to_string(),
        }
    }

    /// Why `self` (read from a file) is not acceptable, if it is not.
    fn mismatch(&self, want: &Header) -> Option<String> {
        if self.kind != want.kind {
            return Some(format!("it holds {:?}, not {:?}", self.kind, want.kind));
        }
        if self.version != want.version {
            return Some(format!(
                "format version {} (this build reads {})",
                self.version, want.version
            ));
        }
        if self.cpu != want.cpu || self.isa != want.isa || self.cores != want.cores {
            return Some(format!(
                "it was made on another machine ({}, {} cores)",
                self.cpu, self.cores
            ));
        }
        if self.build != want.build {
            return Some(format!("it was made by another build ({})", self.build));
        }
        None
    }
}

#[derive(Serialize, Deserialize)]
struct File<T> {
    header: Header,
    body: T,
}

/// What reading a cache file gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Loaded<T> {
    /// No file.
    Missing,
    /// A valid file for this machine and build.
    Valid(T),
    /// A file that is corrupted or foreign: ignored, with the reason.
    Rejected(String),
}

/// Reads `path` as a file of `kind`.
pub fn load<T: DeserializeOwned>(path: &Path, kind: &str) -> Loaded<T> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return Loaded::Rejected(format!("{}: cannot read: {e}", path.display())),
    };
    // The header first, so that a foreign file is named as such even when its
    // body has another shape.
    #[derive(Deserialize)]
    struct HeaderOnly {
        header: Header,
    }
    let header = match serde_json::from_slice::<HeaderOnly>(&text) {
        Ok(h) => h.header,
        Err(e) => {
            return Loaded::Rejected(format!(
                "{}: not a taskgrain {kind} file ({e})",
                path.display()
            ));
        }
    };
    if let Some(why) = header.mismatch(&Header::current(kind)) {
        return Loaded::Rejected(format!("{}: ignored: {why}", path.display()));
    }
    match serde_json::from_slice::<File<T>>(&text) {
        Ok(f) => Loaded::Valid(f.body),
        Err(e) => Loaded::Rejected(format!("{}: corrupted ({e})", path.display())),
    }
}

/// Writes `body` to `path` as a file of `kind`, atomically (creating the directory).
pub fn store<T: Serialize>(path: &Path, kind: &str, body: &T) -> Result<()> {
    let io = |e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let file = File {
        header: Header::current(kind),
        body,
    };
    let text = serde_json::to_vec_pretty(&file).expect("cache bodies serialize");
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// The default directory of the planner's files (see the module docs).
pub fn default_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("TASKGRAIN_CACHE_DIR") {
        return d;
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return d.join("taskgrain");
    }
    if let Some(d) = env("HOME") {
        return d.join(".cache").join("taskgrain");
    }
    std::env::temp_dir().join("taskgrain-cache")
}

/// `<crate version>+<hash of the running executable>`: a rebuilt binary gets a
/// new id, so its calibration and tuning are redone. Computed once per process
/// (an immutable fact about the executable).
pub fn build_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let hash = std::env::current_exe()
            .and_then(std::fs::read)
            .map(|b| format!("{:016x}", hash_bytes(&b)))
            .unwrap_or_else(|_| "unknown-exe".into());
        format!("{}+{hash}", env!("CARGO_PKG_VERSION"))
    })
}

/// A fast 64-bit hash of bytes (8 at a time, multiply–rotate), not cryptographic.
fn hash_bytes(b: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = b.len() as u64 ^ K;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ v).wrapping_mul(K).rotate_left(29);
    }
    for &x in chunks.remainder() {
        h = (h ^ x as u64).wrapping_mul(K).rotate_left(29);
    }
    h ^ (h >> 31)
}

/// The CPU's model name (from /proc/cpuinfo where there is one).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The SIMD features the planner's kernels use that this CPU reports.
pub fn isa_features() -> Vec<String> {
    crate::packet::Backend::all_native()
        .into_iter()
        .map(|b| b.name().to_string())
        .collect()
}
