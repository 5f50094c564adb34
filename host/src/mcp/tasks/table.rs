//! The tasks the endpoint's clients made at servers: each under an id of the host's, owned by one client session.

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::service::{Peer, RoleServer};

use crate::services::LiveSession;

/// The most tasks kept; past it, the oldest is forgotten.
pub const MAX_TASKS: usize = 10_000;

/// One task a client made.
#[derive(Clone, Debug)]
pub struct Owned {
    /// The client's MCP session (its `Mcp-Session-Id`).
    pub session: String,
    /// The client's side of that session: where the task's status notifications go.
    pub client: Peer<RoleServer>,
    /// The server's session the task runs on.
    pub live: LiveSession,
    /// The task's id at the server.
    pub server_id: String,
    /// When it was made, in the table's order.
    seq: u64,
}

/// The tasks, by the id the client knows.
#[derive(Debug, Default)]
pub struct Tasks {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, Owned>,
    seq: u64,
}

impl Tasks {
    /// Keeps the server's task `server_id` on `live`, made by `client` of session `session`,
    /// and returns the id the client is to know it by: random, so that no id of one server
    /// meets another's and no client can guess another's. Tasks whose client or server
    /// session closed are forgotten first.
    pub fn insert(&self, session: &str, client: Peer<RoleServer>, live: LiveSession, server_id: &str) -> String {
        let mut inner = self.lock();
        inner.by_id.retain(|_, o| !o.client.is_transport_closed() && !o.live.peer.is_transport_closed());
        if inner.by_id.len() >= MAX_TASKS
            && let Some(oldest) = inner.by_id.iter().min_by_key(|(_, o)| o.seq).map(|(k, _)| k.clone())
        {
            inner.by_id.remove(&oldest);
        }
        inner.seq += 1;
        let seq = inner.seq;
        let id = format!("steward-{:032x}", fastrand::u128(..));
        let owned = Owned { session: session.to_string(), client, live, server_id: server_id.to_string(), seq };
        inner.by_id.insert(id.clone(), owned);
        id
    }

    /// The task `id`, if session `session` made it.
    pub fn get(&self, id: &str, session: &str) -> Option<Owned> {
        self.lock().by_id.get(id).filter(|o| o.session == session).cloned()
    }

    /// Forgets the task `id`.
    pub fn remove(&self, id: &str) {
        self.lock().by_id.remove(id);
    }

    /// The tasks session `session` made, oldest first, with their ids.
    pub fn of_session(&self, session: &str) -> Vec<(String, Owned)> {
        let inner = self.lock();
        let mut out: Vec<(String, Owned)> =
            inner.by_id.iter().filter(|(_, o)| o.session == session).map(|(k, o)| (k.clone(), o.clone())).collect();
        out.sort_by_key(|(_, o)| o.seq);
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
