//! A world plugin whose round traps, loops, eats memory or fails: each fails the round whole,
//! shows on the host's `WorldRounds` condition, on every object of the world's kinds and in the
//! metrics, while the rest of the host keeps reconciling; the repair clears every surface.

use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::{Host, noop, synced};

const T: Duration = Duration::from_secs(60);

fn misworld(name: &str, behavior: &str) -> String {
    format!(
        "apiVersion: test.steward.dev/v1\nkind: MisWorld\nmetadata:\n  name: {name}\nspec:\n  behavior: {behavior}\n"
    )
}

/// The host condition `WorldRounds` of the misworld world.
async fn world_condition(h: &Host) -> Option<Value> {
    let v = h.api().get("/api/v1/overview").await.ok()?;
    v["conditions"].as_array()?.iter().find(|c| c["type"] == "WorldRounds" && c["subject"] == "misworld").cloned()
}

/// Waits until `WorldRounds` has `status` and its message contains `needle`.
async fn wait_world(h: &Host, status: &str, needle: &str) -> Value {
    let holds = |c: &Option<Value>| {
        c.as_ref().is_some_and(|c| c["status"] == status && c["message"].as_str().is_some_and(|m| m.contains(needle)))
    };
    let what = format!("WorldRounds {status} with {needle:?}");
    common::eventually(T, what, async || world_condition(h).await, holds).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_that_traps_loops_or_eats_memory_fails_whole_and_clears_once_repaired() {
    let mut h = Host::new(
        "  misworld: { timeout: 2s, memory: 16MiB }\nqueue: { initial_backoff: 100ms, max_backoff: 500ms, debounce: 50ms }\n",
    );
    common::install(&common::wasm("misworld"), &h.dir.path().join("plugins/misworld.wasm"));
    h.write("a.yaml", &misworld("a", "ok"));
    h.write("b.yaml", &misworld("b", "ok"));
    h.start().await;
    for o in ["MisWorld/default/a", "MisWorld/default/b"] {
        let v = h.wait_object(o, T, "Synced by a round", synced).await.unwrap();
        assert_eq!(v["status"]["objects"], 2, "{v:#}");
    }
    wait_world(&h, "True", "answered for 2").await;

    for (behavior, needle) in [
        ("trap", "crashed"),
        ("loop", "deadline of 2s"),
        ("alloc", "memory cap of 16.0 MiB"),
        ("retry", "the round asked to fail"),
    ] {
        h.write("b.yaml", &misworld("b", behavior));
        let cond = wait_world(&h, "False", needle).await;
        assert_eq!(cond["reason"], "RoundFailed", "{behavior}: {cond:#}");
        // Every object of the world says why, the one that did nothing wrong too: the round is one.
        for o in ["MisWorld/default/a", "MisWorld/default/b"] {
            h.wait_object(o, T, &format!("the {behavior} error"), |v| {
                v.is_some_and(|v| v["phase"] != "Synced" && v["lastError"].as_str().is_some_and(|e| e.contains(needle)))
            })
            .await;
        }
        // The rest of the host goes on.
        h.write(&format!("noop-{behavior}.yaml"), &noop(&format!("n-{behavior}"), behavior));
        h.wait_object(&format!("Noop/default/n-{behavior}"), T, "Synced", synced).await;
        assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200, "a failing world does not make the host unready");
    }
    assert!(h.metric("steward_world_rounds_total", &["plugin=\"misworld\"", "result=\"error\""]).await >= 4.0);

    // The repair: the next round answers, and every surface clears by itself.
    h.write("b.yaml", &misworld("b", "ok"));
    wait_world(&h, "True", "answered for 2").await;
    for o in ["MisWorld/default/a", "MisWorld/default/b"] {
        h.wait_object(o, T, "Synced again", synced).await;
    }
}
