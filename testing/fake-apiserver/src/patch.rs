//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) on `serde_json::Value`.

use serde_json::{Map, Value};

/// Why a JSON patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PatchError {
    /// The patch document is not a list of valid operations.
    #[error("invalid JSON patch: {0}")]
    Malformed(String),
    /// An operation could not be applied to the document (missing path, failed `test`, ...).
    #[error("{0}")]
    Failed(String),
}

/// Applies an RFC 7386 merge patch: maps merge recursively, `null` deletes, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("object");
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn parse_pointer(p: &str) -> Result<Vec<String>, PatchError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let rest = p.strip_prefix('/').ok_or_else(|| PatchError::Malformed(format!("invalid path {p:?}")))?;
    Ok(rest.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect())
}

fn array_index(token: &str, len: usize, allow_end: bool) -> Result<usize, PatchError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid =
        !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) && (token == "0" || !token.starts_with('0'));
    let i: usize = if valid { token.parse().unwrap_or(usize::MAX) } else { usize::MAX };
    if i > len || (!allow_end && i == len) || i == usize::MAX {
        return Err(PatchError::Failed(format!("index {token:?} out of bounds")));
    }
    Ok(i)
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Result<&'a Value, PatchError> {
    let mut cur = doc;
    for token in path {
        cur = match cur {
            Value::Object(m) => m.get(token),
            Value::Array(a) => a.get(array_index(token, a.len(), false)?),
            _ => None,
        }
        .ok_or_else(|| PatchError::Failed(format!("path /{} not found", path.join("/"))))?;
    }
    Ok(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, PatchError> {
    let mut cur = doc;
    for token in &path[..path.len() - 1] {
        let missing = || PatchError::Failed(format!("doc is missing path: /{}", path.join("/")));
        cur = match cur {
            Value::Object(m) => m.get_mut(token).ok_or_else(missing)?,
            Value::Array(a) => {
                let i = array_index(token, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(missing()),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), PatchError> {
    let Some(last) = path.last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, path)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(PatchError::Failed(format!("doc is missing path: /{}", path.join("/")))),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, PatchError> {
    let Some(last) = path.last() else {
        return Err(PatchError::Failed("cannot remove the whole document".into()));
    };
    let missing = || PatchError::Failed(format!("doc is missing path: /{}", path.join("/")));
    match parent_mut(doc, path)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Applies an RFC 6902 JSON patch (`add`, `remove`, `replace`, `move`, `copy`, `test`).
/// The document is left unchanged when any operation fails.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch.as_array().ok_or_else(|| PatchError::Malformed("a JSON patch must be an array".into()))?;
    let mut doc = target.clone();
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| PatchError::Malformed("operation is missing \"op\"".into()))?;
        let path_of = |field: &str| -> Result<Vec<String>, PatchError> {
            let p = op
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(|| PatchError::Malformed(format!("operation {name:?} is missing {field:?}")))?;
            parse_pointer(p)
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| PatchError::Malformed(format!("operation {name:?} is missing \"value\"")))
        };
        let path = path_of("path")?;
        match name {
            "add" => add(&mut doc, &path, value()?)?,
            "remove" => {
                remove(&mut doc, &path)?;
            }
            "replace" => {
                remove(&mut doc, &path)?;
                add(&mut doc, &path, value()?)?;
            }
            "move" => {
                let from = path_of("from")?;
                let v = remove(&mut doc, &from)?;
                add(&mut doc, &path, v)?;
            }
            "copy" => {
                let from = path_of("from")?;
                let v = get(&doc, &from)?.clone();
                add(&mut doc, &path, v)?;
            }
            "test" => {
                let expected = value()?;
                let actual = get(&doc, &path)?;
                if *actual != expected {
                    return Err(PatchError::Failed(format!("testing value /{} failed: test failed", path.join("/"))));
                }
            }
            other => return Err(PatchError::Malformed(format!("unexpected kind: {other:?}"))),
        }
    }
    *target = doc;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
        let mut t = json!({"a": "x"});
        merge_patch(&mut t, &json!({"a": {"b": null, "c": 1}}));
        assert_eq!(t, json!({"a": {"c": 1}}));
    }

    #[test]
    fn json_patch_operations() {
        let mut t = json!({"spec": {"list": [1, 2]}, "a/b": 1, "m~n": 2});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/spec/list/0", "value": 1},
                {"op": "add", "path": "/spec/list/-", "value": 3},
                {"op": "add", "path": "/spec/list/0", "value": 0},
                {"op": "replace", "path": "/a~1b", "value": 5},
                {"op": "remove", "path": "/m~0n"},
                {"op": "copy", "from": "/a~1b", "path": "/spec/c"},
                {"op": "move", "from": "/spec/c", "path": "/d"},
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"spec": {"list": [0, 1, 2, 3]}, "a/b": 5, "d": 5}));
    }

    #[test]
    fn failed_test_leaves_document_unchanged() {
        let mut t = json!({"a": 1});
        let err = json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/a", "value": 2}, {"op": "test", "path": "/a", "value": 1}]),
        );
        assert!(matches!(err, Err(PatchError::Failed(_))));
        assert_eq!(t, json!({"a": 1}));
        assert!(matches!(json_patch(&mut t, &json!({"op": "add"})), Err(PatchError::Malformed(_))));
        assert!(matches!(json_patch(&mut t, &json!([{"op": "remove", "path": "/zz"}])), Err(PatchError::Failed(_))));
    }
}
