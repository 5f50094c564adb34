//! The `tools` unit: the `steward:plugin/tools` import (the object's call records in, the calls it wants out) and the check of its `allow` setting.

use std::sync::Arc;
use std::time::Duration;

use steward_sdk::{CallRecord, CallRequest, CallState as State, RawOutcome};
use wasmtime::component::{HasSelf, Linker};

use super::effects::{Effects, HostContext, Unit};
use crate::driver::Driver;
use crate::model::{ObjectKey, Reason};
use crate::tools::{Executor, ExecutorOptions, ToolsSettings};

use crate::plugin::bindings::steward::plugin::tools as wt;
use crate::plugin::{CallInput, CallState, Capability, Inputs, Plugin, PluginSettings, convert};

/// Tool calls the host makes for an object, asynchronously (see [`crate::tools`]).
pub struct Tools;

/// The capability name of [`Tools`].
pub const NAME: &str = "tools";

/// Why an owner is reconciled when one of its tool calls started, was retried or ended.
pub const CHANGED: Reason = Reason::Unit("toolCallChanged");

/// The tools unit's input to a call: the tool calls the host holds for the object.
#[derive(Clone, Debug, Default)]
pub struct HeldCalls(pub Vec<CallRecord>);

/// The longest call id a plugin may use, in bytes.
pub const MAX_CALL_ID: usize = 253;

impl Capability for Tools {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["steward:plugin/tools@0.1.0"]
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wt::add_to_linker::<CallState, HasSelf<ToolsState>>(linker, |s| s.slot::<ToolsState>())
    }

    /// `tools.allow` must be present and each pattern non-empty: a grant without it would let
    /// the plugin call nothing, which is never what the operator meant.
    fn check_settings(&self, plugin: &str, settings: &PluginSettings) -> Result<(), String> {
        let tools = settings.sections.get_or_default::<ToolsSettings>();
        if tools.allow.is_empty() {
            return Err(format!(
                "plugins.{plugin}.tools.allow: the `tools` capability needs the tools the plugin may call, \
                 for example `tools: {{ allow: [\"x_*\", \"workflow_*\"] }}`"
            ));
        }
        if let Some(i) = tools.allow.iter().position(|p| p.trim().is_empty()) {
            return Err(format!("plugins.{plugin}.tools.allow[{i}]: a pattern cannot be empty"));
        }
        Ok(())
    }

    fn begin_call(&self, state: &mut CallState, input: &CallInput) {
        let held = input.inputs.get::<HeldCalls>().map_or(&[][..], |h| &h.0);
        let slot = state.slot::<ToolsState>();
        slot.held = held.iter().map(record_to_wit).collect();
        slot.requested = None;
    }

    /// The calls the plugin asked for through `request` become the answer's `calls` (left
    /// `None` when it never called it: the host's calls stay as they are).
    fn finish_call(&self, state: &mut CallState, outcome: &mut RawOutcome) {
        outcome.calls = state.slot::<ToolsState>().take_requested();
    }

    fn output_size(&self, outcome: &RawOutcome) -> u64 {
        outcome.calls.iter().flatten().map(convert::call_size).sum()
    }
}

impl Unit for Tools {
    /// Starts the durable executor of tool calls over the host's store; a change of a call
    /// queues its owner.
    fn start(&self, host: &HostContext) -> Result<Option<Arc<dyn Effects>>, String> {
        let (executor, events) = Executor::start(host.store.clone(), ExecutorOptions::default(), host.metrics.clone());
        let forward = host.requeue.forward(events, CHANGED);
        Ok(Some(Arc::new(Running { executor, driver: host.driver.clone(), forward })))
    }
}

/// The tools unit as it runs: the executor of the calls objects ask for.
struct Running {
    executor: Arc<Executor>,
    driver: Arc<dyn Driver>,
    forward: tokio::task::JoinHandle<()>,
}

#[async_trait::async_trait]
impl Effects for Running {
    /// The calls the host holds for the owner, for a plugin granted `tools`; none (and no
    /// lookup on the reconcile path) for the others.
    fn input(&self, plugin: &Plugin, owner: &ObjectKey, inputs: &mut Inputs) {
        if plugin.settings().grants(NAME) {
            inputs.insert(HeldCalls(self.executor.calls(owner)));
        }
    }

    /// Hands the calls the owner wants to the executor, with its plugin's allow-list. A replica
    /// that lost the lease starts nothing: the new leader's reconcile asks again.
    fn reconciled(&self, plugin: &Plugin, owner: &ObjectKey, outcome: &mut RawOutcome) {
        if let Some(calls) = outcome.calls.take()
            && self.driver.leads()
        {
            self.executor.request(owner, calls, plugin.name(), &plugin.settings().sections.get_or_default());
        }
    }

    /// Cancels every call of the owner and forgets their records.
    async fn forget(&self, owner: &ObjectKey) {
        self.executor.remove_owner(owner).await;
    }

    /// Calls in flight are cancelled on their servers and left pending, for the new leader.
    fn lost_lead(&self) {
        self.executor.suspend();
    }

    /// Calls cut short by the last stop go on once their objects ask for them again.
    fn startup_owners(&self) -> Vec<ObjectKey> {
        self.executor.owners_with_open_calls()
    }

    async fn shutdown(&self, grace: Duration) {
        self.executor.shutdown(grace).await;
        self.forward.abort();
    }

    fn exposed(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.executor.clone())
    }
}

/// The tools unit's state in one store: the object's call records, and the calls it asked for.
#[derive(Default)]
pub struct ToolsState {
    held: Vec<wt::CallRecord>,
    requested: Option<Vec<wt::CallRequest>>,
}

impl ToolsState {
    /// The calls the last reconcile asked for through `request` (`None` when it never called it).
    fn take_requested(&mut self) -> Option<Vec<CallRequest>> {
        self.requested.take().map(|calls| calls.into_iter().map(request_from_wit).collect())
    }
}

impl wt::Host for ToolsState {
    fn calls(&mut self) -> wasmtime::Result<Vec<wt::CallRecord>> {
        Ok(self.held.clone())
    }

    fn request(&mut self, calls: Vec<wt::CallRequest>) -> wasmtime::Result<()> {
        self.requested = Some(calls);
        Ok(())
    }
}

fn record_to_wit(r: &CallRecord) -> wt::CallRecord {
    wt::CallRecord {
        id: r.id.clone(),
        tool: r.tool.clone(),
        state: match r.state {
            State::Pending => wt::CallState::Pending,
            State::Running => wt::CallState::Running,
            State::Succeeded => wt::CallState::Succeeded,
            State::Failed => wt::CallState::Failed,
            State::Cancelled => wt::CallState::Cancelled,
        },
        attempts: r.attempts,
        result: r.result.as_ref().map(|v| v.to_string()),
        truncated: r.truncated,
        error: r.error.clone(),
        started_at: r.started_at.clone(),
        finished_at: r.finished_at.clone(),
    }
}

/// A request as the plugin sent it; arguments that are not JSON are kept as a string, which
/// the executor refuses with a message on the call.
fn request_from_wit(c: wt::CallRequest) -> CallRequest {
    let arguments = serde_json::from_str(&c.arguments).unwrap_or(serde_json::Value::String(c.arguments.clone()));
    CallRequest { id: c.id, tool: c.tool, arguments, timeout_ms: c.timeout_ms }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wt::Host as _;

    fn settings(allow: &[&str]) -> PluginSettings {
        let mut s = PluginSettings { capabilities: vec![NAME.into()], ..Default::default() };
        s.sections.insert(NAME, ToolsSettings { allow: allow.iter().map(|s| s.to_string()).collect(), timeout: None });
        s
    }

    #[test]
    fn a_grant_needs_an_allow_list_and_the_error_names_the_key() {
        let e = Tools.check_settings("wr", &settings(&[])).unwrap_err();
        assert!(e.starts_with("plugins.wr.tools.allow:"), "{e}");
        let e = Tools.check_settings("wr", &settings(&["x_*", " "])).unwrap_err();
        assert!(e.starts_with("plugins.wr.tools.allow[1]:"), "{e}");
        assert!(Tools.check_settings("wr", &settings(&["x_*"])).is_ok());
    }

    #[test]
    fn the_plugin_reads_its_records_and_the_last_request_wins() {
        let mut state = CallState::new(1 << 20, &[]);
        let held = CallRecord {
            id: "steps/a".into(),
            tool: "x_s_echo".into(),
            state: State::Succeeded,
            attempts: 1,
            result: Some(serde_json::json!({"content": [], "isError": false})),
            truncated: false,
            error: None,
            started_at: Some("2026-01-01T00:00:00Z".into()),
            finished_at: Some("2026-01-01T00:00:01Z".into()),
        };
        let mut input = CallInput::none();
        input.inputs.insert(HeldCalls(vec![held]));
        Tools.begin_call(&mut state, &input);
        let seen = state.slot::<ToolsState>().calls().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].state, wt::CallState::Succeeded);
        assert!(seen[0].result.as_deref().unwrap().contains("isError"));
        let req = |id: &str, args: &str| wt::CallRequest {
            id: id.into(),
            tool: "x_s_echo".into(),
            arguments: args.into(),
            timeout_ms: None,
        };
        state.slot::<ToolsState>().request(vec![req("a", "{}")]).unwrap();
        state.slot::<ToolsState>().request(vec![req("b", r#"{"message":"hi"}"#), req("c", "not json")]).unwrap();
        let got = state.slot::<ToolsState>().take_requested().unwrap();
        assert_eq!(got.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(got[0].arguments, serde_json::json!({"message": "hi"}));
        assert_eq!(got[1].arguments, serde_json::json!("not json"));
        // A reconcile that never calls `request` changes nothing.
        Tools.begin_call(&mut state, &CallInput::none());
        assert!(state.slot::<ToolsState>().take_requested().is_none());
    }
}
