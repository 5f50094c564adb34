//! Printer columns a kind declares: checking a declaration and reading a column's value from an object.

use serde_json::Value;
use steward_sdk::{ColumnType, PrinterColumn};

/// Longest column name and path the host accepts.
const MAX_TEXT: usize = 253;
/// Most columns one kind may declare.
const MAX_COLUMNS: usize = 16;

/// One step of a column's path: a field of an object, or an element of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

/// The steps of `path` (`.spec.a.b`, `.status.steps[0].name`), the first being `spec` or
/// `status`; a message saying what is wrong otherwise.
fn parse(path: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(format!(
                    "`{path}`: a field name is empty or has characters other than letters, digits, `_`, `-`"
                ));
            }
            steps.push(Step::Field(name.to_string()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some((index, tail)) = after.split_once(']') else {
                return Err(format!("`{path}`: a `[` is not closed"));
            };
            let index = index.parse().map_err(|_| format!("`{path}`: `[{index}]` is not a list index"))?;
            steps.push(Step::Index(index));
            rest = tail;
        } else {
            return Err(format!("`{path}`: expected `.field` or `[index]` at `{rest}`"));
        }
    }
    match steps.first() {
        Some(Step::Field(f)) if f == "spec" || f == "status" => Ok(steps),
        _ => Err(format!("`{path}` must start with `.spec` or `.status`")),
    }
}

/// Checks the columns `kind` declares: each has a name (unique, not one of the host's own
/// columns) and a simple JSON path into `.spec` or `.status`; at most 16. The message names the
/// kind and the column, for the plugin's author.
pub fn check(kind: &str, columns: &[PrinterColumn]) -> Result<(), String> {
    if columns.len() > MAX_COLUMNS {
        return Err(format!("kind {kind} declares {} printer columns; at most {MAX_COLUMNS}", columns.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for c in columns {
        if c.name.trim().is_empty() || c.name.len() > MAX_TEXT || c.json_path.len() > MAX_TEXT {
            return Err(format!("kind {kind}: a printer column needs a name and a path of at most {MAX_TEXT} bytes"));
        }
        if HOST_COLUMNS.iter().any(|h| h.eq_ignore_ascii_case(&c.name)) {
            return Err(format!(
                "kind {kind}: printer column `{}` has the name of one of the host's own columns",
                c.name
            ));
        }
        if !seen.insert(c.name.to_ascii_lowercase()) {
            return Err(format!("kind {kind}: printer column `{}` is declared twice", c.name));
        }
        parse(&c.json_path).map_err(|e| format!("kind {kind}: printer column `{}`: {e}", c.name))?;
    }
    Ok(())
}

/// The columns every list shows before a kind's own; a kind's column may not take their names.
pub const HOST_COLUMNS: &[&str] = &["Name", "Namespace", "Kind", "Phase", "Ready", "Reason", "Age"];

/// The value of `column` on an object with this `spec` and `status`, as text its type says;
/// `None` when the path leads nowhere (a missing field, an index past the end, a null).
/// A value of another type than declared is shown as its JSON text, never dropped.
pub fn value(column: &PrinterColumn, spec: Option<&Value>, status: Option<&Value>) -> Option<String> {
    let steps = parse(&column.json_path).ok()?;
    let (root, rest) = steps.split_first()?;
    let mut at = match root {
        Step::Field(f) if f == "spec" => spec?,
        _ => status?,
    };
    for step in rest {
        at = match step {
            Step::Field(f) => at.get(f.as_str())?,
            Step::Index(i) => at.get(*i)?,
        };
    }
    let text = match (column.type_, at) {
        (_, Value::Null) => return None,
        (ColumnType::String | ColumnType::Date, Value::String(s)) => s.clone(),
        (ColumnType::Integer, Value::Number(n)) if n.is_f64() => {
            n.as_f64().map_or(n.to_string(), |f| format!("{}", f.trunc()))
        }
        (ColumnType::Integer | ColumnType::Number, Value::Number(n)) => n.to_string(),
        (ColumnType::Boolean, Value::Bool(b)) => b.to_string(),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn col(path: &str, type_: ColumnType) -> PrinterColumn {
        PrinterColumn::new("C", path, type_)
    }

    #[test]
    fn a_path_reads_into_spec_or_status() {
        let spec = json!({"command": "prog", "args": ["a", "b"]});
        let status =
            json!({"state": "Failed", "toolCount": 3, "ok": false, "steps": [{"name": "first"}], "ratio": 0.5});
        let v = |path, t| value(&col(path, t), Some(&spec), Some(&status));
        assert_eq!(v(".status.state", ColumnType::String).as_deref(), Some("Failed"));
        assert_eq!(v(".status.toolCount", ColumnType::Integer).as_deref(), Some("3"));
        assert_eq!(v(".status.ok", ColumnType::Boolean).as_deref(), Some("false"));
        assert_eq!(v(".status.steps[0].name", ColumnType::String).as_deref(), Some("first"));
        assert_eq!(v(".status.ratio", ColumnType::Number).as_deref(), Some("0.5"));
        assert_eq!(v(".spec.command", ColumnType::String).as_deref(), Some("prog"));
        assert_eq!(v(".spec.args", ColumnType::String).as_deref(), Some(r#"["a","b"]"#), "a list shows as JSON");
        assert_eq!(v(".status.state", ColumnType::Integer).as_deref(), Some("Failed"), "a wrong type is still shown");
    }

    #[test]
    fn a_missing_value_is_none_not_an_error() {
        let status = json!({"steps": [], "gone": null});
        for path in [".status.nothing", ".status.steps[0].name", ".status.gone", ".spec.command"] {
            assert_eq!(value(&col(path, ColumnType::String), None, Some(&status)), None, "{path}");
        }
        assert_eq!(value(&col(".status.state", ColumnType::String), None, None), None, "no status yet");
    }

    #[test]
    fn a_declaration_is_checked_with_the_kind_and_column_named() {
        assert_eq!(check("K", &[col(".status.a.b[2].c", ColumnType::String)]), Ok(()));
        for (columns, expect) in [
            (vec![col(".metadata.name", ColumnType::String)], "must start with `.spec` or `.status`"),
            (vec![col("status.a", ColumnType::String)], "expected `.field`"),
            (vec![col(".status.a[x]", ColumnType::String)], "not a list index"),
            (vec![col(".status.a[1", ColumnType::String)], "not closed"),
            (vec![col(".status..a", ColumnType::String)], "field name is empty"),
            (vec![col(".status.a", ColumnType::String), col(".status.b", ColumnType::String)], "declared twice"),
            (vec![PrinterColumn::new("Phase", ".status.a", ColumnType::String)], "host's own columns"),
            (vec![PrinterColumn::new(" ", ".status.a", ColumnType::String)], "needs a name"),
        ] {
            let e = check("MCPServer", &columns).unwrap_err();
            assert!(e.contains("kind MCPServer") && e.contains(expect), "{e}");
        }
    }
}
