//! Operations on schema nodes for the structural rewrite: merging alternatives, what a branch
//! adds to its parent, type normalization and the final clean-up of a node.

use serde_json::{Map, Value, json};

use super::{ANNOTATIONS, INT_OR_STRING, Node, PRESERVE, VALUE_KEYS};

/// The elements of an `allOf`/`anyOf`/`oneOf`, or what is wrong with it.
pub(super) fn branches(v: &Value) -> Result<&Vec<Value>, String> {
    match v {
        Value::Array(list) if !list.is_empty() => Ok(list),
        Value::Array(_) => Err("must not be empty".into()),
        other => Err(format!("must be a list of schemas, not {}", json_type(other))),
    }
}

/// A node that accepts any value.
pub(super) fn any_node() -> Node {
    let mut n = Node::new();
    n.insert(PRESERVE.into(), json!(true));
    n
}

/// Whether `n` accepts any value: it preserves unknown fields and says nothing of type or shape.
pub(super) fn is_any(n: &Node) -> bool {
    n.get(PRESERVE) == Some(&json!(true))
        && !n.contains_key("type")
        && !n.contains_key(INT_OR_STRING)
        && !n.contains_key("properties")
        && !n.contains_key("items")
        && !n.contains_key("additionalProperties")
}

/// Marks `n` as an object whose unknown fields are kept.
pub(super) fn preserve_object(n: &mut Node) {
    n.insert(PRESERVE.into(), json!(true));
    if !n.contains_key("type") {
        n.insert("type".into(), json!("object"));
    }
}

/// Whether `v` is a schema of `null` alone: `{type: null}`, `{enum: [null]}`, `{const: null}`.
pub(super) fn is_null_only(v: &Value) -> bool {
    let Some(m) = v.as_object() else { return false };
    let null = Value::Null;
    match m.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(ts)) if !ts.is_empty() && ts.iter().all(|t| t == "null") => return true,
        _ => {}
    }
    if m.get("const") == Some(&null) {
        return true;
    }
    matches!(m.get("enum"), Some(Value::Array(vs)) if !vs.is_empty() && vs.iter().all(Value::is_null))
}

/// `type: [T, "null"]` → `type: T, nullable: true`; `integer` and `string` → int-or-string;
/// other lists of types → any value. A lone `null` type becomes a nullable node of any value.
pub(super) fn normalize_type(s: &mut Node) {
    let types: Vec<String> = match s.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
        Some(_) => {
            s.remove("type");
            return;
        }
        None => return,
    };
    s.remove("type");
    if types.iter().any(|t| t == "null") {
        s.insert("nullable".into(), json!(true));
    }
    let mut rest: Vec<&str> = types.iter().map(String::as_str).filter(|t| *t != "null").collect();
    rest.sort_unstable();
    rest.dedup();
    match rest.as_slice() {
        [] => {
            s.insert(PRESERVE.into(), json!(true));
        }
        [t] => {
            s.insert("type".into(), json!(t));
        }
        ["integer", "number"] => {
            s.insert("type".into(), json!("number"));
        }
        ["integer", "string"] => {
            s.insert(INT_OR_STRING.into(), json!(true));
        }
        _ => {
            for k in ["properties", "additionalProperties", "patternProperties", "items", "prefixItems"] {
                s.remove(k);
            }
            s.insert(PRESERVE.into(), json!(true));
        }
    }
}

/// The node's kind of value for [`union`]: its type, `int-or-string`, or `any`.
fn shape(n: &Node) -> &str {
    if n.get(INT_OR_STRING) == Some(&json!(true)) {
        return "int-or-string";
    }
    n.get("type").and_then(Value::as_str).unwrap_or("any")
}

/// A structural node that accepts every value `a` or `b` accepts (alternatives' structure;
/// what tells them apart is kept separately by [`residue`]).
pub(super) fn union(a: Node, b: Node) -> Node {
    let mut out = Node::new();
    for k in ["description", "title", "default", "example"] {
        if let (Some(x), Some(y)) = (a.get(k), b.get(k))
            && x == y
        {
            out.insert(k.into(), x.clone());
        }
    }
    if a.get("nullable") == Some(&json!(true)) || b.get("nullable") == Some(&json!(true)) {
        out.insert("nullable".into(), json!(true));
    }
    let t = match (shape(&a), shape(&b)) {
        ("any", _) | (_, "any") => "any",
        (x, y) if x == y => x,
        ("integer", "number") | ("number", "integer") => "number",
        ("integer" | "string" | "int-or-string", "integer" | "string" | "int-or-string") => "int-or-string",
        _ => "any",
    }
    .to_string();
    match t.as_str() {
        "any" => {
            out.insert(PRESERVE.into(), json!(true));
        }
        "int-or-string" => {
            out.insert(INT_OR_STRING.into(), json!(true));
        }
        "object" => {
            out.insert("type".into(), json!("object"));
            let props = |n: &Node| n.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
            let (pa, pb) = (props(&a), props(&b));
            let mut merged = Node::new();
            for (k, v) in pa.iter().chain(pb.iter()) {
                let Value::Object(v) = v else { continue };
                let joined = match merged.remove(k) {
                    Some(Value::Object(existing)) => union(existing, v.clone()),
                    _ => v.clone(),
                };
                merged.insert(k.clone(), Value::Object(joined));
            }
            if !merged.is_empty() {
                out.insert("properties".into(), Value::Object(merged));
            }
            match (a.get("additionalProperties"), b.get("additionalProperties")) {
                (Some(Value::Object(x)), Some(Value::Object(y))) => {
                    out.insert("additionalProperties".into(), Value::Object(union(x.clone(), y.clone())));
                }
                // A map and a struct: keep every field; a map and an object that prunes all: the same.
                (Some(_), None) | (None, Some(_)) => {
                    out.insert(PRESERVE.into(), json!(true));
                }
                _ => {}
            }
            if a.contains_key(PRESERVE) || b.contains_key(PRESERVE) {
                out.insert(PRESERVE.into(), json!(true));
            }
            let req = |n: &Node| n.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
            let (ra, rb) = (req(&a), req(&b));
            let both: Vec<Value> = ra.into_iter().filter(|r| rb.contains(r)).collect();
            if !both.is_empty() {
                out.insert("required".into(), Value::Array(both));
            }
        }
        "array" => {
            out.insert("type".into(), json!("array"));
            match (a.get("items"), b.get("items")) {
                (Some(Value::Object(x)), Some(Value::Object(y))) => {
                    out.insert("items".into(), Value::Object(union(x.clone(), y.clone())));
                }
                (Some(x), None) | (None, Some(x)) => {
                    out.insert("items".into(), x.clone());
                }
                _ => {}
            }
        }
        scalar => {
            out.insert("type".into(), json!(scalar));
            if let (Some(Value::Array(x)), Some(Value::Array(y))) = (a.get("enum"), b.get("enum")) {
                let mut values = x.clone();
                for v in y {
                    if !values.contains(v) {
                        values.push(v.clone());
                    }
                }
                out.insert("enum".into(), Value::Array(values));
            }
            if let Some(f) = a.get("format")
                && b.get("format") == Some(f)
            {
                out.insert("format".into(), f.clone());
            }
        }
    }
    finalize(&mut out);
    out
}

/// What `branch` checks beyond the structure `outer` already gives: value validations only,
/// and only on fields `outer` has (the API server requires both). Empty when nothing is left.
pub(super) fn residue(branch: &Node, outer: &Node) -> Node {
    let mut r = Node::new();
    for k in VALUE_KEYS {
        if let Some(v) = branch.get(*k)
            && outer.get(*k) != Some(v)
        {
            r.insert((*k).into(), v.clone());
        }
    }
    if let Some(props) = branch.get("properties").and_then(Value::as_object) {
        let outer_props = outer.get("properties").and_then(Value::as_object);
        let outer_values = outer.get("additionalProperties").and_then(Value::as_object);
        let mut kept = Node::new();
        for (k, v) in props {
            let (Some(v), Some(sub)) =
                (v.as_object(), outer_props.and_then(|p| p.get(k)).and_then(Value::as_object).or(outer_values))
            else {
                continue;
            };
            let rr = residue(v, sub);
            if !rr.is_empty() {
                kept.insert(k.clone(), Value::Object(rr));
            }
        }
        if !kept.is_empty() {
            r.insert("properties".into(), Value::Object(kept));
        }
    }
    if let (Some(Value::Object(items)), Some(Value::Object(outer_items))) = (branch.get("items"), outer.get("items")) {
        let rr = residue(items, outer_items);
        if !rr.is_empty() {
            r.insert("items".into(), Value::Object(rr));
        }
    }
    if let Some(Value::Array(list)) = branch.get("allOf") {
        let kept: Vec<Value> = list
            .iter()
            .filter_map(Value::as_object)
            .map(|x| residue(x, outer))
            .filter(|x| !x.is_empty())
            .map(Value::Object)
            .collect();
        if !kept.is_empty() {
            r.insert("allOf".into(), Value::Array(kept));
        }
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = branch.get(k) {
            let kept: Vec<Node> = list.iter().filter_map(Value::as_object).map(|x| residue(x, outer)).collect();
            if !kept.is_empty() && kept.iter().all(|x| !x.is_empty()) {
                r.insert(k.into(), Value::Array(kept.into_iter().map(Value::Object).collect()));
            }
        }
    }
    r
}

/// Adds alternatives (value validations) to `n`: as `anyOf`, which never refuses a value one
/// branch accepts (`oneOf` of weakened branches could), or inside `allOf` when `n` has one.
pub(super) fn add_alternatives(n: &mut Node, residues: Vec<Node>) {
    let list = Value::Array(residues.into_iter().map(Value::Object).collect());
    if n.contains_key("anyOf") {
        let mut wrapped = Node::new();
        wrapped.insert("anyOf".into(), list);
        push_all_of(n, vec![Value::Object(wrapped)]);
    } else {
        n.insert("anyOf".into(), list);
    }
}

pub(super) fn push_all_of(n: &mut Node, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    let all = n.entry("allOf").or_insert_with(|| json!([]));
    if let Value::Array(all) = all {
        all.extend(items);
    }
}

/// Documents the values of an enum made of documented constants (`- \`one\`: First.`).
pub(super) fn describe_variants(n: &mut Node, group: &[Node]) {
    let lines: Vec<String> = group
        .iter()
        .filter_map(|b| {
            let desc = b.get("description")?.as_str()?;
            let [value] = b.get("enum")?.as_array()?.as_slice() else { return None };
            let shown = value.as_str().map_or_else(|| value.to_string(), str::to_string);
            Some(format!("- `{shown}`: {desc}"))
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    let list = lines.join("\n");
    let text = match n.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{d}\n\n{list}"),
        _ => list,
    };
    n.insert("description".into(), json!(text));
}

pub(super) fn fill_annotations(out: &mut Node, from: &Node) {
    for k in ANNOTATIONS {
        if let Some(v) = from.get(*k)
            && !out.contains_key(*k)
        {
            out.insert((*k).into(), v.clone());
        }
    }
}

/// Completes a merged node: a type where one can be told, `x-kubernetes-preserve-unknown-fields`
/// where none can, no `additionalProperties` beside `properties`.
pub(super) fn finalize(n: &mut Node) {
    if n.get("properties").and_then(Value::as_object).is_some_and(Map::is_empty) {
        n.remove("properties");
    }
    if n.contains_key("properties") && n.contains_key("additionalProperties") {
        n.remove("additionalProperties");
        n.insert(PRESERVE.into(), json!(true));
    }
    if n.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
        n.remove("required");
    }
    if n.get(INT_OR_STRING) == Some(&json!(true)) {
        n.remove("type");
        n.remove(PRESERVE);
        return;
    }
    if n.get("type").is_some_and(|t| t == "array") && !n.contains_key("items") {
        n.insert("items".into(), Value::Object(any_node()));
    }
    if n.contains_key("type") {
        return;
    }
    let inferred = if n.contains_key("properties") || n.contains_key("additionalProperties") {
        Some("object")
    } else if n.contains_key("items") {
        Some("array")
    } else {
        n.get("enum").and_then(Value::as_array).and_then(|values| {
            let first = json_type(values.first()?);
            values.iter().all(|v| json_type(v) == first).then_some(first)
        })
    };
    match inferred {
        Some(t) => {
            n.insert("type".into(), json!(t));
        }
        None => {
            n.insert(PRESERVE.into(), json!(true));
        }
    }
}

/// The schema type of a JSON value (`integer` for whole numbers).
pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
