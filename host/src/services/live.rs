//! The open MCP session of each running service, shared with the host's tool router while it is up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::Tool;
use rmcp::service::{Peer, RoleClient};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::offered::{self, Events, Offered, Ties};
use super::redact::Redactor;

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
    /// The server's prompts, resources and resource templates, as last listed (see
    /// [`offered`]); empty until first listed.
    pub offered: Offered,
    /// Where the server's `notifications/progress` go: subscribe a call's token to get them.
    pub relay: Arc<super::forward::Relay>,
    /// What the server sends that rmcp's types drop: its tools' `execution`, its tasks.
    pub raw: Arc<super::raw::Raw>,
    /// The cell it was published in, where calls report how they ended.
    cell: Arc<LiveCell>,
    /// Which publish of the cell it is.
    generation: u64,
    /// How long a call may wait for its answer before the server is probed.
    check_after: Duration,
    /// The service's secret values, kept out of what its server answers.
    redactor: Redactor,
}

impl LiveSession {
    /// `text` the server sent (an error) with the service's secret values replaced by
    /// `<redacted>`: what may be stored, shown or logged of it.
    pub fn redact(&self, text: &str) -> String {
        self.redactor.text(text).into_owned()
    }

    /// Replaces the service's secret values in every string of `value` (an error result).
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        self.redactor.json(value);
    }

    /// The tool named `name`, if the server lists it.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The fields of the server's tool `name` that rmcp's `Tool` does not model (its
    /// `execution`), as the server listed them, with the service's secret values redacted.
    pub fn tool_extras(&self, name: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut extras = serde_json::Value::Object(self.raw.extras().get(name)?.clone());
        self.redactor.json(&mut extras);
        match extras {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    }

    /// Tells the service's supervisor that a call on this session failed at the transport
    /// (`cause`, in words): the service is shown unhealthy with the cause at once, and is checked
    /// and reconnected (remote) or probed (stdio) without waiting for its next health probe.
    /// Ignored once the session is no longer the published one.
    pub fn call_failed(&self, cause: impl Into<String>) {
        self.cell.tell(self.generation, Outcome::Broken(cause.into()));
    }

    /// How long a call may wait for its answer before [`LiveSession::call_unanswered`] should be
    /// told: the service's probe timeout.
    pub fn check_after(&self) -> Duration {
        self.check_after
    }

    /// Tells the service's supervisor that a call on this session has waited for its answer
    /// longer than [`LiveSession::check_after`], or past its deadline: the server is probed at once
    /// (a slow tool is not a fault, a server that does not answer is). Ignored once the session is
    /// no longer the published one.
    pub fn call_unanswered(&self) {
        self.cell.tell(self.generation, Outcome::Slow);
    }

    /// Tells the service's supervisor that a call on this session was answered: a service shown
    /// unhealthy by failed probes or calls is healthy again.
    pub fn call_answered(&self) {
        self.cell.tell(self.generation, Outcome::Answered);
    }

    /// How many attempts to check or reconnect the service the supervisor has finished so far;
    /// read it before [`LiveSession::call_failed`] to wait with [`LiveSession::renewed`].
    pub fn attempts(&self) -> u64 {
        *self.cell.attempts.borrow()
    }

    /// Waits until the supervisor has finished an attempt after the `since`-th (see
    /// [`LiveSession::attempts`]), at most until `until`, and returns the session then published
    /// if it is another one than this.
    pub async fn renewed(&self, since: u64, until: Instant) -> Option<LiveSession> {
        let mut attempts = self.cell.attempts.subscribe();
        let _ = tokio::time::timeout_at(until, attempts.wait_for(|n| *n != since)).await;
        self.cell.get().filter(|s| s.generation != self.generation)
    }

    /// Keeps the server's resource `uri` subscribed, on this session and on every later one
    /// of the service, until [`LiveSession::unsubscribe`]; its `notifications/resources/updated`
    /// reach [`crate::services::ServiceManager::resource_updates`]. The error says why the
    /// server refused it (or did not answer), redacted.
    pub async fn subscribe(&self, uri: &str) -> Result<(), String> {
        self.cell.ties.want(uri);
        offered::subscribe_on(&self.peer, uri, self.check_after, true).await.map_err(|e| self.redact(&e))
    }

    /// Stops keeping `uri` subscribed, and tells the server so.
    pub async fn unsubscribe(&self, uri: &str) -> Result<(), String> {
        self.cell.ties.unwant(uri);
        offered::subscribe_on(&self.peer, uri, self.check_after, false).await.map_err(|e| self.redact(&e))
    }
}

/// How a call on a published session ended, as far as the service's health goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It failed at the transport: the cause, in words.
    Broken(String),
    /// It waited long for its answer, or got none within its deadline.
    Slow,
    /// The server answered it.
    Answered,
}

/// The slot a supervisor publishes its session in, read by [`crate::services::ServiceManager::session`].
#[derive(Debug)]
pub(crate) struct LiveCell {
    inner: Mutex<Slot>,
    /// Its service's name, the manager's hub, and its wanted subscriptions.
    ties: Arc<Ties>,
    /// The last outcome calls reported that the supervisor has not taken yet (a failure wins).
    outcome: Mutex<Option<Outcome>>,
    told: Notify,
    /// Bumped after each attempt of the supervisor to check or reconnect the service.
    attempts: watch::Sender<u64>,
}

impl Default for LiveCell {
    fn default() -> Self {
        Self::new(Ties::default())
    }
}

impl LiveCell {
    /// An empty cell tied to the others by `ties`.
    pub(crate) fn new(ties: Ties) -> Self {
        Self {
            inner: Mutex::default(),
            ties: Arc::new(ties),
            outcome: Mutex::default(),
            told: Notify::new(),
            attempts: watch::Sender::new(0),
        }
    }
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

    /// Publishes `peer` with `tools` until the guard is dropped (or [`LiveCell::clear`]); its
    /// client half `prober` relays its progress, reads its raw messages and hears its events.
    /// A call waiting longer than `check_after` for its answer has the server probed; what
    /// the server answers is redacted with `redactor`. What the server offers besides tools
    /// is listed in the background and again on each of its events.
    pub(crate) fn publish(
        self: &Arc<Self>,
        peer: Peer<RoleClient>,
        prober: &super::probe::Prober,
        tools: Vec<Tool>,
        check_after: Duration,
        redactor: Redactor,
    ) -> LiveGuard {
        let events: Arc<Events> = prober.events();
        let mut slot = self.lock();
        slot.generation += 1;
        let generation = slot.generation;
        slot.session = Some(LiveSession {
            peer: peer.clone(),
            relay: prober.relay(),
            raw: prober.raw(),
            tools: Arc::new(tools),
            offered: Offered::default(),
            cell: self.clone(),
            generation,
            check_after,
            redactor: redactor.clone(),
        });
        drop(slot);
        self.ties.hub.bump();
        let refresh = Arc::new(Notify::new());
        let cell = self.clone();
        let follow = tokio::spawn(offered::follow(
            peer,
            events,
            refresh.clone(),
            self.ties.clone(),
            check_after,
            redactor,
            move |offered| cell.set_offered(generation, offered),
        ));
        LiveGuard { cell: self.clone(), generation, follow: follow.abort_handle(), refresh }
    }

    /// Stores what the session of publish `generation` offers, if it is still the published
    /// one; true when that changed it.
    fn set_offered(&self, generation: u64, offered: Offered) -> bool {
        let mut slot = self.lock();
        match slot.session.as_mut() {
            Some(s) if s.generation == generation && s.offered != offered => {
                s.offered = offered;
                true
            }
            _ => false,
        }
    }

    /// Removes the published session, whoever published it.
    pub(crate) fn clear(&self) {
        if self.lock().session.take().is_some() {
            self.ties.hub.bump();
        }
    }

    /// Records what a call on the session of publish `generation` reported, if it is still the
    /// published one, and wakes the supervisor. A failure is kept over a later answer or timeout
    /// until the supervisor takes it.
    fn tell(&self, generation: u64, outcome: Outcome) {
        if self.lock().generation != generation {
            return;
        }
        let mut pending = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*pending, Some(Outcome::Broken(_))) {
            *pending = Some(outcome);
        }
        drop(pending);
        self.told.notify_one();
    }

    /// Waits for the next outcome calls report, and takes it. Cancel-safe.
    pub(crate) async fn outcome(&self) -> Outcome {
        loop {
            if let Some(o) = self.outcome.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return o;
            }
            self.told.notified().await;
        }
    }

    /// Drops what calls reported and was not taken (the session it concerned is gone).
    pub(crate) fn forget_outcome(&self) {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Says that the supervisor finished one attempt to check or reconnect the service.
    pub(crate) fn attempted(&self) {
        self.attempts.send_modify(|n| *n = n.wrapping_add(1));
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
    /// The task that lists what the session offers besides tools.
    follow: tokio::task::AbortHandle,
    /// Has that task list it again.
    refresh: Arc<Notify>,
}

impl LiveGuard {
    /// Replaces the published tool list (after a successful `tools/list`), and has the
    /// prompts and resources listed again (a server may change them without saying so).
    pub(crate) fn set_tools(&self, tools: Vec<Tool>) {
        self.refresh.notify_one();
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
        self.follow.abort();
        let mut slot = self.cell.lock();
        if slot.generation == self.generation && slot.session.take().is_some() {
            drop(slot);
            self.cell.ties.hub.bump();
        }
    }
}
