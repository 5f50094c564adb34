//! The executor against a scripted router and a real store: durability, retries, cancellation, refusals, restarts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use steward_sdk::{CallRecord, CallRequest, CallState};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ToolsSettings;
use super::{CallError, Executor, ExecutorOptions, RoutedCall, Router};
use crate::model::{ObjectKey, StatusRecord};
use crate::store::Store;

/// What the scripted router does with one attempt.
#[derive(Clone, Debug)]
enum Step {
    Answer(Value),
    Fail(CallError),
    /// Waits until cancelled (then answers Cancelled), like a server mid-call.
    Hang,
}

#[derive(Default)]
struct Script {
    steps: Mutex<VecDeque<Step>>,
    seen: Mutex<Vec<RoutedCall>>,
    cancelled: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Router for Script {
    async fn call(&self, call: &RoutedCall, cancel: CancellationToken) -> Result<Value, CallError> {
        self.seen.lock().unwrap().push(call.clone());
        let step = self.steps.lock().unwrap().pop_front().unwrap_or(Step::Answer(ok("default")));
        match step {
            Step::Answer(v) => Ok(v),
            Step::Fail(e) => Err(e),
            Step::Hang => {
                cancel.cancelled().await;
                self.cancelled.lock().unwrap().push(call.id.clone());
                Err(CallError::Cancelled)
            }
        }
    }
}

fn ok(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

fn opts() -> ExecutorOptions {
    ExecutorOptions {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        default_timeout: Duration::from_secs(30),
        offer_wait: Duration::from_millis(200),
        ..ExecutorOptions::default()
    }
}

fn metrics() -> Arc<crate::metrics::Metrics> {
    Arc::new(crate::metrics::Metrics::new())
}

fn allow_all() -> ToolsSettings {
    ToolsSettings { allow: vec!["*".into()], timeout: None }
}

fn owner() -> ObjectKey {
    ObjectKey::new("WorkflowRun", "default", "r1")
}

fn call(id: &str, tool: &str) -> CallRequest {
    CallRequest::new(id, tool, json!({"message": id}))
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        Self { _dir: dir, path }
    }

    fn store(&self) -> Arc<Store<StatusRecord>> {
        Arc::new(Store::open(&self.path).unwrap())
    }

    /// The store again after the last one was dropped (its file lock may take a moment to go).
    fn store_reopened(&self) -> Arc<Store<StatusRecord>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match Store::open(&self.path) {
                Ok(s) => return Arc::new(s),
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// Waits (on the executor's notifications, with a deadline) until `owner`'s call `id` satisfies `pred`.
async fn until(
    ex: &Executor,
    rx: &mut mpsc::UnboundedReceiver<ObjectKey>,
    id: &str,
    pred: impl Fn(&CallRecord) -> bool,
) -> CallRecord {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = ex.calls(&owner()).into_iter().find(|r| r.id == id)
            && pred(&r)
        {
            return r;
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(_)) => {}
            _ => panic!("call {id} never got there: {:?}", ex.calls(&owner())),
        }
    }
}

/// The objects reconciled at start ask for their calls before the host sets the router: those
/// calls are made once it is set, not left pending for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asked_for_before_the_router_is_set_is_made_once_it_is() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Answer(ok("early")));
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.request(&owner(), vec![call("a", "x_s_echo")], "wr", &allow_all());
    assert_eq!(ex.calls(&owner())[0].state, CallState::Pending);
    ex.set_router(script.clone());
    let r = until(&ex, &mut rx, "a", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Succeeded, 1));
    assert_eq!(script.seen.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_made_once_and_its_result_survives_a_restart() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Answer(ok("hello")));
    {
        let store = fx.store();
        let (ex, mut rx) = Executor::start(store.clone(), opts(), metrics());
        ex.set_router(script.clone());
        ex.request(&owner(), vec![call("a", "x_s_echo")], "wr", &allow_all());
        // Asking again for a held id (even with other arguments) changes nothing.
        ex.request(&owner(), vec![CallRequest::new("a", "x_s_echo", json!({"other": 1}))], "wr", &allow_all());
        let r = until(&ex, &mut rx, "a", |r| r.state.is_final()).await;
        assert_eq!(r.state, CallState::Succeeded);
        assert_eq!(r.attempts, 1);
        assert_eq!(r.result.as_ref().unwrap()["content"][0]["text"], "hello");
        assert!(r.started_at.is_some() && r.finished_at.is_some());
        store.flush().await.unwrap();
    }
    assert_eq!(script.seen.lock().unwrap().len(), 1);
    assert_eq!(script.seen.lock().unwrap()[0].arguments["message"], "a");
    let (ex, _rx) = Executor::start(fx.store_reopened(), opts(), metrics());
    ex.set_router(script.clone());
    let after = ex.calls(&owner());
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].state, CallState::Succeeded, "the ended call is read back from the store");
    ex.request(&owner(), vec![call("a", "x_s_echo")], "wr", &allow_all());
    tokio::task::yield_now().await;
    assert_eq!(script.seen.lock().unwrap().len(), 1, "an ended call is never made again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors_are_retried_and_refusals_are_not() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    {
        let mut steps = script.steps.lock().unwrap();
        steps.push_back(Step::Fail(CallError::Transport("connection reset".into())));
        steps.push_back(Step::Fail(CallError::NotOffered("no server offers x_s_echo".into())));
        steps.push_back(Step::Answer(ok("third time")));
    }
    let m = metrics();
    let (ex, mut rx) = Executor::start(fx.store(), opts(), m.clone());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("a", "x_s_echo")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "a", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Succeeded, 2), "waiting for a tool to be offered is no attempt");
    let text = m.render();
    assert!(text.contains("steward_tool_calls_total{kind=\"WorkflowRun\",result=\"succeeded\"} 1"), "{text}");
    assert!(text.contains("steward_tool_call_attempts_total{kind=\"WorkflowRun\"} 3"), "{text}");
    assert!(text.contains("steward_tool_calls_in_flight 0"), "{text}");

    for _ in 0..1000 {
        script.steps.lock().unwrap().push_back(Step::Fail(CallError::NotOffered("no server offers x_s_gone".into())));
    }
    ex.request(&owner(), vec![call("n", "x_s_gone")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "n", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Failed, 0), "{r:?}");
    assert!(r.error.as_deref().unwrap().contains("none did within"), "{r:?}");
    script.steps.lock().unwrap().clear();

    script.steps.lock().unwrap().push_back(Step::Fail(CallError::Refused("unknown tool".into())));
    ex.request(&owner(), vec![call("b", "x_s_nope")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "b", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Failed, 1), "a refusal is not retried");
    assert_eq!(r.error.as_deref(), Some("unknown tool"));

    for _ in 0..3 {
        script.steps.lock().unwrap().push_back(Step::Fail(CallError::Transport("broken pipe".into())));
    }
    ex.request(&owner(), vec![call("c", "x_s_echo")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "c", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Failed, 3), "at most max_attempts");
    assert!(r.error.as_deref().unwrap().contains("broken pipe"), "{r:?}");

    script
        .steps
        .lock()
        .unwrap()
        .push_back(Step::Answer(json!({"content": [{"type": "text", "text": "boom"}], "isError": true})));
    ex.request(&owner(), vec![call("d", "x_s_fail")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "d", |r| r.state.is_final()).await;
    assert_eq!(r.state, CallState::Failed, "isError is the tool's failure");
    assert!(r.error.as_deref().unwrap().contains("boom"));
    assert_eq!(r.result.as_ref().unwrap()["isError"], true, "the result is kept for the plugin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_no_longer_wanted_is_cancelled_and_removing_the_owner_forgets_everything() {
    let fx = Fixture::new();
    let store = fx.store();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Hang);
    let (ex, mut rx) = Executor::start(store.clone(), opts(), metrics());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("slow", "x_s_sleep")], "wr", &allow_all());
    until(&ex, &mut rx, "slow", |r| r.state == CallState::Running).await;
    ex.request(&owner(), vec![], "wr", &allow_all());
    let r = until(&ex, &mut rx, "slow", |r| r.state.is_final()).await;
    assert_eq!(r.state, CallState::Cancelled);
    assert_eq!(script.cancelled.lock().unwrap().as_slice(), ["slow"], "the router was told to cancel");

    script.steps.lock().unwrap().push_back(Step::Hang);
    ex.request(&owner(), vec![call("slow2", "x_s_sleep")], "wr", &allow_all());
    until(&ex, &mut rx, "slow2", |r| r.state == CallState::Running).await;
    ex.remove_owner(&owner()).await;
    assert!(ex.calls(&owner()).is_empty());
    assert!(store.all_meta().iter().all(|(k, _)| !k.starts_with("tools.call:")), "records are gone from the store");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !script.cancelled.lock().unwrap().contains(&"slow2".to_string()) {
        assert!(tokio::time::Instant::now() < deadline, "the in-flight call was never cancelled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_outside_the_grant_or_malformed_fail_at_once_naming_what_to_change() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.set_router(script.clone());
    let allow = ToolsSettings { allow: vec!["x_git_*".into()], timeout: None };
    ex.request(
        &owner(),
        vec![
            call("a", "x_fs_read"),
            CallRequest::new("b", "x_git_log", json!("not an object")),
            call(&"i".repeat(300), "x_git_log"),
        ],
        "workflowrun",
        &allow,
    );
    let r = until(&ex, &mut rx, "a", |r| r.state.is_final()).await;
    assert_eq!(r.state, CallState::Failed);
    let e = r.error.unwrap();
    assert!(e.contains("x_fs_read") && e.contains("plugins.workflowrun.tools.allow"), "{e}");
    let calls = ex.calls(&owner());
    assert!(calls[1].error.as_deref().unwrap().contains("must be a JSON object"), "{calls:?}");
    assert!(calls[2].error.as_deref().unwrap().contains("call id must be 1 to 253 bytes"), "{calls:?}");
    assert!(script.seen.lock().unwrap().is_empty(), "nothing refused reaches a server");
}

/// Waits (with a deadline) until the router has seen `n` attempts: a call is recorded running
/// just before its attempt reaches the router.
async fn reached(script: &Script, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while script.seen.lock().unwrap().len() < n {
        assert!(tokio::time::Instant::now() < deadline, "the router never saw attempt {n}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One run of a "host" in its own runtime, dropped at the end like a process that dies: the
/// tasks of calls in flight go with it, and the store is left as the last commit has it.
fn host_run<T>(f: impl AsyncFnOnce() -> T) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let out = rt.block_on(f());
    rt.shutdown_timeout(Duration::from_secs(10));
    out
}

#[test]
fn a_call_in_flight_at_a_crash_is_made_again_once_and_never_a_third_time() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    // First run: the call is in flight when the host dies.
    script.steps.lock().unwrap().push_back(Step::Hang);
    host_run(async || {
        let store = fx.store();
        let (ex, mut rx) = Executor::start(store.clone(), opts(), metrics());
        ex.set_router(script.clone());
        ex.request(&owner(), vec![call("a", "x_s_sleep")], "wr", &allow_all());
        until(&ex, &mut rx, "a", |r| r.state == CallState::Running).await;
        reached(&script, 1).await;
        store.flush().await.unwrap();
    });
    assert_eq!(script.seen.lock().unwrap().len(), 1);
    // Second run: found running, so made again; and again cut short by a crash.
    script.steps.lock().unwrap().push_back(Step::Hang);
    host_run(async || {
        let store = fx.store_reopened();
        let (ex, mut rx) = Executor::start(store.clone(), opts(), metrics());
        let r = ex.calls(&owner()).remove(0);
        assert_eq!(r.state, CallState::Pending, "found running: to be made again");
        assert_eq!(ex.owners_with_open_calls(), [owner()], "its object is to be reconciled at start");
        ex.set_router(script.clone());
        tokio::task::yield_now().await;
        assert_eq!(script.seen.lock().unwrap().len(), 1, "made again only when its object asks");
        ex.request(&owner(), vec![call("a", "x_s_sleep")], "wr", &allow_all());
        until(&ex, &mut rx, "a", |r| r.state == CallState::Running && r.attempts == 2).await;
        reached(&script, 2).await;
        store.flush().await.unwrap();
    });
    assert_eq!(script.seen.lock().unwrap().len(), 2);
    // Third run: not made a third time.
    host_run(async || {
        let (ex, mut rx) = Executor::start(fx.store_reopened(), opts(), metrics());
        ex.set_router(script.clone());
        let r = ex.calls(&owner()).remove(0);
        assert_eq!(r.state, CallState::Failed);
        assert!(r.error.unwrap().contains("not made a third time"));
        assert!(ex.owners_with_open_calls().is_empty(), "the call has ended");
        assert_eq!(rx.try_recv().ok(), Some(owner()), "its owner is told at once, not at its next resync");
        tokio::task::yield_now().await;
    });
    assert_eq!(script.seen.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_limit_is_cut_to_a_preview_with_a_note() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Answer(ok(&"x".repeat(10_000))));
    let (ex, mut rx) = Executor::start(fx.store(), ExecutorOptions { max_result: 1000, ..opts() }, metrics());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("big", "x_s_echo")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "big", |r| r.state.is_final()).await;
    assert_eq!(r.state, CallState::Succeeded);
    assert!(r.truncated);
    let text = r.result.unwrap().to_string();
    assert!(text.len() < 1000, "{}", text.len());
    assert!(text.contains("keeps at most 1000"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_gets_the_calls_timeout_else_the_grants_else_the_hosts() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.set_router(script.clone());
    let grant =
        ToolsSettings { allow: vec!["*".into()], timeout: Some(crate::plugin::HumanDuration(Duration::from_secs(5))) };
    let named = CallRequest { timeout_ms: Some(1500), ..call("named", "x_s_echo") };
    ex.request(
        &owner(),
        vec![named.clone(), call("granted", "x_s_echo"), call("nested-granted", "workflow_x")],
        "wr",
        &grant,
    );
    // The wanted set is whole: the held calls are listed again (they keep their timeouts).
    let all = vec![
        named,
        call("granted", "x_s_echo"),
        call("nested-granted", "workflow_x"),
        call("host", "x_s_echo"),
        call("nested", "workflow_deploy"),
    ];
    ex.request(&owner(), all, "wr", &allow_all());
    for id in ["named", "granted", "nested-granted", "host", "nested"] {
        until(&ex, &mut rx, id, |r| r.state.is_final()).await;
    }
    let seen = script.seen.lock().unwrap().clone();
    let timeout_of = |id: &str| seen.iter().find(|c| c.id == id).unwrap().timeout;
    assert_eq!(timeout_of("named"), Duration::from_millis(1500));
    assert_eq!(timeout_of("granted"), Duration::from_secs(5));
    assert_eq!(timeout_of("host"), Duration::from_secs(30));
    assert_eq!(timeout_of("nested"), Duration::from_secs(3600), "a nested workflow lasts as long as its run");
    assert_eq!(timeout_of("nested-granted"), Duration::from_secs(3600), "the grant's timeout is for server tools");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_cancels_calls_in_flight_and_leaves_them_to_be_made_again() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Hang);
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("slow", "x_s_sleep")], "wr", &allow_all());
    until(&ex, &mut rx, "slow", |r| r.state == CallState::Running).await;
    ex.shutdown(Duration::from_secs(20)).await;
    let r = ex.calls(&owner()).remove(0);
    assert_eq!(r.state, CallState::Pending, "not cancelled for good: {r:?}");
    assert!(r.error.as_deref().unwrap().contains("made again at the next start"), "{r:?}");
    assert_eq!(script.cancelled.lock().unwrap().as_slice(), ["slow"], "the server was told");
    // Nothing new starts once stopped.
    ex.request(&owner(), vec![call("slow", "x_s_sleep"), call("late", "x_s_echo")], "wr", &allow_all());
    assert!(ex.calls(&owner()).iter().all(|c| c.id != "late"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_loses_its_lease_leaves_calls_pending_and_makes_them_when_asked_again() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Hang);
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("slow", "x_s_sleep")], "wr", &allow_all());
    until(&ex, &mut rx, "slow", |r| r.state == CallState::Running).await;
    ex.suspend();
    let r = until(&ex, &mut rx, "slow", |r| r.state == CallState::Pending).await;
    assert!(r.error.as_deref().unwrap().contains("lost its lease"), "{r:?}");
    assert_eq!(script.cancelled.lock().unwrap().as_slice(), ["slow"], "the server was told");
    // Leading again, the object asks again: the call is made again, to its end.
    script.steps.lock().unwrap().push_back(Step::Answer(ok("done")));
    ex.request(&owner(), vec![call("slow", "x_s_sleep")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "slow", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Succeeded, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_an_object_made_anew_is_not_touched_by_the_old_ones_task() {
    let fx = Fixture::new();
    let script = Arc::new(Script::default());
    script.steps.lock().unwrap().push_back(Step::Hang);
    let (ex, mut rx) = Executor::start(fx.store(), opts(), metrics());
    ex.set_router(script.clone());
    ex.request(&owner(), vec![call("x", "x_s_sleep")], "wr", &allow_all());
    until(&ex, &mut rx, "x", |r| r.state == CallState::Running).await;
    reached(&script, 1).await;
    // Deleted and created again under the same name: the old task is still winding down.
    ex.remove_owner(&owner()).await;
    script.steps.lock().unwrap().push_back(Step::Answer(ok("fresh")));
    ex.request(&owner(), vec![call("x", "x_s_sleep")], "wr", &allow_all());
    let r = until(&ex, &mut rx, "x", |r| r.state.is_final()).await;
    assert_eq!((r.state, r.attempts), (CallState::Succeeded, 1), "{r:?}");
    // The old task's cancellation, whenever it lands, changes nothing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while script.cancelled.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the old call was never cancelled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(ex.calls(&owner())[0].state, CallState::Succeeded);
}
