//! The comparison: finds the hosts, then for every thread count and row checks
//! every peer's answer and times taskgrain and the peers in interleaved rounds.

use super::freeze::Frozen;
use super::protocol::{Host, HostSpec, PeerError, times_of};
use super::{Cell, PEER_ORDER, PeerInfo, PeersMeta, PeersReport, PeersRow, PeersTable};
use crate::bench::report::model::NamedMap;
use crate::bench::report::stats::{rotation, summarize, table_time};
use crate::bench::suites::{Suite, seed_cases};
use crate::bench::timing::{median, time_calls};
use crate::error::{Error, Result};
use crate::ops::{self, Op, OwnedInputs, Shape};
use crate::pool::CallerPin;
use crate::pool::PoolConfig;
use crate::runtime::{RunOptions, Runtime, RuntimeConfig};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Restarts of one host per thread count before its peers are given up.
const MAX_RESTARTS: usize = 4;

/// How to run the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct PeersConfig {
    /// Thread counts; every runtime gets the same count.
    pub threads: Vec<usize>,
    /// The op/shape rows.
    pub cases: Vec<(Op, Shape)>,
    /// Name of the suite (for the header).
    pub suite: String,
    /// Rounds per row.
    pub rounds: usize,
    /// Most timed calls per candidate per round.
    pub reps: usize,
    /// Fewest timed calls per candidate per round.
    pub min_reps: usize,
    /// Target length of one candidate's share of a round (ms): calls per round
    /// are `round_ms / t` clamped to `min_reps..=reps`.
    pub round_ms: f64,
    /// Untimed calls per candidate before the first round.
    pub warmup: usize,
    /// Per-call timeout: a request of K calls may take K × this.
    pub timeout: Duration,
    /// Seed of the generated inputs.
    pub seed: u64,
    /// Calls timed for each per-call floor.
    pub floor_reps: usize,
    /// The peer hosts.
    pub hosts: Vec<HostSpec>,
    /// Only these peers (by name), when set.
    pub only: Option<Vec<String>>,
    /// Pin the calling thread to the first allowed CPU while taskgrain is timed.
    pub pin_caller: bool,
    /// How long a host may take to start and answer `hello` (imports of jax and
    /// torch take seconds).
    pub start_timeout: Duration,
    /// Deadline of a load and of a row's first call (JIT compilation, graph
    /// set-up).
    pub first_call_timeout: Duration,
    /// Idle time after each candidate's calls in a round, so that a runtime's
    /// spinning workers park before the next runtime is timed.
    pub gap: Duration,
    /// Stop every other host process while a runtime is timed ([`super::freeze`]).
    pub freeze: bool,
}

impl PeersConfig {
    /// The defaults (seed rows, 1 and 2 threads) with these hosts.
    pub fn new(hosts: Vec<HostSpec>) -> PeersConfig {
        PeersConfig {
            threads: vec![1, 2],
            cases: seed_cases(),
            suite: "seed".into(),
            rounds: 7,
            reps: 30,
            min_reps: 3,
            round_ms: 15.0,
            warmup: 3,
            timeout: Duration::from_secs(10),
            seed: 1,
            floor_reps: 200,
            hosts,
            only: None,
            pin_caller: true,
            gap: Duration::from_millis(2),
            freeze: true,
            start_timeout: Duration::from_secs(180),
            first_call_timeout: Duration::from_secs(120),
        }
    }

    /// Rejects settings that cannot run.
    pub fn validate(&self) -> Result<()> {
        if self.threads.is_empty() || self.threads.contains(&0) {
            return Err(Error::BadArgument(
                "--threads needs positive thread counts, e.g. 1,2".into(),
            ));
        }
        if self.rounds == 0 || self.reps == 0 || self.min_reps == 0 || self.floor_reps == 0 {
            return Err(Error::BadArgument(
                "--rounds and --reps must be at least 1".into(),
            ));
        }
        if self.min_reps > self.reps {
            return Err(Error::BadArgument(format!(
                "--min-reps {} is above --reps {}",
                self.min_reps, self.reps
            )));
        }
        if !(self.round_ms.is_finite() && self.round_ms > 0.0) {
            return Err(Error::BadArgument("--round-ms must be positive".into()));
        }
        if self.timeout.is_zero() {
            return Err(Error::BadArgument("--timeout must be positive".into()));
        }
        if self.cases.is_empty() {
            return Err(Error::BadArgument("the suite has no rows".into()));
        }
        if let Some(only) = &self.only {
            for p in only {
                if !PEER_ORDER.contains(&p.as_str()) {
                    return Err(Error::BadArgument(format!(
                        "unknown peer {p:?} (known: {})",
                        PEER_ORDER.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Parses `--threads 1,2`.
pub fn parse_threads(s: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0 && n <= 1024)
                .ok_or_else(|| {
                    Error::BadArgument(format!(
                        "--threads {s:?}: expected a comma list of thread counts ≥ 1, e.g. 1,2"
                    ))
                })
        })
        .collect::<Result<_>>()?;
    Ok(v)
}

/// Parses `--suite`: `seed` (every distinct row of the seed's three sections,
/// the default), `all` (the same), `pilot`, `validation`, `fixed-grain`, or a
/// file: a `.toml` or `.json` suite file as `taskgrain bench --suite FILE`
/// reads it ([`crate::bench::suite_file`]), any other file one `OP SHAPE` per
/// line (`#` starts a comment).
pub fn parse_suite(s: &str) -> Result<(String, Vec<(Op, Shape)>)> {
    match s {
        "seed" | "all" => return Ok(("seed".into(), seed_cases())),
        _ => {}
    }
    if let Ok(suite) = s.parse::<Suite>() {
        return Ok((suite.name().into(), suite.cases()));
    }
    let path = Path::new(s);
    if !path.is_file() {
        return Err(Error::BadArgument(format!(
            "unknown suite {s:?}: neither seed, all, pilot, validation, fixed-grain nor a file"
        )));
    }
    if crate::bench::suite_file::has_suite_extension(path) {
        return Ok((s.into(), crate::bench::suite_file::load(path)?));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: s.into(),
        message: e.to_string(),
    })?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(op), Some(shape), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::BadArgument(format!(
                "{s}:{}: expected `OP SHAPE`, got {line:?}",
                i + 1
            )));
        };
        let op: Op = op.parse()?;
        let shape = Shape::parse(op, shape)?;
        if !cases.contains(&(op, shape)) {
            cases.push((op, shape));
        }
    }
    Ok((s.into(), cases))
}

/// The hosts as installed by `bench/peers/setup.sh`: the `taskgrain-peers`
/// binary (onnxruntime, candle, rten) and the Python helper (jax, torch, numpy).
/// `peers_dir` defaults to `$TASKGRAIN_PEERS_DIR`, then `./bench/peers`, then the
/// source tree's `bench/peers`. A host that is not installed carries the reason.
pub fn discover_hosts(peers_dir: Option<&Path>) -> Vec<HostSpec> {
    let dir = peers_dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("TASKGRAIN_PEERS_DIR").map(PathBuf::from))
        .or_else(|| {
            let local = PathBuf::from("bench/peers");
            local.is_dir().then_some(local)
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/peers"));
    let setup = format!("run {}/setup.sh once", dir.display());
    let models = dir.join("models");
    let venv_python = dir.join(".venv/bin/python");

    // The Rust host.
    let mut tried = Vec::new();
    let bin = std::env::var_os("TASKGRAIN_PEERS_BIN")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|p| p.join("taskgrain-peers"))),
        )
        .chain(std::iter::once(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/taskgrain-peers"),
        ))
        .find(|p| {
            tried.push(p.display().to_string());
            p.is_file()
        });
    let mut rust_args = vec!["--models".to_string(), models.display().to_string()];
    if let Some(lib) = find_ort_lib(&dir) {
        rust_args.push("--ort-lib".into());
        rust_args.push(lib.display().to_string());
    }
    let rust = HostSpec {
        label: "rust".into(),
        program: bin
            .clone()
            .unwrap_or_else(|| PathBuf::from("taskgrain-peers")),
        args: rust_args,
        env: [
            ("RAYON_NUM_THREADS", "{threads}"),
            ("RTEN_NUM_THREADS", "{threads}"),
            ("OMP_NUM_THREADS", "{threads}"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
        env_remove: Vec::new(),
        peers: ["onnxruntime", "candle", "rten"].map(String::from).to_vec(),
        missing: bin.is_none().then(|| {
            format!(
                "taskgrain-peers binary not found (looked at {}): {setup}",
                tried.join(", ")
            )
        }),
    };

    // The Python host.
    let helper = dir.join("peers.py");
    let python_missing = if !helper.is_file() {
        Some(format!(
            "{} not found (the source tree's bench/peers; {setup})",
            helper.display()
        ))
    } else if !venv_python.is_file() {
        Some(format!(
            "no Python environment at {}: {setup}",
            dir.join(".venv").display()
        ))
    } else {
        None
    };
    let python = HostSpec {
        label: "python".into(),
        program: venv_python,
        args: vec!["-u".into(), helper.display().to_string()],
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        // These two slow a current numpy's OpenBLAS down on this kind of CPU
        // (they exist for old OpenBLAS builds); the peers run without them.
        env_remove: vec!["OPENBLAS_CORETYPE".into(), "OPENBLAS_L2_SIZE".into()],
        peers: ["jax", "torch", "numpy"].map(String::from).to_vec(),
        missing: python_missing,
    };
    // One process per peer: no library's idle (spinning) threads share a
    // process with another library's pool.
    let mut hosts = Vec::new();
    for base in [rust, python] {
        for p in &base.peers {
            let mut h = base.clone();
            h.label = p.clone();
            h.args.push("--only".into());
            h.args.push(p.clone());
            h.peers = vec![p.clone()];
            hosts.push(h);
        }
    }
    hosts
}

/// `libonnxruntime.so*` inside the venv's onnxruntime wheel.
fn find_ort_lib(dir: &Path) -> Option<PathBuf> {
    let lib = dir.join(".venv/lib");
    for py in std::fs::read_dir(&lib).ok()?.flatten() {
        let capi = py.path().join("site-packages/onnxruntime/capi");
        let Ok(entries) = std::fs::read_dir(&capi) else {
            continue;
        };
        let mut libs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libonnxruntime.so"))
            })
            .collect();
        libs.sort();
        if let Some(l) = libs.pop() {
            return Some(l);
        }
    }
    None
}

/// A host and its restarts during one thread count.
struct HostSlot {
    spec: HostSpec,
    host: Option<Host>,
    restarts: usize,
    hello: Option<Value>,
    start_error: Option<String>,
}

impl HostSlot {
    fn new(spec: HostSpec) -> HostSlot {
        HostSlot {
            spec,
            host: None,
            restarts: 0,
            hello: None,
            start_error: None,
        }
    }

    /// The pid of the running host, if any.
    fn pid(&self) -> Option<u32> {
        self.host.as_ref().map(Host::pid)
    }

    /// The running host, started (again) if needed.
    fn ensure(
        &mut self,
        threads: usize,
        start: Duration,
    ) -> std::result::Result<&mut Host, PeerError> {
        let running = self.host.as_ref().is_some_and(Host::alive);
        if !running {
            if let Some(e) = &self.spec.missing {
                return Err(PeerError::Refused(e.clone()));
            }
            if self.hello.is_some() || self.start_error.is_some() {
                if self.restarts >= MAX_RESTARTS {
                    return Err(PeerError::Refused(format!(
                        "{} host gave up after {MAX_RESTARTS} restarts",
                        self.spec.label
                    )));
                }
                self.restarts += 1;
            }
            self.host = None;
            let mut h = Host::start(&self.spec, threads)?;
            let hello = h.request(&json!({"cmd": "hello"}), start)?;
            self.hello.get_or_insert(hello);
            self.host = Some(h);
        }
        Ok(self.host.as_mut().expect("started"))
    }
}

/// One peer column during one thread count.
struct Column {
    name: String,
    host: usize,
    info: PeerInfo,
}

/// A peer's state on one row.
struct PeerRun {
    col: usize,
    active: bool,
    cell: Option<Cell>,
    wrong: Option<String>,
    variant: Option<String>,
    reps: usize,
    p50s: Vec<f64>,
    /// The host process the row is loaded in.
    pid: Option<u32>,
}

/// Removes its directory when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p =
            std::env::temp_dir().join(format!("taskgrain-peers-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| Error::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_f32(path: &Path, v: &[f32]) -> Result<()> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

fn read_f32(path: &Path) -> std::result::Result<Vec<f32>, String> {
    let b = std::fs::read(path).map_err(|e| format!("reading its output: {e}"))?;
    if b.len() % 4 != 0 {
        return Err(format!("output of {} bytes is not f32s", b.len()));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Runs the comparison; `progress` gets a line per row.
pub fn run(cfg: &PeersConfig, progress: &mut dyn FnMut(&str)) -> Result<PeersReport> {
    cfg.validate()?;
    let t0 = Instant::now();
    let load_start = crate::bench::machine::load_average();
    let tmp = TempDir::new()?;
    let mut tables = Vec::with_capacity(cfg.threads.len());
    let mut backend = String::new();
    let mut cores = 0;
    for &n in &cfg.threads {
        let rt = Runtime::new(RuntimeConfig {
            pool: PoolConfig::with_workers(n),
            ..RuntimeConfig::default()
        })?;
        backend = rt.backend().name().to_string();
        cores = rt.pool().cores();
        tables.push(run_threads(cfg, &rt, n, &tmp.0, progress)?);
    }
    Ok(PeersReport {
        meta: PeersMeta {
            dtype: "FP32".into(),
            suite: cfg.suite.clone(),
            rounds: cfg.rounds,
            reps: cfg.reps,
            min_reps: cfg.min_reps,
            round_ms: cfg.round_ms,
            warmup: cfg.warmup,
            timeout_s: cfg.timeout.as_secs_f64(),
            freeze: cfg.freeze,
            seed: cfg.seed,
            backend,
            taskgrain_policy:
                "Runtime::run with RunOptions::default() (the planner's default plan)".into(),
            cpu: crate::bench::machine::cpu_model(),
            isa: crate::bench::machine::isa_features()
                .into_iter()
                .map(String::from)
                .collect(),
            cores,
            load_start,
            load_end: crate::bench::machine::load_average(),
            wall_s: t0.elapsed().as_secs_f64(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        tables,
    })
}

fn wanted(cfg: &PeersConfig, name: &str) -> bool {
    cfg.only
        .as_ref()
        .is_none_or(|o| o.iter().any(|p| p == name))
}

fn run_threads(
    cfg: &PeersConfig,
    rt: &Runtime,
    threads: usize,
    tmp: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PeersTable> {
    let mut slots: Vec<HostSlot> = cfg.hosts.iter().cloned().map(HostSlot::new).collect();
    // Columns in the fixed peer order, then any other peer a host serves.
    let mut names: Vec<(String, usize)> = Vec::new();
    for (h, s) in slots.iter().enumerate() {
        for p in &s.spec.peers {
            if wanted(cfg, p) {
                names.push((p.clone(), h));
            }
        }
    }
    names.sort_by_key(|(n, _)| {
        PEER_ORDER
            .iter()
            .position(|p| p == n)
            .unwrap_or(PEER_ORDER.len())
    });
    let mut columns: Vec<Column> = Vec::new();
    for (name, h) in names {
        let slot = &mut slots[h];
        let mut info = PeerInfo {
            name: name.clone(),
            host: slot.spec.label.clone(),
            available: false,
            version: None,
            detail: None,
            reason: None,
            floor_us: None,
        };
        if slot.hello.is_none() && slot.start_error.is_none() {
            progress(&format!(
                "{threads} thread(s): starting the {} peers",
                slot.spec.label
            ));
            if let Err(e) = slot.ensure(threads, cfg.start_timeout) {
                slot.start_error = Some(e.to_string());
            }
        }
        if let Some(e) = &slot.start_error {
            info.reason = Some(e.clone());
        } else if let Some(hello) = &slot.hello {
            let listed = hello["peers"]
                .as_array()
                .and_then(|a| a.iter().find(|p| p["name"] == name.as_str()));
            match listed {
                Some(p) if p["available"] == true => {
                    info.available = true;
                    info.version = p["version"].as_str().map(String::from);
                    info.detail = p["detail"].as_str().map(String::from);
                }
                Some(p) => {
                    info.reason = Some(
                        p["reason"]
                            .as_str()
                            .unwrap_or("unavailable")
                            .chars()
                            .take(300)
                            .collect(),
                    )
                }
                None => {
                    info.reason = Some(format!("the {} host does not serve it", slot.spec.label))
                }
            }
        }
        columns.push(Column {
            name,
            host: h,
            info,
        });
    }

    // Per-call floors: a 1-element op.
    for c in columns.iter_mut().filter(|c| c.info.available) {
        let req = json!({"cmd": "floor", "peer": c.name, "warmup": 20, "reps": cfg.floor_reps});
        let r = slots[c.host]
            .ensure(threads, cfg.start_timeout)
            .and_then(|h| {
                h.request(
                    &req,
                    cfg.first_call_timeout + cfg.timeout * cfg.floor_reps as u32,
                )
            });
        if let Ok(v) = r
            && let Ok(t) = times_of(&v, cfg.floor_reps)
        {
            c.info.floor_us = Some(median(&t));
        }
    }
    let taskgrain_floor_us = taskgrain_floor(rt, cfg.floor_reps);

    let mut rows = Vec::with_capacity(cfg.cases.len());
    for (i, (op, shape)) in cfg.cases.iter().enumerate() {
        let label = format!(
            "{op} {}",
            crate::bench::report::model::shape_label(&shape.dims())
        );
        progress(&format!(
            "{threads} thread(s): row {}/{} {label}",
            i + 1,
            cfg.cases.len()
        ));
        rows.push(run_row(
            cfg, rt, threads, *op, shape, tmp, &mut slots, &columns,
        )?);
    }
    for s in slots {
        if let Some(h) = s.host {
            h.shutdown();
        }
    }
    Ok(PeersTable {
        threads,
        workers_granted: rt.pool().workers_granted(),
        peers: columns.into_iter().map(|c| c.info).collect(),
        taskgrain_floor_us,
        rows,
    })
}

fn taskgrain_floor(rt: &Runtime, reps: usize) -> Option<f64> {
    let shape = Shape::rows(1, 1);
    let inputs = OwnedInputs::generate(Op::SwiGlu, shape, 1).ok()?;
    let mut out = vec![0.0f32; 1];
    let mut failed = false;
    let _pin = CallerPin::first_allowed();
    let t = time_calls(20, reps, || {
        failed |= rt
            .run(inputs.view(), &shape, &mut out, &RunOptions::default())
            .is_err();
    });
    (!failed).then(|| median(&t))
}

/// Loads `peer` and runs one call into `out`: the answer, or why not.
fn load_and_call(
    cfg: &PeersConfig,
    slot: &mut HostSlot,
    threads: usize,
    peer: &str,
    load: &Value,
    out: &Path,
) -> std::result::Result<(Value, Vec<f32>, u32), PeerError> {
    let h = slot.ensure(threads, cfg.start_timeout)?;
    let pid = h.pid();
    let loaded = h.request(load, cfg.first_call_timeout)?;
    let _ = std::fs::remove_file(out);
    let run = json!({"cmd": "run", "peer": peer, "warmup": 0, "reps": 1,
                     "output": out.display().to_string()});
    h.request(&run, cfg.first_call_timeout)?;
    let y = read_f32(out).map_err(PeerError::Refused)?;
    Ok((loaded, y, pid))
}

#[allow(clippy::too_many_arguments)]
fn run_row(
    cfg: &PeersConfig,
    rt: &Runtime,
    threads: usize,
    op: Op,
    shape: &Shape,
    tmp: &Path,
    slots: &mut [HostSlot],
    columns: &[Column],
) -> Result<PeersRow> {
    // The caller is pinned whenever taskgrain runs, not only while it is timed:
    // `auto` refines its plan during the row's first calls, and a caller left
    // on the CPU of the pool's (pinned) helper made every pooled candidate look
    // no faster than the caller (129x768 rows then ran on one core at 2
    // threads). Never while a host may start: a child inherits the mask.
    let pin = || {
        if cfg.pin_caller {
            CallerPin::first_allowed()
        } else {
            CallerPin::none()
        }
    };
    let inputs = OwnedInputs::generate(op, *shape, cfg.seed)?;
    let reference = ops::reference(inputs.view(), shape);
    let tol = ops::tolerance(op);
    let len = ops::output_len(shape);
    let mut paths = Vec::new();
    for (k, t) in inputs.tensors().iter().enumerate() {
        let p = tmp.join(format!("in{k}.f32"));
        write_f32(&p, t)?;
        paths.push(p.display().to_string());
    }
    let mut notes = Vec::new();

    // taskgrain: a checked call into a NaN-poisoned buffer, then an estimate.
    let pinned = pin();
    let opts = RunOptions::default();
    let mut out = crate::buffer::filled(f32::NAN, len);
    rt.run(inputs.view(), shape, &mut out, &opts)?;
    let check = ops::compare(&out, &reference, tol);
    let taskgrain_ok = check.ok;
    if !check.ok {
        notes.push(format!(
            "taskgrain: {} of {len} elements outside tolerance (max |err| {:.3e})",
            check.failures, check.max_abs_err
        ));
    }
    let mut err = None;
    let est = median(&time_calls(1, 3, || {
        if let Err(e) = rt.run(inputs.view(), shape, &mut out, &opts) {
            err = Some(e);
        }
    }));
    if let Some(e) = err {
        return Err(e);
    }
    let reps_for = |t_us: f64| -> usize {
        let want = (cfg.round_ms * 1000.0 / t_us.max(0.01)).ceil();
        (want as usize).clamp(cfg.min_reps, cfg.reps)
    };
    let tg_reps = reps_for(est);
    drop(pinned);

    // Peers: load, check, estimate.
    let mut runs: Vec<PeerRun> = Vec::new();
    for (ci, c) in columns.iter().enumerate() {
        let mut pr = PeerRun {
            col: ci,
            active: false,
            cell: None,
            wrong: None,
            variant: None,
            reps: 0,
            p50s: Vec::new(),
            pid: None,
        };
        if !c.info.available {
            pr.cell = Some(Cell::Unavailable);
            runs.push(pr);
            continue;
        }
        let out_path = tmp.join(format!("out-{}.f32", c.name));
        let mut variant: Option<String> = None;
        loop {
            let mut load = json!({"cmd": "load", "peer": c.name, "op": op.name(),
                                  "dims": shape.dims(), "inputs": paths});
            if let Some(v) = &variant {
                load["variant"] = json!(v);
            }
            match load_and_call(cfg, &mut slots[c.host], threads, &c.name, &load, &out_path) {
                Err(PeerError::Unsupported(why)) => {
                    pr.cell = Some(Cell::Unsupported { why });
                }
                Err(e) => {
                    pr.cell = Some(Cell::Failed { why: e.to_string() });
                }
                Ok((_, y, _)) if y.len() != len => {
                    pr.cell = Some(Cell::Failed {
                        why: format!("wrong shape: {} elements, expected {len}", y.len()),
                    });
                }
                Ok((loaded, y, pid)) => {
                    let used = loaded["variant"].as_str().map(String::from);
                    let check = ops::compare(&y, &reference, tol);
                    if !check.ok {
                        let why = format!(
                            "{} of {len} elements outside tolerance (max |err| {:.3e})",
                            check.failures, check.max_abs_err
                        );
                        let next = loaded["fallbacks"]
                            .as_array()
                            .and_then(|a| a.first())
                            .and_then(Value::as_str)
                            .map(String::from);
                        if let Some(next) = next {
                            notes.push(format!(
                                "{} {}: {why}; fell back to {next}",
                                c.name,
                                used.as_deref().unwrap_or("?")
                            ));
                            variant = Some(next);
                            continue;
                        }
                        pr.wrong = Some(why);
                    }
                    pr.variant = used;
                    pr.active = true;
                    pr.pid = Some(pid);
                }
            }
            break;
        }
        runs.push(pr);
    }

    // Estimates and warm-up for the peers (taskgrain warms up below).
    for pr in runs.iter_mut().filter(|r| r.active) {
        let c = &columns[pr.col];
        let req = json!({"cmd": "run", "peer": c.name, "warmup": cfg.warmup, "reps": 3});
        let r = ensure_loaded(cfg, pr, c, &mut slots[c.host], threads, op, shape, &paths).and_then(
            |h| {
                h.request(&req, cfg.timeout * (cfg.warmup as u32 + 3))
                    .and_then(|v| times_of(&v, 3))
            },
        );
        match r {
            Ok(t) => pr.reps = reps_for(median(&t)),
            Err(e) => fail(pr, &e),
        }
    }
    let pinned = pin();
    for _ in 0..cfg.warmup {
        rt.run(inputs.view(), shape, &mut out, &opts)?;
    }
    drop(pinned);

    // Rounds: taskgrain is candidate 0, the active peers follow; the order
    // rotates every round.
    let mut tg_p50s = Vec::with_capacity(cfg.rounds);
    for round in 0..cfg.rounds {
        let active: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].active).collect();
        for j in rotation(active.len() + 1, round) {
            // The candidate's own host (none for taskgrain) runs; the others wait.
            let keep = if j == 0 {
                None
            } else {
                slots[columns[runs[active[j - 1]].col].host].pid()
            };
            let _frozen = if cfg.freeze {
                Frozen::all_but(slots.iter().filter_map(HostSlot::pid), keep)
            } else {
                Frozen::none()
            };
            std::thread::sleep(cfg.gap);
            if j == 0 {
                let _pin = pin();
                let mut err = None;
                let t = time_calls(0, tg_reps, || {
                    if let Err(e) = rt.run(inputs.view(), shape, &mut out, &opts) {
                        err = Some(e);
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
                tg_p50s.push(median(&t));
                continue;
            }
            let pr = &mut runs[active[j - 1]];
            if !pr.active {
                continue;
            }
            let c = &columns[pr.col];
            let req = json!({"cmd": "run", "peer": c.name, "warmup": 0, "reps": pr.reps});
            let reps = pr.reps;
            let r = ensure_loaded(cfg, pr, c, &mut slots[c.host], threads, op, shape, &paths)
                .and_then(|h| {
                    h.request(&req, cfg.timeout * reps as u32)
                        .and_then(|v| times_of(&v, reps))
                });
            match r {
                Ok(t) => pr.p50s.push(median(&t)),
                Err(e) => fail(pr, &e),
            }
        }
    }
    // A peer that dropped out mid-row has no row time: its cell says why.
    for pr in &mut runs {
        if pr.active && pr.p50s.len() != cfg.rounds {
            pr.active = false;
            pr.cell = Some(Cell::Failed {
                why: "did not finish every round".into(),
            });
        }
    }

    // Ratios against the fastest valid peer of each round.
    let valid: Vec<&PeerRun> = runs
        .iter()
        .filter(|r| r.active && r.wrong.is_none())
        .collect();
    let round_ratios: Vec<f64> = if valid.is_empty() {
        Vec::new()
    } else {
        (0..cfg.rounds)
            .map(|k| {
                let best = valid
                    .iter()
                    .map(|r| r.p50s[k])
                    .fold(f64::INFINITY, f64::min);
                tg_p50s[k] / best
            })
            .collect()
    };
    let fastest_peer = valid
        .iter()
        .map(|r| (r, table_time(&r.p50s).unwrap_or(f64::INFINITY)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(r, _)| columns[r.col].name.clone());

    let mut cells = Vec::new();
    let mut variants = Vec::new();
    let mut p50s = vec![("taskgrain".to_string(), Some(tg_p50s.clone()))];
    let mut reps = vec![("taskgrain".to_string(), tg_reps)];
    for pr in runs {
        let name = columns[pr.col].name.clone();
        let cell = if pr.active {
            let time_us = table_time(&pr.p50s).unwrap_or(f64::NAN);
            match pr.wrong {
                Some(why) => {
                    notes.push(format!("{name}: {why}"));
                    Cell::Wrong { time_us, why }
                }
                None => Cell::Ok { time_us },
            }
        } else {
            pr.cell.unwrap_or(Cell::Failed {
                why: "not measured".into(),
            })
        };
        if let Cell::Failed { why } = &cell {
            notes.push(format!("{name}: {why}"));
        }
        cells.push((name.clone(), cell));
        variants.push((name.clone(), pr.variant));
        p50s.push((name.clone(), (!pr.p50s.is_empty()).then_some(pr.p50s)));
        reps.push((name, pr.reps));
    }
    Ok(PeersRow {
        op: op.name().into(),
        shape: shape.dims(),
        taskgrain_us: table_time(&tg_p50s),
        taskgrain_ok,
        peers: NamedMap(cells),
        variants: NamedMap(variants),
        fastest_peer,
        ratio: summarize(&round_ratios),
        round_ratios,
        round_p50_us: NamedMap(p50s),
        reps: NamedMap(reps),
        notes,
    })
}

/// Marks `pr` failed on this row.
fn fail(pr: &mut PeerRun, e: &PeerError) {
    pr.active = false;
    pr.cell = Some(Cell::Failed { why: e.to_string() });
}

/// The host of `pr`, with the row loaded: after the host was lost (another
/// peer of it crashed or hung) it is restarted and the row loaded again, with
/// the same variant and one untimed call.
#[allow(clippy::too_many_arguments)]
fn ensure_loaded<'a>(
    cfg: &PeersConfig,
    pr: &mut PeerRun,
    c: &Column,
    slot: &'a mut HostSlot,
    threads: usize,
    op: Op,
    shape: &Shape,
    paths: &[String],
) -> std::result::Result<&'a mut Host, PeerError> {
    let h = slot.ensure(threads, cfg.start_timeout)?;
    if Some(h.pid()) == pr.pid {
        return Ok(h);
    }
    let mut load = json!({"cmd": "load", "peer": c.name, "op": op.name(),
                          "dims": shape.dims(), "inputs": paths});
    if let Some(v) = &pr.variant {
        load["variant"] = json!(v);
    }
    h.request(&load, cfg.first_call_timeout)?;
    let warm = json!({"cmd": "run", "peer": c.name, "warmup": 0, "reps": 1});
    h.request(&warm, cfg.first_call_timeout)?;
    pr.pid = Some(h.pid());
    Ok(h)
}
