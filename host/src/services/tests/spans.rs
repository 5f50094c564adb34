//! The supervisor's work as spans: starts, restarts and probes, each naming its service and owner.

use super::*;

#[tokio::test]
async fn starts_restarts_and_probes_are_spans_naming_the_service_and_its_owner() {
    let capture = crate::telemetry::capture::Capture::default();
    let _subscriber = capture.set_default();
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(50));
    let o = owner("spans");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&[]))]);
    let first = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    sigkill(first);
    h.wait_for(&o, "a restart", |o| o.len() == 1 && o[0].phase == "Running" && o[0].pid != Some(first)).await;
    let healthy = |c: &crate::telemetry::capture::Capture| {
        c.named("service_probe").iter().any(|p| p.fields.get("healthy").map(String::as_str) == Some("true"))
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !healthy(&capture) {
        assert!(tokio::time::Instant::now() < deadline, "no healthy probe span");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.mgr.shutdown().await;
    let starts = capture.named("service_start");
    let field = |s: &crate::telemetry::capture::Seen, k: &str| s.fields.get(k).cloned().unwrap_or_default();
    assert!(starts.iter().all(|s| field(s, "owner") == o.to_string() && field(s, "service") == "srv"), "{starts:#?}");
    assert!(
        starts.iter().any(|s| field(s, "restart") == "false" && field(s, "pid") == first.to_string()),
        "{starts:#?}"
    );
    assert!(starts.iter().any(|s| field(s, "restart") == "true"), "a restart is a start span too: {starts:#?}");
    assert!(starts.iter().all(|s| s.parent.is_none()), "each is a root: the supervisor outlives any reconcile");
}
