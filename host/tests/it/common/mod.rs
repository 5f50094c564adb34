//! Shared helpers of the host's integration tests: built plugins, runtimes, objects, and a real host process.
#![allow(dead_code)]

pub mod host;
pub mod kube;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use steward::plugin::{Plugin, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use steward_sdk::RawObject;

/// The built `.wasm` of a workspace plugin package (built once per test binary).
pub fn wasm(package: &str) -> PathBuf {
    steward_plugin_build::plugin(package)
}

/// A runtime without a compile cache.
pub fn runtime() -> Arc<Runtime> {
    Runtime::new(RuntimeOptions::default()).expect("runtime")
}

/// Loads `package` with `settings`.
pub async fn load(rt: &Arc<Runtime>, package: &str, settings: PluginSettings) -> Plugin {
    let path = wasm(package);
    let bytes = std::fs::read(&path).unwrap();
    Plugin::load(rt.clone(), &path, bytes, move |_| settings).await.unwrap_or_else(|e| panic!("{e}"))
}

/// A request for an object of `kind` named `name` with `spec`.
pub fn request(kind: &str, name: &str, spec: serde_json::Value) -> ReconcileRequest {
    ReconcileRequest {
        resource: RawObject {
            api_version: "test.steward.dev/v1".into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "default".into(),
            generation: 1,
            spec: spec.to_string(),
            ..RawObject::default()
        },
        services: vec![],
    }
}

/// A `Misbehave` request doing `behavior`, with extra spec fields.
pub fn misbehave(behavior: &str, extra: serde_json::Value) -> ReconcileRequest {
    let mut spec = json!({ "behavior": behavior });
    if let (Some(m), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    request("Misbehave", "m", spec)
}

/// Copies `src` to `dst` atomically (write beside, then rename), as a deploy tool would.
pub fn install(src: &Path, dst: &Path) {
    let tmp = dst.with_extension("part");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

/// Polls `f` every 20 ms until it returns `Some`, failing the test after `limit`.
pub async fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        poll_pause(20).await;
    }
}

/// The pause between two polls of a condition that has a deadline.
pub async fn poll_pause(ms: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(ms));
    tick.tick().await;
    tick.tick().await;
}
