//! The `workflow` plugin of Steward: kind `Workflow`, a checked multi-step recipe of MCP tool calls.
//!
//! Validation reports every structural problem of a workflow with its path
//! (see [`validate`] for the rules and the template conventions). Reconcile
//! lists the MCPServers of the workflow's namespace and reports it `Ready`
//! when every tool it calls is offered by a running, healthy server; since
//! the host records that read, a server coming up reconciles the workflow again.

mod spec;
mod status;
pub mod template;
mod tools;
pub mod validate;

use steward_sdk::prelude::*;

pub use spec::{
    ArgSpec, ArgType, DEFAULT_LOOP_VAR, Expectation, ForEach, Step, StepCondition, StepOutput, WorkflowSpec,
};
pub use status::{SERVER_KIND, WorkflowStatus};
pub use tools::{available_tools, referenced_tools, step_count};

/// The `Workflow` kind (`steward.dev/v1alpha1`, plural `workflows`, namespaced).
pub struct Workflow;

impl Kind for Workflow {
    type Spec = WorkflowSpec;
    type Status = WorkflowStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "Workflow";
    const PLURAL: &'static str = "workflows";

    fn validate(obj: &Object<WorkflowSpec, WorkflowStatus>) -> Vec<FieldError> {
        validate::validate(&obj.spec)
    }

    fn reconcile(ctx: &Context, obj: &Object<WorkflowSpec, WorkflowStatus>) -> Result<Outcome<WorkflowStatus>, Error> {
        Ok(status::outcome(ctx, &obj.namespace, &obj.spec))
    }
}

steward_sdk::export_plugin!(name: "workflow", version: env!("CARGO_PKG_VERSION"), kinds: [Workflow]);

#[cfg(test)]
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
        assert_eq!(step["condition"]["properties"]["fromStep"]["type"], "string");
        assert_eq!(
            s["properties"]["args"]["additionalProperties"]["properties"]["type"]["enum"],
            serde_json::json!(["string", "number", "integer", "boolean", "object", "array"])
        );
        assert!(s["properties"]["onFailure"].is_object());
        assert!(!s.to_string().contains("$ref"), "the schema must be inlined: {s}");
    }
}
