//! Steward's benchmarks.
//!
//! ```text
//! cargo run --release -p steward-bench -- [SCENARIO [N]]... [--quick]
//! ```
//!
//! With no scenario, or `all`, every scenario runs in this order. Each scenario creates what
//! it needs in a temporary directory, runs the real library or a real `steward run` process,
//! cleans up, prints progress to stderr and one JSON object per run as a line of stdout (a
//! failed scenario prints `{"scenario": ..., "error": ...}` and the bench exits 1 at the end).
//! `--quick` uses smaller sizes, for a run of a few minutes on two cores (the real-server runs
//! take most of it); the full sizes follow in brackets, about 15 minutes with realkube.
//!
//! - `plugin-call [CALLS]` (in process; quick 10,000, full 20,000): one typical MCPServer
//!   reconcile natively, through a reused instance and through a fresh instance per call, the
//!   three taking turns in 20 blocks so that the machine's changes of pace weigh on each alike.
//!   `native_median_us`, `reused_median_us`, `reused_p99_us`, `fresh_median_us`,
//!   `fresh_p99_us`, `reused_native_ratio` and `fresh_reused_ratio` (ratios of medians).
//! - `load [ROUNDS]` (in process; 3, 10): each bundled plugin compiled with an empty cache and
//!   loaded from the cache: `{plugin}_bytes`, `{plugin}_cold_ms`, `{plugin}_cached_ms`.
//! - `converge [N]` (quick: 10,000 and 30,000; full: 10,000, 100,000 and 1,000,000; one line
//!   each; a host converges 1,000 objects before `/readyz` answers, too soon to tell apart): N Noop
//!   objects, 100 to a file, and a host started with a warm compile cache
//!   (`startup_excluded: true`). `seconds`: process start to all Synced; `startup_seconds`:
//!   to `/readyz`; `reconcile_seconds`: `/readyz` to all Synced; `reconciles_per_sec`: N over
//!   `reconcile_seconds` (workers start at ready); `wall_per_reconcile_us`: its inverse;
//!   `cpu_per_reconcile_us`: the process's CPU time from `/readyz` to all Synced over the reconciles after it;
//!   `sys_cpu_per_reconcile_us`: the kernel's part of it (system calls, page faults), and
//!   `minor_faults_per_reconcile`: the page faults over the same reconciles;
//!   `plugin_call_mean_us`: the mean reconcile call from the process's `/metrics`;
//!   `plugin_call_cpu_us`: the reconcile call's CPU time (the host's account, instance set-up
//!   and teardown included); `plugin_warnings_cpu_us`: the CPU time per reconcile of the
//!   plugin's warnings of a new spec; `plugin_call_share`: call over CPU per reconcile;
//!   `host_overhead_ratio`: (`cpu_per_reconcile_us` - `plugin_call_cpu_us` -
//!   `plugin_warnings_cpu_us`) / `plugin_call_cpu_us`, the host's own CPU work per reconcile
//!   relative to the call (CPU time, not wall time: workers run in parallel);
//!   `plugin_calls_in_flight`: the calls' summed wall time over
//!   `reconcile_seconds`; `reconciles`: from `/metrics`; `peak_rss_mib`: the process's VmHWM;
//!   `rss_anon_mib`: its RssAnon at the end (the heap and instance memories, without the
//!   executable's own pages); `store_commits` and `store_writes_per_commit`: the state store's
//!   commits after `/readyz` and the writes each grouped (`steward_store_*_total`). Then the host is stopped (SIGTERM) and a second `steward run`
//!   starts on the same store and resources, every object cached and converged:
//!   `restart_to_ready_seconds`, its process start to `/readyz`, and `restart_peak_rss_mib`, its
//!   VmHWM then. `total_seconds`: the whole scenario, writing the files, the compile-cache warm-up
//!   and the restart included. A figure that cannot be computed (most reconciles done before
//!   `/readyz`, no call CPU in `/metrics`) fails the scenario rather than printing null. After
//!   two or more `converge` runs, a `converge-per-object` line: (peak RSS at the largest N −
//!   peak RSS at the next) / (the difference of N), `peak_rss_kib_per_object`, and the same of
//!   RssAnon, `rss_anon_kib_per_object` (the full suite: from 100,000 to 1,000,000 objects).
//! - `latency [WRITES]` (1,000 objects × 50 writes; 10,000 × 200): with the objects Synced,
//!   one object's file is replaced (atomic rename) one write at a time; each is timed from the
//!   rename to the API showing the new value at the new observedGeneration. `p50_ms`,
//!   `p99_ms` and `max_ms`, all minus the configured debounce (`debounce_ms`, 200).
//! - `idle [N]` (10,000 objects, 10 s; 10,000, 30 s): N objects Synced, 2 s to settle, then
//!   nothing changes for the window: `cpu_percent` (of one core), `rss_mib` (VmRSS at the end),
//!   `peak_rss_mib`, `rss_anon_mib` (RssAnon at the end), `exe_resident_mib` (the resident
//!   pages of the executable itself, which `host/text-order.txt` keeps few; when it grows,
//!   `bench/text-order.sh` is due).
//! - `startup [ROUNDS]` (3, 5): process start to `/readyz` with the bundled plugins and no
//!   resources; `cold_ms` with an empty compile cache, `warm_ms` with the same cache again
//!   (medians over `rounds`; every round in `cold_ms_all`, `warm_ms_all`), and `plugins`.
//! - `storm [FILES]` (2,000; 10,000): one Noop object per file, Synced; then every file is
//!   rewritten in place (`std::fs::write`, not atomic) with a new value as fast as possible.
//!   `seconds_writing`; `converged_after_last_write_s`: last write to the list API showing
//!   every object at the new value and observedGeneration == generation (null if it did
//!   not within 60 s); `missed`: objects not at that state by then (must be 0);
//!   `max_generation` and `objects_past_generation_2` (objects that went through an
//!   intermediate state, such as a half-written file).
//! - `deadline [ROUNDS]` (in process; 5, 20): a call in an endless loop under a 300 ms deadline:
//!   `stopped_median_ms`, `stopped_max_ms`, `overshoot_median_ms` (past the deadline; the host's
//!   backstop is 2 s past it), `loop_cpu_share_median` (CPU over wall time of such a call); and
//!   over ten times as many healthy Noop calls, `cpu_over_wall_max_us` (how far a call's CPU
//!   account exceeds its wall time at most).
//! - `fairness [NOOPS]` (50; 50): two workers, 40 objects whose every call times out after
//!   500 ms, then NOOPS Noop objects: `noops_converged_s`, `noops_converged_in_timeouts`,
//!   `hostile_timeouts_meanwhile`, and `fifo_wait_s` (what FIFO workers would make them wait).
//! - `python [CALLS]` (in process; 200, 1,000): `MCPServerGroup` in Python (componentize-py)
//!   beside the same kind in Rust: `{python,rust}_bytes`, `{python,rust}_load_ms` (compiling
//!   included), `{python,rust}_reconcile_median_us` and `_p99_us` (a fresh instance per call),
//!   and `{python,rust}_call_memory_kib` (the smallest memory limit, in 64 KiB pages, under which
//!   a fresh instance still loads and reconciles).
//! - `ts [CALLS]` (in process; 200, 1,000): `MCPServerGroup` in TypeScript (`sdk-ts`,
//!   componentize-js) beside the Python and Rust ones in the same run, with the same figures
//!   (`ts_*`, `python_*`, `rust_*`) and `ts_python_{bytes,load,reconcile,memory}_ratio`.
//! - `world [N]` (in process; quick: 1,000 objects; full: 1,000 and 10,000; one line each):
//!   the bundled `toolpolicy` world over N objects (MCPServers in four namespaces, one
//!   MCPServerGroup per 50 servers, one ToolPolicy per 10 servers at namespace, group and
//!   server level; see `world.rs`): `topology_ms` (the host's topology build), `round_ms_median`
//!   (one `reconcile-world` call, a fresh instance, median of 5) and `plugin_cpu_ms` (its CPU),
//!   `bytes` (the topology's, as its bounds count), `rss_growth_mib` (VmRSS across the rounds),
//!   `nodes`, `edges`, `outcomes`, `children`; beside it the per-object reconciles of the same
//!   objects, N fresh `mcpserver` calls: `per_object_total_ms`, `per_object_median_us`, and
//!   `round_vs_per_object` (the round's median over their total).
//! - `workflow [RUNS]` (200; 1,000): a host with `mcpserver`, `workflow` and `workflowrun`, one
//!   stdio MCPServer running the example MCP server (tools `x_ex_*`, granted to `workflowrun`)
//!   and a Workflow of three sequential steps (`x_ex_echo` with a templated argument, `x_ex_add`,
//!   `x_ex_echo` reading both results) with an output. With the server Healthy and the Workflow
//!   Ready, RUNS WorkflowRun files are written at once; `seconds` runs from the first write to
//!   the list API (polled every 5 poll durations, at least 100 ms) showing every run
//!   `Succeeded`, the configured debounce (`debounce_ms`, 200) included; every run's output is
//!   checked. `runs_per_sec`; `tool_calls_per_sec` (the calls that ended, from `/metrics`, which
//!   must be 3 per run, all succeeded; `tool_call_attempts` counts retries too);
//!   `reconciles_per_run` (`steward_reconcile_total{kind="WorkflowRun"}`, every result, over
//!   RUNS); `cpu_over_wall` (the host's CPU time over `seconds`: 1 is one core busy; the MCP
//!   server is another process, the bench's polls are in it, `polls` and `poll_seconds` say how
//!   many and how long); `plugin_cpu_share` (CPU inside workflowrun calls over that CPU time);
//!   `peak_rss_mib` (VmHWM at the end), `rss_before_mib` and `rss_mib` (VmRSS before the writes
//!   and at the end).
//! - `kube-converge [N]` (quick: 1,000; full: 1,000 and 10,000; one line each): Kubernetes mode
//!   beside a kube-rs peer (see `kube.rs` and `peer.rs`), on the fake API server in a process of
//!   its own. Steward (the Noop plugin, `queue.workers` 4, debounce 1 ms, leader election off)
//!   serves namespace `bench-steward`; the peer, a minimal kube-rs `Controller` doing the same
//!   work natively with 4 concurrent reconciles, serves `bench-peer`. Each first runs over 10
//!   objects of its namespace until they converge (the baseline), then over N (the 10 and
//!   N - 10 new ones, created before it starts). An object is converged when the API server
//!   holds a status whose `observedGeneration` is its generation and whose `value` is its
//!   `spec.value` (the fake checks every 10 ms). Per side (`steward`, `kube_rs`): `seconds`:
//!   process start to all N converged; `reconcile_seconds`: from the first new object seen
//!   converged to the last; `objects_per_sec`: (N - 10) over `reconcile_seconds`; `reconciles`
//!   (Steward's `steward_reconcile_total`, the peer's reconcile calls); `cpu_seconds`: the
//!   process's CPU time at the end, start-up included, and `cpu_per_object_us` that over N;
//!   `rss_mib` (VmRSS at the end), `peak_rss_mib` (VmHWM), `baseline_rss_mib` (VmRSS at the end of
//!   the baseline run); `rss_per_object_kib`: (`rss_mib` - `baseline_rss_mib`) over N - 10, in
//!   KiB; `api_requests`: every request the fake logged during the run (watches and lists
//!   included), `api_requests_per_object` (over N) and `api_requests_per_reconcile` (over
//!   `reconciles`), and `requests_by_verb` (`METHOD resource[/subresource] Verb`: count). Then
//!   `rate_ratio`: Steward's `objects_per_sec` over the peer's (target at least
//!   `rate_ratio_target_min`, 0.8), and `rss_per_object_ratio`: Steward's `rss_per_object_kib`
//!   over the peer's (target at most `rss_per_object_ratio_target_max`, 1.5). That line says
//!   `"server": "fake"`. When realkube is installed (`testing/realkube/install`; its
//!   kube-apiserver 1.20 built in `${STEWARD_REALKUBE_DIR:-~/.cache/steward-realkube}`), a second
//!   line per N follows, `"server": "real"`, with the same figures from the same steps on a real
//!   kube-apiserver with etcd on loopback, started for it with `testing/realkube/start` (the Noop
//!   CRD applied with `steward crds --apply` and waited for until served, both namespaces
//!   created) and stopped after it. There, an object is seen converged by the bench's list of the
//!   namespace, every 10 ms after the previous one ended (a list of N objects takes a while on a
//!   real server: that is the resolution of the times); the request figures are the differences
//!   in the server's own `apiserver_request_total` (its `/metrics`, read as the admin before the
//!   process starts and 0.5 s after it stopped, so that its watches, counted when they end, are
//!   in), less the bench's own lists; `requests_by_verb` is keyed `VERB resource[/subresource]`
//!   (the server's verbs: `LIST`, `WATCH`, `PATCH`, ...), and includes the few requests the
//!   server makes to itself meanwhile. When realkube is not installed, one stderr line says the
//!   real-server run was skipped and how to install it, and only the fake line prints.
//! - `kube-latency [WRITES]` (1,000 objects × 50 writes; 10,000 × 200): each side converged over
//!   the objects of its namespace as in `kube-converge`, then `o0`'s `spec.value` is changed
//!   (merge patch) one write at a time; each is timed from just before the PATCH to the fake
//!   holding the new value at the new generation in `o0`'s status (it re-checks after every
//!   write). Per side `p50_ms`, `p99_ms`, `max_ms`; `p50_ratio` is Steward's over the peer's;
//!   `debounce_ms` is Steward's configured debounce (1). That line says `"server": "fake"`. When
//!   realkube is installed, a second line, `"server": "real"`, has the same figures from the same
//!   steps on a real kube-apiserver started for it (as `kube-converge`'s; each side's converge
//!   seen by the bench's lists of its namespace, once a second: a list of 10,000 objects loads
//!   the server). There, a write is timed from just before the
//!   PATCH to the arrival, on the bench's own watch of the namespace's objects
//!   (`kube::runtime::watcher`, listed and watching before the first write), of the event that
//!   shows `o0`'s status with the new value at its generation: each figure includes the server's
//!   delivery of that event to the bench, for both sides alike. When realkube is not installed,
//!   one stderr line says the real-server run was skipped.
//! - `kube-resync [N]` (1,000; 10,000): a resync of N unchanged objects makes no write. Steward
//!   alone (the `kube-converge` set-up, with `resync` set to 10 s + 3 ms × N in its config) over N
//!   new objects of its namespace until all converge (`converge_seconds`, from the process's
//!   start); then, once Steward has made no write for 500 ms, the bench idles until 2 s before the
//!   first object's resync is due (an interval after it was first seen converged) and marks the
//!   window's start: the fake's request log cleared, Steward's `steward_reconcile_total` and
//!   CPU time read. It then polls `/metrics` once a second (`metrics_polls`) until N more
//!   reconciles are counted and Steward's API (`/api/v1/resources?kind=Noop`) shows every object
//!   with a resync (history reason `resync`, outcome `Synced`) started after the mark
//!   (`resynced_objects`); a resync started before the mark fails the scenario. Each object's
//!   resync is due an interval after its own last success, so the resyncs come at the pace the
//!   converge had. `resync_interval_s`; `seconds`: the mark to all seen resynced;
//!   `resync_seconds`: the first resync's start to the last one's end (from the history);
//!   `reconciles`: the reconciles counted meanwhile; `api_requests` and `requests_by_verb`: every
//!   request the fake logged meanwhile (keyed as in `kube-converge`), of which `status_writes`
//!   (PUT or PATCH of `noops/status`; expected 0), `object_gets` (GETs of one object or its
//!   status; expected 0) and `writes` (every write of the objects or of Events; expected 0);
//!   `host_status_writes` and `status_writes_skipped`: Steward's own `steward_kube_writes_total`
//!   of op `status` and `steward_kube_status_writes_skipped_total` over the window; `cpu_seconds`:
//!   Steward's CPU time over the window (the 2 s before the first resync and the bench's polls
//!   included), `cpu_per_reconcile_us` that over `reconciles`, and `cpu_percent` that over
//!   `resync_seconds` (of one core). The yardstick follows in the same run: the same N Noop
//!   objects in files mode (`resync` 5 s + 0.5 ms × N), converged, then resynced once each,
//!   the host's CPU time from a second before the first resync is due until N more reconciles
//!   are counted: `files_resync_interval_s`, `files_reconciles`, `files_cpu_per_reconcile_us`,
//!   and `cpu_vs_files_ratio` (`cpu_per_reconcile_us` over it). The resyncs come at the
//!   converge's pace, so the window also holds what the idle host spends (its watches, timers,
//!   lease): `idle_cpu_percent` is Steward's CPU over the wait before the mark (`idle_seconds`),
//!   `cpu_per_reconcile_above_idle_us` the window's CPU less that rate times `seconds`, over
//!   `reconciles`, and `above_idle_vs_files_ratio` that over the files figure. When realkube is installed, a second line,
//!   `"server": "real"`, runs the same on a real kube-apiserver with at most 3,000 objects (the
//!   resync interval there is 30 s + 30 ms × N, to outlast a converge of 60 to 150 objects/s:
//!   10,000 objects would take about ten minutes; fewer than a few thousand resyncs cost too few
//!   of the kernel's 10 ms CPU ticks to be told apart); the request figures are the differences in the
//!   server's `apiserver_request_total` over the window (the bench makes no request to it then),
//!   keyed as in `kube-converge`: `requests_by_verb` has the server's requests to itself too
//!   (its GETs of namespaces and services), which the three counts leave out (they count the
//!   `noops` and `events` resources only).
//! - `kube-handover [ROUNDS]` (3; 10): a stopped leader hands over to a ready standby. Per round,
//!   two `steward run` replicas in Kubernetes mode with leader election on (the Lease
//!   `bench-handover` in the namespace of Steward's objects, `leaseDuration` 15 s, the default;
//!   each replica with its own store and compile cache): the first is waited for until its
//!   overview says `leader: true`, the second until `/readyz` is 200 and its overview says
//!   `leader: false` with the first as `leaseHolder`; an object is changed; then the bench sends
//!   SIGTERM to the leader and polls (every 2 ms) the standby's overview, its `/metrics` and the
//!   leader's process. Per figure `p50_ms` and `max_ms` over the rounds, each from just before the
//!   signal: `leads` (the standby's overview says `leader: true`: it acquired the Lease),
//!   `first_reconcile` (its `steward_reconcile_total` is above 0; a standby reconciles nothing)
//!   and `leader_exit` (the stopped process exited, with 0, or the scenario fails). `goal_ms`:
//!   2000, for `first_reconcile`. A takeover at the Lease's expiry instead would show 15 s. That
//!   line says `"server": "fake"`; when realkube is installed a second line, `"server": "real"`,
//!   runs the same on a real kube-apiserver started for it.
//!
//! The process-level scenarios run this binary as the host (`steward-bench __host run
//! --config FILE` is `steward run --config FILE`; `STEWARD_BENCH_WRAP="heaptrack -o FILE"` or
//! `"perf record -e cpu-clock -g -o FILE"` runs it under that profiler, whose process the
//! figures then measure: profile with it, do not measure), with its API on a free loopback port,
//! `STEWARD_LOG=warn` and its stderr in a log file whose tail is printed if the scenario
//! fails. CPU and memory are the child's own, from `/proc/PID/stat` and `/proc/PID/status`.
//! The Kubernetes scenarios also run it as the fake API server (`__fake-apiserver KUBECONFIG`)
//! and as the kube-rs peer (`__peer NAMESPACE WORKERS`). A figure that cannot be computed fails
//! the scenario; none is printed as null.

mod child;
mod inproc;
mod kube;
mod limits;
mod peer;
mod scenarios;
mod workflow;
mod world;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::json;

/// The entry point of a hidden subcommand (`__fake-apiserver`, `__peer`), given its arguments.
type HiddenMain = fn(&[String]) -> anyhow::Result<()>;

/// Every scenario, in the order `all` runs them.
const SCENARIOS: &[&str] = &[
    "plugin-call",
    "load",
    "converge",
    "latency",
    "idle",
    "startup",
    "storm",
    "deadline",
    "fairness",
    "python",
    "ts",
    "world",
    "workflow",
    "kube-converge",
    "kube-latency",
    "kube-resync",
    "kube-handover",
];

/// One run of one scenario with its sizes.
#[derive(Clone, Copy, Debug)]
enum Run {
    PluginCall { calls: usize },
    Load { rounds: usize },
    Converge { n: usize },
    Latency { objects: usize, writes: usize },
    Idle { objects: usize, window: Duration },
    Startup { rounds: usize },
    Storm { files: usize },
    Deadline { rounds: usize },
    Fairness { noops: usize },
    Python { calls: usize },
    Ts { calls: usize },
    World { n: usize },
    Workflow { runs: usize },
    KubeConverge { n: usize },
    KubeLatency { objects: usize, writes: usize },
    KubeResync { n: usize },
    KubeHandover { rounds: usize },
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "__host") {
        let host_args = std::iter::once(OsString::from("steward")).chain(args.into_iter().skip(2));
        return steward::cli::main_from(host_args);
    }
    let hidden: Option<HiddenMain> = match args.get(1).and_then(|a| a.to_str()) {
        Some("__fake-apiserver") => Some(kube::fake_main),
        Some("__peer") => Some(peer::main),
        _ => None,
    };
    if let Some(run) = hidden {
        let rest: Vec<String> = args.iter().skip(2).map(|a| a.to_string_lossy().into_owned()).collect();
        return match run(&rest) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let args: Vec<String> = args.into_iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let runs = match plan(&args) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    let mut converged = Vec::new();
    for run in runs {
        eprintln!("running {run:?}");
        let line = execute(run).unwrap_or_else(|e| {
            eprintln!("error: {}: {e:#}", name(run));
            failed = true;
            json!({ "scenario": name(run), "error": format!("{e:#}") })
        });
        println!("{line}");
        // The same on a real API server, when realkube is installed.
        let real = match run {
            Run::KubeConverge { n } => Some(kube::converge_real(n)),
            Run::KubeLatency { objects, writes } => Some(kube::latency_real(objects, writes)),
            Run::KubeResync { n } => Some(kube::resync_real(n.min(kube::REAL_RESYNC_MAX))),
            Run::KubeHandover { rounds } => Some(kube::handover_real(rounds)),
            _ => None,
        };
        match real {
            Some(Ok(Some(real))) => println!("{real}"),
            Some(Ok(None)) | None => {}
            Some(Err(e)) => {
                eprintln!("error: {} (real API server): {e:#}", name(run));
                failed = true;
                println!("{}", json!({ "scenario": name(run), "server": "real", "error": format!("{e:#}") }));
            }
        }
        if matches!(run, Run::Converge { .. }) && line.get("error").is_none() {
            converged.push(line);
        }
    }
    // The per-object memory, from the two largest converge runs.
    converged.sort_by_key(|l| l["n"].as_u64());
    if let [.., small, large] = converged.as_slice() {
        let line = scenarios::per_object(small, large).unwrap_or_else(|e| {
            failed = true;
            json!({ "scenario": "converge-per-object", "error": format!("{e:#}") })
        });
        println!("{line}");
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// The runs `args` ask for: `[SCENARIO [N]]... [--quick]`.
fn plan(args: &[String]) -> Result<Vec<Run>> {
    let mut quick = false;
    let mut picked: Vec<(&str, Option<usize>)> = Vec::new();
    for a in args {
        match (a.as_str(), a.parse::<usize>(), picked.last_mut()) {
            ("--quick", _, _) => quick = true,
            (flag, _, _) if flag.starts_with('-') => bail!("unknown option {flag}; the only option is --quick"),
            (_, Ok(n), Some(last)) => last.1 = Some(n),
            (_, Ok(n), None) => bail!("{n}: a number follows a scenario, as in `converge 1000`"),
            ("all", _, _) => picked.extend(SCENARIOS.iter().map(|s| (*s, None))),
            (s, _, _) if SCENARIOS.contains(&s) => picked.push((s, None)),
            (other, _, _) => bail!("unknown scenario `{other}`; known: all, {}", SCENARIOS.join(", ")),
        }
    }
    if picked.is_empty() {
        picked.extend(SCENARIOS.iter().map(|s| (*s, None)));
    }
    Ok(picked.into_iter().flat_map(|(s, n)| runs(s, n, quick)).collect())
}

/// The runs of scenario `s`, with `n` if given, else the quick or full sizes.
fn runs(s: &str, n: Option<usize>, quick: bool) -> Vec<Run> {
    let size = |q: usize, full: usize| n.unwrap_or(if quick { q } else { full });
    match s {
        "plugin-call" => vec![Run::PluginCall { calls: size(10_000, 20_000) }],
        "load" => vec![Run::Load { rounds: size(3, 10) }],
        "converge" => match (n, quick) {
            (Some(n), _) => vec![Run::Converge { n }],
            (None, true) => [10_000, 30_000].map(|n| Run::Converge { n }).to_vec(),
            (None, false) => [10_000, 100_000, 1_000_000].map(|n| Run::Converge { n }).to_vec(),
        },
        "latency" => vec![Run::Latency { objects: if quick { 1_000 } else { 10_000 }, writes: size(50, 200) }],
        "idle" => {
            vec![Run::Idle { objects: size(10_000, 10_000), window: Duration::from_secs(if quick { 10 } else { 30 }) }]
        }
        "startup" => vec![Run::Startup { rounds: size(3, 5) }],
        "deadline" => vec![Run::Deadline { rounds: size(5, 20) }],
        "fairness" => vec![Run::Fairness { noops: size(50, 50) }],
        "python" => vec![Run::Python { calls: size(200, 1_000) }],
        "ts" => vec![Run::Ts { calls: size(200, 1_000) }],
        "world" => match (n, quick) {
            (Some(n), _) => vec![Run::World { n }],
            (None, true) => vec![Run::World { n: 1_000 }],
            (None, false) => [1_000, 10_000].map(|n| Run::World { n }).to_vec(),
        },
        "workflow" => vec![Run::Workflow { runs: size(200, 1_000) }],
        "kube-converge" => match (n, quick) {
            (Some(n), _) => vec![Run::KubeConverge { n }],
            (None, true) => vec![Run::KubeConverge { n: 1_000 }],
            (None, false) => [1_000, 10_000].map(|n| Run::KubeConverge { n }).to_vec(),
        },
        "kube-latency" => vec![Run::KubeLatency { objects: if quick { 1_000 } else { 10_000 }, writes: size(50, 200) }],
        "kube-resync" => vec![Run::KubeResync { n: size(1_000, 10_000) }],
        "kube-handover" => vec![Run::KubeHandover { rounds: size(3, 10) }],
        _ => vec![Run::Storm { files: size(2_000, 10_000) }],
    }
}

fn name(run: Run) -> &'static str {
    match run {
        Run::PluginCall { .. } => "plugin-call",
        Run::Load { .. } => "load",
        Run::Converge { .. } => "converge",
        Run::Latency { .. } => "latency",
        Run::Idle { .. } => "idle",
        Run::Startup { .. } => "startup",
        Run::Storm { .. } => "storm",
        Run::Deadline { .. } => "deadline",
        Run::Fairness { .. } => "fairness",
        Run::Python { .. } => "python",
        Run::Ts { .. } => "ts",
        Run::World { .. } => "world",
        Run::Workflow { .. } => "workflow",
        Run::KubeConverge { .. } => "kube-converge",
        Run::KubeLatency { .. } => "kube-latency",
        Run::KubeResync { .. } => "kube-resync",
        Run::KubeHandover { .. } => "kube-handover",
    }
}

fn execute(run: Run) -> Result<serde_json::Value> {
    let in_process = || tokio::runtime::Builder::new_current_thread().enable_all().build();
    match run {
        Run::PluginCall { calls } => in_process()?.block_on(inproc::plugin_call(calls)),
        Run::Load { rounds } => in_process()?.block_on(inproc::load(rounds)),
        Run::Converge { n } => scenarios::converge(n),
        Run::Latency { objects, writes } => scenarios::latency(objects, writes),
        Run::Idle { objects, window } => scenarios::idle(objects, window),
        Run::Startup { rounds } => scenarios::startup(rounds),
        Run::Storm { files } => scenarios::storm(files),
        Run::Deadline { rounds } => in_process()?.block_on(limits::deadline(rounds)),
        Run::Fairness { noops } => limits::fairness(noops),
        Run::Python { calls } => in_process()?.block_on(inproc::python(calls)),
        Run::Ts { calls } => in_process()?.block_on(inproc::typescript(calls)),
        Run::World { n } => in_process()?.block_on(world::world(n)),
        Run::Workflow { runs } => workflow::workflow(runs),
        Run::KubeConverge { n } => kube::converge(n),
        Run::KubeLatency { objects, writes } => kube::latency(objects, writes),
        Run::KubeResync { n } => kube::resync(n),
        Run::KubeHandover { rounds } => kube::handover(rounds),
    }
}

/// The median and the 99th percentile of `v`, in microseconds.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(v[v.len() / 2]), us(v[v.len() * 99 / 100]))
}

/// The median of `v` in milliseconds, rounded.
fn median_ms(v: &[Duration]) -> f64 {
    round(percentiles(v.to_vec()).0 / 1000.0)
}

/// `x` rounded to two decimals.
fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
