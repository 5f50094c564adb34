//! Crash and restart: `kill -9` of a real host at random points of a convergence of thousands of
//! objects, 24 times in a row, with files created, changed and deleted between the kills.
//!
//! After every kill the store opens cleanly; after the last restart every object reaches the
//! status of its last spec, every deleted object is finalized and forgotten exactly once, and no
//! MCP server process of an earlier run is left.
//!
//! "Exactly once" is counted from what the host records, never from its log: the store (an
//! object is forgotten when its record leaves it) and the host's `steward_finalizations_total`
//! counter (one per object finalized and forgotten). See [`Forgets`] for how the two are summed
//! over runs that each die with `kill -9`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::host::Host;

use crate::common;

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
    crate::common::steward()
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
    Some(common::metric(&metrics(h.port).await?, "steward_reconcile_total", &[]))
}

/// The Noop objects the running host counts as finalized and forgotten (`None` while its API is
/// not up).
async fn finalizations(h: &Host) -> Option<f64> {
    Some(common::metric(&metrics(h.port).await?, "steward_finalizations_total", &["kind=\"Noop\""]))
}

/// The names of the Noop objects the store of a stopped host holds. The store is read from a
/// copy, so that opening it (which repairs a file left by `kill -9`) does not do the next
/// host's work for it; opening fails if the file is not a sound store.
fn stored_noops(state: &Path) -> BTreeSet<String> {
    let copy = tempfile::tempdir().unwrap();
    let file = copy.path().join("state.redb");
    if std::fs::copy(state, &file).is_err() {
        return BTreeSet::new(); // killed before the store was created
    }
    let store = steward::store::Store::<steward::model::StatusRecord>::open(&file)
        .unwrap_or_else(|e| panic!("after kill -9: {e}"));
    let names = store.keys().iter().filter_map(|k| k.strip_prefix("Noop/default/").map(String::from)).collect();
    store.close().unwrap();
    names
}

/// Finalizations summed over runs that each end with `kill -9`.
///
/// Each run's counter lives in its process, so it is read just before the kill; a run may still
/// finalize between that read and the kill (or be killed before its API is up, and never be
/// read). The read is therefore a lower bound of what the run did. The store is the exact,
/// durable account: read after each kill, an object finalized and forgotten by run `k` is one
/// whose record was in the store when run `k` started (after run `k - 1`) and is not after it.
/// Files change only while no host runs, so no run stores a record of an object deleted before it.
///
/// The checks are sound in both directions, a lost read making none of them fail:
/// - what a killed run reports never exceeds the records it removed (a run that finalized an
///   object twice reports more, unless the second time fell after its last read);
/// - only deleted objects leave the store, and an object that left it never comes back (a
///   second finalization needs a second record);
/// - the last run is not killed, so its count is exact: it equals the records it removed.
#[derive(Default)]
struct Forgets {
    /// The Noop records in the store now (between runs).
    stored: BTreeSet<String>,
    /// Objects whose record left the store, and the run that removed it.
    forgotten: BTreeMap<String, usize>,
    /// Finalizations the killed runs reported before their kill.
    reported: f64,
}

impl Forgets {
    /// Run `run` ended: `reported` is what it said last (0 if it was never read), `now` the
    /// store's records after it.
    fn run_ended(&mut self, run: usize, reported: f64, now: BTreeSet<String>, deleted: &BTreeSet<String>) {
        let removed: Vec<String> = self.stored.difference(&now).cloned().collect();
        assert!(
            reported <= removed.len() as f64,
            "run {run} reported {reported} finalizations but removed {} records: an object was finalized twice",
            removed.len()
        );
        let back: Vec<&String> = now.iter().filter(|n| self.forgotten.contains_key(*n)).collect();
        assert!(back.is_empty(), "after run {run}, forgotten objects are stored again: {back:?}");
        for name in removed {
            assert!(deleted.contains(&name), "run {run} forgot {name}, which was never deleted");
            self.forgotten.insert(name, run);
        }
        self.reported += reported;
        self.stored = now;
    }
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
    let _heavy = common::heavy().await;
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

    let state = h.dir.path().join("state/state.redb");
    let mut forgets = Forgets::default();
    for round in 0..KILLS {
        let child = spawn(&h);
        cleanup.host = Some(child.id());
        // Kill points: right after the spawn (start-up, scan), or after a random share of the
        // objects have been reconciled (mid-convergence, mid-write).
        let target = if round % 4 == 0 { 0.0 } else { rng.f64() * total };
        if target > 0.0 {
            let progress = async || {
                let idle =
                    h.api().get("/api/v1/overview").await.is_ok_and(|v| v["ready"] == true && v["queueLength"] == 0);
                (reconciles(&h).await, idle)
            };
            let what = h.waiting_for(format!("round {round}: {target:.0} reconciles, or an idle host"));
            common::eventually(T, what, progress, |(n, idle)| *idle || n.is_some_and(|n| n >= target)).await;
        }
        let reported = if target > 0.0 { finalizations(&h).await.unwrap_or(0.0) } else { 0.0 };
        kill9(child);
        forgets.run_ended(round, reported, stored_noops(&state), &deleted);

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

    // And a file deleted while the last host is down, so that its run, which is not killed,
    // has objects to finalize.
    let file = desired.files.keys().next().cloned().expect("files are left");
    deleted.extend(desired.files.remove(&file).expect("a file of the model").into_keys());
    h.remove(&file);

    // The last start: everything converges to the last spec.
    let child = spawn(&h);
    cleanup.host = Some(child.id());
    let want = desired.names();
    // Name → (value, Synced at its generation), as the API lists the Noop objects.
    let listed = async || {
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
        Converged {
            known: got.len(),
            wrong: wrong.len(),
            lingering: lingering.len(),
            examples: wrong.into_iter().chain(lingering).take(3).cloned().collect(),
        }
    };
    let what =
        h.waiting_for(format!("after {KILLS} kills, every object at its last spec and every deleted one forgotten"));
    let done = common::eventually(T, what, listed, |c| c.wrong == 0 && c.lingering == 0 && c.known == want.len()).await;
    assert_eq!(done.known, want.len());

    // Finalized exactly once: the last run, which is not killed, counts exactly the records it
    // removed (every deleted object still stored when it started); with the runs before it (see
    // `Forgets`), every deleted object that was ever stored left the store once.
    let left: BTreeSet<String> = forgets.stored.iter().filter(|n| deleted.contains(*n)).cloned().collect();
    assert!(!left.is_empty(), "the file deleted last was stored: the last run has objects to finalize");
    let last = common::eventually(
        T,
        h.waiting_for(format!("{} finalizations by the last run", left.len())),
        async || finalizations(&h).await,
        |n| n.is_some_and(|n| n >= left.len() as f64),
    )
    .await;
    assert_eq!(last, Some(left.len() as f64), "the last run finalized {left:?} and counted {last:?}");
    let kept: Vec<&String> =
        forgets.stored.iter().filter(|n| !deleted.contains(*n) && !want.contains_key(*n)).collect();
    assert!(kept.is_empty(), "stored objects that are neither deleted nor wanted: {kept:?}");
    let killed_runs = forgets.reported;
    forgets.run_ended(KILLS, last.unwrap_or(0.0), want.keys().cloned().collect(), &deleted);
    let finalized = forgets.forgotten.len();
    assert!(finalized > 0 && forgets.reported > 0.0, "nothing was finalized: the test tested nothing");
    eprintln!(
        "{finalized} of {} deleted objects were stored and then finalized once; {} finalizations were read \
         from the killed runs and {} from the last one",
        deleted.len(),
        killed_runs,
        left.len()
    );

    // The MCP servers: exactly one live process per server, all of them children of this run.
    let host_pid = child.id();
    common::eventually(
        T,
        format!("one MCP server process per server, each a child of the last host ({host_pid}), and no other"),
        async || servers(&marker),
        |procs| procs.len() == SERVERS && procs.iter().all(|(_, ppid)| *ppid == host_pid),
    )
    .await;
    // A graceful stop takes the servers down with it.
    let _ = Command::new("kill").arg("-TERM").arg(host_pid.to_string()).status();
    let mut child = child;
    child.wait().unwrap();
    cleanup.host = None;
    common::eventually(T, "the servers to stop with the host", async || servers(&marker), Vec::is_empty).await;
}

/// How far the last run is from the files' state.
#[derive(Debug)]
struct Converged {
    /// Noop objects the API lists.
    known: usize,
    /// Objects not Synced at their last spec.
    wrong: usize,
    /// Deleted objects still listed.
    lingering: usize,
    /// A few of those objects (shown when the wait fails).
    #[allow(dead_code)]
    examples: Vec<String>,
}
