//! The report as CSV: one line per section × row × candidate (tidy form), so a
//! spreadsheet or dataframe can pivot it any way. Unsupported candidates have
//! empty time and geometry fields.

use super::model::{Report, shape_label};
use std::fmt::Write;

/// The header line's fields.
pub const HEADER: [&str; 18] = [
    "section",
    "op",
    "shape",
    "candidate",
    "supported",
    "time_us",
    "local",
    "block",
    "grain",
    "variant",
    "ratio_num",
    "ratio_den",
    "ratio_median",
    "ratio_min",
    "ratio_max",
    "outputs_identical",
    "kernel_identical",
    "ok",
];

fn num(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.6}")).unwrap_or_default()
}

fn flag(v: Option<bool>) -> String {
    v.map(|b| b.to_string()).unwrap_or_default()
}

/// Renders the CSV. Only the variant can hold a comma or quote (a fused
/// expression, e.g. `map(mul(in0, in1))`); it is quoted as RFC 4180 says.
pub fn render(r: &Report) -> String {
    let mut s = HEADER.join(",");
    s.push('\n');
    for sec in &r.sections {
        for row in &sec.rows {
            let shape = shape_label(&row.shape).replace('×', "x");
            for c in &sec.candidates {
                let cfg = row.configs.get(c).copied().flatten();
                let t = row.times_us.get(c).copied().flatten();
                let variant = quote(&row.variants.get(c).cloned().flatten().unwrap_or_default());
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    sec.name,
                    row.op,
                    shape,
                    c,
                    cfg.is_some(),
                    num(t),
                    cfg.map(|c| c.local.to_string()).unwrap_or_default(),
                    cfg.map(|c| c.block.to_string()).unwrap_or_default(),
                    cfg.map(|c| c.grain.to_string()).unwrap_or_default(),
                    variant,
                    sec.ratio.num,
                    sec.ratio.den,
                    num(row.ratio.median),
                    num(row.ratio.min),
                    num(row.ratio.max),
                    flag(row.outputs_identical),
                    flag(row.kernel_identical),
                    row.ok,
                );
            }
        }
    }
    s
}

/// `field`, quoted (with inner quotes doubled) when it holds a comma or quote.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}
