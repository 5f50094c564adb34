//! Careless children: one that floods its stderr keeps running and its status counts the lines dropped; one whose tool list is over the transport's message limit fails with that cause.

use super::*;
use crate::services::framing::MAX_MESSAGE;

/// The count of a `stderr: N lines dropped (over R lines/s)` notice in the message.
fn dropped(s: &ServiceStatus) -> Option<u64> {
    let m = s.message.as_deref()?;
    let n = m.lines().find_map(|l| l.strip_prefix("stderr: "))?.split(' ').next()?;
    n.parse().ok()
}

#[tokio::test]
async fn a_child_flooding_its_stderr_keeps_running_and_its_status_counts_the_dropped_lines() {
    let mut h = Harness::new();
    let o = owner("flood");
    let (py, args) = py_server(&[]);
    let mut spec =
        stdio("srv", ("/bin/sh".into(), vec!["-c".into(), r#"yes flood >&2 & exec "$PY" "$SCRIPT""#.into()]));
    spec.env.insert("PY".into(), py);
    spec.env.insert("SCRIPT".into(), args[0].clone());
    h.mgr.ensure(&o, vec![spec]);

    let obs = h
        .wait_for(&o, "Running, with lines dropped", |o| {
            o.len() == 1 && o[0].phase == "Running" && dropped(&o[0]).is_some()
        })
        .await;
    let s = one(&obs);
    let message = s.message.clone().unwrap_or_default();
    assert!(message.ends_with("lines dropped (over 100 lines/s)"), "{message}");
    assert_eq!(s.healthy, Some(true), "{s:#?}");
    assert_eq!(tool_names(s), ["echo", "add"]);
    let (pid, first) = (s.pid, dropped(s).unwrap());

    // The count goes on rising while the child floods, and the server is still reported well.
    let obs = h.wait_for(&o, "more lines dropped", |o| o.len() == 1 && dropped(&o[0]).is_some_and(|n| n > first)).await;
    let s = one(&obs);
    assert_eq!((s.phase.to_string().as_str(), s.healthy, s.pid, s.restarts), ("Running", Some(true), pid, 0));
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_tool_list_over_the_message_limit_fails_the_handshake_with_its_cause() {
    let mut h = Harness::new();
    let o = owner("huge");
    let size = (MAX_MESSAGE + 1024).to_string();
    let mut spec = stdio("srv", py_server(&["--huge-description", &size]));
    // Far longer than the test waits: the cause is told when the answer is dropped, not at a timeout.
    spec.timeout_ms = 600_000;
    h.mgr.ensure(&o, vec![spec]);
    let failed = h
        .wait_history(&o, "srv", "Failed for the size of the answer", |s| {
            s.phase == "Failed" && s.message.as_deref().is_some_and(|m| m.contains("too large"))
        })
        .await;
    let message = failed.message.unwrap_or_default();
    assert!(message.starts_with("MCP handshake failed: the server's answer to tools/list is too large"), "{message}");
    assert!(message.contains("a message of 16.0 MiB") && message.contains("at most 16 MiB"), "{message}");
    assert!(message.contains("fewer tools"), "{message}");
    h.mgr.shutdown().await;
}
