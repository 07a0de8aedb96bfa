//! The report's data model: what every writer (Markdown, JSON, CSV, SVG) renders.
//!
//! Field names are the JSON contract of issue 6; do not rename them.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

/// A map keyed by candidate name that keeps the candidates' column order when
/// serialized (a JSON object whose keys come in table order).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedMap<V>(pub Vec<(String, V)>);

impl<V> NamedMap<V> {
    /// The value for candidate `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Entries in column order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for NamedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The settings every section ran with.
    pub meta: Meta,
    /// One entry per section, in report order.
    pub sections: Vec<SectionResult>,
}

impl Report {
    /// `true` when every row passed its reference check and every identity
    /// requirement held (the CLI exits 1 otherwise).
    pub fn passed(&self) -> bool {
        self.sections
            .iter()
            .flat_map(|s| &s.rows)
            .all(RowResult::passed)
    }

    /// The section called `name`.
    pub fn section(&self, name: &str) -> Option<&SectionResult> {
        self.sections.iter().find(|s| s.name == name)
    }
}

/// Settings of the run and the machine it ran on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Meta {
    /// Element type of every tensor ("FP32").
    pub dtype: String,
    /// Packet width in f32 lanes.
    pub width: usize,
    /// The packet backend, e.g. `avx2-w8`.
    pub backend: String,
    /// Workers requested (the calling thread included).
    pub workers_requested: usize,
    /// Workers the pool granted.
    pub workers_granted: usize,
    /// Cores available to the process.
    pub cores: usize,
    /// Full-packet specialization on.
    pub full_packet: bool,
    /// Fusion on.
    pub fusion: bool,
    /// Rounds per row.
    pub rounds: usize,
    /// Timed samples per candidate per round (a row's `calls_per_sample`
    /// calls each).
    pub reps: usize,
    /// Untimed calls per candidate before the first round.
    pub warmup: usize,
    /// Seed of the generated inputs.
    pub seed: u64,
    /// CPU model.
    pub cpu: String,
    /// SIMD features the CPU reports.
    pub isa: Vec<String>,
    /// 1-minute load average when the run started (other work on the machine).
    pub load_start: Option<f64>,
    /// 1-minute load average when the run ended.
    pub load_end: Option<f64>,
    /// The CPU the calling thread was pinned to while measuring (`null`: not pinned).
    pub caller_cpu: Option<usize>,
    /// taskgrain version.
    pub version: String,
}

/// Numerator and denominator candidates of a section's paired ratio.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RatioSpec {
    /// Numerator candidate.
    pub num: String,
    /// Denominator candidate.
    pub den: String,
}

/// One section (one table).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SectionResult {
    /// `pilot`, `validation`, `fixed-grain`, …
    pub name: String,
    /// Candidate names in column order.
    pub candidates: Vec<String>,
    /// The paired ratio.
    pub ratio: RatioSpec,
    /// Whether every candidate of a row must run the same kernel variant and
    /// produce byte-identical output (fixed-grain).
    pub requires_identical: bool,
    /// Fixed geometry of the section (fixed-grain), if any.
    pub fixed: Option<FixedGeometry>,
    /// How well the cost model predicted the measured times of this section's
    /// planner candidates (`null` for sections without planner candidates).
    pub prediction: Option<PredictionQuality>,
    /// One entry per op/shape.
    pub rows: Vec<RowResult>,
}

/// Median and min–max of a row's per-round paired ratios; `None` when the
/// numerator or the denominator is unsupported on that row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RatioSummary {
    /// Median over rounds.
    pub median: Option<f64>,
    /// Smallest round ratio.
    pub min: Option<f64>,
    /// Largest round ratio.
    pub max: Option<f64>,
}

/// A geometry every candidate of a section shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FixedGeometry {
    /// Work-items per group.
    pub local: usize,
    /// Rows per group.
    pub block: usize,
}

/// The launch a candidate ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CandidateConfig {
    /// Work-items per group.
    pub local: usize,
    /// Rows per group.
    pub block: usize,
    /// Grain code (0 legacy, k tasks of k groups, 4294967295 caller).
    pub grain: u32,
}

/// One op/shape row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowResult {
    /// Operator name.
    pub op: String,
    /// Shape dimensions (`[R, C]`, or `[B, Hq, Hkv, Sq, Skv, Dk, Dv]`).
    pub shape: Vec<usize>,
    /// Median over rounds of the round p50, µs; `null` = unsupported.
    pub times_us: NamedMap<Option<f64>>,
    /// The paired ratio's median and range.
    pub ratio: RatioSummary,
    /// The paired ratio of every round, in round order.
    pub round_ratios: Vec<f64>,
    /// Every round's p50 per candidate, µs, in round order.
    pub round_p50_us: NamedMap<Option<Vec<f64>>>,
    /// The launch each candidate ran (the last one, which writes the output,
    /// when fusion is off and the operator is several); `null` = unsupported.
    pub configs: NamedMap<Option<CandidateConfig>>,
    /// Launches per call (1 with fusion on; DESIGN.md's unfused counts with it off).
    pub launches: usize,
    /// Back-to-back calls per timed sample, the same for every candidate of
    /// the row: 1, or for a row whose fastest candidate runs under 5 µs,
    /// enough calls to last 5 µs.
    pub calls_per_sample: usize,
    /// Samples a candidate takes in one turn of a round before the next
    /// candidate's turn: 10, or as many as last about 1 ms where samples are
    /// longer (at least 1).
    pub samples_per_turn: usize,
    /// Every launch each candidate ran, in order (only when there are several).
    #[serde(skip_serializing_if = "NamedMap::is_empty")]
    pub launch_configs: NamedMap<Option<Vec<CandidateConfig>>>,
    /// Every strategy's plan for this op/shape (whole, local, joint_legacy,
    /// joint_tasks, auto, oracle) as the planner stood at the end of the run;
    /// `null` = not applicable (local for attention) or never searched (oracle).
    pub plans: NamedMap<Option<PlanInfo>>,
    /// The compiled kernel variant each candidate ran.
    pub variants: NamedMap<Option<String>>,
    /// FNV-1a hash of each candidate's output bytes.
    pub output_hashes: NamedMap<Option<String>>,
    /// All candidates produced byte-identical output (sections that require it).
    pub outputs_identical: Option<bool>,
    /// All candidates ran the same kernel variant (sections that require it).
    pub kernel_identical: Option<bool>,
    /// Largest |y − ref| over every candidate's output.
    pub max_abs_err: f64,
    /// Every candidate's output is within tolerance of the f64 reference and
    /// repeated calls reproduced it bit for bit.
    pub ok: bool,
    /// What went wrong, in words (empty when the row passed).
    pub problems: Vec<String>,
}

impl RowResult {
    /// `ok` and no identity requirement failed.
    pub fn passed(&self) -> bool {
        self.ok && self.outputs_identical != Some(false) && self.kernel_identical != Some(false)
    }

    /// `op R×C` as the tables print it.
    pub fn label(&self) -> String {
        format!("{} {}", self.op, shape_label(&self.shape))
    }
}

/// Dimensions joined with `×`, as in the seed.
pub fn shape_label(dims: &[usize]) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("×")
}

/// A strategy's plan: geometry, grain, the model's prediction and its source.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PlanInfo {
    /// Work-items per group.
    pub local: usize,
    /// Rows per group.
    pub block: usize,
    /// Grain code (0 legacy, k tasks of k groups, 4294967295 caller).
    pub grain: u32,
    /// The cost model's prediction for this launch, µs.
    pub predicted_us: f64,
    /// `model`, `refined` or `tuned`.
    pub source: &'static str,
}

impl From<crate::plan::Plan> for PlanInfo {
    fn from(p: crate::plan::Plan) -> Self {
        PlanInfo {
            local: p.config.local,
            block: p.config.block,
            grain: p.grain.as_u32(),
            predicted_us: p.predicted_us,
            source: p.source.name(),
        }
    }
}

/// Median |predicted − measured| / measured over a section's (row, candidate)
/// pairs whose candidate is a planner strategy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictionQuality {
    /// Median relative error over every pair.
    pub median_rel_err: f64,
    /// Pairs counted.
    pub pairs: usize,
    /// Median relative error per candidate.
    pub per_candidate: NamedMap<Option<f64>>,
}

impl PredictionQuality {
    /// The prediction quality of `sec` (`None` without planner candidates).
    pub fn of(sec: &SectionResult) -> Option<PredictionQuality> {
        if sec.fixed.is_some() {
            return None;
        }
        let mut all = Vec::new();
        let mut per = Vec::new();
        for c in &sec.candidates {
            let mut errs = Vec::new();
            for r in &sec.rows {
                let (Some(Some(t)), Some(Some(p))) = (r.times_us.get(c), r.plans.get(c)) else {
                    continue;
                };
                let cfg = r.configs.get(c).copied().flatten();
                // The plan must be the launch that was timed.
                if cfg
                    .is_some_and(|k| k.local == p.local && k.block == p.block && k.grain == p.grain)
                    && *t > 0.0
                {
                    errs.push((p.predicted_us - t).abs() / t);
                }
            }
            all.extend_from_slice(&errs);
            per.push((
                c.clone(),
                (!errs.is_empty()).then(|| crate::bench::timing::median(&errs)),
            ));
        }
        (!all.is_empty()).then(|| PredictionQuality {
            median_rel_err: crate::bench::timing::median(&all),
            pairs: all.len(),
            per_candidate: NamedMap(per),
        })
    }
}
