//! The report's words in English and in the seed's Chinese.
//!
//! The Chinese strings reproduce the seed report (../shared/seed/) verbatim
//! where the seed has them: title, settings sentence, captions, column names.

use super::harness::{TURN_SAMPLES, TURN_US};
use super::model::{Meta, SectionResult};
use crate::bench::timing::SAMPLE_US;

/// Language of the report's captions and column names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lang {
    /// English (the default).
    #[default]
    En,
    /// Chinese, as in the seed.
    Zh,
}

impl std::str::FromStr for Lang {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Lang> {
        match s {
            "en" => Ok(Lang::En),
            "zh" => Ok(Lang::Zh),
            _ => Err(crate::Error::BadArgument(format!(
                "unknown language {s:?} (known: en, zh)"
            ))),
        }
    }
}

/// The mark of an unsupported candidate (never counted as a win).
pub const UNSUPPORTED: &str = "—";

impl Lang {
    /// The report's title.
    pub fn title(self) -> &'static str {
        match self {
            Lang::En => "Task-grain: complete results",
            Lang::Zh => "Task-grain 完整结果",
        }
    }

    /// The settings and method paragraph (the seed's first paragraph).
    pub fn settings(self, m: &Meta) -> String {
        match self {
            Lang::En => format!(
                "All runs are {}, W{}, {} requested CPU workers, full-packet specialization {}, \
                 fusion {}. Times are the median over rounds of each round's p50 (µs); the \
                 paired ratios are recomputed separately (round by round); sizes are never \
                 merged into one average speed-up.",
                m.dtype,
                m.width,
                m.workers_requested,
                on_off_en(m.full_packet),
                on_off_en(m.fusion)
            ),
            Lang::Zh => format!(
                "全部为 {}、W{}、{} 个请求的 CPU workers、full-packet 特化{}、fusion {}。\
                 时间为各轮 p50 的中位数（µs），配对比值单独复算；不把不同尺寸合并成一个平均加速比。",
                m.dtype,
                m.width,
                m.workers_requested,
                on_off_zh(m.full_packet),
                on_off_zh(m.fusion)
            ),
        }
    }

    /// What the seed leaves unsaid: workers granted, rounds × calls, CPU and ISA.
    pub fn machine(self, m: &Meta) -> String {
        let isa = if m.isa.is_empty() {
            "-".to_string()
        } else {
            m.isa.join(" ")
        };
        match self {
            Lang::En => format!(
                "Workers granted: {} of {} requested ({} cores). {} rounds × {} timed samples \
                 per candidate per row (a sample is one call, or, in a row whose calls are under \
                 {} µs, as many back-to-back calls as last {} µs; a time is per call), candidates \
                 interleaved in turns of up to {} samples (as many as last {} µs where samples are longer, \
                 one at least) with the order rotated every round, \
                 after {} warm-up calls each; the rows of all the sections are timed round by round \
                 (round 1 of every row, then round 2, …), so a row's rounds lie seconds apart. Backend {}; \
                 CPU: {}; ISA: {}.",
                m.workers_granted,
                m.workers_requested,
                m.cores,
                m.rounds,
                m.reps,
                SAMPLE_US,
                SAMPLE_US,
                TURN_SAMPLES,
                TURN_US,
                m.warmup,
                m.backend,
                m.cpu,
                isa
            ),
            Lang::Zh => format!(
                "实际获得 {} 个 workers（请求 {} 个，本机 {} 个核）。每行 {} 轮 × 每个候选每轮 {} 个计时样本\
                 （一个样本为一次调用；若该行的调用短于 {} µs，则为持续 {} µs 的连续多次调用；时间均按每次调用计），\
                 候选以每次最多 {} 个样本交替执行（样本较长时每次为持续 {} µs 的样本数，至少 1 个）、每轮轮换顺序，每轮计时前各预热 {} 次；所有部分的各行按轮次交替计时\
                 （先测所有行的第 1 轮，再测第 2 轮……），故同一行的各轮相隔数秒。后端 {}；CPU：{}；ISA：{}。",
                m.workers_granted,
                m.workers_requested,
                m.cores,
                m.rounds,
                m.reps,
                SAMPLE_US,
                SAMPLE_US,
                TURN_SAMPLES,
                TURN_US,
                m.warmup,
                m.backend,
                m.cpu,
                isa
            ),
        }
    }

    /// The load-average sentence (empty when unknown).
    pub fn load(self, m: &Meta) -> String {
        let (Some(a), Some(b)) = (m.load_start, m.load_end) else {
            return String::new();
        };
        match self {
            Lang::En => format!(
                " Load average (1 min): {a:.2} at the start, {b:.2} at the end \
                 (above 0 means other work shared the {} cores).",
                m.cores
            ),
            Lang::Zh => format!(
                "1 分钟平均负载：开始时 {a:.2}，结束时 {b:.2}（大于 0 表示有其他任务共用这 {} 个核）。",
                m.cores
            ),
        }
    }

    /// Where the calling thread ran.
    pub fn pinning(self, m: &Meta) -> String {
        match (self, m.caller_cpu) {
            (Lang::En, Some(c)) => format!(" The calling thread was pinned to CPU {c}."),
            (Lang::En, None) => " The calling thread was not pinned.".into(),
            (Lang::Zh, Some(c)) => format!("调用线程固定在 CPU {c} 上。"),
            (Lang::Zh, None) => "调用线程未固定 CPU。".into(),
        }
    }

    /// The caption under a section's heading.
    pub fn caption(self, s: &SectionResult) -> String {
        match (self, s.name.as_str(), s.fixed) {
            (Lang::En, _, Some(f)) => format!(
                "Fixed local = {}, block = {}; the last column's candidate runs the whole \
                 launch on the caller.{}",
                f.local,
                f.block,
                if identity_holds(s) {
                    " Code and output are byte-for-byte identical."
                } else {
                    ""
                }
            ),
            (Lang::Zh, _, Some(f)) => format!(
                "固定 local={}、block={}；最后一列候选将整个 launch 放在 caller 执行。{}",
                f.local,
                f.block,
                if identity_holds(s) {
                    "代码与输出逐字节相同。"
                } else {
                    ""
                }
            ),
            (Lang::En, "pilot" | "validation", None) => {
                "The candidate strategies are described in notes.md (DESIGN.md, \"Candidate \
                 strategies\"). Attention does not support the `local` candidate: it is marked \
                 —, and an unimplemented path is never counted as a win."
                    .into()
            }
            (Lang::Zh, "pilot" | "validation", None) => {
                "候选策略见 notes.md；attention 不支持 local 候选，用 — 明确标出，未把未实现的路径计作胜利。"
                    .into()
            }
            (Lang::En, _, None) => format!(
                "Candidates: {}. An unsupported candidate is marked — and never counted as a win.",
                s.candidates.join(", ")
            ),
            (Lang::Zh, _, None) => format!(
                "候选：{}。不支持的候选用 — 标出，不计作胜利。",
                s.candidates.join("、")
            ),
        }
    }

    /// The cost model's prediction quality over a section.
    pub fn prediction_line(self, q: &super::model::PredictionQuality) -> String {
        let per: Vec<String> = q
            .per_candidate
            .iter()
            .filter_map(|(c, v)| v.map(|v| format!("{c} {:.0}%", 100.0 * v)))
            .collect();
        match self {
            Lang::En => format!(
                "Prediction quality: median |predicted − measured| / measured = {:.1}% over {} \
                 candidate × row pairs (target ≤ 25%); per candidate: {}.",
                100.0 * q.median_rel_err,
                q.pairs,
                per.join(", ")
            ),
            Lang::Zh => format!(
                "预测质量：|预测 − 实测| / 实测 的中位数 = {:.1}%，共 {} 个候选 × 行（目标 ≤ 25%）；各候选：{}。",
                100.0 * q.median_rel_err,
                q.pairs,
                per.join("、")
            ),
        }
    }

    /// The line defining the section's paired ratio.
    pub fn ratio_definition(self, s: &SectionResult) -> String {
        match self {
            Lang::En => format!(
                "Paired ratio = {} / {}, computed within each round; the table shows its median \
                 over rounds and, as the range, its min–max.",
                s.ratio.num, s.ratio.den
            ),
            Lang::Zh => format!(
                "配对比值 = {} / {}，每轮内分别计算；表中为各轮比值的中位数，配对范围为各轮最小–最大值。",
                s.ratio.num, s.ratio.den
            ),
        }
    }

    /// First column header.
    pub fn col_case(self) -> &'static str {
        match self {
            Lang::En => "op / size",
            Lang::Zh => "算子 / 尺寸",
        }
    }

    /// Paired-ratio column header.
    pub fn col_ratio(self) -> &'static str {
        match self {
            Lang::En => "paired ratio",
            Lang::Zh => "配对比值",
        }
    }

    /// Paired-range column header.
    pub fn col_range(self) -> &'static str {
        match self {
            Lang::En => "paired range",
            Lang::Zh => "配对范围",
        }
    }

    /// Marker appended to a row that failed a check.
    pub fn failed_mark(self) -> &'static str {
        match self {
            Lang::En => " (FAILED)",
            Lang::Zh => "（失败）",
        }
    }

    /// Heading of the list of failed checks.
    pub fn failures_heading(self) -> &'static str {
        match self {
            Lang::En => "Check failures (the run exits with status 1):",
            Lang::Zh => "校验失败（本次运行以状态 1 退出）：",
        }
    }

    /// Line listing the kernel variants a section's rows ran.
    pub fn variants_line(self, variants: &[String]) -> String {
        let list = variants
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            Lang::En => {
                format!("Kernel variants (one per row, shared by every candidate): {list}.")
            }
            Lang::Zh => format!("内核变体（每行一个，所有候选共用）：{list}。"),
        }
    }

    /// Axis caption of the plot.
    pub fn plot_axis(self, num: &str, den: &str) -> String {
        match self {
            Lang::En => format!(
                "paired ratio, log scale (< 1: {num} faster than {den}); dot = median, bar = min–max over rounds"
            ),
            Lang::Zh => format!(
                "配对比值，对数坐标（< 1 表示 {num} 比 {den} 快）；点 = 中位数，横条 = 各轮最小–最大"
            ),
        }
    }

    /// Shown in the plot for a row whose ratio is unavailable.
    pub fn plot_unsupported(self) -> &'static str {
        match self {
            Lang::En => "— (unsupported)",
            Lang::Zh => "—（不支持）",
        }
    }
}

fn on_off_en(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn on_off_zh(b: bool) -> &'static str {
    if b { "开启" } else { "关闭" }
}

/// Every row of a section that requires identity has it.
fn identity_holds(s: &SectionResult) -> bool {
    s.rows
        .iter()
        .all(|r| r.outputs_identical == Some(true) && r.kernel_identical == Some(true))
}
