//! The checks a valid MCPServerGroup spec passes beyond its types, each reported with its field path.

use std::collections::BTreeSet;

use steward_sdk::FieldError;

use crate::spec::{McpServerGroupSpec, Operator};

/// Every problem of `spec`, in field order; empty when it is valid.
pub fn validate(spec: &McpServerGroupSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.selector.match_labels.keys().any(|k| k.trim().is_empty()) {
        errors.push(FieldError::new("spec.selector.matchLabels", "a label key must not be empty"));
    }
    for (i, req) in spec.selector.match_expressions.iter().enumerate() {
        let at = format!("spec.selector.matchExpressions[{i}]");
        if req.key.trim().is_empty() {
            errors.push(FieldError::new(format!("{at}.key"), "the label key must not be empty"));
        }
        let op = req.operator;
        match op {
            Operator::In | Operator::NotIn if req.values.is_empty() => errors.push(FieldError::new(
                format!("{at}.values"),
                format!("{op:?} needs at least one value; use Exists or DoesNotExist to test for the key alone"),
            )),
            Operator::Exists | Operator::DoesNotExist if !req.values.is_empty() => errors.push(FieldError::new(
                format!("{at}.values"),
                format!("{op:?} takes no values; use In or NotIn to test the value"),
            )),
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    for (i, tool) in spec.required_tools.iter().enumerate() {
        let at = format!("spec.requiredTools[{i}]");
        if tool.trim().is_empty() {
            errors.push(FieldError::new(at, "a tool name must not be empty"));
        } else if !seen.insert(tool.as_str()) {
            errors.push(FieldError::new(at, format!("{tool:?} is listed twice")));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::Error;
    use steward_sdk::testing::{FakeHost, object, reconcile, validate as validate_object};

    use crate::McpServerGroup;

    fn paths(spec: serde_json::Value) -> Vec<String> {
        validate_object::<McpServerGroup>(&object("MCPServerGroup", "g", spec)).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_minimal_and_a_full_spec_are_valid() {
        assert!(paths(json!({})).is_empty());
        assert!(
            paths(json!({
                "selector": {"matchLabels": {"team": "a"},
                             "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]},
                                                  {"key": "canary", "operator": "DoesNotExist"}]},
                "requiredTools": ["echo", "add"]
            }))
            .is_empty()
        );
    }

    #[test]
    fn each_problem_names_its_field() {
        let got = paths(json!({
            "selector": {"matchLabels": {"": "x"},
                         "matchExpressions": [{"key": "env", "operator": "In"},
                                              {"key": "", "operator": "Exists", "values": ["x"]}]},
            "requiredTools": ["echo", " ", "echo"]
        }));
        assert_eq!(
            got,
            [
                "spec.selector.matchLabels",
                "spec.selector.matchExpressions[0].values",
                "spec.selector.matchExpressions[1].key",
                "spec.selector.matchExpressions[1].values",
                "spec.requiredTools[1]",
                "spec.requiredTools[2]",
            ]
        );
    }

    #[test]
    fn an_unknown_operator_or_a_wrong_type_is_reported_where_it_is() {
        assert_eq!(
            paths(json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Like"}]}})),
            ["spec.selector.matchExpressions[0].operator"]
        );
        assert_eq!(paths(json!({"requiredTools": "echo"})), ["spec.requiredTools"]);
        let bad = object("MCPServerGroup", "g", json!({"requiredTools": [""]}));
        assert!(matches!(reconcile::<McpServerGroup>(&FakeHost::new(), &bad, &[]), Err(Error::Invalid(_))));
    }
}
