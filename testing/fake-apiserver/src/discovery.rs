//! Discovery documents: `/version`, `/api`, `/apis`, group-version resource lists, and the
//! aggregated (apidiscovery.k8s.io/v2) form of `/api` and `/apis`.

use serde_json::{Value, json};

use crate::resource::{Registry, ResourceDef};

/// The `Accept` media type of aggregated discovery, as kube and kubectl send it.
pub(crate) const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// `/version`: a Kubernetes 1.33 server.
pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-steward-fake", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`: the core group's versions.
pub(crate) fn api_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_json(registry: &Registry, group: &str) -> Value {
    let versions = registry.versions(group);
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

/// `/apis`: every non-core group with its versions, preferred version first.
pub(crate) fn api_groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry.groups().iter().map(|g| group_json(registry, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`: one group.
pub(crate) fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    if registry.versions(group).is_empty() {
        return None;
    }
    let mut g = group_json(registry, group);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn defs<'a>(registry: &'a Registry, group: &'a str, version: &'a str) -> impl Iterator<Item = &'a ResourceDef> {
    registry.all().filter(move |d| d.group == group && d.version == version)
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources, each with its `/status` entry.
pub(crate) fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for d in defs(registry, group, version) {
        let mut r = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind,
            "verbs": VERBS, "storageVersionHash": "",
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        if d.status_subresource {
            resources.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": STATUS_VERBS}));
        }
    }
    if resources.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn aggregated_group(registry: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = registry
        .versions(group)
        .iter()
        .map(|v| {
            let resources: Vec<Value> = defs(registry, group, v)
                .map(|d| {
                    let kind = json!({"group": d.group, "version": d.version, "kind": d.kind});
                    let mut r = json!({
                        "resource": d.plural, "responseKind": kind, "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": d.singular, "verbs": VERBS,
                    });
                    if !d.short_names.is_empty() {
                        r["shortNames"] = json!(d.short_names);
                    }
                    if !d.categories.is_empty() {
                        r["categories"] = json!(d.categories);
                    }
                    if d.status_subresource {
                        r["subresources"] = json!([{"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}]);
                    }
                    r
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
}

/// Aggregated discovery of `/api` (core) or `/apis` (all other groups).
pub(crate) fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(registry, "")]
    } else {
        registry.groups().iter().map(|g| aggregated_group(registry, g)).collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}
