//! A stdio service's life: it starts and lists its tools, is restarted with backoff when it dies, fails, hangs or closes its session, follows spec changes, stops on removal and shutdown, and each owner hears only of its own services.

use super::*;

#[tokio::test]
async fn a_stdio_service_runs_and_lists_its_tools() {
    let mut h = Harness::new();
    let o = owner("a");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&["--extra-tool", "ping_me"]))]);
    let obs = h.wait_for(&o, "Running", phase_is("Running")).await;
    let s = one(&obs);
    let pid = s.pid.expect("a running service has a pid");
    assert!(!is_gone(pid));
    assert_eq!(s.healthy, Some(true));
    assert_eq!((s.restarts, s.consecutive_failures), (0, 0));
    assert!(s.last_connected.is_some() && s.next_retry_at.is_none() && s.message.is_none(), "{s:#?}");
    let names = tool_names(s);
    for t in ["echo", "add", "ping_me"] {
        assert!(names.contains(&t), "{names:?}");
    }
    assert!(h.notified.contains(&o), "the owner was notified");
    assert_eq!(h.mgr.owners(), vec![o.clone()]);
    // The child is recorded with its process group, for a later run to reap.
    let recs = orphans::read_records(h.dir.path()).unwrap();
    assert!(recs.iter().any(|r| r.pid == pid && r.pgid == pid && r.service == "srv"), "{recs:#?}");
    h.mgr.shutdown().await;
    assert!(is_gone(pid));
    assert!(orphans::read_records(h.dir.path()).unwrap().is_empty());
}

#[tokio::test]
async fn a_child_killed_from_outside_is_restarted_with_backoff() {
    let mut h = Harness::new();
    let o = owner("kill");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&[]))]);
    let first = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    sigkill(first);
    let obs = h
        .wait_for(&o, "a restarted process", |o| {
            o.len() == 1 && o[0].phase == "Running" && o[0].restarts >= 1 && o[0].pid != Some(first)
        })
        .await;
    let s = one(&obs);
    assert_eq!(s.last_exit.as_deref(), Some("killed by signal 9 (SIGKILL)"));
    assert_eq!(s.consecutive_failures, 0);
    let failed = h.wait_history(&o, "srv", "the Failed state", |s| s.phase == "Failed").await;
    assert!(failed.next_retry_at.is_some() && failed.pid.is_none(), "{failed:#?}");
    assert_eq!(failed.consecutive_failures, 1);
    let msg = failed.message.unwrap();
    assert!(msg.starts_with("killed by signal 9 (SIGKILL) unexpectedly"), "{msg}");
    wait_gone(first, "the killed child").await;

    // Again: the restart count keeps rising.
    let second = s.pid.unwrap();
    sigkill(second);
    h.wait_for(&o, "a second restart", |o| o.len() == 1 && o[0].phase == "Running" && o[0].restarts >= 2).await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_missing_command_fails_clearly_and_runs_once_it_appears() {
    let mut h = Harness::new();
    let o = owner("missing");
    let bin = h.dir.path().join("late-server");
    h.mgr.ensure(&o, vec![stdio("srv", (bin.display().to_string(), Vec::new()))]);
    let obs = h.wait_for(&o, "two failed attempts", |o| o.len() == 1 && o[0].consecutive_failures >= 2).await;
    let s = one(&obs);
    assert_eq!(s.phase, "Failed");
    // Named as given, path included: which program was asked for is what the operator must see.
    let expected = format!("cannot start `{}`: No such file or directory (os error 2)", bin.display());
    assert_eq!(s.message.as_deref(), Some(expected.as_str()));
    assert!(s.pid.is_none() && s.next_retry_at.is_some(), "{s:#?}");
    assert!(s.restarts >= 1);
    // Between attempts it never left Failed.
    let history = h.mgr.history(&o, "srv");
    assert!(history.iter().skip(1).all(|s| s.phase == "Failed"), "{history:#?}");

    // The program appears: the next attempt runs it.
    let (program, args) = example_server(&[]);
    let script = format!("#!/bin/sh\nexec {program} {}\n", args.join(" "));
    let tmp = h.dir.path().join("late-server.tmp");
    std::fs::write(&tmp, script).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &bin).unwrap();
    let obs = h.wait_for(&o, "Running once the program exists", phase_is("Running")).await;
    assert_eq!(one(&obs).consecutive_failures, 0);
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_changed_spec_restarts_the_service_and_an_equal_one_does_nothing() {
    let mut h = Harness::new();
    let o = owner("change");
    let spec = stdio("srv", example_server(&[]));
    h.mgr.ensure(&o, vec![spec.clone()]);
    let first = one(&h.wait_for(&o, "Running", phase_is("Running")).await).clone();
    let pid = first.pid.unwrap();

    // The same spec again: nothing happens.
    h.mgr.ensure(&o, vec![spec.clone()]);
    assert_eq!(h.mgr.observed(&o), vec![first.clone()]);

    let mut changed = stdio("srv", example_server(&["--extra-tool", "fresh"]));
    changed.env.insert("GREETING".into(), "hello".into());
    h.mgr.ensure(&o, vec![changed]);
    let obs = h
        .wait_for(&o, "the new process", |o| {
            o.len() == 1 && o[0].phase == "Running" && o[0].pid.is_some_and(|p| p != pid)
        })
        .await;
    assert!(tool_names(one(&obs)).contains(&"fresh"));
    assert_eq!(one(&obs).restarts, 0, "a new spec starts a fresh count");
    wait_gone(pid, "the process of the old spec").await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn removing_services_stops_their_processes() {
    let mut h = Harness::new();
    let (a, b) = (owner("rm-a"), owner("rm-b"));
    h.mgr.ensure(&a, vec![stdio("one", example_server(&[])), stdio("two", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("one", example_server(&[]))]);
    let running = |o: &[ServiceStatus]| !o.is_empty() && o.iter().all(|s| s.phase == "Running");
    let obs_a = h.wait_for(&a, "a's services Running", running).await;
    let obs_b = h.wait_for(&b, "b's service Running", running).await;
    assert_eq!(obs_a.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["one", "two"]);

    // Dropping one service from the wanted list stops just that one.
    h.mgr.ensure(&a, vec![stdio("one", example_server(&[]))]);
    wait_gone(obs_a[1].pid.unwrap(), "the unwanted service").await;
    assert_eq!(h.mgr.observed(&a).len(), 1);
    assert!(!is_gone(obs_a[0].pid.unwrap()));

    // An owner that is gone loses all of its services.
    h.mgr.remove_owner(&a);
    wait_gone(obs_a[0].pid.unwrap(), "the removed owner's service").await;
    assert!(h.mgr.observed(&a).is_empty());
    assert_eq!(h.mgr.owners(), vec![b.clone()]);
    assert!(!is_gone(obs_b[0].pid.unwrap()));

    // An empty wanted list is the same as removing the owner.
    h.mgr.ensure(&b, Vec::new());
    wait_gone(obs_b[0].pid.unwrap(), "b's service").await;
    assert!(h.mgr.owners().is_empty());
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_everything_even_a_process_that_ignores_sigterm() {
    let mut h = Harness::with(|o| o.stop_grace = Duration::from_millis(300));
    let (a, b) = (owner("sd-a"), owner("sd-b"));
    h.mgr.ensure(&a, vec![stdio("polite", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("stubborn", py_server(&["--ignore-sigterm"]))]);
    let pa = one(&h.wait_for(&a, "Running", phase_is("Running")).await).pid.unwrap();
    let pb = one(&h.wait_for(&b, "Running", phase_is("Running")).await).pid.unwrap();
    h.mgr.shutdown().await;
    assert!(is_gone(pa), "the polite service is stopped when shutdown returns");
    assert!(is_gone(pb), "the stubborn service is killed when shutdown returns");
    assert!(h.mgr.owners().is_empty());
    assert!(orphans::read_records(h.dir.path()).unwrap().is_empty());
    // Once shut down, nothing starts any more.
    h.mgr.ensure(&a, vec![stdio("polite", example_server(&[]))]);
    assert!(h.mgr.observed(&a).is_empty());
}

#[tokio::test]
async fn a_crashing_process_reports_its_exit_and_stderr_in_a_clean_environment() {
    let mut h = Harness::with(|o| o.initial_backoff = Duration::from_secs(60));
    let o = owner("crash");
    let mut spec = stdio("srv", ("sh".into(), vec!["-c".into(), "env >&2; echo boom >&2; exit 3".into()]));
    spec.env.insert("FOO".into(), "bar".into());
    spec.working_dir = Some(h.dir.path().display().to_string());
    h.mgr.ensure(&o, vec![spec]);
    let obs = h.wait_for(&o, "Failed", phase_is("Failed")).await;
    let s = one(&obs);
    assert_eq!(s.last_exit.as_deref(), Some("exited with code 3"));
    let msg = s.message.as_deref().unwrap();
    assert!(msg.starts_with("exited with code 3 before the MCP handshake completed; stderr (last lines):\n"), "{msg}");
    assert!(msg.ends_with("\nboom"), "{msg}");
    let env: Vec<&str> = msg.lines().skip(1).filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(env.contains(&"FOO") && env.contains(&"PATH"), "{env:?}");
    // The working directory, reported without the host's absolute path (see `Ctx::report`).
    let dir_name = h.dir.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(msg.contains(&format!("PWD={dir_name}\n")), "{msg}");
    assert!(!msg.contains(&h.dir.path().display().to_string()), "{msg}");
    // Nothing else of the host's environment leaks in (sh adds PWD, SHLVL and `_` itself).
    let leaked: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| !["PATH", "HOME", "PWD", "SHLVL", "_", "OLDPWD"].contains(&k.as_str()))
        .filter(|k| env.contains(&k.as_str()))
        .collect();
    assert!(leaked.is_empty(), "host variables leaked into the service: {leaked:?}");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_failed_handshake_stops_the_process_and_retries() {
    let mut h = Harness::with(|o| o.initial_backoff = Duration::from_millis(200));
    let o = owner("noinit");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&["--fail-initialize"]))]);
    let failed = h
        .wait_history(&o, "srv", "a failed handshake", |s| {
            s.phase == "Failed" && s.message.as_deref().is_some_and(|m| m.starts_with("MCP handshake failed"))
        })
        .await;
    assert_eq!(failed.healthy, None);
    let first = h.mgr.history(&o, "srv").iter().find_map(|s| s.pid).unwrap();
    wait_gone(first, "the process whose handshake failed").await;
    h.wait_for(&o, "a retry", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].consecutive_failures >= 2).await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn failing_health_probes_mark_it_unhealthy_then_restart_it() {
    let mut h = Harness::with(|o| {
        o.health_interval = Duration::from_millis(100);
        o.max_failed_probes = 3;
    });
    let o = owner("hang");
    // Answers the handshake, then never again.
    let mut spec = stdio("srv", py_server(&["--hang-after-init"]));
    spec.timeout_ms = 1000;
    h.mgr.ensure(&o, vec![spec]);
    let unhealthy = h
        .wait_history(&o, "srv", "an unhealthy Running service", |s| s.phase == "Running" && s.healthy == Some(false))
        .await;
    let message = unhealthy.message.as_deref().unwrap();
    assert!(message.starts_with("health probe failed (1 of 3 in a row): the server does not answer"), "{unhealthy:#?}");
    let failed = h.wait_history(&o, "srv", "a restart after 3 failed probes", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().starts_with("3 health probes in a row failed"), "{failed:#?}");
    assert_eq!(failed.consecutive_failures, 3, "{failed:#?}");
    h.wait_for(&o, "the restarted process", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].phase == "Running").await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_server_that_closes_its_session_is_restarted() {
    let mut h = Harness::new();
    let o = owner("eof");
    h.mgr.ensure(&o, vec![stdio("srv", py_server(&["--close-stdout-after-init"]))]);
    let failed = h.wait_history(&o, "srv", "a broken session", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().starts_with("the server closed its stdout"), "{failed:#?}");
    assert_eq!(failed.last_exit.as_deref(), Some("killed by signal 15 (SIGTERM)"));
    h.wait_for(&o, "a restart", |o| o.len() == 1 && o[0].restarts >= 1).await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn specs_that_cannot_work_fail_at_once() {
    let mut h = Harness::new();
    let o = owner("bad");
    let mut no_url = remote("a-no-url", Transport::StreamableHttp, "");
    no_url.url = None;
    let mut bad_header = remote("b-bad-header", Transport::Sse, "http://127.0.0.1:9/mcp");
    bad_header.headers.insert("bad header".into(), "x".into());
    let not_http = remote("c-not-http", Transport::StreamableHttp, "ftp://example.invalid/mcp");
    let mut no_command = stdio("d-no-command", (String::new(), Vec::new()));
    no_command.command = None;
    h.mgr.ensure(&o, vec![no_url, bad_header, not_http, no_command]);
    let obs = h.wait_for(&o, "all Failed", |o| o.len() == 4 && o.iter().all(|s| s.phase == "Failed")).await;
    let messages: Vec<&str> = obs.iter().map(|s| s.message.as_deref().unwrap()).collect();
    assert_eq!(
        messages,
        [
            "a remote service needs a `url`",
            "header name `bad header` is not valid",
            "url `ftp://example.invalid/mcp` is not an http:// or https:// URL",
            "a stdio service needs a `command`",
        ]
    );
    assert!(obs.iter().all(|s| s.next_retry_at.is_none()), "a wrong spec is not retried");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn every_owner_is_notified_of_its_own_changes() {
    let mut h = Harness::new();
    let (a, b) = (owner("n-a"), owner("n-b"));
    h.mgr.ensure(&a, vec![stdio("srv", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("srv", example_server(&[]))]);
    let pa = one(&h.wait_for(&a, "a Running", phase_is("Running")).await).pid.unwrap();
    h.wait_for(&b, "b Running", phase_is("Running")).await;
    // Both were notified (at the latest when their pid was set, before they ran).
    while let Ok(key) = h.rx.try_recv() {
        h.notified.push(key);
    }
    assert!(h.notified.contains(&a) && h.notified.contains(&b), "{:?}", h.notified);
    h.notified.clear();

    sigkill(pa);
    h.wait_for(&a, "a restarted", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].phase == "Running").await;
    assert!(h.notified.iter().all(|k| *k == a), "only a changed: {:?}", h.notified);
    // Failed, then Starting, then Running: each a notification of a.
    assert!(h.notified.len() >= 3, "{:?}", h.notified);
    h.mgr.shutdown().await;
}

/// A command that cannot start is named whole, as given, with its secrets redacted.
#[tokio::test]
async fn a_command_that_cannot_start_is_shown_as_given_without_its_secrets() {
    let mut h = Harness::new();
    let o = owner("missing-args");
    let spec = stdio(
        "srv",
        ("/opt/nowhere/bin/mcp-prog".to_string(), vec!["--port".into(), "9".into(), "--token=s3cr3t-value".into()]),
    );
    h.mgr.ensure(&o, vec![spec]);
    let obs = h.wait_for(&o, "Failed", |o| o.len() == 1 && o[0].phase == "Failed").await;
    let message = one(&obs).message.clone().unwrap();
    assert!(message.starts_with("cannot start `/opt/nowhere/bin/mcp-prog --port 9 --token="), "{message}");
    assert!(!message.contains("s3cr3t-value"), "{message}");
    assert!(message.ends_with("No such file or directory (os error 2)"), "{message}");
    h.mgr.shutdown().await;
}
