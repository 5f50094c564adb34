//! Stopping and handing over: `steward run` processes stopped with SIGTERM exit within the
//! documented bound whatever streams are open, a stopping leader gives its Lease up and a
//! standby takes over at once (long before the Lease could lapse), and a standby is ready.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common;
use crate::common::host::{Host, free_port};
use crate::common::kube::kube_e2e;
use crate::common::kube::*;

/// How long a test waits for a stopped host to exit: the documented bound, plus the time the
/// test takes to see it.
fn exit_limit() -> Duration {
    steward::host::SHUTDOWN_LIMIT + Duration::from_secs(5)
}

/// An open `GET /api/v1/events` stream of the host on `port`, read up to its `hello` event.
fn open_event_stream(port: u16) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "the event stream: {line}");
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the event stream ended before its hello event");
        if line.contains("event: hello") {
            return r;
        }
    }
}

/// Whether the stream `r` ends (the server closed it) before 60 s pass without a byte.
fn stream_ends(mut r: BufReader<TcpStream>) -> bool {
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_does_not_keep_a_stopped_host_alive() {
    let mut host = Host::new("");
    host.write("a.yaml", &common::host::noop("a", "1"));
    host.start().await;
    let stream = open_event_stream(host.port);
    let ends = std::thread::spawn(move || stream_ends(stream));
    let status = host.terminate_within(exit_limit()).await;
    assert!(status.success(), "steward run exited with {status}:\n{}", host.log());
    assert!(ends.join().unwrap(), "the event stream did not end");
}

/// A `steward run` process in Kubernetes mode on `k`'s server, electing with identity `id`.
fn replica(k: &Kube, id: &str, election: &str) -> Host {
    let port = free_port();
    let fields = format!("leaderElection: {{ identity: {id}, leaseName: handover, namespace: {}, {election} }}", k.ns);
    let extra = format!("{}api: {{ listen: 127.0.0.1:{port} }}\n", k.kubernetes_section(&fields));
    let (dir, cfg) = host_dir(&["noop"], &extra);
    Host::with_config(dir, cfg, port)
}

/// The host's `steward_leader` gauge (a metric without labels), or `None` when it has none.
async fn leader_gauge(h: &Host) -> Option<f64> {
    let text = h.wait_get_text("/metrics").await;
    text.lines().find_map(|l| l.strip_prefix("steward_leader ")).and_then(|v| v.trim().parse().ok())
}

kube_e2e! {
    /// The Lease lasts two minutes, longer than any wait below: only a handover through the
    /// released Lease passes, not a takeover at its expiry.
    async fn a_leader_stopped_with_sigterm_hands_over_to_the_ready_standby_at_once(k: Kube) {
        k.install_crds(&["noop"]).await;
        let election = "leaseDuration: 120s, renewGrace: 30s";
        let env: Vec<(String, String)> = vec![("KUBECONFIG".into(), k.kubeconfig.display().to_string())];
        let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let mut a = replica(&k, "replica-a", election);
        a.start_with_env(&env).await;
        a.wait_get("/api/v1/overview", T, "replica-a leads", |o| o["leader"] == true).await;
        let mut b = replica(&k, "replica-b", election);
        b.start_with_env(&env).await;

        // The standby is ready, does not lead, and names the holder.
        let seen = b.wait_get("/api/v1/overview", T, "replica-b sees the holder", |o| o["leaseHolder"] == "replica-a").await;
        assert_eq!((seen["leader"].clone(), seen["identity"].clone()), (json!(false), json!("replica-b")), "{seen}");
        let ready = b.http("GET", "/readyz", &[], b"");
        assert_eq!(ready.status, 200, "a standby's /readyz: {}", ready.body);
        assert_eq!(leader_gauge(&b).await, Some(0.0));
        assert_eq!(leader_gauge(&a).await, Some(1.0));

        let api = k.noops();
        api.create(&PostParams::default(), &k.noop("x", "1")).await.unwrap();
        wait_obj(&api, "x", "Synced by replica-a", |o| status(o)["observedGeneration"] == 1).await;

        // SIGTERM with a client holding the leader's event stream open.
        let stream = open_event_stream(a.port);
        let ends = std::thread::spawn(move || stream_ends(stream));
        let exited = a.terminate_within(exit_limit()).await;
        assert!(exited.success(), "replica-a exited with {exited}:\n{}", a.log());
        assert!(ends.join().unwrap(), "replica-a's event stream did not end");

        // The standby takes over without waiting for the Lease to lapse, and reconciles a change.
        b.wait_get("/api/v1/overview", T, "replica-b leads", |o| o["leader"] == true && o["leaseHolder"] == "replica-b").await;
        assert_eq!(leader_gauge(&b).await, Some(1.0));
        api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "2"}}))).await.unwrap();
        wait_obj(&api, "x", "generation 2 observed by replica-b", |o| status(o)["observedGeneration"] == 2).await;
        let key = format!("Noop/{}/x", k.ns);
        b.wait_object(&key, T, "reconciled by replica-b", |v| {
            v.is_some_and(|v| v["history"].as_array().is_some_and(|h| h.iter().any(|e| e["outcome"] == "Synced")))
        })
        .await;

        // And it too stops within the bound, giving the Lease up.
        let exited = b.terminate_within(exit_limit()).await;
        assert!(exited.success(), "replica-b exited with {exited}:\n{}", b.log());
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(k.client.clone(), &k.ns);
        let lease = leases.get("handover").await.unwrap();
        assert_eq!(lease.spec.and_then(|s| s.holder_identity), None, "the Lease still names a holder");
    }
}

/// Every directory of the repository with a `kustomization.yaml`, but `target/` and `.git/`.
fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            if p.is_dir() && !p.is_symlink() && name != "target" && name != ".git" && name != "node_modules" {
                walk(&p, out);
            } else if name == "kustomization.yaml" || name == "kustomization.yml" || name == "Kustomization" {
                out.push(dir.to_path_buf());
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut out = Vec::new();
    walk(&root, &mut out);
    out.sort();
    out
}

/// `kubectl kustomize DIR`: the YAML it builds, or the test fails with kubectl's message.
fn kustomize(kubectl: &std::path::Path, dir: &std::path::Path) -> String {
    let out = std::process::Command::new(kubectl).arg("kustomize").arg(dir).output().unwrap();
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every kustomization in the repository builds with `kubectl kustomize`, and what it builds is
/// accepted by the real API server (a server-side dry run, after its namespaces are created).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kustomization_builds_and_the_real_api_server_accepts_it() {
    let dirs = kustomizations();
    assert!(dirs.iter().any(|d| d.ends_with("deploy/registry")), "no kustomization found: {dirs:?}");
    let Some(kubectl) = ["/usr/bin/kubectl", "/usr/local/bin/kubectl"].iter().map(PathBuf::from).find(|p| p.is_file())
    else {
        panic!("no kubectl: install it (Debian's kubernetes-client) to build the kustomizations");
    };
    let built: Vec<(PathBuf, String)> = dirs.iter().map(|d| (d.clone(), kustomize(&kubectl, d))).collect();
    for (dir, yaml) in &built {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert!(docs.iter().any(|d| d["kind"] == "Deployment"), "{}: no Deployment in {yaml}", dir.display());
    }
    let Some(k) = Kube::real("kustomizations").await else { return };
    let apply = |args: &[&str], yaml: &str| {
        let mut child = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .args(["apply", "--server-side", "--force-conflicts", "--field-manager", "steward-tests", "-f", "-"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    for (dir, yaml) in &built {
        // Namespaces for real (a dry run of the objects in them needs them), then everything dry.
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
        let namespaces: Vec<String> =
            docs.iter().filter(|d| d["kind"] == "Namespace").map(|d| serde_json::to_string(d).unwrap()).collect();
        for ns in &namespaces {
            let out = apply(&[], ns);
            assert!(out.status.success(), "{}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        }
        let out = apply(&["--dry-run=server"], yaml);
        assert!(
            out.status.success(),
            "kubectl apply --dry-run=server of {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
