//! The secret values the host read for its services, kept out of every text it sanitizes (the log's lines included) while the services that read them live.
//!
//! A value may reach text the host does not write itself: a library's log line that quotes
//! what a server sent (rmcp logs a server's `serverInfo` and notifications), a child's output.
//! Each supervisor registers the values of its service in a [`Hidden`]; [`redact`] replaces
//! them, raw or as JSON and Rust debug output escape them, in whatever text it is given, and
//! [`super::sanitize`] and [`super::redact_credentials`] (the log's writer) call it first.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// What stands in text for a secret value.
pub const REDACTED: &str = "<redacted>";

/// Values shorter than this (in bytes) are not looked for in every text: a value of one to
/// three characters (`1`, `yes`) would cut up every line of the log. Each service still
/// redacts all of its own values from what its child and its server send (see
/// `services::redact`).
pub const MIN_LEN: usize = 4;

/// The values of every live holder, by holder.
static HOLDERS: Mutex<BTreeMap<u64, Vec<String>>> = Mutex::new(BTreeMap::new());
/// What [`redact`] looks for: every form of every value of [`HOLDERS`], longest first.
static FORMS: RwLock<Vec<String>> = RwLock::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);

/// One service's secret values, redacted from every text [`redact`] sees while it lives.
#[derive(Debug)]
pub struct Hidden {
    id: u64,
}

impl Default for Hidden {
    fn default() -> Self {
        Self::new()
    }
}

impl Hidden {
    /// A holder with no values yet.
    pub fn new() -> Self {
        Self { id: NEXT.fetch_add(1, Ordering::Relaxed) }
    }

    /// Makes `values` this holder's values (replacing the ones set before).
    pub fn set(&self, values: &[String]) {
        let mut holders = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
        let kept: Vec<String> = values.iter().filter(|v| v.trim().len() >= MIN_LEN).cloned().collect();
        if holders.get(&self.id) == Some(&kept) {
            return;
        }
        if kept.is_empty() {
            holders.remove(&self.id);
        } else {
            holders.insert(self.id, kept);
        }
        rebuild(&holders);
    }
}

impl Drop for Hidden {
    fn drop(&mut self) {
        let mut holders = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
        if holders.remove(&self.id).is_some() {
            rebuild(&holders);
        }
    }
}

/// Recomputes [`FORMS`]; called with [`HOLDERS`] locked, so that two rebuilds never race.
fn rebuild(holders: &BTreeMap<u64, Vec<String>>) {
    let mut forms: Vec<String> = holders.values().flatten().flat_map(|v| forms_of(v)).collect();
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    *FORMS.write().unwrap_or_else(|p| p.into_inner()) = forms;
}

/// `value` as it may appear in a line: raw, escaped as in a JSON string, as in Rust's debug
/// output of a string, and both (a debug-formatted field of a JSON log line).
pub(crate) fn forms_of(value: &str) -> Vec<String> {
    let json = |s: &str| serde_json::to_string(s).map(|q| q[1..q.len() - 1].to_string()).unwrap_or_default();
    let debug = |s: &str| {
        let q = format!("{s:?}");
        q[1..q.len() - 1].to_string()
    };
    let mut out = vec![value.to_string(), json(value), debug(value), json(&debug(value))];
    out.retain(|f| !f.is_empty());
    out.dedup();
    out
}

/// `text` with every registered secret value replaced by [`REDACTED`]; borrowed when there
/// is none in it. Values that overlap or touch in `text` go together as one [`REDACTED`], so
/// that no part of either is left.
pub fn redact(text: &str) -> Cow<'_, str> {
    let forms = FORMS.read().unwrap_or_else(|p| p.into_inner());
    replace_all(text, forms.iter().map(String::as_str))
}

/// `text` with every occurrence of any of `values` replaced by [`REDACTED`], values that
/// overlap or touch going together as one; borrowed when there is none.
pub(crate) fn replace_all<'t, 'v>(text: &'t str, values: impl Iterator<Item = &'v str>) -> Cow<'t, str> {
    let found = merged_matches(text, values);
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for range in found {
        out.push_str(&text[at..range.start]);
        out.push_str(REDACTED);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Every byte range of `text` where one of `forms` occurs (overlapping occurrences included),
/// in order, with ranges that overlap or touch merged into one.
fn merged_matches<'a>(text: &str, forms: impl Iterator<Item = &'a str>) -> Vec<Range<usize>> {
    let mut found: Vec<Range<usize>> = Vec::new();
    for form in forms.filter(|f| !f.is_empty()) {
        let mut from = 0;
        while let Some(i) = text[from..].find(form) {
            let start = from + i;
            found.push(start..start + form.len());
            // The next occurrence may overlap this one: look again from its next char.
            from = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
    }
    found.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(found.len());
    for range in found {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_redacted_while_their_holder_lives_in_every_form() {
        let holder = Hidden::new();
        holder.set(&["s3cr\"et-Value-1".to_string(), "ab".to_string()]);
        assert_eq!(redact("key s3cr\"et-Value-1 sent"), "key <redacted> sent");
        assert_eq!(redact(r#"{"message":"key s3cr\"et-Value-1"}"#), r#"{"message":"key <redacted>"}"#);
        assert_eq!(redact(r#"name: "s3cr\\\"et-Value-1""#), r#"name: "<redacted>""#, "debug, then JSON");
        assert_eq!(redact("ab stays: too short to look for everywhere"), "ab stays: too short to look for everywhere");
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
        drop(holder);
        assert_eq!(redact("key s3cr\"et-Value-1 sent"), "key s3cr\"et-Value-1 sent");
    }

    #[test]
    fn a_longer_value_is_replaced_whole_before_one_it_contains() {
        let holder = Hidden::new();
        holder.set(&["qz7w".to_string(), "qz7w-longer-9".to_string()]);
        assert_eq!(redact("x qz7w-longer-9 y qz7w"), "x <redacted> y <redacted>");
    }

    #[test]
    fn overlapping_values_go_together_and_apart_ones_each() {
        let holder = Hidden::new();
        holder.set(&["abcd1234".to_string(), "1234wxyz".to_string(), "zzzz".to_string()]);
        assert_eq!(redact("k abcd1234wxyz end"), "k <redacted> end", "overlapping");
        assert_eq!(redact("k zzzzzz end"), "k <redacted> end", "a value overlapping itself");
        assert_eq!(redact("abcd1234 and 1234wxyz, zzzz"), "<redacted> and <redacted>, <redacted>");
    }
}
