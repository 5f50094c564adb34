//! Values of `env` and `headers`: a literal string, or a reference the host resolves.
//!
//! A reference is `{valueFrom: {secretKeyRef: {name, key, namespace?}}}` (a key of a
//! Kubernetes Secret), `{valueFrom: {file: PATH}}` or `{valueFrom: {env: VAR}}` (a file or an
//! environment variable of the host). The plugin only names where the value is: it never
//! reads it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use steward_sdk::{FieldError, SecretSource, SecretTarget, SecretValue};

use crate::names::dns1123_subdomain_problem;

/// One value of `env` or `headers`, once its shape is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueSource {
    /// A literal string, as in muster.
    Literal(String),
    /// A reference the host resolves when it starts or connects the server.
    Reference(SecretSource),
}

/// The shape of `value` at `path`: a string or one `valueFrom` reference; the error says what is wrong.
pub fn parse(value: &Value, path: &str) -> Result<ValueSource, FieldError> {
    let err = |p: &str, m: &str| Err(FieldError::new(p, m));
    let map = match value {
        Value::String(s) => return Ok(ValueSource::Literal(s.clone())),
        Value::Object(map) => map,
        other => {
            return err(
                path,
                &format!(
                    "invalid type: {}, expected a string or {{valueFrom: ...}}; quote numbers and booleans",
                    kind(other)
                ),
            );
        }
    };
    only_keys(map, &["valueFrom"], path)?;
    let Some(from) = map.get("valueFrom") else {
        return err(path, "a mapping here needs valueFrom: {secretKeyRef: ...}, {file: PATH} or {env: VAR}");
    };
    let from_path = format!("{path}.valueFrom");
    let Value::Object(from) = from else {
        return err(&from_path, "must be a mapping with one of secretKeyRef, file or env");
    };
    only_keys(from, &["secretKeyRef", "file", "env"], &from_path)?;
    if from.len() != 1 {
        return err(&from_path, "needs exactly one of secretKeyRef, file or env");
    }
    if let Some(r) = from.get("secretKeyRef") {
        let p = format!("{from_path}.secretKeyRef");
        let Value::Object(r) = r else {
            return err(&p, "must be a mapping {name, key, namespace?}");
        };
        only_keys(r, &["name", "key", "namespace"], &p)?;
        let name = required_string(r, "name", &p)?;
        if let Some(problem) = dns1123_subdomain_problem(&name) {
            return err(&format!("{p}.name"), &format!("the Secret's name {problem}"));
        }
        let key = required_string(r, "key", &p)?;
        if !key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return err(&format!("{p}.key"), "a Secret key holds only letters, digits, '-', '_' and '.'");
        }
        let namespace = match r.get("namespace") {
            None => None,
            Some(_) => {
                let ns = required_string(r, "namespace", &p)?;
                if let Some(problem) = dns1123_subdomain_problem(&ns) {
                    return err(&format!("{p}.namespace"), &format!("the namespace {problem}"));
                }
                Some(ns)
            }
        };
        return Ok(ValueSource::Reference(SecretSource::SecretKeyRef { name, namespace, key }));
    }
    if let Some(f) = from.get("file") {
        let p = format!("{from_path}.file");
        return match f {
            Value::String(s) if !s.trim().is_empty() => {
                Ok(ValueSource::Reference(SecretSource::File { path: s.clone() }))
            }
            _ => err(&p, "must be the path of a file, a non-empty string"),
        };
    }
    let p = format!("{from_path}.env");
    match from.get("env") {
        Some(Value::String(s)) if is_env_name(s) => Ok(ValueSource::Reference(SecretSource::Env { name: s.clone() })),
        _ => err(&p, "must be the name of an environment variable: a letter or '_', then letters, digits or '_'"),
    }
}

/// Splits a checked `env` or `headers` map into literals and references for the host.
/// Values that do not parse are left out (validation has already refused them).
pub fn split(
    values: &BTreeMap<String, Value>,
    target: SecretTarget,
    path: &str,
) -> (BTreeMap<String, String>, Vec<SecretValue>) {
    let mut literals = BTreeMap::new();
    let mut secrets = Vec::new();
    for (name, value) in values {
        match parse(value, &format!("{path}.{name}")) {
            Ok(ValueSource::Literal(s)) => {
                literals.insert(name.clone(), s);
            }
            Ok(ValueSource::Reference(source)) => secrets.push(SecretValue { target, name: name.clone(), source }),
            Err(_) => {}
        }
    }
    (literals, secrets)
}

/// The errors of every value of `values`, at `path.NAME`.
pub fn errors(values: &BTreeMap<String, Value>, path: &str) -> Vec<FieldError> {
    values.iter().filter_map(|(name, v)| parse(v, &format!("{path}.{name}")).err()).collect()
}

fn only_keys(map: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), FieldError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => {
            Err(FieldError::new(format!("{path}.{k}"), format!("unknown field {k:?}; expected {}", allowed.join(", "))))
        }
        None => Ok(()),
    }
}

fn required_string(map: &Map<String, Value>, field: &str, path: &str) -> Result<String, FieldError> {
    match map.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(FieldError::new(format!("{path}.{field}"), "must be a non-empty string")),
        None => Err(FieldError::new(format!("{path}.{field}"), "is required")),
    }
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> ValueSource {
        parse(&v, "spec.env.X").unwrap()
    }

    fn bad(v: Value) -> FieldError {
        parse(&v, "spec.env.X").unwrap_err()
    }

    #[test]
    fn literals_and_the_three_references() {
        assert_eq!(ok(json!("v")), ValueSource::Literal("v".into()));
        assert_eq!(
            ok(json!({"valueFrom": {"secretKeyRef": {"name": "gh", "key": "token"}}})),
            ValueSource::Reference(SecretSource::SecretKeyRef {
                name: "gh".into(),
                namespace: None,
                key: "token".into()
            })
        );
        assert_eq!(
            ok(json!({"valueFrom": {"secretKeyRef": {"name": "gh", "key": "t", "namespace": "ops"}}})),
            ValueSource::Reference(SecretSource::SecretKeyRef {
                name: "gh".into(),
                namespace: Some("ops".into()),
                key: "t".into()
            })
        );
        assert_eq!(
            ok(json!({"valueFrom": {"file": "/run/token"}})),
            ValueSource::Reference(SecretSource::File { path: "/run/token".into() })
        );
        assert_eq!(
            ok(json!({"valueFrom": {"env": "GH_TOKEN"}})),
            ValueSource::Reference(SecretSource::Env { name: "GH_TOKEN".into() })
        );
    }

    #[test]
    fn every_wrong_shape_names_its_field() {
        let cases = [
            (json!(3), "spec.env.X", "quote numbers"),
            (json!({"value": "x"}), "spec.env.X.value", "unknown field"),
            (json!({}), "spec.env.X", "needs valueFrom"),
            (json!({"valueFrom": "x"}), "spec.env.X.valueFrom", "mapping"),
            (json!({"valueFrom": {}}), "spec.env.X.valueFrom", "exactly one"),
            (json!({"valueFrom": {"file": "a", "env": "B"}}), "spec.env.X.valueFrom", "exactly one"),
            (
                json!({"valueFrom": {"secretKeyRef": {"name": "gh"}}}),
                "spec.env.X.valueFrom.secretKeyRef.key",
                "required",
            ),
            (
                json!({"valueFrom": {"secretKeyRef": {"name": "Gh", "key": "k"}}}),
                "spec.env.X.valueFrom.secretKeyRef.name",
                "lowercase",
            ),
            (
                json!({"valueFrom": {"secretKeyRef": {"name": "g", "key": "a/b"}}}),
                "spec.env.X.valueFrom.secretKeyRef.key",
                "letters",
            ),
            (
                json!({"valueFrom": {"secretKeyRef": {"name": "g", "key": "k", "optional": true}}}),
                "spec.env.X.valueFrom.secretKeyRef.optional",
                "unknown",
            ),
            (json!({"valueFrom": {"file": ""}}), "spec.env.X.valueFrom.file", "path"),
            (json!({"valueFrom": {"env": "1X"}}), "spec.env.X.valueFrom.env", "environment variable"),
        ];
        for (v, path, msg) in cases {
            let e = bad(v.clone());
            assert_eq!(e.path, path, "{v}");
            assert!(e.message.contains(msg), "{v}: {}", e.message);
        }
    }

    #[test]
    fn split_keeps_literals_and_names_references() {
        let values: BTreeMap<String, Value> = serde_json::from_value(json!({
            "A": "1", "TOKEN": {"valueFrom": {"env": "GH_TOKEN"}}, "BAD": 3
        }))
        .unwrap();
        let (lit, sec) = split(&values, SecretTarget::Env, "spec.env");
        assert_eq!(lit.len(), 1);
        assert_eq!(
            sec,
            [SecretValue {
                target: SecretTarget::Env,
                name: "TOKEN".into(),
                source: SecretSource::Env { name: "GH_TOKEN".into() }
            }]
        );
    }
}
