//! Kubernetes faults, against the fake API server only (the faults are its injected ones): an
//! unreachable API server, cut watch streams, 409 storms, 429 with Retry-After, and forbidden
//! status writes. Nothing is lost; every failure is retried with backoff and reported with its
//! category.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use steward::model::ObjectKey;
use steward_fake_apiserver::{FakeApiServer, Fault, RequestRecord, Verb};

use crate::common;
use crate::common::kube::*;

fn noops(r: &RequestRecord) -> bool {
    r.resource.as_deref() == Some("noops")
}

/// A metric's value from the engine's exposition (0 when absent).
fn metric(engine: &steward::engine::Engine, series: &str) -> f64 {
    engine
        .render_metrics()
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Fake API server only: it is made unreachable, and changed behind the host's back, by the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_loses_nothing_and_the_status_is_written_once_it_returns() {
    let Cluster { server, client, engine, dir: _dir } =
        Cluster::start(&["noop"], "kubernetes: { leaderElection: { enabled: false } }\n").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    api.create(&PostParams::default(), &noop_obj("a", "before")).await.unwrap();
    wait_obj(&api, "a", "Synced", |o| status(o)["value"] == "before").await;

    // Someone else overwrites the status (no reconcile follows a status-only change), so the
    // next reconcile has a status to write back.
    let mut tampered = api.get("a").await.unwrap();
    tampered.data["status"]["value"] = json!("tampered");
    api.replace_status("a", &PostParams::default(), &tampered).await.unwrap();
    let key = ObjectKey::new("Noop", "default", "a");
    common::eventually(
        T,
        "the cache sees the tampered status",
        async || engine.cached(&key).and_then(|c| c.raw.status),
        |s| s.as_deref().is_some_and(|s| s.contains("tampered")),
    )
    .await;

    // Cut off: the spec changes and an object appears behind the host's back, and a manual
    // trigger makes the host try to write while it cannot.
    server.set_unreachable(true);
    let mut a = server.object("test.steward.dev", "v1", "noops", Some("default"), "a").unwrap();
    a["spec"]["value"] = json!("during");
    server.replace_object("test.steward.dev", "v1", "noops", a).unwrap();
    let mut b = serde_json::to_value(noop_obj("b", "new")).unwrap();
    b["apiVersion"] = json!("test.steward.dev/v1");
    b["kind"] = json!("Noop");
    server.create_object("test.steward.dev", "v1", "noops", b).unwrap();
    engine.trigger(&ObjectKey::new("Noop", "default", "a")).unwrap();
    let series = "steward_kube_write_errors_total{kind=\"Noop\",op=\"status\",category=\"unreachable\"}";
    common::eventually(T, "a status write failing as unreachable", async || metric(&engine, series), |n| *n >= 1.0)
        .await;
    // Retries back off: a second of outage costs a handful of attempts, not a hot loop.
    let refused = server.refused_connections();
    let pause = Instant::now();
    common::eventually(T, "a second of outage", async || pause.elapsed(), |d| *d >= Duration::from_secs(1)).await;
    let attempts = server.refused_connections() - refused;
    assert!(attempts < 60, "{attempts} connection attempts in a second of outage");

    server.set_unreachable(false);
    wait_obj(&api, "a", "the change made during the outage", |o| status(o)["value"] == "during").await;
    wait_obj(&api, "b", "the object created during the outage", |o| status(o)["value"] == "new").await;
    common::eventually(T, "the queue drained", async || engine.busy(), |n| *n == 0).await;
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Fake API server only: the watches are cut, the history compacted and the requests counted by the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_watch_resumes_from_its_bookmark_and_relists_only_when_the_history_is_gone() {
    let Cluster { server, client, engine, dir: _dir } =
        Cluster::start(&["noop"], "kubernetes: { leaderElection: { enabled: false } }\n").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    api.create(&PostParams::default(), &noop_obj("a", "1")).await.unwrap();
    wait_obj(&api, "a", "Synced", |o| status(o)["value"] == "1").await;
    let lists = |s: &FakeApiServer| s.requests().iter().filter(|r| noops(r) && r.verb == Verb::List).count();
    let watches = |s: &FakeApiServer| s.requests().iter().filter(|r| noops(r) && r.verb == Verb::Watch).count();

    // A cut with history kept: the watch resumes from where it was; no relist.
    server.bookmark_now();
    let (l0, w0) = (lists(&server), watches(&server));
    server.cut_watches();
    api.patch("a", &Default::default(), &kube::api::Patch::Merge(json!({"spec": {"value": "2"}}))).await.unwrap();
    wait_obj(&api, "a", "the change after the cut", |o| status(o)["value"] == "2").await;
    common::eventually(T, "a new watch", async || watches(&server), |n| *n > w0).await;
    assert_eq!(lists(&server), l0, "the watcher relisted although its resourceVersion was still served");

    // A cut, a change while the watch cannot resume, and the history compacted: the watch's
    // resourceVersion is gone (410), so the watcher relists, and the change is seen.
    server.set_unreachable(true);
    let noop_watches = || server.watch_counts().get(&("test.steward.dev".into(), "noops".into())).copied().unwrap_or(0);
    common::eventually(T, "the watch cut", async || noop_watches(), |n| *n == 0).await;
    let mut a = server.object("test.steward.dev", "v1", "noops", Some("default"), "a").unwrap();
    a["spec"]["value"] = json!("3");
    server.replace_object("test.steward.dev", "v1", "noops", a).unwrap();
    server.compact();
    server.set_unreachable(false);
    wait_obj(&api, "a", "the change after the relist", |o| status(o)["value"] == "3").await;
    assert!(lists(&server) > l0, "no relist after 410 Gone");
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Fake API server only: the conflicts are injected faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_storm_is_retried_with_backoff_until_the_status_is_written() {
    // Five attempts per write; the storm outlasts two writes.
    let extra = "kubernetes: { statusRetries: 5, leaderElection: { enabled: false } }\n";
    let Cluster { server, client, engine, dir: _dir } = Cluster::start(&["noop"], extra).await;
    let storm = server.inject(Fault::conflict().method("PUT").resource("noops").subresource("status").times(12));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    api.create(&PostParams::default(), &noop_obj("s", "v")).await.unwrap();
    let s = wait_obj(&api, "s", "Synced after the storm", |o| status(o)["steward"]["phase"] == "Synced").await.unwrap();
    assert_eq!(storm.used(), 12);
    assert_eq!(status(Some(&s))["value"], "v");
    let failed = metric(&engine, "steward_kube_write_errors_total{kind=\"Noop\",op=\"status\",category=\"conflict\"}");
    assert!(failed >= 2.0, "writes that ran out of attempts are counted as conflicts: {failed}");
    assert_eq!(metric(&engine, "steward_kube_write_conflicts_total{kind=\"Noop\",op=\"status\"}"), 12.0);
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Fake API server only: the 429 answers are injected faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_honoured() {
    let Cluster { server, client, engine, dir: _dir } =
        Cluster::start(&["noop"], "kubernetes: { leaderElection: { enabled: false } }\n").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    let throttled =
        server.inject(Fault::too_many_requests(1).method("PUT").resource("noops").subresource("status").times(2));
    let began = Instant::now();
    api.create(&PostParams::default(), &noop_obj("t", "v")).await.unwrap();
    wait_obj(&api, "t", "Synced", |o| status(o)["steward"]["phase"] == "Synced").await;
    assert_eq!(throttled.used(), 2);
    // Two answers each asked for a second's wait; the write waited at least that long.
    assert!(began.elapsed() >= Duration::from_secs(2), "Retry-After not honoured: {:?}", began.elapsed());
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Fake API server only: the 403 answers are injected faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_status_write_is_reported_with_its_category_and_retried_until_allowed() {
    let Cluster { server, client, engine, dir: _dir } =
        Cluster::start(&["noop"], "kubernetes: { leaderElection: { enabled: false } }\n").await;
    let forbidden = server.inject(Fault::forbidden().method("PUT").resource("noops").subresource("status").times(1000));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    api.create(&PostParams::default(), &noop_obj("f", "v")).await.unwrap();
    let series = "steward_kube_write_errors_total{kind=\"Noop\",op=\"status\",category=\"forbidden\"}";
    common::eventually(T, "forbidden counted", async || metric(&engine, series), |n| *n >= 2.0).await;
    assert!(api.get("f").await.unwrap().data.get("status").is_none());
    // Retries back off: two seconds of a persistent 403 cost a handful of writes, not one per
    // initial backoff (50 ms here).
    let puts = || forbidden.used();
    let (before, began) = (puts(), Instant::now());
    common::eventually(T, "two seconds of refusals", async || began.elapsed(), |d| *d >= Duration::from_secs(2)).await;
    let during = puts() - before;
    assert!(during <= 12, "{during} status writes in two seconds of 403s");
    // The RBAC is fixed: the next retry writes.
    forbidden.cancel();
    wait_obj(&api, "f", "written once allowed", |o| status(o)["steward"]["phase"] == "Synced").await;
    engine.shutdown(Duration::from_secs(5)).await;
}
