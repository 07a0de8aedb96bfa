//! The paired ratios as an SVG chart: one panel per section, one line per row,
//! the median as a dot and the min–max over rounds as a bar, against a dashed
//! line at 1.0 on a log scale. Hand-written SVG, no dependencies.

use super::lang::Lang;
use super::model::{Report, SectionResult};
use std::fmt::Write;

const WIDTH: f64 = 1000.0;
const LABEL_RIGHT: f64 = 270.0;
const X0: f64 = 285.0;
const X1: f64 = 800.0;
const VALUE_X: f64 = 815.0;
const ROW_H: f64 = 20.0;
const TITLE_H: f64 = 44.0;
const AXIS_H: f64 = 40.0;
const GAP: f64 = 24.0;

const TICKS: [f64; 19] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0, 20.0, 50.0,
    100.0, 200.0,
];

/// Escapes text for an SVG text node or attribute.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders the chart.
pub fn render(r: &Report, lang: Lang) -> String {
    let height: f64 = 20.0
        + r.sections
            .iter()
            .map(|s| TITLE_H + ROW_H * s.rows.len() as f64 + AXIS_H + GAP)
            .sum::<f64>();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Noto Sans CJK SC, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let mut y = 20.0;
    for sec in &r.sections {
        y = panel(&mut s, sec, y, lang, &r.meta.cpu);
    }
    s.push_str("</svg>\n");
    s
}

/// The x-domain of a panel: every min and max, and 1.0, with some margin.
fn domain(sec: &SectionResult) -> (f64, f64) {
    let mut lo: f64 = 1.0;
    let mut hi: f64 = 1.0;
    for r in &sec.rows {
        for v in [r.ratio.min, r.ratio.max].into_iter().flatten() {
            if v.is_finite() && v > 0.0 {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    (lo / 1.3, hi * 1.3)
}

fn panel(s: &mut String, sec: &SectionResult, top: f64, lang: Lang, cpu: &str) -> f64 {
    let (lo, hi) = domain(sec);
    let (llo, lhi) = (lo.ln(), hi.ln());
    let x = |v: f64| X0 + (v.ln() - llo) / (lhi - llo) * (X1 - X0);
    let _ = writeln!(
        s,
        r#"<text x="10" y="{:.1}" font-size="15" font-weight="bold">{}: {} / {}</text>"#,
        top + 16.0,
        esc(&sec.name),
        esc(&sec.ratio.num),
        esc(&sec.ratio.den)
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="{:.1}" fill="#555">{} — {}</text>"##,
        top + 34.0,
        esc(&lang.plot_axis(&sec.ratio.num, &sec.ratio.den)),
        esc(cpu)
    );
    let rows_top = top + TITLE_H;
    let rows_bottom = rows_top + ROW_H * sec.rows.len() as f64;
    // Grid and ticks.
    for &t in TICKS.iter().filter(|&&t| t >= lo && t <= hi) {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" y1="{rows_top:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#e5e5e5"/>"##,
            rows_bottom + 4.0
        );
        let _ = writeln!(
            s,
            r##"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="#333">{t}</text>"##,
            rows_bottom + 18.0
        );
    }
    // The line at 1.0.
    let one = x(1.0);
    let _ = writeln!(
        s,
        r##"<line x1="{one:.1}" y1="{:.1}" x2="{one:.1}" y2="{:.1}" stroke="#000" stroke-dasharray="4 3"/>"##,
        rows_top - 4.0,
        rows_bottom + 4.0
    );
    for (i, r) in sec.rows.iter().enumerate() {
        let cy = rows_top + ROW_H * (i as f64 + 0.5);
        if i % 2 == 1 {
            let _ = writeln!(
                s,
                r##"<rect x="5" y="{:.1}" width="{:.1}" height="{ROW_H}" fill="#f6f8fa"/>"##,
                cy - ROW_H / 2.0,
                WIDTH - 10.0
            );
        }
        let mut label = r.label();
        if !r.passed() {
            label.push_str(lang.failed_mark());
        }
        let _ = writeln!(
            s,
            r#"<text x="{LABEL_RIGHT}" y="{:.1}" text-anchor="end">{}</text>"#,
            cy + 4.0,
            esc(&label)
        );
        match (r.ratio.median, r.ratio.min, r.ratio.max) {
            (Some(m), Some(a), Some(b)) if m > 0.0 && a > 0.0 && b > 0.0 => {
                let color = if b < 1.0 {
                    "#1a7f37"
                } else if a > 1.0 {
                    "#cf222e"
                } else {
                    "#6e7781"
                };
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{color}" stroke-opacity="0.45" stroke-width="7" stroke-linecap="round"/>"#,
                    x(a),
                    x(b)
                );
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{cy:.1}" r="4.5" fill="{color}"/>"#,
                    x(m)
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{VALUE_X}" y="{:.1}">{m:.3} [{a:.3}–{b:.3}]</text>"#,
                    cy + 4.0
                );
            }
            _ => {
                let _ = writeln!(
                    s,
                    r##"<text x="{X0}" y="{:.1}" fill="#6e7781">{}</text>"##,
                    cy + 4.0,
                    esc(lang.plot_unsupported())
                );
            }
        }
    }
    rows_bottom + AXIS_H + GAP
}
