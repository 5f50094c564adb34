//! The Workflow spec: declared args and a tree of steps, field-compatible with muster's.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use steward_sdk::prelude::*;

/// A named sequence of tool calls, loops and concurrent groups.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowSpec {
    /// What the workflow does, for people.
    pub description: Option<String>,
    /// The arguments a caller passes, by name; templates read them as `{{ .input.NAME }}`.
    #[serde(default)]
    pub args: BTreeMap<String, ArgSpec>,
    /// The steps, run top to bottom; at least one.
    pub steps: Vec<Step>,
    /// Best-effort rollback steps, run when a step that does not allow failure fails.
    #[serde(default)]
    pub on_failure: Vec<Step>,
}

/// One declared argument.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgSpec {
    /// The JSON type of the value: string, number, integer, boolean, object or array.
    #[serde(rename = "type")]
    pub type_: ArgType,
    /// Whether a caller must pass it.
    #[serde(default)]
    pub required: bool,
    /// The value used when the caller passes none; must be of `type`.
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub default: Option<Value>,
    /// What the argument means, for people.
    pub description: Option<String>,
}

/// The JSON type of an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    /// A JSON string.
    String,
    /// Any JSON number.
    Number,
    /// A JSON number without a fractional part.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
}

impl ArgType {
    /// The spelling used in specs, for example `integer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
            Self::Object => "object",
            Self::Array => "array",
        }
    }

    /// Whether `value` is of this type.
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            Self::String => value.is_string(),
            Self::Number => value.is_number(),
            Self::Integer => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0),
            Self::Boolean => value.is_boolean(),
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
        }
    }
}

// Written by hand: documented variants would derive a `oneOf` of constants,
// which Kubernetes structural schemas reject; a plain `enum` is what CRDs want.
impl JsonSchema for ArgType {
    fn schema_name() -> Cow<'static, str> {
        "ArgType".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "enum": ["string", "number", "integer", "boolean", "object", "array"] })
    }
}

/// One step: exactly one of `tool`, `forEach` or `parallel`.
// The "exactly one" rules are checked by validation rather than by an enum,
// so that every mistake is reported with its own path instead of one parse error.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Identifies the step: unique across the workflow, letters, digits, '_' and '-';
    /// later steps read its result as `{{ .results.ID }}`.
    pub id: Option<String>,
    /// What the step does, for people.
    pub description: Option<String>,
    /// The tool to call.
    pub tool: Option<String>,
    /// The tool's arguments; string values may hold templates.
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub args: Option<BTreeMap<String, Value>>,
    /// Runs `steps` once per item of a list.
    pub for_each: Option<ForEach>,
    /// Steps run concurrently; they see the results of steps before the group, not each other's.
    #[serde(default)]
    #[schemars(schema_with = "nested_steps_schema")]
    pub parallel: Option<Vec<Step>>,
    /// Runs the step only when this holds.
    pub condition: Option<StepCondition>,
    /// Whether the workflow goes on when this step fails.
    #[serde(default)]
    pub allow_failure: bool,
    /// Includes the step's result in what the workflow returns: `true`, or the name to return it under.
    #[serde(default)]
    #[schemars(schema_with = "output_schema")]
    pub output: Option<StepOutput>,
    /// Deprecated muster spelling of `output: true`.
    #[serde(default)]
    pub store: bool,
}

/// A loop over a list.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForEach {
    /// The list: a JSON array, or a template that renders to one (for example `{{ .input.clusters }}`).
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub items: Value,
    /// The loop variable; the body reads the item as `{{ .vars.NAME }}` and its index as `{{ .vars.NAME_index }}`.
    #[serde(rename = "as", default = "default_loop_var")]
    pub as_: String,
    /// The body, run once per item; at least one step.
    #[schemars(schema_with = "nested_steps_schema")]
    pub steps: Vec<Step>,
}

/// The loop variable when `as` is not given.
pub const DEFAULT_LOOP_VAR: &str = "item";

fn default_loop_var() -> String {
    DEFAULT_LOOP_VAR.to_string()
}

/// When a step runs: exactly one of `template`, `tool` or `fromStep`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepCondition {
    /// A template that renders to `true` when the step should run.
    pub template: Option<String>,
    /// A tool whose result decides, checked against `expect` / `expectNot`.
    pub tool: Option<String>,
    /// The condition tool's arguments; string values may hold templates.
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub args: Option<BTreeMap<String, Value>>,
    /// The id of an earlier step whose result decides, checked against `expect` / `expectNot`.
    pub from_step: Option<String>,
    /// What the result must look like for the step to run.
    pub expect: Option<Expectation>,
    /// What the result must not look like for the step to run.
    pub expect_not: Option<Expectation>,
}

/// A check of a tool result.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectation {
    /// Whether the call succeeded.
    pub success: Option<bool>,
    /// Values expected at paths of the result, by path.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub json_path: BTreeMap<String, Value>,
}

/// How a step's result is returned: muster's `output: true`, or a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepOutput {
    /// Returned (`true`) or not (`false`).
    Include(bool),
    /// Returned under this name.
    Name(String),
}

fn output_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "anyOf": [{ "type": "boolean" }, { "type": "string" }] })
}

/// Steps nest (loop bodies, parallel groups), but an inlined schema cannot
/// recurse, so nested steps are described as objects whose fields the spec
/// parser (not the schema) checks.
fn nested_steps_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

impl Step {
    /// The nested steps run as part of this one: the loop body, then the parallel group.
    pub fn children(&self) -> impl Iterator<Item = &Step> {
        let body = self.for_each.iter().flat_map(|f| f.steps.iter());
        body.chain(self.parallel.iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn muster_workflow_parses() {
        let spec: WorkflowSpec = serde_json::from_value(json!({
            "description": "deploy",
            "args": {"app": {"type": "string", "required": true}, "replicas": {"type": "integer", "default": 3}},
            "steps": [
                {"id": "deploy", "tool": "x_deploy", "args": {"app": "{{ .input.app }}"}, "output": true},
                {"id": "each", "forEach": {"items": ["a", "b"], "steps": [{"id": "one", "tool": "t"}]}},
                {"id": "both", "parallel": [{"tool": "a"}, {"tool": "b"}], "allowFailure": true},
                {"id": "rollback", "tool": "undo", "condition": {"fromStep": "deploy", "expectNot": {"success": true}}}
            ],
            "onFailure": [{"tool": "send_alert", "store": true}]
        }))
        .unwrap();
        assert_eq!(spec.args["replicas"].default, Some(json!(3)));
        assert_eq!(spec.steps[0].output, Some(StepOutput::Include(true)));
        assert_eq!(spec.steps[1].for_each.as_ref().unwrap().as_, "item", "the loop variable defaults to item");
        assert_eq!(spec.steps[2].children().count(), 2);
        assert!(spec.on_failure[0].store);
    }

    #[test]
    fn unknown_step_fields_are_rejected_even_when_nested() {
        let err = serde_json::from_value::<WorkflowSpec>(json!({
            "steps": [{"parallel": [{"tool": "a", "retries": 3}]}]
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `retries`"), "{err}");
    }

    #[test]
    fn integer_accepts_whole_numbers_only() {
        assert!(ArgType::Integer.accepts(&json!(3)));
        assert!(ArgType::Integer.accepts(&json!(3.0)));
        assert!(!ArgType::Integer.accepts(&json!(3.5)));
        assert!(!ArgType::Integer.accepts(&json!("3")));
        assert!(ArgType::Number.accepts(&json!(3.5)));
        assert!(ArgType::Array.accepts(&json!([])));
        assert!(!ArgType::Object.accepts(&json!([])));
    }
}
