//! Kubernetes label selectors as objects hold them (`matchLabels`, `matchExpressions`), matched against an object's labels.

use std::collections::BTreeMap;

use serde_json::Value;

/// Whether the selector `sel` (Kubernetes' `LabelSelector` as JSON) selects `labels`: every pair
/// of `matchLabels` and every expression of `matchExpressions` must hold; an empty selector
/// selects everything. `None` when `sel` is not a selector (not an object, or an expression with
/// an unknown operator), which selects nothing.
pub(super) fn matches(sel: &Value, labels: &BTreeMap<String, String>) -> Option<bool> {
    let sel = sel.as_object()?;
    if let Some(m) = sel.get("matchLabels") {
        for (k, v) in m.as_object()? {
            if labels.get(k).map(String::as_str) != Some(v.as_str()?) {
                return Some(false);
            }
        }
    }
    if let Some(exprs) = sel.get("matchExpressions") {
        for e in exprs.as_array()? {
            let key = e.get("key")?.as_str()?;
            let values: Vec<&str> = match e.get("values") {
                Some(v) => v.as_array()?.iter().map(Value::as_str).collect::<Option<_>>()?,
                None => Vec::new(),
            };
            let have = labels.get(key).map(String::as_str);
            let holds = match e.get("operator")?.as_str()? {
                "In" => have.is_some_and(|h| values.contains(&h)),
                "NotIn" => have.is_none_or(|h| !values.contains(&h)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => return None,
            };
            if !holds {
                return Some(false);
            }
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let l = labels(&[("team", "a"), ("tier", "prod")]);
        assert_eq!(matches(&json!({}), &l), Some(true));
        assert_eq!(matches(&json!({"matchLabels": {"team": "a"}}), &l), Some(true));
        assert_eq!(matches(&json!({"matchLabels": {"team": "b"}}), &l), Some(false));
        let expr =
            |op: &str, values: Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert_eq!(matches(&expr("In", json!(["prod", "dev"])), &l), Some(true));
        assert_eq!(matches(&expr("NotIn", json!(["prod"])), &l), Some(false));
        assert_eq!(matches(&expr("Exists", json!([])), &l), Some(true));
        assert_eq!(matches(&expr("DoesNotExist", json!([])), &l), Some(false));
        assert_eq!(matches(&expr("Near", json!([])), &l), None);
        assert_eq!(matches(&json!("team=a"), &l), None);
    }
}
