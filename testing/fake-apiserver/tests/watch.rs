//! Watch semantics through kube: raw watches, kube_runtime's watcher and reflector, 410 relists,
//! bookmarks, cuts, streaming lists and timeouts.

mod common;

use common::*;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use std::time::Duration;
use steward_fake_apiserver::{FakeApiServer, Options, Verb};
use tokio::sync::mpsc;

type Item = Result<Event<DynamicObject>, String>;

/// Polls a watcher stream on its own task, forwarding every item.
fn drive(
    stream: impl Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send + 'static,
) -> (mpsc::UnboundedReceiver<Item>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.send(item.map_err(|e| e.to_string())).is_err() {
                break;
            }
        }
    });
    (rx, task)
}

/// The next item satisfying `pred`, skipping others, within the deadline.
async fn next_where(rx: &mut mpsc::UnboundedReceiver<Item>, mut pred: impl FnMut(&Item) -> bool) -> Item {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let item = rx.recv().await.expect("watcher ended");
            if pred(&item) {
                return item;
            }
        }
    })
    .await
    .expect("no matching watcher item before the deadline")
}

fn applied(name: &'static str) -> impl FnMut(&Item) -> bool {
    move |i| matches!(i, Ok(Event::Apply(o)) if o.metadata.name.as_deref() == Some(name))
}

fn no_bookmark_ticks() -> Options {
    Options { bookmark_interval: None, ..Options::default() }
}

fn lists_of(server: &FakeApiServer, plural: &str) -> usize {
    server.requests().iter().filter(|r| r.verb == Verb::List && r.resource.as_deref() == Some(plural)).count()
}

#[tokio::test]
async fn raw_watch_applies_selectors_with_real_transitions() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    api.create(&PostParams::default(), &widget_labeled("before", &[("app", "web")])).await.unwrap();
    let stream = api.watch(&WatchParams::default().disable_bookmarks().labels("app=web"), "0").await.unwrap();
    let mut stream = std::pin::pin!(stream);
    let mut next = async || match tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("event before deadline")
        .expect("stream open")
        .unwrap()
    {
        WatchEvent::Added(o) => ("ADDED", o.metadata.name.unwrap()),
        WatchEvent::Modified(o) => ("MODIFIED", o.metadata.name.unwrap()),
        WatchEvent::Deleted(o) => ("DELETED", o.metadata.name.unwrap()),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(next().await, ("ADDED", "before".into()), "rv 0: synthetic ADDED for existing objects");
    let pp = PatchParams::default();
    api.create(&PostParams::default(), &widget_labeled("w", &[("app", "db")])).await.unwrap();
    api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}}))).await.unwrap();
    assert_eq!(next().await, ("ADDED", "w".into()), "entering the selector reads as ADDED");
    api.patch("w", &pp, &Patch::Merge(json!({"spec": {"x": 1}}))).await.unwrap();
    assert_eq!(next().await, ("MODIFIED", "w".into()));
    api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}}))).await.unwrap();
    assert_eq!(next().await, ("DELETED", "w".into()), "leaving the selector reads as DELETED");
    api.patch("w", &pp, &Patch::Merge(json!({"spec": {"x": 2}}))).await.unwrap();
    api.delete("before", &DeleteParams::default()).await.unwrap();
    assert_eq!(next().await, ("DELETED", "before".into()), "changes outside the selector are not sent");
}

#[tokio::test]
async fn field_selector_watch_and_resume_from_a_resource_version() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    let a = api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    api.create(&PostParams::default(), &widget("b", json!({}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"v": 2}}))).await.unwrap();
    // From a's creation: only later events, filtered to name=a.
    let rv = a.metadata.resource_version.unwrap();
    let stream = api.watch(&WatchParams::default().disable_bookmarks().fields("metadata.name=a"), &rv).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(o.data["spec"]["v"], 2),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn watcher_and_reflector_follow_create_update_delete() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    api.create(&PostParams::default(), &widget("pre", json!({}))).await.unwrap();
    let writer = reflector::store::Writer::<DynamicObject>::new(widgets());
    let reader = writer.as_reader();
    let stream = reflector::reflector(writer, watcher::watcher(api.clone(), watcher::Config::default()));
    let (mut rx, _task) = drive(stream);
    let _ = next_where(&mut rx, |i| matches!(i, Ok(Event::InitDone))).await;
    let key = |n: &str| ObjectRef::new_with(n, widgets()).within("default");
    assert!(reader.get(&key("pre")).is_some());

    api.create(&PostParams::default(), &widget("a", json!({"v": 1}))).await.unwrap();
    let _ = next_where(&mut rx, applied("a")).await;
    assert_eq!(reader.get(&key("a")).unwrap().data["spec"]["v"], 1);
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"v": 2}}))).await.unwrap();
    let _ = next_where(&mut rx, applied("a")).await;
    assert_eq!(reader.get(&key("a")).unwrap().data["spec"]["v"], 2);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let _ = next_where(&mut rx, |i| matches!(i, Ok(Event::Delete(o)) if o.metadata.name.as_deref() == Some("a"))).await;
    assert!(reader.get(&key("a")).is_none());
    assert_eq!(reader.state().len(), 1);
    // The default watcher lists with a page size and watches with bookmarks; one LIST so far.
    let list = server
        .requests()
        .into_iter()
        .find(|r| r.verb == Verb::List && r.resource.as_deref() == Some("widgets"))
        .unwrap();
    assert!(list.query.contains("limit=500"), "{}", list.query);
    let watch = server.requests().into_iter().find(|r| r.verb == Verb::Watch).unwrap();
    assert!(watch.query.contains("allowWatchBookmarks=true"), "{}", watch.query);
    assert_eq!(lists_of(&server, "widgets"), 1);
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_410_and_the_watcher_relists() {
    let server = FakeApiServer::start_with(no_bookmark_ticks()).await.unwrap();
    let client = server.client();
    let api = install_widgets(&client).await;
    api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    let (mut rx, _task) = drive(watcher::watcher(api.clone(), watcher::Config::default()));
    let _ = next_where(&mut rx, |i| matches!(i, Ok(Event::InitDone))).await;
    server.wait_for(DEADLINE, |s| s.watches_on("example.com", "widgets") == 1).await.unwrap();
    assert_eq!(lists_of(&server, "widgets"), 1);

    // Another resource moves the global resourceVersion on; the watcher's version falls behind.
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    leases
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap())
        .await
        .unwrap();
    server.compact();
    server.cut_watches();

    let err = next_where(&mut rx, Result::is_err).await.unwrap_err();
    assert!(err.contains("410") || err.contains("too old"), "{err}");
    let _ = next_where(&mut rx, |i| matches!(i, Ok(Event::InitDone))).await;
    assert_eq!(lists_of(&server, "widgets"), 2, "relisted after 410");

    // A raw watch from the old version sees the ERROR event itself.
    let stream = api.watch(&WatchParams::default().disable_bookmarks(), "2").await.unwrap();
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("unexpected {other:?}"),
    }
    assert!(tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().is_none(), "the stream ends after the ERROR");
}

#[tokio::test]
async fn bookmarks_arrive_when_asked_for() {
    let server = FakeApiServer::start_with(no_bookmark_ticks()).await.unwrap();
    let api = install_widgets(&server.client()).await;
    let stream = api.watch(&WatchParams::default(), &server.resource_version().to_string()).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    let leases: Api<Lease> = Api::default_namespaced(server.client());
    leases
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap())
        .await
        .unwrap();
    server.wait_for(DEADLINE, |s| s.watches_on("example.com", "widgets") == 1).await.unwrap();
    server.bookmark_now();
    match tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, server.resource_version().to_string()),
        other => panic!("unexpected {other:?}"),
    }
    // Periodic bookmarks with a short interval.
    let server =
        FakeApiServer::start_with(Options { bookmark_interval: Some(Duration::from_millis(50)), ..Options::default() })
            .await
            .unwrap();
    let leases: Api<Lease> = Api::default_namespaced(server.client());
    let stream = leases.watch(&WatchParams::default(), "0").await.unwrap();
    let mut stream = std::pin::pin!(stream);
    assert!(matches!(
        tokio::time::timeout(DEADLINE, stream.next()).await.unwrap().unwrap().unwrap(),
        WatchEvent::Bookmark(_)
    ));
}

#[tokio::test]
async fn after_a_cut_the_watcher_resumes_from_its_bookmark_without_a_relist() {
    let server = FakeApiServer::start_with(no_bookmark_ticks()).await.unwrap();
    let client = server.client();
    let api = install_widgets(&client).await;
    api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    let (mut rx, _task) = drive(watcher::watcher(api.clone(), watcher::Config::default()));
    let _ = next_where(&mut rx, |i| matches!(i, Ok(Event::InitDone))).await;
    server.wait_for(DEADLINE, |s| s.watches_on("example.com", "widgets") == 1).await.unwrap();

    // Move the global version on elsewhere, bookmark it, then forget older history and cut.
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    leases
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap())
        .await
        .unwrap();
    let bookmark_rv = server.resource_version();
    server.bookmark_now();
    server.compact();
    let watches_before = server.requests().iter().filter(|r| r.verb == Verb::Watch).count();
    server.cut_watches();

    // The watcher re-watches from the bookmark (which is not expired): no 410, no relist.
    server
        .wait_for(DEADLINE, |s| {
            s.requests().iter().filter(|r| r.verb == Verb::Watch).count() > watches_before
                && s.watches_on("example.com", "widgets") == 1
        })
        .await
        .unwrap();
    let rewatch = server.requests().into_iter().filter(|r| r.verb == Verb::Watch).nth(watches_before).unwrap();
    assert!(rewatch.query.contains(&format!("resourceVersion={bookmark_rv}")), "{}", rewatch.query);
    api.create(&PostParams::default(), &widget("b", json!({}))).await.unwrap();
    let item = next_where(&mut rx, |i| i.is_err() || matches!(i, Ok(Event::Apply(_)))).await;
    assert!(matches!(&item, Ok(Event::Apply(o)) if o.metadata.name.as_deref() == Some("b")), "{item:?}");
    assert_eq!(lists_of(&server, "widgets"), 1, "no relist after the cut");
}

#[tokio::test]
async fn streaming_lists_send_initial_events_then_an_end_bookmark() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    for n in ["a", "b"] {
        api.create(&PostParams::default(), &widget(n, json!({}))).await.unwrap();
    }
    let (mut rx, _task) = drive(watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()));
    let mut initial = Vec::new();
    loop {
        match next_where(&mut rx, |_| true).await {
            Ok(Event::InitApply(o)) => initial.push(o.metadata.name.unwrap()),
            Ok(Event::InitDone) => break,
            Ok(Event::Init) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, ["a", "b"]);
    assert_eq!(lists_of(&server, "widgets"), 0, "no LIST with streaming lists");
    api.create(&PostParams::default(), &widget("c", json!({}))).await.unwrap();
    let _ = next_where(&mut rx, applied("c")).await;
}

#[tokio::test]
async fn watch_timeouts_end_streams_and_watch_counts_follow() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    let stream = api.watch(&WatchParams::default().timeout(1), "0").await.unwrap();
    server.wait_for(DEADLINE, |s| s.watch_count() == 1).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    let end = tokio::time::timeout(DEADLINE, async {
        while let Some(item) = stream.next().await {
            assert!(item.is_ok(), "clean end, not an error: {item:?}");
        }
    });
    end.await.expect("the stream ends after timeoutSeconds");
    server.wait_for(DEADLINE, |s| s.watch_count() == 0).await.unwrap();

    // Dropping a watcher closes its watch.
    let (rx, task) = drive(watcher::watcher(api.clone(), watcher::Config::default()).default_backoff());
    server.wait_for(DEADLINE, |s| s.watches_on("example.com", "widgets") == 1).await.unwrap();
    task.abort();
    drop(rx);
    server.wait_for(DEADLINE, |s| s.watches_on("example.com", "widgets") == 0).await.unwrap();
}
