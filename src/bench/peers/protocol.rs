//! The peer protocol: one child process (a *host*) serves one or more peers and
//! speaks JSON lines on stdin/stdout — one request line, one response line.
//!
//! | request | response |
//! |---|---|
//! | `{"cmd":"hello"}` | `{"ok":true,"host":"rust","threads":N,"peers":[{"name":"onnxruntime","available":true,"version":"…","detail":"…"}, {"name":"rten","available":false,"reason":"…"}]}` |
//! | `{"cmd":"load","peer":P,"op":"rmsnorm","dims":[R,C],"inputs":["/tmp/…/in0.f32",…],"variant":V?}` | `{"ok":true,"variant":"rms23","detail":"…","fallbacks":["basic"]}`, or `{"ok":false,"unsupported":true,"error":"…"}` |
//! | `{"cmd":"run","peer":P,"warmup":W,"reps":K,"output":"/tmp/…/out.f32"?}` | `{"ok":true,"times_us":[…K values…],"out_len":n}` |
//! | `{"cmd":"floor","peer":P,"warmup":W,"reps":K}` | `{"ok":true,"times_us":[…]}` (a 1-element add) |
//! | `{"cmd":"quit"}` | the host exits |
//!
//! Inputs are raw little-endian f32 files in taskgrain's layouts (written once per
//! row by the driver); the output of the last call goes to `output` the same way.
//! Every call is timed inside the host, around the call alone: process start-up
//! and the pipe are never in a timing. Any response may be `{"ok":false,"error":…}`.
//!
//! A request that gets no answer before its deadline kills the host; so does a
//! host that closes its stdout (crashes). [`Host`] always kills and reaps its
//! child when dropped.

use serde_json::Value;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to start a host process.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpec {
    /// Short name for messages (`rust`, `python`).
    pub label: String,
    /// The program.
    pub program: PathBuf,
    /// Its arguments (the driver appends `--threads N`).
    pub args: Vec<String>,
    /// Extra environment (`{threads}` in a value is replaced by N).
    pub env: Vec<(String, String)>,
    /// Environment variables removed for this host.
    pub env_remove: Vec<String>,
    /// The peers this host is expected to serve, in column order.
    pub peers: Vec<String>,
    /// Why the host cannot run at all (its peers become `—` with this reason).
    pub missing: Option<String>,
}

/// What went wrong talking to a host.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PeerError {
    /// The process could not be started.
    #[error("could not start {program}: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS's message.
        message: String,
    },
    /// No answer before the deadline; the host was killed.
    #[error("no answer within {secs:.1} s (killed)")]
    Timeout {
        /// The deadline that passed.
        secs: f64,
    },
    /// The host exited or closed its output.
    #[error("host exited ({status}){}", tail_suffix(.stderr))]
    Crashed {
        /// Its exit status, as text.
        status: String,
        /// The last lines it wrote to stderr.
        stderr: String,
    },
    /// It answered something that is not the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// It answered `ok: false`.
    #[error("{0}")]
    Refused(String),
    /// It has no such operator (`ok: false, unsupported: true`).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

fn tail_suffix(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

impl PeerError {
    /// `true` when the host is gone (or was killed) and must be restarted.
    pub fn host_lost(&self) -> bool {
        matches!(
            self,
            PeerError::Spawn { .. }
                | PeerError::Timeout { .. }
                | PeerError::Crashed { .. }
                | PeerError::Protocol(_)
        )
    }
}

/// A running host. Dropping it kills and reaps the child.
pub struct Host {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    dead: bool,
}

const STDERR_LINES: usize = 6;

impl Host {
    /// Starts `spec` for `threads` threads.
    pub fn start(spec: &HostSpec, threads: usize) -> Result<Host, PeerError> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .arg("--threads")
            .arg(threads.to_string());
        for k in &spec.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v.replace("{threads}", &threads.to_string()));
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| PeerError::Spawn {
            program: spec.program.display().to_string(),
            message: e.to_string(),
        })?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let t2 = Arc::clone(&tail);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut t) = t2.lock() {
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        });
        Ok(Host {
            label: spec.label.clone(),
            stdin: child.stdin.take(),
            child,
            lines: rx,
            stderr_tail: tail,
            dead: false,
        })
    }

    /// The host's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// `false` once the host crashed, timed out or spoke out of protocol.
    pub fn alive(&self) -> bool {
        !self.dead
    }

    /// Sends `req` and waits up to `timeout` for the answer; an `ok: false`
    /// answer is [`PeerError::Refused`] (or [`PeerError::Unsupported`]).
    pub fn request(&mut self, req: &Value, timeout: Duration) -> Result<Value, PeerError> {
        if self.dead {
            return Err(PeerError::Protocol("host is not running".into()));
        }
        let r = self.exchange(req, timeout);
        if let Err(e) = &r
            && e.host_lost()
        {
            self.kill();
        }
        r
    }

    fn exchange(&mut self, req: &Value, timeout: Duration) -> Result<Value, PeerError> {
        let line = format!("{req}\n");
        let sent = match self.stdin.as_mut() {
            Some(s) => s.write_all(line.as_bytes()).and_then(|_| s.flush()),
            None => Err(std::io::Error::other("stdin closed")),
        };
        if sent.is_err() {
            return Err(self.crashed());
        }
        let deadline = Instant::now() + timeout;
        let text = match self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(t) => t,
            Err(RecvTimeoutError::Timeout) => {
                return Err(PeerError::Timeout {
                    secs: timeout.as_secs_f64(),
                });
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.crashed()),
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            PeerError::Protocol(format!(
                "{}: not JSON ({e}): {:?}",
                self.label,
                text.chars().take(120).collect::<String>()
            ))
        })?;
        match v.get("ok").and_then(Value::as_bool) {
            Some(true) => Ok(v),
            Some(false) => {
                let msg = v
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given")
                    .to_string();
                if v.get("unsupported").and_then(Value::as_bool) == Some(true) {
                    Err(PeerError::Unsupported(msg))
                } else {
                    Err(PeerError::Refused(msg))
                }
            }
            None => Err(PeerError::Protocol(format!(
                "{}: answer without \"ok\": {:?}",
                self.label,
                text.chars().take(120).collect::<String>()
            ))),
        }
    }

    /// The exit status (waiting briefly for the process to finish) and stderr tail.
    fn crashed(&mut self) -> PeerError {
        let mut status: Option<ExitStatus> = None;
        for _ in 0..50 {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Give the stderr reader a moment to collect the last words.
        std::thread::sleep(Duration::from_millis(20));
        let stderr = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        PeerError::Crashed {
            status: status.map_or_else(
                || "still running, closed its output".into(),
                |s| s.to_string(),
            ),
            stderr: stderr.chars().take(400).collect(),
        }
    }

    /// Kills and reaps the child (idempotent).
    pub fn kill(&mut self) {
        self.dead = true;
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the host to quit, then kills whatever is left.
    pub fn shutdown(mut self) {
        if !self.dead
            && let Some(s) = self.stdin.as_mut()
        {
            let _ = s.write_all(b"{\"cmd\":\"quit\"}\n");
            let _ = s.flush();
            self.stdin = None;
            for _ in 0..50 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `times_us` array of a `run` or `floor` answer, checked.
pub fn times_of(v: &Value, expected: usize) -> Result<Vec<f64>, PeerError> {
    let t: Vec<f64> = v
        .get("times_us")
        .and_then(Value::as_array)
        .ok_or_else(|| PeerError::Protocol("answer has no times_us".into()))?
        .iter()
        .map(|x| x.as_f64().filter(|t| t.is_finite() && *t >= 0.0))
        .collect::<Option<_>>()
        .ok_or_else(|| PeerError::Protocol("times_us holds a non-time".into()))?;
    if t.len() != expected {
        return Err(PeerError::Protocol(format!(
            "{} times for {expected} calls",
            t.len()
        )));
    }
    Ok(t)
}
