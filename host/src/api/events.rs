//! `GET /api/v1/events`: a server-sent event stream of what changed, for the page and for scripts.
//!
//! Each subscriber gets its own receivers of the store's changes and of the plugin events, so
//! a host nobody watches builds and sends nothing. The stream says *what* changed; a client
//! reads the full state from the other routes. Events:
//!
//! - `hello` once, when the stream is subscribed: data `{}`; read the state after it.
//! - `object` when a status record is written or removed: data [`ObjectEvent`].
//! - `overview` when a kind is enabled or disabled, a plugin loads, changes or goes, or a host condition changes:
//!   data [`OverviewEvent`]; read `/api/v1/overview` again.
//! - `resync` when this subscriber fell behind and missed events: data [`ResyncEvent`];
//!   read everything again.
//!
//! The stream ends when the host starts shutting down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use super::{Answer, Api};
use crate::engine::Engine;
use crate::model::{ObjectKey, Phase};
use crate::plugin::PluginEvent;
use crate::store::Change;

/// How often an idle stream sends a comment, so proxies and clients see it is alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The data of an `object` event: one object's status record changed or went away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectEvent {
    /// `KIND/NAMESPACE/NAME`, as in the resource routes.
    pub key: String,
    /// The kind.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// Its phase now; `None` when the host no longer knows the object.
    pub phase: Option<Phase>,
    /// Its generation now; `None` when the host no longer knows the object.
    pub generation: Option<u64>,
    /// Whether the host forgot the object (it was deleted and finalized).
    pub removed: bool,
}

/// The data of an `overview` event: what changed, in a word (`kinds` or `plugins`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverviewEvent {
    /// `kinds` (a kind was enabled or disabled), `plugins` (a plugin loaded, changed or went) or
    /// `conditions` (one of the host's own conditions changed).
    pub changed: String,
}

/// The data of a `resync` event: how many events this subscriber missed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResyncEvent {
    /// Events dropped because the subscriber fell behind.
    pub missed: u64,
}

/// How a feed finds an object's phase and generation now (`None` once the host forgot it).
type Lookup = Box<dyn Fn(&ObjectKey) -> Option<(Phase, u64)> + Send + Sync>;

/// What one subscriber listens to.
struct Feed {
    lookup: Lookup,
    changes: Receiver<Change>,
    plugins: Receiver<PluginEvent>,
    /// Changes of the host's own conditions.
    conditions: tokio::sync::watch::Receiver<u64>,
    hello: bool,
}

impl Feed {
    /// The next event, or `None` once the host is shutting down.
    async fn next(&mut self) -> Option<Event> {
        if std::mem::take(&mut self.hello) {
            return Some(json_event("hello", &serde_json::json!({})));
        }
        tokio::select! {
            change = self.changes.recv() => match change {
                Ok(Change::Record(key)) => Some(object_event(&self.lookup, &key)),
                Ok(Change::Meta(_)) => Some(json_event("overview", &OverviewEvent { changed: "kinds".into() })),
                Err(RecvError::Lagged(missed)) => Some(json_event("resync", &ResyncEvent { missed })),
                Err(RecvError::Closed) => None,
            },
            // The registry lives as long as the engine this feed holds: it never closes first.
            Ok(()) = self.conditions.changed() => {
                Some(json_event("overview", &OverviewEvent { changed: "conditions".into() }))
            }
            event = self.plugins.recv() => match event {
                Ok(_) => Some(json_event("overview", &OverviewEvent { changed: "plugins".into() })),
                Err(RecvError::Lagged(missed)) => Some(json_event("resync", &ResyncEvent { missed })),
                Err(RecvError::Closed) => None,
            },
        }
    }
}

/// The `object` event of the record `key`, as `lookup` finds the object now.
fn object_event(lookup: &Lookup, key: &str) -> Event {
    let Some(parsed) = ObjectKey::parse(key) else {
        // Not an object's key: nothing a client can look up, so tell it to read everything.
        return json_event("resync", &ResyncEvent { missed: 0 });
    };
    let now = lookup(&parsed);
    let data = ObjectEvent {
        key: key.to_string(),
        kind: parsed.kind().to_string(),
        namespace: parsed.namespace().to_string(),
        name: parsed.name().to_string(),
        phase: now.map(|(p, _)| p),
        generation: now.map(|(_, g)| g),
        removed: now.is_none(),
    };
    json_event("object", &data)
}

/// An event named `name` with `data` as JSON.
fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default().event(name).data(serde_json::to_string(data).unwrap_or_else(|_| "{}".into()))
}

/// The stream of one subscriber: `hello`, then one event per change until the host stops.
fn stream(engine: Arc<Engine>) -> impl Stream<Item = Result<Event, Infallible>> {
    let (changes, plugins, conditions) =
        (engine.changes(), engine.plugins().subscribe(), engine.conditions().subscribe());
    let lookup: Lookup = Box::new(move |key| engine.view(key).map(|v| (v.phase, v.generation)));
    feed_stream(Feed { lookup, changes, plugins, conditions, hello: true })
}

fn feed_stream(feed: Feed) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(feed, |mut feed| async move { feed.next().await.map(|e| (Ok(e), feed)) })
}

/// `GET /api/v1/events`.
pub(super) async fn events(State(api): State<Api>) -> Answer {
    use axum::response::IntoResponse;
    let engine = api.engine()?.clone();
    // The stream ends when the host starts shutting down (the page reconnects to a new host).
    let stream = futures_util::StreamExt::take_until(stream(engine), api.closing.cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CHANGES_CAPACITY, Store};
    use axum::response::IntoResponse;
    use futures_util::StreamExt;

    /// The text of the next `n` events of a feed, as a client reads them.
    async fn read(feed: Feed, n: usize) -> String {
        let events: Vec<_> = feed_stream(feed).take(n).collect().await;
        let body = Sse::new(futures_util::stream::iter(events)).into_response().into_body();
        String::from_utf8(axum::body::to_bytes(body, 1 << 20).await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn changes_become_events_and_a_lagging_subscriber_is_told_to_resync() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store<u64> = Store::open(&dir.path().join("s.redb")).unwrap();
        let (plugin_tx, _) = tokio::sync::broadcast::channel(4);
        let conditions = crate::health::Conditions::new();
        let feed = |store: &Store<u64>| Feed {
            lookup: Box::new(|k: &ObjectKey| (k.name() == "here").then_some((Phase::Synced, 3))),
            changes: store.subscribe(),
            plugins: plugin_tx.subscribe(),
            conditions: conditions.subscribe(),
            hello: true,
        };

        let f = feed(&store);
        drop(store.put("Noop/default/here".into(), 1));
        drop(store.remove("Noop/default/gone"));
        drop(store.put_meta("disabled".into(), "[]".into()));
        let text = read(f, 4).await;
        let expected = [
            "event: hello\ndata: {}\n\n",
            "event: object\ndata: {\"key\":\"Noop/default/here\",\"kind\":\"Noop\",\"namespace\":\"default\",\"name\":\"here\",\"phase\":\"Synced\",\"generation\":3,\"removed\":false}\n\n",
            "event: object\ndata: {\"key\":\"Noop/default/gone\",\"kind\":\"Noop\",\"namespace\":\"default\",\"name\":\"gone\",\"phase\":null,\"generation\":null,\"removed\":true}\n\n",
            "event: overview\ndata: {\"changed\":\"kinds\"}\n\n",
        ];
        assert_eq!(text, expected.concat());

        let f = feed(&store);
        for i in 0..CHANGES_CAPACITY + 5 {
            drop(store.put(format!("Noop/default/o{i}"), 1));
        }
        let text = read(f, 2).await;
        assert!(text.ends_with("event: resync\ndata: {\"missed\":5}\n\n"), "{text}");
        store.flush().await.unwrap();
    }

    #[test]
    fn event_data_is_camel_case_json_a_script_can_read() {
        let e = ObjectEvent {
            key: "Noop/default/a".into(),
            kind: "Noop".into(),
            namespace: "default".into(),
            name: "a".into(),
            phase: Some(Phase::Synced),
            generation: Some(2),
            removed: false,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["phase"], "Synced");
        assert_eq!(v["generation"], 2);
        assert_eq!(v["removed"], false);
        assert_eq!(serde_json::from_value::<ObjectEvent>(v).unwrap(), e);
    }
}
