//! What an MCPServer wants from the host (its one owned service) and the conditions it reports.

use std::time::Duration;

use steward_sdk::{Condition, Outcome, RawObject, SecretTarget, ServiceSpec, ServiceStatus};

use crate::naming::{ToolNaming, exposed_tools, family_diverges};
use crate::spec::{AuthType, McpServerSpec};
use crate::status::{Health, McpServerStatus, ServerState};
use crate::values;

/// The name of the one service an MCPServer owns.
pub const SERVICE_NAME: &str = "server";

/// How soon to look again while a started server is still coming up.
pub const PENDING_REQUEUE: Duration = Duration::from_secs(5);

/// The service the host should run (stdio) or connect to (remote) for `spec`.
///
/// Literal `env` and `headers` values are passed as they are; `valueFrom` references become
/// [`steward_sdk::SecretValue`]s, which the host resolves when it starts or connects the
/// service. Fields of the other transport (which validation warns about) are left out.
pub fn service_spec(spec: &McpServerSpec) -> ServiceSpec {
    let remote = spec.type_.is_remote();
    let (env, env_secrets) =
        if remote { Default::default() } else { values::split(&spec.env, SecretTarget::Env, "spec.env") };
    let (headers, header_secrets) = match (&spec.headers, remote) {
        (Some(h), true) => values::split(h, SecretTarget::Header, "spec.headers"),
        _ => Default::default(),
    };
    ServiceSpec {
        name: SERVICE_NAME.to_string(),
        transport: spec.type_.transport(),
        command: if remote { None } else { spec.command.clone() },
        args: if remote { Vec::new() } else { spec.args.clone().unwrap_or_default() },
        env,
        working_dir: None,
        url: if remote { spec.url.clone() } else { None },
        headers,
        timeout_ms: spec.timeout.saturating_mul(1000),
        secrets: env_secrets.into_iter().chain(header_secrets).collect(),
    }
}

/// What a reconcile sees of the object and the host, besides the spec.
pub struct Observed<'a> {
    /// The host's tool prefix (`api.mcp.prefix`, `x` unless configured).
    pub prefix: &'a str,
    /// The object's name (the tool prefix when `toolPrefix` is unset).
    pub name: &'a str,
    /// How its tools are named.
    pub naming: ToolNaming,
    /// The MCPServers of its namespace (for the family rule).
    pub servers: &'a [RawObject],
    /// The host's observation of its service, if any yet.
    pub service: Option<&'a ServiceStatus>,
    /// The status it last reported.
    pub prev: Option<&'a McpServerStatus>,
    /// The current time, RFC 3339.
    pub now: &'a str,
}

/// The outcome of reconciling `spec` given what is observed.
pub fn outcome(spec: &McpServerSpec, seen: &Observed<'_>) -> Outcome<McpServerStatus> {
    let sessions = per_user_condition(spec);
    if !spec.auto_start {
        let status = McpServerStatus::not_started(spec);
        let verb = if spec.type_.is_remote() { "connected to" } else { "started" };
        let ready = Condition::new(
            "Ready",
            false,
            "NotStarted",
            format!("autoStart is false, so the server is not {verb}; set spec.autoStart to true"),
        );
        return with(Outcome::status(status).condition(ready), sessions);
    }
    let fallback = spec.family.as_ref().is_some_and(|f| family_diverges(f, seen.servers));
    let listed = seen.service.map(|s| s.tools.iter().map(|t| t.name.as_str()));
    let tools = exposed_tools(seen.prefix, seen.name, spec, seen.naming, fallback, listed.into_iter().flatten());
    let status = McpServerStatus::observed(spec, seen.service, seen.prev, tools, seen.now);
    let ready = ready_condition(spec, &status, seen.service);
    // Starting/Connecting is never ready.
    let pending = status.state.is_pending();
    let mut out = Outcome::status(status).condition(ready).service(service_spec(spec));
    if pending {
        // The host also re-queues on every change of the service; this only covers a silent start.
        out = out.requeue_after(PENDING_REQUEUE);
    }
    if fallback {
        let family = spec.family.as_ref().map(|f| f.name.as_str()).unwrap_or_default();
        out = out.condition(Condition::new(
            "FamilyNaming",
            false,
            "InstanceArgDiverges",
            format!(
                "the MCPServers of family {family} disagree on family.instanceArg, so (as muster does) their tools are named per server"
            ),
        ));
    }
    with(out, sessions)
}

fn with(out: Outcome<McpServerStatus>, c: Option<Condition>) -> Outcome<McpServerStatus> {
    match c {
        Some(c) => out.condition(c),
        None => out,
    }
}

/// Says plainly that `forwardToken`, `requiredAudiences` and `tokenExchange` have no effect.
fn per_user_condition(spec: &McpServerSpec) -> Option<Condition> {
    let used = spec.auth.as_ref().map(|a| a.per_user_settings()).unwrap_or_default();
    (!used.is_empty()).then(|| {
        Condition::new(
            "PerUserAuth",
            false,
            "NotSupported",
            format!(
                "spec.auth sets {}: these act on the session of each signed-in muster user, which a reconciler does not have; Steward checks them but connects once, with spec.headers",
                used.join(", ")
            ),
        )
    })
}

fn ready_condition(spec: &McpServerSpec, status: &McpServerStatus, service: Option<&ServiceStatus>) -> Condition {
    let host_message = service.and_then(|s| s.message.clone()).filter(|m| !m.trim().is_empty());
    let last_error = || status.last_error.clone().unwrap_or_else(|| "no reason given".to_string());
    let state = status.state;
    match (state, status.health) {
        (s, Health::Healthy) if s.is_up() => {
            let n = status.tools.len();
            let mut message = format!("the server is {s:?} and healthy; it lists {n} tools");
            for w in &status.warnings {
                message.push_str("; ");
                message.push_str(w);
            }
            Condition::new("Ready", true, "Healthy", message)
        }
        (s, Health::Unhealthy) if s.is_up() => {
            Condition::new("Ready", false, "Unhealthy", format!("the health probe failed: {}", last_error()))
        }
        // Nothing is known yet: Unknown, so that a server on its way up is not reported failing.
        (s, _) if s.is_up() => {
            unknown("HealthUnknown", format!("the server is {s:?}; waiting for the first health probe"))
        }
        (ServerState::AuthRequired, _) => {
            let oauth = spec.auth.as_ref().is_some_and(|a| a.type_ == AuthType::Oauth);
            let what = if oauth {
                "it wants an OAuth token; muster signs each user in with `muster auth login`, which Steward does not do: give the server a token in spec.headers (a valueFrom reference keeps it out of the resource)"
            } else {
                "set its credentials in spec.headers, for example Authorization from a valueFrom reference"
            };
            Condition::new("Ready", false, "AuthRequired", format!("the server answered 401 Unauthorized: {what}"))
        }
        (ServerState::Failed, _) => Condition::new("Ready", false, "Failed", last_error()),
        (s, _) if s.is_pending() => {
            unknown(&format!("{s:?}"), host_message.unwrap_or_else(|| format!("the server is {s:?}")))
        }
        // Stopped/Disconnected when the host gave up or stopped it.
        (s, _) => Condition::new(
            "Ready",
            false,
            format!("{s:?}").as_str(),
            host_message.unwrap_or_else(|| format!("the server is {s:?}")),
        ),
    }
}

/// `Ready` with status Unknown: the host has not learnt yet whether the server works.
fn unknown(reason: &str, message: String) -> Condition {
    Condition { type_: "Ready".into(), status: steward_sdk::ConditionStatus::Unknown, reason: reason.into(), message }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::{FakeHost, finalize, object, reconcile};
    use steward_sdk::{
        ConditionStatus, RawObject, SecretSource, SecretTarget, SecretValue, ServiceStatus, ToolInfo, Transport,
    };

    use super::*;
    use crate::McpServer;

    fn stdio(auto_start: bool) -> RawObject {
        object(
            "MCPServer",
            "git",
            json!({"type": "stdio", "command": "git-mcp", "args": ["--repo", "."], "env": {"A": "1"},
                   "autoStart": auto_start, "toolPrefix": "git", "timeout": 10}),
        )
    }

    fn remote(auto_start: bool) -> RawObject {
        object(
            "MCPServer",
            "api",
            json!({"type": "streamable-http", "url": "https://api.example.com/mcp",
                   "headers": {"Authorization": "Bearer t"}, "autoStart": auto_start}),
        )
    }

    fn svc(phase: &str, healthy: Option<bool>, tools: &[&str]) -> ServiceStatus {
        ServiceStatus {
            name: SERVICE_NAME.into(),
            phase: phase.parse().unwrap(),
            pid: Some(42),
            restarts: 1,
            consecutive_failures: 0,
            next_retry_at: None,
            last_exit: None,
            healthy,
            last_connected: Some("2025-01-01T00:00:00Z".into()),
            tools: tools.iter().map(|n| ToolInfo { name: (*n).into(), description: String::new() }).collect(),
            message: None,
            auth_required: false,
        }
    }

    fn ready(out: &Outcome<McpServerStatus>) -> &Condition {
        out.conditions.iter().find(|c| c.type_ == "Ready").expect("a Ready condition")
    }

    #[test]
    fn auto_start_asks_for_exactly_one_service_with_the_spec() {
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[]).unwrap();
        assert_eq!(out.services.len(), 1);
        let s = &out.services[0];
        assert_eq!(s.name, "server");
        assert_eq!(s.transport, Transport::Stdio);
        assert_eq!(s.command.as_deref(), Some("git-mcp"));
        assert_eq!(s.args, ["--repo", "."]);
        assert_eq!(s.env["A"], "1");
        assert_eq!(s.timeout_ms, 10_000);

        let out = reconcile::<McpServer>(&FakeHost::new(), &remote(true), &[]).unwrap();
        let s = &out.services[0];
        assert_eq!(s.transport, Transport::StreamableHttp);
        assert_eq!(s.url.as_deref(), Some("https://api.example.com/mcp"));
        assert_eq!(s.headers["Authorization"], "Bearer t");
        assert_eq!(s.timeout_ms, 30_000, "the default timeout is 30 seconds");
    }

    #[test]
    fn without_auto_start_no_service_and_not_started() {
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(false), &[]).unwrap();
        assert!(out.services.is_empty());
        assert_eq!(out.status.as_ref().unwrap().state, ServerState::Stopped);
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "NotStarted"));
        assert!(c.message.contains("autoStart is false"), "{}", c.message);
        assert_eq!(out.requeue_after, None);

        let out = reconcile::<McpServer>(&FakeHost::new(), &remote(false), &[]).unwrap();
        assert!(out.services.is_empty());
        assert_eq!(out.status.unwrap().state, ServerState::Disconnected);
    }

    #[test]
    fn before_the_host_reports_the_server_is_starting_and_requeued() {
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[]).unwrap();
        let st = out.status.as_ref().unwrap();
        assert_eq!((st.state, st.health), (ServerState::Starting, Health::Unknown));
        // Not ready, and not failing either: nothing is known yet.
        assert_eq!((ready(&out).status, ready(&out).reason.as_str()), (ConditionStatus::Unknown, "Starting"));
        assert_eq!(out.requeue_after, Some(PENDING_REQUEUE));

        let out = reconcile::<McpServer>(&FakeHost::new(), &remote(true), &[]).unwrap();
        assert_eq!(out.status.unwrap().state, ServerState::Connecting);
    }

    #[test]
    fn running_and_healthy_is_ready_with_prefixed_tools() {
        let out =
            reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[svc("Running", Some(true), &["status", "diff"])])
                .unwrap();
        let st = out.status.as_ref().unwrap();
        assert_eq!((st.state, st.health), (ServerState::Running, Health::Healthy));
        assert_eq!(st.tools, ["x_git_diff", "x_git_status"], "muster's names");
        assert_eq!(st.restart_count, 1);
        assert_eq!(st.last_connected.as_deref(), Some("2025-01-01T00:00:00Z"));
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "Healthy"));
        assert_eq!(out.requeue_after, None);
    }

    #[test]
    fn a_working_servers_warnings_are_in_its_ready_message() {
        let mut noted = svc("Running", Some(true), &["status"]);
        noted.message = Some("stderr: 9 lines dropped (over 100 lines/s)".into());
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[noted]).unwrap();
        assert_eq!(out.status.as_ref().unwrap().warnings, ["stderr: 9 lines dropped (over 100 lines/s)"]);
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::True, "Healthy"));
        assert_eq!(
            c.message,
            "the server is Running and healthy; it lists 1 tools; stderr: 9 lines dropped (over 100 lines/s)"
        );
    }

    #[test]
    fn connected_remote_is_ready() {
        let out =
            reconcile::<McpServer>(&FakeHost::new(), &remote(true), &[svc("Connected", Some(true), &["q"])]).unwrap();
        assert_eq!(out.status.as_ref().unwrap().state, ServerState::Connected);
        assert_eq!(ready(&out).status, ConditionStatus::True);
    }

    #[test]
    fn running_without_a_probe_or_unhealthy_is_not_ready_and_not_requeued() {
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[svc("Running", None, &[])]).unwrap();
        assert_eq!((ready(&out).status, ready(&out).reason.as_str()), (ConditionStatus::Unknown, "HealthUnknown"));
        assert_eq!(out.requeue_after, None, "the host re-queues when the probe reports");

        let mut bad = svc("Running", Some(false), &[]);
        bad.message = Some("initialize timed out after 10s".into());
        let out = reconcile::<McpServer>(&FakeHost::new(), &stdio(true), &[bad]).unwrap();
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "Unhealthy"));
        assert!(c.message.contains("initialize timed out"), "{}", c.message);
        assert_eq!(out.status.unwrap().health, Health::Unhealthy);
    }

    #[test]
    fn failed_service_reports_its_error_and_the_hosts_failure_count() {
        let mut failed = svc("Failed", None, &[]);
        failed.message = Some("exec: git-mcp: not found".into());
        failed.consecutive_failures = 3;
        let mut obj = stdio(true);
        obj.status = Some(
            json!({"type": "stdio", "state": "Failed", "health": "Unknown", "consecutiveFailures": 2}).to_string(),
        );
        let out = reconcile::<McpServer>(&FakeHost::new(), &obj, std::slice::from_ref(&failed)).unwrap();
        let st = out.status.as_ref().unwrap();
        assert_eq!(st.state, ServerState::Failed);
        assert_eq!(st.consecutive_failures, 3);
        assert_eq!(st.last_error.as_deref(), Some("exec: git-mcp: not found"));
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "Failed"));
        assert_eq!(out.services.len(), 1, "a failed server is still wanted; the host restarts it");

        obj.status = Some(serde_json::to_string(st).unwrap());
        let out = reconcile::<McpServer>(&FakeHost::new(), &obj, &[svc("Running", Some(true), &[])]).unwrap();
        assert_eq!(out.status.unwrap().consecutive_failures, 0);
    }

    #[test]
    fn references_become_secrets_and_literals_stay() {
        let obj = object(
            "MCPServer",
            "api",
            json!({"type": "streamable-http", "url": "https://api.example.com/mcp", "autoStart": true,
                   "headers": {"X-Team": "a", "Authorization": {"valueFrom": {"secretKeyRef": {"name": "gh", "key": "h"}}}}}),
        );
        let out = reconcile::<McpServer>(&FakeHost::new(), &obj, &[]).unwrap();
        let s = &out.services[0];
        assert_eq!(s.headers.len(), 1, "only the literal is a header: {:?}", s.headers);
        assert_eq!(
            s.secrets,
            [SecretValue {
                target: SecretTarget::Header,
                name: "Authorization".into(),
                source: SecretSource::SecretKeyRef { name: "gh".into(), namespace: None, key: "h".into() }
            }]
        );
        let stdio = object(
            "MCPServer",
            "git",
            json!({"type": "stdio", "command": "g", "autoStart": true, "url": "https://ignored.example",
                   "env": {"T": {"valueFrom": {"env": "HOST_T"}}}}),
        );
        let s = reconcile::<McpServer>(&FakeHost::new(), &stdio, &[]).unwrap().services.remove(0);
        assert_eq!((s.url, s.env.len(), s.secrets[0].target), (None, 0, SecretTarget::Env));
    }

    #[test]
    fn a_401_is_auth_required_and_per_user_settings_are_said_to_do_nothing() {
        let obj = object(
            "MCPServer",
            "k8s",
            json!({"type": "streamable-http", "url": "https://k8s.example.com/mcp", "autoStart": true,
                   "auth": {"type": "oauth", "forwardToken": true}}),
        );
        let mut s = svc("Disconnected", None, &[]);
        s.auth_required = true;
        let out = reconcile::<McpServer>(&FakeHost::new(), &obj, &[s]).unwrap();
        assert_eq!(out.status.as_ref().unwrap().state, ServerState::AuthRequired);
        let c = ready(&out);
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "AuthRequired"));
        assert!(c.message.contains("401") && c.message.contains("OAuth"), "{}", c.message);
        let per_user = out.conditions.iter().find(|c| c.type_ == "PerUserAuth").expect("a PerUserAuth condition");
        assert!(per_user.message.contains("forwardToken"), "{}", per_user.message);
    }

    #[test]
    fn family_members_are_named_after_the_family_unless_they_disagree() {
        let member = |name: &str, arg: &str| {
            object(
                "MCPServer",
                name,
                json!({"type": "stdio", "command": "k", "autoStart": true,
                       "family": {"name": "kubernetes", "instanceArg": arg}}),
            )
        };
        let up = [svc("Running", Some(true), &["list_pods"])];
        let host = FakeHost::new().with(member("a", "cluster")).with(member("b", "cluster"));
        let out = reconcile::<McpServer>(&host, &member("a", "cluster"), &up).unwrap();
        assert_eq!(out.status.unwrap().tools, ["x_kubernetes_list_pods"]);
        host.insert(member("b", "mc"));
        let out = reconcile::<McpServer>(&host, &member("a", "cluster"), &up).unwrap();
        assert_eq!(out.status.as_ref().unwrap().tools, ["x_a_list_pods"], "the family falls back to per-server names");
        assert!(out.conditions.iter().any(|c| c.type_ == "FamilyNaming"));
    }

    #[test]
    fn finalize_asks_for_no_services_and_keeps_the_status() {
        let mut obj = stdio(true);
        obj.deleting = true;
        obj.status = Some(json!({"state": "Running"}).to_string());
        let out = finalize::<McpServer>(&FakeHost::new(), &obj, &[svc("Running", Some(true), &[])]).unwrap();
        assert!(out.services.is_empty());
        assert_eq!(out.status, None, "None keeps the last status");
    }
}
