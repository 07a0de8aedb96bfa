//! Suite files: a user's own op/shape rows for `taskgrain bench --suite FILE`.
//!
//! Two formats, chosen by the file's extension (`.json`, else TOML):
//!
//! ```toml
//! # my-model.toml — one [[row]] table per row
//! [[row]]
//! op = "rmsnorm"
//! shape = "1x4096"
//!
//! [[row]]
//! op = "attention"
//! shape = "1x32x8x1x512x128x128"
//! ```
//!
//! ```json
//! [
//!   { "op": "rmsnorm", "shape": "1x4096" },
//!   { "op": "attention", "shape": "1x32x8x1x512x128x128" }
//! ]
//! ```
//!
//! Each row has exactly the keys `op` (an operator name) and `shape` (`RxC`, or
//! `BxHqxHkvxSqxSkvxDkxDv` for attention). TOML files may hold comments (`#`)
//! and blank lines; only `[[row]]` tables and `key = "string"` lines are
//! accepted. A bad row — unknown operator, malformed or invalid shape, a missing
//! or unknown key, a duplicate — is an [`Error::SuiteFile`] naming the line.

use crate::error::{Error, Result};
use crate::ops::{Op, Shape};
use std::path::Path;

/// Whether `path` names a suite file by its extension: `.toml` or `.json`, in
/// any case (what `bench --suite` and `bench peers --suite` read with [`load`]).
pub fn has_suite_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml") || e.eq_ignore_ascii_case("json"))
}

/// Reads the rows of a suite file.
pub fn load(path: &Path) -> Result<Vec<(Op, Shape)>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let name = path.display().to_string();
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        parse_json(&name, &text)
    } else {
        parse_toml(&name, &text)
    }
}

fn err(path: &str, line: usize, message: impl Into<String>) -> Error {
    Error::SuiteFile {
        path: path.into(),
        line,
        message: message.into(),
    }
}

/// One row as written, with the line it starts on.
struct RawRow {
    line: usize,
    op: Option<(String, usize)>,
    shape: Option<(String, usize)>,
}

fn finish(path: &str, rows: Vec<RawRow>) -> Result<Vec<(Op, Shape)>> {
    let mut out: Vec<(Op, Shape)> = Vec::new();
    if rows.is_empty() {
        return Err(err(path, 1, "the file lists no rows"));
    }
    for r in rows {
        let Some((op_text, op_line)) = r.op else {
            return Err(err(path, r.line, "row has no `op`"));
        };
        let Some((shape_text, shape_line)) = r.shape else {
            return Err(err(path, r.line, "row has no `shape`"));
        };
        let op: Op = op_text
            .parse()
            .map_err(|e: Error| err(path, op_line, e.to_string()))?;
        let shape =
            Shape::parse(op, &shape_text).map_err(|e| err(path, shape_line, e.to_string()))?;
        if out.contains(&(op, shape)) {
            return Err(err(
                path,
                r.line,
                format!("duplicate row {op} {shape_text}"),
            ));
        }
        out.push((op, shape));
    }
    Ok(out)
}

/// The restricted TOML of suite files.
pub fn parse_toml(path: &str, text: &str) -> Result<Vec<(Op, Shape)>> {
    let mut rows: Vec<RawRow> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if line == "[[row]]" {
            rows.push(RawRow {
                line: n,
                op: None,
                shape: None,
            });
            continue;
        }
        if line.starts_with('[') {
            return Err(err(
                path,
                n,
                format!("unexpected table {line}: only [[row]]"),
            ));
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(err(
                path,
                n,
                format!("expected `key = \"value\"`, got {line:?}"),
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .filter(|v| !v.contains('"'))
            .ok_or_else(|| err(path, n, format!("the value of {key} must be a \"string\"")))?;
        let Some(row) = rows.last_mut() else {
            return Err(err(path, n, "a key before the first [[row]]"));
        };
        let slot = match key {
            "op" => &mut row.op,
            "shape" => &mut row.shape,
            _ => {
                return Err(err(
                    path,
                    n,
                    format!("unknown key {key:?} (rows have op and shape)"),
                ));
            }
        };
        if slot.is_some() {
            return Err(err(path, n, format!("{key} given twice in one row")));
        }
        *slot = Some((value.to_string(), n));
    }
    finish(path, rows)
}

fn strip_comment(line: &str) -> &str {
    let mut in_str = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_str = !in_str,
            '#' if !in_str => return &line[..i],
            _ => {}
        }
    }
    line
}

/// A JSON list of `{ "op", "shape" }` objects; errors name the line of the row.
pub fn parse_json(path: &str, text: &str) -> Result<Vec<(Op, Shape)>> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| err(path, e.line().max(1), format!("invalid JSON: {e}")))?;
    let serde_json::Value::Array(items) = value else {
        return Err(err(path, 1, "expected a JSON list of rows"));
    };
    let lines = row_lines(text);
    let mut rows = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(1);
        let serde_json::Value::Object(map) = item else {
            return Err(err(path, line, "a row must be an object with op and shape"));
        };
        let mut row = RawRow {
            line,
            op: None,
            shape: None,
        };
        for (k, v) in map {
            let Some(s) = v.as_str() else {
                return Err(err(
                    path,
                    line,
                    format!("the value of {k} must be a string"),
                ));
            };
            match k.as_str() {
                "op" => row.op = Some((s.to_string(), line)),
                "shape" => row.shape = Some((s.to_string(), line)),
                _ => {
                    return Err(err(
                        path,
                        line,
                        format!("unknown key {k:?} (rows have op and shape)"),
                    ));
                }
            }
        }
        rows.push(row);
    }
    finish(path, rows)
}

/// The line on which each element of the top-level JSON array starts.
fn row_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut depth, mut line) = (0usize, 1usize);
    let (mut in_str, mut escaped, mut expect_item) = (false, false, false);
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        if depth == 1 && expect_item && !c.is_whitespace() && c != ']' {
            lines.push(line);
            expect_item = false;
        }
        match c {
            '"' => in_str = true,
            '[' | '{' => {
                depth += 1;
                if depth == 1 {
                    expect_item = true;
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => expect_item = true,
            _ => {}
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_rows() {
        let t = "# c\n[[row]]\nop = \"rmsnorm\" # x\nshape = \"1x4096\"\n\n[[row]]\nop=\"rope\"\nshape=\"2x64\"\n";
        assert_eq!(parse_toml("f", t).unwrap().len(), 2);
        let j = "[\n {\"op\": \"rmsnorm\", \"shape\": \"1x4096\"},\n {\"op\": \"rope\", \"shape\": \"2x64\"}\n]";
        assert_eq!(parse_json("f", j).unwrap().len(), 2);
    }

    #[test]
    fn suite_files_are_known_by_extension_in_any_case() {
        for f in ["m.toml", "dir/m.json", "M.TOML", "m.Json"] {
            assert!(has_suite_extension(Path::new(f)), "{f}");
        }
        for f in ["m.txt", "toml", "m.toml.bak", "m"] {
            assert!(!has_suite_extension(Path::new(f)), "{f}");
        }
    }

    #[test]
    fn bad_rows_name_their_line() {
        let t = "[[row]]\nop = \"rmsnorm\"\nshape = \"1x4096\"\n[[row]]\nop = \"nope\"\nshape = \"1x2\"\n";
        match parse_toml("f", t) {
            Err(Error::SuiteFile { line, .. }) => assert_eq!(line, 5),
            other => panic!("{other:?}"),
        }
        let j = "[\n {\"op\": \"rmsnorm\", \"shape\": \"1x4096\"},\n\n {\"op\": \"rope\", \"shape\": \"2x63\"}\n]";
        match parse_json("f", j) {
            Err(Error::SuiteFile { line, .. }) => assert_eq!(line, 4),
            other => panic!("{other:?}"),
        }
    }
}
