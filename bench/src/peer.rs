//! The kube-rs peer of `kube-converge` and `kube-latency`: a minimal `kube::runtime::Controller`
//! in native Rust doing what Steward does with the Noop plugin, so that both are measured on the
//! same workload in the same run.
//!
//! `steward-bench __peer NAMESPACE WORKERS` (with `KUBECONFIG`) runs it over the `Noop` objects
//! of NAMESPACE with WORKERS concurrent reconciles (Steward's `queue.workers`). Per object it
//! makes the requests Steward makes:
//!
//! - the finalizer `steward.dev/finalizer` before the first reconcile (a merge patch naming the
//!   resourceVersion it read, as Steward's; kube-rs's `runtime::finalizer` helper sends a JSON
//!   patch whose `test` of an absent list the fake API server refuses);
//! - the status Steward writes (`value`, `seenGeneration`, `by`, the `Ready` condition,
//!   `observedGeneration`, and `steward.{phase, retryCount, lastReconcileTime}`) as a merge patch
//!   on `/status`, skipped when the status already says this generation and value;
//! - an Event `Synced` when the phase becomes Synced (as Steward's on a phase change).
//!
//! Its reflector keeps whole objects (the Controller's default). It answers `stats` on stdin with
//! `{"reconciles": N, "writes": N}`, and exits when its stdin closes.

use std::io::BufRead as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures_util::StreamExt as _;
use kube::Resource as _;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// The `Noop` test kind.
pub fn noop_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "Noop".into(),
        plural: "noops".into(),
    }
}

/// What every reconcile shares.
struct Ctx {
    api: Api<DynamicObject>,
    ar: ApiResource,
    recorder: Recorder,
    reconciles: AtomicU64,
    writes: AtomicU64,
}

/// A reconcile's failure (the controller's error type must be a `std::error::Error`).
#[derive(Debug)]
struct PeerError(String);

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PeerError {}

/// Runs the peer until its stdin closes: `steward-bench __peer NAMESPACE WORKERS`.
pub fn main(args: &[String]) -> Result<()> {
    let [ns, workers] = args else { anyhow::bail!("usage: __peer NAMESPACE WORKERS") };
    let workers: u16 = workers.parse().context("WORKERS")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(ns.clone(), workers))
}

async fn run(ns: String, workers: u16) -> Result<()> {
    let client = kube::Client::try_default().await.context("no client from KUBECONFIG")?;
    let ar = noop_ar();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let reporter = Reporter { controller: "kube-rs-peer".into(), instance: Some("peer".into()) };
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        ar: ar.clone(),
        recorder: Recorder::new(client, reporter),
        reconciles: AtomicU64::new(0),
        writes: AtomicU64::new(0),
    });
    let controller = Controller::new_with(api, watcher::Config::default(), ar)
        .with_config(ControllerConfig::default().concurrency(workers));
    let stats = ctx.clone();
    // Commands on stdin, in a thread of their own; the process ends when stdin closes.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "stats" {
                let r = stats.reconciles.load(Ordering::Relaxed);
                let w = stats.writes.load(Ordering::Relaxed);
                println!("{}", json!({"reconciles": r, "writes": w}));
            }
        }
        std::process::exit(0);
    });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                eprintln!("peer: {e}");
            }
        })
        .await;
    Ok(())
}

fn error_policy(_obj: Arc<DynamicObject>, _e: &PeerError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// Holds the object with the finalizer (a merge patch naming the resourceVersion it read, as
/// Steward's), then applies the Noop logic to the object the patch answered.
async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, PeerError> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == crate::kube::FINALIZER) {
        return apply(&obj, &ctx).await;
    }
    let mut list = finalizers;
    list.push(crate::kube::FINALIZER.to_string());
    let patch = json!({"metadata": {"finalizers": list, "resourceVersion": obj.metadata.resource_version}});
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let held = ctx
        .api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| PeerError(format!("finalizer of {name}: {e}")))?;
    apply(&held, &ctx).await
}

/// The Noop logic and Steward's status, written when it says something new.
async fn apply(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, PeerError> {
    let generation = obj.metadata.generation.unwrap_or(1);
    let value = obj.data["spec"]["value"].as_str().unwrap_or_default().to_string();
    let current = obj.data.get("status");
    let up_to_date = current.is_some_and(|s| {
        s["observedGeneration"].as_i64() == Some(generation) && s["value"].as_str() == Some(value.as_str())
    });
    if up_to_date {
        return Ok(Action::requeue(Duration::from_secs(600)));
    }
    let now = now_rfc3339();
    let transition = current
        .and_then(|s| {
            s["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready" && c["status"] == "True").cloned()
        })
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| Value::String(now.clone()));
    let status = json!({
        "value": value,
        "seenGeneration": generation,
        "by": "0.1.0",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Echoed", "message": "the value was copied",
                        "lastTransitionTime": transition}],
        "observedGeneration": generation,
        "steward": {"phase": "Synced", "retryCount": 0, "lastReconcileTime": now},
    });
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let params = PatchParams::default();
    ctx.api
        .patch_status(name, &params, &Patch::Merge(&json!({ "status": status })))
        .await
        .map_err(|e| PeerError(format!("status of {name}: {e}")))?;
    ctx.writes.fetch_add(1, Ordering::Relaxed);
    let was_synced = current.is_some_and(|s| s["steward"]["phase"] == "Synced");
    if !was_synced {
        let ev = KubeEvent {
            type_: EventType::Normal,
            reason: "Synced".into(),
            note: Some("phase Synced".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        // Best effort, in the background, as Steward's.
        let recorder = ctx.recorder.clone();
        let reference = obj.object_ref(&ctx.ar);
        tokio::spawn(async move {
            let _ = recorder.publish(&ev, &reference).await;
        });
    }
    Ok(Action::requeue(Duration::from_secs(600)))
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
