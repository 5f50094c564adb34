//! The semantics of each verb (get, list, create, update, patch, apply, delete) on the store,
//! following the API server's rules for metadata, status, generation, finalizers and conflicts.

use serde_json::{Map, Value, json};

use crate::apply::{ManagedFields, ManagerKey, Operation, Scope};
use crate::meta;
use crate::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, Cause, GroupResource};
use crate::store::{ObjKey, Store, crd_key, key_of, namespace_key};

/// Options shared by writes.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteOptions {
    /// The field manager (query parameter, else the User-Agent's product, else "unknown").
    pub manager: String,
    /// `force=true` (apply only).
    pub force: bool,
    /// `dryRun=All`: validate and answer, but store nothing.
    pub dry_run: bool,
}

/// The patch media types the server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// Query options of a list.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    pub label_selector: String,
    pub field_selector: String,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// The object as served at `def`'s group/version: `apiVersion` and `kind` set accordingly.
pub(crate) fn present(def: &ResourceDef, obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!(def.api_version()));
        map.insert("kind".into(), json!(def.kind));
    }
    obj
}

fn okey(def: &ResourceDef, ns: Option<&str>, name: &str) -> ObjKey {
    (if def.namespaced { ns.unwrap_or_default().to_string() } else { String::new() }, name.to_string())
}

fn scope(def: &ResourceDef, status: bool) -> Scope {
    match (def.status_subresource, status) {
        (_, true) => Scope::StatusOnly,
        (true, false) => Scope::NoStatus,
        (false, false) => Scope::All,
    }
}

fn manager_key(manager: &str, operation: Operation, status: bool) -> ManagerKey {
    ManagerKey {
        manager: manager.to_string(),
        operation,
        subresource: if status { "status".into() } else { String::new() },
    }
}

/// GET one object.
pub(crate) fn get(store: &Store, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
    let stored = store.stored(&def.storage_key(), &okey(def, ns, name));
    stored.map(|s| present(def, &s.obj)).ok_or_else(|| ApiError::not_found(&def.group_resource(), name))
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))
}

fn too_large(rv: u64, current: u64) -> ApiError {
    ApiError::new(504, "Timeout", format!("Too large resource version: {rv}, current: {current}"))
}

/// LIST, with selectors, pagination and resourceVersion semantics:
/// unset / "0" / `NotOlderThan`: the current state (504 when asked for a future version);
/// `Exact` and `continue`: the state at that version, rebuilt from the event history
/// (410 Expired once the history no longer reaches back that far).
pub(crate) fn list(store: &Store, def: &ResourceDef, ns: Option<&str>, q: &ListOptions) -> Result<Value, ApiError> {
    let labels = LabelSelector::parse(&q.label_selector)?;
    let fields = FieldSelector::parse(&q.field_selector, def)?;
    let (at, start_after) = match &q.continue_token {
        Some(token) => {
            let (rv, key) = decode_continue(token)?;
            (Some(rv), Some(key))
        }
        None => {
            let rv = q.resource_version.as_deref().filter(|r| !r.is_empty());
            match (rv, q.resource_version_match.as_deref().filter(|m| !m.is_empty())) {
                (None, Some(_)) => {
                    return Err(ApiError::invalid(
                        "ListOptions",
                        "meta.k8s.io",
                        "",
                        vec![Cause::forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        )],
                    ));
                }
                (Some(rv), Some("Exact")) => {
                    let rv = parse_rv(rv)?;
                    if rv == 0 {
                        return Err(ApiError::invalid(
                            "ListOptions",
                            "meta.k8s.io",
                            "",
                            vec![Cause::forbidden(
                                "resourceVersionMatch",
                                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                            )],
                        ));
                    }
                    if rv > store.rv {
                        return Err(too_large(rv, store.rv));
                    }
                    (Some(rv), None)
                }
                (Some(rv), None | Some("NotOlderThan")) => {
                    let rv = parse_rv(rv)?;
                    if rv > store.rv {
                        return Err(too_large(rv, store.rv));
                    }
                    (None, None)
                }
                (_, Some(other)) => {
                    return Err(ApiError::invalid(
                        "ListOptions",
                        "meta.k8s.io",
                        "",
                        vec![Cause::unsupported(
                            "resourceVersionMatch",
                            &format!("{other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
                        )],
                    ));
                }
                (None, None) => (None, None),
            }
        }
    };
    let list_rv = at.unwrap_or(store.rv);
    let objects = store.snapshot(&def.storage_key(), at).map_err(|oldest| {
        if q.continue_token.is_some() {
            ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
        } else {
            ApiError::expired(format!("The resourceVersion for the provided list is too old (oldest retained: {oldest})."))
        }
    })?;
    let ns_filter = if def.namespaced { ns } else { None };
    let matching: Vec<(&ObjKey, &std::sync::Arc<Value>)> = objects
        .iter()
        .filter(|(k, _)| start_after.as_ref().is_none_or(|after| *k > after))
        .filter(|(k, _)| ns_filter.is_none_or(|ns| k.0 == ns))
        .filter(|(_, o)| labels.matches(o) && fields.matches(o))
        .collect();
    let limit = q.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let page = matching.len().min(limit);
    let items: Vec<Value> = matching[..page].iter().map(|(_, o)| present(def, o)).collect();
    let remaining = matching.len() - page;
    let last_key = page.checked_sub(1).map(|i| matching[i].0.clone());
    let more = remaining > 0;
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), json!(list_rv.to_string()));
    if more && let Some(last) = last_key {
        metadata.insert("continue".into(), json!(encode_continue(list_rv, &last)));
        if q.label_selector.is_empty() && q.field_selector.is_empty() {
            metadata.insert("remainingItemCount".into(), json!(remaining));
        }
    }
    Ok(json!({"apiVersion": def.api_version(), "kind": def.list_kind(), "metadata": metadata, "items": items}))
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    format!("v1:{rv}:{}/{}", key.0, key.1)
}

fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let rest = token.strip_prefix("v1:").ok_or_else(bad)?;
    let (rv, key) = rest.split_once(':').ok_or_else(bad)?;
    let (ns, name) = key.split_once('/').ok_or_else(bad)?;
    Ok((rv.parse().map_err(|_| bad())?, (ns.to_string(), name.to_string())))
}

fn check_type(def: &ResourceDef, body: &mut Value) -> Result<(), ApiError> {
    let map = body.as_object_mut().ok_or_else(|| ApiError::bad_request("the request body must be a JSON object"))?;
    if let Some(v) = map.get("apiVersion").and_then(Value::as_str)
        && v != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(k) = map.get("kind").and_then(Value::as_str)
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            def.kind
        )));
    }
    map.insert("apiVersion".into(), json!(def.api_version()));
    map.insert("kind".into(), json!(def.kind));
    if map.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

fn without_metadata(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
    }
    obj
}

fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&def.kind, &def.group, name, causes)
}

fn is_crd(def: &ResourceDef) -> bool {
    def.storage_key() == crd_key()
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.storage_key() == namespace_key()
}

/// The result of a write: HTTP code and the object to answer with.
pub(crate) type WriteResult = Result<(u16, Value), ApiError>;

/// POST: create an object (Update ownership for `w.manager`).
pub(crate) fn create(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    body: Value,
    w: &WriteOptions,
) -> WriteResult {
    create_with(store, def, ns, body, w, None)
}

fn create_with(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    mut body: Value,
    w: &WriteOptions,
    applied: Option<ManagedFields>,
) -> WriteResult {
    check_type(def, &mut body)?;
    if crate::secret::is_secret(def) {
        crate::secret::normalize(&mut body)?;
    }
    let ids_name_suffix = store.ids.name_suffix();
    let uid = store.ids.uid();
    let m = meta::meta_mut(&mut body);
    if def.namespaced {
        let Some(ns) = ns else {
            return Err(ApiError::method_not_allowed(format!(
                "create is not supported on the cluster-wide collection of the namespaced resource {}",
                def.plural
            )));
        };
        if let Some(body_ns) = m.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty())
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        m.insert("namespace".into(), json!(ns));
    } else {
        m.remove("namespace");
    }
    let name = match m.get("name").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(name) => name.to_string(),
        None => match m.get("generateName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(prefix) => format!("{prefix}{ids_name_suffix}"),
            None => {
                return Err(invalid(
                    def,
                    "",
                    vec![Cause::required("metadata.name", "name or generateName is required")],
                ));
            }
        },
    };
    m.insert("name".into(), json!(name));
    if m.get("resourceVersion").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::internal("resourceVersion should not be set on objects to be created"));
    }
    let mut causes: Vec<Cause> = meta::validate_name(&name, is_namespace(def)).into_iter().collect();
    causes.extend(meta::validate_labels_annotations(m));
    if !causes.is_empty() {
        return Err(invalid(def, &name, causes));
    }
    if let (true, Some(ns)) = (def.namespaced, ns) {
        match store.stored(&namespace_key(), &(String::new(), ns.to_string())) {
            None => return Err(ApiError::not_found(&GroupResource { group: "", resource: "namespaces" }, ns)),
            Some(s) if meta::meta_str(&s.obj, "deletionTimestamp").is_some() => {
                return Err(ApiError::forbidden(format!(
                    "{} {name:?} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    def.group_resource()
                )));
            }
            Some(_) => {}
        }
    }
    let key = okey(def, ns, &name);
    if store.stored(&def.storage_key(), &key).is_some() {
        return Err(ApiError::already_exists(&def.group_resource(), &name));
    }
    for field in ["deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"] {
        m.remove(field);
    }
    m.insert("uid".into(), json!(uid));
    m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    m.insert("generation".into(), json!(1));
    crate::builtin::check(def, &body)?;
    if def.status_subresource
        && let Some(map) = body.as_object_mut()
    {
        map.remove("status");
    }
    if is_crd(def) {
        crate::crd::validate(&body)?;
        crate::crd::default_and_status(&mut body, None);
    }
    if is_namespace(def) {
        meta::meta_mut(&mut body)
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|l| l.insert("kubernetes.io/metadata.name".into(), json!(name)));
        body["spec"] = json!({"finalizers": ["kubernetes"]});
        body["status"] = json!({"phase": "Active"});
    }
    let fields = match applied {
        Some(fields) => fields,
        None => {
            let mut fields = ManagedFields::default();
            let mk = manager_key(&w.manager, Operation::Update, false);
            fields.record_update(mk, &def.api_version(), None, &body, scope(def, false));
            fields
        }
    };
    if w.dry_run {
        return Ok((201, present(def, &body)));
    }
    let stored = store.commit(&def.storage_key(), body, fields);
    if is_crd(def) {
        store.sync_crd(&stored);
    }
    Ok((201, present(def, &stored)))
}

/// Turns a full new object from a PUT (or a patched object) into what is stored, checking
/// preconditions and applying the status-subresource, metadata and generation rules.
fn prepare_update(def: &ResourceDef, old: &Value, mut new: Value, status: bool) -> Result<Value, ApiError> {
    let name = meta::meta_str(old, "name").unwrap_or_default().to_string();
    let gr = def.group_resource();
    if let Some(rv) = meta::meta_str(&new, "resourceVersion")
        && Some(rv) != meta::meta_str(old, "resourceVersion")
    {
        return Err(ApiError::stale(&gr, &name));
    }
    if let Some(uid) = meta::meta_str(&new, "uid")
        && Some(uid) != meta::meta_str(old, "uid")
    {
        return Err(ApiError::conflict(
            &gr,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::meta_str(old, "uid").unwrap_or_default()
            ),
        ));
    }
    if status {
        let mut out = old.clone();
        match new.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                out.as_object_mut().map(|m| m.remove("status"));
            }
        }
        return Ok(out);
    }
    let old_meta = meta::meta(old).cloned().unwrap_or_default();
    let m = meta::meta_mut(&mut new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
        "namespace",
        "name",
    ] {
        match old_meta.get(field) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
    m.remove("managedFields");
    m.remove("selfLink");
    let mut causes = meta::validate_labels_annotations(m);
    if old_meta.contains_key("deletionTimestamp") {
        let old_fins = meta::finalizers(old);
        let added: Vec<String> = meta::finalizers(&new).into_iter().filter(|f| !old_fins.contains(f)).collect();
        if !added.is_empty() {
            causes.push(Cause::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            ));
        }
    }
    if !causes.is_empty() {
        return Err(invalid(def, &name, causes));
    }
    if def.status_subresource
        && let Some(map) = new.as_object_mut()
    {
        match old.get("status") {
            Some(s) => map.insert("status".into(), s.clone()),
            None => map.remove("status"),
        };
    }
    if without_metadata(&new) != without_metadata(old) {
        let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        meta::meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
    }
    Ok(new)
}

fn check_url_identity(def: &ResourceDef, body: &Value, ns: Option<&str>, name: &str) -> Result<(), ApiError> {
    if let Some(n) = meta::meta_str(body, "name")
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if def.namespaced
        && let (Some(body_ns), Some(ns)) = (meta::meta_str(body, "namespace"), ns)
        && body_ns != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// Stores an update computed by `prepare_update`: no write when nothing changed; removal when the
/// last finalizer of a deleting object went; CRD registration kept in sync.
fn write_update(
    store: &mut Store,
    def: &ResourceDef,
    old: &Value,
    mut new: Value,
    fields: ManagedFields,
    w: &WriteOptions,
) -> WriteResult {
    let skey = def.storage_key();
    let okey = key_of(old);
    if crate::secret::is_secret(def) {
        crate::secret::normalize(&mut new)?;
    }
    crate::builtin::check(def, &new)?;
    if is_crd(def) {
        crate::crd::validate(&new)?;
        for (path, label) in [
            (&["spec", "group"][..], "spec.group"),
            (&["spec", "names", "plural"][..], "spec.names.plural"),
            (&["spec", "scope"][..], "spec.scope"),
        ] {
            let get = |o: &Value| path.iter().try_fold(o, |cur, p| cur.get(*p)).cloned();
            if get(old) != get(&new) {
                return Err(invalid(
                    def,
                    &okey.1,
                    vec![Cause::invalid(label, &get(&new).unwrap_or(Value::Null), "field is immutable")],
                ));
            }
        }
        crate::crd::default_and_status(&mut new, Some(old));
        if meta::meta_str(old, "deletionTimestamp").is_some() {
            crate::crd::set_terminating(&mut new);
        }
    }
    let mut unchanged = new.clone();
    if let Some(rv) = meta::meta_str(old, "resourceVersion") {
        meta::meta_mut(&mut unchanged).insert("resourceVersion".into(), json!(rv));
    }
    if w.dry_run {
        return Ok((200, present(def, &unchanged)));
    }
    if unchanged == *old {
        store.set_fields(&skey, &okey, fields);
        return Ok((200, present(def, old)));
    }
    let stored = store.commit(&skey, new, fields);
    if is_crd(def) {
        store.sync_crd(&stored);
    }
    if meta::meta_str(&stored, "deletionTimestamp").is_some()
        && meta::finalizers(&stored).is_empty()
        && !is_namespace(def)
    {
        store.remove(&skey, &okey);
    }
    reconcile(store);
    Ok((200, present(def, &stored)))
}

fn load(store: &Store, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<(Value, ManagedFields), ApiError> {
    let stored = store.stored(&def.storage_key(), &okey(def, ns, name));
    let stored = stored.ok_or_else(|| ApiError::not_found(&def.group_resource(), name))?;
    Ok(((*stored.obj).clone(), stored.fields.clone()))
}

/// PUT on the object or its `/status`.
pub(crate) fn replace(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    status: bool,
    mut body: Value,
    w: &WriteOptions,
) -> WriteResult {
    check_type(def, &mut body)?;
    check_url_identity(def, &body, ns, name)?;
    let (old, mut fields) = load(store, def, ns, name)?;
    // A custom resource's update strategy does not allow unconditional updates (built-in types do).
    if !def.strategic_merge_patch && meta::meta_str(&body, "resourceVersion").is_none_or(str::is_empty) {
        let gr = def.group_resource();
        let cause = Cause::field(
            "FieldValueInvalid",
            "metadata.resourceVersion",
            "Invalid value: 0x0: must be specified for an update",
        );
        return Err(ApiError::invalid(gr.resource, gr.group, name, vec![cause]));
    }
    let new = prepare_update(def, &old, body, status)?;
    fields.record_update(
        manager_key(&w.manager, Operation::Update, status),
        &def.api_version(),
        Some(&old),
        &new,
        scope(def, status),
    );
    write_update(store, def, &old, new, fields, w)
}

/// PATCH (merge, JSON, strategic-as-merge, or server-side apply) on the object or its `/status`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn patch(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    status: bool,
    kind: PatchKind,
    body: &[u8],
    w: &WriteOptions,
) -> WriteResult {
    if kind == PatchKind::Apply {
        return apply(store, def, ns, name, status, body, w);
    }
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let (old, mut fields) = load(store, def, ns, name)?;
    let mut doc = present(def, &old);
    match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            crate::patch::merge_patch(&mut doc, &patch)
        }
        PatchKind::Json => crate::patch::json_patch(&mut doc, &patch).map_err(|e| match e {
            crate::patch::PatchError::Malformed(m) => ApiError::bad_request(m),
            crate::patch::PatchError::Failed(m) => ApiError::new(422, "Invalid", m),
        })?,
        PatchKind::Apply => unreachable!("handled above"),
    }
    check_type(def, &mut doc)?;
    check_url_identity(def, &doc, ns, name)?;
    let new = prepare_update(def, &old, doc, status)?;
    fields.record_update(
        manager_key(&w.manager, Operation::Update, status),
        &def.api_version(),
        Some(&old),
        &new,
        scope(def, status),
    );
    write_update(store, def, &old, new, fields, w)
}

fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the apply patch is not UTF-8"))?;
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => {
            serde_saphyr::from_str(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the apply patch must be an object"));
    }
    Ok(value)
}

fn apply(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    status: bool,
    body: &[u8],
    w: &WriteOptions,
) -> WriteResult {
    let mut config = parse_apply_body(body)?;
    let api_version = config.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(format!("invalid object type: {api_version}, Kind={kind}")));
    }
    check_type(def, &mut config)?;
    check_url_identity(def, &config, ns, name)?;
    let sc = scope(def, status);
    if let Some(map) = config.as_object_mut() {
        match sc {
            Scope::NoStatus => {
                map.remove("status");
            }
            Scope::StatusOnly => {
                map.retain(|k, _| k == "status" || k == "apiVersion" || k == "kind" || k == "metadata")
            }
            Scope::All => {}
        }
    }
    let mk = manager_key(&w.manager, Operation::Apply, status);
    match store.stored(&def.storage_key(), &okey(def, ns, name)) {
        None => {
            if status {
                return Err(ApiError::not_found(&def.group_resource(), name));
            }
            let mut fields = ManagedFields::default();
            let empty = json!({});
            let mut created = fields.apply(mk, &def.api_version(), &empty, &config, sc, w.force)?;
            meta::meta_mut(&mut created).insert("name".into(), json!(name));
            create_with(store, def, ns, created, w, Some(fields))
        }
        Some(_) => {
            let (old, mut fields) = load(store, def, ns, name)?;
            let live = present(def, &old);
            let merged = fields.apply(mk, &def.api_version(), &live, &config, sc, w.force)?;
            let new = prepare_update(def, &old, merged, status)?;
            write_update(store, def, &old, new, fields, w)
        }
    }
}

/// DeleteOptions this server honours.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Parses a DeleteOptions body (empty means defaults).
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(DeleteOptions::default());
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        let pre = v.get("preconditions");
        let s = |k: &str| pre.and_then(|p| p.get(k)).and_then(Value::as_str).map(str::to_string);
        let dry_run = v.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x == "All"));
        Ok(DeleteOptions { uid: s("uid"), resource_version: s("resourceVersion"), dry_run })
    }
}

/// DELETE one object: with finalizers it is only marked (deletionTimestamp, generation+1), else removed.
pub(crate) fn delete(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> WriteResult {
    let (old, _) = load(store, def, ns, name)?;
    let gr = def.group_resource();
    if let Some(uid) = &opts.uid
        && Some(uid.as_str()) != meta::meta_str(&old, "uid")
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::meta_str(&old, "uid").unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && Some(rv.as_str()) != meta::meta_str(&old, "resourceVersion")
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::meta_str(&old, "resourceVersion").unwrap_or_default()
            ),
        ));
    }
    if opts.dry_run {
        return Ok((200, present(def, &old)));
    }
    let (code, obj) = delete_object(store, def, &old);
    reconcile(store);
    Ok((code, obj))
}

/// Deletes or marks one stored object; returns the answer of a DELETE.
fn delete_object(store: &mut Store, def: &ResourceDef, old: &Value) -> (u16, Value) {
    let skey = def.storage_key();
    let okey = key_of(old);
    let pending = !meta::finalizers(old).is_empty() || is_namespace(def);
    if !pending {
        let last = store.remove(&skey, &okey).map(|o| (*o).clone()).unwrap_or_else(|| old.clone());
        let details =
            json!({"name": okey.1, "group": def.group, "kind": def.plural, "uid": meta::meta_str(&last, "uid")});
        return (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
        );
    }
    if meta::meta_str(old, "deletionTimestamp").is_some() {
        return (200, present(def, old));
    }
    let mut new = old.clone();
    let m = meta::meta_mut(&mut new);
    if let Some(g) = m.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
        m.insert("generation".into(), json!(g + 1));
    }
    m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    if is_namespace(def) {
        new["status"]["phase"] = json!("Terminating");
    }
    if is_crd(def) {
        crate::crd::set_terminating(&mut new);
    }
    let fields = store.stored(&skey, &okey).map(|s| s.fields.clone()).unwrap_or_default();
    let stored = store.commit(&skey, new, fields);
    (200, present(def, &stored))
}

/// DELETE on a collection: deletes every object matching the selectors; answers with the list of
/// what was deleted or marked.
pub(crate) fn delete_collection(
    store: &mut Store,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &ListOptions,
    opts: &DeleteOptions,
) -> WriteResult {
    let mut q = q.clone();
    q.limit = None;
    q.continue_token = None;
    let listed = list(store, def, ns, &q)?;
    let mut items = Vec::new();
    for item in listed["items"].as_array().cloned().unwrap_or_default() {
        let key = key_of(&item);
        if opts.dry_run {
            items.push(item);
            continue;
        }
        if let Some(stored) = store.stored(&def.storage_key(), &key) {
            let old = (*stored.obj).clone();
            let (_, obj) = delete_object(store, def, &old);
            items.push(if obj["kind"] == "Status" { item } else { obj });
        }
    }
    reconcile(store);
    Ok((
        200,
        json!({"apiVersion": def.api_version(), "kind": def.list_kind(), "metadata": {"resourceVersion": store.rv.to_string()}, "items": items}),
    ))
}

fn any_def(store: &Store, key: &crate::resource::StorageKey) -> Option<ResourceDef> {
    store.registry.all().find(|d| d.storage_key() == *key).cloned()
}

/// The objects of `key` that are being deleted (`deleting`) or not.
fn objects_by_deletion(store: &Store, key: &crate::resource::StorageKey, deleting: bool) -> Vec<Value> {
    store
        .table(key)
        .map(|t| {
            t.objects
                .values()
                .map(|s| (*s.obj).clone())
                .filter(|o| meta::meta_str(o, "deletionTimestamp").is_some() == deleting)
                .collect()
        })
        .unwrap_or_default()
}

/// What the namespace and CRD controllers do: delete the contents of terminating namespaces and
/// CRDs, then let the namespace / CRD itself go once it is empty.
pub(crate) fn reconcile(store: &mut Store) {
    for _ in 0..16 {
        let mut changed = false;
        // CRDs being deleted: delete their custom resources, then drop the cleanup finalizer.
        let crds: Vec<Value> = objects_by_deletion(store, &crd_key(), true);
        for crd in crds {
            let key = crate::resource::StorageKey {
                group: crd["spec"]["group"].as_str().unwrap_or_default().into(),
                plural: crd["spec"]["names"]["plural"].as_str().unwrap_or_default().into(),
            };
            if let Some(def) = any_def(store, &key) {
                let live: Vec<Value> = objects_by_deletion(store, &key, false);
                for obj in live {
                    delete_object(store, &def, &obj);
                    changed = true;
                }
            }
            let empty = store.table(&key).is_none_or(|t| t.objects.is_empty());
            let fins = meta::finalizers(&crd);
            if empty && fins.iter().any(|f| f == crate::crd::CLEANUP_FINALIZER) {
                let mut new = crd.clone();
                let rest: Vec<Value> =
                    fins.iter().filter(|f| *f != crate::crd::CLEANUP_FINALIZER).map(|f| json!(f)).collect();
                meta::meta_mut(&mut new).insert("finalizers".into(), Value::Array(rest.clone()));
                let ckey = key_of(&crd);
                let fields = store.stored(&crd_key(), &ckey).map(|s| s.fields.clone()).unwrap_or_default();
                store.commit(&crd_key(), new, fields);
                if rest.is_empty() {
                    store.remove(&crd_key(), &ckey);
                }
                changed = true;
            }
        }
        // Namespaces being deleted: delete their contents, then the namespace.
        let namespaces: Vec<Value> = objects_by_deletion(store, &namespace_key(), true);
        for ns in namespaces {
            let ns_name = meta::meta_str(&ns, "name").unwrap_or_default().to_string();
            let mut remaining = 0;
            let keys: Vec<_> = store.tables.iter().filter(|(_, t)| t.namespaced).map(|(k, _)| k.clone()).collect();
            for key in keys {
                let Some(def) = any_def(store, &key) else { continue };
                let objs: Vec<Value> = store
                    .table(&key)
                    .map(|t| t.objects.iter().filter(|(k, _)| k.0 == ns_name).map(|(_, s)| (*s.obj).clone()).collect())
                    .unwrap_or_default();
                remaining += objs.len();
                for obj in objs.into_iter().filter(|o| meta::meta_str(o, "deletionTimestamp").is_none()) {
                    delete_object(store, &def, &obj);
                    changed = true;
                }
            }
            if remaining == 0 {
                let nkey = key_of(&ns);
                if ns["spec"]["finalizers"].as_array().is_some_and(|a| !a.is_empty()) {
                    let mut new = ns.clone();
                    new["spec"]["finalizers"] = json!([]);
                    let fields = store.stored(&namespace_key(), &nkey).map(|s| s.fields.clone()).unwrap_or_default();
                    store.commit(&namespace_key(), new, fields);
                    changed = true;
                }
                if meta::finalizers(&ns).is_empty() {
                    store.remove(&namespace_key(), &nkey);
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
    }
}
