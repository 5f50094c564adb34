//! Watch streams: newline-delimited JSON events over a chunked HTTP body, with the real server's
//! selector rules (leaving the selector reads as DELETED, entering as ADDED), bookmarks, timeouts,
//! and abrupt cuts.

use bytes::Bytes;
use serde_json::{Value, json};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

use crate::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{EventKind, WatchMsg};
use crate::verbs::present;

/// What one watch sends: which objects, and for how long.
pub(crate) struct WatchFilter {
    pub def: ResourceDef,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub timeout: Duration,
}

impl WatchFilter {
    fn selected(&self, obj: &Value) -> bool {
        let in_ns = self.namespace.as_deref().is_none_or(|ns| crate::meta::meta_str(obj, "namespace") == Some(ns));
        in_ns && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The JSON line for a message, or None when this watch does not see it.
    fn render(&self, msg: &WatchMsg) -> Option<Value> {
        match msg {
            WatchMsg::Event(e) => {
                let now = e.kind != EventKind::Deleted && self.selected(&e.obj);
                let before = e.prev.as_ref().is_some_and(|p| self.selected(p));
                let (kind, obj) = match (e.kind, before, now) {
                    (EventKind::Added, _, true) => ("ADDED", present(&self.def, &e.obj)),
                    (EventKind::Modified, true, true) => ("MODIFIED", present(&self.def, &e.obj)),
                    (EventKind::Modified, false, true) => ("ADDED", present(&self.def, &e.obj)),
                    (EventKind::Modified, true, false) => {
                        // Left the selector: the previous state, at this event's resourceVersion.
                        let mut prev = present(&self.def, e.prev.as_ref()?);
                        crate::meta::meta_mut(&mut prev).insert("resourceVersion".into(), json!(e.rv.to_string()));
                        ("DELETED", prev)
                    }
                    (EventKind::Deleted, true, _) => ("DELETED", present(&self.def, &e.obj)),
                    _ => return None,
                };
                Some(json!({"type": kind, "object": obj}))
            }
            WatchMsg::Bookmark(rv) => Some(json!({"type": "BOOKMARK", "object": self.bookmark(*rv, false)})),
            WatchMsg::InitialEventsEnd(rv) => Some(json!({"type": "BOOKMARK", "object": self.bookmark(*rv, true)})),
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": metadata})
    }
}

fn line(v: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(v).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// An HTTP body fed by a channel; an `Err` item makes hyper abort the connection mid-stream.
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    abort: Option<std::io::Error>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        if let Some(err) = self.abort.take() {
            return Poll::Ready(Some(Err(err)));
        }
        match self.rx.poll_recv(cx) {
            // Answer Pending once before the error: hyper then flushes the events already
            // written, so the client gets everything sent before the cut, then the abort.
            Poll::Ready(Some(Err(err))) => {
                self.abort = Some(err);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other.map(|item| item.map(|r| r.map(http_body::Frame::data))),
        }
    }
}

impl ChannelBody {
    fn new(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Self {
        ChannelBody { rx, abort: None }
    }
}

/// A body carrying a single watch `ERROR` event (e.g. 410 Expired), then a clean end.
pub(crate) fn error_stream(err: &ApiError) -> ChannelBody {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Ok(line(&json!({"type": "ERROR", "object": err.to_status()}))));
    ChannelBody::new(rx)
}

/// Starts the task that turns store messages into the stream body. The stream ends cleanly after
/// the filter's timeout or when the resource is unregistered, and abruptly (connection aborted,
/// no final event) when `cut` changes.
pub(crate) fn stream(
    mut events: mpsc::UnboundedReceiver<WatchMsg>,
    filter: WatchFilter,
    mut cut: tokio::sync::watch::Receiver<u64>,
    activity: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
) -> ChannelBody {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(filter.timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                biased;
                _ = cut.changed() => {
                    // What was written before the cut is on the wire already: deliver it, then abort.
                    while let Ok(msg) = events.try_recv() {
                        if let Some(v) = filter.render(&msg) {
                            let _ = tx.send(Ok(line(&v))).await;
                        }
                    }
                    let _ = tx.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "watch cut"))).await;
                    break;
                }
                _ = &mut deadline => break,
                _ = tx.closed() => break,
                msg = events.recv() => {
                    let Some(msg) = msg else { break };
                    if let Some(v) = filter.render(&msg)
                        && tx.send(Ok(line(&v))).await.is_err()
                    {
                        break;
                    }
                }
            }
        }
        // The watch is closed once `events` is dropped; wake anyone waiting on watch counts.
        drop(events);
        activity.send_modify(|n| *n += 1);
    });
    ChannelBody::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Event;
    use std::sync::Arc;

    fn filter(labels: &str) -> WatchFilter {
        let def = ResourceDef::new("g.io", "v1", "W", "ws", true);
        WatchFilter {
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::parse("", &def).unwrap(),
            def,
            namespace: Some("a".into()),
            timeout: Duration::from_secs(1),
        }
    }

    fn obj(ns: &str, app: &str, rv: u64) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"name": "x", "namespace": ns, "labels": {"app": app}, "resourceVersion": rv.to_string()}}),
        )
    }

    fn ev(kind: EventKind, rv: u64, obj: Arc<Value>, prev: Option<Arc<Value>>) -> WatchMsg {
        WatchMsg::Event(Arc::new(Event { rv, kind, obj, prev }))
    }

    #[test]
    fn selector_transitions() {
        let f = filter("app=web");
        let t = |m: WatchMsg| {
            f.render(&m)
                .map(|v| (v["type"].as_str().unwrap().to_string(), v["object"]["metadata"]["resourceVersion"].clone()))
        };
        assert_eq!(t(ev(EventKind::Added, 2, obj("a", "web", 2), None)).unwrap().0, "ADDED");
        assert_eq!(t(ev(EventKind::Added, 2, obj("a", "db", 2), None)), None);
        assert_eq!(t(ev(EventKind::Added, 2, obj("b", "web", 2), None)), None);
        assert_eq!(t(ev(EventKind::Modified, 3, obj("a", "web", 3), Some(obj("a", "db", 2)))).unwrap().0, "ADDED");
        let left = t(ev(EventKind::Modified, 4, obj("a", "db", 4), Some(obj("a", "web", 3)))).unwrap();
        assert_eq!(left, ("DELETED".to_string(), json!("4")));
        assert_eq!(t(ev(EventKind::Modified, 5, obj("a", "db", 5), Some(obj("a", "db", 4)))), None);
        assert_eq!(t(ev(EventKind::Deleted, 6, obj("a", "web", 6), Some(obj("a", "web", 5)))).unwrap().0, "DELETED");
        let bm = f.render(&WatchMsg::InitialEventsEnd(7)).unwrap();
        assert_eq!(bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        assert_eq!(bm["object"]["kind"], "W");
    }
}
