//! rten: loads the same ONNX graphs as the ONNX Runtime peer (rten reads ONNX
//! directly) and runs them on its own rayon pool of N threads. An operator rten
//! does not implement shows as unsupported, with rten's own message.

use crate::shapes;
use crate::{LoadError, Loaded, Peer, Runner};
use rten::{Model, NodeId, RunOptions, ThreadPool, Value};
use rten_tensor::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The rten peer.
pub struct RtenPeer {
    threads: usize,
    models: PathBuf,
    manifest: crate::ort_peer::Manifest,
    pool: Arc<ThreadPool>,
}

impl RtenPeer {
    /// rten on `threads` threads, with the graphs in `models`.
    pub fn new(threads: usize, models: Option<&Path>) -> Result<Self, String> {
        let models = models
            .ok_or("no --models directory (run bench/peers/setup.sh)")?
            .to_path_buf();
        let manifest = crate::ort_peer::Manifest::read(&models)?;
        Ok(RtenPeer {
            threads,
            models,
            manifest,
            pool: Arc::new(ThreadPool::with_num_threads(threads)),
        })
    }
}

struct RtenRunner {
    model: Model,
    inputs: Vec<(NodeId, Value)>,
    output: NodeId,
    opts: RunOptions,
    out: Option<Value>,
}

impl Runner for RtenRunner {
    fn call(&mut self) -> Result<(), String> {
        let inputs = self.inputs.iter().map(|(id, v)| (*id, v.into())).collect();
        let mut outs = self
            .model
            .run(inputs, &[self.output], Some(self.opts.clone()))
            .map_err(|e| e.to_string())?;
        self.out = outs.pop();
        Ok(())
    }

    fn output(&mut self) -> Result<Vec<f32>, String> {
        let v = self.out.take().ok_or("no call yet")?;
        let t = v.into_tensor::<f32>().ok_or("output is not f32")?;
        Ok(t.to_vec())
    }
}

impl RtenPeer {
    fn try_variant(
        &self,
        file: &str,
        op: &str,
        dims: &[usize],
        inputs: &[Vec<f32>],
    ) -> Result<RtenRunner, String> {
        let model = Model::load_file(self.models.join(file)).map_err(|e| e.to_string())?;
        let shapes = crate::ort_peer::feed_shapes(op, dims)?;
        let ids = model.input_ids().to_vec();
        if ids.len() != inputs.len() {
            return Err(format!(
                "{file}: {} inputs, expected {}",
                ids.len(),
                inputs.len()
            ));
        }
        let values = ids
            .iter()
            .zip(inputs)
            .zip(&shapes)
            .map(|((&id, v), s)| {
                let t = rten_tensor::Tensor::from_data(s.as_slice(), v.clone());
                (id, Value::from(t))
            })
            .collect();
        let output = *model.output_ids().first().ok_or("model has no output")?;
        let mut opts = RunOptions::default();
        opts.thread_pool = Some(self.pool.clone());
        let mut r = RtenRunner {
            model,
            inputs: values,
            output,
            opts,
            out: None,
        };
        r.call()?;
        let want: usize = shapes::output_shape(op, dims)?.iter().product();
        let got = r.output()?.len();
        if got != want {
            return Err(format!(
                "{file}: output has {got} elements, expected {want}"
            ));
        }
        Ok(r)
    }
}

impl Peer for RtenPeer {
    fn name(&self) -> &'static str {
        "rten"
    }

    fn version(&self) -> String {
        "0.27.0".into()
    }

    fn detail(&self) -> String {
        format!(
            "ONNX graphs from {}; rten thread pool = {}",
            self.models.display(),
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
        let mut fallbacks = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            match self.try_variant(&e.file, op, dims, &inputs) {
                Ok(r) => {
                    return Ok(Loaded {
                        runner: Box::new(r),
                        variant: e.variant.clone(),
                        detail: e.nodes.clone(),
                        fallbacks: entries[i + 1..].iter().map(|e| e.variant.clone()).collect(),
                    });
                }
                Err(err) => fallbacks.push(format!("{}: {}", e.variant, first_line(&err))),
            }
        }
        Err(LoadError::Unsupported(format!(
            "rten could not run any graph of {op} ({})",
            fallbacks.join("; ")
        )))
    }
}

/// The first line of an error, at most 200 characters.
pub fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(200).collect()
}
