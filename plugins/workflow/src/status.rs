//! The Workflow status and the Ready condition that says whether every tool it calls is available.

use serde::{Deserialize, Serialize};
use steward_sdk::{Condition, Context, Outcome};

use crate::spec::WorkflowSpec;
use crate::tools::{Missing, available_tools, referenced_tools, resolve, step_count};

/// The kind whose objects provide tools.
pub const SERVER_KIND: &str = "MCPServer";

/// The kind of the Workflows a `workflow_<name>` tool runs.
pub const WORKFLOW_KIND: &str = "Workflow";

/// What a Workflow reports (muster's fields, then Steward's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkflowStatus {
    /// Whether the spec passed validation. A reconcile only runs on a valid spec, so a
    /// reported status says true; an invalid spec is `Failed` with every error in `lastError`.
    pub valid: bool,
    /// The validation errors (see `valid`).
    pub validation_errors: Vec<String>,
    /// How many top-level steps there are (muster's count).
    pub step_count: usize,
    /// The tools of the steps, their sub-steps and conditions, sorted (muster's list; `onFailure` is not in it).
    pub referenced_tools: Vec<String>,
    /// The tools the workflow needs that are not available, sorted: not listed by a
    /// Running/Connected, Healthy MCPServer of the namespace, muster's management tools
    /// (`core_*`), and `workflow_<name>` tools whose Workflow is missing, invalid or incomplete
    /// (then the deep tool that is missing).
    pub missing_tools: Vec<String>,
    /// The tools the workflow needs that are available, sorted.
    pub available_tools: Vec<String>,
}

/// Reconciles a valid workflow `name` in `namespace`: reads the namespace's MCPServers and the
/// Workflows its `workflow_<name>` tools run (the host records the reads, so a change of any
/// of them reconciles the workflow again).
pub fn outcome(ctx: &Context, namespace: &str, name: &str, spec: &WorkflowSpec) -> Outcome<WorkflowStatus> {
    let offered = available_tools(&ctx.list(SERVER_KIND, Some(namespace)));
    let get = |other: &str| ctx.get(WORKFLOW_KIND, namespace, other);
    let resolution = resolve(name, spec, &offered, &get);
    let ready = if resolution.missing.is_empty() {
        let n = resolution.available.len();
        Condition::new("Ready", true, "AllToolsAvailable", format!("all {n} tools it calls are available"))
    } else {
        Condition::new("Ready", false, "ToolsMissing", missing_message(namespace, &resolution.missing))
    };
    let mut missing: Vec<String> = resolution.missing.iter().map(|m| m.tool().to_string()).collect();
    missing.sort();
    let status = WorkflowStatus {
        valid: true,
        validation_errors: Vec::new(),
        step_count: step_count(spec),
        referenced_tools: referenced_tools(spec),
        missing_tools: missing,
        available_tools: resolution.available,
    };
    Outcome::status(status).condition(ready)
}

/// One sentence per cause, each naming its tools.
fn missing_message(namespace: &str, missing: &[Missing]) -> String {
    let names =
        |pick: fn(&Missing) -> bool| -> Vec<&str> { missing.iter().filter(|m| pick(m)).map(Missing::tool).collect() };
    let mut parts = Vec::new();
    let offered = names(|m| matches!(m, Missing::NotOffered(_)));
    if !offered.is_empty() {
        parts.push(format!(
            "no Running or Connected, Healthy MCPServer in namespace {namespace} lists: {}",
            offered.join(", ")
        ));
    }
    let core = names(|m| matches!(m, Missing::Management(_)));
    if !core.is_empty() {
        parts.push(format!("muster's own management tools are not offered by Steward: {}", core.join(", ")));
    }
    let none = names(|m| matches!(m, Missing::NoWorkflow(_)));
    if !none.is_empty() {
        parts.push(format!("no Workflow in namespace {namespace} is named by: {}", none.join(", ")));
    }
    let invalid = names(|m| matches!(m, Missing::InvalidWorkflow(_)));
    if !invalid.is_empty() {
        parts.push(format!("these run a Workflow whose spec is invalid: {}", invalid.join(", ")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use steward_sdk::testing::{FakeHost, Read, object, reconcile};
    use steward_sdk::{ConditionStatus, Error, RawObject};

    use crate::Workflow;

    fn server(name: &str, namespace: &str, status: Value) -> RawObject {
        let mut o = object("MCPServer", name, json!({"type": "stdio", "command": "x", "autoStart": true}));
        o.namespace = namespace.into();
        o.status = Some(status.to_string());
        o
    }

    fn workflow() -> RawObject {
        object(
            "Workflow",
            "release",
            json!({"steps": [
                {"id": "st", "tool": "x_git_status"},
                {"id": "both", "parallel": [{"id": "l", "tool": "x_git_log"}, {"id": "d", "tool": "x_api_deploy"}]},
                {"id": "admin", "tool": "core_service_list"}
            ]}),
        )
    }

    fn host() -> FakeHost {
        FakeHost::new()
            .with(server(
                "git",
                "default",
                json!({"type": "stdio", "state": "Running", "health": "Healthy",
                                                  "tools": ["x_git_log", "x_git_status"]}),
            ))
            .with(server(
                "api",
                "default",
                json!({"type": "streamable-http", "state": "Failed", "health": "Unhealthy",
                                                  "tools": ["x_api_deploy"], "lastError": "connection refused"}),
            ))
            .with(server(
                "other",
                "elsewhere",
                json!({"state": "Running", "health": "Healthy", "tools": ["x_api_deploy"]}),
            ))
    }

    #[test]
    fn a_tool_of_a_failed_server_is_missing_and_not_ready() {
        let host = host();
        let out = reconcile::<Workflow>(&host, &workflow(), &[]).unwrap();
        let st = out.status.unwrap();
        assert!(st.valid);
        assert_eq!(st.step_count, 3, "muster counts the top-level steps");
        assert_eq!(st.referenced_tools, ["core_service_list", "x_api_deploy", "x_git_log", "x_git_status"]);
        assert_eq!(
            st.missing_tools,
            ["core_service_list", "x_api_deploy"],
            "a server in another namespace does not count"
        );
        assert_eq!(st.available_tools, ["x_git_log", "x_git_status"]);
        let c = &out.conditions[0];
        assert_eq!((c.type_.as_str(), c.status, c.reason.as_str()), ("Ready", ConditionStatus::False, "ToolsMissing"));
        assert!(c.message.contains("lists: x_api_deploy;"), "{}", c.message);
        assert!(c.message.ends_with("not offered by Steward: core_service_list"), "{}", c.message);
        assert!(out.services.is_empty());
        assert_eq!(
            host.reads(),
            [Read::List { kind: "MCPServer".into(), namespace: Some("default".into()) }],
            "the list is recorded so that a server change reconciles the workflow"
        );
    }

    #[test]
    fn becomes_ready_when_the_server_recovers() {
        let host = host();
        host.insert(server(
            "api",
            "default",
            json!({"state": "Connected", "health": "Healthy", "tools": ["x_api_deploy"]}),
        ));
        let mut wf = workflow();
        wf.spec =
            json!({"steps": [{"id": "st", "tool": "x_git_status"}, {"id": "d", "tool": "x_api_deploy"}]}).to_string();
        let out = reconcile::<Workflow>(&host, &wf, &[]).unwrap();
        assert!(out.status.unwrap().missing_tools.is_empty());
        let c = &out.conditions[0];
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "AllToolsAvailable"));
    }

    #[test]
    fn without_servers_every_tool_is_missing() {
        let out = reconcile::<Workflow>(&FakeHost::new(), &workflow(), &[]).unwrap();
        assert_eq!(
            out.status.unwrap().missing_tools,
            ["core_service_list", "x_api_deploy", "x_git_log", "x_git_status"]
        );
    }

    #[test]
    fn a_workflow_tool_follows_the_other_workflow_and_is_read_through_the_host() {
        let host = host().with(object("Workflow", "inner", json!({"steps": [{"id": "s", "tool": "x_git_status"}]})));
        let outer = object("Workflow", "outer", json!({"steps": [{"id": "run", "tool": "workflow_inner"}]}));
        let out = reconcile::<Workflow>(&host, &outer, &[]).unwrap();
        assert_eq!(out.status.unwrap().available_tools, ["workflow_inner"]);
        assert!(host.reads().contains(&Read::Get(steward_sdk::ObjectRef::new("Workflow", "default", "inner"))));
        host.insert(object("Workflow", "inner", json!({"steps": [{"id": "s", "tool": "x_api_deploy"}]})));
        let out = reconcile::<Workflow>(&host, &outer, &[]).unwrap();
        assert_eq!(out.status.unwrap().missing_tools, ["x_api_deploy"], "the deep tool is named, as muster does");
    }

    #[test]
    fn an_invalid_spec_never_reaches_reconcile() {
        let obj = object("Workflow", "bad", json!({"steps": []}));
        match reconcile::<Workflow>(&FakeHost::new(), &obj, &[]) {
            Err(Error::Invalid(errs)) => assert_eq!(errs[0].path, "spec.steps"),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn status_json_uses_muster_field_names() {
        let out = reconcile::<Workflow>(&host(), &workflow(), &[]).unwrap();
        let v = serde_json::to_value(out.status.unwrap()).unwrap();
        for key in ["valid", "validationErrors", "stepCount", "referencedTools", "missingTools", "availableTools"] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
    }
}
