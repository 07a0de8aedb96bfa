//! `taskgrain-peers`: the Rust peers of `taskgrain bench peers` — candle, rten and
//! ONNX Runtime (its C API, loaded at run time from the shared library that ships
//! in the `onnxruntime` wheel) — behind the JSON-lines protocol of
//! `bench/peers/README.md`.
//!
//! ```text
//! taskgrain-peers --threads N [--models DIR] [--ort-lib PATH] [--only LIST]
//! ```
//!
//! The driver starts one process per peer (`--only NAME`): ONNX Runtime's
//! spinning intra-op threads and candle's rayon pool must not share a process.
//!
//! One process serves one thread count. Every call is timed here, around the
//! call alone, so neither process start-up nor the pipe is ever in a timing.

mod candle_peer;
mod ort_peer;
mod rten_peer;
mod shapes;

use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

/// A prepared call of one peer on one row's inputs.
pub trait Runner {
    /// One call of the operator (its output is kept for [`Runner::output`]).
    fn call(&mut self) -> Result<(), String>;
    /// The last call's output, row-major f32.
    fn output(&mut self) -> Result<Vec<f32>, String>;
}

/// What a load produced: the runner and a word on how it runs.
pub struct Loaded {
    runner: Box<dyn Runner>,
    variant: String,
    detail: String,
    fallbacks: Vec<String>,
}

/// Why a load failed.
pub enum LoadError {
    /// The peer has no such operator (a `—` in the table, not a failure).
    Unsupported(String),
    /// It should have worked and did not.
    Failed(String),
}

/// One peer library.
pub trait Peer {
    /// Name of the column.
    fn name(&self) -> &'static str;
    /// Library version.
    fn version(&self) -> String;
    /// Threads and settings, for the footnote.
    fn detail(&self) -> String;
    /// Prepares `op` on `dims` with these inputs (in taskgrain's order);
    /// `variant` picks a model variant where the peer has several.
    fn load(
        &mut self,
        op: &str,
        dims: &[usize],
        inputs: Vec<Vec<f32>>,
        variant: Option<&str>,
    ) -> Result<Loaded, LoadError>;
}

#[derive(Deserialize)]
struct Request {
    cmd: String,
    #[serde(default)]
    peer: Option<String>,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    dims: Vec<usize>,
    #[serde(default)]
    inputs: Vec<PathBuf>,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    warmup: usize,
    #[serde(default)]
    reps: Option<usize>,
    #[serde(default)]
    output: Option<PathBuf>,
}

struct Args {
    threads: usize,
    models: Option<PathBuf>,
    ort_lib: Option<PathBuf>,
    only: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        threads: 1,
        models: None,
        ort_lib: None,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{k} needs a value"));
        match k.as_str() {
            "--threads" => {
                a.threads = val()?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))
                    .and_then(|n: usize| {
                        if n == 0 {
                            Err("--threads must be at least 1".to_string())
                        } else {
                            Ok(n)
                        }
                    })?
            }
            "--models" => a.models = Some(PathBuf::from(val()?)),
            "--ort-lib" => a.ort_lib = Some(PathBuf::from(val()?)),
            "--only" => a.only = val()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--help" | "-h" => {
                println!(
                    "taskgrain-peers --threads N [--models DIR] [--ort-lib PATH] [--only onnxruntime,candle,rten]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

struct Slot {
    peer: Option<Box<dyn Peer>>,
    name: &'static str,
    unavailable: Option<String>,
    loaded: Option<Loaded>,
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("taskgrain-peers: {e}");
            std::process::exit(2);
        }
    };
    // candle's CPU kernels and gemm run on rayon's global pool.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global();

    let mut slots: Vec<Slot> = Vec::new();
    let only = args.only.clone();
    let want = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut add = |name: &'static str, p: &dyn Fn() -> Result<Box<dyn Peer>, String>| match p() {
        Ok(p) => slots.push(Slot {
            peer: Some(p),
            name,
            unavailable: None,
            loaded: None,
        }),
        Err(e) => slots.push(Slot {
            peer: None,
            name,
            unavailable: Some(e),
            loaded: None,
        }),
    };
    if want("onnxruntime") {
        add("onnxruntime", &|| {
            ort_peer::OrtPeer::new(
                args.threads,
                args.models.as_deref(),
                args.ort_lib.as_deref(),
            )
            .map(|p| Box::new(p) as Box<dyn Peer>)
        });
    }
    if want("candle") {
        add("candle", &|| {
            Ok(Box::new(candle_peer::CandlePeer::new(args.threads)) as Box<dyn Peer>)
        });
    }
    if want("rten") {
        add("rten", &|| {
            rten_peer::RtenPeer::new(args.threads, args.models.as_deref())
                .map(|p| Box::new(p) as Box<dyn Peer>)
        });
    }

    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let resp = match serde_json::from_str::<Request>(&line) {
            Err(e) => json!({"ok": false, "error": format!("bad request: {e}")}),
            Ok(req) if req.cmd == "quit" => break,
            Ok(req) => handle(&mut slots, req, args.threads),
        };
        if writeln!(out, "{resp}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
}

fn handle(slots: &mut [Slot], req: Request, threads: usize) -> Value {
    if req.cmd == "hello" {
        let peers: Vec<Value> = slots
            .iter()
            .map(|s| match &s.peer {
                Some(p) => json!({"name": s.name, "available": true,
                                  "version": p.version(), "detail": p.detail()}),
                None => json!({"name": s.name, "available": false,
                               "reason": s.unavailable.clone().unwrap_or_default()}),
            })
            .collect();
        return json!({"ok": true, "host": "rust", "threads": threads, "peers": peers});
    }
    let Some(name) = req.peer.as_deref() else {
        return json!({"ok": false, "error": "request names no peer"});
    };
    let Some(slot) = slots.iter_mut().find(|s| s.name == name) else {
        return json!({"ok": false, "error": format!("unknown peer {name:?}")});
    };
    let Some(peer) = slot.peer.as_mut() else {
        return json!({"ok": false, "error": format!("{name} unavailable: {}",
                       slot.unavailable.clone().unwrap_or_default())});
    };
    match req.cmd.as_str() {
        "load" => {
            slot.loaded = None;
            let Some(op) = req.op.as_deref() else {
                return json!({"ok": false, "error": "load names no op"});
            };
            let inputs = match shapes::read_inputs(op, &req.dims, &req.inputs) {
                Ok(v) => v,
                Err(e) => return json!({"ok": false, "error": e}),
            };
            match peer.load(op, &req.dims, inputs, req.variant.as_deref()) {
                Ok(l) => {
                    let r = json!({"ok": true, "variant": l.variant, "detail": l.detail,
                                   "fallbacks": l.fallbacks});
                    slot.loaded = Some(l);
                    r
                }
                Err(LoadError::Unsupported(e)) => {
                    json!({"ok": false, "unsupported": true, "error": e})
                }
                Err(LoadError::Failed(e)) => json!({"ok": false, "error": e}),
            }
        }
        "run" => {
            let Some(l) = slot.loaded.as_mut() else {
                return json!({"ok": false, "error": format!("{name}: nothing loaded")});
            };
            let r = l.runner.as_mut();
            let times = match time_calls(r, req.warmup, req.reps.unwrap_or(1).max(1)) {
                Ok(t) => t,
                Err(e) => return json!({"ok": false, "error": e}),
            };
            let mut resp = json!({"ok": true, "times_us": times});
            if let Some(path) = &req.output {
                match r
                    .output()
                    .and_then(|y| shapes::write_f32(path, &y).map(|_| y.len()))
                {
                    Ok(n) => resp["out_len"] = json!(n),
                    Err(e) => return json!({"ok": false, "error": e}),
                }
            }
            resp
        }
        "floor" => {
            let one = vec![vec![1.0f32], vec![1.0f32]];
            match peer.load("floor", &[1], one, None) {
                Ok(mut l) => {
                    match time_calls(l.runner.as_mut(), req.warmup, req.reps.unwrap_or(100)) {
                        Ok(t) => json!({"ok": true, "times_us": t}),
                        Err(e) => json!({"ok": false, "error": e}),
                    }
                }
                Err(LoadError::Unsupported(e) | LoadError::Failed(e)) => {
                    json!({"ok": false, "error": e})
                }
            }
        }
        other => json!({"ok": false, "error": format!("unknown command {other:?}")}),
    }
}

fn time_calls(r: &mut dyn Runner, warmup: usize, reps: usize) -> Result<Vec<f64>, String> {
    for _ in 0..warmup {
        r.call()?;
    }
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        r.call()?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(v)
}
