use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tracing_subscriber::prelude::*;

use super::*;

/// What the layer wrote, line by line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with the JSON log layer as the thread's subscriber; every line it wrote.
fn log(f: impl FnOnce()) -> Vec<String> {
    let out = Captured::default();
    let writer = out.clone();
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(JsonSpanFields)
        .event_format(JsonLines)
        .with_writer(move || writer.clone());
    let guard = crate::telemetry::capture::install(tracing_subscriber::registry().with(layer));
    f();
    drop(guard);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    text.lines().map(str::to_string).collect()
}

/// A JSON value read by a parser that refuses duplicate keys, as strict log pipelines do.
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(A::Error::custom(format!("duplicate key `{key}`")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
}

/// Each line parsed strictly, then as a value.
fn parsed(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Strict>(l).unwrap_or_else(|e| panic!("not strict JSON ({e}): {l}"));
            serde_json::from_str(l).unwrap()
        })
        .collect()
}

#[test]
fn a_field_named_like_a_key_of_the_line_is_kept_under_a_key_of_its_own() {
    let lines = log(|| {
        tracing::info!(message = "the child's last words", level = 3, target = "x", "service phase changed");
    });
    let v = &parsed(&lines)[0];
    assert_eq!(v["message"], "service phase changed", "{v}");
    assert_eq!(v["message.2"], "the child's last words", "{v}");
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["fields.level"], 3);
    assert_eq!(v["fields.target"], "x");
    assert!(v["target"].as_str().unwrap().starts_with("steward"), "{v}");
    assert!(v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
}

#[test]
fn numbers_booleans_and_lists_are_typed_and_strings_are_redacted() {
    let kinds = vec!["MCPServer".to_string(), "Workflow".to_string()];
    let ports = [80u16, 443];
    let lines = log(|| {
        tracing::info!(
            attempt = 2u32,
            delta = -1i64,
            ratio = 0.5f64,
            nan = f64::NAN,
            healthy = true,
            kinds = ?kinds,
            ports = ?ports,
            error = "GET http://alice:s3cr3t@example.com/x?token=abc failed",
            nested = ?vec![vec![1]],
            "plugin loaded"
        );
    });
    let v = &parsed(&lines)[0];
    assert_eq!(v["attempt"], 2);
    assert_eq!(v["delta"], -1);
    assert_eq!(v["ratio"], 0.5);
    assert_eq!(v["nan"], "NaN");
    assert_eq!(v["healthy"], true);
    assert_eq!(v["kinds"], serde_json::json!(["MCPServer", "Workflow"]));
    assert_eq!(v["ports"], serde_json::json!([80, 443]));
    let error = v["error"].as_str().unwrap();
    assert!(!error.contains("s3cr3t") && !error.contains("abc"), "{error}");
    assert!(error.contains("example.com"), "{error}");
    // Not a list of scalars: left as its text.
    assert_eq!(v["nested"], "[[1]]");
}

#[test]
fn spans_carry_their_fields_typed_including_those_recorded_later() {
    let lines = log(|| {
        let outer = tracing::info_span!("reconcile", kind = "Noop", name = "clash", attempt = tracing::field::Empty);
        let _o = outer.enter();
        outer.record("attempt", 1u32);
        let inner = tracing::info_span!("plugin_call", op = "reconcile");
        let _i = inner.enter();
        tracing::warn!("inside");
    });
    let v = &parsed(&lines)[0];
    assert_eq!(v["span"]["name"], "plugin_call", "{v}");
    let spans = v["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0]["name"], "reconcile");
    assert_eq!(spans[0]["fields.name"], "clash");
    assert_eq!(spans[0]["attempt"], 1, "a recorded number stays a number: {v}");
    assert_eq!(spans[1]["op"], "reconcile");
}

#[test]
fn a_line_made_outside_the_log_has_the_same_shape() {
    let l = line(tracing::Level::ERROR, "steward", "cannot listen on 127.0.0.1:1: address in use; token=abc");
    let v = &parsed(&[l])[0];
    assert_eq!(v["level"], "ERROR");
    assert_eq!(v["target"], "steward");
    assert_eq!(v["message"], "cannot listen on 127.0.0.1:1: address in use; token=***");
}

#[test]
fn a_span_field_recorded_before_its_secret_was_known_is_redacted_when_written() {
    let secret = "late-known-s3cr3t-4711";
    let hidden = crate::sanitize::Hidden::new();
    let lines = log(|| {
        let span = tracing::info_span!("service", banner = format!("hello {secret}"));
        let _in = span.enter();
        hidden.set(&[secret.to_string()]);
        tracing::info!("inside");
    });
    drop(hidden);
    let v = &parsed(&lines)[0];
    let banner = v["span"]["banner"].as_str().unwrap();
    assert!(!banner.contains(secret) && banner.contains(crate::sanitize::REDACTED), "{v}");
}
