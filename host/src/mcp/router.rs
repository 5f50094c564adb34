//! The host's [`Router`]: sends each tool call to the MCP server, Workflow or management tool that offers it.

use std::sync::{Arc, OnceLock, Weak};

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::PeerRequestOptions;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::catalog::{self, Target, WORKFLOW_PREFIX};
use super::core::{self, CoreTool};
use super::workflow::{self, Progress};
use crate::engine::Engine;
use crate::services::{LiveSession, human, request_failure};
use crate::tools::{CallError, RoutedCall, Router};

/// The kind of the pseudo-caller of calls that come from MCP clients of the endpoint.
pub const ENDPOINT_CALLER_KIND: &str = "MCPClient";

/// The aggregator of the host's tools. It holds the engine weakly (the engine holds the router
/// for its executor), so it can be made before the engine and bound to it later.
#[derive(Debug, Default)]
pub struct Aggregator {
    engine: OnceLock<Weak<Engine>>,
}

impl Aggregator {
    /// An aggregator not bound to an engine yet: every call is [`CallError::Transport`] until [`Aggregator::bind`].
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// An aggregator bound to `engine`.
    pub fn with_engine(engine: &Arc<Engine>) -> Arc<Self> {
        let a = Self::new();
        a.bind(engine);
        a
    }

    /// Binds it to `engine`; false (and nothing changes) when it is bound already.
    pub fn bind(&self, engine: &Arc<Engine>) -> bool {
        self.engine.set(Arc::downgrade(engine)).is_ok()
    }

    /// The engine, while it is bound and alive.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        self.engine.get().and_then(Weak::upgrade)
    }

    /// Makes one attempt at `call` as [`Router::call`] does, and reports its progress on
    /// `progress`: each step of a `workflow_<name>` run (the final one too), or every
    /// `notifications/progress` the server sends for a server's tool (the request to the server
    /// then carries a progress token of the host's own). Nothing is reported for a `core_*` tool.
    pub async fn call_with_progress(
        &self,
        call: &RoutedCall,
        cancel: CancellationToken,
        progress: Option<&UnboundedSender<Progress>>,
    ) -> Result<Value, CallError> {
        let Some(engine) = self.engine() else {
            return Err(CallError::Transport("the host is starting or stopping: no engine to route the call".into()));
        };
        let namespace = call.caller.namespace().as_str();
        if let Some(tool) = CoreTool::from_name(&call.tool) {
            return core::call(&engine, namespace, tool, &call.arguments).await;
        }
        if let Some(flow) = call.tool.strip_prefix(WORKFLOW_PREFIX) {
            return self.run_workflow(&engine, call, flow, cancel, progress).await;
        }
        let catalog = catalog::build(&engine, namespace);
        let Some(Target::Server { owner, service, tool }) = catalog.get(&call.tool).map(|e| e.target.clone()) else {
            return Err(not_offered(namespace, &call.tool));
        };
        let Some(live) = engine.units().services().session(&owner, &service) else {
            return Err(not_offered(namespace, &call.tool));
        };
        let deadline = tokio::time::Instant::now() + call.timeout;
        let (live, ended) = match call_server(&live, &tool, call, &cancel, deadline, progress).await {
            // Refused before the server could act on it: once the service's supervisor has
            // re-established the session, the call is sent again, once.
            Err(Failure::NotReached(words)) => {
                let since = live.attempts();
                live.call_failed(words.clone());
                // The supervisor reconnects at once; its attempt takes at most a probe timeout
                // or two (a handshake, a ping).
                let until = deadline.min(tokio::time::Instant::now() + live.check_after() * 2);
                let renewed = tokio::select! {
                    r = live.renewed(since, until) => r,
                    () = cancel.cancelled() => return Err(CallError::Cancelled),
                };
                let Some(again) = renewed else {
                    return Err(CallError::Transport(words));
                };
                let ended = call_server(&again, &tool, call, &cancel, deadline, progress).await;
                (again, ended)
            }
            ended => (live, ended),
        };
        // The service's health follows how its calls end, as well as its probes.
        match ended {
            Ok(value) => {
                live.call_answered();
                Ok(value)
            }
            Err(Failure::Call(e)) => {
                match &e {
                    CallError::Refused(_) => live.call_answered(),
                    CallError::Timeout(_) => live.call_unanswered(),
                    _ => {}
                }
                Err(e)
            }
            Err(Failure::NotReached(words) | Failure::Transport(words)) => {
                live.call_failed(words.clone());
                Err(CallError::Transport(words))
            }
        }
    }

    async fn run_workflow(
        &self,
        engine: &Engine,
        call: &RoutedCall,
        flow: &str,
        cancel: CancellationToken,
        progress: Option<&UnboundedSender<Progress>>,
    ) -> Result<Value, CallError> {
        let key = crate::model::ObjectKey::new(
            workflow::RUN_KIND,
            call.caller.namespace(),
            workflow::run_name(&call.caller, &call.id),
        );
        // A run an earlier attempt started is followed, whatever the Workflow's state now.
        if engine.cached(&key).is_none() {
            let offered = catalog::build(engine, call.caller.namespace());
            if !matches!(offered.get(&call.tool).map(|e| &e.target), Some(Target::Workflow(_))) {
                return Err(CallError::NotOffered(format!(
                    "no Workflow {flow} of namespace {} is ready to run (it is missing, invalid, or misses tools)",
                    call.caller.namespace()
                )));
            }
        }
        let parent = call.caller.kind() != ENDPOINT_CALLER_KIND;
        let started = tokio::select! {
            r = workflow::start(engine, &call.caller, &call.id, flow, &call.arguments, parent) => r?,
            () = cancel.cancelled() => return Err(CallError::Cancelled),
            () = tokio::time::sleep(call.timeout) => return Err(CallError::Timeout(call.timeout)),
        };
        workflow::follow(engine, &started, call.timeout, &cancel, &call.host_stop, progress).await
    }
}

#[async_trait::async_trait]
impl Router for Aggregator {
    async fn call(&self, call: &RoutedCall, cancel: CancellationToken) -> Result<Value, CallError> {
        self.call_with_progress(call, cancel, None).await
    }
}

fn not_offered(namespace: &str, tool: &str) -> CallError {
    CallError::NotOffered(format!("no healthy MCPServer of namespace {namespace} offers tool {tool}"))
}

/// How an attempt at a server's tool ended, before the request is cancelled or answered.
enum Ended {
    Answer(Box<Result<Result<ServerResult, rmcp::ServiceError>, tokio::sync::oneshot::error::RecvError>>),
    Cancelled,
    TimedOut,
}

/// Why an attempt at a server's tool failed.
enum Failure {
    /// The call ended without a transport fault: refused, timed out or cancelled.
    Call(CallError),
    /// The transport failed before the server could act on the request (in words).
    NotReached(String),
    /// The transport failed, maybe after the server got the request (in words).
    Transport(String),
}

/// Calls `tool` on the server behind `live` with `call`'s arguments, by `deadline`;
/// cancelling or timing out sends MCP's `notifications/cancelled` for the request. A call
/// still unanswered after the session's [`LiveSession::check_after`] has the server probed.
///
/// What the server sent that says why a call failed (an error's words, a result with
/// `isError`) comes back with the service's secret values redacted; a good result is the
/// caller's, as the server gave it.
async fn call_server(
    live: &LiveSession,
    tool: &str,
    call: &RoutedCall,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
    progress: Option<&UnboundedSender<Progress>>,
) -> Result<Value, Failure> {
    match send_call(live, tool, call, cancel, deadline, progress).await {
        Ok(mut value) => {
            if value.get("isError") == Some(&Value::Bool(true)) {
                live.redact_json(&mut value);
            }
            Ok(value)
        }
        Err(Failure::Call(CallError::Refused(words))) => Err(Failure::Call(CallError::Refused(live.redact(&words)))),
        Err(Failure::Call(CallError::Transport(words))) => {
            Err(Failure::Call(CallError::Transport(live.redact(&words))))
        }
        Err(Failure::NotReached(words)) => Err(Failure::NotReached(live.redact(&words))),
        Err(Failure::Transport(words)) => Err(Failure::Transport(live.redact(&words))),
        Err(other) => Err(other),
    }
}

/// [`call_server`], before redaction.
async fn send_call(
    live: &LiveSession,
    tool: &str,
    call: &RoutedCall,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
    progress: Option<&UnboundedSender<Progress>>,
) -> Result<Value, Failure> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = Some(call.arguments.clone());
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    if cancel.is_cancelled() {
        return Err(Failure::Call(CallError::Cancelled));
    }
    // The call is in flight for the server's requests (sampling, elicitation) before it is sent.
    let held = progress.and_then(|_| live.relay.reserve(crate::services::asker()));
    let sent = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(Failure::Call(CallError::Cancelled)),
        r = live.peer.send_cancellable_request(request, PeerRequestOptions::no_options()) => r,
        () = tokio::time::sleep_until(deadline) => return Err(Failure::Call(CallError::Timeout(call.timeout))),
    };
    let mut handle = sent.map_err(|e| {
        let (words, not_reached) = request_failure(&e);
        let words = format!("cannot send tools/call: {words}");
        if not_reached { Failure::NotReached(words) } else { Failure::Transport(words) }
    })?;
    // rmcp gives every request a progress token of its own: the server's progress for this one
    // goes to `progress` until the answer came. (Progress the server sends before this line ran
    // is not relayed: the request is only queued by then, so in practice none is lost.)
    let relayed = progress.map(|sink| relay_progress(live, handle.progress_token.clone(), sink.clone(), held.as_ref()));
    let check = tokio::time::sleep(live.check_after());
    tokio::pin!(check);
    let mut checked = false;
    let ended = loop {
        tokio::select! {
            r = &mut handle.rx => break Ended::Answer(Box::new(r)),
            () = cancel.cancelled() => break Ended::Cancelled,
            () = tokio::time::sleep_until(deadline) => break Ended::TimedOut,
            () = &mut check, if !checked => {
                checked = true;
                live.call_unanswered();
            }
        }
    };
    if let Some((subscription, forward)) = relayed {
        // What the server sent before its answer is handed on before the call ends: its
        // notifications are handled on tasks of their own, let them run first.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        drop(subscription);
        let _ = forward.await;
    }
    let answer = match ended {
        Ended::Answer(a) => a,
        Ended::Cancelled => {
            // Telling the server is bounded too: a server that does not read cannot hold the call.
            let notice = handle.cancel(Some("cancelled by the caller".into()));
            let _ = tokio::time::timeout(live.check_after(), notice).await;
            return Err(Failure::Call(CallError::Cancelled));
        }
        Ended::TimedOut => {
            let notice = handle.cancel(Some(format!("no answer within {}", human(call.timeout))));
            let _ = tokio::time::timeout(live.check_after(), notice).await;
            return Err(Failure::Call(CallError::Timeout(call.timeout)));
        }
    };
    match *answer {
        Err(_) => Err(Failure::Transport("the MCP session closed before the answer".into())),
        Ok(Ok(ServerResult::CallToolResult(r))) => serde_json::to_value(r)
            .map_err(|e| Failure::Call(CallError::Transport(format!("the answer cannot be read: {e}")))),
        Ok(Ok(_)) => Err(Failure::Call(CallError::Refused(format!(
            "the server answered tools/call for {tool} with something other than a tool result"
        )))),
        Ok(Err(rmcp::ServiceError::McpError(e))) => {
            Err(Failure::Call(CallError::Refused(format!("the server refused {tool}: {}", e.message))))
        }
        Ok(Err(rmcp::ServiceError::TransportClosed)) => {
            Err(Failure::Transport("the connection to the server closed before its answer".into()))
        }
        Ok(Err(e)) => {
            let (words, not_reached) = request_failure(&e);
            Err(if not_reached { Failure::NotReached(words) } else { Failure::Transport(words) })
        }
    }
}

/// Subscribes `token` on `live`'s session whose notifications go to `sink` as
/// [`Progress`]; the task ends once the subscription is dropped and all was handed on.
fn relay_progress(
    live: &LiveSession,
    token: rmcp::model::ProgressToken,
    sink: UnboundedSender<Progress>,
    held: Option<&crate::services::Reservation>,
) -> (crate::services::Subscription, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<rmcp::model::ProgressNotificationParam>();
    let subscription = live.relay.subscribe(token, tx, held);
    let redactor = live.clone();
    let forward = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            let message = p.message.map(|m| redactor.redact(&m));
            let _ = sink.send(Progress { done: p.progress, total: p.total, message });
        }
    });
    (subscription, forward)
}
