//! `workflow [N]`: N durable WorkflowRuns of a three-step Workflow through a real `steward run`
//! process and a real stdio MCP server (the example server, tool prefix `ex`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::child::{Host, HostDir};
use crate::round;
use crate::scenarios::metric;

/// The plugins the scenario loads.
const PLUGINS: &[&str] = &["mcpserver", "workflow", "workflowrun"];
/// Tool calls per run: the Workflow's three sequential steps.
const STEPS: usize = 3;
/// The debounce configured; `seconds` includes it once (the runs' files are read after it).
const DEBOUNCE: Duration = Duration::from_millis(200);
const CONFIG: &str = "plugins:\n  mcpserver: { capabilities: [services] }\n  workflowrun: { capabilities: [tools], tools: { allow: [\"x_ex_*\"] } }\nqueue: { debounce: 200ms, debounce_max: 1s }\n";
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Three sequential steps: an echo with a templated argument, an add, and an echo that reads
/// both earlier results; the output reads the last two.
const WORKFLOW: &str = r#"apiVersion: steward.dev/v1alpha1
kind: Workflow
metadata:
  name: bench
spec:
  description: Echo, add, echo again.
  args:
    who: { type: string, required: true }
  steps:
    - id: hello
      tool: x_ex_echo
      args: { message: "hello {{ .input.who }}" }
    - id: sum
      tool: x_ex_add
      args: { a: 1, b: 2 }
    - id: again
      tool: x_ex_echo
      args: { message: "{{ .results.hello }} and {{ .results.sum }}" }
  output:
    greeting: "{{ .results.again }}"
    sum: "{{ .results.sum }}"
"#;

fn server_doc() -> Result<String> {
    let bin = steward_plugin_build::example_mcp_server().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: ex\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  toolPrefix: ex\n  timeout: 10\n",
        bin.display()
    ))
}

fn run_doc(i: usize) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: WorkflowRun\nmetadata:\n  name: r{i}\nspec:\n  workflow: bench\n  args: {{ who: r{i} }}\n"
    )
}

/// `workflow N`: with the server Running and Healthy and the Workflow Ready, N WorkflowRun files
/// are written at once; measured from the first write to the list API showing every run
/// `Succeeded` (each run's output is checked).
///
/// `runs_per_sec` and `tool_calls_per_sec` are N and the tool calls that ended over `seconds`;
/// `reconciles_per_run` is `steward_reconcile_total{kind="WorkflowRun"}` (every result) over N;
/// `cpu_over_wall` is the host process's CPU time over `seconds` (1.0 is one core busy; the
/// MCP server is another process and not counted; the bench's list polls are);
/// `plugin_cpu_share` is the CPU time inside workflowrun calls over that CPU time;
/// `peak_rss_mib` is the host's VmHWM at the end, `rss_before_mib` its VmRSS before the writes.
pub fn workflow(n: usize) -> Result<Value> {
    if n == 0 {
        bail!("workflow needs at least one run");
    }
    let dir = HostDir::new(PLUGINS, CONFIG)?;
    dir.warm_cache()?;
    let res = dir.resources();
    std::fs::write(res.join("server.yaml"), server_doc()?)?;
    std::fs::write(res.join("workflow.yaml"), WORKFLOW)?;
    let mut host = dir.start()?;
    host.wait_ready(READY_TIMEOUT)?;
    wait_for(&mut host, "/api/v1/resources/MCPServer/default/ex", "the MCPServer Running and Healthy", |v| {
        v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy"
    })?;
    wait_for(&mut host, "/api/v1/resources/Workflow/default/bench", "the Workflow Ready", |v| {
        v["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })?;
    eprintln!("  server and Workflow ready after {:.1} s", host.started.elapsed().as_secs_f64());

    let metrics_before = String::from_utf8_lossy(&host.get("/metrics")?).into_owned();
    let before = host.stats()?;
    let runs = res.join("runs");
    std::fs::create_dir_all(&runs)?;
    let t = Instant::now();
    for i in 0..n {
        std::fs::write(runs.join(format!("r{i}.yaml")), run_doc(i))?;
    }
    let writing = t.elapsed();
    let (done, polls, poll_time, list) = wait_succeeded(&mut host, n, t)?;
    let after = host.stats()?;
    let metrics = String::from_utf8_lossy(&host.get("/metrics")?).into_owned();
    host.stop()?;
    check_outputs(&list, n)?;

    let seconds = (done - t).as_secs_f64();
    let delta = |prefix: &str, filter: &str| -> Result<f64> {
        if !metrics.lines().any(|l| l.starts_with(prefix) && l.contains(filter)) {
            bail!("/metrics has no {prefix}…{filter} sample");
        }
        Ok(metric(&metrics, prefix, filter) - metric(&metrics_before, prefix, filter))
    };
    let kind = "kind=\"WorkflowRun\"";
    let reconciles = delta("steward_reconcile_total{", kind)?;
    let tool_calls = delta("steward_tool_calls_total{", kind)?;
    let succeeded_calls = delta("steward_tool_calls_total{", "result=\"succeeded\"")?;
    let attempts = delta("steward_tool_call_attempts_total{", kind)?;
    let plugin_cpu = delta("steward_plugin_call_cpu_seconds_total{", "plugin=\"workflowrun\"")?;
    if tool_calls as usize != STEPS * n || succeeded_calls as usize != STEPS * n {
        bail!("{tool_calls} tool calls ended ({succeeded_calls} succeeded) for {n} runs of {STEPS} steps");
    }
    for l in metrics.lines().filter(|l| l.starts_with("steward_reconcile_total{") && l.contains(kind)) {
        eprintln!("  {l}");
    }
    let cpu = after.cpu.saturating_sub(before.cpu).as_secs_f64();
    if cpu <= 0.0 {
        bail!("the host's CPU time did not grow over {seconds:.2} s ({:?} to {:?})", before.cpu, after.cpu);
    }
    Ok(json!({
        "scenario": "workflow", "runs": n, "steps_per_run": STEPS, "debounce_ms": DEBOUNCE.as_millis(),
        "seconds": round(seconds),
        "seconds_writing": round(writing.as_secs_f64()),
        "runs_per_sec": round(n as f64 / seconds),
        "tool_calls": tool_calls as u64,
        "tool_call_attempts": attempts as u64,
        "tool_calls_per_sec": round(tool_calls / seconds),
        "reconciles": reconciles as u64,
        "reconciles_per_run": round(reconciles / n as f64),
        "cpu_seconds": round(cpu),
        "cpu_over_wall": round(cpu / seconds),
        "plugin_cpu_share": round(plugin_cpu / cpu),
        "peak_rss_mib": round(after.peak_rss_mib),
        "rss_before_mib": round(before.rss_mib),
        "rss_mib": round(after.rss_mib),
        "polls": polls,
        "poll_seconds": round(poll_time.as_secs_f64()),
    }))
}

/// Polls `path` every 50 ms until `ok` holds for the object (a 404 means not yet).
fn wait_for(host: &mut Host, path: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Result<()> {
    let start = Instant::now();
    loop {
        let v = host.get_json(path).ok();
        if v.as_ref().is_some_and(&ok) {
            return Ok(());
        }
        host.alive()?;
        if start.elapsed() > READY_TIMEOUT {
            bail!("no {what} after {READY_TIMEOUT:?}; last seen: {}", v.unwrap_or(Value::Null));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls the WorkflowRun list until `n` runs are `Succeeded`, waiting five times a poll's own
/// duration between polls (at least 100 ms: the list carries every run's status). Fails on a
/// run that ended otherwise. Returns when the last poll started, the polls, their summed time
/// and the last list.
fn wait_succeeded(host: &mut Host, n: usize, start: Instant) -> Result<(Instant, usize, Duration, Vec<Value>)> {
    let timeout = Duration::from_secs(60 + n as u64 / 10);
    let (mut polls, mut poll_time) = (0, Duration::ZERO);
    loop {
        let t = Instant::now();
        let list = host.get_json("/api/v1/resources?kind=WorkflowRun");
        let took = t.elapsed();
        polls += 1;
        poll_time += took;
        let list = match list {
            Ok(v) => v.as_array().cloned().context("the list API did not answer an array")?,
            Err(e) => {
                host.alive()?;
                return Err(e);
            }
        };
        let phase = |v: &Value| v["status"]["phase"].as_str().unwrap_or("").to_string();
        if let Some(bad) = list.iter().find(|v| matches!(phase(v).as_str(), "Failed" | "Cancelled")) {
            bail!("run {} ended {}: {}", bad["name"], phase(bad), bad["status"]["message"]);
        }
        let succeeded = list.iter().filter(|v| phase(v) == "Succeeded").count();
        if succeeded >= n {
            return Ok((t, polls, poll_time, list));
        }
        host.alive()?;
        if start.elapsed() > timeout {
            bail!("only {succeeded} of {n} runs Succeeded after {timeout:?} ({} listed)", list.len());
        }
        std::thread::sleep((took * 5).max(Duration::from_millis(100)));
    }
}

/// Every run's output is what its three steps make of its argument.
fn check_outputs(list: &[Value], n: usize) -> Result<()> {
    for v in list {
        let name = v["name"].as_str().context("a run without a name")?;
        let out = &v["status"]["output"];
        let sum_ok = out["sum"] == json!(3) || out["sum"] == "3";
        if out["greeting"] != format!("hello {name} and 3") || !sum_ok {
            bail!("run {name}: unexpected output {out}");
        }
    }
    if list.len() != n {
        bail!("{} runs listed, {n} written", list.len());
    }
    Ok(())
}
