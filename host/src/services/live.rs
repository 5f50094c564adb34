//! The open MCP session of each running service, shared with the host's tool router while it is up.

use std::sync::{Arc, Mutex};

use rmcp::model::Tool;
use rmcp::service::{Peer, RoleClient};

/// A service's open MCP session: what a caller needs to make requests on it.
///
/// It is a snapshot: the peer stays usable after the session broke, but every request on it
/// then fails (a transport error); ask [`crate::services::ServiceManager::session`] again.
#[derive(Clone, Debug)]
pub struct LiveSession {
    /// The client side of the session (cheap to clone; requests on it go to the server).
    pub peer: Peer<RoleClient>,
    /// The server's tools, as its last successful `tools/list` gave them (names, descriptions,
    /// input schemas).
    pub tools: Arc<Vec<Tool>>,
}

impl LiveSession {
    /// The tool named `name`, if the server lists it.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// The slot a supervisor publishes its session in, read by [`crate::services::ServiceManager::session`].
#[derive(Debug, Default)]
pub(crate) struct LiveCell {
    inner: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Bumped by every publish, so that a stale guard never clears a newer session.
    generation: u64,
    session: Option<LiveSession>,
}

impl LiveCell {
    /// The session, while one is published.
    pub(crate) fn get(&self) -> Option<LiveSession> {
        self.lock().session.clone()
    }

    /// Publishes `peer` with `tools` until the guard is dropped (or [`LiveCell::clear`]).
    pub(crate) fn publish(self: &Arc<Self>, peer: Peer<RoleClient>, tools: Vec<Tool>) -> LiveGuard {
        let mut slot = self.lock();
        slot.generation += 1;
        slot.session = Some(LiveSession { peer, tools: Arc::new(tools) });
        LiveGuard { cell: self.clone(), generation: slot.generation }
    }

    /// Removes the published session, whoever published it.
    pub(crate) fn clear(&self) {
        self.lock().session = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps one published session in its cell; dropping it removes that session (not a newer one).
#[derive(Debug)]
pub(crate) struct LiveGuard {
    cell: Arc<LiveCell>,
    generation: u64,
}

impl LiveGuard {
    /// Replaces the published tool list (after a successful `tools/list`).
    pub(crate) fn set_tools(&self, tools: Vec<Tool>) {
        let mut slot = self.cell.lock();
        if slot.generation == self.generation
            && let Some(s) = slot.session.as_mut()
        {
            s.tools = Arc::new(tools);
        }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        let mut slot = self.cell.lock();
        if slot.generation == self.generation {
            slot.session = None;
        }
    }
}
