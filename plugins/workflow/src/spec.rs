//! The Workflow spec: declared args and a tree of steps, field-compatible with muster's.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use steward_sdk::prelude::*;

/// A named sequence of tool calls, loops and concurrent groups (muster's Workflow spec).
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowSpec {
    /// What the workflow does, for people (at most 1000 characters).
    #[schemars(length(max = 1000))]
    pub description: Option<String>,
    /// The arguments a caller passes, by name; templates read them as `{{ .input.NAME }}`.
    #[serde(default)]
    pub args: BTreeMap<String, ArgSpec>,
    /// The steps, run top to bottom; at least one.
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
    /// Best-effort rollback steps (tool calls), run when a step that does not allow failure fails.
    #[serde(default)]
    pub on_failure: Vec<SubStep>,
    /// Shapes what the workflow returns: a document whose string leaves are templates over
    /// `.input`, `.results` and `.vars`, rendered once after the steps.
    #[serde(default)]
    #[schemars(schema_with = "output_template_schema")]
    pub output: Option<BTreeMap<String, Value>>,
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
    /// What the argument means, for people (at most 500 characters).
    #[schemars(length(max = 500))]
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

/// One top-level step: exactly one of `tool`, `forEach` or `parallel`.
// The "exactly one" rules are checked by validation rather than by an enum,
// so that every mistake is reported with its own path instead of one parse error.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Identifies the step: letters, digits, '_' and '-', at most 63, unique among the
    /// top-level steps; later steps read its result as `{{ .results.ID }}`.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9_-]+$"), length(max = 63))]
    pub id: String,
    /// What the step does, for people (at most 500 characters).
    #[schemars(length(max = 500))]
    pub description: Option<String>,
    /// The tool to call.
    pub tool: Option<String>,
    /// The tool's arguments; string values may hold templates.
    #[serde(default)]
    #[schemars(schema_with = "args_schema")]
    pub args: Option<BTreeMap<String, Value>>,
    /// Runs its sub-steps once per item of a list.
    pub for_each: Option<ForEach>,
    /// Sub-steps run concurrently; they see the results of steps before the group, not each other's.
    #[schemars(length(min = 1))]
    pub parallel: Option<Vec<SubStep>>,
    /// Runs the step only when this holds.
    pub condition: Option<StepCondition>,
    /// Whether the workflow goes on when this step fails.
    #[serde(default)]
    pub allow_failure: bool,
    /// Whether the step's result is part of what the workflow returns.
    pub output: Option<bool>,
    /// Deprecated muster spelling of `output`, used when `output` is not set.
    #[serde(default)]
    pub store: bool,
}

/// A tool call inside a `forEach`, a `parallel` group or `onFailure` (it cannot nest further).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubStep {
    /// Identifies the sub-step: letters, digits, '_' and '-', at most 63, unique in its group.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9_-]+$"), length(max = 63))]
    pub id: String,
    /// What the sub-step does, for people (at most 500 characters).
    #[schemars(length(max = 500))]
    pub description: Option<String>,
    /// The tool to call.
    #[schemars(length(min = 1))]
    pub tool: String,
    /// The tool's arguments; string values may hold templates.
    #[serde(default)]
    #[schemars(schema_with = "args_schema")]
    pub args: Option<BTreeMap<String, Value>>,
    /// Runs the sub-step only when this holds.
    pub condition: Option<StepCondition>,
    /// Whether the workflow goes on when this sub-step fails.
    #[serde(default)]
    pub allow_failure: bool,
    /// Whether the sub-step's result is part of what the workflow returns.
    pub output: Option<bool>,
    /// Deprecated muster spelling of `output`, used when `output` is not set.
    #[serde(default)]
    pub store: bool,
}

/// A loop over a list.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForEach {
    /// A template that renders to the list, for example `{{ .input.clusters }}`.
    #[schemars(length(min = 1))]
    pub items: String,
    /// The loop variable; the body reads the item as `{{ .vars.NAME }}`.
    #[serde(rename = "as", default = "default_loop_var")]
    #[schemars(extend("default" = "item"))]
    pub as_: String,
    /// The body, run once per item; at least one sub-step.
    #[schemars(length(min = 1))]
    pub steps: Vec<SubStep>,
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

/// A map of tool arguments: any JSON value per name.
fn args_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The output template: any document (muster's schema keeps unknown fields at every level).
fn output_template_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

impl Step {
    /// The sub-steps run as part of this one: the loop body, then the parallel group.
    pub fn children(&self) -> impl Iterator<Item = &SubStep> {
        let body = self.for_each.iter().flat_map(|f| f.steps.iter());
        body.chain(self.parallel.iter().flatten())
    }

    /// Whether the result is returned: `output`, else the deprecated `store`.
    pub fn output_enabled(&self) -> bool {
        self.output.unwrap_or(self.store)
    }
}

impl SubStep {
    /// Whether the result is returned: `output`, else the deprecated `store`.
    pub fn output_enabled(&self) -> bool {
        self.output.unwrap_or(self.store)
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
                {"id": "each", "forEach": {"items": "{{ .input.list }}", "steps": [{"id": "one", "tool": "t"}]}},
                {"id": "both", "parallel": [{"id": "a", "tool": "a"}, {"id": "b", "tool": "b"}], "allowFailure": true},
                {"id": "rollback", "tool": "undo", "condition": {"fromStep": "deploy", "expectNot": {"success": true}}}
            ],
            "onFailure": [{"id": "alert", "tool": "send_alert", "store": true}],
            "output": {"deployed": "{{ .results.deploy }}", "count": "{{ len .results.each }}"}
        }))
        .unwrap();
        assert_eq!(spec.args["replicas"].default, Some(json!(3)));
        assert_eq!(spec.steps[0].output, Some(true));
        assert_eq!(spec.steps[1].for_each.as_ref().unwrap().as_, "item", "the loop variable defaults to item");
        assert_eq!(spec.steps[2].children().count(), 2);
        assert!(spec.on_failure[0].output_enabled(), "store is the fallback of output");
        assert_eq!(spec.output.unwrap().len(), 2);
    }

    #[test]
    fn sub_steps_do_not_nest_and_steps_need_ids() {
        let err = serde_json::from_value::<WorkflowSpec>(json!({
            "steps": [{"id": "p", "parallel": [{"id": "a", "parallel": [{"id": "b", "tool": "x"}]}]}]
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `parallel`"), "{err}");
        let err = serde_json::from_value::<WorkflowSpec>(json!({"steps": [{"tool": "t"}]})).unwrap_err().to_string();
        assert!(err.contains("missing field `id`"), "{err}");
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
