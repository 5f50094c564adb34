//! The MCPServerGroup spec: a label selector over the namespace's MCPServers and the tools the group must offer.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};

use steward_sdk::prelude::*;

/// A set of MCPServers chosen by labels, and the tools they must offer together.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerGroupSpec {
    /// Which MCPServers of the group's namespace belong to it; absent or empty selects them all.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Tools that some ready member must offer for the group to be Ready.
    #[serde(default)]
    pub required_tools: Vec<String>,
}

/// A Kubernetes label selector: every pair and every expression must hold.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels a member must carry with exactly these values.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements on a member's labels.
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
}

/// One set-based requirement on a label.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// The label's key.
    pub key: String,
    /// How the label's value is tested.
    pub operator: Operator,
    /// The values `In` and `NotIn` test against; `Exists` and `DoesNotExist` take none.
    #[serde(default)]
    pub values: Vec<String>,
}

/// How a [`Requirement`] tests a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Operator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present, whatever its value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

// Kubernetes' own shape: a plain string enum (schemars would make a oneOf of documented variants).
impl JsonSchema for Operator {
    fn schema_name() -> Cow<'static, str> {
        "Operator".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"] })
    }
}

impl LabelSelector {
    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_empty_selector_selects_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(LabelSelector::default().matches(&labels(&[("team", "a")])));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = selector(json!({"matchLabels": {"team": "a", "tier": "prod"}}));
        assert!(s.matches(&labels(&[("team", "a"), ("tier", "prod"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("team", "a")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "dev")])));
    }

    #[test]
    fn each_operator_tests_what_kubernetes_tests() {
        let req = |op: &str, values: &[&str]| -> Requirement {
            serde_json::from_value(json!({"key": "env", "operator": op, "values": values})).unwrap()
        };
        let prod = labels(&[("env", "prod")]);
        let dev = labels(&[("env", "dev")]);
        let none = labels(&[]);
        let cases = [
            (req("In", &["prod", "staging"]), [true, false, false]),
            (req("NotIn", &["prod"]), [false, true, true]),
            (req("Exists", &[]), [true, true, false]),
            (req("DoesNotExist", &[]), [false, false, true]),
        ];
        for (r, want) in cases {
            assert_eq!([r.matches(&prod), r.matches(&dev), r.matches(&none)], want, "{r:?}");
        }
    }

    #[test]
    fn expressions_and_labels_are_anded() {
        let s = selector(json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}));
        assert!(s.matches(&labels(&[("team", "a"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("team", "b"), ("env", "prod")])));
    }
}
