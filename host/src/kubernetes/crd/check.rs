//! The API server's structural-schema rules, checked before a CRD is handed out.

use serde_json::{Value, json};

use super::nodes::json_type;
use super::{CRD_SCHEMA_KEYS, EXTENSIONS, INT_OR_STRING, Node, PRESERVE};

/// Checks `schema` (a CRD's `openAPIV3Schema`) against the API server's rules for structural
/// schemas: every node has a `type` (object, array, string, integer, number or boolean) unless it
/// has `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`; no `$ref` and no
/// other key the API server refuses; no `additionalProperties` beside `properties`, none `false`;
/// only value validations inside `allOf`/`anyOf`/`oneOf`/`not`, on fields the structure outside
/// also has; no key a CRD schema does not know (the API server would drop it silently).
///
/// Returns every problem, each as `path: what`, the path written as the API server writes it
/// (`openAPIV3Schema.properties[spec].properties[steps].items`).
pub fn check_structural(schema: &Value) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_node(schema, "openAPIV3Schema", &mut problems);
    if let Some(t) = schema.get("type").and_then(Value::as_str)
        && t != "object"
    {
        problems.push(format!("openAPIV3Schema.type: the root must be an object, not {t}"));
    }
    if let Some(meta) = schema.get("properties").and_then(|p| p.get("metadata")).and_then(Value::as_object) {
        for (k, v) in meta {
            let fine = match k.as_str() {
                "type" => v == "object",
                "properties" => v.as_object().is_some_and(|p| p.keys().all(|n| n == "name" || n == "generateName")),
                _ => false,
            };
            if !fine {
                problems.push(format!(
                    "openAPIV3Schema.properties[metadata].{k}: only restrictions of metadata.name and metadata.generateName are allowed"
                ));
            }
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

fn check_node(v: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(n) = v.as_object() else {
        problems.push(format!("{path}: must be a schema object, not {}", json_type(v)));
        return;
    };
    check_keys(n, path, problems);
    let preserve = n.get(PRESERVE) == Some(&json!(true));
    let int_or_string = n.get(INT_OR_STRING) == Some(&json!(true));
    match n.get("type") {
        None if !preserve && !int_or_string => problems.push(format!(
            "{path}.type: must not be empty (or set x-kubernetes-preserve-unknown-fields or x-kubernetes-int-or-string)"
        )),
        None => {}
        Some(Value::String(t))
            if ["object", "array", "string", "integer", "number", "boolean"].contains(&t.as_str()) =>
        {
            if int_or_string {
                problems.push(format!("{path}.type: must be empty with x-kubernetes-int-or-string"));
            }
            if t == "array" && !n.contains_key("items") {
                problems.push(format!("{path}.items: must be specified for an array"));
            }
        }
        Some(other) => {
            problems.push(format!("{path}.type: {other} is not one of object, array, string, integer, number, boolean"))
        }
    }
    if n.get("default") == Some(&Value::Null) && n.get("nullable") != Some(&json!(true)) {
        problems.push(format!("{path}.default: null is only allowed on a nullable field"));
    }
    if let Some(props) = n.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (k, p) in props {
                    check_node(p, &format!("{path}.properties[{k}]"), problems);
                }
            }
            None => problems.push(format!("{path}.properties: must be a mapping of schemas")),
        }
    }
    match n.get("additionalProperties") {
        None => {}
        Some(Value::Bool(false)) => problems
            .push(format!("{path}.additionalProperties: must not be false (unknown fields are pruned without it)")),
        Some(_) if n.contains_key("properties") => problems
            .push(format!("{path}.additionalProperties: additionalProperties and properties are mutually exclusive")),
        Some(Value::Bool(true)) => {}
        Some(ap) => check_node(ap, &format!("{path}.additionalProperties"), problems),
    }
    match n.get("items") {
        None => {}
        Some(Value::Object(_)) => check_node(&n["items"], &format!("{path}.items"), problems),
        Some(_) => problems.push(format!("{path}.items: must be a schema object, not a list")),
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        match n.get(j) {
            None => {}
            Some(Value::Array(list)) => {
                for (i, b) in list.iter().enumerate() {
                    check_value_validation(b, n, &format!("{path}.{j}[{i}]"), int_or_string && j == "anyOf", problems);
                }
            }
            Some(_) => problems.push(format!("{path}.{j}: must be a list of schemas")),
        }
    }
    if let Some(not) = n.get("not") {
        check_value_validation(not, n, &format!("{path}.not"), false, problems);
    }
}

/// Keys the API server refuses anywhere, and keys a CRD schema does not know.
fn check_keys(n: &Node, path: &str, problems: &mut Vec<String>) {
    for (k, v) in n {
        let refused = match k.as_str() {
            "$ref" => Some("$ref is not supported; inline the definition"),
            "$schema" | "id" | "definitions" | "dependencies" | "additionalItems" | "patternProperties" => {
                Some("is not supported in a structural schema")
            }
            "uniqueItems" if v == &json!(true) => Some(
                "cannot be true (the API server refuses it: its cost is quadratic); check uniqueness in the plugin",
            ),
            PRESERVE if v != &json!(true) => Some("must be true or absent"),
            _ if !CRD_SCHEMA_KEYS.contains(&k.as_str()) => Some("is not a field of a CRD schema"),
            _ => None,
        };
        if let Some(why) = refused {
            problems.push(format!("{path}.{k}: {why}"));
        }
    }
}

/// A node inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only, on fields `structure` has.
fn check_value_validation(
    v: &Value,
    structure: &Node,
    path: &str,
    int_or_string_pattern: bool,
    problems: &mut Vec<String>,
) {
    let Some(n) = v.as_object() else {
        problems.push(format!("{path}: must be a schema object"));
        return;
    };
    check_keys(n, path, problems);
    for k in ["type", "description", "title", "default", "nullable", "additionalProperties"]
        .into_iter()
        .chain(EXTENSIONS.iter().copied())
        .chain([PRESERVE, INT_OR_STRING])
    {
        if !n.contains_key(k) {
            continue;
        }
        let int_or_string_type = int_or_string_pattern
            && k == "type"
            && n.len() == 1
            && matches!(n.get("type").and_then(Value::as_str), Some("integer" | "string"));
        if !int_or_string_type {
            problems.push(format!("{path}.{k}: must not be set inside allOf, anyOf, oneOf or not"));
        }
    }
    if let Some(props) = n.get("properties").and_then(Value::as_object) {
        let outer_props = structure.get("properties").and_then(Value::as_object);
        let outer_values = structure.get("additionalProperties").and_then(Value::as_object);
        for (k, p) in props {
            let sub = format!("{path}.properties[{k}]");
            match outer_props.and_then(|o| o.get(k)).and_then(Value::as_object).or(outer_values) {
                Some(s) => check_value_validation(p, s, &sub, false, problems),
                None => problems.push(format!("{sub}: must also be specified outside allOf, anyOf, oneOf and not")),
            }
        }
    }
    if let Some(items) = n.get("items") {
        match structure.get("items").and_then(Value::as_object) {
            Some(s) => check_value_validation(items, s, &format!("{path}.items"), false, problems),
            None => problems.push(format!("{path}.items: must also be specified outside allOf, anyOf, oneOf and not")),
        }
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = n.get(j) {
            for (i, b) in list.iter().enumerate() {
                check_value_validation(b, structure, &format!("{path}.{j}[{i}]"), false, problems);
            }
        }
    }
    if let Some(not) = n.get("not") {
        check_value_validation(not, structure, &format!("{path}.not"), false, problems);
    }
}
