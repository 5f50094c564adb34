//! `kube-handover [ROUNDS]`: how long a standby takes to lead and reconcile once the leader is stopped with SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::{Bench, NS_STEWARD, Proc, READY_TIMEOUT, Who, on_real};
use crate::child::http_get;
use crate::round;

/// The Lease's duration in the replicas' config: the default, so that a takeover at its expiry
/// would show as 15 s, not the seconds of a handover.
const LEASE_SECONDS: u64 = 15;

/// How long a round waits for the standby to lead and reconcile, or the leader to exit.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// `kube-handover ROUNDS` on the fake API server.
pub fn handover(rounds: usize) -> Result<Value> {
    handover_on(false, rounds)
}

/// `kube-handover ROUNDS` on a real API server of `testing/realkube`, started for the run and
/// stopped after it; `None` (and a line on stderr saying how to install it) when it is not installed.
pub fn handover_real(rounds: usize) -> Result<Option<Value>> {
    on_real(&format!("kube-handover {rounds}"), || handover_on(true, rounds))
}

/// One round's times, from just before the SIGTERM to the leader.
struct Round {
    /// The standby's overview says it leads.
    lead: Duration,
    /// The standby's `steward_reconcile_total` is above zero.
    reconcile: Duration,
    /// The stopped leader's process exited.
    exit: Duration,
}

fn handover_on(real: bool, rounds: usize) -> Result<Value> {
    if rounds == 0 {
        bail!("kube-handover needs at least one round");
    }
    let mut b = Bench::new(real)?;
    b.create(NS_STEWARD, 0..10)?;
    let mut seen = Vec::new();
    for r in 0..rounds {
        seen.push(one_round(&mut b, r).with_context(|| format!("round {r}"))?);
    }
    let ms = |pick: fn(&Round) -> Duration| {
        let mut v: Vec<Duration> = seen.iter().map(pick).collect();
        v.sort();
        let to_ms = |d: Duration| round(d.as_secs_f64() * 1e3);
        json!({"p50_ms": to_ms(v[v.len() / 2]), "max_ms": to_ms(v[v.len() - 1])})
    };
    Ok(json!({
        "scenario": "kube-handover", "rounds": rounds, "server": b.server.name(), "lease_duration_s": LEASE_SECONDS,
        "leads": ms(|r| r.lead), "first_reconcile": ms(|r| r.reconcile), "leader_exit": ms(|r| r.exit),
        "goal_ms": 2000,
    }))
}

/// Starts replicas `a` and `b`, waits for `a` to lead and `b` to be ready as a standby, touches
/// an object (so the leader has reconciled), then SIGTERMs `a` and times `b` taking over.
fn one_round(b: &mut Bench, r: usize) -> Result<Round> {
    let mut a = spawn_replica(b, &format!("r{r}-a"))?;
    wait_overview(&mut a, "to lead", |o| o["leader"] == true)?;
    let mut s = spawn_replica(b, &format!("r{r}-b"))?;
    s.wait_ready()?;
    let holder = format!("r{r}-a");
    wait_overview(&mut s, "to stand by", |o| o["leader"] == false && o["leaseHolder"] == holder.as_str())?;
    if s.metric("steward_reconcile_total{", "")? > 0.0 {
        bail!("the standby reconciled while another replica led");
    }
    let api = b.noops(NS_STEWARD);
    let patch = Patch::Merge(json!({"spec": {"value": format!("round-{r}")}}));
    b.rt.block_on(api.patch("o0", &PatchParams::default(), &patch))?;

    let pid = a.child.id();
    let t0 = Instant::now();
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).stdin(Stdio::null()).status();
    let (mut lead, mut reconcile, mut exit) = (None, None, None);
    while lead.is_none() || reconcile.is_none() || exit.is_none() {
        if exit.is_none() && a.child.try_wait()?.is_some() {
            exit = Some(t0.elapsed());
        }
        if lead.is_none() && overview(s.api.context("no API")?)?["leader"] == true {
            lead = Some(t0.elapsed());
        }
        if reconcile.is_none() && s.metric("steward_reconcile_total{", "")? > 0.0 {
            reconcile = Some(t0.elapsed());
        }
        s.alive()?;
        if t0.elapsed() > ROUND_TIMEOUT {
            bail!("after {ROUND_TIMEOUT:?}: standby leads {lead:?}, reconciled {reconcile:?}, leader exited {exit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    a.stopped = true;
    if !a.child.try_wait()?.is_some_and(|s| s.success()) {
        a.print_log_tail();
        bail!("the stopped leader did not exit with 0");
    }
    s.stop()?;
    Ok(Round {
        lead: lead.unwrap_or_default(),
        reconcile: reconcile.unwrap_or_default(),
        exit: exit.unwrap_or_default(),
    })
}

/// A `steward run` replica named `id`, with leader election on (Lease `bench-handover` in
/// [`NS_STEWARD`]) and a state store and compile cache of its own.
fn spawn_replica(b: &Bench, id: &str) -> Result<Proc> {
    let dir = b.steward.dir.path();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let config = dir.join(format!("steward-{id}.yaml"));
    let side = if id.ends_with("-a") { "a" } else { "b" };
    std::fs::write(
        &config,
        format!(
            "mode: kubernetes\nplugin_dir: plugins\nstate: state-{id}/state.redb\ncache_dir: cache-{side}\napi: {{ listen: {addr} }}\n\
             kubernetes: {{ namespaces: [{NS_STEWARD}], leaderElection: {{ identity: {id}, leaseName: bench-handover, namespace: {NS_STEWARD}, leaseDuration: {LEASE_SECONDS}s }} }}\n"
        ),
    )?;
    let log: PathBuf = dir.join(format!("steward-{id}.log"));
    let child = Command::new(std::env::current_exe()?)
        .args(["__host", "run", "--config"])
        .arg(&config)
        .env("KUBECONFIG", b.server.kubeconfig())
        .env("STEWARD_LOG", "info")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("cannot start replica {id}"))?;
    Ok(Proc {
        who: Who::Steward,
        child,
        api: Some(addr),
        pipes: None,
        log,
        spawned: std::time::SystemTime::now(),
        stopped: false,
    })
}

/// The overview of the API at `addr` (`null` while it does not answer).
fn overview(addr: SocketAddr) -> Result<Value> {
    match http_get(addr, "/api/v1/overview") {
        Ok((200, body)) => Ok(serde_json::from_slice(&body)?),
        _ => Ok(Value::Null),
    }
}

/// Waits until the replica's overview satisfies `done`.
fn wait_overview(p: &mut Proc, what: &str, done: impl Fn(&Value) -> bool) -> Result<()> {
    let start = Instant::now();
    loop {
        let o = overview(p.api.context("no API")?)?;
        if done(&o) {
            return Ok(());
        }
        p.alive()?;
        if start.elapsed() > READY_TIMEOUT {
            p.print_log_tail();
            bail!("the replica did not come {what} within {READY_TIMEOUT:?}; its overview: {o}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
