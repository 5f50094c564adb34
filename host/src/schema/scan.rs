//! Whether a spec holds a field its structural schema would prune, answered while the JSON text is read: no document is built for a spec that is clean.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::prune::{Field, ObjectRules, items};

/// Whether [`super::prune::prune`] would remove nothing from the JSON text `spec` under
/// `schema`. `true` only when `spec` is one JSON value that has no field the schema prunes;
/// `false` when it has one, and also when the text is not JSON or too deep to read, so that the
/// caller takes the path that builds the document and finds out which.
///
/// The rules are [`super::prune::prune`]'s, applied as the text is parsed: the first field the
/// schema does not know ends the read. A key written twice is read twice (a document keeps only
/// the last), which can only make the answer `false` where pruning would find nothing.
pub fn prunes_nothing(schema: &Value, spec: &str) -> bool {
    let mut de = serde_json::Deserializer::from_str(spec);
    Scan(schema).deserialize(&mut de).is_ok() && de.end().is_ok()
}

/// Reads one value under `.0`, its schema, failing at the first field the schema does not know.
struct Scan<'s>(&'s Value);

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match items(self.0) {
            Some(items) => while seq.next_element_seed(Scan(items))?.is_some() {},
            None => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(rules) = ObjectRules::of(self.0) else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(Key(key)) = map.next_key()? {
            match rules.field(&key) {
                Field::Walk(c) => map.next_value_seed(Scan(c))?,
                Field::Keep => map.next_value::<IgnoredAny>().map(drop)?,
                Field::Unknown => return Err(de::Error::custom("a field the schema does not know")),
            }
        }
        Ok(())
    }
}

/// An object's key, borrowed from the text unless it had escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }

            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::prune::prune;

    const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
    const EMBEDDED: &str = "x-kubernetes-embedded-resource";

    /// A schema with every rule pruning knows: properties, maps of objects and of anything,
    /// arrays of objects, kept unknown fields with known ones inside, an embedded resource.
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "steps": {"type": "array", "items": {"type": "object", "properties": {"tool": {"type": "string"}}}},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "servers": {"type": "object", "additionalProperties": {"type": "object", "properties": {"url": {"type": "string"}}}},
            "free": {"type": "object", "additionalProperties": true},
            "kept": {"type": "object", PRESERVE: true, "properties": {"inner": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            "template": {"type": "object", EMBEDDED: true, "properties": {"spec": {"type": "object", PRESERVE: true}}},
            "shapeless": {"description": "no type, no properties"},
            "odd": true
        }})
    }

    /// Whether pruning `spec` under `schema` removes nothing, the slow way.
    fn pruned_nothing(schema: &Value, spec: &str) -> bool {
        match serde_json::from_str::<Value>(spec) {
            Ok(mut v @ Value::Object(_)) => prune(schema, &mut v, "spec").is_empty(),
            _ => false,
        }
    }

    #[test]
    fn a_clean_spec_is_told_clean_and_a_spec_with_a_field_to_prune_is_not_at_any_depth() {
        let schema = schema();
        let cases = [
            // Clean: every field known, at every depth and through every rule.
            (r#"{}"#, true),
            (r#"{"name":"x","steps":[{"tool":"t"},{"tool":"u"}],"env":{"A":"1","B":"2"}}"#, true),
            (r#"{"servers":{"s":{"url":"u"},"t":{}},"free":{"x":{"y":[1,{"z":null}]}}}"#, true),
            (r#"{"kept":{"anything":{"deep":true},"inner":{"a":1}}}"#, true),
            (r#"{"template":{"apiVersion":"v1","kind":"K","metadata":{"name":"n"},"spec":{"x":1}}}"#, true),
            (r#"{"shapeless":{"a":{"b":1}},"odd":{"c":2}}"#, true),
            // Values of another shape than the schema says are left for validation.
            (r#"{"name":{"oops":1},"steps":"text","env":[1,{"a":1}]}"#, true),
            // Escapes in keys and values, numbers of every kind, white space.
            (" {\"n\\u0061me\" : \"x\\\"y\", \"steps\":[{\"tool\":-1.5e3}] } ", true),
            // A field to prune, at the top, in an array's item, in a map's value, inside a kept
            // object's known field, beside an embedded resource's kept fields.
            (r#"{"name":"x","zzz":1}"#, false),
            (r#"{"steps":[{"tool":"t"},{"tool":"u","input_schema":{}}]}"#, false),
            (r#"{"servers":{"s":{"url":"u","port":1}}}"#, false),
            (r#"{"kept":{"anything":1,"inner":{"a":1,"b":2}}}"#, false),
            (r#"{"template":{"apiVersion":"v1","other":1}}"#, false),
            // An escaped key the schema does not know.
            (r#"{"n\u0061mes":"x"}"#, false),
        ];
        for (spec, clean) in cases {
            assert_eq!(pruned_nothing(&schema, spec), clean, "the slow way disagrees with the case: {spec}");
            assert_eq!(prunes_nothing(&schema, spec), clean, "{spec}");
        }
    }

    #[test]
    fn text_that_is_not_one_json_value_is_not_told_clean() {
        let schema = schema();
        for spec in ["", "nope", r#"{"name":"x""#, r#"{"name":"x"} {}"#, r#"{"name":"x",}"#, &"[".repeat(200)] {
            assert!(!prunes_nothing(&schema, spec), "{spec}");
        }
    }

    #[test]
    fn a_schema_that_prunes_nothing_tells_every_json_value_clean() {
        for schema in [json!(true), json!({"type": "string"}), json!({"type": "object", PRESERVE: true})] {
            for spec in [r#"{"a":{"b":[1,2]}}"#, "[1]", "null", r#""x""#] {
                assert!(prunes_nothing(&schema, spec), "{schema} {spec}");
            }
        }
        assert!(!prunes_nothing(&json!({"type": "object"}), r#"{"a":1}"#));
    }
}
