//! The WorkflowRun spec: which Workflow to run, with which args, for how long.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value};
use steward_sdk::prelude::*;

/// One run of a Workflow of the same namespace.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowRunSpec {
    /// The name of the Workflow to run, in the run's namespace.
    #[schemars(length(min = 1))]
    pub workflow: String,
    /// The arguments passed to the workflow, by name; checked against the Workflow's `args`
    /// (type, `required`) and completed with their defaults when the run starts.
    #[serde(default)]
    #[schemars(schema_with = "args_schema")]
    pub args: Map<String, Value>,
    /// How long the run may take from its start, for example `30s`, `10m` or `1h30m`; past it
    /// the calls in flight are cancelled and the run fails.
    pub timeout: Option<String>,
    /// Set to true to cancel the run: calls in flight are cancelled and the run ends `Cancelled`.
    #[serde(default)]
    pub cancel: bool,
}

/// Any JSON object: the workflow's args.
fn args_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}
