//! Fault injection as kube sees it: unreachable server, 429 with Retry-After, 403 on status writes,
//! 409 storms, 500 and 503.

mod common;

use common::*;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchParams};
use serde_json::json;
use steward_fake_apiserver::{FakeApiServer, Fault, Verb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn unreachable_gives_connection_errors_cuts_watches_and_recovers() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    let stream = api.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap();
    let mut stream = std::pin::pin!(stream);
    assert!(tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().unwrap().is_ok());

    server.set_unreachable(true);
    // The open watch is cut: it ends or errors, it does not hang.
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.next().await {
                None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    });
    ended.await.expect("the watch stream was cut");
    match api.get("a").await {
        Err(kube::Error::Api(status)) => panic!("expected a connection error, got an API answer: {status:?}"),
        Err(_) => {}
        Ok(_) => panic!("expected a connection error, got an answer"),
    }
    assert!(server.refused_connections() >= 1);

    server.set_unreachable(false);
    assert_eq!(api.get("a").await.unwrap().metadata.name.as_deref(), Some("a"));
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_and_kube_retries_it() {
    let server = FakeApiServer::start().await;
    // The raw answer: 429 with a Retry-After header and retryAfterSeconds in the Status.
    server.inject(Fault::too_many_requests(1).verb(Verb::Get).resource("namespaces"));
    let mut tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(b"GET /api/v1/namespaces/default HTTP/1.1\r\nhost: fake\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    let lower = answer.to_ascii_lowercase();
    assert!(lower.starts_with("http/1.1 429"), "{answer}");
    assert!(lower.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("\"retryAfterSeconds\":1"), "{answer}");

    // kube's default client retries 429 after Retry-After and succeeds.
    let handle = server.inject(Fault::too_many_requests(1).verb(Verb::Get).resource("namespaces"));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(server.client());
    namespaces.get("default").await.unwrap();
    assert_eq!(handle.used(), 1);
    let statuses: Vec<u16> =
        server.requests().iter().filter(|r| r.path == "/api/v1/namespaces/default").map(|r| r.status).collect();
    assert_eq!(statuses, [429, 429, 200]);

    // Without retries the caller sees the 429 itself.
    server.inject(Fault::too_many_requests(2).verb(Verb::Get));
    let mut config = server.config();
    config.default_retry = false;
    let plain: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube::Client::try_from(config).unwrap());
    let err = api_error(plain.get("default").await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(err.details.unwrap().retry_after_seconds, 2);
}

#[tokio::test]
async fn forbidden_status_writes_and_conflict_storms() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    api.create(&PostParams::default(), &widget("a", json!({"v": 0}))).await.unwrap();

    let forbidden =
        server.inject(Fault::forbidden().resource("widgets").subresource("status").verb(Verb::Patch).times(usize::MAX));
    let err =
        api_error(api.patch_status("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"ok": true}}))).await);
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"v": 1}}))).await.unwrap();
    assert_eq!(forbidden.used(), 1, "only status patches are refused");
    forbidden.cancel();
    api.patch_status("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"ok": true}}))).await.unwrap();

    // A storm of 3 conflicts, then success: a get-modify-replace loop needs 4 attempts.
    let storm = server.inject(Fault::conflict().resource("widgets").verb(Verb::Update).times(3));
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut current: DynamicObject = api.get("a").await.unwrap();
        current.data["spec"]["v"] = json!(attempts);
        match api.replace("a", &PostParams::default(), &current).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict" => continue,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(attempts, 4);
    assert_eq!((storm.used(), storm.remaining()), (3, 0));
    let injected = server.requests().iter().filter(|r| r.injected && r.verb == Verb::Update).count();
    assert_eq!(injected, 3);
}

#[tokio::test]
async fn server_errors_500_surface_and_503_is_retried_by_kube() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    server.inject(Fault::internal_error().verb(Verb::Create).path_contains("/widgets"));
    let err = api_error(api.create(&PostParams::default(), &widget("a", json!({}))).await);
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    assert!(api.get("a").await.is_err(), "nothing was created");

    let unavailable = server.inject(Fault::unavailable().method("POST").resource("widgets").times(2));
    api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    assert_eq!(unavailable.used(), 2);
}
