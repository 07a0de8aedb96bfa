//! ONNX Runtime through its C API (the `ort` crate with `load-dynamic`): the
//! shared library is the one that ships inside the `onnxruntime` wheel, loaded at
//! start. One session per row with intra-op threads = N, inputs and the output
//! bound once (IoBinding), so a call is exactly one `Run` of the graph.

use crate::rten_peer::first_line;
use crate::shapes;
use crate::{LoadError, Loaded, Peer, Runner};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use std::path::{Path, PathBuf};

/// One graph of `manifest.json`.
#[derive(Clone, Debug)]
pub struct Entry {
    /// File name in the models directory.
    pub file: String,
    /// Variant name (`rms23`, `basic`, …).
    pub variant: String,
    /// What the graph is made of.
    pub nodes: String,
}

/// `manifest.json` of the models directory (written by make_models.py).
pub struct Manifest {
    ops: Vec<(String, Vec<Entry>)>,
}

impl Manifest {
    /// Reads `dir/manifest.json`.
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e} (run bench/peers/setup.sh)", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let ops = v["ops"]
            .as_object()
            .ok_or_else(|| format!("{}: no \"ops\" object", path.display()))?
            .iter()
            .map(|(op, list)| {
                let entries = list
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|e| Entry {
                                file: e["file"].as_str().unwrap_or_default().into(),
                                variant: e["variant"].as_str().unwrap_or_default().into(),
                                nodes: e["nodes"].as_str().unwrap_or_default().into(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (op.clone(), entries)
            })
            .collect();
        Ok(Manifest { ops })
    }

    /// The variants of `op` to try, in order; only `variant` and those after it
    /// when one is named.
    pub fn variants(&self, op: &str, variant: Option<&str>) -> Result<Vec<Entry>, LoadError> {
        let list = self
            .ops
            .iter()
            .find(|(o, _)| o == op)
            .map(|(_, l)| l.clone())
            .ok_or_else(|| LoadError::Unsupported(format!("no ONNX graph for {op}")))?;
        match variant {
            None => Ok(list),
            Some(v) => {
                let i = list
                    .iter()
                    .position(|e| e.variant == v)
                    .ok_or_else(|| LoadError::Failed(format!("{op} has no graph variant {v:?}")))?;
                Ok(list[i..].to_vec())
            }
        }
    }
}

/// The shapes the graphs' inputs take: taskgrain's, except rope's tensors, which
/// get a leading batch of 1 (`[1, R, C]`, `[1, R, C/2]`) as RotaryEmbedding wants.
pub fn feed_shapes(op: &str, dims: &[usize]) -> Result<Vec<Vec<usize>>, String> {
    let mut s = shapes::input_shapes(op, dims)?;
    if op == "rope" {
        for t in &mut s {
            t.insert(0, 1);
        }
    }
    Ok(s)
}

/// The ONNX Runtime peer.
pub struct OrtPeer {
    threads: usize,
    models: PathBuf,
    manifest: Manifest,
    lib: PathBuf,
    env: ort::environment::Environment,
}

impl OrtPeer {
    /// Loads the library at `lib` (or `ORT_DYLIB_PATH`) and reads the graphs.
    pub fn new(threads: usize, models: Option<&Path>, lib: Option<&Path>) -> Result<Self, String> {
        let models = models
            .ok_or("no --models directory (run bench/peers/setup.sh)")?
            .to_path_buf();
        let manifest = Manifest::read(&models)?;
        let lib = match lib {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .ok_or("no --ort-lib and no ORT_DYLIB_PATH (run bench/peers/setup.sh)")?,
        };
        if !lib.is_file() {
            return Err(format!(
                "{}: no such file (run bench/peers/setup.sh)",
                lib.display()
            ));
        }
        let env = ort::init_from(&lib)
            .map_err(|e| format!("loading {}: {e}", lib.display()))?
            .with_name("taskgrain-peers")
            .build()
            .map_err(|e| format!("onnxruntime environment: {e}"))?;
        Ok(OrtPeer {
            threads,
            models,
            manifest,
            lib,
            env,
        })
    }

    fn try_variant(
        &self,
        file: &str,
        op: &str,
        dims: &[usize],
        inputs: &[Vec<f32>],
    ) -> Result<OrtRunner, String> {
        let e = |x: ort::Error| first_line(&x.to_string());
        let eb = |x: ort::Error<ort::session::builder::SessionBuilder>| first_line(&x.to_string());
        let session = Session::builder(&self.env)
            .map_err(e)?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(eb)?
            .with_intra_threads(self.threads)
            .map_err(eb)?
            .with_inter_threads(1)
            .map_err(eb)?
            .commit_from_file(self.models.join(file))
            .map_err(e)?;
        let shapes = feed_shapes(op, dims)?;
        let names: Vec<String> = session
            .inputs()
            .iter()
            .map(|i| i.name().to_string())
            .collect();
        if names.len() != inputs.len() {
            return Err(format!(
                "{file}: {} inputs, expected {}",
                names.len(),
                inputs.len()
            ));
        }
        let out_name = session
            .outputs()
            .first()
            .ok_or("model has no output")?
            .name()
            .to_string();
        let mut out_shape = shapes::output_shape(op, dims)?;
        if op == "rope" {
            out_shape.insert(0, 1);
        }
        let mut binding = session.create_binding().map_err(e)?;
        for ((name, v), s) in names.iter().zip(inputs).zip(&shapes) {
            let t = Tensor::from_array((s.clone(), v.clone())).map_err(e)?;
            binding.bind_input(name.as_str(), &t).map_err(e)?;
        }
        let out = Tensor::<f32>::new(session.allocator(), out_shape.clone()).map_err(e)?;
        binding.bind_output(out_name.as_str(), out).map_err(e)?;
        let mut r = OrtRunner {
            session,
            binding,
            out_name,
        };
        r.call()?;
        let want: usize = out_shape.iter().product();
        let got = r.output()?.len();
        if got != want {
            return Err(format!(
                "{file}: output has {got} elements, expected {want}"
            ));
        }
        Ok(r)
    }
}

struct OrtRunner {
    session: Session,
    binding: ort::session::IoBinding,
    out_name: String,
}

impl Runner for OrtRunner {
    fn call(&mut self) -> Result<(), String> {
        self.session
            .run_binding(&self.binding)
            .map(drop)
            .map_err(|e| first_line(&e.to_string()))
    }

    fn output(&mut self) -> Result<Vec<f32>, String> {
        let outs = self
            .session
            .run_binding(&self.binding)
            .map_err(|e| first_line(&e.to_string()))?;
        let v = outs
            .get(&self.out_name)
            .ok_or("output missing")?
            .try_extract_tensor::<f32>()
            .map_err(|e| first_line(&e.to_string()))?
            .1
            .to_vec();
        Ok(v)
    }
}

impl Peer for OrtPeer {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn version(&self) -> String {
        self.lib
            .file_name()
            .map(|f| {
                f.to_string_lossy()
                    .trim_start_matches("libonnxruntime.so.")
                    .to_string()
            })
            .unwrap_or_default()
    }

    fn detail(&self) -> String {
        format!(
            "C API via ort (load-dynamic) from {}; intra-op threads = {}, inter-op 1, graph optimization all, IoBinding",
            self.lib.display(),
            self.threads
        )
    }

    fn load(
        &mut self,
        op: &str,
        dims: &[usize],
        inputs: Vec<Vec<f32>>,
        variant: Option<&str>,
    ) -> Result<Loaded, LoadError> {
        let entries = self.manifest.variants(op, variant)?;
        let mut failed = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            match self.try_variant(&e.file, op, dims, &inputs) {
                Ok(r) => {
                    let mut detail = e.nodes.clone();
                    if !failed.is_empty() {
                        detail = format!("{detail} (failed: {})", failed.join("; "));
                    }
                    return Ok(Loaded {
                        runner: Box::new(r),
                        variant: e.variant.clone(),
                        detail,
                        fallbacks: entries[i + 1..].iter().map(|e| e.variant.clone()).collect(),
                    });
                }
                Err(err) => failed.push(format!("{}: {err}", e.variant)),
            }
        }
        Err(LoadError::Failed(format!(
            "onnxruntime could not run any graph of {op} ({})",
            failed.join("; ")
        )))
    }
}
