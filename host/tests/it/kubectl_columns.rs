//! `kubectl get` against the real kube-apiserver shows what a kind declares: `kubectl get mcpservers` (and its short name `mcps`) prints the host's Ready and Reason and the MCPServer's own columns, and `kubectl get steward` lists the objects of every Steward kind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::api::{DynamicObject, PostParams};
use serde_json::json;

use crate::common;
use crate::common::kube::*;

const T: Duration = Duration::from_secs(90);

/// `kubectl get ARGS -n NS` with a discovery cache of its own (a shared cache may predate the
/// CRDs' short names and category); its stdout, or its stderr when it failed.
async fn kubectl_get(kubectl: &Path, k: &Kube, cache: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(&k.kubeconfig).arg("--cache-dir").arg(cache).args(["-n", &k.ns, "get"]).args(args);
    tokio::task::spawn_blocking(move || {
        let out = cmd.output().expect("kubectl runs");
        if out.status.success() {
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            format!("kubectl failed: {}", String::from_utf8_lossy(&out.stderr))
        }
    })
    .await
    .unwrap()
}

/// The row of `name` and the header of its table, split on runs of blanks. kubectl prints a
/// table per kind, apart by a blank line, when it lists several.
fn table(out: &str, name: &str) -> Option<(Vec<String>, Vec<String>)> {
    let cells = |l: &str| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect();
    out.split("\n\n").find_map(|block| {
        let mut lines = block.lines();
        let header = cells(lines.next()?);
        let row = lines.find(|l| l.split_whitespace().next().is_some_and(|n| n.ends_with(name)))?;
        Some((header, cells(row)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_the_declared_columns_and_the_steward_category() {
    let Some(k) = Kube::real("kubectl-columns").await else { return };
    let Backend::Real(real) = &k.backend else { unreachable!("Kube::real is the real server") };
    let kubectl: PathBuf = real
        .kubectl()
        .expect("kubectl: install Debian's kubernetes-client (the test harness does so as root), or put one on PATH");
    let cache = tempfile::tempdir().unwrap();
    let (_engine, _dir) = k.host(&["mcpserver"], "").await;
    let broken: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "MCPServer",
        "metadata": {"name": "broken", "namespace": k.ns},
        "spec": {"type": "stdio", "command": "/nonexistent/steward-kubectl-test/prog", "autoStart": true}
    }))
    .unwrap();
    k.api(&mcp_ar()).create(&PostParams::default(), &broken).await.unwrap();

    let shown = common::eventually(
        T,
        "kubectl get mcpservers shows broken as not ready, in state Failed",
        async || table(&kubectl_get(&kubectl, &k, cache.path(), &["mcpservers"]).await, "broken"),
        |t| t.as_ref().is_some_and(|(_, row)| row.iter().any(|c| c == "Failed") && row.iter().any(|c| c == "False")),
    )
    .await;
    let (header, row) = shown.unwrap();
    assert_eq!(header, ["NAME", "PHASE", "READY", "REASON", "STATE", "HEALTH", "TOOLS", "AGE"], "{row:?}");
    assert_eq!(row[2..5], ["False", "Failed", "Failed"], "Ready False, its reason, the server's state: {header:?}");
    assert_eq!(row[6], "0", "no tools: {header:?} {row:?}");

    let short = kubectl_get(&kubectl, &k, cache.path(), &["mcps"]).await;
    assert!(table(&short, "broken").is_some(), "the short name mcps: {short}");
    let wide = kubectl_get(&kubectl, &k, cache.path(), &["mcpservers", "-o", "wide"]).await;
    assert!(table(&wide, "broken").is_some_and(|(h, _)| h.iter().any(|c| c == "RESTARTS")), "wide: {wide}");
    // The category resolves to every Steward kind (other tests' kinds too, cluster-scoped ones
    // listed whatever the namespace, each in a table of its own). Other tests share the API
    // server and add and remove CRDs of the category meanwhile, and kubectl fails when one it
    // discovered is gone by the time it lists it: asked again, it answers.
    // A fresh discovery cache each time, so a CRD gone since is not asked for again.
    common::eventually(
        T,
        "kubectl get steward lists broken with the MCPServer's columns",
        async || kubectl_get(&kubectl, &k, tempfile::tempdir().unwrap().path(), &["steward"]).await,
        |all| table(all, "broken").is_some_and(|(h, _)| h.iter().any(|c| c == "STATE")),
    )
    .await;
}
