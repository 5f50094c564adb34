//! One service's secret values kept out of what its child and its server send: text, and every string of a JSON value.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

#[cfg(doc)]
use crate::sanitize::REDACTED;

/// Replaces a service's secret values (every value of its current and recent starts or
/// connects) by [`REDACTED`]. Cheap to clone; its `Debug` never shows the values.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// Non-blank, distinct, longest first (a value that contains another goes whole).
    values: Arc<[String]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} values)", self.values.len())
    }
}

impl Redactor {
    /// A redactor of `values` (blank ones are ignored).
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a String>) -> Self {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.trim().is_empty()).cloned().collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Self { values: values.into() }
    }

    /// Whether it has nothing to redact.
    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The length of the longest value, in bytes; 0 when there is none.
    pub(crate) fn longest(&self) -> usize {
        self.values.first().map_or(0, String::len)
    }

    /// Whether `text` holds a value.
    pub(crate) fn found_in(&self, text: &str) -> bool {
        self.values.iter().any(|v| text.contains(v.as_str()))
    }

    /// `text` with every value replaced (values that overlap or touch go together, so no part
    /// of either is left); borrowed when it holds none.
    pub(crate) fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        crate::sanitize::replace_all(text, self.values.iter().map(String::as_str))
    }

    /// Replaces every value in every string and object key of `value`; true when anything changed.
    pub(crate) fn json(&self, value: &mut Value) -> bool {
        if self.is_empty() {
            return false;
        }
        match value {
            Value::String(s) => match self.text(s) {
                Cow::Owned(clean) => {
                    *s = clean;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items.iter_mut().fold(false, |changed, v| self.json(v) | changed),
            Value::Object(map) => {
                let mut changed = false;
                if map.keys().any(|k| self.found_in(k)) {
                    *map = std::mem::take(map).into_iter().map(|(k, v)| (self.text(&k).into_owned(), v)).collect();
                    changed = true;
                }
                map.values_mut().fold(changed, |changed, v| self.json(v) | changed)
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_go_from_text_and_from_every_string_and_key_of_json() {
        let values = ["tok-123".to_string(), "tok-123-longer".to_string(), "  ".to_string()];
        let r = Redactor::new(&values);
        assert_eq!(r.text("a tok-123-longer and tok-123"), "a <redacted> and <redacted>");
        assert!(matches!(r.text("clean"), Cow::Borrowed("clean")));
        // Two values overlapping in the text go as one: no fragment of either is left.
        let both = Redactor::new(&["abcd1234".to_string(), "1234wxyz".to_string()]);
        assert_eq!(both.text("x abcd1234wxyz y"), "x <redacted> y");
        assert!(r.found_in("xtok-123x") && !r.found_in("tok-12"));
        let mut v = json!({"description": "uses tok-123", "properties": {"tok-123": {"enum": ["tok-123", 1, null]}}});
        assert!(r.json(&mut v));
        assert_eq!(
            v,
            json!({"description": "uses <redacted>", "properties": {"<redacted>": {"enum": ["<redacted>", 1, null]}}})
        );
        assert!(!r.json(&mut v), "nothing left to change");
        assert_eq!(format!("{r:?}"), "Redactor(2 values)");
    }
}
