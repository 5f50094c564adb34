//! What a server sends about a call in flight (its `notifications/progress`), routed back to the caller that made the call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::sync::mpsc::UnboundedSender;

/// The progress tokens of one MCP session's calls in flight, each with where its progress goes.
///
/// The tokens are those rmcp put in the requests (it sets `_meta.progressToken` of every request
/// it sends to a number of its own, unique in the session), so a server's progress for one call
/// never reaches the caller of another.
#[derive(Debug, Default)]
pub struct Relay {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sinks: HashMap<ProgressToken, UnboundedSender<ProgressNotificationParam>>,
}

impl Relay {
    /// Sends the progress for `token` to `sink` until the returned [`Subscription`] is dropped.
    pub fn subscribe(
        self: &Arc<Self>,
        token: ProgressToken,
        sink: UnboundedSender<ProgressNotificationParam>,
    ) -> Subscription {
        self.lock().sinks.insert(token.clone(), sink);
        Subscription { relay: self.clone(), token }
    }

    /// Hands `progress` to the sink of its token; a notification for a token not (or no longer)
    /// subscribed is dropped. Never waits.
    pub fn deliver(&self, progress: ProgressNotificationParam) {
        if let Some(sink) = self.lock().sinks.get(&progress.progress_token) {
            let _ = sink.send(progress);
        }
    }

    /// How many tokens are subscribed (calls in flight that want progress).
    pub fn len(&self) -> usize {
        self.lock().sinks.len()
    }

    /// Whether no token is subscribed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One subscribed progress token; dropping it unsubscribes the token.
#[derive(Debug)]
pub struct Subscription {
    relay: Arc<Relay>,
    token: ProgressToken,
}

impl Subscription {
    /// The token subscribed.
    pub fn token(&self) -> &ProgressToken {
        &self.token
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.relay.lock().sinks.remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;

    use super::*;

    #[test]
    fn progress_reaches_the_sink_of_its_token_only_while_subscribed() {
        let relay = Arc::new(Relay::default());
        let (a_tx, mut a_rx) = tokio::sync::mpsc::unbounded_channel();
        let (b_tx, mut b_rx) = tokio::sync::mpsc::unbounded_channel();
        let a = relay.subscribe(ProgressToken(NumberOrString::Number(1)), a_tx);
        let b = relay.subscribe(ProgressToken(NumberOrString::Number(2)), b_tx);
        relay.deliver(ProgressNotificationParam::new(a.token().clone(), 1.0));
        relay.deliver(ProgressNotificationParam::new(b.token().clone(), 2.0));
        assert_eq!(a_rx.try_recv().unwrap().progress, 1.0);
        assert_eq!(b_rx.try_recv().unwrap().progress, 2.0);
        let gone = a.token().clone();
        drop(a);
        relay.deliver(ProgressNotificationParam::new(gone, 3.0));
        assert!(a_rx.try_recv().is_err());
        assert_eq!(relay.len(), 1);
        drop(b);
        assert!(relay.is_empty());
    }
}
