//! HTTP routing: Kubernetes paths to verbs, query parameters, fault injection and the request log.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use crate::faults::{RequestRecord, Verb};
use crate::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::{Shared, lock};
use crate::status::{ApiError, Cause};
use crate::store::WatchFrom;
use crate::verbs::{self, DeleteOptions, ListOptions, PatchKind, WriteOptions};
use crate::{discovery, watch};

/// The axum router: every path goes to one handler that parses Kubernetes paths itself.
pub(crate) fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(shared)
}

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList {
        group: String,
        version: String,
    },
    Resource {
        group: String,
        version: String,
        plural: String,
        namespace: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
    Unknown,
}

fn parse_path(path: &str) -> Route {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest) = match s.as_slice() {
        ["version"] => return Route::Version,
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    let resource = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| Route::Resource {
        group: group.to_string(),
        version: version.to_string(),
        plural: plural.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        sub: sub.map(str::to_string),
    };
    match rest {
        [] => Route::ResourceList { group: group.to_string(), version: version.to_string() },
        ["namespaces", ns, x, more @ ..] if !(group.is_empty() && (*x == "status" || *x == "finalize")) => match more {
            [] => resource(x, Some(ns), None, None),
            [name] => resource(x, Some(ns), Some(name), None),
            [name, sub] => resource(x, Some(ns), Some(name), Some(sub)),
            _ => Route::Unknown,
        },
        [plural] => resource(plural, None, None, None),
        [plural, name] => resource(plural, None, Some(name), None),
        [plural, name, sub] => resource(plural, None, Some(name), Some(sub)),
        _ => Route::Unknown,
    }
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect()
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("true" | "1"))
}

fn classify(method: &Method, route: &Route, q: &[(String, String)]) -> Verb {
    match route {
        Route::Resource { name, .. } => match (method.as_str(), name.is_some()) {
            ("GET", true) => Verb::Get,
            ("GET", false) if truthy(param(q, "watch")) => Verb::Watch,
            ("GET", false) => Verb::List,
            ("POST", _) => Verb::Create,
            ("PUT", _) => Verb::Update,
            ("PATCH", _) => Verb::Patch,
            ("DELETE", true) => Verb::Delete,
            ("DELETE", false) => Verb::DeleteCollection,
            _ => Verb::Other,
        },
        Route::Unknown => Verb::Other,
        _ => Verb::Discovery,
    }
}

fn json_response(code: u16, v: &Value) -> Response {
    let mut r = Response::new(Body::from(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(err: &ApiError) -> Response {
    let mut r = json_response(err.code, &err.to_status());
    if let Some(seconds) = err.retry_after
        && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = parse_path(uri.path());
    let q = query_pairs(&uri);
    let verb = classify(&method, &route, &q);
    let (resource, subresource, namespace, name) = match &route {
        Route::Resource { plural, sub, namespace, name, .. } => {
            (Some(plural.clone()), sub.clone(), namespace.clone(), name.clone())
        }
        _ => (None, None, None, None),
    };
    let mut record = RequestRecord {
        method: method.as_str().to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or_default().to_string(),
        verb,
        resource,
        subresource,
        namespace,
        name,
        status: 0,
        injected: false,
    };
    let injected = crate::faults::take(&mut lock(&shared.faults), &record);
    let response = match injected {
        Some(err) => {
            record.injected = true;
            error_response(&err)
        }
        None => serve(&shared, &method, &route, verb, &q, &headers, &body).unwrap_or_else(|e| error_response(&e)),
    };
    record.status = response.status().as_u16();
    tracing::debug!(method = %record.method, path = %record.path, query = %record.query, status = record.status, "fake apiserver request");
    lock(&shared.requests).push(record);
    shared.activity.send_modify(|n| *n += 1);
    response
}

fn serve(
    shared: &Shared,
    method: &Method,
    route: &Route,
    verb: Verb,
    q: &[(String, String)],
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let aggregated = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=APIGroupDiscoveryList"));
    let discovery_response = |v: Value| {
        let mut r = json_response(200, &v);
        if aggregated {
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED));
        }
        r
    };
    if verb == Verb::Discovery && method != Method::GET {
        return Err(ApiError::method_not_allowed(format!("{method} is not allowed on discovery documents")));
    }
    let (group, version, plural, namespace, name, sub) = match route {
        Route::Version => return Ok(json_response(200, &discovery::version())),
        Route::CoreVersions => {
            let store = lock(&shared.store);
            return Ok(if aggregated {
                discovery_response(discovery::aggregated(&store.registry, true))
            } else {
                json_response(200, &discovery::api_versions(&shared.addr.to_string()))
            });
        }
        Route::Groups => {
            let store = lock(&shared.store);
            return Ok(if aggregated {
                discovery_response(discovery::aggregated(&store.registry, false))
            } else {
                json_response(200, &discovery::api_groups(&store.registry))
            });
        }
        Route::Group(g) => {
            let store = lock(&shared.store);
            return discovery::api_group(&store.registry, g)
                .map(|v| json_response(200, &v))
                .ok_or_else(|| ApiError::no_route(&format!("/apis/{g}")));
        }
        Route::ResourceList { group, version } => {
            let store = lock(&shared.store);
            return discovery::resource_list(&store.registry, group, version)
                .map(|v| json_response(200, &v))
                .ok_or_else(|| ApiError::no_route(&format!("{group}/{version}")));
        }
        Route::Unknown => return Err(ApiError::no_route(&format!("{method}"))),
        Route::Resource { group, version, plural, namespace, name, sub } => {
            (group, version, plural, namespace, name, sub)
        }
    };
    let def = {
        let store = lock(&shared.store);
        store.registry.get(group, version, plural).cloned()
    };
    let path_text = || format!("{group}/{version}/{plural}");
    let def = def.ok_or_else(|| ApiError::no_route(&path_text()))?;
    // A namespace in the path of a cluster-scoped resource, or an object of a namespaced resource
    // without one, names nothing.
    if (namespace.is_some() && !def.namespaced) || (def.namespaced && namespace.is_none() && name.is_some()) {
        return Err(ApiError::no_route(&path_text()));
    }
    let status = match sub.as_deref() {
        None => false,
        Some("status") if def.status_subresource && name.is_some() => true,
        Some(_) => return Err(ApiError::no_route(&path_text())),
    };
    let ns = namespace.as_deref();
    let dry_run = match param(q, "dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!("unsupported dry run value: {other:?} (only \"All\")")));
        }
    };
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let manager = match param(q, "fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => user_agent.split('/').next().filter(|s| !s.is_empty()).unwrap_or("unknown").to_string(),
    };
    let w = WriteOptions { manager, force: truthy(param(q, "force")), dry_run };
    let name = name.as_deref();
    match (verb, name) {
        (Verb::Get, Some(name)) => {
            // GET on `/status` answers with the whole object, like the real server.
            let store = lock(&shared.store);
            Ok(json_response(200, &verbs::get(&store, &def, ns, name)?))
        }
        (Verb::List, None) => {
            let opts = list_options(q)?;
            let store = lock(&shared.store);
            Ok(json_response(200, &verbs::list(&store, &def, ns, &opts)?))
        }
        (Verb::Watch, None) => start_watch(shared, def, ns, q),
        (Verb::Create, None) => {
            let body = parse_body(body)?;
            let (code, obj) = verbs::create(&mut lock(&shared.store), &def, ns, body, &w)?;
            Ok(json_response(code, &obj))
        }
        (Verb::Update, Some(name)) => {
            let body = parse_body(body)?;
            let (code, obj) = verbs::replace(&mut lock(&shared.store), &def, ns, name, status, body, &w)?;
            Ok(json_response(code, &obj))
        }
        (Verb::Patch, Some(name)) => {
            let kind = patch_kind(&def, headers)?;
            if kind == PatchKind::Apply && param(q, "fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    vec![Cause::required("fieldManager", "is required for apply patch")],
                ));
            }
            if kind != PatchKind::Apply && w.force {
                return Err(ApiError::invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    vec![Cause::forbidden("force", "may not be specified for non-apply patch")],
                ));
            }
            let (code, obj) = verbs::patch(&mut lock(&shared.store), &def, ns, name, status, kind, body, &w)?;
            Ok(json_response(code, &obj))
        }
        (Verb::Delete, Some(name)) if !status => {
            let mut opts = DeleteOptions::parse(body)?;
            opts.dry_run |= dry_run;
            let (code, obj) = verbs::delete(&mut lock(&shared.store), &def, ns, name, &opts)?;
            Ok(json_response(code, &obj))
        }
        (Verb::DeleteCollection, None) => {
            let mut opts = DeleteOptions::parse(body)?;
            opts.dry_run |= dry_run;
            let list = list_options(q)?;
            let (code, obj) = verbs::delete_collection(&mut lock(&shared.store), &def, ns, &list, &opts)?;
            Ok(json_response(code, &obj))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        ))),
    }
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(v)
}

fn patch_kind(def: &ResourceDef, headers: &HeaderMap) -> Result<PatchKind, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = ct.split(';').next().unwrap_or_default().trim();
    let mut accepted =
        vec!["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];
    if def.strategic_merge_patch {
        accepted.push("application/strategic-merge-patch+json");
    }
    match media {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/apply-patch+yaml" => Ok(PatchKind::Apply),
        "application/strategic-merge-patch+json" if def.strategic_merge_patch => Ok(PatchKind::Strategic),
        other => Err(ApiError::unsupported_media_type(other, &accepted)),
    }
}

fn list_options(q: &[(String, String)]) -> Result<ListOptions, ApiError> {
    let limit = match param(q, "limit").filter(|l| !l.is_empty()) {
        Some(l) => {
            Some(l.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?.max(0) as usize)
        }
        None => None,
    };
    Ok(ListOptions {
        label_selector: param(q, "labelSelector").unwrap_or_default().to_string(),
        field_selector: param(q, "fieldSelector").unwrap_or_default().to_string(),
        limit,
        continue_token: param(q, "continue").filter(|c| !c.is_empty()).map(str::to_string),
        resource_version: param(q, "resourceVersion").map(str::to_string),
        resource_version_match: param(q, "resourceVersionMatch").map(str::to_string),
    })
}

fn watch_invalid(cause: Cause) -> ApiError {
    ApiError::invalid("ListOptions", "meta.k8s.io", "", vec![cause])
}

fn start_watch(
    shared: &Shared,
    def: ResourceDef,
    ns: Option<&str>,
    q: &[(String, String)],
) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(param(q, "labelSelector").unwrap_or_default())?;
    let fields = FieldSelector::parse(param(q, "fieldSelector").unwrap_or_default(), &def)?;
    let bookmarks = truthy(param(q, "allowWatchBookmarks"));
    let initial = truthy(param(q, "sendInitialEvents"));
    let rv_match = param(q, "resourceVersionMatch").filter(|m| !m.is_empty());
    if initial && rv_match != Some("NotOlderThan") {
        return Err(watch_invalid(Cause::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        )));
    }
    if initial && !bookmarks {
        return Err(watch_invalid(Cause::forbidden(
            "allowWatchBookmarks",
            "sendInitialEvents requires allowWatchBookmarks",
        )));
    }
    if !initial && rv_match.is_some() {
        return Err(watch_invalid(Cause::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch",
        )));
    }
    let from = match param(q, "resourceVersion").filter(|r| !r.is_empty() && *r != "0") {
        _ if initial => WatchFrom::InitialEvents,
        None => WatchFrom::Now,
        Some(rv) => WatchFrom::After(
            rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let timeout = match param(q, "timeoutSeconds").filter(|t| !t.is_empty()) {
        Some(t) => {
            Duration::from_secs(t.parse().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?)
        }
        None => Duration::from_secs(1800),
    };
    let cut = shared.cut_watches.subscribe();
    let opened = lock(&shared.store).watch(&def.storage_key(), ns, from, bookmarks);
    let body = match opened {
        Ok(events) => {
            let filter = watch::WatchFilter { def, namespace: ns.map(str::to_string), labels, fields, timeout };
            watch::stream(events, filter, cut, shared.activity.clone())
        }
        Err(oldest) => {
            let rv = param(q, "resourceVersion").unwrap_or_default();
            watch::error_stream(&ApiError::expired(format!("too old resource version: {rv} ({oldest})")))
        }
    };
    let mut r = Response::new(Body::new(body));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(g: &str, v: &str, p: &str, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource {
            group: g.into(),
            version: v.into(),
            plural: p.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            sub: sub.map(Into::into),
        }
    }

    #[test]
    fn paths() {
        assert_eq!(parse_path("/version"), Route::Version);
        assert_eq!(parse_path("/api"), Route::CoreVersions);
        assert_eq!(parse_path("/api/v1"), Route::ResourceList { group: "".into(), version: "v1".into() });
        assert_eq!(parse_path("/apis/g.io/v1"), Route::ResourceList { group: "g.io".into(), version: "v1".into() });
        assert_eq!(parse_path("/api/v1/namespaces"), res("", "v1", "namespaces", None, None, None));
        assert_eq!(parse_path("/api/v1/namespaces/a"), res("", "v1", "namespaces", None, Some("a"), None));
        assert_eq!(
            parse_path("/api/v1/namespaces/a/status"),
            res("", "v1", "namespaces", None, Some("a"), Some("status"))
        );
        assert_eq!(parse_path("/api/v1/namespaces/a/events"), res("", "v1", "events", Some("a"), None, None));
        assert_eq!(
            parse_path("/apis/g.io/v1/namespaces/a/ws/x/status"),
            res("g.io", "v1", "ws", Some("a"), Some("x"), Some("status"))
        );
        assert_eq!(parse_path("/apis/g.io/v1/ws"), res("g.io", "v1", "ws", None, None, None));
        assert_eq!(parse_path("/apis/g.io/v1/ws/x"), res("g.io", "v1", "ws", None, Some("x"), None));
        assert_eq!(parse_path("/apis/g.io/v1/namespaces/a/ws/x/status/more"), Route::Unknown);
        assert_eq!(parse_path("/healthz"), Route::Unknown);
    }
}
