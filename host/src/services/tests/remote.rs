//! Remote services: connected over streamable HTTP or SSE with their headers, and reconnected after an outage.

use super::*;

#[tokio::test]
async fn a_remote_server_is_connected_and_reconnected_after_an_outage() {
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(100));
    let o = owner("remote");
    let (mut server, url) = http_server(example_server(&["--extra-tool", "far"]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    let obs = h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let s = one(&obs);
    assert!(tool_names(s).contains(&"far") && tool_names(s).contains(&"echo"), "{s:#?}");
    assert_eq!((s.healthy, s.pid), (Some(true), None));
    assert!(s.last_connected.is_some());
    assert!(h.mgr.history(&o, "web").iter().any(|s| s.phase == "Connecting"));

    server.kill().await.unwrap();
    let obs = h.wait_for(&o, "Disconnected", phase_is("Disconnected")).await;
    let s = one(&obs);
    assert_eq!(s.healthy, Some(false));
    assert!(s.next_retry_at.is_some() && s.consecutive_failures >= 1, "{s:#?}");
    assert!(s.message.as_deref().unwrap().starts_with(&format!("cannot reach {url}: ")), "{s:#?}");

    let (_server, _) = http_server(example_server(&[]), port_of(&url)).await;
    let obs = h.wait_for(&o, "Connected again", phase_is("Connected")).await;
    let s = one(&obs);
    assert!(s.restarts >= 1 && s.consecutive_failures == 0 && s.next_retry_at.is_none(), "{s:#?}");
    assert!(!tool_names(s).contains(&"far"), "tools come from the last probe");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn sse_services_use_the_streamable_http_client_and_send_their_headers() {
    let mut h = Harness::new();
    let o = owner("sse");
    let (_server, url) = http_server(py_server(&["--require-header", "Authorization=Bearer s3cret"]), 0).await;
    let mut with = remote("with", Transport::Sse, &url);
    with.headers.insert("Authorization".into(), "Bearer s3cret".into());
    let without = remote("without", Transport::StreamableHttp, &url);
    // TLS against a plain-HTTP server: a clear error, not a crash.
    let tls_url = url.replace("http://", "https://");
    let tls = remote("x-tls", Transport::StreamableHttp, &tls_url);
    h.mgr.ensure(&o, vec![with, without, tls]);
    let obs = h
        .wait_for(&o, "one Connected, two Disconnected", |o| {
            o.len() == 3 && o[0].phase == "Connected" && o[1].phase == "Disconnected" && o[2].phase == "Disconnected"
        })
        .await;
    assert!(tool_names(&obs[0]).contains(&"add"));
    assert!(obs[1].message.as_deref().unwrap().contains("401"), "{:#?}", obs[1]);
    assert!(obs[1].auth_required && !obs[0].auth_required && !obs[2].auth_required, "{obs:#?}");
    assert!(obs[2].message.as_deref().unwrap().starts_with(&format!("cannot reach {tls_url}: ")), "{:#?}", obs[2]);
    h.mgr.shutdown().await;
}
