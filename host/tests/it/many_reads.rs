//! A plugin that reads more distinct objects than the sandbox records still hears of a change to
//! any of them: its reconcile depends on the whole kind.

use crate::common;

use std::time::Duration;

use common::host::Host;

const T: Duration = Duration::from_secs(60);

/// 1,100 `Noop` documents in one file, `n1050` with `value`.
fn noops(value: &str) -> String {
    (0..1_100)
        .map(|i| {
            let v = if i == 1_050 { value.to_string() } else { format!("v{i}") };
            format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: n{i}\nspec:\n  value: \"{v}\"\n")
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Whether all 1,100 `Noop` objects are Synced and nothing is queued or running.
fn settled(v: &serde_json::Value) -> bool {
    let noops = v["kinds"].as_array().and_then(|k| k.iter().find(|k| k["kind"] == "Noop")).cloned();
    noops.is_some_and(|k| k["phases"]["Synced"] == 1_100) && v["queueLength"] == 0 && v["running"] == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_the_1050th_of_1100_objects_read_reconciles_the_reader_again() {
    let _heavy = common::heavy().await;
    let mut h = Host::new("");
    h.write("noops.yaml", &noops("before"));
    h.start().await;
    // The objects settle first, so that no other change wakes the reader below.
    h.wait_get("/api/v1/overview", T, "1,100 Noop objects Synced", settled).await;
    h.write(
        "m.yaml",
        "apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: m\nspec:\n  behavior: manyReads\n  reads: 1100\n  report: 1050\n",
    );
    h.wait_object("Misbehave/default/m", T, "1,100 objects read, n1050 seen", |v| {
        v.is_some_and(|v| v["status"]["found"] == 1_100 && v["status"]["reported"] == "before")
    })
    .await;
    h.wait_get("/api/v1/overview", T, "nothing queued", settled).await;

    // Only n1050 changes: read past the 1,024 recorded reads, it must still wake the reader.
    h.write("noops.yaml", &noops("after"));
    let v = h
        .wait_object("Misbehave/default/m", T, "the reader reconciled again and seeing the change", |v| {
            v.is_some_and(|v| v["status"]["reported"] == "after")
        })
        .await
        .unwrap();
    assert_eq!(v["history"].as_array().unwrap().last().unwrap()["reason"], "dependencyChanged");
}
