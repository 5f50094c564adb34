//! The executor: records each requested call durably, makes it through the [`Router`], retries transport failures with backoff, cancels what is no longer wanted, and resumes what was cut short.
//!
//! Every state a call goes through (pending, running, an attempt's retry, its end) is written
//! to the store before the owner is told, so what a reconcile sees has survived a crash. A
//! call that was running when the host died is made again once, when its object asks for it
//! again (the at-least-once rule of `docs/workflows.md`); if the host dies during that attempt
//! too, the call ends failed instead of being made a third time. A graceful stop, or a
//! replica losing its lease, cancels the calls in flight on their servers and leaves them
//! pending, to be made again once their object asks (on the replica that leads).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use steward_sdk::{CallRecord, CallRequest, CallState};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::ToolsSettings;
use super::{CallError, RoutedCall, Router};
use crate::capabilities::MAX_CALL_ID;
use crate::metrics::{KindLabel, KindResult, Metrics};
use crate::model::{ObjectKey, StatusRecord, now_millis, rfc3339};
use crate::store::Store;

/// Prefix of the store's settings that hold call records.
const META_PREFIX: &str = "tools.call:";

/// The prefix of tools that run a Workflow: they last as long as the nested run.
const WORKFLOW_TOOL_PREFIX: &str = "workflow_";

/// How the executor makes calls; [`ExecutorOptions::default`] gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorOptions {
    /// Timeout of one attempt when the call names none (default 60s).
    pub default_timeout: Duration,
    /// Timeout of one attempt at a `workflow_<name>` tool when the call names none (default 1h):
    /// it lasts as long as the whole nested run.
    pub workflow_timeout: Duration,
    /// Attempts a call gets when transport errors keep failing it (default 3).
    pub max_attempts: u32,
    /// Wait before the first retry (default 1s); doubles on each retry.
    pub initial_backoff: Duration,
    /// The longest wait between retries (default 30s).
    pub max_backoff: Duration,
    /// The largest result kept, as JSON text (default 64 KiB); a larger one is cut to a preview.
    pub max_result: usize,
    /// Attempts at servers' tools under way at once, over every object (default 64); the rest
    /// wait as pending. `workflow_*` and `core_*` calls do not count: a nested run's own calls
    /// must never wait for the call that waits for them.
    pub max_in_flight: usize,
    /// How long a call waits for a tool that no healthy server offers yet (one starting, or
    /// restarting after a crash) before it fails (default 60s); such waits are not attempts.
    pub offer_wait: Duration,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(60),
            workflow_timeout: Duration::from_secs(3600),
            max_attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_result: 64 * 1024,
            max_in_flight: 64,
            offer_wait: Duration::from_secs(60),
        }
    }
}

/// One call as the store keeps it: the record the plugin sees, and what making it needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    owner: String,
    /// Order of first request among the owner's calls; unique per record, so it also tells a
    /// call from another of the same id made after its owner was deleted and created again.
    seq: u64,
    record: CallRecord,
    arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u32>,
    /// Host starts that found this call in flight.
    #[serde(default)]
    interrupted: u32,
}

struct Held {
    stored: Stored,
    /// Cancels the task making the call (the object no longer wants it); a child of the stop
    /// token of the generation it started in.
    cancel: CancellationToken,
    /// A task is making the call: it is never started twice.
    active: bool,
    /// Which task made it last (see [`Inner::tasks`]): only that task may clear `active`.
    task: u64,
    /// The trace of the reconcile that asked for the call last: its `tool_call` span is a child.
    cause: Option<opentelemetry::Context>,
}

struct Inner {
    owners: HashMap<ObjectKey, BTreeMap<String, Held>>,
    seq: u64,
    closed: bool,
    /// Cancelled when this replica stops making calls (a graceful stop, a lost lease); replaced
    /// by a fresh one when it may make calls again.
    stop: CancellationToken,
    /// Tasks started so far; each gets the next number.
    tasks: u64,
    /// Calls asked for before the router was set (the objects reconciled at start run before
    /// the host sets it): started by [`Executor::set_router`].
    unrouted: Vec<(ObjectKey, String)>,
}

/// Makes the tool calls objects ask for. Share it as `Arc<Executor>`; every method but
/// [`Executor::remove_owner`] and [`Executor::shutdown`] is cheap and never waits on a call.
pub struct Executor {
    store: Arc<Store<StatusRecord>>,
    metrics: Arc<Metrics>,
    router: OnceLock<Arc<dyn Router>>,
    notify: mpsc::UnboundedSender<ObjectKey>,
    opts: ExecutorOptions,
    in_flight: Arc<Semaphore>,
    runtime: tokio::runtime::Handle,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("opts", &self.opts).finish_non_exhaustive()
    }
}

impl Executor {
    /// Loads the calls `store` holds (a call found running was cut short by a crash: it is
    /// made again once its object asks for it, or failed if that already happened) and returns
    /// the executor with the receiver of the owners whose calls changed; the owners of calls
    /// the load itself ended are on it already, so each object whose call ended is reconciled
    /// again whatever ended it (an answer, a timeout, a cancel, a load). Nothing is called
    /// before [`Executor::set_router`], and a loaded call only when its object asks again
    /// ([`Executor::owners_with_open_calls`] says which objects to reconcile at start).
    /// Must run inside a tokio runtime.
    pub fn start(
        store: Arc<Store<StatusRecord>>,
        opts: ExecutorOptions,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ObjectKey>) {
        let (notify, rx) = mpsc::unbounded_channel();
        let mut inner = Inner {
            owners: HashMap::new(),
            seq: 0,
            closed: false,
            stop: CancellationToken::new(),
            tasks: 0,
            unrouted: Vec::new(),
        };
        let mut unreadable = Vec::new();
        // Owners of a call the load ended: told at once, so the run that waits for it moves on
        // now rather than at its next resync.
        let mut ended = Vec::new();
        for (key, text) in store.all_meta() {
            if !key.starts_with(META_PREFIX) {
                continue;
            }
            let Ok(mut stored) = serde_json::from_str::<Stored>(&text) else {
                tracing::warn!(key, "cannot read a stored tool call; it is dropped");
                unreadable.push(key);
                continue;
            };
            let Some(owner) = ObjectKey::parse(&stored.owner) else { continue };
            if stored.record.state == CallState::Running {
                stored.interrupted += 1;
                if stored.interrupted > 1 {
                    end(
                        &mut stored.record,
                        CallState::Failed,
                        "the host stopped twice while this call was in flight; it is not made a third time",
                    );
                    ended.push(owner.clone());
                } else {
                    stored.record.state = CallState::Pending;
                    stored.record.error =
                        Some("the host restarted while the call was in flight; it is made again".into());
                }
                drop(store.put_meta(key.clone(), json(&stored)));
            }
            inner.seq = inner.seq.max(stored.seq + 1);
            let id = stored.record.id.clone();
            let cancel = inner.stop.child_token();
            inner
                .owners
                .entry(owner)
                .or_default()
                .insert(id, Held { stored, cancel, active: false, task: 0, cause: None });
        }
        for key in unreadable {
            drop(store.remove_meta(&key));
        }
        ended.dedup();
        for owner in ended {
            // The receiver is returned below; the unbounded channel holds these until it reads.
            let _ = notify.send(owner);
        }
        let executor = Arc::new(Self {
            store,
            metrics,
            router: OnceLock::new(),
            notify,
            in_flight: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
            opts,
            runtime: tokio::runtime::Handle::current(),
            inner: Mutex::new(inner),
        });
        (executor, rx)
    }

    /// Sets where calls go. Only the first router set counts. Calls start when their objects
    /// ask for them ([`Executor::request`]); those asked for before it is set start when it is.
    pub fn set_router(self: &Arc<Self>, router: Arc<dyn Router>) {
        // Under the lock, so that a request either sees the router or leaves its calls here.
        let waiting = {
            let mut inner = self.lock();
            let _ = self.router.set(router);
            std::mem::take(&mut inner.unrouted)
        };
        for (owner, id) in waiting {
            self.spawn(owner, id);
        }
    }

    /// The calls held for `owner`, in the order first requested.
    pub fn calls(&self, owner: &ObjectKey) -> Vec<CallRecord> {
        let inner = self.lock();
        let mut held: Vec<&Stored> =
            inner.owners.get(owner).map(|c| c.values().map(|h| &h.stored).collect()).unwrap_or_default();
        held.sort_by_key(|s| s.seq);
        held.into_iter().map(|s| s.record.clone()).collect()
    }

    /// The owners that hold calls.
    pub fn owners(&self) -> Vec<ObjectKey> {
        self.lock().owners.keys().cloned().collect()
    }

    /// The owners that hold a call that has not ended: the host reconciles them at start (and
    /// when it takes the lease), so that their calls go on.
    pub fn owners_with_open_calls(&self) -> Vec<ObjectKey> {
        let inner = self.lock();
        inner
            .owners
            .iter()
            .filter(|(_, calls)| calls.values().any(|h| !h.stored.record.state.is_final()))
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// Sets the calls `owner` wants (its plugin `plugin` allows `allow`): new ids are recorded
    /// and made; a held id that has not ended and is not being made (one cut short by a stop or
    /// a crash) is made again, if the grant still allows it; pending or running calls missing
    /// from `wanted` are cancelled. A call the grant does not allow, or with a bad id or
    /// arguments, is recorded as failed at once with the reason (and the config key to change).
    pub fn request(self: &Arc<Self>, owner: &ObjectKey, wanted: Vec<CallRequest>, plugin: &str, allow: &ToolsSettings) {
        let mut start = Vec::new();
        let mut refused = Vec::new();
        let cause = crate::telemetry::current_context();
        {
            let mut inner = self.lock();
            if inner.closed {
                return;
            }
            let mut seq = inner.seq;
            let stop = inner.stop.clone();
            let calls = inner.owners.entry(owner.clone()).or_default();
            let ids: HashSet<&str> = wanted.iter().map(|c| c.id.as_str()).collect();
            for held in calls.values() {
                if !held.stored.record.state.is_final() && !ids.contains(held.stored.record.id.as_str()) {
                    held.cancel.cancel();
                }
            }
            for call in wanted {
                if let Some(held) = calls.get_mut(&call.id) {
                    if held.stored.record.state.is_final() || held.active {
                        continue;
                    }
                    // Cut short earlier: made again as it was recorded, under today's grant.
                    let as_held = CallRequest {
                        tool: held.stored.record.tool.clone(),
                        arguments: held.stored.arguments.clone(),
                        ..call
                    };
                    if let Some(why) = refuse(&as_held, plugin, allow) {
                        end(&mut held.stored.record, CallState::Failed, &why);
                        refused.push((as_held.id.clone(), json(&held.stored)));
                    } else {
                        held.cause = cause.clone();
                        start.push(as_held.id);
                    }
                    continue;
                }
                let mut record = CallRecord {
                    id: call.id.clone(),
                    tool: call.tool.clone(),
                    state: CallState::Pending,
                    attempts: 0,
                    result: None,
                    truncated: false,
                    error: None,
                    started_at: None,
                    finished_at: None,
                };
                let refusal = refuse(&call, plugin, allow);
                if let Some(why) = &refusal {
                    tracing::warn!(%owner, call = %call.id, tool = %call.tool, "tool call refused: {why}");
                    end(&mut record, CallState::Failed, why);
                }
                let arguments = if call.arguments.is_object() { call.arguments } else { Value::Object(Map::new()) };
                // The grant's timeout is for server tools; a nested workflow lasts as long as its run.
                let nested = call.tool.starts_with(WORKFLOW_TOOL_PREFIX);
                let granted =
                    allow.timeout.filter(|_| !nested).map(|d| u32::try_from(d.0.as_millis()).unwrap_or(u32::MAX));
                let stored = Stored {
                    owner: owner.to_string(),
                    seq,
                    record,
                    arguments,
                    timeout_ms: call.timeout_ms.or(granted),
                    interrupted: 0,
                };
                seq += 1;
                if refusal.is_some() {
                    refused.push((call.id.clone(), json(&stored)));
                } else {
                    drop(self.store.put_meta(meta_key(owner, &call.id), json(&stored)));
                    start.push(call.id.clone());
                }
                calls.insert(
                    call.id,
                    Held { stored, cancel: stop.child_token(), active: false, task: 0, cause: cause.clone() },
                );
            }
            inner.seq = seq;
        }
        if !refused.is_empty() {
            // Refusals are told once they are durable, like every other state.
            let writes: Vec<_> =
                refused.into_iter().map(|(id, text)| self.store.put_meta(meta_key(owner, &id), text)).collect();
            let (notify, owner) = (self.notify.clone(), owner.clone());
            self.runtime.spawn(async move {
                for w in writes {
                    let _ = w.await;
                }
                let _ = notify.send(owner);
            });
        }
        let start = {
            let mut inner = self.lock();
            if self.router.get().is_some() {
                start
            } else {
                inner.unrouted.extend(start.into_iter().map(|id| (owner.clone(), id)));
                Vec::new()
            }
        };
        for id in start {
            self.spawn(owner.clone(), id);
        }
    }

    /// Cancels every call of `owner` and forgets them (its object is gone); returns once the
    /// records are durably removed.
    pub async fn remove_owner(&self, owner: &ObjectKey) {
        let held = self.lock().owners.remove(owner).unwrap_or_default();
        let mut removals = Vec::new();
        for (id, h) in held {
            h.cancel.cancel();
            removals.push(self.store.remove_meta(&meta_key(owner, &id)));
        }
        for r in removals {
            if let Err(e) = r.await {
                tracing::error!(%owner, error = %e, "cannot forget the object's tool calls");
            }
        }
    }

    /// This replica stops making calls for now (it lost the lease): each call in flight is
    /// cancelled on its server and left pending, to be made again when its object asks (on
    /// whichever replica leads then).
    pub fn suspend(&self) {
        let mut inner = self.lock();
        let old = std::mem::replace(&mut inner.stop, CancellationToken::new());
        old.cancel();
    }

    /// Stops the executor for a graceful host stop: no new call starts, and each call in flight
    /// is cancelled on its server (MCP's cancellation notification) and recorded as pending, to
    /// be made again at the next start. Waits up to `grace` for that to be recorded. A stop
    /// like this is not a crash: the call does not count as interrupted.
    pub async fn shutdown(&self, grace: Duration) {
        {
            let mut inner = self.lock();
            inner.closed = true;
            inner.stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.lock().owners.values().flat_map(BTreeMap::values).any(|h| h.active) {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("tool calls still in flight at shutdown; they are made again at the next start");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the task that makes `owner`'s call `id`, unless one is making it already.
    fn spawn(self: &Arc<Self>, owner: ObjectKey, id: String) {
        let (seq, task, cancel, stop, cause) = {
            let mut inner = self.lock();
            if inner.closed {
                return;
            }
            let stop = inner.stop.clone();
            inner.tasks += 1;
            let task = inner.tasks;
            let Some(held) = inner.owners.get_mut(&owner).and_then(|c| c.get_mut(&id)) else { return };
            if held.active || held.stored.record.state.is_final() {
                return;
            }
            held.active = true;
            held.task = task;
            if held.cancel.is_cancelled() {
                // Its token went with an earlier stop generation (a graceful stop or a lost lease):
                // a fresh one under today's. (A call its object cancelled is not asked for, so
                // never started here.)
                held.cancel = stop.child_token();
            }
            (held.stored.seq, task, held.cancel.clone(), stop, held.cause.clone())
        };
        // In the trace of the reconcile that asked for it; a call made again after a restart,
        // before any reconcile asked, is a trace of its own.
        let span = tracing::info_span!(parent: None, "tool_call", %owner, call = %id);
        crate::telemetry::set_parent(&span, cause.as_ref());
        let me = self.clone();
        self.runtime.spawn(
            async move {
                me.run(&owner, &id, seq, cancel, stop).await;
                // `finish` released the call already, before telling its owner; this covers the
                // ways out that record nothing. A newer task of the same call is left alone.
                let mut inner = me.lock();
                if let Some(h) = inner.owners.get_mut(&owner).and_then(|c| c.get_mut(&id))
                    && h.stored.seq == seq
                    && h.task == task
                {
                    h.active = false;
                }
            }
            .instrument(span),
        );
    }

    /// Makes one call to its end: attempts with backoff between retryable failures. `seq`
    /// names the record (a newer one of the same id is not this task's); `stop` is the stop
    /// token of the generation the task started in.
    async fn run(&self, owner: &ObjectKey, id: &str, seq: u64, cancel: CancellationToken, stop: CancellationToken) {
        let Some(router) = self.router.get().cloned() else { return };
        let waiting_since = tokio::time::Instant::now();
        loop {
            let limited = self.lock().owners.get(owner).and_then(|c| c.get(id)).is_some_and(|h| {
                !h.stored.record.tool.starts_with(WORKFLOW_TOOL_PREFIX) && !h.stored.record.tool.starts_with("core_")
            });
            // One permit per attempt at a server's tool, held only while the attempt runs.
            let permit = if limited {
                tokio::select! {
                    p = self.in_flight.clone().acquire_owned() => p.ok(),
                    () = cancel.cancelled() => {
                        self.finish(owner, id, seq, Err(CallError::Cancelled), &stop).await;
                        return;
                    }
                }
            } else {
                None
            };
            let Some((routed, attempts)) = self.begin_attempt(owner, id, seq, &stop).await else { return };
            let margin = Duration::from_secs(5);
            self.metrics.tool_call_attempts.get_or_create(&KindLabel { kind: owner.kind().clone() }).inc();
            self.metrics.tool_calls_in_flight.inc();
            let attempt = router.call(&routed, cancel.clone());
            let outcome = tokio::select! {
                biased;
                r = attempt => r,
                // The router answers soon after a cancel or its timeout; this only bounds one that does not.
                () = async { cancel.cancelled().await; tokio::time::sleep(margin).await } => Err(CallError::Cancelled),
                () = tokio::time::sleep(routed.timeout + margin) => Err(CallError::Timeout(routed.timeout)),
            };
            self.metrics.tool_calls_in_flight.dec();
            drop(permit);
            let pause = match outcome {
                Err(_) if cancel.is_cancelled() => {
                    self.finish(owner, id, seq, Err(CallError::Cancelled), &stop).await;
                    return;
                }
                // Not offered yet: no server was called, so this is no attempt; wait and look again.
                Err(CallError::NotOffered(why)) if waiting_since.elapsed() < self.opts.offer_wait => {
                    let delay = backoff(&self.opts, attempts).min(Duration::from_secs(2));
                    self.update(owner, id, seq, |s| {
                        s.record.state = CallState::Pending;
                        s.record.attempts = s.record.attempts.saturating_sub(1);
                        s.record.error = Some(format!("waiting: {why}"));
                    })
                    .await;
                    delay
                }
                Err(e @ CallError::Transport(_)) if attempts < self.opts.max_attempts => {
                    let delay = backoff(&self.opts, attempts);
                    tracing::info!(error = %e, retry_in = ?delay, "tool call failed; retrying");
                    let message = format!(
                        "attempt {attempts} of {} failed: {e}; retrying in {}",
                        self.opts.max_attempts,
                        humantime::format_duration(delay)
                    );
                    self.update(owner, id, seq, |s| {
                        s.record.state = CallState::Pending;
                        s.record.error = Some(message);
                    })
                    .await;
                    delay
                }
                other => {
                    self.finish(owner, id, seq, other, &stop).await;
                    return;
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = cancel.cancelled() => {
                    self.finish(owner, id, seq, Err(CallError::Cancelled), &stop).await;
                    return;
                }
            }
        }
    }

    /// Marks the call running with one more attempt (durably); `None` when it is gone or ended.
    async fn begin_attempt(
        &self,
        owner: &ObjectKey,
        id: &str,
        seq: u64,
        stop: &CancellationToken,
    ) -> Option<(RoutedCall, u32)> {
        let mut out = None;
        let (default_timeout, workflow_timeout) = (self.opts.default_timeout, self.opts.workflow_timeout);
        let written = self
            .update(owner, id, seq, |s| {
                if s.record.state.is_final() {
                    return;
                }
                s.record.state = CallState::Running;
                s.record.attempts += 1;
                s.record.started_at.get_or_insert_with(|| rfc3339(now_millis()));
                let nested = s.record.tool.starts_with(WORKFLOW_TOOL_PREFIX);
                let default = if nested { workflow_timeout } else { default_timeout };
                let timeout = s.timeout_ms.map_or(default, |ms| Duration::from_millis(u64::from(ms.max(1))));
                let routed = RoutedCall {
                    caller: owner.clone(),
                    id: id.to_string(),
                    tool: s.record.tool.clone(),
                    arguments: s.arguments.as_object().cloned().unwrap_or_default(),
                    timeout,
                    host_stop: stop.clone(),
                };
                out = Some((routed, s.record.attempts));
            })
            .await;
        if written { out } else { None }
    }

    /// Records how the call ended and tells the owner. A cancel that came from this replica
    /// stopping (`stop`), not from the object, leaves the call pending, to be made again.
    async fn finish(
        &self,
        owner: &ObjectKey,
        id: &str,
        seq: u64,
        outcome: Result<Value, CallError>,
        stop: &CancellationToken,
    ) {
        if matches!(outcome, Err(CallError::Cancelled)) && stop.is_cancelled() {
            let why = if self.lock().closed {
                "the host stopped while the call was in flight; it is made again at the next start"
            } else {
                "this replica lost its lease while the call was in flight; it is made again by the one that leads"
            };
            self.update_last(owner, id, seq, |s| {
                if !s.record.state.is_final() {
                    s.record.state = CallState::Pending;
                    s.record.error = Some(why.into());
                }
            })
            .await;
            return;
        }
        let max = self.opts.max_result;
        let metrics = self.metrics.clone();
        let kind = owner.kind().clone();
        let attempts_max = self.opts.max_attempts;
        let offer_wait = self.opts.offer_wait;
        self.update_last(owner, id, seq, |s| {
            if s.record.state.is_final() {
                return;
            }
            match outcome {
                Ok(result) => {
                    let failed = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
                    let (result, truncated) = bounded(result, max);
                    s.record.truncated = truncated;
                    if failed {
                        let text = error_text(&result);
                        s.record.result = Some(result);
                        end(&mut s.record, CallState::Failed, &format!("the tool answered with an error: {text}"));
                    } else {
                        s.record.result = Some(result);
                        end(&mut s.record, CallState::Succeeded, "");
                        s.record.error = None;
                    }
                }
                Err(CallError::Cancelled) => {
                    end(&mut s.record, CallState::Cancelled, "cancelled: the object no longer wants this call")
                }
                Err(CallError::NotOffered(why)) => {
                    s.record.attempts = s.record.attempts.saturating_sub(1);
                    end(
                        &mut s.record,
                        CallState::Failed,
                        &format!("{why}, and none did within {}", humantime::format_duration(offer_wait)),
                    )
                }
                Err(e) if e.retryable() => {
                    let why = format!(
                        "{e} (after {} attempts, the most the host makes)",
                        s.record.attempts.min(attempts_max)
                    );
                    end(&mut s.record, CallState::Failed, &why)
                }
                Err(e) => end(&mut s.record, CallState::Failed, &e.to_string()),
            }
            let result = match s.record.state {
                CallState::Succeeded => "succeeded",
                CallState::Cancelled => "cancelled",
                _ => "failed",
            };
            metrics.tool_calls.get_or_create(&KindResult { kind: kind.clone(), result }).inc();
        })
        .await;
    }

    /// Applies `f` to the stored call `seq` and writes it durably, then tells the owner; false
    /// when that call is no longer held (its owner was removed, or made anew since).
    async fn update(&self, owner: &ObjectKey, id: &str, seq: u64, f: impl FnOnce(&mut Stored)) -> bool {
        self.record(owner, id, seq, false, f).await
    }

    /// [`Executor::update`] by the task ending: the call is released (no task makes it) in the
    /// same step, before the owner is told, so a reconcile that asks for it again (a call left
    /// pending by a stop) finds it free to start.
    async fn update_last(&self, owner: &ObjectKey, id: &str, seq: u64, f: impl FnOnce(&mut Stored)) -> bool {
        self.record(owner, id, seq, true, f).await
    }

    async fn record(&self, owner: &ObjectKey, id: &str, seq: u64, release: bool, f: impl FnOnce(&mut Stored)) -> bool {
        let write = {
            let mut inner = self.lock();
            let Some(held) = inner.owners.get_mut(owner).and_then(|c| c.get_mut(id)) else { return false };
            if held.stored.seq != seq {
                return false;
            }
            if release {
                held.active = false;
            }
            let before = held.stored.clone();
            f(&mut held.stored);
            if held.stored == before {
                return true;
            }
            self.store.put_meta(meta_key(owner, id), json(&held.stored))
        };
        if let Err(e) = write.await {
            tracing::error!(%owner, call = id, error = %e, "cannot record the tool call's state");
        }
        let _ = self.notify.send(owner.clone());
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why the executor refuses `call` before making it, if it does.
fn refuse(call: &CallRequest, plugin: &str, allow: &ToolsSettings) -> Option<String> {
    if call.id.is_empty() || call.id.len() > MAX_CALL_ID {
        return Some(format!("the call id must be 1 to {MAX_CALL_ID} bytes, not {}", call.id.len()));
    }
    if !call.arguments.is_object() {
        return Some(format!("the arguments must be a JSON object, not {}", kind_of(&call.arguments)));
    }
    if !allow.allows(&call.tool) {
        return Some(format!(
            "tool `{}` is not granted to plugin `{plugin}`: add it (or a pattern matching it) to \
             plugins.{plugin}.tools.allow in the host config",
            call.tool
        ));
    }
    None
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Ends `record` in `state` now, with `why` as its error (none when empty).
fn end(record: &mut CallRecord, state: CallState, why: &str) {
    record.state = state;
    record.error = (!why.is_empty()).then(|| why.to_string());
    record.finished_at = Some(rfc3339(now_millis()));
}

/// `result` if its JSON text fits in `max` bytes, else a preview of its text content that does.
fn bounded(result: Value, max: usize) -> (Value, bool) {
    let size = result.to_string().len();
    if size <= max {
        return (result, false);
    }
    let text = content_text(&result);
    let keep = crate::sanitize::cut_at(&text, max / 2);
    let is_error = result.get("isError").cloned().unwrap_or(Value::Bool(false));
    let note = format!("[the result was {size} bytes of JSON; the host keeps at most {max}: cut]");
    let preview = serde_json::json!({
        "content": [{"type": "text", "text": format!("{keep}…")}, {"type": "text", "text": note}],
        "isError": is_error,
    });
    (preview, true)
}

/// The text blocks of a `CallToolResult`, joined by newlines.
fn content_text(result: &Value) -> String {
    let blocks = result.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks.filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
}

/// A tool error's text for the call's `error`, on one line and at most 1,000 bytes.
fn error_text(result: &Value) -> String {
    let text = content_text(result);
    let one = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = crate::sanitize::cut_at(&one, 1000);
    if cut.is_empty() { "(no message)".into() } else { crate::sanitize::sanitize(cut) }
}

fn backoff(opts: &ExecutorOptions, attempts: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1));
    opts.initial_backoff.saturating_mul(factor).min(opts.max_backoff)
}

fn meta_key(owner: &ObjectKey, id: &str) -> String {
    format!("{META_PREFIX}{owner}\n{id}")
}

fn json(stored: &Stored) -> String {
    serde_json::to_string(stored).unwrap_or_default()
}
