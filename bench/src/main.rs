//! `cargo run --release -p steward-bench -- SCENARIO [--quick]`: Steward's benchmarks.
//!
//! Each scenario prints progress to stderr and one JSON object on the last line of stdout.
//! Scenarios: `plugin-call` (native vs reused vs fresh instance), `load` (cold compile vs
//! cached load, and plugin sizes), `converge N` (N objects to Synced), `latency` (file write
//! to new observedGeneration).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use steward::plugin::{NoReads, Plugin, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use steward_sdk::testing::FakeHost;
use steward_sdk::{RawObject, ServiceStatus, ToolInfo};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let words: Vec<&str> = args.iter().filter(|a| !a.starts_with("--")).map(String::as_str).collect();
    let mut scenarios: Vec<(String, Option<usize>)> = Vec::new();
    for w in &words {
        match w.parse::<usize>() {
            Ok(n) if !scenarios.is_empty() => scenarios.last_mut().unwrap().1 = Some(n),
            _ => scenarios.push((w.to_string(), None)),
        }
    }
    if scenarios.is_empty() {
        scenarios = ["plugin-call", "load", "converge", "latency"].iter().map(|s| (s.to_string(), None)).collect();
    }
    let single = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let multi = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    for (s, n) in scenarios {
        let result = match s.as_str() {
            "plugin-call" => single.block_on(plugin_call(n.unwrap_or(if quick { 10_000 } else { 20_000 })))?,
            "load" => single.block_on(load(n.unwrap_or(if quick { 3 } else { 10 })))?,
            "converge" => multi.block_on(converge(n.unwrap_or(if quick { 1_000 } else { 10_000 })))?,
            "latency" => multi
                .block_on(latency(if quick { 1_000 } else { 10_000 }, n.unwrap_or(if quick { 50 } else { 200 })))?,
            other => bail!("unknown scenario {other}; known: plugin-call, load, converge [N], latency [WRITES]"),
        };
        println!("{result}");
    }
    Ok(())
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
    let services = vec![ServiceStatus {
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
    }];
    ReconcileRequest { resource, services }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(v[v.len() / 2]), us(v[v.len() * 99 / 100]))
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

async fn plugin_call(calls: usize) -> Result<serde_json::Value> {
    let wasm = steward_plugin_build::build(&["mcpserver"]).map_err(|e| anyhow::anyhow!("{e}"))?["mcpserver"].clone();
    let bytes = std::fs::read(&wasm)?;
    let req = typical();

    // Native: the same logic through the SDK's dispatch, no WebAssembly.
    let entry = mcpserver::__steward_plugin();
    let host = FakeHost::new();
    let mut native = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let out = entry.reconcile(&host, &req.resource, &req.services, false).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::hint::black_box(out);
        native.push(t.elapsed());
    }

    let runtime = Runtime::new(RuntimeOptions::default())?;
    let grant = |reuse: bool| {
        move |_: &str| {
            let mut s = PluginSettings { capabilities: vec!["services".into()], ..Default::default() };
            s.limits.reuse_instances = reuse;
            s
        }
    };
    let reads: Arc<dyn steward::plugin::HostReads> = Arc::new(NoReads);
    let measure = async |plugin: &Plugin| -> Result<Vec<Duration>> {
        for _ in 0..200 {
            plugin.reconcile(&req, reads.clone()).await.result?;
        }
        let mut v = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let out = plugin.reconcile(&req, reads.clone()).await;
            v.push(t.elapsed());
            out.result.context("plugin call")?;
        }
        Ok(v)
    };
    let reused_plugin = Plugin::load(runtime.clone(), &wasm, bytes.clone(), grant(true)).await?;
    let reused = measure(&reused_plugin).await?;
    let fresh_plugin = Plugin::load(runtime.clone(), &wasm, bytes, grant(false)).await?;
    let fresh = measure(&fresh_plugin).await?;

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

async fn load(rounds: usize) -> Result<serde_json::Value> {
    let built = steward_plugin_build::build(steward_plugin_build::BUNDLED).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = serde_json::Map::new();
    out.insert("scenario".into(), json!("load"));
    for (name, path) in &built {
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

/// A temporary host directory with `n` Noop objects (100 per file) and the noop plugin.
fn noop_setup(n: usize, debounce: &str) -> Result<(tempfile::TempDir, steward::config::Config)> {
    let dir = tempfile::tempdir()?;
    let res = dir.path().join("resources");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&res)?;
    std::fs::create_dir_all(&plugins)?;
    let built = steward_plugin_build::build(&["noop"]).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::copy(&built["noop"], plugins.join("noop.wasm"))?;
    for f in 0..n.div_ceil(100) {
        let docs: Vec<String> = (f * 100..((f + 1) * 100).min(n))
            .map(|i| {
                format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: o{i}\nspec:\n  value: v\n")
            })
            .collect();
        std::fs::write(res.join(format!("f{f}.yaml")), docs.join("---\n"))?;
    }
    let text = format!(
        "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\napi: {{ listen: 127.0.0.1:0 }}\nqueue: {{ debounce: {debounce}, debounce_max: 1s }}\n"
    );
    let cfg = steward::config::Config::parse(&text, &dir.path().join("steward.yaml"), dir.path())?;
    Ok((dir, cfg))
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

async fn converge(n: usize) -> Result<serde_json::Value> {
    use steward::model::Phase;
    let (dir, cfg) = noop_setup(n, "200ms")?;
    let started = Instant::now();
    let engine = steward::engine::Engine::start(cfg).await?;
    loop {
        let synced = engine.phase_counts("Noop").get(&Phase::Synced).copied().unwrap_or(0);
        if synced >= n {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("only {synced} of {n} objects Synced after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let metrics = engine.render_metrics();
    let call_sum = metric_sum(&metrics, "steward_plugin_call_duration_seconds_sum");
    let call_count = metric_sum(&metrics, "steward_plugin_call_duration_seconds_count").max(1.0);
    let call = call_sum / call_count;
    let wall_per = seconds / n as f64;
    engine.shutdown(Duration::from_secs(10)).await;
    drop(dir);
    Ok(json!({
        "scenario": "converge", "n": n, "seconds": round(seconds),
        "reconciles_per_sec": round(n as f64 / seconds),
        "peak_rss_mib": round(peak_rss_mib()),
        "plugin_call_mean_us": round(call * 1e6),
        "wall_per_reconcile_us": round(wall_per * 1e6),
        "host_overhead_ratio": round((wall_per - call) / call),
    }))
}

async fn latency(n: usize, writes: usize) -> Result<serde_json::Value> {
    use steward::model::{ObjectKey, Phase};
    let debounce = Duration::from_millis(200);
    let (dir, cfg) = noop_setup(n, "200ms")?;
    let engine = steward::engine::Engine::start(cfg).await?;
    while engine.phase_counts("Noop").get(&Phase::Synced).copied().unwrap_or(0) < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let key = ObjectKey::new("Noop", "default", "o0");
    let file = dir.path().join("resources").join("lat.yaml");
    std::fs::remove_file(dir.path().join("resources/f0.yaml"))?;
    let mut samples = Vec::with_capacity(writes);
    let mut expect = 0;
    for i in 0..=writes {
        let body =
            format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: o0\nspec:\n  value: w{i}\n");
        let tmp = dir.path().join("lat.tmp");
        std::fs::write(&tmp, body)?;
        let t = Instant::now();
        std::fs::rename(&tmp, &file)?;
        expect = loop {
            if let Some(v) = engine.view(&key)
                && v.status.as_ref().and_then(|s| s["value"].as_str()) == Some(&format!("w{i}"))
                && v.observed_generation == Some(v.generation)
            {
                break v.generation;
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("write {i} not observed after 30 s");
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        if i > 0 {
            samples.push(t.elapsed().saturating_sub(debounce));
        }
    }
    engine.shutdown(Duration::from_secs(10)).await;
    let (p50, p99) = percentiles(samples);
    Ok(json!({
        "scenario": "latency", "objects": n, "writes": writes, "debounce_ms": 200,
        "last_generation": expect,
        "p50_ms": round(p50 / 1000.0), "p99_ms": round(p99 / 1000.0),
    }))
}
