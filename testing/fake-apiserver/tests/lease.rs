//! Two kube-lease-manager LeaseManagers against the fake behave as on a cluster: one leader, and
//! a takeover only after the leader stops renewing and its lease expires.

mod common;

use common::DEADLINE;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::LeaseManagerBuilder;
use std::time::Duration;
use steward_fake_apiserver::FakeApiServer;
use tokio::sync::watch::Receiver;

const LEASE_SECONDS: u64 = 3;

async fn manager(
    server: &FakeApiServer,
    identity: &str,
) -> (Receiver<bool>, tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>) {
    let manager = LeaseManagerBuilder::new(server.client(), "steward-leader")
        .with_namespace("default")
        .with_identity(identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(1)
        .build()
        .await
        .unwrap();
    manager.watch().await
}

/// Waits until one of the two channels says "leader"; returns its index.
async fn first_leader(a: &mut Receiver<bool>, b: &mut Receiver<bool>, within: Duration) -> Option<usize> {
    tokio::time::timeout(within, async {
        loop {
            match (*a.borrow_and_update(), *b.borrow_and_update()) {
                (true, true) => panic!("two leaders at once"),
                (true, false) => return 0,
                (false, true) => return 1,
                (false, false) => {}
            }
            tokio::select! {
                r = a.changed() => r.expect("the first manager's task is alive"),
                r = b.changed() => r.expect("the second manager's task is alive"),
            }
        }
    })
    .await
    .ok()
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref().and_then(|s| s.holder_identity.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_takeover_only_after_expiry() {
    let server = FakeApiServer::start().await;
    let leases: Api<Lease> = Api::default_namespaced(server.client());
    let (mut rx0, task0) = manager(&server, "leader-0").await;
    let (mut rx1, task1) = manager(&server, "leader-1").await;
    let tasks = [task0, task1];
    let identities = ["leader-0", "leader-1"];

    let leader = first_leader(&mut rx0, &mut rx1, DEADLINE).await.expect("a leader is elected");
    let follower = 1 - leader;
    let lease = leases.get("steward-leader").await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some(identities[leader]));

    // While the leader renews, the follower stays a follower well past one lease duration.
    let follower_rx = if follower == 0 { &mut rx0 } else { &mut rx1 };
    let hold = Duration::from_secs(LEASE_SECONDS + 2);
    assert!(
        tokio::time::timeout(hold, follower_rx.wait_for(|l| *l)).await.is_err(),
        "no takeover while the leader renews"
    );
    let renewed = leases.get("steward-leader").await.unwrap();
    assert_eq!(holder(&renewed).as_deref(), Some(identities[leader]));
    assert_ne!(
        renewed.spec.as_ref().unwrap().renew_time,
        lease.spec.as_ref().unwrap().renew_time,
        "the leader renewed"
    );

    // The leader stops renewing (its task is gone, without releasing the lease).
    tasks[leader].abort();
    let last = leases.get("steward-leader").await.unwrap();
    let last_spec = last.spec.clone().unwrap();
    let expiry_ms = last_spec.renew_time.unwrap().0.as_millisecond() + (LEASE_SECONDS as i64) * 1000;

    tokio::time::timeout(Duration::from_secs(LEASE_SECONDS * 4), follower_rx.wait_for(|l| *l))
        .await
        .expect("the follower takes over after expiry")
        .unwrap();
    let taken = leases.get("steward-leader").await.unwrap();
    let spec = taken.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(identities[follower]));
    let acquired_ms = spec.acquire_time.unwrap().0.as_millisecond();
    assert!(acquired_ms >= expiry_ms, "acquired at {acquired_ms}, before the old lease expired at {expiry_ms}");
    assert_eq!(spec.lease_transitions, Some(last_spec.lease_transitions.unwrap_or(0) + 1));
    tasks[follower].abort();
}
