//! What a live MCP session offers besides tools: the server's prompts, resources and resource templates, listed when it declares them and again when it says they changed, bounded and cleaned of the service's secret values as its tools are; and its `notifications/resources/updated`, relayed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientRequest, PaginatedRequestParams, Prompt, Resource, ResourceTemplate, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleClient};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::timeout;

use super::probe::service_error_text;
use super::redact::Redactor;
use crate::model::ObjectKey;

/// The most prompts, resources or resource templates kept of one session, each: a server that
/// lists more has the rest left out (and a warning logged).
pub const MAX_ITEMS: usize = 1000;

/// The most pages read of one list: a server whose cursor never ends is read this far.
const MAX_PAGES: usize = 100;

/// The prompts, resources and resource templates of a live session, as its server last listed
/// them; empty for what the server does not declare, and until first listed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Offered {
    /// The server's prompts, by their names on the server.
    pub prompts: Arc<Vec<Prompt>>,
    /// The server's resources, by their URIs on the server.
    pub resources: Arc<Vec<Resource>>,
    /// The server's resource templates, by their URI templates on the server.
    pub templates: Arc<Vec<ResourceTemplate>>,
    /// The server accepts `resources/subscribe`.
    pub subscribe: bool,
    /// What was left out because its name or URI carries a secret value of the service
    /// (`prompt `NAME``, redacted), for the service's notice ([`Offered::notice`]).
    pub withheld: Vec<String>,
}

impl Offered {
    /// The notice the service's status shows while prompts or resources are left out for
    /// carrying a secret value; `None` when none is.
    pub fn notice(&self) -> Option<String> {
        (!self.withheld.is_empty()).then(|| {
            format!(
                "prompts and resources not offered: {} (a name or URI carries a secret value of this service, which \
                 Steward never shows; rename them on the server)",
                self.withheld.join(", ")
            )
        })
    }
}

/// A resource of a service changed: its server sent `notifications/resources/updated`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUpdate {
    /// The object that owns the service.
    pub owner: ObjectKey,
    /// The service's name among the owner's.
    pub service: String,
    /// The resource's URI on the server.
    pub uri: String,
}

/// What the server sent the session's client that concerns its prompts and resources.
#[derive(Debug)]
pub(crate) struct Events {
    changed: Notify,
    updated: broadcast::Sender<String>,
}

impl Default for Events {
    fn default() -> Self {
        Self { changed: Notify::new(), updated: broadcast::Sender::new(64) }
    }
}

impl Events {
    /// The server said its prompts or resources changed: they are listed again.
    pub(crate) fn lists_changed(&self) {
        self.changed.notify_one();
    }

    /// The server said the resource `uri` changed.
    pub(crate) fn updated(&self, uri: String) {
        let _ = self.updated.send(uri);
    }
}

/// Shared by every service of a manager: counts the changes of what live sessions offer, and
/// relays the servers' resource updates.
#[derive(Debug)]
pub(crate) struct Hub {
    changed: watch::Sender<u64>,
    updated: broadcast::Sender<ResourceUpdate>,
}

impl Default for Hub {
    fn default() -> Self {
        Self { changed: watch::Sender::new(0), updated: broadcast::Sender::new(256) }
    }
}

impl Hub {
    /// Says that what some live session offers (or which sessions are live) changed.
    pub(crate) fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later [`Hub::bump`].
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A receiver of every later resource update of every service.
    pub(crate) fn updates(&self) -> broadcast::Receiver<ResourceUpdate> {
        self.updated.subscribe()
    }
}

/// What ties one service's live cell to the others: its name, the hub, and the resources the
/// endpoint's clients are subscribed to (subscribed again on each new session).
#[derive(Debug, Default)]
pub(crate) struct Ties {
    pub(crate) owner: Option<ObjectKey>,
    pub(crate) service: String,
    pub(crate) hub: Arc<Hub>,
    pub(crate) wanted: Mutex<BTreeSet<String>>,
}

impl Ties {
    /// The ties of `owner`'s service `service`, reporting to `hub`.
    pub(crate) fn new(owner: ObjectKey, service: String, hub: Arc<Hub>) -> Self {
        Self { owner: Some(owner), service, hub, wanted: Mutex::default() }
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `uri` subscribed from now on; true when it was not.
    pub(crate) fn want(&self, uri: &str) -> bool {
        self.wanted().insert(uri.to_string())
    }

    /// Stops keeping `uri` subscribed; true when it was.
    pub(crate) fn unwant(&self, uri: &str) -> bool {
        self.wanted().remove(uri)
    }

    /// The URIs kept subscribed.
    pub(crate) fn wanted_now(&self) -> Vec<String> {
        self.wanted().iter().cloned().collect()
    }

    /// Relays an update of `uri` from this service's server.
    fn relay(&self, uri: String) {
        if let Some(owner) = &self.owner {
            let _ = self.hub.updated.send(ResourceUpdate { owner: owner.clone(), service: self.service.clone(), uri });
        }
    }
}

/// Lists what `peer`'s server declares (prompts, resources, templates), each request within
/// `limit`, cleaned with `redactor`. A list that fails is empty (and logged): prompts and
/// resources are optional, and the session's health is its tools'.
pub(crate) async fn list(peer: &Peer<RoleClient>, limit: Duration, redactor: &Redactor) -> Offered {
    let caps = peer.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
    let mut out = Offered::default();
    if caps.prompts.is_some() {
        let got = pages(
            peer,
            limit,
            "prompts/list",
            |p| ClientRequest::ListPromptsRequest(rmcp::model::ListPromptsRequest::with_param(p)),
            |r| match r {
                rmcp::model::ServerResult::ListPromptsResult(r) => Some((r.prompts, r.next_cursor)),
                _ => None,
            },
        )
        .await;
        out.prompts = Arc::new(clean(got, redactor, |p: &Prompt| p.name.clone(), "prompt", &mut out.withheld));
    }
    if let Some(resources) = &caps.resources {
        out.subscribe = resources.subscribe == Some(true);
        let got = pages(
            peer,
            limit,
            "resources/list",
            |p| ClientRequest::ListResourcesRequest(rmcp::model::ListResourcesRequest::with_param(p)),
            |r| match r {
                rmcp::model::ServerResult::ListResourcesResult(r) => Some((r.resources, r.next_cursor)),
                _ => None,
            },
        )
        .await;
        out.resources = Arc::new(clean(got, redactor, |r: &Resource| r.uri.clone(), "resource", &mut out.withheld));
        let got = pages(
            peer,
            limit,
            "resources/templates/list",
            |p| ClientRequest::ListResourceTemplatesRequest(rmcp::model::ListResourceTemplatesRequest::with_param(p)),
            |r| match r {
                rmcp::model::ServerResult::ListResourceTemplatesResult(r) => {
                    Some((r.resource_templates, r.next_cursor))
                }
                _ => None,
            },
        )
        .await;
        let key = |t: &ResourceTemplate| t.uri_template.clone();
        out.templates = Arc::new(clean(got, redactor, key, "resource template", &mut out.withheld));
    }
    out
}

/// Every page of one list, at most [`MAX_PAGES`] pages and [`MAX_ITEMS`] items; what was read
/// before a failure is kept.
async fn pages<T>(
    peer: &Peer<RoleClient>,
    limit: Duration,
    what: &str,
    request: impl Fn(PaginatedRequestParams) -> ClientRequest,
    items: impl Fn(rmcp::model::ServerResult) -> Option<(Vec<T>, Option<String>)>,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let answer = match timeout(limit, peer.send_request(request(params))).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::debug!(request = what, error = %service_error_text(&e), "cannot list what the server offers");
                break;
            }
            Err(_) => {
                tracing::debug!(
                    request = what,
                    "no answer in time; what the server offers is listed again on its next change"
                );
                break;
            }
        };
        let Some((page, next)) = items(answer) else {
            tracing::debug!(request = what, "the server answered with something other than a list");
            break;
        };
        out.extend(page);
        if out.len() > MAX_ITEMS {
            tracing::warn!(
                request = what,
                max = MAX_ITEMS,
                "the server lists more than Steward keeps; the rest is left out"
            );
            out.truncate(MAX_ITEMS);
            break;
        }
        match next {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => break,
        }
    }
    out
}

/// `items` as the host may store and show them: each text with the service's secret values
/// replaced, and no item whose key (a prompt's name, a resource's URI) carries one, or that no
/// longer reads as such an item once redacted. What is left out is logged and added to
/// `withheld` as `` what `key` ``, redacted.
pub(crate) fn clean<T: Serialize + DeserializeOwned>(
    items: Vec<T>,
    redactor: &Redactor,
    key: impl Fn(&T) -> String,
    what: &str,
    withheld: &mut Vec<String>,
) -> Vec<T> {
    if redactor.is_empty() {
        return items;
    }
    let mut left_out = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        let k = key(&item);
        if redactor.found_in(&k) {
            left_out.push(redactor.text(&k).into_owned());
            continue;
        }
        let Ok(mut value) = serde_json::to_value(&item) else {
            left_out.push(k);
            continue;
        };
        if !redactor.json(&mut value) {
            kept.push(item);
            continue;
        }
        match serde_json::from_value::<T>(value) {
            Ok(clean) => kept.push(clean),
            Err(_) => left_out.push(k),
        }
    }
    if !left_out.is_empty() {
        tracing::warn!(
            what,
            left_out = ?left_out,
            "not offered: their name or URI carries a secret value of this service, which Steward never shows"
        );
    }
    withheld.extend(left_out.into_iter().map(|k| format!("{what} `{k}`")));
    kept
}

/// Follows one published session: lists what it offers now and whenever its server says it
/// changed (or `refresh` is signalled), stores it with `store` (which says whether it
/// changed), subscribes again to the resources wanted, and relays the server's resource
/// updates. Runs until aborted.
pub(crate) async fn follow(
    peer: Peer<RoleClient>,
    events: Arc<Events>,
    refresh: Arc<Notify>,
    ties: Arc<Ties>,
    limit: Duration,
    redactor: Redactor,
    store: impl Fn(Offered) -> bool,
) {
    let mut updates = events.updated.subscribe();
    let mut first = true;
    loop {
        let offered = list(&peer, limit, &redactor).await;
        let subscribe = offered.subscribe;
        if store(offered) {
            ties.hub.bump();
        }
        if first && subscribe {
            for uri in ties.wanted_now() {
                let _ = subscribe_on(&peer, &uri, limit, true).await;
            }
        }
        first = false;
        loop {
            tokio::select! {
                () = events.changed.notified() => break,
                () = refresh.notified() => break,
                u = updates.recv() => match u {
                    Ok(uri) => ties.relay(uri),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

/// Sends `resources/subscribe` (or `unsubscribe`) for `uri` on `peer`, within `limit`; the
/// error says why it failed, in words. (rmcp calls these legacy, kept for the protocol
/// versions before 2026-07-28, which are the ones servers speak today.)
#[allow(deprecated)]
pub(crate) async fn subscribe_on(peer: &Peer<RoleClient>, uri: &str, limit: Duration, on: bool) -> Result<(), String> {
    let (request, method) = if on {
        (
            ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(SubscribeRequestParams::new(uri))),
            "resources/subscribe",
        )
    } else {
        (
            ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(UnsubscribeRequestParams::new(uri))),
            "resources/unsubscribe",
        )
    };
    match timeout(limit, peer.send_request(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(rmcp::ServiceError::McpError(e))) => Err(format!("the server refused {method}: {}", e.message)),
        Ok(Err(e)) => Err(format!("{method}: {}", service_error_text(&e))),
        Err(_) => Err(format!("{method}: no answer within {}", super::human(limit))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_prompt_or_resource_keyed_by_a_secret_is_left_out_and_the_others_lose_it() {
        let values = ["sk-live-42".to_string()];
        let r = Redactor::new(&values);
        let prompts: Vec<Prompt> = serde_json::from_value(json!([
            {"name": "greet", "description": "uses sk-live-42", "arguments": [{"name": "who", "description": "sk-live-42"}]},
            {"name": "p_sk-live-42"},
        ]))
        .unwrap();
        let mut withheld = Vec::new();
        let kept = clean(prompts, &r, |p: &Prompt| p.name.clone(), "prompt", &mut withheld);
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            json!([{"name": "greet", "description": "uses <redacted>", "arguments": [{"name": "who", "description": "<redacted>"}]}])
        );
        let resources: Vec<Resource> = serde_json::from_value(json!([
            {"uri": "file:///a", "name": "a"},
            {"uri": "file:///sk-live-42", "name": "b"},
        ]))
        .unwrap();
        let kept = clean(resources, &r, |x: &Resource| x.uri.clone(), "resource", &mut withheld);
        assert_eq!(kept.iter().map(|x| x.uri.as_str()).collect::<Vec<_>>(), ["file:///a"]);
        // What was left out is named, redacted, for the service's notice.
        assert_eq!(withheld, ["prompt `p_<redacted>`", "resource `file:///<redacted>`"]);
        let notice = Offered { withheld, ..Offered::default() }.notice().unwrap();
        assert!(notice.starts_with("prompts and resources not offered: prompt `p_<redacted>`"), "{notice}");
        assert!(!notice.contains("sk-live-42"), "{notice}");
        let mut none = Vec::new();
        let key = |p: &Prompt| p.name.clone();
        let all = clean(vec![Prompt::new("x", None::<String>, None)], &Redactor::default(), key, "p", &mut none);
        assert_eq!((all.len(), none.len()), (1, 0));
        assert_eq!(Offered::default().notice(), None);
    }

    #[test]
    fn ties_keep_the_wanted_uris_once_each() {
        let t = Ties::default();
        assert!(t.want("a://1") && !t.want("a://1") && t.want("a://2"));
        assert_eq!(t.wanted_now(), ["a://1", "a://2"]);
        assert!(t.unwant("a://1") && !t.unwant("a://1"));
        assert_eq!(t.wanted_now(), ["a://2"]);
    }
}
