//! CustomResourceDefinitions: validation (incl. structural schemas), defaulting, status, and the
//! resource definitions a CRD serves.

use serde_json::{Map, Value, json};

use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause};

/// The finalizer the API server puts on every CRD so its custom resources are deleted first.
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

/// Validates a CRD as the API server does for the parts this fake understands; on success returns
/// nothing, else a 422 Invalid listing every problem with its field path.
pub(crate) fn validate(crd: &Value) -> Result<(), ApiError> {
    let name = crate::meta::meta_str(crd, "name").unwrap_or_default();
    let mut causes = Vec::new();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let group = s(&spec, &["group"]).unwrap_or_default();
    let plural = s(&spec, &["names", "plural"]).unwrap_or_default();
    let kind = s(&spec, &["names", "kind"]).unwrap_or_default();
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else if !crate::meta::is_dns_subdomain(group) || !group.contains('.') {
        causes.push(Cause::invalid("spec.group", &json!(group), "should be a domain with at least one dot"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid("metadata.name", &json!(name), "must be spec.names.plural+\".\"+spec.group"));
    }
    match s(&spec, &["scope"]) {
        Some("Namespaced" | "Cluster") => {}
        Some(other) => causes.push(Cause::unsupported(
            "spec.scope",
            &format!("{other:?}: supported values: \"Cluster\", \"Namespaced\""),
        )),
        None => causes.push(Cause::required("spec.scope", "")),
    }
    let versions = spec.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(null),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            &Value::Array(versions.clone()),
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let vpath = format!("spec.versions[{i}]");
        if s(v, &["name"]).is_none_or(str::is_empty) {
            causes.push(Cause::required(format!("{vpath}.name"), ""));
        }
        match v.get("schema").and_then(|sch| sch.get("openAPIV3Schema")) {
            None => causes.push(Cause::required(format!("{vpath}.schema.openAPIV3Schema"), "schemas are required")),
            Some(schema) => structural(schema, &format!("{vpath}.schema.openAPIV3Schema"), &mut causes),
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes))
    }
}

const VALUE_VALIDATION_FORBIDDEN: &[&str] = &[
    "type",
    "additionalProperties",
    "description",
    "default",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
];

#[derive(Clone, Copy, PartialEq)]
enum Place {
    Root,
    Property,
    Items,
    AdditionalProperties,
}

/// Checks the structural-schema rules on a version's `openAPIV3Schema`, pushing one cause per violation.
pub(crate) fn structural(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(root) = schema.as_object() else {
        causes.push(Cause::invalid(path, schema, "must be an object"));
        return;
    };
    node(root, path, Place::Root, causes);
    if let Some(t) = root.get("type").and_then(Value::as_str)
        && t != "object"
    {
        causes.push(Cause::invalid(format!("{path}.type"), &json!(t), "must be object at the root"));
    }
    if let Some(meta) = root.get("properties").and_then(|p| p.get("metadata")).and_then(Value::as_object) {
        let mpath = format!("{path}.properties[metadata]");
        for (k, v) in meta {
            let allowed = match k.as_str() {
                "type" => v.as_str() == Some("object"),
                "properties" => v.as_object().is_some_and(|props| {
                    props.iter().all(|(pk, pv)| {
                        (pk == "name" || pk == "generateName")
                            && pv.as_object().is_some_and(|p| {
                                p.keys().all(|key| {
                                    key == "type"
                                        || key == "pattern"
                                        || key == "maxLength"
                                        || key == "minLength"
                                        || key == "description"
                                })
                            })
                    })
                }),
                "description" => true,
                _ => false,
            };
            if !allowed {
                causes.push(Cause::forbidden(
                    format!("{mpath}.{k}"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
}

fn node(n: &Map<String, Value>, path: &str, place: Place, causes: &mut Vec<Cause>) {
    if n.contains_key("$ref") {
        causes.push(Cause::forbidden(format!("{path}.$ref"), "$ref is not supported"));
    }
    let preserve = n.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let int_or_string = n.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    let has_type = n.get("type").and_then(Value::as_str).is_some_and(|t| !t.is_empty());
    if !has_type && !preserve && !int_or_string {
        let detail = match place {
            Place::Root => "must not be empty at the root",
            Place::Property => "must not be empty for specified object fields",
            Place::Items => "must not be empty for specified array items",
            Place::AdditionalProperties => "must not be empty for specified additionalProperties",
        };
        causes.push(Cause::required(format!("{path}.type"), detail));
    }
    if int_or_string && has_type {
        causes.push(Cause::invalid(
            format!("{path}.type"),
            n.get("type").unwrap_or(&Value::Null),
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    match n.get("additionalProperties") {
        Some(Value::Bool(false)) => {
            causes.push(Cause::forbidden(format!("{path}.additionalProperties"), "must not be used if false"))
        }
        Some(Value::Bool(true)) | None => {}
        Some(Value::Object(ap)) => {
            if n.contains_key("properties") {
                causes.push(Cause::forbidden(
                    format!("{path}.additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            node(ap, &format!("{path}.additionalProperties"), Place::AdditionalProperties, causes);
        }
        Some(other) => {
            causes.push(Cause::invalid(format!("{path}.additionalProperties"), other, "must be a boolean or a schema"))
        }
    }
    if let Some(props) = n.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (k, v) in props {
                    let ppath = format!("{path}.properties[{k}]");
                    match v.as_object() {
                        Some(child) => node(child, &ppath, Place::Property, causes),
                        None => causes.push(Cause::invalid(&ppath, v, "must be a schema")),
                    }
                }
            }
            None => causes.push(Cause::invalid(format!("{path}.properties"), props, "must be a map of schemas")),
        }
    }
    if let Some(items) = n.get("items") {
        match items.as_object() {
            Some(child) => node(child, &format!("{path}.items"), Place::Items, causes),
            None => {
                causes.push(Cause::forbidden(format!("{path}.items"), "items must be a schema object and not an array"))
            }
        }
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(list) = n.get(combinator).and_then(Value::as_array) {
            // The one exception: `x-kubernetes-int-or-string` may spell out its two types.
            if int_or_string && combinator == "anyOf" && is_int_or_string_any_of(list) {
                continue;
            }
            for (i, v) in list.iter().enumerate() {
                if let Some(child) = v.as_object() {
                    let child_path = format!("{path}.{combinator}[{i}]");
                    match child.get("anyOf").and_then(Value::as_array) {
                        Some(inner) if int_or_string && combinator == "allOf" && is_int_or_string_any_of(inner) => {
                            let mut rest = child.clone();
                            rest.remove("anyOf");
                            value_validation(&rest, &child_path, causes);
                        }
                        _ => value_validation(child, &child_path, causes),
                    }
                }
            }
        }
    }
    if let Some(child) = n.get("not").and_then(Value::as_object) {
        value_validation(child, &format!("{path}.not"), causes);
    }
}

fn is_int_or_string_any_of(list: &[Value]) -> bool {
    list == [json!({"type": "integer"}), json!({"type": "string"})]
}

/// Inside `anyOf`/`oneOf`/`allOf`/`not` only value validations are allowed.
fn value_validation(n: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    for key in VALUE_VALIDATION_FORBIDDEN {
        if let Some(v) = n.get(*key) {
            let is_false = v == &Value::Bool(false);
            if key.starts_with("x-kubernetes") && is_false {
                continue;
            }
            let detail = if key.starts_with("x-kubernetes") {
                "must be false to be structural"
            } else {
                "must be empty to be structural"
            };
            causes.push(Cause::forbidden(format!("{path}.{key}"), detail));
        }
    }
    if n.contains_key("$ref") {
        causes.push(Cause::forbidden(format!("{path}.$ref"), "$ref is not supported"));
    }
    if let Some(props) = n.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            if let Some(child) = v.as_object() {
                value_validation(child, &format!("{path}.properties[{k}]"), causes);
            }
        }
    }
    if let Some(child) = n.get("items").and_then(Value::as_object) {
        value_validation(child, &format!("{path}.items"), causes);
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(list) = n.get(combinator).and_then(Value::as_array) {
            for (i, v) in list.iter().enumerate() {
                if let Some(child) = v.as_object() {
                    value_validation(child, &format!("{path}.{combinator}[{i}]"), causes);
                }
            }
        }
    }
    if let Some(child) = n.get("not").and_then(Value::as_object) {
        value_validation(child, &format!("{path}.not"), causes);
    }
}

/// Fills the defaults the API server sets on a CRD (`names.singular`, `names.listKind`,
/// `conversion.strategy`) and the status its controllers would write (`Established`,
/// `NamesAccepted`, `acceptedNames`, `storedVersions`), and the cleanup finalizer on create.
/// Call only on a CRD that passed [`validate`].
pub(crate) fn default_and_status(crd: &mut Value, old: Option<&Value>) {
    let now = crate::meta::now_rfc3339();
    let spec = crd.get_mut("spec").and_then(Value::as_object_mut);
    if let Some(spec) = spec {
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
            names.entry("singular").or_insert_with(|| json!(kind.to_lowercase()));
            names.entry("listKind").or_insert_with(|| json!(format!("{kind}List")));
        }
        spec.entry("conversion").or_insert_with(|| json!({"strategy": "None"}));
    }
    let names = crd.get("spec").and_then(|s| s.get("names")).cloned().unwrap_or(json!({}));
    let storage = crd
        .get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true)))
        .and_then(|v| v.get("name"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut stored: Vec<Value> = old
        .and_then(|o| o.get("status"))
        .and_then(|st| st.get("storedVersions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !stored.contains(&storage) {
        stored.push(storage);
    }
    let old_conditions = old.and_then(|o| o.get("status")).and_then(|st| st.get("conditions")).cloned();
    let conditions = match old_conditions {
        Some(c) => c,
        None => json!([
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ]),
    };
    if let Some(obj) = crd.as_object_mut() {
        obj.insert(
            "status".into(),
            json!({"conditions": conditions, "acceptedNames": names, "storedVersions": stored}),
        );
    }
    if old.is_none() {
        let meta = crate::meta::meta_mut(crd);
        let fins = meta.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = fins.as_array_mut()
            && !list.iter().any(|f| f == CLEANUP_FINALIZER)
        {
            list.push(json!(CLEANUP_FINALIZER));
        }
    }
}

/// Marks a CRD as terminating in its status conditions.
pub(crate) fn set_terminating(crd: &mut Value) {
    let cond = json!({"type": "Terminating", "status": "True", "lastTransitionTime": crate::meta::now_rfc3339(), "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"});
    if let Some(list) = crd.get_mut("status").and_then(|s| s.get_mut("conditions")).and_then(Value::as_array_mut)
        && !list.iter().any(|c| c["type"] == "Terminating")
    {
        list.push(cond);
    }
}

/// The resources a (valid) CRD serves: one per version with `served: true`.
pub(crate) fn resource_defs(crd: &Value) -> Vec<ResourceDef> {
    let Some(spec) = crd.get("spec") else { return Vec::new() };
    let group = s(spec, &["group"]).unwrap_or_default();
    let kind = s(spec, &["names", "kind"]).unwrap_or_default();
    let plural = s(spec, &["names", "plural"]).unwrap_or_default();
    let namespaced = s(spec, &["scope"]) == Some("Namespaced");
    let strings = |path: &str| -> Vec<String> {
        spec.get("names")
            .and_then(|n| n.get(path))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let versions = spec.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| {
            let version = v.get("name")?.as_str()?;
            let mut def = ResourceDef::new(group, version, kind, plural, namespaced);
            if let Some(singular) = s(spec, &["names", "singular"]) {
                def.singular = singular.to_string();
            }
            def.status_subresource = v.get("subresources").and_then(|sr| sr.get("status")).is_some();
            def.short_names = strings("shortNames");
            def.categories = strings("categories");
            def.selectable_fields = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.get("jsonPath")?.as_str().map(|p| p.trim_start_matches('.').to_string()))
                        .collect()
                })
                .unwrap_or_default();
            Some(def)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}}}]}
        })
    }

    fn messages(schema: Value) -> Vec<String> {
        match validate(&crd(schema)) {
            Ok(()) => Vec::new(),
            Err(e) => e.details.unwrap()["causes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
                .collect(),
        }
    }

    #[test]
    fn structural_schema_is_accepted() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}
        }});
        assert_eq!(messages(schema), Vec::<String>::new());
        let defs = resource_defs(&crd(json!({"type": "object"})));
        assert_eq!(defs.len(), 1);
        assert!(defs[0].status_subresource && defs[0].namespaced);
    }

    #[test]
    fn non_structural_schemas_name_the_path() {
        let p = "spec.versions[0].schema.openAPIV3Schema";
        let m = messages(json!({"type": "object", "properties": {"spec": {"properties": {}}}}));
        assert_eq!(
            m,
            [format!("{p}.properties[spec].type: Required value: must not be empty for specified object fields")]
        );
        let m = messages(json!({"type": "object", "properties": {"a": {"$ref": "#/x", "type": "string"}}}));
        assert_eq!(m, [format!("{p}.properties[a].$ref: Forbidden: $ref is not supported")]);
        let m = messages(json!({"type": "object", "additionalProperties": false}));
        assert_eq!(m, [format!("{p}.additionalProperties: Forbidden: must not be used if false")]);
        let m = messages(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        );
        assert_eq!(
            m,
            [format!("{p}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive")]
        );
        let m = messages(
            json!({"type": "object", "properties": {"a": {"type": "string", "anyOf": [{"type": "string", "description": "x"}]}}}),
        );
        assert_eq!(
            m,
            [
                format!("{p}.properties[a].anyOf[0].type: Forbidden: must be empty to be structural"),
                format!("{p}.properties[a].anyOf[0].description: Forbidden: must be empty to be structural"),
            ]
        );
        let m = messages(
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
        );
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with(&format!("{p}.properties[metadata].properties: Forbidden")), "{m:?}");
        let m = messages(json!({"type": "object", "properties": {"l": {"type": "array", "items": {}}}}));
        assert_eq!(
            m,
            [format!("{p}.properties[l].items.type: Required value: must not be empty for specified array items")]
        );
    }

    #[test]
    fn status_and_defaults() {
        let mut c = crd(json!({"type": "object"}));
        default_and_status(&mut c, None);
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["status"]["acceptedNames"]["singular"], "widget");
        assert_eq!(c["status"]["conditions"][1]["type"], "Established");
        assert_eq!(c["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    }
}
