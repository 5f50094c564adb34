//! The resources and resource templates of a namespace's ready MCPServers under muster's URIs, `resources/read` routed to the server that owns one (by its URI, else by a template it fits), and subscriptions passed through.

use std::collections::BTreeSet;

use rmcp::model::{
    ClientRequest, ErrorData, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResult, Resource,
    ResourceTemplate, ServerResult,
};
use tokio_util::sync::CancellationToken;

use super::prompts::{ask, gone};
use super::served::{self, Served};
use crate::engine::Engine;
use crate::model::ObjectKey;

/// One offered resource or resource template.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    /// The resource (or template) as clients see it: its exposed URI, the rest as the server gave it.
    pub item: T,
    /// The object that owns the service.
    pub owner: ObjectKey,
    /// The service's name among the owner's.
    pub service: String,
    /// Its URI (or URI template) on the server.
    pub uri: String,
}

/// What a namespace's servers offer of resources now.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The resources, sorted by exposed URI, each once (on a clash the server first by
    /// namespace/name, then service, wins).
    pub resources: Vec<Entry<Resource>>,
    /// The templates, sorted by exposed URI template, each once.
    pub templates: Vec<Entry<ResourceTemplate>>,
}

/// Where a read (or subscription) of one exposed URI goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// The object that owns the service.
    pub owner: ObjectKey,
    /// The service's name among the owner's.
    pub service: String,
    /// The URI on the server.
    pub uri: String,
}

impl Listing {
    /// Where `uri` (exposed) goes: the listed resource with that URI, else the first template
    /// it fits (see [`fits`]), the URI given to the server without the prefix its template got.
    pub fn target(&self, uri: &str) -> Option<Target> {
        if let Some(e) = self.resources.iter().find(|e| e.item.uri == uri) {
            return Some(Target { owner: e.owner.clone(), service: e.service.clone(), uri: e.uri.clone() });
        }
        self.templates.iter().find_map(|e| {
            let added = e.item.uri_template.len().checked_sub(e.uri.len())?;
            let head = e.item.uri_template.get(..added)?;
            let rest = uri.strip_prefix(head)?;
            fits(rest, &e.uri).then(|| Target { owner: e.owner.clone(), service: e.service.clone(), uri: rest.into() })
        })
    }

    /// The exposed URIs of the resources and templates (a template's marked `template:`).
    pub fn names(&self) -> BTreeSet<String> {
        let resources = self.resources.iter().map(|e| e.item.uri.clone());
        resources.chain(self.templates.iter().map(|e| format!("template:{}", e.item.uri_template))).collect()
    }
}

/// What the servers of `namespace` offer of resources now. Only servers that offer tools now
/// offer resources.
pub fn list(engine: &Engine, namespace: &str) -> Listing {
    collect(served::servers(engine, namespace))
}

fn collect(servers: Vec<Served>) -> Listing {
    let mut seen = BTreeSet::new();
    let mut seen_t = BTreeSet::new();
    let mut out = Listing::default();
    for s in servers {
        for r in s.live.offered.resources.iter() {
            let exposed = s.naming.uri(&r.uri);
            if seen.insert(exposed.clone()) {
                let mut item = r.clone();
                item.uri = exposed;
                out.resources.push(Entry {
                    item,
                    owner: s.owner.clone(),
                    service: s.service.clone(),
                    uri: r.uri.clone(),
                });
            }
        }
        for t in s.live.offered.templates.iter() {
            let exposed = s.naming.uri(&t.uri_template);
            if seen_t.insert(exposed.clone()) {
                let mut item = t.clone();
                item.uri_template = exposed;
                let uri = t.uri_template.clone();
                out.templates.push(Entry { item, owner: s.owner.clone(), service: s.service.clone(), uri });
            }
        }
    }
    out.resources.sort_by(|a, b| a.item.uri.cmp(&b.item.uri));
    out.templates.sort_by(|a, b| a.item.uri_template.cmp(&b.item.uri_template));
    out
}

/// Whether `uri` fits the RFC 6570 `template`: its literal text as it is, each `{…}` standing
/// for some text (`{var}` for at least one character and no `/`, `?` or `#`; `{+var}`, `{#var}`
/// for any; `{/var}`, `{.var}`, `{;var}`, `{?var}`, `{&var}` for any, possibly none).
pub fn fits(uri: &str, template: &str) -> bool {
    let Some(open) = template.find('{') else { return uri == template };
    let Some(close) = template[open..].find('}').map(|c| open + c) else { return uri == template };
    let Some(rest) = uri.strip_prefix(&template[..open]) else { return false };
    let expr = &template[open + 1..close];
    let after = &template[close + 1..];
    let (min, any) = match expr.chars().next() {
        Some('+' | '#') => (1, true),
        Some('/' | '.' | ';' | '?' | '&') => (0, true),
        _ => (1, false),
    };
    let mut ends: Vec<usize> = rest.char_indices().map(|(i, _)| i).chain([rest.len()]).filter(|i| *i >= min).collect();
    ends.reverse();
    ends.into_iter().any(|i| {
        let taken = &rest[..i];
        (any || !taken.contains(['/', '?', '#'])) && fits(&rest[i..], after)
    })
}

/// Reads the resource `uri` (exposed) of `namespace` from its server. The error is what the
/// client is answered: a URI no server offers is invalid params; a server's error keeps its
/// code, redacted.
pub async fn read(
    engine: &Engine,
    namespace: &str,
    uri: &str,
    cancel: CancellationToken,
) -> Result<ReadResourceResult, ErrorData> {
    let target = list(engine, namespace).target(uri).ok_or_else(|| not_offered(namespace, uri))?;
    let live = engine.units().services().session(&target.owner, &target.service).ok_or_else(|| gone(&target.owner))?;
    let request =
        ClientRequest::ReadResourceRequest(ReadResourceRequest::new(ReadResourceRequestParams::new(&target.uri)));
    match ask(&live, request, "resources/read", cancel).await? {
        ServerResult::ReadResourceResult(mut r) => {
            // The contents name the URI the client asked for, as it knows it.
            for c in &mut r.contents {
                rename_contents(c, &target.uri, uri);
            }
            Ok(r)
        }
        _ => Err(ErrorData::internal_error(
            format!("MCPServer {} answered resources/read with something other than contents", target.owner),
            None,
        )),
    }
}

/// Renames the URI of one read content from the server's (`from`) to the exposed one.
fn rename_contents(c: &mut rmcp::model::ResourceContents, from: &str, to: &str) {
    if from == to {
        return;
    }
    let Ok(mut v) = serde_json::to_value(&*c) else { return };
    if v["uri"] == from {
        v["uri"] = to.into();
        if let Ok(renamed) = serde_json::from_value(v) {
            *c = renamed;
        }
    }
}

/// The error of a URI that no server of the namespace offers.
pub(crate) fn not_offered(namespace: &str, uri: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no ready MCPServer of namespace {namespace} offers resource {uri} (it is neither listed nor fits a \
             resource template); list the resources and templates again"
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_fits_a_template_by_its_literal_text_and_expressions() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(fits("demo://resource/dynamic/text/42", t));
        assert!(!fits("demo://resource/dynamic/text/", t), "a simple expression takes at least one character");
        assert!(!fits("demo://resource/dynamic/text/4/2", t), "nor a slash");
        assert!(!fits("demo://resource/dynamic/blob/42", t));
        assert!(fits("file:///a/b/c.txt", "file:///{+path}"));
        assert!(fits("repo/x/issues/7", "repo/{owner}/issues/{n}"));
        assert!(!fits("repo/x/pulls/7", "repo/{owner}/issues/{n}"));
        assert!(fits("search", "search{?q,lang}") && fits("search?q=a&lang=en", "search{?q,lang}"));
        assert!(fits("plain", "plain") && !fits("plainer", "plain"));
    }

    fn entry<T>(item: T, owner: &str, uri: &str) -> Entry<T> {
        Entry { item, owner: ObjectKey::new("MCPServer", "default", owner), service: "main".into(), uri: uri.into() }
    }

    #[test]
    fn a_read_goes_to_the_listed_resource_else_to_the_template_it_fits() {
        let listing = Listing {
            resources: vec![entry(Resource::new("demo://static/a", "a"), "ev", "demo://static/a")],
            templates: vec![
                entry(ResourceTemplate::new("demo://dyn/{id}", "d"), "ev", "demo://dyn/{id}"),
                entry(ResourceTemplate::new("x_mem_notes/{id}", "n"), "mem", "notes/{id}"),
            ],
        };
        let to = |owner: &str, uri: &str| {
            Some(Target {
                owner: ObjectKey::new("MCPServer", "default", owner),
                service: "main".into(),
                uri: uri.into(),
            })
        };
        assert_eq!(listing.target("demo://static/a"), to("ev", "demo://static/a"));
        assert_eq!(listing.target("demo://dyn/7"), to("ev", "demo://dyn/7"));
        assert_eq!(listing.target("x_mem_notes/today"), to("mem", "notes/today"), "the prefix goes before the server");
        assert_eq!(listing.target("notes/today"), None, "the server's own URI is not offered");
        assert_eq!(listing.target("demo://static/b"), None);
        assert_eq!(
            listing.names().into_iter().collect::<Vec<_>>(),
            ["demo://static/a", "template:demo://dyn/{id}", "template:x_mem_notes/{id}"]
        );
    }
}
