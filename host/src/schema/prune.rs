//! Structural pruning: drops the fields of a value that its structural schema does not know, as a Kubernetes API server prunes a custom resource.

use std::fmt::Write;

use serde_json::Value;

/// The schema key that keeps an object's unknown fields.
const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
/// The schema key of an embedded resource, which keeps `apiVersion`, `kind` and `metadata`.
const EMBEDDED: &str = "x-kubernetes-embedded-resource";

/// Removes from `value` every field that `schema` (a structural schema, as
/// [`crate::kubernetes::crd::structural_schema`] makes it) does not know, and returns the path
/// of each removed field, `path` first (`spec.steps[0].input_schema`), sorted.
///
/// As the API server does: a field of an object is known when the schema lists it in
/// `properties`, or when the schema holds a map (`additionalProperties`, whose value schema then
/// applies to it); `x-kubernetes-preserve-unknown-fields: true` keeps an object's unknown fields
/// (known ones are still pruned inside); an embedded resource keeps `apiVersion`, `kind` and
/// `metadata`; each item of an array is pruned by `items`. A value whose shape the schema does
/// not describe (an object where the schema wants a string) is left whole for the plugin's own
/// validation to report.
pub fn prune(schema: &Value, value: &mut Value, path: &str) -> Vec<String> {
    let mut pruned = Vec::new();
    walk(schema, value, &mut path.to_string(), &mut pruned);
    pruned.sort();
    pruned
}

/// What an object's schema says of its fields, read once per object: the rules both [`prune`]
/// and [`super::scan::prunes_nothing`] apply, so that the two cannot differ.
pub(super) struct ObjectRules<'s> {
    props: Option<&'s serde_json::Map<String, Value>>,
    additional: Option<&'s Value>,
    preserve: bool,
    embedded: bool,
}

/// What becomes of one field of an object.
pub(super) enum Field<'s> {
    /// Known: its value is pruned by this schema.
    Walk(&'s Value),
    /// Kept whole: unknown fields are preserved, or it is an embedded resource's own.
    Keep,
    /// Pruned.
    Unknown,
}

impl<'s> ObjectRules<'s> {
    /// The rules of `schema` for an object's fields; `None` when the schema describes no object
    /// (not an object itself, or without `type: object`, `properties` or `additionalProperties`),
    /// so that nothing inside is pruned.
    pub(super) fn of(schema: &'s Value) -> Option<Self> {
        let s = schema.as_object()?;
        let props = s.get("properties").and_then(Value::as_object);
        let additional = s.get("additionalProperties");
        let is_object = s.get("type").and_then(Value::as_str) == Some("object");
        if !is_object && props.is_none() && additional.is_none() {
            return None;
        }
        let preserve =
            s.get(PRESERVE).and_then(Value::as_bool).unwrap_or(false) || matches!(additional, Some(Value::Bool(true)));
        let embedded = s.get(EMBEDDED).and_then(Value::as_bool).unwrap_or(false);
        Some(Self { props, additional, preserve, embedded })
    }

    /// What becomes of the field `key`.
    pub(super) fn field(&self, key: &str) -> Field<'s> {
        let child = self.props.and_then(|p| p.get(key)).or(self.additional.filter(|a| a.is_object()));
        match child {
            Some(c) => Field::Walk(c),
            None if self.preserve || (self.embedded && matches!(key, "apiVersion" | "kind" | "metadata")) => {
                Field::Keep
            }
            None => Field::Unknown,
        }
    }
}

/// The schema of an array's items, when `schema` gives one.
pub(super) fn items(schema: &Value) -> Option<&Value> {
    schema.as_object()?.get("items")
}

/// Prunes `value` under `schema`; `path` is the value's path, which the walk extends for each
/// field and item it enters and gives back as it was.
fn walk(schema: &Value, value: &mut Value, path: &mut String, pruned: &mut Vec<String>) {
    let at = path.len();
    match value {
        Value::Object(fields) => {
            let Some(rules) = ObjectRules::of(schema) else { return };
            let mut unknown = Vec::new();
            for (key, v) in fields.iter_mut() {
                match rules.field(key) {
                    Field::Walk(c) => {
                        path.push('.');
                        path.push_str(key);
                        walk(c, v, path, pruned);
                        path.truncate(at);
                    }
                    Field::Keep => {}
                    Field::Unknown => unknown.push(key.clone()),
                }
            }
            for key in unknown {
                fields.remove(&key);
                pruned.push(format!("{path}.{key}"));
            }
        }
        Value::Array(list) => {
            if let Some(item_schema) = items(schema) {
                for (i, v) in list.iter_mut().enumerate() {
                    let _ = write!(path, "[{i}]");
                    walk(item_schema, v, path, pruned);
                    path.truncate(at);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(schema: Value, mut value: Value) -> (Value, Vec<String>) {
        let pruned = prune(&schema, &mut value, "spec");
        (value, pruned)
    }

    #[test]
    fn unknown_fields_go_and_known_ones_stay_at_every_depth() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "steps": {"type": "array", "items": {"type": "object", "properties": {"tool": {"type": "string"}}}},
            "inner": {"type": "object", "properties": {"a": {"type": "integer"}}}
        }});
        let (v, pruned) = run(
            schema,
            json!({"name": "x", "extra": 1, "steps": [{"tool": "t"}, {"tool": "u", "input_schema": {}}],
                   "inner": {"a": 1, "b": 2}}),
        );
        assert_eq!(v, json!({"name": "x", "steps": [{"tool": "t"}, {"tool": "u"}], "inner": {"a": 1}}));
        assert_eq!(pruned, ["spec.extra", "spec.inner.b", "spec.steps[1].input_schema"]);
    }

    #[test]
    fn maps_keep_their_keys_and_prune_inside_their_values() {
        let schema = json!({"type": "object", "properties": {
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "servers": {"type": "object", "additionalProperties": {"type": "object", "properties": {"url": {"type": "string"}}}},
            "free": {"type": "object", "additionalProperties": true}
        }});
        let (v, pruned) = run(
            schema,
            json!({"env": {"A": "1", "B": "2"}, "servers": {"s": {"url": "u", "port": 1}}, "free": {"x": {"y": 1}}}),
        );
        assert_eq!(v, json!({"env": {"A": "1", "B": "2"}, "servers": {"s": {"url": "u"}}, "free": {"x": {"y": 1}}}));
        assert_eq!(pruned, ["spec.servers.s.port"]);
    }

    #[test]
    fn preserve_unknown_fields_keeps_them_but_prunes_known_ones_inside() {
        let schema = json!({"type": "object", PRESERVE: true, "properties": {
            "known": {"type": "object", "properties": {"a": {"type": "string"}}}
        }});
        let (v, pruned) = run(schema, json!({"anything": {"deep": true}, "known": {"a": "x", "b": 1}}));
        assert_eq!(v, json!({"anything": {"deep": true}, "known": {"a": "x"}}));
        assert_eq!(pruned, ["spec.known.b"]);
    }

    #[test]
    fn an_object_without_fields_in_its_schema_loses_them_all_unless_preserved_or_embedded() {
        let (v, pruned) = run(json!({"type": "object"}), json!({"a": 1}));
        assert_eq!((v, pruned), (json!({}), vec!["spec.a".to_string()]));
        let embedded = json!({"type": "object", EMBEDDED: true, PRESERVE: true});
        let (v, pruned) = run(embedded, json!({"apiVersion": "v1", "kind": "K", "metadata": {}, "spec": {}}));
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "K", "metadata": {}, "spec": {}}));
        assert!(pruned.is_empty());
        let embedded =
            json!({"type": "object", EMBEDDED: true, "properties": {"spec": {"type": "object", PRESERVE: true}}});
        let (_, pruned) = run(embedded, json!({"apiVersion": "v1", "kind": "K", "spec": {"x": 1}, "other": 1}));
        assert_eq!(pruned, ["spec.other"]);
    }

    #[test]
    fn values_of_another_shape_than_the_schema_says_are_left_for_validation() {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "list": {"type": "string"}}});
        let (v, pruned) = run(schema, json!({"name": {"oops": 1}, "list": [1, {"a": 1}]}));
        assert_eq!(v, json!({"name": {"oops": 1}, "list": [1, {"a": 1}]}));
        assert!(pruned.is_empty());
    }

    #[test]
    fn scalars_nulls_and_a_schema_that_is_not_an_object_prune_nothing() {
        assert!(run(json!({"type": "object"}), json!(null)).1.is_empty());
        assert!(run(json!(true), json!({"a": 1})).1.is_empty());
        let (v, pruned) = run(
            json!({"type": "object", "properties": {"a": {"type": "integer", "nullable": true}}}),
            json!({"a": null}),
        );
        assert_eq!((v, pruned), (json!({"a": null}), vec![]));
    }
}
