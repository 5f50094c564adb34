//! Crash and restart: `kill -9` of a real host at random points of a convergence of thousands of
//! objects, 24 times in a row, with files created, changed and deleted between the kills.
//!
//! After the last restart every object reaches the status of its last spec, every deleted object
//! is finalized and forgotten exactly once, the store opens cleanly, and no MCP server process of
//! an earlier run is left.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::host::Host;
use serde_json::Value;

const FILES: usize = 20;
const PER_FILE: usize = 100;
const KILLS: usize = 24;
const SERVERS: usize = 3;
const T: Duration = Duration::from_secs(120);

/// What the files say now: object name → value, per file.
#[derive(Default)]
struct Desired {
    files: BTreeMap<String, BTreeMap<String, String>>,
}

impl Desired {
    fn write(&self, h: &Host, file: &str) {
        let docs: Vec<String> = self.files[file].iter().map(|(n, v)| common::host::noop(n, v)).collect();
        h.write(file, &docs.join("---\n"));
    }

    fn names(&self) -> BTreeMap<String, String> {
        self.files.values().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone()))).collect()
    }
}

fn spawn(h: &Host) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(h.dir.path().join("steward.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["run", "--config"])
        .arg(h.config_path())
        .env("STEWARD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn kill9(mut c: Child) {
    c.kill().unwrap();
    c.wait().unwrap();
}

/// `GET /metrics`, or `None` while the API is not up.
async fn metrics(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// Total reconciles the running host reports (`None` while its API is not up).
async fn reconciles(h: &Host) -> Option<f64> {
    let text = metrics(h.port).await?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("steward_reconcile_total{"))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum(),
    )
}

/// Pids of the example MCP server processes started for this test (marked through their env).
fn servers(marker: &str) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if !env.split(|b| *b == 0).any(|kv| kv == format!("CRASH_MARKER={marker}").as_bytes()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(") ") else { continue };
        let fields: Vec<&str> = rest.split(' ').collect();
        if fields[0] == "Z" {
            continue;
        }
        out.push((pid, fields[1].parse().unwrap_or(0)));
    }
    out
}

/// On the way out (a failed assertion included), kills whatever this test started: the host
/// and the MCP servers carrying the test's marker.
struct Cleanup {
    marker: String,
    host: Option<u32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let pids = self.host.into_iter().chain(servers(&self.marker).into_iter().map(|(pid, _)| pid));
        for pid in pids {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_nothing_and_leaves_no_process_behind() {
    let h = Host::new("queue: { workers: 4 }\nresync: 1h\n");
    let marker = h.dir.path().file_name().unwrap().to_string_lossy().to_string();
    let mut cleanup = Cleanup { marker: marker.clone(), host: None };
    let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    let servers_yaml: Vec<String> = (0..SERVERS)
        .map(|i| {
            format!(
                "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: srv{i}\nspec:\n  type: stdio\n  command: \"{}\"\n  autoStart: true\n  toolPrefix: s{i}_\n  timeout: 10\n  env: {{ CRASH_MARKER: \"{marker}\" }}\n",
                bin.display()
            )
        })
        .collect();
    h.write("servers.yaml", &servers_yaml.join("---\n"));
    let mut desired = Desired::default();
    for f in 0..FILES {
        let file = format!("f{f:02}.yaml");
        desired
            .files
            .insert(file.clone(), (0..PER_FILE).map(|i| (format!("o{f:02}-{i:03}"), "v0".to_string())).collect());
        desired.write(&h, &file);
    }
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let total = (FILES * PER_FILE) as f64;
    let mut rng = fastrand::Rng::with_seed(0x5eed);

    for round in 0..KILLS {
        let child = spawn(&h);
        cleanup.host = Some(child.id());
        // Kill points: right after the spawn (start-up, scan), or after a random share of the
        // objects have been reconciled (mid-convergence, mid-write).
        let target = if round % 4 == 0 { 0.0 } else { rng.f64() * total };
        let deadline = Instant::now() + T;
        if target > 0.0 {
            loop {
                if reconciles(&h).await.is_some_and(|n| n >= target) {
                    break;
                }
                if h.api().get("/api/v1/overview").await.is_ok_and(|v| v["ready"] == true && v["queueLength"] == 0) {
                    break;
                }
                assert!(Instant::now() < deadline, "round {round}: no progress");
                common::poll_pause(5).await;
            }
        }
        kill9(child);

        // Between kills: changes, deletes (a whole file, or objects out of a file) and new objects.
        let names: Vec<String> = desired.files.keys().cloned().collect();
        for _ in 0..3 {
            let file = &names[rng.usize(..names.len())];
            let Some(objs) = desired.files.get_mut(file) else { continue };
            for v in objs.values_mut().filter(|_| rng.bool()) {
                *v = format!("r{round}");
            }
            desired.write(&h, file);
        }
        match round % 3 {
            0 => {
                let file = names[rng.usize(..names.len())].clone();
                if let Some(objs) = desired.files.remove(&file) {
                    deleted.extend(objs.into_keys());
                    h.remove(&file);
                }
            }
            1 => {
                let file = names[rng.usize(..names.len())].clone();
                if let Some(objs) = desired.files.get_mut(&file) {
                    let gone: Vec<String> = objs.keys().take(10).cloned().collect();
                    for g in gone {
                        objs.remove(&g);
                        deleted.insert(g);
                    }
                    desired.write(&h, &file);
                }
            }
            _ => {
                let file = format!("new{round:02}.yaml");
                desired
                    .files
                    .insert(file.clone(), (0..50).map(|i| (format!("n{round:02}-{i:02}"), "fresh".into())).collect());
                desired.write(&h, &file);
            }
        }
    }

    // The last start: the store opens cleanly, and everything converges to the last spec.
    let child = spawn(&h);
    cleanup.host = Some(child.id());
    let want = desired.names();
    let deadline = Instant::now() + T;
    let mut last = String::new();
    loop {
        let views = h.api().get("/api/v1/resources?kind=Noop").await.unwrap_or(Value::Null);
        let got: BTreeMap<String, (String, bool)> = views
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| {
                        let synced = v["phase"] == "Synced" && v["observedGeneration"] == v["generation"];
                        (
                            v["name"].as_str().unwrap_or("").to_string(),
                            (v["status"]["value"].as_str().unwrap_or("").to_string(), synced),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let wrong: Vec<&String> =
            want.iter().filter(|(n, v)| got.get(*n) != Some(&((*v).clone(), true))).map(|(n, _)| n).collect();
        let lingering: Vec<&String> = deleted.iter().filter(|n| got.contains_key(*n)).collect();
        if wrong.is_empty() && lingering.is_empty() && got.len() == want.len() {
            break;
        }
        last = format!(
            "{} not at their last spec (e.g. {:?}), {} deleted still known (e.g. {:?})",
            wrong.len(),
            wrong.first(),
            lingering.len(),
            lingering.first()
        );
        assert!(
            Instant::now() < deadline,
            "after {KILLS} kills: {last}\n{}",
            h.log().lines().rev().take(30).collect::<Vec<_>>().join("\n")
        );
        common::poll_pause(50).await;
    }
    let _ = last;

    // Finalized exactly once: a deleted object is forgotten once, never twice across all runs.
    let log = h.log();
    let mut finalized: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines().filter(|l| l.contains("finalized and forgotten")) {
        if let Some(name) = line.split("name=").nth(1).and_then(|r| r.split([' ', '}']).next()) {
            *finalized.entry(name.to_string()).or_default() += 1;
        }
    }
    let twice: Vec<_> = finalized.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "finalized more than once: {twice:?}");
    assert!(
        finalized.keys().all(|n| deleted.contains(n) || n.starts_with("srv")),
        "finalized objects that were never deleted"
    );
    assert!(!log.contains("cannot open the state store"), "the store did not open cleanly");

    // The MCP servers: exactly one live process per server, all of them children of this run.
    let host_pid = child.id();
    let deadline = Instant::now() + T;
    loop {
        let procs = servers(&marker);
        if procs.len() == SERVERS && procs.iter().all(|(_, ppid)| *ppid == host_pid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "MCP server processes of earlier runs are left: {procs:?} (host {host_pid})"
        );
        common::poll_pause(50).await;
    }
    // A graceful stop takes the servers down with it.
    let _ = Command::new("kill").arg("-TERM").arg(host_pid.to_string()).status();
    let mut child = child;
    child.wait().unwrap();
    cleanup.host = None;
    let deadline = Instant::now() + T;
    while !servers(&marker).is_empty() {
        assert!(Instant::now() < deadline, "servers outlived a graceful stop: {:?}", servers(&marker));
        common::poll_pause(50).await;
    }
}
