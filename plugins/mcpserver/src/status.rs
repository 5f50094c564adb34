//! The MCPServer status and how it is derived from what the host observes of the owned service.

use serde::{Deserialize, Serialize};
use steward_sdk::{ServicePhase, ServiceStatus};

use crate::spec::{McpServerSpec, ServerType};

/// The lifecycle state of a server, in muster's vocabulary.
///
/// stdio servers use `Starting`, `Running`, `Stopped` and `Failed`; remote
/// servers use `Connecting`, `Connected`, `Disconnected`, `Auth Required` and `Failed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerState {
    /// stdio: the process is being started.
    #[default]
    Starting,
    /// stdio: the process runs.
    Running,
    /// stdio: the process is not running and is not meant to be.
    Stopped,
    /// The process or connection failed.
    Failed,
    /// remote: the connection is being made.
    Connecting,
    /// remote: connected.
    Connected,
    /// remote: not connected and not meant to be.
    Disconnected,
    /// remote: reachable, but it answered 401: it wants authorization.
    #[serde(rename = "Auth Required")]
    AuthRequired,
}

impl ServerState {
    /// The state a server of type `ty` is in when the host reports `phase`.
    ///
    /// Phases of the other transport are mapped to their counterpart.
    pub fn from_phase(ty: ServerType, phase: ServicePhase) -> Self {
        let remote = ty.is_remote();
        match phase {
            ServicePhase::Running | ServicePhase::Connected if remote => Self::Connected,
            ServicePhase::Running | ServicePhase::Connected => Self::Running,
            ServicePhase::Stopped | ServicePhase::Disconnected if remote => Self::Disconnected,
            ServicePhase::Stopped | ServicePhase::Disconnected => Self::Stopped,
            ServicePhase::Failed => Self::Failed,
            ServicePhase::Starting | ServicePhase::Connecting => Self::pending(ty),
        }
    }

    /// The state before the host has reported anything: `Starting` or `Connecting`.
    pub fn pending(ty: ServerType) -> Self {
        if ty.is_remote() { Self::Connecting } else { Self::Starting }
    }

    /// The state of a server that is not started: `Stopped` or `Disconnected`.
    pub fn idle(ty: ServerType) -> Self {
        if ty.is_remote() { Self::Disconnected } else { Self::Stopped }
    }

    /// Whether the server is up: `Running` or `Connected`.
    pub fn is_up(self) -> bool {
        matches!(self, Self::Running | Self::Connected)
    }

    /// Whether the server is on its way up: `Starting` or `Connecting`.
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Starting | Self::Connecting)
    }
}

/// The result of the last health probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// No probe result yet.
    #[default]
    Unknown,
    /// The last probe passed.
    Healthy,
    /// The last probe failed.
    Unhealthy,
}

impl From<Option<bool>> for Health {
    fn from(healthy: Option<bool>) -> Self {
        match healthy {
            None => Self::Unknown,
            Some(true) => Self::Healthy,
            Some(false) => Self::Unhealthy,
        }
    }
}

/// What an MCPServer reports; other kinds (Workflow) read `state`, `health` and `tools`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct McpServerStatus {
    /// The spec's `type`, echoed.
    #[serde(rename = "type")]
    pub type_: ServerType,
    /// The lifecycle state.
    pub state: ServerState,
    /// The result of the last health probe.
    pub health: Health,
    /// Why the server last failed, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// RFC 3339 time of the last successful handshake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_connected: Option<String>,
    /// How many times the host restarted the server.
    pub restart_count: u32,
    /// The server's process id while it runs (stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Failed starts or health probes in a row, as the host counts them; 0 after a success.
    pub consecutive_failures: u32,
    /// When the host next tries to restart or reconnect (RFC 3339), while it waits to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_retry_after: Option<String>,
    /// RFC 3339 time at which Steward last saw the outcome of a start or connection attempt change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<String>,
    /// The tools the server lists, sorted, under the names a Workflow calls them by
    /// (muster's `x_<toolPrefix or name>_<tool>` unless the object asks for plain names).
    pub tools: Vec<String>,
    /// How many tools the server lists (`tools`' length), for lists and `kubectl get`.
    pub tool_count: usize,
    /// What the host noticed of a working server that does not stop it (lines of its stderr
    /// dropped for coming too fast, tools left out), one notice each; only while it is up.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl McpServerStatus {
    /// The status of a server whose `autoStart` is false: idle, nothing known.
    pub fn not_started(spec: &McpServerSpec) -> Self {
        Self { type_: spec.type_, state: ServerState::idle(spec.type_), ..Self::default() }
    }

    /// The status of a started server, from the host's observation of its service
    /// (`None` before the host reports anything) and the previous status.
    ///
    /// `tools` are the names the server's tools go by (see [`crate::naming`]); `now` is the
    /// current time, recorded as `lastAttempt` when the outcome of an attempt changed.
    pub fn observed(
        spec: &McpServerSpec,
        service: Option<&ServiceStatus>,
        prev: Option<&Self>,
        tools: Vec<String>,
        now: &str,
    ) -> Self {
        let prev_connected = prev.and_then(|p| p.last_connected.clone());
        let prev_attempt = prev.and_then(|p| p.last_attempt.clone());
        let Some(svc) = service else {
            return Self {
                type_: spec.type_,
                state: ServerState::pending(spec.type_),
                last_connected: prev_connected,
                last_attempt: prev_attempt,
                consecutive_failures: prev.map_or(0, |p| p.consecutive_failures),
                ..Self::default()
            };
        };
        let mut state = ServerState::from_phase(spec.type_, svc.phase);
        if svc.auth_required && spec.type_.is_remote() && !state.is_up() {
            state = ServerState::AuthRequired;
        }
        let health = Health::from(svc.healthy);
        let failing = state == ServerState::Failed || health == Health::Unhealthy;
        // While the service works, the host's message is its notices, one a line.
        let warnings = match svc.message.as_deref() {
            Some(m) if state.is_up() && !failing => {
                m.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
            }
            _ => Vec::new(),
        };
        Self {
            type_: spec.type_,
            state,
            health,
            last_error: last_error(svc, state, failing),
            last_connected: svc.last_connected.clone().or(prev_connected),
            restart_count: svc.restarts,
            pid: svc.pid,
            // The host counts failed starts and probes; the plugin mirrors its count.
            consecutive_failures: svc.consecutive_failures,
            next_retry_after: svc.next_retry_at.clone(),
            last_attempt: None,
            tool_count: tools.len(),
            tools,
            warnings,
        }
        .with_attempt(prev, prev_attempt, now)
    }

    /// Stamps `lastAttempt` with `now` when the outcome differs from `prev`'s, else keeps it.
    fn with_attempt(mut self, prev: Option<&Self>, prev_attempt: Option<String>, now: &str) -> Self {
        let same = prev.is_some_and(|p| {
            (p.state, p.health, p.restart_count, p.consecutive_failures, &p.last_connected)
                == (self.state, self.health, self.restart_count, self.consecutive_failures, &self.last_connected)
        });
        self.last_attempt = if same && prev_attempt.is_some() { prev_attempt } else { Some(now.to_string()) };
        self
    }
}

/// The service's message while it fails, else how its last run ended when that was bad.
fn last_error(svc: &ServiceStatus, state: ServerState, failing: bool) -> Option<String> {
    let message = svc.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
    let bad_exit = svc.last_exit.as_deref().map(str::trim).filter(|e| !e.is_empty() && !exited_cleanly(e));
    if failing {
        let fallback = if state == ServerState::Failed { "the server failed" } else { "the health probe failed" };
        Some(message.or(bad_exit).unwrap_or(fallback).to_string())
    } else {
        bad_exit.map(str::to_string)
    }
}

/// Whether an exit description such as `exit status 0` reports success.
fn exited_cleanly(exit: &str) -> bool {
    exit.contains("exit") && exit.split_whitespace().last() == Some("0")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-24T01:00:00Z";

    fn spec(ty: ServerType, prefix: Option<&str>) -> McpServerSpec {
        McpServerSpec {
            type_: ty,
            command: None,
            args: None,
            env: Default::default(),
            url: None,
            headers: None,
            auto_start: true,
            tool_prefix: prefix.map(str::to_string),
            description: None,
            timeout: 30,
            auth: None,
            family: None,
        }
    }

    fn svc(phase: &str, healthy: Option<bool>) -> ServiceStatus {
        ServiceStatus {
            name: "server".into(),
            phase: phase.parse().unwrap(),
            pid: None,
            restarts: 0,
            consecutive_failures: 0,
            next_retry_at: None,
            last_exit: None,
            healthy,
            last_connected: None,
            tools: Vec::new(),
            message: None,
            auth_required: false,
        }
    }

    #[test]
    fn phases_map_to_the_vocabulary_of_the_transport() {
        use ServerState::*;
        let stdio = ServerType::Stdio;
        let sse = ServerType::Sse;
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Running), Running);
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Connected), Running);
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Stopped), Stopped);
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Failed), Failed);
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Starting), Starting);
        assert_eq!(ServerState::from_phase(sse, ServicePhase::Connected), Connected);
        assert_eq!(ServerState::from_phase(sse, ServicePhase::Running), Connected);
        assert_eq!(ServerState::from_phase(sse, ServicePhase::Disconnected), Disconnected);
        assert_eq!(ServerState::from_phase(sse, ServicePhase::Failed), Failed);
        assert_eq!(ServerState::from_phase(sse, ServicePhase::Connecting), Connecting);
        assert_eq!(ServerState::from_phase(stdio, ServicePhase::Connecting), Starting);
    }

    #[test]
    fn the_hosts_notices_on_a_working_server_are_warnings() {
        let sp = spec(ServerType::Stdio, None);
        let mut s = svc("Running", Some(true));
        s.message = Some("stderr: 12 lines dropped (over 100 lines/s)\ntools not offered: `x`".into());
        let st = McpServerStatus::observed(&sp, Some(&s), None, Vec::new(), NOW);
        assert_eq!(st.warnings, ["stderr: 12 lines dropped (over 100 lines/s)", "tools not offered: `x`"]);
        assert_eq!(st.last_error, None);
        s.healthy = Some(false);
        let st = McpServerStatus::observed(&sp, Some(&s), None, Vec::new(), NOW);
        assert!(st.warnings.is_empty(), "a failing server's message is its error");
        let v = serde_json::to_value(McpServerStatus::observed(
            &sp,
            Some(&svc("Running", Some(true))),
            None,
            Vec::new(),
            NOW,
        ))
        .unwrap();
        assert!(v.get("warnings").is_none(), "{v}");
    }

    #[test]
    fn a_remote_server_answering_401_is_auth_required() {
        let sp = spec(ServerType::StreamableHttp, None);
        let mut s = svc("Disconnected", None);
        s.auth_required = true;
        let st = McpServerStatus::observed(&sp, Some(&s), None, Vec::new(), NOW);
        assert_eq!(st.state, ServerState::AuthRequired);
        assert_eq!(serde_json::to_value(st.state).unwrap(), "Auth Required");
        let stdio = McpServerStatus::observed(&spec(ServerType::Stdio, None), Some(&s), None, Vec::new(), NOW);
        assert_eq!(stdio.state, ServerState::Stopped, "only a remote server asks for authorization");
    }

    #[test]
    fn last_attempt_moves_only_when_the_outcome_changes() {
        let sp = spec(ServerType::Stdio, None);
        let first = McpServerStatus::observed(&sp, Some(&svc("Running", Some(true))), None, Vec::new(), NOW);
        assert_eq!(first.last_attempt.as_deref(), Some(NOW));
        let same = McpServerStatus::observed(&sp, Some(&svc("Running", Some(true))), Some(&first), Vec::new(), "later");
        assert_eq!(same.last_attempt.as_deref(), Some(NOW));
        let failed = McpServerStatus::observed(&sp, Some(&svc("Failed", None)), Some(&same), Vec::new(), "later");
        assert_eq!(failed.last_attempt.as_deref(), Some("later"));
        let waiting = McpServerStatus::observed(&sp, None, Some(&failed), Vec::new(), "even later");
        assert_eq!(waiting.last_attempt.as_deref(), Some("later"), "no observation keeps the last attempt");
    }

    #[test]
    fn failures_and_retry_time_mirror_the_host() {
        let sp = spec(ServerType::Stdio, None);
        let mut failing = svc("Failed", None);
        failing.consecutive_failures = 3;
        failing.next_retry_at = Some("2026-11-21T10:00:04Z".into());
        let st = McpServerStatus::observed(&sp, Some(&failing), None, Vec::new(), NOW);
        assert_eq!(st.consecutive_failures, 3);
        assert_eq!(st.next_retry_after.as_deref(), Some("2026-11-21T10:00:04Z"));
        let before_report = McpServerStatus::observed(&sp, None, Some(&st), Vec::new(), NOW);
        assert_eq!(before_report.consecutive_failures, 3, "nothing observed yet keeps the count");
        let healthy = McpServerStatus::observed(&sp, Some(&svc("Running", Some(true))), Some(&st), Vec::new(), NOW);
        assert_eq!((healthy.consecutive_failures, healthy.next_retry_after), (0, None));
    }

    #[test]
    fn last_error_prefers_the_message_while_failing_then_a_bad_exit() {
        let sp = spec(ServerType::Stdio, None);
        let mut s = svc("Failed", None);
        s.message = Some("command not found: git-mcp".into());
        s.last_exit = Some("exit status 127".into());
        let st = McpServerStatus::observed(&sp, Some(&s), None, Vec::new(), NOW);
        assert_eq!(st.last_error.as_deref(), Some("command not found: git-mcp"));

        let mut restarted = svc("Running", Some(true));
        restarted.last_exit = Some("killed by signal 9".into());
        restarted.restarts = 2;
        let st = McpServerStatus::observed(&sp, Some(&restarted), None, Vec::new(), NOW);
        assert_eq!(st.last_error.as_deref(), Some("killed by signal 9"));
        assert_eq!(st.restart_count, 2);

        let mut clean = svc("Running", Some(true));
        clean.last_exit = Some("exit status 0".into());
        assert_eq!(McpServerStatus::observed(&sp, Some(&clean), None, Vec::new(), NOW).last_error, None);

        let unhealthy = McpServerStatus::observed(&sp, Some(&svc("Running", Some(false))), None, Vec::new(), NOW);
        assert_eq!(unhealthy.last_error.as_deref(), Some("the health probe failed"));
    }

    #[test]
    fn last_connected_survives_when_the_host_forgets_it() {
        let sp = spec(ServerType::StreamableHttp, None);
        let mut s = svc("Connected", Some(true));
        s.last_connected = Some("2025-01-01T00:00:00Z".into());
        let first = McpServerStatus::observed(&sp, Some(&s), None, Vec::new(), NOW);
        let later = McpServerStatus::observed(&sp, Some(&svc("Connecting", None)), Some(&first), Vec::new(), NOW);
        assert_eq!(later.last_connected.as_deref(), Some("2025-01-01T00:00:00Z"));
        assert_eq!(later.state, ServerState::Connecting);
    }

    #[test]
    fn status_json_is_camel_case_and_omits_unknowns() {
        let st = McpServerStatus::not_started(&spec(ServerType::Sse, None));
        let v = serde_json::to_value(&st).unwrap();
        assert_eq!(v["type"], "sse");
        assert_eq!(v["state"], "Disconnected");
        assert_eq!(v["health"], "Unknown");
        assert_eq!(v["restartCount"], 0);
        assert_eq!(v["consecutiveFailures"], 0);
        assert!(v.get("lastError").is_none() && v.get("nextRetryAfter").is_none());
    }
}
