//! The sandboxed plugin runtime against real components: limits, typed errors, sandbox, reuse.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use steward::plugin::{HostReads, LogSource, MAX_LINES_PER_CALL, PluginError, PluginSettings, Read, ReconcileRequest};
use steward_sdk::{ObjectRef, RawObject};

use crate::common::{load, misbehave, request, runtime};

fn settings(f: impl FnOnce(&mut PluginSettings)) -> PluginSettings {
    let mut s = PluginSettings::default();
    f(&mut s);
    s
}

/// After a misbehaving call, a healthy plugin on the same runtime still answers.
async fn healthy_still_works(rt: &Arc<steward::plugin::Runtime>) {
    let noop = load(rt, "noop", PluginSettings::default()).await;
    let out = noop
        .reconcile(&request("Noop", "after", json!({"value": "still here"})), Arc::new(steward::plugin::NoReads))
        .await;
    let status: serde_json::Value = serde_json::from_str(&out.result.expect("healthy call").status).unwrap();
    assert_eq!(status["value"], "still here");
}

fn no_reads() -> Arc<dyn HostReads> {
    Arc::new(steward::plugin::NoReads)
}

#[tokio::test]
async fn healthy_reconcile_returns_status_and_conditions() {
    let rt = runtime();
    let noop = load(&rt, "noop", PluginSettings::default()).await;
    assert_eq!(noop.info().name, "noop");
    assert_eq!(noop.info().kinds[0].kind, "Noop");
    let mut req = request("Noop", "a", json!({"value": "hello"}));
    req.resource.generation = 4;
    let out = noop.reconcile(&req, no_reads()).await;
    let resp = out.result.unwrap();
    let status: serde_json::Value = serde_json::from_str(&resp.status).unwrap();
    assert_eq!(status, json!({"value": "hello", "seenGeneration": 4, "by": "0.1.0"}));
    assert_eq!(resp.conditions[0].type_, "Ready");
    assert!(out.fresh_instance);
    // The call's CPU is accounted. (How closely it matches the call's time is a figure of the
    // `deadline` benchmark: a bound on it here would depend on the machine's load.)
    assert!(out.cpu > Duration::ZERO, "{:?}", out.cpu);
}

#[tokio::test]
async fn an_endless_loop_ends_as_timeout_at_its_deadline() {
    let rt = runtime();
    let p = load(&rt, "misbehave", settings(|s| s.limits.timeout = Duration::from_millis(300))).await;
    let out = p.reconcile(&misbehave("loop", json!({})), no_reads()).await;
    assert_eq!(out.result.unwrap_err(), PluginError::Timeout { limit: Duration::from_millis(300) });
    // It ran until its deadline. (How soon after it the call stops, the epoch deadline rather than
    // the host's backstop 2 s later, is a figure of the `deadline` benchmark.)
    assert!(out.elapsed >= Duration::from_millis(300), "stopped after {:?}", out.elapsed);
    // A busy loop is CPU work, and the call's CPU account says so. On a loaded 2-core machine the
    // loop gets a fraction of a core, so the floor is a tenth of the deadline: a call that waited
    // instead of computing would account next to nothing.
    assert!(out.cpu >= Duration::from_millis(30), "cpu {:?} of {:?}", out.cpu, out.elapsed);
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn unbounded_allocation_ends_as_memory_limit() {
    let rt = runtime();
    let p = load(&rt, "misbehave", settings(|s| s.limits.memory = 32 * 1024 * 1024)).await;
    let err = p.reconcile(&misbehave("alloc", json!({})), no_reads()).await.result.unwrap_err();
    match &err {
        PluginError::MemoryLimit { limit, .. } => assert_eq!(*limit, 32 * 1024 * 1024),
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
    assert!(err.to_string().contains("memory cap of 32.0 MiB"), "{err}");
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn a_trap_is_reported_with_its_message() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let err = p.reconcile(&misbehave("trap", json!({})), no_reads()).await.result.unwrap_err();
    match &err {
        PluginError::Trap { message } => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected Trap, got {other:?}"),
    }
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn a_panic_is_reported_with_the_panic_message() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let err = p.reconcile(&misbehave("panic", json!({})), no_reads()).await.result.unwrap_err();
    match &err {
        PluginError::Trap { message } => {
            assert!(message.contains("deliberate panic in m"), "{message}");
            assert!(message.starts_with("panicked"), "{message}");
        }
        other => panic!("expected Trap, got {other:?}"),
    }
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn hundreds_of_megabytes_of_output_are_refused() {
    let rt = runtime();
    let p = load(&rt, "misbehave", settings(|s| s.limits.memory = 1024 * 1024 * 1024)).await;
    let err = p.reconcile(&misbehave("bigOutput", json!({"sizeMb": 200})), no_reads()).await.result.unwrap_err();
    match err {
        PluginError::OutputTooLarge { size, limit } => {
            // Refused before the host copied it: the size is not known.
            assert_eq!(size, None);
            assert_eq!(limit, 1024 * 1024);
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn stdout_in_a_loop_is_kept_bounded() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let out = p.reconcile(&misbehave("chatty", json!({"lines": 100000})), no_reads()).await;
    assert!(out.result.is_ok(), "{:?}", out.result);
    assert_eq!(out.logs.len(), MAX_LINES_PER_CALL);
    assert_eq!(out.logs_dropped, 100_000 - MAX_LINES_PER_CALL as u64);
    assert_eq!(out.logs[0].source, LogSource::Stdout);
    assert_eq!(out.logs[0].message, "chatty line 0");
}

#[tokio::test]
async fn a_log_flood_is_kept_bounded() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let out = p.reconcile(&misbehave("logFlood", json!({"lines": 50000})), no_reads()).await;
    assert!(out.result.is_ok(), "{:?}", out.result);
    assert_eq!(out.logs.len(), MAX_LINES_PER_CALL);
    assert_eq!(out.logs_dropped, 50_000 - MAX_LINES_PER_CALL as u64);
    assert_eq!(out.logs[5].source, LogSource::Log);
}

struct Cache(Vec<RawObject>);

impl HostReads for Cache {
    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        self.0.iter().find(|o| o.kind == r.kind && o.namespace == r.namespace && o.name == r.name).cloned()
    }
    fn list(&self, kind: &str, ns: Option<&str>) -> Vec<RawObject> {
        self.0.iter().filter(|o| o.kind == kind && ns.is_none_or(|n| n == o.namespace)).cloned().collect()
    }
}

fn noop_obj(name: &str, value: &str) -> RawObject {
    request("Noop", name, json!({"value": value})).resource
}

#[tokio::test]
async fn reads_go_to_the_host_cache_and_are_recorded() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let cache = Arc::new(Cache(vec![noop_obj("other", "x"), noop_obj("target", "y")]));
    let out = p.reconcile(&misbehave("read", json!({})), cache).await;
    let resp = out.result.unwrap();
    let status: serde_json::Value = serde_json::from_str(&resp.status).unwrap();
    assert_eq!(status["listed"], json!(["other", "target"]));
    assert_eq!(status["got"], json!("{\"value\":\"y\"}"));
    assert_eq!(resp.requeue_after_ms, Some(30_000));
    assert_eq!(
        out.reads,
        vec![
            Read::Get(ObjectRef::new("Noop", "default", "target")),
            Read::List { kind: "Noop".into(), namespace: None },
        ]
    );
}

#[tokio::test]
async fn listing_in_a_loop_is_stopped_by_the_deadline() {
    let rt = runtime();
    let p = load(&rt, "misbehave", settings(|s| s.limits.timeout = Duration::from_millis(300))).await;
    let cache = Arc::new(Cache((0..50).map(|i| noop_obj(&format!("n{i}"), "v")).collect()));
    let out = p.reconcile(&misbehave("listLoop", json!({})), cache).await;
    assert!(matches!(out.result, Err(PluginError::Timeout { .. })), "{:?}", out.result);
    // Thousands of identical reads are recorded once.
    assert_eq!(out.reads, vec![Read::List { kind: "Misbehave".into(), namespace: None }]);
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn the_sandbox_denies_files_directories_environment_sockets_and_processes() {
    // The host process has an environment (the plugin runs in this process here); the plugin
    // sees none of it. (Not set here: the tests share this process, whose environment no test
    // may change while others read it.)
    assert!(std::env::var_os("PATH").is_some());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let out = p.reconcile(&misbehave("escape", json!({"port": port})), no_reads()).await;
    let status: serde_json::Value = serde_json::from_str(&out.result.unwrap().status).unwrap();
    for key in ["file", "cwdFile", "dir", "write", "env", "home", "socket", "udp", "spawn"] {
        let v = status[key].as_str().unwrap_or_default();
        // Each attempt was made, and failed inside the plugin.
        assert!(v.starts_with("denied: "), "{key}: {v}");
    }
    assert!(!std::path::Path::new("/tmp/steward-escape").exists());
    assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "no connection may arrive");
}

#[tokio::test]
async fn services_need_the_services_grant() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let err = p.reconcile(&misbehave("services", json!({})), no_reads()).await.result.unwrap_err();
    assert!(
        matches!(&err, PluginError::CapabilityDenied { plugin, capability, .. } if plugin == "misbehave" && capability == "services"),
        "{err:?}"
    );
    assert!(err.to_string().contains("add `services` to plugins.misbehave.capabilities"), "{err}");
    let granted = load(&rt, "misbehave", settings(|s| s.capabilities = vec!["services".into()])).await;
    let resp = granted.reconcile(&misbehave("services", json!({})), no_reads()).await.result.unwrap();
    assert_eq!(resp.services.len(), 1);
    assert_eq!(resp.services[0].command.as_deref(), Some("/bin/true"));
}

#[tokio::test]
async fn plugin_answers_are_typed() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let retry = p.reconcile(&misbehave("retry", json!({})), no_reads()).await.result.unwrap_err();
    assert_eq!(retry, PluginError::Retry("misbehave: try again later".into()));
    let fatal = p.reconcile(&misbehave("fatal", json!({})), no_reads()).await.result.unwrap_err();
    assert_eq!(fatal, PluginError::Fatal("misbehave: this will never work".into()));
    let invalid = p.reconcile(&misbehave("fly", json!({})), no_reads()).await.result.unwrap_err();
    match invalid {
        PluginError::Invalid(errs) => {
            assert_eq!(errs[0].path, "spec.behavior");
            assert!(errs[0].message.contains("unknown variant `fly`"), "{}", errs[0].message);
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(retry.is_plugin_answer() && !PluginError::Trap { message: String::new() }.is_plugin_answer());
}

#[tokio::test]
async fn validate_reports_field_paths() {
    let rt = runtime();
    let p = load(&rt, "noop", PluginSettings::default()).await;
    let long = "x".repeat(2000);
    let errs = p.validate(&noop_obj("a", &long)).await.result.unwrap();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].path, "spec.value");
    let ok = p.validate(&noop_obj("a", "fine")).await.result.unwrap();
    assert!(ok.is_empty());
}

/// Only the first instance of a plugin type-checks its exports; every later fresh instance calls
/// them by index. Each of the four exports still answers as it should, on instance after instance.
#[tokio::test]
async fn every_export_answers_on_fresh_instances_after_the_first() {
    let rt = runtime();
    let p = load(&rt, "noop", PluginSettings::default()).await;
    let before = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed);
    for round in 0..3 {
        let value = format!("v{round}");
        let info = p.describe().await;
        assert_eq!(info.result.unwrap().name, "noop");
        assert!(info.fresh_instance);
        assert!(p.validate(&noop_obj("a", &value)).await.result.unwrap().is_empty());
        assert_eq!(p.validate(&noop_obj("a", &"x".repeat(2000))).await.result.unwrap()[0].path, "spec.value");
        let req = request("Noop", "a", json!({"value": value}));
        let out = p.reconcile(&req, no_reads()).await.result.unwrap();
        let status: serde_json::Value = serde_json::from_str(&out.status).unwrap();
        assert_eq!(status["value"], json!(value));
        let mut deleting = req.clone();
        deleting.resource.deleting = true;
        deleting.resource.status = Some(out.status.clone());
        let fin = p.finalize(&deleting, no_reads()).await.result.unwrap();
        assert!(fin.status.starts_with('{'), "{}", fin.status);
    }
    let created = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(created, 3 * 5, "a fresh instance for every call");
}

#[tokio::test]
async fn reused_instances_are_discarded_after_a_trap() {
    let rt = runtime();
    let p = load(&rt, "misbehave", settings(|s| s.limits.reuse_instances = true)).await;
    let before = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed);
    let first = p.reconcile(&misbehave("ok", json!({})), no_reads()).await;
    assert!(first.result.is_ok() && first.fresh_instance);
    let second = p.reconcile(&misbehave("ok", json!({})), no_reads()).await;
    assert!(second.result.is_ok());
    assert!(!second.fresh_instance, "the idle instance is reused");
    assert!(p.reconcile(&misbehave("trap", json!({})), no_reads()).await.result.is_err());
    let after_trap = p.reconcile(&misbehave("ok", json!({})), no_reads()).await;
    assert!(after_trap.result.is_ok(), "{:?}", after_trap.result);
    assert!(after_trap.fresh_instance, "a trapped instance is never reused");
    let created = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(created, 2);
}

/// A spec the plugin has not linted yet: its warnings and the reconcile are two calls in one
/// instance, each with its own answer and CPU time. Warnings that panic spend that instance, and
/// the reconcile still answers, from a fresh one.
#[tokio::test]
async fn the_warnings_and_the_reconcile_share_one_instance_unless_the_warnings_fail() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let instances = || rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed);
    let before = instances();
    let (warned, out) = p.reconcile_linted(&misbehave("ok", json!({"warn": "mind the gap"})), no_reads(), true).await;
    let warned = warned.expect("misbehave exports lint");
    let found = warned.result.expect("the warnings answer");
    assert_eq!((found.len(), found[0].path.as_str(), found[0].message.as_str()), (1, "spec.warn", "mind the gap"));
    assert!(warned.cpu > Duration::ZERO && out.cpu > Duration::ZERO, "{:?} {:?}", warned.cpu, out.cpu);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out.result.expect("reconciled").status).unwrap()["ok"], true);
    assert_eq!(instances() - before, 1, "one instance for both calls");

    // Not asked: the reconcile alone.
    let (warned, out) = p.reconcile_linted(&misbehave("ok", json!({"warn": "mind the gap"})), no_reads(), false).await;
    assert!(warned.is_none() && out.result.is_ok(), "{:?}", out.result);
    assert_eq!(instances() - before, 2);

    // Warnings that panic: their error, and a reconcile that ran in an instance of its own.
    let (warned, out) = p.reconcile_linted(&misbehave("ok", json!({"warn": "panic"})), no_reads(), true).await;
    let err = warned.expect("asked").result.expect_err("the warnings panicked");
    assert!(err.to_string().contains("deliberate panic in warnings"), "{err}");
    assert!(out.result.is_ok() && out.fresh_instance, "{:?}", out.result);
    assert_eq!(instances() - before, 4, "the failed instance is not used for the reconcile");

    // A reconcile that fails after warnings that answered reports its own error.
    let (warned, out) = p.reconcile_linted(&misbehave("trap", json!({"warn": "careful"})), no_reads(), true).await;
    assert_eq!(warned.expect("asked").result.expect("answered")[0].message, "careful");
    assert!(matches!(out.result, Err(PluginError::Trap { .. })), "{:?}", out.result);
    assert_eq!(instances() - before, 5);

    // Warnings over the output bound are refused, but the call did not fail: the reconcile
    // answers from the same instance.
    let small = load(&rt, "misbehave", settings(|s| s.limits.max_output = 200)).await;
    let before = instances();
    let (warned, out) =
        small.reconcile_linted(&misbehave("ok", json!({"warn": "w".repeat(400)})), no_reads(), true).await;
    let err = warned.expect("asked").result.expect_err("too large");
    assert!(matches!(err, PluginError::OutputTooLarge { .. }), "{err:?}");
    assert!(out.result.is_ok(), "{:?}", out.result);
    assert_eq!(instances() - before, 1);
    healthy_still_works(&rt).await;
}

#[tokio::test]
async fn each_fresh_instance_starts_clean_though_the_host_keeps_its_wasi_context() {
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let before = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed);
    let chatty = p.reconcile(&misbehave("chatty", json!({"lines": 3})), no_reads()).await;
    assert!(chatty.result.is_ok() && chatty.fresh_instance, "{:?}", chatty.result);
    assert_eq!(chatty.logs.len(), 3);
    // The next fresh instance writes its stdout where the last one did, into its own call's log.
    let quiet = p.reconcile(&misbehave("ok", json!({})), no_reads()).await;
    assert!(quiet.result.is_ok() && quiet.fresh_instance, "{:?}", quiet.result);
    assert!(quiet.logs.is_empty(), "nothing of the last call: {:?}", quiet.logs);
    let cache = Arc::new(Cache(vec![noop_obj("target", "y")]));
    let read = p.reconcile(&misbehave("read", json!({})), cache).await;
    assert!(read.result.is_ok(), "{:?}", read.result);
    assert_eq!(read.reads.len(), 2, "{:?}", read.reads);
    let after = p.reconcile(&misbehave("chatty", json!({"lines": 1})), no_reads()).await;
    assert_eq!(after.logs.len(), 1, "{:?}", after.logs);
    assert!(after.reads.is_empty(), "the reads of the call before are not this one's: {:?}", after.reads);
    assert!(p.reconcile(&misbehave("trap", json!({})), no_reads()).await.result.is_err());
    let after_trap = p.reconcile(&misbehave("chatty", json!({"lines": 2})), no_reads()).await;
    assert!(after_trap.result.is_ok(), "{:?}", after_trap.result);
    assert_eq!(after_trap.logs.len(), 2, "{:?}", after_trap.logs);
    let created = rt.stats().instances.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(created, 6, "a fresh instance for every call");
}

/// What a call reads through must not outlive the call: an instance kept for reuse, or a store
/// state kept for the next fresh instance, holding the host's cache would keep the host's store
/// open after the host stopped (a restart in the same process then finds it locked).
#[tokio::test]
async fn no_instance_or_state_kept_between_calls_holds_on_to_what_a_call_read_through() {
    let rt = runtime();
    for reuse in [false, true] {
        let p = load(&rt, "misbehave", settings(|s| s.limits.reuse_instances = reuse)).await;
        let cache = Arc::new(Cache(vec![noop_obj("target", "y")]));
        for _ in 0..2 {
            let out = p.reconcile(&misbehave("read", json!({})), cache.clone()).await;
            assert!(out.result.is_ok(), "{:?}", out.result);
            assert_eq!(out.reads.len(), 2);
        }
        assert_eq!(Arc::strong_count(&cache), 1, "reuse_instances: {reuse}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_get_their_own_sandbox() {
    let rt = runtime();
    let p = Arc::new(load(&rt, "noop", PluginSettings::default()).await);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let req: ReconcileRequest = request("Noop", &format!("o{i}"), json!({"value": format!("v{i}")}));
            let out = p.reconcile(&req, Arc::new(steward::plugin::NoReads)).await;
            let status: serde_json::Value = serde_json::from_str(&out.result.unwrap().status).unwrap();
            assert_eq!(status["value"], format!("v{i}"));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
