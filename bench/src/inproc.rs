//! The in-process scenarios: `plugin-call`, `load`, `python` and `ts` run the host library in this process
//! (`world`, in `world.rs`, too).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use steward::capabilities::ObservedServices;
use steward::plugin::{Inputs, NoReads, Plugin, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use steward_sdk::testing::FakeHost;
use steward_sdk::{RawObject, ServiceStatus, ToolInfo};

use crate::child::built_plugins;
use crate::{percentiles, round};

/// The observed services `req` hands the services unit.
fn observed(req: &ReconcileRequest) -> &[steward_sdk::ServiceStatus] {
    req.inputs.get::<ObservedServices>().map_or(&[][..], |o| &o.0)
}

/// A typical MCPServer: stdio, auto-started, running and healthy with a few tools.
fn typical() -> ReconcileRequest {
    let spec = json!({
        "type": "stdio", "command": "mcp-git", "args": ["--repo", "/src"], "env": {"LOG": "info"},
        "autoStart": true, "toolPrefix": "git_", "description": "git tools", "timeout": 30
    });
    let resource = RawObject {
        api_version: "steward.dev/v1alpha1".into(),
        kind: "MCPServer".into(),
        name: "git".into(),
        namespace: "default".into(),
        generation: 3,
        spec: spec.to_string(),
        status: Some(json!({"type": "stdio", "state": "Running", "health": "Healthy", "restartCount": 0, "consecutiveFailures": 0, "tools": ["git_log", "git_status"]}).to_string()),
        ..RawObject::default()
    };
    ReconcileRequest { resource, inputs: Inputs::default().with(ObservedServices(healthy_services())) }
}

/// What the services unit observes of a typical MCPServer: its one stdio service running and
/// healthy, with three tools.
pub(crate) fn healthy_services() -> Vec<ServiceStatus> {
    vec![ServiceStatus {
        name: "server".into(),
        phase: steward_sdk::ServicePhase::Running,
        pid: Some(4242),
        restarts: 0,
        consecutive_failures: 0,
        next_retry_at: None,
        last_exit: None,
        healthy: Some(true),
        last_connected: Some("2026-11-21T10:00:00Z".into()),
        tools: ["log", "status", "diff"]
            .iter()
            .map(|t| ToolInfo { name: (*t).into(), description: String::new() })
            .collect(),
        message: None,
        auth_required: false,
    }]
}

/// How many turns the three ways of calling take in `plugin-call`.
const BLOCKS: usize = 20;

/// `plugin-call`: one typical MCPServer reconcile of an object at rest, `calls` times each
/// natively, through a reused instance and through a fresh instance per call, taking turns in
/// [`BLOCKS`] blocks.
pub async fn plugin_call(calls: usize) -> Result<serde_json::Value> {
    let wasm = build_one("mcpserver")?;
    let bytes = std::fs::read(&wasm)?;
    let mut req = typical();

    // Native: the same logic through the SDK's dispatch, no WebAssembly.
    let entry = mcpserver::__steward_plugin();
    let host = FakeHost::new();
    // At rest, as a resync finds it (the most common reconcile): the object carries the status
    // its last reconcile gave. Until 2026-11-27 the request carried a hand-written status
    // (fewer tools and fields than the plugin reports), so every call changed it.
    let at_rest = entry.reconcile(&host, &req.resource, observed(&req), false).map_err(|e| anyhow::anyhow!("{e}"))?;
    req.resource.status = Some(at_rest.status);

    let runtime = Runtime::new(RuntimeOptions::default())?;
    let grant = |reuse: bool| {
        move |_: &str| {
            let mut s = PluginSettings { capabilities: vec!["services".into()], ..Default::default() };
            s.limits.reuse_instances = reuse;
            s
        }
    };
    let reads: Arc<dyn steward::plugin::HostReads> = Arc::new(NoReads);
    let reused_plugin = Plugin::load(runtime.clone(), &wasm, bytes.clone(), grant(true)).await?;
    let fresh_plugin = Plugin::load(runtime.clone(), &wasm, bytes, grant(false)).await?;
    let call = async |plugin: &Plugin| -> Result<Duration> {
        let t = Instant::now();
        let out = plugin.reconcile(&req, reads.clone()).await;
        let d = t.elapsed();
        out.result.context("plugin call")?;
        Ok(d)
    };
    for _ in 0..200 {
        std::hint::black_box(entry.reconcile(&host, &req.resource, observed(&req), false).ok());
        call(&reused_plugin).await?;
        call(&fresh_plugin).await?;
    }
    // The three take turns in blocks, so that a change in the machine's pace (a noisy
    // neighbour, the clock's frequency) weighs on each alike and their ratios hold.
    let (mut native, mut reused, mut fresh) =
        (Vec::with_capacity(calls), Vec::with_capacity(calls), Vec::with_capacity(calls));
    let block = calls.div_ceil(BLOCKS).max(1);
    while native.len() < calls {
        let n = block.min(calls - native.len());
        for _ in 0..n {
            let t = Instant::now();
            let out =
                entry.reconcile(&host, &req.resource, observed(&req), false).map_err(|e| anyhow::anyhow!("{e}"))?;
            std::hint::black_box(out);
            native.push(t.elapsed());
        }
        for _ in 0..n {
            reused.push(call(&reused_plugin).await?);
        }
        for _ in 0..n {
            fresh.push(call(&fresh_plugin).await?);
        }
    }

    let (n50, n99) = percentiles(native);
    let (r50, r99) = percentiles(reused);
    let (f50, f99) = percentiles(fresh);
    Ok(json!({
        "scenario": "plugin-call",
        "calls": calls,
        "pooling": runtime.uses_pooling(),
        "native_median_us": round(n50), "native_p99_us": round(n99),
        "reused_median_us": round(r50), "reused_p99_us": round(r99),
        "fresh_median_us": round(f50), "fresh_p99_us": round(f99),
        "reused_native_ratio": round(r50 / n50),
        "fresh_native_ratio": round(f50 / n50),
        "fresh_reused_ratio": round(f50 / r50),
    }))
}

/// Builds plugin package `name` alone (not every bundled one, as [`built_plugins`] does: building
/// `workflowrun` rebuilds `workflow` each time) and returns its `.wasm`.
pub(crate) fn build_one(name: &str) -> Result<std::path::PathBuf> {
    let mut built = steward_plugin_build::build(&[name]).map_err(|e| anyhow::anyhow!("{e}"))?;
    built.remove(name).with_context(|| format!("plugin {name} was not built"))
}

/// `load`: each bundled plugin loaded `rounds` times with an empty compile cache and again cached.
pub async fn load(rounds: usize) -> Result<serde_json::Value> {
    let built: Vec<_> =
        built_plugins()?.iter().filter(|(name, _)| steward_plugin_build::BUNDLED.contains(&name.as_str())).collect();
    let mut out = serde_json::Map::new();
    out.insert("scenario".into(), json!("load"));
    for (name, path) in built {
        let bytes = std::fs::read(path)?;
        let mut cold = Vec::new();
        let mut warm = Vec::new();
        for _ in 0..rounds {
            let cache = tempfile::tempdir()?;
            let opts = RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() };
            let settings = |_: &str| PluginSettings { capabilities: vec!["services".into()], ..Default::default() };
            let rt = Runtime::new(opts.clone())?;
            let t = Instant::now();
            Plugin::load(rt, path, bytes.clone(), settings).await?;
            cold.push(t.elapsed());
            let rt = Runtime::new(opts)?;
            let t = Instant::now();
            Plugin::load(rt, path, bytes.clone(), settings).await?;
            warm.push(t.elapsed());
        }
        let (c50, _) = percentiles(cold);
        let (w50, _) = percentiles(warm);
        out.insert(format!("{name}_bytes"), json!(bytes.len()));
        out.insert(format!("{name}_cold_ms"), json!(round(c50 / 1000.0)));
        out.insert(format!("{name}_cached_ms"), json!(round(w50 / 1000.0)));
    }
    Ok(serde_json::Value::Object(out))
}

/// `python [CALLS]`: the `MCPServerGroup` kind written in Python (componentize-py) beside the
/// same kind in Rust: each one's figures (see [`language_figures`]).
pub async fn python(calls: usize) -> Result<serde_json::Value> {
    let python = steward_plugin_build::python_plugin().map_err(|e| anyhow::anyhow!("{e}"))?;
    let rust = build_one("mcpservergroup")?;
    languages("python", calls, &[("python", python), ("rust", rust)]).await
}

/// `ts [CALLS]`: the `MCPServerGroup` kind written in TypeScript (the SDK in `sdk-ts`,
/// componentize-js) beside the Python and Rust ones, measured in the same run, and the ratios of
/// the TypeScript figures to the Python ones (`ts_python_{bytes,load,reconcile,memory}_ratio`).
pub async fn typescript(calls: usize) -> Result<serde_json::Value> {
    let ts = steward_plugin_build::typescript_plugin("mcpservergroup-ts").map_err(|e| anyhow::anyhow!("{e}"))?;
    let python = steward_plugin_build::python_plugin().map_err(|e| anyhow::anyhow!("{e}"))?;
    let rust = build_one("mcpservergroup")?;
    let mut out = languages("ts", calls, &[("ts", ts), ("python", python), ("rust", rust)]).await?;
    let map = out.as_object_mut().expect("languages returns an object");
    for (figure, key) in
        [("bytes", "bytes"), ("load", "load_ms"), ("reconcile", "reconcile_median_us"), ("memory", "call_memory_kib")]
    {
        let (a, b) = (map[&format!("ts_{key}")].as_f64(), map[&format!("python_{key}")].as_f64());
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => json!(round(a / b)),
            _ => serde_json::Value::Null,
        };
        map.insert(format!("ts_python_{figure}_ratio"), ratio);
    }
    Ok(out)
}

/// The figures of each `(lang, wasm)` over one scenario: a group selecting 5 of 10 servers.
///
/// Per language: `{lang}_bytes` (the component's size), `{lang}_load_ms` (load with compilation,
/// no cache), `{lang}_reconcile_median_us` and `{lang}_reconcile_p99_us` (a fresh instance per
/// call, `calls` times), `{lang}_reused_median_us` (the same calls on an instance kept between
/// calls, `reuse_instances: true`), and `{lang}_call_memory_kib`: the smallest memory limit (in 64 KiB
/// WebAssembly pages) under which a fresh instance still loads and reconciles, that is the
/// linear memory one fresh call needs.
async fn languages(scenario: &str, calls: usize, plugins: &[(&str, std::path::PathBuf)]) -> Result<serde_json::Value> {
    let servers: Vec<RawObject> = (0..10)
        .map(|i| RawObject {
            api_version: "steward.dev/v1alpha1".into(),
            kind: "MCPServer".into(),
            name: format!("s{i}"),
            namespace: "default".into(),
            generation: 1,
            labels: [("tier".to_string(), if i % 2 == 0 { "prod" } else { "dev" }.to_string())].into(),
            spec: "{}".into(),
            status: Some(json!({"state": "Running", "health": "Healthy", "tools": ["search", "fetch"]}).to_string()),
            ..RawObject::default()
        })
        .collect();
    let group = RawObject {
        api_version: "steward.dev/v1alpha1".into(),
        kind: "MCPServerGroup".into(),
        name: "g".into(),
        namespace: "default".into(),
        generation: 1,
        spec: json!({"selector": {"matchLabels": {"tier": "prod"}}, "requiredTools": ["search"]}).to_string(),
        ..RawObject::default()
    };
    let req = ReconcileRequest { resource: group, ..Default::default() };
    let reads: Arc<dyn steward::plugin::HostReads> = Arc::new(Cache(servers));
    let mut out = serde_json::Map::new();
    out.insert("scenario".into(), json!(scenario));
    out.insert("calls".into(), json!(calls));
    for (lang, wasm) in plugins {
        let bytes = std::fs::read(wasm)?;
        let t = Instant::now();
        let plugin = Plugin::load(Runtime::new(RuntimeOptions::default())?, wasm, bytes.clone(), |_: &str| {
            PluginSettings::default()
        })
        .await?;
        let load = t.elapsed();
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let report = plugin.reconcile(&req, reads.clone()).await;
            report.result.with_context(|| format!("a {lang} reconcile"))?;
            times.push(report.elapsed);
        }
        let (median, p99) = percentiles(times);
        // The same calls with `reuse_instances: true`: an instance serves call after call (what
        // it gives up is in docs/plugins.md, "Limits and sandbox").
        let reusing = Plugin::load(Runtime::new(RuntimeOptions::default())?, wasm, bytes.clone(), |_: &str| {
            let mut s = PluginSettings::default();
            s.limits.reuse_instances = true;
            s
        })
        .await?;
        let mut reused = Vec::with_capacity(calls);
        for _ in 0..calls {
            let report = reusing.reconcile(&req, reads.clone()).await;
            report.result.with_context(|| format!("a reused {lang} reconcile"))?;
            reused.push(report.elapsed);
        }
        let (reused_median, _) = percentiles(reused);
        out.insert(format!("{lang}_reused_median_us"), json!(round(reused_median)));
        out.insert(format!("{lang}_bytes"), json!(bytes.len()));
        out.insert(format!("{lang}_load_ms"), json!(round(load.as_secs_f64() * 1e3)));
        out.insert(format!("{lang}_reconcile_median_us"), json!(round(median)));
        out.insert(format!("{lang}_reconcile_p99_us"), json!(round(p99)));
        let memory = call_memory(wasm, &bytes, &req, &reads).await.with_context(|| format!("{lang}'s call memory"))?;
        out.insert(format!("{lang}_call_memory_kib"), json!(memory / 1024));
    }
    Ok(serde_json::Value::Object(out))
}

/// The smallest memory limit, in bytes and a multiple of a 64 KiB page, under which `wasm` loads
/// and reconciles `req` on a fresh instance: a binary search from one page to the default limit,
/// each step loading from a compile cache.
async fn call_memory(
    wasm: &std::path::Path,
    bytes: &[u8],
    req: &ReconcileRequest,
    reads: &Arc<dyn steward::plugin::HostReads>,
) -> Result<u64> {
    const PAGE: u64 = 64 * 1024;
    let cache = tempfile::tempdir()?;
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() })?;
    let fits = async |pages: u64| -> bool {
        let settings = move |_: &str| {
            let mut s = PluginSettings::default();
            s.limits.memory = pages * PAGE;
            s
        };
        match Plugin::load(runtime.clone(), wasm, bytes.to_vec(), settings).await {
            Ok(plugin) => plugin.reconcile(req, reads.clone()).await.result.is_ok(),
            Err(_) => false,
        }
    };
    let (mut lo, mut hi) = (0u64, PluginSettings::default().limits.memory / PAGE);
    anyhow::ensure!(fits(hi).await, "a fresh call does not fit the default memory limit of {hi} pages");
    // Invariant: `lo` pages do not fit, `hi` pages do.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid).await {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi * PAGE)
}

/// The host cache of the `python` and `ts` scenarios: `get` and `list` answer from these objects.
struct Cache(Vec<RawObject>);

impl steward::plugin::HostReads for Cache {
    fn get(&self, r: &steward_sdk::ObjectRef) -> Option<RawObject> {
        self.0.iter().find(|o| o.kind == r.kind && o.namespace == r.namespace && o.name == r.name).cloned()
    }
    fn list(&self, kind: &str, ns: Option<&str>) -> Vec<RawObject> {
        self.0.iter().filter(|o| o.kind == kind && ns.is_none_or(|n| n == o.namespace)).cloned().collect()
    }
}
