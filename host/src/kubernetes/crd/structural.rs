//! Rewriting a plugin's spec schema into the structural form the API server requires.

use serde_json::{Map, Value, json};

use super::nodes::{
    add_alternatives, any_node, branches, describe_variants, fill_annotations, finalize, is_any, is_null_only,
    json_type, normalize_type, preserve_object, push_all_of, residue, union,
};
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
