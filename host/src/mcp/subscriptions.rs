//! `resources/subscribe` and `unsubscribe` of the endpoint's clients, passed through to the owning server once per resource, and the server's `notifications/resources/updated` relayed to each subscribed client under the URI it subscribed to.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ErrorData, ResourceUpdatedNotificationParam};
use rmcp::service::{Peer, RoleServer};

use super::resources::{self, Target};
use crate::engine::Engine;

/// The clients subscribed to one resource of one server.
#[derive(Debug)]
struct Sub {
    /// Each client's session, with the URI it subscribed to (the exposed one).
    clients: BTreeMap<String, (Peer<RoleServer>, String)>,
}

/// The subscriptions of every client of the endpoint, by the resource they concern.
#[derive(Debug, Default)]
pub struct Subscriptions {
    subs: Mutex<BTreeMap<Target, Sub>>,
    started: std::sync::atomic::AtomicBool,
}

impl Subscriptions {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Target, Sub>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes the client of session `session` (its `peer`) to the resource `uri` (exposed)
    /// of `namespace`: the first subscriber of a resource has it subscribed on its server,
    /// which must accept subscriptions. Later updates reach the client until it unsubscribes
    /// or goes away.
    pub async fn subscribe(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        namespace: &str,
        uri: &str,
        session: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        let target =
            resources::list(engine, namespace).target(uri).ok_or_else(|| resources::not_offered(namespace, uri))?;
        let live = engine
            .units()
            .services()
            .session(&target.owner, &target.service)
            .ok_or_else(|| super::prompts::gone(&target.owner))?;
        if !live.offered.subscribe {
            return Err(ErrorData::invalid_params(
                format!("MCPServer {} does not accept resources/subscribe (its capabilities say so)", target.owner),
                None,
            ));
        }
        self.start(engine);
        let first = {
            let mut subs = self.lock();
            let first = !subs.contains_key(&target);
            subs.entry(target.clone())
                .or_insert_with(|| Sub { clients: BTreeMap::new() })
                .clients
                .insert(session.clone(), (peer, uri.to_string()));
            first
        };
        if first && let Err(words) = live.subscribe(&target.uri).await {
            self.drop_client(&target, &session);
            return Err(ErrorData::internal_error(words, None));
        }
        Ok(())
    }

    /// Unsubscribes the client of `session` from `uri` (exposed) of `namespace`; the last one
    /// out has the server unsubscribe. Unsubscribing what was not subscribed is no error.
    pub async fn unsubscribe(
        &self,
        engine: &Engine,
        namespace: &str,
        uri: &str,
        session: &str,
    ) -> Result<(), ErrorData> {
        let Some(target) = resources::list(engine, namespace).target(uri) else { return Ok(()) };
        if self.drop_client(&target, session)
            && let Some(live) = engine.units().services().session(&target.owner, &target.service)
        {
            live.unsubscribe(&target.uri).await.map_err(|w| ErrorData::internal_error(w, None))?;
        }
        Ok(())
    }

    /// Removes one client of `target`; true when it was the last.
    fn drop_client(&self, target: &Target, session: &str) -> bool {
        let mut subs = self.lock();
        let Some(sub) = subs.get_mut(target) else { return false };
        sub.clients.remove(session);
        let last = sub.clients.is_empty();
        if last {
            subs.remove(target);
        }
        last
    }

    /// Starts relaying the servers' updates, once.
    fn start(self: &Arc<Self>, engine: &Arc<Engine>) {
        if self.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let updates = engine.units().services().resource_updates();
        tokio::spawn(relay(Arc::downgrade(self), Arc::downgrade(engine), updates));
    }
}

/// Sends each server's resource update to the clients subscribed to it; a resource whose
/// clients are all gone is unsubscribed on its server.
async fn relay(
    subs: std::sync::Weak<Subscriptions>,
    engine: std::sync::Weak<Engine>,
    mut updates: tokio::sync::broadcast::Receiver<crate::services::ResourceUpdate>,
) {
    loop {
        let update = match updates.recv().await {
            Ok(u) => u,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let Some(subs) = subs.upgrade() else { return };
        let target = Target { owner: update.owner, service: update.service, uri: update.uri };
        let (clients, emptied) = {
            let mut all = subs.lock();
            let Some(sub) = all.get_mut(&target) else { continue };
            sub.clients.retain(|_, (peer, _)| !peer.is_transport_closed());
            let clients: Vec<(Peer<RoleServer>, String)> = sub.clients.values().cloned().collect();
            let emptied = clients.is_empty();
            if emptied {
                all.remove(&target);
            }
            (clients, emptied)
        };
        for (peer, uri) in clients {
            let _ = peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await;
        }
        if emptied
            && let Some(engine) = engine.upgrade()
            && let Some(live) = engine.units().services().session(&target.owner, &target.service)
        {
            let _ = live.unsubscribe(&target.uri).await;
        }
    }
}
