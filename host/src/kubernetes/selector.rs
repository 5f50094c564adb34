//! Label selectors handed to the API server: the config's selector (checked by [`crate::selector`]) as a structured `LabelSelector`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::selector::split;

/// `selector` (`a=b,c!=d,e in (x,y),f notin (z),g,!h`, already checked by
/// [`crate::selector::check`]) as a structured `LabelSelector` (a webhook's `objectSelector`).
pub fn to_label_selector(selector: &str) -> LabelSelector {
    let mut exprs = Vec::new();
    let req = |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: key.trim().to_string(),
        operator: operator.into(),
        values,
    };
    for part in split(selector).unwrap_or_default().into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        if let Some(key) = part.strip_prefix('!') {
            exprs.push(req(key, "DoesNotExist", None));
        } else if let Some((k, v)) = part.split_once("!=") {
            exprs.push(req(k, "NotIn", Some(vec![v.trim().to_string()])));
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            exprs.push(req(k, "In", Some(vec![v.trim().to_string()])));
        } else if let Some((k, rest)) = part.split_once(char::is_whitespace) {
            let rest = rest.trim_start();
            let (op, set) = match rest.strip_prefix("notin") {
                Some(set) => ("NotIn", set),
                None => ("In", rest.strip_prefix("in").unwrap_or(rest)),
            };
            let values = set.trim().trim_start_matches('(').trim_end_matches(')');
            exprs.push(req(k, op, Some(values.split(',').map(|v| v.trim().to_string()).collect())));
        } else {
            exprs.push(req(part, "Exists", None));
        }
    }
    LabelSelector { match_expressions: Some(exprs), match_labels: None }
}
