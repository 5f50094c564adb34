//! Kubernetes mode's cost on the API server and in memory: a resync of unchanged objects writes
//! nothing and reads nothing, and the watch caches keep no `managedFields` and no
//! `kubectl.kubernetes.io/last-applied-configuration` copy.

use std::time::Duration;

use kube::api::PostParams;
use serde_json::json;
use steward::kubernetes::source::{KubeSource, LAST_APPLIED, Scope};
use steward::source::Source as _;
use steward_sdk::KindInfo;

use crate::common;
use crate::common::kube::kube_e2e;
use crate::common::kube::*;

/// Objects in the resync test.
const OBJECTS: usize = 20;

/// `steward_kube_writes_total{kind="Noop",op="status"}` in the host's metrics (0 when absent).
fn status_writes(metrics: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with("steward_kube_writes_total{kind=\"Noop\",op=\"status\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The counter `name` (no labels) in the host's metrics (0 when absent).
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

kube_e2e! {
    async fn a_resync_of_unchanged_objects_writes_no_status_and_reads_nothing(k: Kube) {
        k.install_crds(&["noop"]).await;
        let (_dir, cfg) = k.host_dir(&["noop"], "");
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(&cfg, format!("{text}\nresync: 1s\n")).unwrap();
        let engine = start(&cfg, k.client.clone()).await;
        let api = k.noops();
        for i in 0..OBJECTS {
            api.create(&PostParams::default(), &k.noop(&format!("o{i}"), "v")).await.unwrap();
        }
        for i in 0..OBJECTS {
            wait_obj(&api, &format!("o{i}"), "Synced at generation 1", |o| status(o)["observedGeneration"] == 1).await;
        }
        let metrics = engine.render_metrics();
        let writes = status_writes(&metrics);
        assert!(writes >= OBJECTS as f64, "{writes} status writes for {OBJECTS} new objects");
        let (commits0, stored0) = (counter(&metrics, "steward_store_commits_total"), counter(&metrics, "steward_store_writes_total"));
        if let Some(s) = k.fake_server() {
            s.clear_requests();
        }
        // Every object is reconciled again by its resync (1 s after its last success), twice.
        let before: Vec<usize> = (0..OBJECTS).map(|i| k.reconciles(&engine, &format!("o{i}"))).collect();
        common::eventually(
            T,
            "every object resynced twice",
            async || (0..OBJECTS).map(|i| k.reconciles(&engine, &format!("o{i}"))).collect::<Vec<_>>(),
            |now: &Vec<usize>| now.iter().zip(&before).all(|(n, b)| *n >= b + 2),
        )
        .await;
        assert_eq!(status_writes(&engine.render_metrics()), writes, "a resync of unchanged objects wrote a status");
        // The resyncs' records changed only in their times: they are committed (within the
        // store's `SOON`), sharing commits rather than paying one each.
        let metrics = common::eventually(
            T,
            "the resyncs' records committed",
            async || engine.render_metrics(),
            |m: &String| counter(m, "steward_store_writes_total") - stored0 >= (2 * OBJECTS) as f64,
        )
        .await;
        let commits = counter(&metrics, "steward_store_commits_total") - commits0;
        let stored = counter(&metrics, "steward_store_writes_total") - stored0;
        assert!(commits < stored, "{commits} commits for {stored} store writes: the resyncs did not share commits");
        if let Some(s) = k.fake_server() {
            let noops: Vec<_> = s
                .requests()
                .into_iter()
                .filter(|r| r.resource.as_deref() == Some("noops") && r.verb != steward_fake_apiserver::Verb::Watch)
                .map(|r| format!("{} {}{}", r.method, r.path, if r.query.is_empty() { String::new() } else { format!("?{}", r.query) }))
                .collect();
            assert!(noops.is_empty(), "the resyncs made requests on the objects: {noops:#?}");
        }
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

fn noop_kind() -> KindInfo {
    KindInfo {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        kind: "Noop".into(),
        plural: "noops".into(),
        namespaced: true,
        spec_schema: "{}".into(),
        resync_seconds: 0,
        columns: Vec::new(),
    }
}

kube_e2e! {
    async fn the_watch_cache_keeps_no_managed_fields_and_no_last_applied_copy(k: Kube) {
        k.install_crds(&["noop"]).await;
        let api = k.noops();
        let mut o = k.noop("applied", "v");
        o.metadata.annotations = Some(
            [(LAST_APPLIED.to_string(), json!({"spec": {"value": "v"}}).to_string()), ("team".to_string(), "a".to_string())].into(),
        );
        api.create(&PostParams::default(), &o).await.unwrap();
        let stored = api.get("applied").await.unwrap();
        if k.is_real() {
            assert!(stored.metadata.managed_fields.is_some(), "the real server keeps managedFields: {stored:#?}");
        }
        let (source, _events) = KubeSource::new(k.client.clone(), Scope { namespaces: vec![k.ns.clone()], label_selector: None, relist: None });
        source.set_kinds(&[noop_kind()]);
        assert!(source.wait_synced(T).await, "the watch never listed");
        let key = k.key("Noop", "applied");
        let cached = source.object(&key).expect("the object is in the cache");
        assert!(cached.metadata.managed_fields.is_none(), "{cached:#?}");
        let annotations = cached.metadata.annotations.clone().unwrap_or_default();
        assert!(!annotations.contains_key(LAST_APPLIED), "{annotations:?}");
        assert_eq!(annotations.get("team").map(String::as_str), Some("a"));
        // What a plugin sees: the other annotations only.
        let seen = source.get(&key).expect("the source serves the object");
        assert!(!seen.raw.annotations.contains_key(LAST_APPLIED));
        assert_eq!(seen.raw.annotations.get("team").map(String::as_str), Some("a"));
    }
}
