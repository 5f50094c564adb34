//! `GET /api/v1/events`: a server-sent event stream of what changed, for the page and for scripts.
//!
//! Each subscriber gets its own receivers of the store's changes and of the plugin events, so
//! a host nobody watches builds and sends nothing. The stream says *what* changed; a client
//! reads the full state from the other routes. Events:
//!
//! - `hello` once, when the stream is subscribed: data `{}`; read the state after it.
//! - `object` when a status record is written or removed: data [`ObjectEvent`].
//! - `overview` when a kind is enabled or disabled, or a plugin loads, changes or goes:
//!   data [`OverviewEvent`]; read `/api/v1/overview` again.
//! - `resync` when this subscriber fell behind and missed events: data [`ResyncEvent`];
//!   read everything again.

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
    /// `kinds` (a kind was enabled or disabled) or `plugins` (a plugin loaded, changed or went).
    pub changed: String,
}

/// The data of a `resync` event: how many events this subscriber missed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResyncEvent {
    /// Events dropped because the subscriber fell behind.
    pub missed: u64,
}

/// What one subscriber listens to.
struct Feed {
    engine: Arc<Engine>,
    changes: Receiver<Change>,
    plugins: Receiver<PluginEvent>,
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
                Ok(Change::Record(key)) => Some(object_event(&self.engine, &key)),
                Ok(Change::Meta(_)) => Some(json_event("overview", &OverviewEvent { changed: "kinds".into() })),
                Err(RecvError::Lagged(missed)) => Some(json_event("resync", &ResyncEvent { missed })),
                Err(RecvError::Closed) => None,
            },
            event = self.plugins.recv() => match event {
                Ok(_) => Some(json_event("overview", &OverviewEvent { changed: "plugins".into() })),
                Err(RecvError::Lagged(missed)) => Some(json_event("resync", &ResyncEvent { missed })),
                Err(RecvError::Closed) => None,
            },
        }
    }
}

/// The `object` event of the record `key`, as the engine shows the object now.
fn object_event(engine: &Engine, key: &str) -> Event {
    let Some(parsed) = ObjectKey::parse(key) else {
        // Not an object's key: nothing a client can look up, so tell it to read everything.
        return json_event("resync", &ResyncEvent { missed: 0 });
    };
    let view = engine.view(&parsed);
    let data = ObjectEvent {
        key: key.to_string(),
        kind: parsed.kind,
        namespace: parsed.namespace,
        name: parsed.name,
        phase: view.as_ref().map(|v| v.phase),
        generation: view.as_ref().map(|v| v.generation),
        removed: view.is_none(),
    };
    json_event("object", &data)
}

/// An event named `name` with `data` as JSON.
fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default().event(name).data(serde_json::to_string(data).unwrap_or_else(|_| "{}".into()))
}

/// The stream of one subscriber: `hello`, then one event per change until the host stops.
fn stream(engine: Arc<Engine>) -> impl Stream<Item = Result<Event, Infallible>> {
    let feed = Feed { changes: engine.changes(), plugins: engine.plugins().subscribe(), engine, hello: true };
    futures_util::stream::unfold(feed, |mut feed| async move { feed.next().await.map(|e| (Ok(e), feed)) })
}

/// `GET /api/v1/events`.
pub(super) async fn events(State(api): State<Api>) -> Answer {
    use axum::response::IntoResponse;
    let engine = api.engine()?.clone();
    Ok(Sse::new(stream(engine)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

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
