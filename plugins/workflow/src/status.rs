//! The Workflow status and the Ready condition that says whether every tool it calls is available.

use serde::{Deserialize, Serialize};
use steward_sdk::{Condition, Context, Outcome};

use crate::spec::WorkflowSpec;
use crate::tools::{available_tools, referenced_tools, step_count};

/// The kind whose objects provide tools.
pub const SERVER_KIND: &str = "MCPServer";

/// What a Workflow reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkflowStatus {
    /// Whether the spec passed validation; always true here, since invalid specs never reach reconcile.
    pub valid: bool,
    /// The validation errors; empty here (the host reports invalid specs itself).
    pub validation_errors: Vec<String>,
    /// How many steps there are, nested and `onFailure` steps included.
    pub step_count: usize,
    /// Every tool the workflow may call, sorted.
    pub referenced_tools: Vec<String>,
    /// The referenced tools that no Running/Connected and Healthy MCPServer in the namespace lists, sorted.
    pub missing_tools: Vec<String>,
    /// The referenced tools that are available, sorted.
    pub available_tools: Vec<String>,
}

/// Reconciles a valid workflow in `namespace`: reads the namespace's MCPServers
/// (the host records the read, so a server change reconciles the workflow again).
pub fn outcome(ctx: &Context, namespace: &str, spec: &WorkflowSpec) -> Outcome<WorkflowStatus> {
    let referenced = referenced_tools(spec);
    let offered = available_tools(&ctx.list(SERVER_KIND, Some(namespace)));
    let (available, missing): (Vec<String>, Vec<String>) =
        referenced.iter().cloned().partition(|tool| offered.contains(tool));
    let ready = if missing.is_empty() {
        let n = referenced.len();
        Condition::new("Ready", true, "AllToolsAvailable", format!("all {n} referenced tools are available"))
    } else {
        Condition::new(
            "Ready",
            false,
            "ToolsMissing",
            format!(
                "no Running or Connected, Healthy MCPServer in namespace {namespace} lists: {}",
                missing.join(", ")
            ),
        )
    };
    let status = WorkflowStatus {
        valid: true,
        validation_errors: Vec::new(),
        step_count: step_count(spec),
        referenced_tools: referenced,
        missing_tools: missing,
        available_tools: available,
    };
    Outcome::status(status).condition(ready)
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
                {"id": "st", "tool": "git_status"},
                {"parallel": [{"tool": "git_log"}, {"tool": "api_deploy"}]}
            ]}),
        )
    }

    fn host() -> FakeHost {
        FakeHost::new()
            .with(server(
                "git",
                "default",
                json!({"type": "stdio", "state": "Running", "health": "Healthy",
                                                  "tools": ["git_log", "git_status"]}),
            ))
            .with(server(
                "api",
                "default",
                json!({"type": "streamable-http", "state": "Failed", "health": "Unhealthy",
                                                  "tools": ["api_deploy"], "lastError": "connection refused"}),
            ))
            .with(server(
                "other",
                "elsewhere",
                json!({"state": "Running", "health": "Healthy", "tools": ["api_deploy"]}),
            ))
    }

    #[test]
    fn a_tool_of_a_failed_server_is_missing_and_not_ready() {
        let host = host();
        let out = reconcile::<Workflow>(&host, &workflow(), &[]).unwrap();
        let st = out.status.unwrap();
        assert!(st.valid);
        assert_eq!(st.step_count, 4);
        assert_eq!(st.referenced_tools, ["api_deploy", "git_log", "git_status"]);
        assert_eq!(st.missing_tools, ["api_deploy"], "a server in another namespace does not count");
        assert_eq!(st.available_tools, ["git_log", "git_status"]);
        let c = &out.conditions[0];
        assert_eq!((c.type_.as_str(), c.status, c.reason.as_str()), ("Ready", ConditionStatus::False, "ToolsMissing"));
        assert!(c.message.ends_with("lists: api_deploy"), "{}", c.message);
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
            json!({"state": "Connected", "health": "Healthy", "tools": ["api_deploy"]}),
        ));
        let out = reconcile::<Workflow>(&host, &workflow(), &[]).unwrap();
        assert!(out.status.unwrap().missing_tools.is_empty());
        let c = &out.conditions[0];
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "AllToolsAvailable"));
    }

    #[test]
    fn without_servers_every_tool_is_missing() {
        let out = reconcile::<Workflow>(&FakeHost::new(), &workflow(), &[]).unwrap();
        assert_eq!(out.status.unwrap().missing_tools, ["api_deploy", "git_log", "git_status"]);
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
