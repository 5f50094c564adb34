//! What a server sends about a call in flight (its `notifications/progress`, its sampling, elicitation and roots requests), routed back to the `/mcp` client that made the call.

#![allow(deprecated)] // rmcp marks sampling and roots deprecated (SEP-2577); protocol 2025-11-25 has them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::GetExtensions;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, ErrorData, ListRootsRequest, ListRootsResult, ProgressNotificationParam,
    ProgressToken, RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, Peer, RoleServer};
use tokio::sync::mpsc::UnboundedSender;

/// The `/mcp` client a call is made for: its session and the id of its `tools/call`, so that a
/// server's request made while serving the call can be put to that client, on that call's stream.
#[derive(Clone, Debug)]
pub struct Asker {
    /// The client's session at the endpoint.
    pub peer: Peer<RoleServer>,
    /// The id of the client's request the call serves.
    pub request: RequestId,
}

tokio::task_local! {
    static ASKER: Asker;
}

/// Runs `call` on behalf of `asker`: the server calls it makes (on this task) may put their
/// sampling, elicitation and roots requests to `asker`.
pub async fn asking<F: Future>(asker: Asker, call: F) -> F::Output {
    ASKER.scope(asker, call).await
}

/// The [`Asker`] of the call running on this task, if [`asking`] set one.
pub fn asker() -> Option<Asker> {
    ASKER.try_with(Clone::clone).ok()
}

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
    /// Each token's asker, with the number of the call it serves (a call is held under a
    /// provisional token from before its request is sent, then under rmcp's: counted once).
    askers: HashMap<ProgressToken, (u64, Asker)>,
}

/// Numbers the calls held by [`Relay::reserve`].
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A call held as in flight from before its request is sent (see [`Relay::reserve`]); pass it
/// to [`Relay::subscribe`] once rmcp has given the request its token.
#[derive(Debug)]
pub struct Reservation {
    call: u64,
    asker: Asker,
    _held: Subscription,
}

impl Relay {
    /// Sends the progress for `token` to `sink`, and the server's requests to `asker` (see
    /// [`Relay::ask`]), until the returned [`Subscription`] is dropped.
    pub fn subscribe(
        self: &Arc<Self>,
        token: ProgressToken,
        sink: UnboundedSender<ProgressNotificationParam>,
        held: Option<&Reservation>,
    ) -> Subscription {
        let mut inner = self.lock();
        inner.sinks.insert(token.clone(), sink);
        if let Some(r) = held {
            inner.askers.insert(token.clone(), (r.call, r.asker.clone()));
        }
        Subscription { relay: self.clone(), token }
    }

    /// Holds the call of `asker` as in flight on this session until the reservation is dropped,
    /// from before its request is sent: a server that asks (sampling, elicitation) as soon as
    /// the request reaches it finds the call, however late the caller learns the request's
    /// token. `None` when there is no asker.
    pub fn reserve(self: &Arc<Self>, asker: Option<Asker>) -> Option<Reservation> {
        let asker = asker?;
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = ProgressToken(rmcp::model::NumberOrString::String(format!("steward-pending-{call}").into()));
        self.lock().askers.insert(token.clone(), (call, asker.clone()));
        Some(Reservation { call, asker, _held: Subscription { relay: self.clone(), token } })
    }

    /// The client to put a server's request to: the one `/mcp` client whose call is in flight on
    /// this session. A request the server makes with no such call in flight, or while calls of
    /// several clients are (the protocol does not say which call a request is for), is refused
    /// with an error that says why.
    fn ask(&self, what: &str) -> Result<Asker, ErrorData> {
        let inner = self.lock();
        let mut calls: Vec<&(u64, Asker)> = inner.askers.values().collect();
        calls.sort_by_key(|(call, _)| *call);
        calls.dedup_by_key(|(call, _)| *call);
        let mut askers = calls.into_iter().map(|(_, a)| a);
        match (askers.next(), askers.next()) {
            (Some(a), None) => Ok(a.clone()),
            (None, _) => Err(refused(format!(
                "Steward cannot answer {what}: no /mcp client call is in flight on this session to forward it to"
            ))),
            (Some(_), Some(_)) => Err(refused(format!(
                "Steward cannot answer {what}: several /mcp client calls are in flight on this session and the request does not say which one it is for"
            ))),
        }
    }

    /// Puts a server's `sampling/createMessage` to the client of the call in flight, if it declared sampling.
    #[allow(deprecated)]
    pub async fn create_message(&self, params: CreateMessageRequestParams) -> Result<CreateMessageResult, ErrorData> {
        let what = "sampling/createMessage";
        let asker = self.ask(what)?;
        let declared = asker.peer.peer_info().is_some_and(|i| i.capabilities.sampling.is_some());
        let request = CreateMessageRequest::new(params);
        match forward(&asker, declared, what, ServerRequest::CreateMessageRequest(request)).await? {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => Err(unexpected(what)),
        }
    }

    /// Puts a server's `elicitation/create` to the client of the call in flight, if it declared elicitation.
    pub async fn create_elicitation(&self, params: ElicitRequestParams) -> Result<ElicitResult, ErrorData> {
        let what = "elicitation/create";
        let asker = self.ask(what)?;
        let declared = asker.peer.peer_info().is_some_and(|i| i.capabilities.elicitation.is_some());
        let request = ElicitRequest::new(params);
        match forward(&asker, declared, what, ServerRequest::ElicitRequest(request)).await? {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => Err(unexpected(what)),
        }
    }

    /// Puts a server's `roots/list` to the client of the call in flight, if it declared roots.
    #[allow(deprecated)]
    pub async fn list_roots(&self) -> Result<ListRootsResult, ErrorData> {
        let what = "roots/list";
        let asker = self.ask(what)?;
        let declared = asker.peer.peer_info().is_some_and(|i| i.capabilities.roots.is_some());
        match forward(&asker, declared, what, ServerRequest::ListRootsRequest(ListRootsRequest::default())).await? {
            ClientResult::ListRootsResult(r) => Ok(r),
            _ => Err(unexpected(what)),
        }
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
        let mut inner = self.relay.lock();
        inner.sinks.remove(&self.token);
        inner.askers.remove(&self.token);
    }
}

/// Sends `request` to `asker`'s client on the stream of its call, when it `declared` the capability.
async fn forward(
    asker: &Asker,
    declared: bool,
    what: &str,
    mut request: ServerRequest,
) -> Result<ClientResult, ErrorData> {
    if !declared {
        return Err(refused(format!("the /mcp client of this call did not declare the capability for {what}")));
    }
    request.extensions_mut().insert(OriginatingRequestId(asker.request.clone()));
    // rmcp marks a request sent while a handler runs with the id of the request handled (a
    // task-local: here the server's own request, an id of another session), over the mark above.
    // Sent from a task of its own, the request keeps the mark of the client's call, and goes on
    // that call's stream rather than on the client's standalone stream (which it may not have).
    let peer = asker.peer.clone();
    let mut sending = Aborting(tokio::spawn(async move { peer.send_request(request).await }));
    let sent = (&mut sending.0).await;
    match sent {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
        Ok(Err(other)) => {
            Err(ErrorData::internal_error(format!("the /mcp client did not answer {what}: {other}"), None))
        }
        Err(e) => Err(ErrorData::internal_error(format!("forwarding {what} to the /mcp client failed: {e}"), None)),
    }
}

/// A task aborted when dropped (the call that waits for it was dropped).
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn refused(words: String) -> ErrorData {
    ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, words, None)
}

fn unexpected(what: &str) -> ErrorData {
    ErrorData::internal_error(format!("the /mcp client answered {what} with something else"), None)
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
        let a = relay.subscribe(ProgressToken(NumberOrString::Number(1)), a_tx, None);
        let b = relay.subscribe(ProgressToken(NumberOrString::Number(2)), b_tx, None);
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
