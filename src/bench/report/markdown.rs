//! The report as Markdown, shaped like the seed.

use super::lang::{Lang, UNSUPPORTED};
use super::model::{Report, RowResult, SectionResult};
use std::fmt::Write;

/// Renders the whole report.
pub fn render(r: &Report, lang: Lang) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}\n", lang.title());
    let _ = writeln!(s, "{}\n", lang.settings(&r.meta));
    let _ = writeln!(
        s,
        "{}{}{}\n",
        lang.machine(&r.meta),
        lang.pinning(&r.meta),
        lang.load(&r.meta)
    );
    for sec in &r.sections {
        render_section(&mut s, sec, lang);
    }
    s
}

/// A time or ratio cell: three decimals, `—` when absent.
pub fn cell(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.3}"),
        Some(_) => "NaN".into(),
        None => UNSUPPORTED.into(),
    }
}

/// The range cell, `min–max`.
pub fn range_cell(r: &RowResult) -> String {
    match (r.ratio.min, r.ratio.max) {
        (Some(a), Some(b)) => format!("{a:.3}–{b:.3}"),
        _ => UNSUPPORTED.into(),
    }
}

fn render_section(s: &mut String, sec: &SectionResult, lang: Lang) {
    let _ = writeln!(s, "## {}\n", sec.name);
    let _ = writeln!(s, "{}\n", lang.caption(sec));
    let _ = writeln!(s, "{}\n", lang.ratio_definition(sec));
    let mut head = format!("| {} |", lang.col_case());
    let mut rule = String::from("|---|");
    for c in &sec.candidates {
        let _ = write!(head, " {c} |");
        rule.push_str("---:|");
    }
    let _ = write!(head, " {} | {} |", lang.col_ratio(), lang.col_range());
    rule.push_str("---:|---:|");
    let _ = writeln!(s, "{head}\n{rule}");
    for r in &sec.rows {
        let mut line = format!("| {}", r.label());
        if !r.passed() {
            line.push_str(lang.failed_mark());
        }
        line.push_str(" |");
        for c in &sec.candidates {
            let _ = write!(line, " {} |", cell(r.times_us.get(c).copied().flatten()));
        }
        let _ = write!(line, " {} | {} |", cell(r.ratio.median), range_cell(r));
        let _ = writeln!(s, "{line}");
    }
    s.push('\n');
    if let Some(q) = &sec.prediction {
        let _ = writeln!(s, "{}\n", lang.prediction_line(q));
    }
    if sec.requires_identical {
        let mut variants: Vec<String> = Vec::new();
        for r in &sec.rows {
            for (_, v) in r.variants.iter() {
                if let Some(v) = v
                    && !variants.contains(v)
                {
                    variants.push(v.clone());
                }
            }
        }
        if !variants.is_empty() {
            let _ = writeln!(s, "{}\n", lang.variants_line(&variants));
        }
    }
    let failed: Vec<&RowResult> = sec.rows.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "**{}**\n", lang.failures_heading());
        for r in failed {
            for p in &r.problems {
                let _ = writeln!(s, "- {}: {p}", r.label());
            }
        }
        s.push('\n');
    }
}
