//! Rewriting a plugin's spec schema into the structural form the API server requires.

use serde_json::{Map, Value, json};

use super::{ANNOTATIONS, CrdError, DROPPED, EXTENSIONS, FORMATS, INT_OR_STRING, Node, PRESERVE, VALUE_KEYS};

/// `schema` (OpenAPI v3 or JSON Schema, as schemars writes it for a kind's spec) rewritten as a
/// structural schema of an object, as the API server requires of a CRD's `spec`:
///
/// - `$ref` to `#/components/schemas/..`, `#/$defs/..`, `#/definitions/..` or `#` is inlined; a type
///   that contains itself is a [`CrdError::Recursive`] naming it, a reference to nothing a
///   [`CrdError::UnresolvedRef`];
/// - `type: [T, "null"]`, and `anyOf`/`oneOf` with a `null` branch, become `type: T, nullable: true`;
/// - alternatives (`anyOf`/`oneOf`) become one typed node holding every branch's fields, with what
///   tells the branches apart kept as value validations in `anyOf`; alternatives of constants become
///   one `enum`; integer-or-string becomes `x-kubernetes-int-or-string`; alternatives of different
///   types, and nodes without a type (`serde_json::Value`), become `x-kubernetes-preserve-unknown-fields`;
/// - `allOf` is merged into its node; `description`, `default` and `nullable` never stay in a branch;
/// - `additionalProperties: false` is dropped (pruning has the same effect); `true` or `{}` becomes
///   `x-kubernetes-preserve-unknown-fields`; a map's value schema is kept, unless the node also has
///   `properties` (then unknown fields are preserved, so nothing is lost);
/// - `const` becomes a one-value `enum`; `uint*` formats become `minimum: 0`; formats the API server
///   does not know, `examples`, `readOnly`, `writeOnly`, `uniqueItems`, `not` and other keys it refuses
///   are dropped.
///
/// The result accepts every value `schema` accepts; where a structural schema cannot say the same,
/// it says less (accepts more), never more: the plugin's `validate` stays the authority.
pub fn structural_schema(kind: &str, schema: &Value) -> Result<Value, CrdError> {
    let root_name = schema.get("title").and_then(Value::as_str).unwrap_or("the spec").to_string();
    let mut c = Converter { kind, root: schema, stack: vec![root_name] };
    let mut node = c.node(schema, "spec")?;
    match node.get("type").and_then(Value::as_str) {
        Some("object") => {}
        None if is_any(&node) => {
            node.insert("type".into(), json!("object"));
        }
        other => {
            return Err(c.unsupported(
                "spec",
                format!(
                    "the spec must be an object (type: object), the schema describes {}",
                    other.unwrap_or("an integer or a string")
                ),
            ));
        }
    }
    node.remove("nullable");
    node.remove("default");
    Ok(Value::Object(node))
}

struct Converter<'a> {
    kind: &'a str,
    root: &'a Value,
    /// The types being expanded, outermost first.
    stack: Vec<String>,
}

impl Converter<'_> {
    fn unsupported(&self, path: &str, message: impl Into<String>) -> CrdError {
        CrdError::Unsupported { kind: self.kind.to_string(), path: path.to_string(), message: message.into() }
    }

    fn node(&mut self, schema: &Value, path: &str) -> Result<Node, CrdError> {
        let mut s = match schema {
            Value::Bool(true) => return Ok(any_node()),
            Value::Bool(false) => {
                return Err(self.unsupported(path, "the schema `false` accepts no value, which a CRD cannot say"));
            }
            Value::Object(m) => m.clone(),
            other => {
                return Err(self
                    .unsupported(path, format!("a schema must be an object or a boolean, not {}", json_type(other))));
            }
        };
        for k in DROPPED {
            s.remove(*k);
        }
        let mut merged: Vec<Node> = Vec::new();
        if let Some(reference) = s.remove("$ref") {
            merged.push(self.follow(&reference, path)?);
        }
        if let Some(all) = s.remove("allOf") {
            for (i, b) in branches(&all).map_err(|m| self.unsupported(path, format!("allOf {m}")))?.iter().enumerate() {
                merged.push(self.node(b, &format!("{path}(allOf {i})"))?);
            }
        }
        normalize_type(&mut s);
        // Groups of alternatives (`anyOf`, `oneOf`), each branch converted.
        let mut alternatives: Vec<Vec<Node>> = Vec::new();
        for key in ["anyOf", "oneOf"] {
            let Some(list) = s.remove(key) else { continue };
            let list = branches(&list).map_err(|m| self.unsupported(path, format!("{key} {m}")))?;
            let mut converted = Vec::new();
            for (i, b) in list.iter().enumerate() {
                if is_null_only(b) {
                    s.insert("nullable".into(), json!(true));
                    continue;
                }
                converted.push(self.node(b, &format!("{path}({key} {i})"))?);
            }
            match converted.len() {
                0 => {}
                1 => merged.extend(converted),
                _ => alternatives.push(converted),
            }
        }
        let mut out = self.own(s, path)?;
        // Written by the author (not inferred): kept on the object the merges below make.
        let keep_unknown = out.get(PRESERVE) == Some(&json!(true));
        for m in merged {
            self.intersect(&mut out, m, path)?;
        }
        let mut residue_groups = Vec::new();
        for group in alternatives {
            let mut it = group.iter().cloned();
            let first = it.next().unwrap_or_else(any_node);
            let union = it.fold(first, union);
            self.intersect(&mut out, union, path)?;
            residue_groups.push(group);
        }
        if keep_unknown && out.get("type").is_none_or(|t| t == "object") {
            out.insert(PRESERVE.into(), json!(true));
        }
        finalize(&mut out);
        for group in residue_groups {
            let residues: Vec<Node> = group.iter().map(|b| residue(b, &out)).collect();
            if residues.iter().any(Map::is_empty) {
                continue;
            }
            if residues.iter().all(|r| r.len() == 1 && r.contains_key("enum")) {
                describe_variants(&mut out, &group);
                continue;
            }
            add_alternatives(&mut out, residues);
        }
        Ok(out)
    }

    /// The converted definition `reference` names.
    fn follow(&mut self, reference: &Value, path: &str) -> Result<Node, CrdError> {
        let Some(reference) = reference.as_str() else {
            return Err(self.unsupported(path, "`$ref` must be a string"));
        };
        let type_name = reference.rsplit('/').next().unwrap_or(reference).replace("~1", "/").replace("~0", "~");
        let (name, target) = if reference == "#" {
            (self.stack.first().cloned().unwrap_or_default(), Some(self.root))
        } else {
            (type_name.clone(), reference.strip_prefix('#').and_then(|p| self.root.pointer(p)))
        };
        let Some(target) = target else {
            return Err(CrdError::UnresolvedRef {
                kind: self.kind.to_string(),
                path: path.to_string(),
                reference: reference.to_string(),
                type_name,
            });
        };
        if let Some(at) = self.stack.iter().position(|n| *n == name) {
            let mut chain: Vec<String> = self.stack[at..].to_vec();
            chain.push(name.clone());
            return Err(CrdError::Recursive {
                kind: self.kind.to_string(),
                path: path.to_string(),
                type_name: name,
                chain: chain.join(" → "),
            });
        }
        self.stack.push(name);
        let converted = self.node(target, path);
        self.stack.pop();
        converted
    }

    /// The node's own keys, converted (children included); `$ref`, `allOf`, `anyOf` and `oneOf` are taken out before.
    fn own(&mut self, s: Node, path: &str) -> Result<Node, CrdError> {
        let mut out = Node::new();
        let mut items: Vec<Node> = Vec::new();
        let mut pattern_props: Vec<Node> = Vec::new();
        let mut exclusive: Vec<(String, serde_json::Number)> = Vec::new();
        for (k, v) in s {
            match k.as_str() {
                "type" | "format" | "title" | "description" | "pattern" if v.is_string() => {
                    out.insert(k, v);
                }
                "type" | "format" | "title" | "description" | "pattern" => {}
                "properties" => {
                    let Value::Object(props) = v else {
                        return Err(self.unsupported(path, "`properties` must be a mapping of schemas"));
                    };
                    let mut converted = Node::new();
                    for (name, p) in props {
                        let child = self.node(&p, &format!("{path}.{name}"))?;
                        converted.insert(name, Value::Object(child));
                    }
                    if !converted.is_empty() {
                        out.insert(k, Value::Object(converted));
                    }
                }
                "additionalProperties" => match &v {
                    Value::Bool(false) => {}
                    Value::Bool(true) => preserve_object(&mut out),
                    Value::Object(m) if m.is_empty() => preserve_object(&mut out),
                    _ => {
                        let child = self.node(&v, &format!("{path}.*"))?;
                        if is_any(&child) {
                            preserve_object(&mut out);
                        } else {
                            out.insert(k, Value::Object(child));
                        }
                    }
                },
                "patternProperties" => {
                    let Value::Object(patterns) = v else {
                        return Err(self.unsupported(path, "`patternProperties` must be a mapping of schemas"));
                    };
                    for (_, p) in patterns {
                        pattern_props.push(self.node(&p, &format!("{path}.*"))?);
                    }
                }
                "items" | "prefixItems" | "additionalItems" => match &v {
                    Value::Array(list) => {
                        for (i, item) in list.iter().enumerate() {
                            items.push(self.node(item, &format!("{path}[{i}]"))?);
                        }
                    }
                    Value::Bool(false) => {}
                    _ => items.push(self.node(&v, &format!("{path}[]"))?),
                },
                "const" => {
                    if v.is_null() {
                        out.insert("nullable".into(), json!(true));
                    } else {
                        out.insert("enum".into(), json!([v]));
                    }
                }
                "enum" => {
                    let Value::Array(values) = v else {
                        return Err(self.unsupported(path, "`enum` must be a list"));
                    };
                    if values.iter().any(Value::is_null) {
                        out.insert("nullable".into(), json!(true));
                    }
                    let values: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
                    if !values.is_empty() {
                        out.insert(k, Value::Array(values));
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => match v {
                    Value::Bool(true) => {
                        out.insert(k, v);
                    }
                    Value::Number(n) => exclusive.push((k, n)),
                    _ => {}
                },
                "default" | "example" if v.is_null() => {}
                "nullable" | PRESERVE | INT_OR_STRING if v == Value::Bool(true) => {
                    out.insert(k, v);
                }
                "nullable" | PRESERVE | INT_OR_STRING => {}
                "required" => {
                    let Value::Array(names) = v else {
                        return Err(self.unsupported(path, "`required` must be a list of field names"));
                    };
                    let mut seen = Vec::new();
                    for n in names {
                        if n.is_string() && !seen.contains(&n) {
                            seen.push(n);
                        }
                    }
                    if !seen.is_empty() {
                        out.insert(k, Value::Array(seen));
                    }
                }
                _ if ANNOTATIONS.contains(&k.as_str()) || VALUE_KEYS.contains(&k.as_str()) => {
                    out.insert(k, v);
                }
                _ if EXTENSIONS.contains(&k.as_str()) => {
                    out.insert(k, v);
                }
                // Everything else (`x-rust-type`, unknown keywords) means nothing to the API server.
                _ => {}
            }
        }
        // JSON Schema's numeric exclusive bounds become OpenAPI 3.0's bound plus flag; the stricter bound wins.
        for (k, n) in exclusive {
            let (bound, lower) = if k == "exclusiveMinimum" { ("minimum", true) } else { ("maximum", false) };
            let x = n.as_f64().unwrap_or(0.0);
            let stricter_exists =
                out.get(bound).and_then(Value::as_f64).is_some_and(|b| if lower { b > x } else { b < x });
            if !stricter_exists {
                out.insert(bound.into(), Value::Number(n));
                out.insert(k, json!(true));
            }
        }
        if let Some(mut it) = (!items.is_empty()).then(|| items.into_iter()) {
            let first = it.next().unwrap_or_else(any_node);
            out.insert("items".into(), Value::Object(it.fold(first, union)));
        }
        if !pattern_props.is_empty() {
            if out.contains_key("properties") || out.contains_key("additionalProperties") {
                preserve_object(&mut out);
            } else {
                let mut it = pattern_props.into_iter();
                let first = it.next().unwrap_or_else(any_node);
                let values = it.fold(first, union);
                if is_any(&values) {
                    preserve_object(&mut out);
                } else {
                    out.insert("additionalProperties".into(), Value::Object(values));
                }
            }
        }
        if let Some(format) = out.get("format").and_then(Value::as_str).map(str::to_string)
            && !FORMATS.contains(&format.as_str())
        {
            out.remove("format");
            if format.starts_with("uint") && !out.contains_key("minimum") {
                out.insert("minimum".into(), json!(0));
            }
        }
        Ok(out)
    }

    /// Merges `other` into `out` as `allOf` does (a value must satisfy both); `out`'s annotations win.
    fn intersect(&self, out: &mut Node, other: Node, path: &str) -> Result<(), CrdError> {
        let mut other = other;
        if is_any(&other) {
            // Any value, perhaps with value validations (`{maxLength: 5}` beside a typed branch).
            other.remove(PRESERVE);
            if other.keys().all(|k| ANNOTATIONS.contains(&k.as_str())) {
                fill_annotations(out, &other);
                return Ok(());
            }
        }
        if out.keys().all(|k| ANNOTATIONS.contains(&k.as_str()) || k == PRESERVE) {
            // Any value (with a description, say) and `other`: what `other` accepts.
            let own = std::mem::replace(out, other);
            for (k, v) in own {
                if k != PRESERVE {
                    out.insert(k, v);
                }
            }
            finalize(out);
            return Ok(());
        }
        match (out.get("type").and_then(Value::as_str), other.get("type").and_then(Value::as_str)) {
            (Some(a), Some(b)) if a != b => {
                if (a, b) == ("number", "integer") {
                    out.insert("type".into(), json!("integer"));
                } else if (a, b) != ("integer", "number") {
                    return Err(self.unsupported(
                        path,
                        format!("the schema requires both type {a} and type {b} (allOf or $ref), which no value is"),
                    ));
                }
            }
            (None, Some(b)) => {
                out.insert("type".into(), json!(b));
            }
            _ => {}
        }
        for (k, v) in other {
            match k.as_str() {
                "type" => {}
                _ if ANNOTATIONS.contains(&k.as_str()) => {
                    out.entry(k).or_insert(v);
                }
                "properties" => {
                    let Value::Object(props) = v else { continue };
                    let mine = out.entry("properties").or_insert_with(|| json!({}));
                    if let Value::Object(mine) = mine {
                        for (name, p) in props {
                            let Value::Object(p) = p else { continue };
                            match mine.get_mut(&name) {
                                Some(Value::Object(existing)) => {
                                    self.intersect(existing, p, &format!("{path}.{name}"))?
                                }
                                _ => {
                                    mine.insert(name, Value::Object(p));
                                }
                            }
                        }
                    }
                }
                "items" | "additionalProperties" => {
                    let Value::Object(theirs) = v else { continue };
                    let sub = if k == "items" { format!("{path}[]") } else { format!("{path}.*") };
                    match out.get_mut(&k) {
                        Some(Value::Object(mine)) => self.intersect(mine, theirs, &sub)?,
                        _ => {
                            out.insert(k, Value::Object(theirs));
                        }
                    }
                }
                "required" => {
                    let mine = out.entry("required").or_insert_with(|| json!([]));
                    if let (Value::Array(mine), Value::Array(theirs)) = (mine, v) {
                        for n in theirs {
                            if !mine.contains(&n) {
                                mine.push(n);
                            }
                        }
                    }
                }
                "enum" => match out.get("enum").cloned() {
                    Some(Value::Array(mine)) => {
                        let theirs = v.as_array().cloned().unwrap_or_default();
                        let both: Vec<Value> = mine.into_iter().filter(|x| theirs.contains(x)).collect();
                        if both.is_empty() {
                            return Err(self.unsupported(path, "two enums that must both hold share no value"));
                        }
                        out.insert(k, Value::Array(both));
                    }
                    _ => {
                        out.insert(k, v);
                    }
                },
                "allOf" => {
                    if let Value::Array(list) = v {
                        push_all_of(out, list);
                    }
                }
                "anyOf" | "oneOf" => {
                    let mut wrapped = Node::new();
                    wrapped.insert(k, v);
                    push_all_of(out, vec![Value::Object(wrapped)]);
                }
                _ if VALUE_KEYS.contains(&k.as_str()) => match out.get(&k) {
                    None => {
                        out.insert(k, v);
                    }
                    Some(mine) if *mine == v => {}
                    Some(_) => {
                        let mut wrapped = Node::new();
                        wrapped.insert(k, v);
                        push_all_of(out, vec![Value::Object(wrapped)]);
                    }
                },
                _ => {
                    out.entry(k).or_insert(v);
                }
            }
        }
        finalize(out);
        Ok(())
    }
}

/// The elements of an `allOf`/`anyOf`/`oneOf`, or what is wrong with it.
fn branches(v: &Value) -> Result<&Vec<Value>, String> {
    match v {
        Value::Array(list) if !list.is_empty() => Ok(list),
        Value::Array(_) => Err("must not be empty".into()),
        other => Err(format!("must be a list of schemas, not {}", json_type(other))),
    }
}

/// A node that accepts any value.
fn any_node() -> Node {
    let mut n = Node::new();
    n.insert(PRESERVE.into(), json!(true));
    n
}

/// Whether `n` accepts any value: it preserves unknown fields and says nothing of type or shape.
fn is_any(n: &Node) -> bool {
    n.get(PRESERVE) == Some(&json!(true))
        && !n.contains_key("type")
        && !n.contains_key(INT_OR_STRING)
        && !n.contains_key("properties")
        && !n.contains_key("items")
        && !n.contains_key("additionalProperties")
}

/// Marks `n` as an object whose unknown fields are kept.
fn preserve_object(n: &mut Node) {
    n.insert(PRESERVE.into(), json!(true));
    if !n.contains_key("type") {
        n.insert("type".into(), json!("object"));
    }
}

/// Whether `v` is a schema of `null` alone: `{type: null}`, `{enum: [null]}`, `{const: null}`.
fn is_null_only(v: &Value) -> bool {
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
fn normalize_type(s: &mut Node) {
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
fn union(a: Node, b: Node) -> Node {
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
fn residue(branch: &Node, outer: &Node) -> Node {
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
fn add_alternatives(n: &mut Node, residues: Vec<Node>) {
    let list = Value::Array(residues.into_iter().map(Value::Object).collect());
    if n.contains_key("anyOf") {
        let mut wrapped = Node::new();
        wrapped.insert("anyOf".into(), list);
        push_all_of(n, vec![Value::Object(wrapped)]);
    } else {
        n.insert("anyOf".into(), list);
    }
}

fn push_all_of(n: &mut Node, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    let all = n.entry("allOf").or_insert_with(|| json!([]));
    if let Value::Array(all) = all {
        all.extend(items);
    }
}

/// Documents the values of an enum made of documented constants (`- \`one\`: First.`).
fn describe_variants(n: &mut Node, group: &[Node]) {
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

fn fill_annotations(out: &mut Node, from: &Node) {
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
fn finalize(n: &mut Node) {
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
