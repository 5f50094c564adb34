//! Live sessions: shared while a service runs, with the remote's last probe, through probes around a call, and a stdio server that stops answering is noticed by a call.

use super::*;

#[tokio::test]
async fn a_live_session_is_shared_while_the_service_runs() {
    let mut h = Harness::new();
    let o = owner("live");
    assert!(h.mgr.session(&o, "srv").is_none(), "nothing before the service exists");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&[]))]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    let live = h.mgr.session(&o, "srv").expect("a running service shares its session");
    let echo = live.tool("echo").expect("the full tool list");
    assert!(echo.input_schema["properties"]["message"].is_object(), "with input schemas: {echo:?}");
    assert_eq!(echo_through(&live, "hi").await, "hi");
    assert!(h.mgr.session(&o, "other").is_none());

    // A broken session is withdrawn before the failure is reported, and the restart shares a new one.
    sigkill(pid);
    h.wait_history(&o, "srv", "Failed after the kill", |s| s.phase == "Failed").await;
    let again = h.wait_for(&o, "Running again", |s| s.len() == 1 && s[0].phase == "Running" && s[0].pid != Some(pid));
    again.await;
    let live = h.mgr.session(&o, "srv").expect("the restarted process shares its session");
    assert_eq!(echo_through(&live, "again").await, "again");

    h.mgr.remove_owner(&o);
    assert!(h.mgr.session(&o, "srv").is_none(), "gone as soon as the service is not wanted");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_remote_service_shares_the_session_of_its_last_probe() {
    let mut h = Harness::new();
    let o = owner("live-remote");
    let (_server, url) = http_server(example_server(&[]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let live = h.mgr.session(&o, "web").expect("a connected service shares its session");
    assert_eq!(echo_through(&live, "far").await, "far");
    h.mgr.ensure(&o, Vec::new());
    assert!(h.mgr.session(&o, "web").is_none());
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_call_on_a_remote_session_outlives_the_health_probes_around_it() {
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(100));
    let o = owner("live-remote-long");
    let (_server, url) = http_server(example_server(&[]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let live = h.mgr.session(&o, "web").expect("a connected service shares its session");
    // A call that spans many probes (every 100 ms): the probes must not cut the session it runs on.
    let mut params = rmcp::model::CallToolRequestParams::new("sleep");
    params.arguments = Some(serde_json::json!({"ms": 1500}).as_object().unwrap().clone());
    let answer = live.peer.call_tool(params).await.expect("the call outlives the probes");
    assert_eq!(serde_json::to_value(&answer.content).unwrap()[0]["text"], "slept 1500");
    let again = h.mgr.session(&o, "web").expect("still shared");
    assert_eq!(echo_through(&again, "after").await, "after");
    h.mgr.shutdown().await;
}

/// A stdio server that stops answering without exiting (SIGSTOP): a call that times out has it
/// probed at once, the probe says it does not answer, and it is restarted per its policy.
#[tokio::test]
async fn a_stdio_server_that_stops_answering_is_noticed_by_a_call_and_restarted() {
    let mut h = Harness::with(|o| {
        // No periodic probe in the test's time: the call is what notices it.
        o.health_interval = Duration::from_secs(600);
        o.max_failed_probes = 1;
    });
    let o = owner("sigstop");
    let mut spec = stdio("srv", example_server(&[]));
    spec.timeout_ms = 500;
    h.mgr.ensure(&o, vec![spec]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    let live = h.mgr.session(&o, "srv").expect("shared");
    // SAFETY: kill(2) on a pid this test owns.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    wait_stopped(pid).await;
    let mut params = rmcp::model::CallToolRequestParams::new("echo");
    params.arguments = Some(serde_json::json!({"message": "hello?"}).as_object().unwrap().clone());
    let call = tokio::time::timeout(Duration::from_millis(300), live.peer.call_tool(params)).await;
    assert!(call.is_err(), "a stopped server cannot answer: {call:?}");
    live.call_unanswered();
    let red = h.wait_history(&o, "srv", "unhealthy", |s| s.healthy == Some(false)).await;
    let message = red.message.as_deref().unwrap();
    assert!(message.contains("the server does not answer: tools/list got no answer within 500ms"), "{red:#?}");
    let failed = h.wait_history(&o, "srv", "given up", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().contains("does not answer"), "{failed:#?}");
    wait_gone(pid, "the stopped server").await;
    // Running comes before the first probe of the new process says it is healthy: wait for both.
    let obs = h
        .wait_for(&o, "restarted and healthy", |s| {
            s.len() == 1 && s[0].phase == "Running" && s[0].pid != Some(pid) && s[0].healthy == Some(true)
        })
        .await;
    assert!(one(&obs).restarts >= 1, "{obs:#?}");
    let again = h.mgr.session(&o, "srv").expect("the restarted server shares its session");
    assert_eq!(echo_through(&again, "back").await, "back");
    h.mgr.shutdown().await;
}
