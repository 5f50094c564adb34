//! The `workflow` plugin of Steward: kind `Workflow`, a checked multi-step recipe of MCP tool calls.
//!
//! Validation reports what muster refuses as errors and what it accepts but is
//! likely a mistake as warnings, each with its path (see [`validate`] for the
//! rules and the template conventions). Reconcile lists the MCPServers of the
//! workflow's namespace and reports it `Ready` when every tool it calls is
//! offered: by a running, healthy server (under muster's names, `x_<server>_<tool>`),
//! or, for a `workflow_<name>` tool, by another Workflow that is complete itself.
//! Since the host records those reads, a change of any of them reconciles the workflow again.
//!
//! Cargo feature `plugin` (default): exports the plugin (`export_plugin!`). Without it the
//! crate is a plain library of the spec, its validation and the template scanner, for other
//! plugins (`workflowrun`) to reuse without taking on this one's exports.

mod spec;
mod status;
pub mod template;
mod tools;
pub mod validate;

use steward_sdk::prelude::*;

pub use spec::{ArgSpec, ArgType, DEFAULT_LOOP_VAR, Expectation, ForEach, Step, StepCondition, SubStep, WorkflowSpec};
pub use status::{SERVER_KIND, WORKFLOW_KIND, WorkflowStatus};
pub use tools::{
    CORE_TOOL_PREFIX, Missing, WORKFLOW_TOOL_PREFIX, available_tools, referenced_tools, required_tools, resolve,
    step_count, workflow_tool_name,
};

/// The `Workflow` kind (`steward.dev/v1alpha1`, plural `workflows`, namespaced).
pub struct Workflow;

impl Kind for Workflow {
    type Spec = WorkflowSpec;
    type Status = WorkflowStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "Workflow";
    const PLURAL: &'static str = "workflows";

    fn columns() -> Vec<steward_sdk::PrinterColumn> {
        vec![
            steward_sdk::PrinterColumn::new("Valid", ".status.valid", steward_sdk::ColumnType::Boolean)
                .description("Whether the steps and templates are valid"),
            steward_sdk::PrinterColumn::new("Steps", ".status.stepCount", steward_sdk::ColumnType::Integer)
                .description("How many steps the Workflow has"),
            steward_sdk::PrinterColumn::new("Missing Tools", ".status.missingTools", steward_sdk::ColumnType::String)
                .description("Tools it calls that no ready MCPServer offers"),
        ]
    }

    fn validate(obj: &Object<WorkflowSpec, WorkflowStatus>) -> Vec<FieldError> {
        validate::validate(&obj.spec)
    }

    fn warnings(obj: &Object<WorkflowSpec, WorkflowStatus>) -> Vec<FieldError> {
        validate::warnings(&obj.spec)
    }

    fn reconcile(ctx: &Context, obj: &Object<WorkflowSpec, WorkflowStatus>) -> Result<Outcome<WorkflowStatus>, Error> {
        Ok(status::outcome(ctx, &obj.namespace, &obj.name, &obj.spec))
    }
}

#[cfg(feature = "plugin")]
steward_sdk::export_plugin!(name: "workflow", version: env!("CARGO_PKG_VERSION"), kinds: [Workflow]);

#[cfg(all(test, feature = "plugin"))]
mod tests {
    use super::*;

    #[test]
    fn describes_the_kind_without_capabilities() {
        let info = __steward_plugin().info();
        assert_eq!(info.name, "workflow");
        assert!(info.capabilities.is_empty());
        let k = &info.kinds[0];
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced),
            ("steward.dev", "v1alpha1", "Workflow", "workflows", true)
        );
    }

    #[test]
    fn schema_has_the_spec_properties_and_no_dangling_refs() {
        let info = __steward_plugin().info();
        let s: serde_json::Value = serde_json::from_str(&info.kinds[0].spec_schema).unwrap();
        let steps = &s["properties"]["steps"];
        assert_eq!(steps["type"], "array");
        assert!(steps["description"].is_string());
        let step = &steps["items"]["properties"];
        for field in ["id", "tool", "args", "forEach", "parallel", "condition", "allowFailure", "output", "description"]
        {
            assert!(step.get(field).is_some(), "step schema lacks {field}: {step}");
        }
        assert_eq!(steps["items"]["required"], serde_json::json!(["id"]));
        assert_eq!(steps["minItems"], 1);
        let sub = &step["parallel"]["items"];
        assert_eq!(sub["required"], serde_json::json!(["id", "tool"]));
        assert!(sub["properties"].get("parallel").is_none(), "sub-steps do not nest: {sub}");
        assert_eq!(step["forEach"]["properties"]["items"]["type"], "string");
        assert_eq!(s["properties"]["output"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(s["properties"]["onFailure"]["items"]["required"], serde_json::json!(["id", "tool"]));
        assert_eq!(step["condition"]["properties"]["fromStep"]["type"], "string");
        assert_eq!(
            s["properties"]["args"]["additionalProperties"]["properties"]["type"]["enum"],
            serde_json::json!(["string", "number", "integer", "boolean", "object", "array"])
        );
        assert!(s["properties"]["onFailure"].is_object());
        assert!(!s.to_string().contains("$ref"), "the schema must be inlined: {s}");
    }
}
