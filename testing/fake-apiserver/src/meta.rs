//! Object metadata helpers: timestamps, uids, generated names and name/label validation.

use serde_json::{Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::status::Cause;

/// RFC 3339 UTC time with second precision (`metav1.Time`), e.g. `2025-01-02T03:04:05Z`.
pub(crate) fn now_rfc3339() -> String {
    format_time(SystemTime::now())
}

fn format_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, day) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    format!("{y:04}-{m:02}-{day:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A source of uids and generated-name suffixes, unique within one server.
pub(crate) struct Ids {
    seed: u64,
    counter: AtomicU64,
}

impl Ids {
    pub fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64);
        Ids { seed: h.finish(), counter: AtomicU64::new(1) }
    }

    fn next(&self) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // splitmix64 over seed + n: distinct for distinct n, random-looking.
        let mut z = self.seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A version-4-shaped UUID string.
    pub fn uid(&self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// A 5-character suffix from the alphabet the API server uses for `generateName`.
    pub fn name_suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (at most 253 characters of dot-separated labels).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Validates an object name: a DNS-1123 label when `label` (namespaces), else a DNS-1123 subdomain.
pub(crate) fn validate_name(name: &str, label: bool) -> Option<Cause> {
    let value = Value::String(name.to_string());
    if label {
        if name.len() > 63 {
            return Some(Cause::invalid("metadata.name", &value, "must be no more than 63 characters"));
        }
        (!is_dns_label(name)).then(|| Cause::invalid("metadata.name", &value, DNS1123_LABEL_MSG))
    } else {
        if name.len() > 253 {
            return Some(Cause::invalid("metadata.name", &value, "must be no more than 253 characters"));
        }
        (!is_dns_subdomain(name)).then(|| Cause::invalid("metadata.name", &value, DNS1123_SUBDOMAIN_MSG))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !s.is_empty()
        && s.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `key` is a valid label or annotation key (`[prefix/]name`).
pub(crate) fn is_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_qualified_name_part(name),
        None => is_qualified_name_part(key),
    }
}

/// Whether `value` is a valid label value (empty, or at most 63 characters of `[A-Za-z0-9_.-]`
/// starting and ending with an alphanumeric).
pub(crate) fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_qualified_name_part(value)
}

/// Validates `metadata.labels` and `metadata.annotations` keys and label values.
pub(crate) fn validate_labels_annotations(meta: &Map<String, Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(labels) = meta.get("labels") {
        match labels.as_object() {
            Some(labels) => {
                for (k, v) in labels {
                    if !is_qualified_name(k) {
                        causes.push(Cause::invalid(
                            "metadata.labels",
                            &Value::String(k.clone()),
                            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                        ));
                    }
                    match v.as_str() {
                        Some(s) if is_label_value(s) => {}
                        _ => causes.push(Cause::invalid(
                            "metadata.labels",
                            v,
                            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => causes.push(Cause::invalid("metadata.labels", labels, "must be a map of strings")),
        }
    }
    if let Some(annotations) = meta.get("annotations") {
        match annotations.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if !is_qualified_name(k) {
                        causes.push(Cause::invalid(
                            "metadata.annotations",
                            &Value::String(k.clone()),
                            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                        ));
                    }
                    if !v.is_string() {
                        causes.push(Cause::invalid("metadata.annotations", v, "must be a string"));
                    }
                }
            }
            None if annotations.is_null() => {}
            None => causes.push(Cause::invalid("metadata.annotations", annotations, "must be a map of strings")),
        }
    }
    causes
}

/// `metadata` of an object, if it is a map.
pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// A string field of `metadata`, if present and non-empty.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `metadata` as a mutable map, created when missing or not a map.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("object");
    let meta = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("object")
}

/// `metadata.finalizers` as strings (non-string entries are skipped).
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// `metadata.labels` as a string map (non-string values are skipped).
pub(crate) fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn names() {
        assert!(is_dns_subdomain("a.b-c.d1"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("a_b"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain(""));
        assert!(validate_name("has.dot", true).is_some());
        assert!(validate_name("has.dot", false).is_none());
        assert!(is_qualified_name("app.kubernetes.io/name"));
        assert!(!is_qualified_name("bad key"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }

    #[test]
    fn uids_and_suffixes_are_distinct() {
        let ids = Ids::new();
        let (a, b) = (ids.uid(), ids.uid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(ids.name_suffix().len(), 5);
    }
}
