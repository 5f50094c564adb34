//! The process-level scenarios: each runs a real `steward run` process (see [`crate::child`])
//! over Noop objects, or the bundled plugins, in a temporary directory.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::child::{Host, HostDir};
use crate::{median_ms, percentiles, round};

/// The debounce the Noop scenarios configure; `latency` subtracts it.
const DEBOUNCE: Duration = Duration::from_millis(200);
const NOOP_QUEUE: &str = "queue: { debounce: 200ms, debounce_max: 1s }\n";
const READY_TIMEOUT: Duration = Duration::from_secs(300);

fn noop_doc(i: usize, value: &str) -> String {
    format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: o{i}\nspec:\n  value: {value}\n")
}

/// Writes objects `o{i}`, `i` in `ids`, `per_file` to a file named after the first (`o{i}.yaml`).
fn write_noop(dir: &Path, ids: Range<usize>, per_file: usize, value: &str) -> Result<()> {
    let ids: Vec<usize> = ids.collect();
    for chunk in ids.chunks(per_file) {
        let docs: Vec<String> = chunk.iter().map(|&i| noop_doc(i, value)).collect();
        std::fs::write(dir.join(format!("o{}.yaml", chunk[0])), docs.join("---\n"))?;
    }
    Ok(())
}

fn sync_timeout(n: usize) -> Duration {
    Duration::from_secs(60 + n as u64 / 200)
}

/// A host directory with the noop plugin, its compile cache filled (by a start on no
/// resources), then `n` Noop objects written `per_file` to a file.
fn noop_dir(n: usize, per_file: usize) -> Result<HostDir> {
    noop_dir_with(n, per_file, "")
}

/// [`noop_dir`] with `extra` added to the host's configuration.
fn noop_dir_with(n: usize, per_file: usize, extra: &str) -> Result<HostDir> {
    let dir = HostDir::new(&["noop"], &format!("{NOOP_QUEUE}{extra}"))?;
    dir.warm_cache()?;
    write_noop(&dir.resources(), 0..n, per_file, "v")?;
    Ok(dir)
}

/// The host's reconciles so far (`steward_reconcile_total`, every kind and result).
fn reconciles(host: &Host<'_>) -> Result<u64> {
    Ok(metric(&String::from_utf8_lossy(&host.get("/metrics")?), "steward_reconcile_total{", "") as u64)
}

/// Polls `/metrics` every 100 ms until the host has counted `want` reconciles, and returns the
/// count; fails if the host exits or `deadline` passes first.
fn wait_reconciles(host: &mut Host<'_>, want: u64, deadline: Instant) -> Result<u64> {
    loop {
        let n = reconciles(host)?;
        if n >= want {
            return Ok(n);
        }
        host.alive()?;
        if Instant::now() > deadline {
            bail!("only {n} of {want} reconciles counted in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the host of `dir` and waits until its `n` Noop objects are Synced.
fn converged(dir: &HostDir, n: usize) -> Result<Host<'_>> {
    let mut host = dir.start()?;
    host.wait_ready(READY_TIMEOUT)?;
    host.wait_synced("Noop", n, sync_timeout(n))?;
    eprintln!("  {n} objects Synced after {:.1} s", host.started.elapsed().as_secs_f64());
    Ok(host)
}

/// Sum of the samples of metric lines starting with `prefix` and containing `filter`.
pub fn metric(text: &str, prefix: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `converge N`: time from process start to N Noop objects Synced, with a warm compile cache.
///
/// `host_overhead_ratio` is `(cpu_per_reconcile_us - plugin_call_cpu_us - plugin_warnings_cpu_us)
/// / plugin_call_cpu_us`: the host's own CPU work per reconcile (what runs outside the plugin)
/// relative to the CPU work of one plugin call. `cpu_per_reconcile_us` is the process's CPU time
/// from `/readyz` to all Synced over N (the scan before ready is reported apart, in
/// `cpu_seconds_to_ready`; the bench's overview polls are included). `plugin_call_cpu_us` is
/// the host's own account of CPU time inside reconcile calls
/// (`steward_plugin_call_cpu_seconds_total{op="reconcile"}`, instance set-up and teardown
/// included) per call; `plugin_warnings_cpu_us` the same for the plugin's warnings of each new
/// spec (`op="warnings"`, asked in the reconcile's instance), per reconcile: the plugin's own
/// work, which the ratio does not count as the host's (before 2026-11-29 it did). A wall-clock version would mean nothing: workers run in parallel, so wall time per
/// reconcile is not the time one reconcile takes, and a call's wall time includes waiting for a
/// core (`plugin_call_mean_us`, wall, and `plugin_calls_in_flight` show that).
pub fn converge(n: usize) -> Result<Value> {
    let begun = Instant::now();
    let dir = noop_dir(n, 100)?;
    let mut host = dir.start()?;
    let to_ready = host.wait_ready(READY_TIMEOUT)?;
    let at_ready = host.stats()?;
    let cpu_to_ready = at_ready.cpu;
    let metrics_at_ready = String::from_utf8_lossy(&host.get("/metrics")?).into_owned();
    let done = host.wait_synced("Noop", n, sync_timeout(n))?;
    let stats = host.stats()?;
    let metrics = String::from_utf8_lossy(&host.get("/metrics")?).into_owned();
    let window = reconcile_window(&host.get("/api/v1/resources?kind=Noop")?)?;
    let seconds = (done - host.started).as_secs_f64();
    host.stop()?;
    // A second start on the same store and resources: every object cached and converged.
    let mut again = dir.start()?;
    let restart_to_ready = again.wait_ready(READY_TIMEOUT)?;
    let restart_peak_rss = again.stats()?.peak_rss_mib;
    again.stop()?;
    let call_sum = metric(&metrics, "steward_plugin_call_duration_seconds_sum", "op=\"reconcile\"");
    let call_count = metric(&metrics, "steward_plugin_call_duration_seconds_count", "op=\"reconcile\"");
    let call_us = call_sum / call_count.max(1.0) * 1e6;
    let call_cpu = metric(&metrics, "steward_plugin_call_cpu_seconds_total", "op=\"reconcile\"");
    let call_cpu_us = call_cpu / call_count.max(1.0) * 1e6;
    let warnings_cpu = metric(&metrics, "steward_plugin_call_cpu_seconds_total", "op=\"warnings\"");
    let warnings_cpu_us = warnings_cpu / call_count.max(1.0) * 1e6;
    // CPU per reconcile counts only what ran after ready (the scan before is reported apart);
    // when most reconciles finished before the bench saw ready, there is nothing to divide.
    let before_ready = metric(&metrics_at_ready, "steward_reconcile_total{", "");
    let after_ready = metric(&metrics, "steward_reconcile_total{", "") - before_ready;
    if after_ready < n as f64 / 2.0 {
        bail!(
            "only {after_ready} of {n} reconciles ran after /readyz answered: the host's CPU per reconcile cannot be \
             told apart from its start; use more objects"
        );
    }
    if call_count < 1.0 || call_cpu <= 0.0 {
        bail!("the host's /metrics has no CPU time of reconcile calls (steward_plugin_call_cpu_seconds_total)");
    }
    let cpu_us = (stats.cpu - cpu_to_ready).as_secs_f64() / after_ready * 1e6;
    let sys_us = (stats.sys.saturating_sub(at_ready.sys)).as_secs_f64() / after_ready * 1e6;
    let faults = stats.minor_faults.saturating_sub(at_ready.minor_faults) as f64 / after_ready;
    let since_ready = |name: &str| metric(&metrics, name, "") - metric(&metrics_at_ready, name, "");
    let commits = since_ready("steward_store_commits_total");
    Ok(json!({
        "scenario": "converge", "n": n, "objects_per_file": 100, "startup_excluded": true,
        "seconds": round(seconds),
        "startup_seconds": round(to_ready.as_secs_f64()),
        "reconcile_seconds": round(window),
        "reconciles_per_sec": round(n as f64 / window),
        "reconciles": metric(&metrics, "steward_reconcile_total{", "") as u64,
        "wall_per_reconcile_us": round(window / n as f64 * 1e6),
        "cpu_seconds": round(stats.cpu.as_secs_f64()),
        "cpu_seconds_to_ready": round(cpu_to_ready.as_secs_f64()),
        "cpu_per_reconcile_us": round(cpu_us),
        "sys_cpu_per_reconcile_us": round(sys_us),
        "minor_faults_per_reconcile": round(faults),
        "plugin_call_mean_us": round(call_us),
        "plugin_call_cpu_us": round(call_cpu_us),
        "plugin_call_share": round(call_cpu_us / cpu_us),
        "plugin_calls_in_flight": round(call_sum / window),
        "plugin_warnings_cpu_us": round(warnings_cpu_us),
        "host_overhead_ratio": round((cpu_us - call_cpu_us - warnings_cpu_us) / call_cpu_us),
        "peak_rss_mib": round(stats.peak_rss_mib),
        "rss_mib": round(stats.rss_mib),
        "rss_anon_mib": round(stats.rss_anon_mib),
        "store_commits": commits as u64,
        "store_writes_per_commit": round(since_ready("steward_store_writes_total") / commits.max(1.0)),
        "restart_to_ready_seconds": round(restart_to_ready.as_secs_f64()),
        "restart_peak_rss_mib": round(restart_peak_rss),
        "total_seconds": round(begun.elapsed().as_secs_f64()),
    }))
}

/// `converge-per-object`: from two `converge` lines of one run, the memory each further
/// object costs: (peak RSS at the larger N − peak RSS at the smaller) / (difference of N), in
/// KiB, and the same for the anonymous RSS at the end.
pub fn per_object(small: &Value, large: &Value) -> Result<Value> {
    let get = |v: &Value, k: &str| v[k].as_f64().with_context(|| format!("a converge line has no `{k}`: {v}"));
    let (n0, n1) = (get(small, "n")?, get(large, "n")?);
    if n1 <= n0 {
        bail!("per-object memory needs two converge runs of different sizes, not {n0} and {n1}");
    }
    let kib = |k: &str| -> Result<f64> { Ok(round((get(large, k)? - get(small, k)?) * 1024.0 / (n1 - n0))) };
    Ok(json!({
        "scenario": "converge-per-object", "from_n": n0, "to_n": n1,
        "peak_rss_kib_per_object": kib("peak_rss_mib")?,
        "rss_anon_kib_per_object": kib("rss_anon_mib")?,
    }))
}

/// Seconds from the first reconcile's start to the last one's end, from the objects' own records
/// (`history[].time` and `durationMs`): the host's clock, not the bench's polling.
///
/// Read into the few fields it needs, not a whole `Value`: a million objects' list is gigabytes
/// as a `Value`.
fn reconcile_window(body: &[u8]) -> Result<f64> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        history: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry {
        time: Option<String>,
        duration_ms: Option<f64>,
    }
    let list: Vec<Object> = serde_json::from_slice(body).context("the resource list is not a JSON list of objects")?;
    let (mut first, mut last) = (f64::MAX, f64::MIN);
    for h in list.iter().flat_map(|o| &o.history) {
        let Some(t) = h.time.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok()) else { continue };
        let t = t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        first = first.min(t);
        last = last.max(t + h.duration_ms.unwrap_or(0.0) / 1000.0);
    }
    if first > last {
        bail!("no reconcile history in the resource list");
    }
    Ok((last - first).max(0.001))
}

/// `latency`: with `objects` converged, rewrites `o0`'s file `writes` times (atomic renames,
/// one at a time) and times each from the rename to the API showing the new value at the
/// new observedGeneration, minus the debounce.
pub fn latency(objects: usize, writes: usize) -> Result<Value> {
    let dir = HostDir::new(&["noop"], NOOP_QUEUE)?;
    dir.warm_cache()?;
    write_noop(&dir.resources(), 0..1, 1, "v")?;
    write_noop(&dir.resources(), 1..objects, 100, "v")?;
    let host = converged(&dir, objects)?;
    let file = dir.resources().join("o0.yaml");
    let tmp = dir.path().join("o0.tmp");
    let mut samples = Vec::with_capacity(writes);
    for i in 0..=writes {
        let value = format!("w{i}");
        std::fs::write(&tmp, noop_doc(0, &value))?;
        let t = Instant::now();
        std::fs::rename(&tmp, &file)?;
        wait_observed(&host, &value, t + Duration::from_secs(30)).with_context(|| format!("write {i}"))?;
        // Write 0 warms up.
        if i > 0 {
            samples.push(t.elapsed().saturating_sub(DEBOUNCE));
        }
    }
    host.stop()?;
    let (p50, p99) = percentiles(samples.clone());
    let max = samples.iter().max().copied().unwrap_or_default();
    Ok(json!({
        "scenario": "latency", "objects": objects, "writes": writes, "debounce_ms": DEBOUNCE.as_millis(),
        "p50_ms": round(p50 / 1000.0), "p99_ms": round(p99 / 1000.0), "max_ms": round(max.as_secs_f64() * 1e3),
    }))
}

/// Polls `o0` every millisecond until its status shows `value` at its current generation.
fn wait_observed(host: &Host, value: &str, deadline: Instant) -> Result<()> {
    loop {
        let v = host.get_json("/api/v1/resources/Noop/default/o0")?;
        if is_final(&v, value) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("`{value}` not observed after 30 s: {v}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn is_final(v: &Value, value: &str) -> bool {
    v["status"]["value"] == value && v["generation"].is_u64() && v["observedGeneration"] == v["generation"]
}

/// How many times each object resyncs in `idle`'s second host: more than the ten entries an
/// object's history keeps, so that what a long-running host holds per object is reached.
const IDLE_RESYNCS: usize = 12;

/// `idle`: `objects` converged, 2 s to settle, then CPU over `window` and RSS at its end. Then
/// the same objects in a host that resyncs every 2 s, once each has resynced [`IDLE_RESYNCS`]
/// times: the memory of a host that has run for a while (a resync appends to each object's
/// history), which the first figure, taken minutes after start, does not show.
pub fn idle(objects: usize, window: Duration) -> Result<Value> {
    let dir = noop_dir(objects, 100)?;
    let host = converged(&dir, objects)?;
    std::thread::sleep(Duration::from_secs(2));
    let before = host.stats()?;
    let t = Instant::now();
    std::thread::sleep(window);
    let after = host.stats()?;
    let elapsed = t.elapsed();
    let exe_mib = crate::child::exe_resident_mib(host.pid())?;
    host.stop()?;
    let cpu = (after.cpu.saturating_sub(before.cpu)).as_secs_f64();
    let resynced = resynced_rss(objects)?;
    Ok(json!({
        "scenario": "idle", "objects": objects, "seconds": round(elapsed.as_secs_f64()),
        "cpu_percent": round(cpu / elapsed.as_secs_f64() * 100.0),
        "rss_mib": round(after.rss_mib), "peak_rss_mib": round(after.peak_rss_mib),
        "rss_anon_mib": round(after.rss_anon_mib), "exe_resident_mib": round(exe_mib),
        "resyncs_per_object": IDLE_RESYNCS,
        "resynced_rss_mib": round(resynced.rss_mib), "resynced_rss_anon_mib": round(resynced.rss_anon_mib),
        "resynced_growth_bytes_per_object": round((resynced.rss_mib - after.rss_mib) * 1024.0 * 1024.0 / objects as f64),
    }))
}

/// The RSS of a host whose `objects` Noop objects have each resynced [`IDLE_RESYNCS`] times
/// (resync every 2 s), 2 s after the last.
fn resynced_rss(objects: usize) -> Result<crate::child::ProcStats> {
    let dir = noop_dir_with(objects, 100, "resync: 2s\n")?;
    let mut host = converged(&dir, objects)?;
    let want = (objects * (IDLE_RESYNCS + 1)) as u64;
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_secs(3 * IDLE_RESYNCS as u64);
    wait_reconciles(&mut host, want, deadline).with_context(|| format!("each object resynced {IDLE_RESYNCS} times"))?;
    std::thread::sleep(Duration::from_secs(2));
    let stats = host.stats()?;
    host.stop()?;
    Ok(stats)
}

/// `startup`: process start to `/readyz` with the bundled plugins and no resources; cold
/// (empty compile cache) then warm (the same cache), `rounds` times each.
pub fn startup(rounds: usize) -> Result<Value> {
    let plugins = steward_plugin_build::BUNDLED;
    let dir = HostDir::new(plugins, "plugins:\n  mcpserver: { capabilities: [services] }\n")?;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        dir.clear_cache()?;
        cold.push(time_to_ready(&dir)?);
        warm.push(time_to_ready(&dir)?);
    }
    let all = |v: &[Duration]| v.iter().map(|d| round(d.as_secs_f64() * 1e3)).collect::<Vec<_>>();
    Ok(json!({
        "scenario": "startup", "rounds": rounds, "plugins": plugins,
        "cold_ms": median_ms(&cold), "warm_ms": median_ms(&warm),
        "cold_ms_all": all(&cold), "warm_ms_all": all(&warm),
    }))
}

fn time_to_ready(dir: &HostDir) -> Result<Duration> {
    let mut host = dir.start()?;
    let t = host.wait_ready(READY_TIMEOUT)?;
    host.stop()?;
    Ok(t)
}

/// `storm`: `files` Noop objects, one per file, converged; then every file rewritten in
/// place (`std::fs::write`: truncate, then write) with a new value as fast as possible.
pub fn storm(files: usize) -> Result<Value> {
    let dir = noop_dir(files, 1)?;
    let host = converged(&dir, files)?;
    let res = dir.resources();
    let t = Instant::now();
    for i in 0..files {
        std::fs::write(res.join(format!("o{i}.yaml")), noop_doc(i, "s1"))?;
    }
    let last_write = Instant::now();
    let (converged_after, views) = wait_all_final(&host, "s1", files, last_write, Duration::from_secs(60))?;
    host.stop()?;
    let missed: Vec<&Value> = views.iter().filter(|v| !is_final(v, "s1")).collect();
    let missed_count = files.saturating_sub(views.len() - missed.len());
    report_missed(&missed, missed_count);
    let generations: Vec<u64> = views.iter().filter_map(|v| v["generation"].as_u64()).collect();
    Ok(json!({
        "scenario": "storm", "files": files, "writes": files,
        "seconds_writing": round((last_write - t).as_secs_f64()),
        "converged_after_last_write_s": converged_after.map(|d| round(d.as_secs_f64())),
        "missed": missed_count,
        "max_generation": generations.iter().max(),
        "objects_past_generation_2": generations.iter().filter(|&&g| g > 2).count(),
    }))
}

/// Polls the list API until `n` Noop objects show `value` at their generation, or `timeout`
/// after `last_write`; returns the time from `last_write` to the poll that saw them all (if
/// one did), and the last list.
fn wait_all_final(
    host: &Host,
    value: &str,
    n: usize,
    last_write: Instant,
    timeout: Duration,
) -> Result<(Option<Duration>, Vec<Value>)> {
    loop {
        let t = Instant::now();
        let list = host.get_json("/api/v1/resources?kind=Noop")?;
        let views = list.as_array().cloned().context("the list API did not answer an array")?;
        if views.iter().filter(|v| is_final(v, value)).count() >= n {
            return Ok((Some(t - last_write), views));
        }
        if last_write.elapsed() > timeout {
            return Ok((None, views));
        }
        std::thread::sleep(t.elapsed().max(Duration::from_millis(20)));
    }
}

fn report_missed(missed: &[&Value], count: usize) {
    if count == 0 {
        return;
    }
    eprintln!("  MISSED: {count} objects not at their final state; examples:");
    for v in missed.iter().take(5) {
        eprintln!(
            "    {}: generation {} observed {} phase {} value {} sourceProblem {} lastError {}",
            v["name"],
            v["generation"],
            v["observedGeneration"],
            v["phase"],
            v["status"]["value"],
            v["sourceProblem"],
            v["lastError"]
        );
    }
}

/// What a resync of unchanged objects costs in files mode, the yardstick of `kube-resync`.
pub struct FilesResync {
    /// The resync interval configured.
    pub interval: Duration,
    /// Reconciles counted over the window.
    pub reconciles: u64,
    /// The host's CPU time over the window.
    pub cpu_seconds: f64,
}

impl FilesResync {
    /// CPU time per reconcile, in microseconds.
    pub fn cpu_per_reconcile_us(&self) -> f64 {
        self.cpu_seconds / self.reconciles.max(1) as f64 * 1e6
    }
}

/// `n` unchanged Noop objects in files mode, Synced, then resynced once each: the host's CPU
/// time from a mark taken a second before the first resync is due until `n` more reconciles are
/// counted (`/metrics` polled every 100 ms). The resync interval (5 s + 0.5 ms × `n`) outlasts the
/// converge; a resync that starts before the mark fails the run.
pub fn files_resync(n: usize) -> Result<FilesResync> {
    let interval = Duration::from_secs(5) + Duration::from_micros(500 * n as u64);
    let dir = noop_dir_with(n, 100, &format!("resync: {}ms\n", interval.as_millis()))?;
    let mut host = dir.start()?;
    host.wait_ready(READY_TIMEOUT)?;
    // No object succeeded before ready, so none is due before an interval after it.
    let ready = Instant::now();
    host.wait_synced("Noop", n, sync_timeout(n))?;
    if let Some(wait) = (ready + interval).checked_duration_since(Instant::now() + Duration::from_secs(1)) {
        std::thread::sleep(wait);
    }
    let rec0 = reconciles(&host)?;
    if rec0 > n as u64 {
        bail!(
            "{} resyncs ran before the mark: the converge outlasted the resync interval {interval:?}",
            rec0 - n as u64
        );
    }
    let cpu0 = host.stats()?.cpu;
    let deadline = Instant::now() + interval + sync_timeout(n);
    let rec1 =
        wait_reconciles(&mut host, rec0 + n as u64, deadline).with_context(|| format!("{n} objects resynced once"))?;
    let cpu1 = host.stats()?.cpu;
    host.stop()?;
    Ok(FilesResync { interval, reconciles: rec1 - rec0, cpu_seconds: cpu1.saturating_sub(cpu0).as_secs_f64() })
}
