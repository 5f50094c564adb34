//! JSON log lines: one object per event, with unique keys, typed values, and no credentials in any string.
//!
//! `tracing-subscriber`'s own JSON format writes an event's field named like a key it adds
//! itself (`message`, `level`…) a second time, and a list recorded with `?` as a string that
//! looks like an array. Both trip strict parsers, so the host formats its JSON lines here.

use std::fmt;

use serde_json::{Map, Number, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::sanitize::redact_credentials;

/// Keys the line itself has; an event's field of one of these names is written as `fields.NAME`.
const LINE_KEYS: [&str; 5] = ["timestamp", "level", "target", "span", "spans"];

/// Formats each event as one JSON object on one line: `timestamp`, `level`, `target`, the
/// event's fields (its text as `message`), `span` (the innermost span's name and fields) and
/// `spans` (every span from the root). Keys are unique: a second field of a name already
/// present is written as `NAME.2` (then `.3`…), never dropped. Numbers and booleans stay typed, a
/// list recorded with `?` whose text is a JSON array of scalars is written as that array, and
/// every string has credentials removed ([`redact_credentials`]).
pub(super) struct JsonLines;

/// Records a span's fields as a JSON object, typed and redacted as [`JsonLines`] writes events.
pub(super) struct JsonSpanFields;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        event.record(&mut Fields::new(&mut line, &LINE_KEYS));
        line.insert("timestamp".into(), Value::String(timestamp()));
        line.insert("level".into(), Value::String(meta.level().as_str().into()));
        line.insert("target".into(), Value::String(meta.target().into()));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| {
                    let mut fields = span
                        .extensions()
                        .get::<FormattedFields<N>>()
                        .and_then(|f| serde_json::from_str::<Map<String, Value>>(&f.fields).ok())
                        .unwrap_or_default();
                    // Redacted again as written: a secret may have become known after the
                    // span recorded it.
                    for v in fields.values_mut() {
                        redact_value(v);
                    }
                    if let Some(name) = fields.remove("name") {
                        fields.insert("fields.name".into(), name);
                    }
                    fields.insert("name".into(), Value::String(span.name().into()));
                    Value::Object(fields)
                })
                .collect();
            if let Some(innermost) = spans.last() {
                line.insert("span".into(), innermost.clone());
            }
            line.insert("spans".into(), Value::Array(spans));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

impl<'w> FormatFields<'w> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut map = Map::new();
        fields.record(&mut Fields::new(&mut map, &[]));
        write!(writer, "{}", Value::Object(map))
    }

    /// A value recorded later (`span.record`) replaces the one the span had.
    fn add_fields(&self, current: &'w mut FormattedFields<Self>, fields: &tracing::span::Record<'_>) -> fmt::Result {
        let mut map: Map<String, Value> = serde_json::from_str(&current.fields).unwrap_or_default();
        let mut recorded = Map::new();
        fields.record(&mut Fields::new(&mut recorded, &[]));
        map.extend(recorded);
        current.fields = Value::Object(map).to_string();
        Ok(())
    }
}

/// The current time as the text log writes it (RFC 3339, UTC, microseconds).
fn timestamp() -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; a clock before 1970 is written as SystemTime writes it.
    let _ = SystemTime.format_time(&mut Writer::new(&mut out));
    out
}

/// A JSON line of `level` with `message` alone, as [`JsonLines`] writes an event outside any
/// span: for what is printed before or after the log exists (a fatal error at start).
pub fn line(level: tracing::Level, target: &str, message: &str) -> String {
    let mut line = Map::new();
    line.insert("timestamp".into(), Value::String(timestamp()));
    line.insert("level".into(), Value::String(level.as_str().into()));
    line.insert("target".into(), Value::String(target.into()));
    line.insert("message".into(), Value::String(redact_credentials(message)));
    Value::Object(line).to_string()
}

/// A visitor writing fields into `map` under unique keys.
struct Fields<'a> {
    map: &'a mut Map<String, Value>,
    /// Names taken by the line itself.
    taken: &'a [&'a str],
}

impl<'a> Fields<'a> {
    fn new(map: &'a mut Map<String, Value>, taken: &'a [&'a str]) -> Self {
        Self { map, taken }
    }

    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        let base = if self.taken.contains(&name) { format!("fields.{name}") } else { name.to_string() };
        let mut key = base.clone();
        let mut n = 2;
        while self.map.contains_key(&key) {
            key = format!("{base}.{n}");
            n += 1;
        }
        self.map.insert(key, value);
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        // NaN and the infinities are not JSON numbers.
        let v = Number::from_f64(value).map_or_else(|| Value::String(value.to_string()), Value::Number);
        self.put(field, v);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(redact_credentials(value)));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(redact_credentials(&value.to_string())));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, typed(format!("{value:?}")));
    }
}

/// Removes credentials from every string in `v` (a span's field, kept from when it was recorded).
fn redact_value(v: &mut Value) {
    match v {
        Value::String(s) => {
            let clean = redact_credentials(s);
            if clean != *s {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

/// `text` (a value's `Debug` or `Display`) as a JSON value: an array when it is the text of a
/// list of strings, numbers or booleans (`?kinds` of a `Vec<String>`), else a string.
fn typed(text: String) -> Value {
    if text.starts_with('[')
        && text.ends_with(']')
        && let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&text)
        && items.iter().all(|v| v.is_string() || v.is_number() || v.is_boolean())
    {
        return Value::Array(
            items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Value::String(redact_credentials(&s)),
                    other => other,
                })
                .collect(),
        );
    }
    Value::String(redact_credentials(&text))
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
