//! Label and field selectors with the API server's syntax and matching rules.

use serde_json::Value;

use crate::meta;
use crate::resource::ResourceDef;
use crate::status::ApiError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed `labelSelector`: requirements that must all hold. Empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

fn parse_err(req: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why}: {req:?}"))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`,
    /// `a`, `!a`, `a>1`, `a<1`, joined by commas.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for raw in split_top_level(s) {
            let req = raw.trim();
            if req.is_empty() {
                return Err(parse_err(raw, "found '', expected: identifier"));
            }
            if let Some(key) = req.strip_prefix('!') {
                let key = key.trim();
                check_key(key, req)?;
                reqs.push((key.to_string(), LabelOp::DoesNotExist));
                continue;
            }
            let key_len = req.find(|c: char| !is_key_char(c)).unwrap_or(req.len());
            let key = &req[..key_len];
            check_key(key, req)?;
            let rest = req[key_len..].trim_start();
            let op = if rest.is_empty() {
                LabelOp::Exists
            } else if let Some(v) = rest.strip_prefix("!=") {
                LabelOp::NotEquals(check_value(v.trim(), req)?)
            } else if let Some(v) = rest.strip_prefix("==") {
                LabelOp::Equals(check_value(v.trim(), req)?)
            } else if let Some(v) = rest.strip_prefix('=') {
                LabelOp::Equals(check_value(v.trim(), req)?)
            } else if let Some(v) = rest.strip_prefix('>') {
                LabelOp::Gt(
                    v.trim()
                        .parse()
                        .map_err(|_| parse_err(req, "for 'Gt', 'Lt' operators, the value must be an integer"))?,
                )
            } else if let Some(v) = rest.strip_prefix('<') {
                LabelOp::Lt(
                    v.trim()
                        .parse()
                        .map_err(|_| parse_err(req, "for 'Gt', 'Lt' operators, the value must be an integer"))?,
                )
            } else if let Some(v) = rest.strip_prefix("notin") {
                LabelOp::NotIn(parse_set(v, req)?)
            } else if let Some(v) = rest.strip_prefix("in") {
                LabelOp::In(parse_set(v, req)?)
            } else {
                return Err(parse_err(req, "found unexpected operator"));
            };
            reqs.push((key.to_string(), op));
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = meta::labels(obj);
        self.reqs.iter().all(|(key, op)| {
            let value = labels.get(key);
            match op {
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::Equals(v) => value == Some(v),
                LabelOp::NotEquals(v) => value != Some(v),
                LabelOp::In(set) => value.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
                LabelOp::Gt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
            }
        })
    }
}

fn check_key(key: &str, req: &str) -> Result<(), ApiError> {
    if key.is_empty() {
        return Err(parse_err(req, "found '', expected: identifier"));
    }
    if !meta::is_qualified_name(key) {
        return Err(ApiError::bad_request(format!("unable to parse requirement: invalid label key {key:?}")));
    }
    Ok(())
}

fn check_value(v: &str, req: &str) -> Result<String, ApiError> {
    if !meta::is_label_value(v) {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid label value: {v:?}: at key: {:?}",
            req.split(|c: char| !is_key_char(c)).next().unwrap_or_default()
        )));
    }
    Ok(v.to_string())
}

fn parse_set(v: &str, req: &str) -> Result<Vec<String>, ApiError> {
    let v = v.trim();
    let inner = v
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| parse_err(req, "found unexpected token, expected: '('"))?;
    let mut set = Vec::new();
    for item in inner.split(',') {
        set.push(check_value(item.trim(), req)?);
    }
    Ok(set)
}

/// A parsed `fieldSelector`: `field=value`, `field==value`, `field!=value` joined by commas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the selector and checks that every field is supported by `def`
    /// (`metadata.name`, `metadata.namespace` and the resource's selectable fields).
    pub fn parse(s: &str, def: &ResourceDef) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for term in split_unescaped(s, ',') {
            let (field, equal, value) = if let Some((f, v)) = split_op(&term, "!=") {
                (f, false, v)
            } else if let Some((f, v)) = split_op(&term, "==") {
                (f, true, v)
            } else if let Some((f, v)) = split_op(&term, "=") {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{s}'; can't understand '{term}'")));
            };
            let field = field.trim().to_string();
            let supported =
                field == "metadata.name" || field == "metadata.namespace" || def.selectable_fields.contains(&field);
            if !supported {
                let mut known = vec!["\"metadata.name\"".to_string(), "\"metadata.namespace\"".to_string()];
                known.extend(def.selectable_fields.iter().map(|f| format!("{f:?}")));
                return Err(ApiError::bad_request(format!(
                    "{field:?} is not a known field selector: only {}",
                    known.join(", ")
                )));
            }
            reqs.push((field, equal, unescape(value.trim())));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the object's fields satisfy every requirement (a missing field reads as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(field, equal, value)| {
            let actual = field_value(obj, field);
            (actual == *value) == *equal
        })
    }
}

fn split_op<'a>(term: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if term[i..].starts_with(op) {
            return Some((&term[..i], &term[i + op.len()..]));
        }
        i += 1;
    }
    None
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let (mut parts, mut cur, mut escaped) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> String {
    let (mut out, mut escaped) = (String::new(), false);
    for c in s.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// The string value of a dotted field path (`metadata.name`, `spec.color`); "" when missing.
pub(crate) fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "namespace": "ns1", "labels": labels}, "spec": {"color": "red"}})
    }

    #[test]
    fn equality_and_set_based_label_selectors() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier=front"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, api)"));
        assert!(!m("app notin (web)"));
        assert!(m("missing notin (web)"));
        assert!(!m("missing in (web)"));
        assert!(m("app"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m(" app in (x,web) , tier "));
    }

    #[test]
    fn numeric_label_comparisons() {
        let o = obj(json!({"n": "5"}));
        assert!(LabelSelector::parse("n>4").unwrap().matches(&o));
        assert!(!LabelSelector::parse("n<5").unwrap().matches(&o));
    }

    #[test]
    fn bad_label_selectors_are_400() {
        for s in ["a=b=c", "a in x", "=b", "a,,b", "a=-b"] {
            let err = LabelSelector::parse(s).unwrap_err();
            assert_eq!(err.code, 400, "{s}");
        }
    }

    #[test]
    fn field_selectors() {
        let mut def = ResourceDef::new("g", "v1", "K", "ks", true);
        let o = obj(json!({}));
        let m = |s: &str, d: &ResourceDef| FieldSelector::parse(s, d).unwrap().matches(&o);
        assert!(m("metadata.name=n1", &def));
        assert!(m("metadata.name==n1,metadata.namespace=ns1", &def));
        assert!(!m("metadata.name!=n1", &def));
        assert_eq!(FieldSelector::parse("spec.color=red", &def).unwrap_err().code, 400);
        def.selectable_fields.push("spec.color".into());
        assert!(m("spec.color=red", &def));
        assert!(m("spec.color!=blue", &def));
    }
}
