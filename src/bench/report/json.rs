//! The report as JSON (the contract of issue 6; see `model`).

use super::model::Report;

/// Pretty-printed JSON with a trailing newline. Non-finite numbers become `null`.
pub fn render(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(r).expect("the report model serializes");
    s.push('\n');
    s
}
