//! What "matches" means for an expected value: maps by the keys the expectation names, lists item by item, conditions by type.

use serde_json::Value;

/// One difference between what a scenario expects and what the plugin did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Where, as a path into the outcome (`status.members[0].ready`, `conditions[Ready].reason`).
    pub path: String,
    /// The value expected there, as JSON text.
    pub expected: String,
    /// The value found there, as JSON text (`(absent)` when there is none).
    pub actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: expected {}, got {}", self.path, self.expected, self.actual)
    }
}

/// Compares `actual` with `expected` at `path`, appending each difference to `out`.
///
/// The rules, the same at every depth: a map matches when every key it names is in the
/// actual map with a matching value (keys it does not name are not checked); a list matches
/// when it has as many items as the actual list and each matches the item at its place; any
/// other value must be equal (numbers by value: `2` matches `2.0`). A list of objects that each
/// have a `type` (conditions) is matched by type instead of by place: each expected item must
/// match the actual item of its type, and the counts must agree.
pub fn compare(path: &str, expected: &Value, actual: Option<&Value>, out: &mut Vec<Mismatch>) {
    let Some(actual) = actual else {
        out.push(mismatch(path, expected, None));
        return;
    };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                compare(&join(path, k), v, a.get(k), out);
            }
        }
        (Value::Array(e), Value::Array(a)) if by_type(e) && by_type(a) => {
            for item in e {
                let t = item["type"].as_str().unwrap_or_default();
                let found = a.iter().find(|x| x["type"].as_str() == Some(t));
                compare(&format!("{path}[{t}]"), item, found, out);
            }
            if e.len() != a.len() {
                let types = |l: &[Value]| l.iter().filter_map(|x| x["type"].as_str()).collect::<Vec<_>>().join(", ");
                out.push(Mismatch {
                    path: path.to_string(),
                    expected: format!("{} items ({})", e.len(), types(e)),
                    actual: format!("{} items ({})", a.len(), types(a)),
                });
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(Mismatch {
                    path: path.to_string(),
                    expected: format!("{} items", e.len()),
                    actual: format!("{} items: {}", a.len(), short(&Value::Array(a.clone()))),
                });
                return;
            }
            for (i, (x, y)) in e.iter().zip(a).enumerate() {
                compare(&format!("{path}[{i}]"), x, Some(y), out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        (x, y) if x == y => {}
        _ => out.push(mismatch(path, expected, Some(actual))),
    }
}

/// Whether every item of `list` is an object with a string `type` (and there is at least one).
fn by_type(list: &[Value]) -> bool {
    !list.is_empty() && list.iter().all(|x| x.get("type").is_some_and(Value::is_string))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn mismatch(path: &str, expected: &Value, actual: Option<&Value>) -> Mismatch {
    Mismatch {
        path: path.to_string(),
        expected: short(expected),
        actual: actual.map_or_else(|| "(absent)".to_string(), short),
    }
}

/// The value as one line of JSON, cut at 200 characters.
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
