//! The scenarios of the host's limits, in time: how soon a call stops after its deadline and
//! what its CPU account says (`deadline`, in process), and how soon a well-behaved kind is
//! served beside a kind that times out on every call (`fairness`, a real host). These figures
//! were wall-clock bounds in the integration tests; the tests keep the behaviour.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use steward::plugin::{NoReads, Plugin, PluginError, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use steward_sdk::RawObject;

use crate::child::{HostDir, built_plugins};
use crate::{percentiles, round};

/// A request for an object of the test kind `kind` with `spec`.
fn request(kind: &str, spec: Value) -> ReconcileRequest {
    let resource = RawObject {
        api_version: "test.steward.dev/v1".into(),
        kind: kind.into(),
        name: "bench".into(),
        namespace: "default".into(),
        generation: 1,
        spec: spec.to_string(),
        ..RawObject::default()
    };
    ReconcileRequest { resource, ..Default::default() }
}

/// `deadline [ROUNDS]`: a plugin call in an endless loop, `rounds` times, under a 300 ms
/// deadline: when it stopped (`stopped_median_ms`, `stopped_max_ms`, and past the deadline,
/// `overshoot_median_ms`; the host's backstop would stop it 2 s after the deadline) and the
/// share of it that was CPU (`loop_cpu_share_median`). Then `rounds` × 10 healthy Noop calls:
/// how far their CPU account exceeds their wall time at most (`cpu_over_wall_max_us`, 0 when
/// it never does; the account adds CPU per poll of the call, so it can only exceed wall time
/// by the granularity of the thread CPU clock).
pub async fn deadline(rounds: usize) -> Result<Value> {
    let built = built_plugins()?;
    let runtime = Runtime::new(RuntimeOptions::default())?;
    let timeout = Duration::from_millis(300);
    let load = async |package: &str, timeout: Duration| -> Result<Plugin> {
        let wasm = built.get(package).with_context(|| format!("plugin {package} was not built"))?;
        let settings = move |_: &str| {
            let mut s = PluginSettings::default();
            s.limits.timeout = timeout;
            s
        };
        Ok(Plugin::load(runtime.clone(), wasm, std::fs::read(wasm)?, settings).await?)
    };
    let misbehave = load("misbehave", timeout).await?;
    let looping = request("Misbehave", json!({"behavior": "loop"}));
    let (mut stopped, mut shares) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let out = misbehave.reconcile(&looping, Arc::new(NoReads)).await;
        match out.result {
            Err(PluginError::Timeout { .. }) => {}
            other => bail!("an endless loop ended with {other:?}, not a timeout"),
        }
        stopped.push(out.elapsed);
        shares.push(out.cpu.as_secs_f64() / out.elapsed.as_secs_f64().max(1e-9));
    }
    let noop = load("noop", Duration::from_secs(5)).await?;
    let healthy = request("Noop", json!({"value": "v"}));
    let mut over = Duration::ZERO;
    for _ in 0..rounds * 10 {
        let out = noop.reconcile(&healthy, Arc::new(NoReads)).await;
        out.result.context("a healthy Noop call")?;
        over = over.max(out.cpu.saturating_sub(out.elapsed));
    }
    let (median_us, _) = percentiles(stopped.clone());
    let max_ms = stopped.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3);
    shares.sort_by(f64::total_cmp);
    Ok(json!({
        "scenario": "deadline", "rounds": rounds, "timeout_ms": timeout.as_millis() as u64,
        "stopped_median_ms": round(median_us / 1e3),
        "stopped_max_ms": round(max_ms),
        "overshoot_median_ms": round(median_us / 1e3 - timeout.as_secs_f64() * 1e3),
        "loop_cpu_share_median": round(shares.get(shares.len() / 2).copied().unwrap_or(0.0)),
        "cpu_over_wall_max_us": round(over.as_secs_f64() * 1e6),
    }))
}

/// `fairness [NOOPS]` (50): two workers, forty `Misbehave` objects whose every call loops into
/// its 500 ms deadline, and once they are failing, `noops` Noop objects written. How long the
/// Noop objects take to be Synced (`noops_converged_s`, and in units of the hostile deadline,
/// `noops_converged_in_timeouts`), how many hostile calls timed out meanwhile
/// (`hostile_timeouts_meanwhile`), and what workers taken in FIFO order would make them wait
/// (`fifo_wait_s`: every queued hostile call first).
pub fn fairness(noops: usize) -> Result<Value> {
    const LOOPS: usize = 40;
    const WORKERS: usize = 2;
    let timeout = Duration::from_millis(500);
    let config =
        format!("plugins:\n  misbehave: {{ timeout: {}ms }}\nqueue: {{ workers: {WORKERS} }}\n", timeout.as_millis());
    let dir = HostDir::new(&["noop", "misbehave"], &config)?;
    dir.warm_cache()?;
    let loops: Vec<String> = (0..LOOPS)
        .map(|i| {
            format!("apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: loop-{i}\nspec:\n  behavior: loop\n")
        })
        .collect();
    std::fs::write(dir.resources().join("loops.yaml"), loops.join("---\n"))?;
    let mut host = dir.start()?;
    host.wait_ready(Duration::from_secs(120))?;
    // The hostile kind is under way: its first call ran into its deadline.
    let began = Instant::now();
    while host.get_json("/api/v1/resources/Misbehave/default/loop-0").map_or(true, |v| v["phase"] != "Error") {
        if began.elapsed() > Duration::from_secs(60) {
            bail!("the first Misbehave call did not time out within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let timeouts = |host: &crate::child::Host| -> Result<f64> {
        let text = String::from_utf8_lossy(&host.get("/metrics")?).into_owned();
        Ok(text
            .lines()
            .filter(|l| l.starts_with("steward_plugin_errors_total{") && l.contains("type=\"timeout\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    };
    let before = timeouts(&host)?;
    let docs: Vec<String> = (0..noops)
        .map(|i| format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: n{i}\nspec:\n  value: v\n"))
        .collect();
    let written = Instant::now();
    std::fs::write(dir.resources().join("noops.yaml"), docs.join("---\n"))?;
    let done = host.wait_synced("Noop", noops, Duration::from_secs(120))?;
    let took = (done - written).as_secs_f64();
    let meanwhile = timeouts(&host)? - before;
    host.stop()?;
    Ok(json!({
        "scenario": "fairness", "loops": LOOPS, "noops": noops, "workers": WORKERS,
        "timeout_ms": timeout.as_millis() as u64,
        "noops_converged_s": round(took),
        "noops_converged_in_timeouts": round(took / timeout.as_secs_f64()),
        "hostile_timeouts_meanwhile": meanwhile as u64,
        "fifo_wait_s": round(LOOPS as f64 * timeout.as_secs_f64() / WORKERS as f64),
    }))
}
