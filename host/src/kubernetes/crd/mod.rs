//! CustomResourceDefinitions from what plugins describe.
//!
//! A plugin describes each kind's spec with an OpenAPI schema (schemars output, or hand-written).
//! The API server only takes *structural* schemas: every node typed, no `$ref`, no
//! `additionalProperties: false`, and nothing but value validations inside `anyOf`/`oneOf`/`allOf`/`not`.
//! [`structural_schema`] rewrites a schema into that form, accepting at least every value the
//! original accepts (where it cannot say exactly the same, it says less, never more: the plugin's
//! `validate` stays the authority), and [`check_structural`] checks the result with the API
//! server's rules before [`crd_for`] hands it out.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};
use steward_sdk::KindInfo;

use super::HOST_STATUS_KEY;

mod check;
mod nodes;
mod structural;

pub use check::check_structural;
pub use structural::structural_schema;

/// One schema node.
type Node = Map<String, Value>;

/// Why no CRD can be made for a kind. Every message names the kind, and where it applies, the
/// path of the field in the spec (`spec.steps[].tool`; `[]` is an array's items, `.*` a map's values).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The kind's group, version, kind or plural is not a name the API server accepts.
    #[error("kind {kind}: {message}")]
    BadName {
        /// The kind.
        kind: String,
        /// What is wrong and what would be right.
        message: String,
    },
    /// The spec schema is not a JSON object.
    #[error("kind {kind}: the spec schema the plugin describes is not a JSON object: {message}")]
    BadSchema {
        /// The kind.
        kind: String,
        /// What the parser said, or what was found.
        message: String,
    },
    /// A `$ref` leads back to a type that is being expanded: the type contains itself.
    #[error(
        "kind {kind}: at {path}, type `{type_name}` contains itself ({chain}); a CRD schema cannot be recursive. \
         Describe the nested field with #[schemars(schema_with = ...)] as \
         {{\"type\": \"object\", \"x-kubernetes-preserve-unknown-fields\": true}} and check it in the plugin's validate"
    )]
    Recursive {
        /// The kind.
        kind: String,
        /// The spec field where the recursion closes.
        path: String,
        /// The type that contains itself.
        type_name: String,
        /// The chain of types, `A → B → A`.
        chain: String,
    },
    /// A `$ref` names no definition of the schema.
    #[error(
        "kind {kind}: at {path}, `$ref` {reference} names no definition in the schema. schemars leaves such a \
         reference for a type that contains itself ({type_name}); a CRD schema cannot be recursive: describe the \
         nested field with #[schemars(schema_with = ...)] as \
         {{\"type\": \"object\", \"x-kubernetes-preserve-unknown-fields\": true}} and check it in the plugin's validate"
    )]
    UnresolvedRef {
        /// The kind.
        kind: String,
        /// The spec field holding the reference.
        path: String,
        /// The reference as written.
        reference: String,
        /// The last segment of the reference: the type it means.
        type_name: String,
    },
    /// A part of the schema that no structural schema can express.
    #[error("kind {kind}: at {path}: {message}")]
    Unsupported {
        /// The kind.
        kind: String,
        /// The spec field.
        path: String,
        /// What cannot be expressed and what to write instead.
        message: String,
    },
    /// The converted schema breaks a rule of structural schemas (a gap in the conversion).
    #[error("kind {kind}: the CRD schema is not structural, so the API server would refuse it: {}", .problems.join("; "))]
    NotStructural {
        /// The kind.
        kind: String,
        /// Each problem as `path: rule`.
        problems: Vec<String>,
    },
    /// The converted schema does not fit the CRD's schema type (a number where a count belongs...).
    #[error("kind {kind}: the spec schema does not fit a CRD schema: {message}")]
    Shape {
        /// The kind.
        kind: String,
        /// What did not fit.
        message: String,
    },
}

/// Keys that say something about a node but do not constrain values structurally; the outer node's win.
const ANNOTATIONS: &[&str] = &["description", "title", "default", "nullable", "example", "externalDocs"];

/// Value validations: allowed inside `anyOf`/`oneOf`/`allOf`/`not`.
const VALUE_KEYS: &[&str] = &[
    "enum",
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "maxProperties",
    "minProperties",
    "required",
];

/// Keys of JSON Schema and OpenAPI that a CRD schema has no place for; dropped (the plugin validates them).
/// `not` is among them: rewritten with only value validations it would refuse values the original accepts.
const DROPPED: &[&str] = &[
    "not",
    "$schema",
    "$id",
    "id",
    "$defs",
    "definitions",
    "components",
    "$comment",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "uniqueItems",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "discriminator",
    "xml",
];

/// The `x-kubernetes-*` extensions kept as the plugin wrote them.
const EXTENSIONS: &[&str] = &[
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

/// Formats the API server knows; others are dropped (`uint*` leave `minimum: 0` behind).
const FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "binary",
    "date",
    "date-time",
    "duration",
    "password",
    "uuid",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uri",
];

/// Every key of a CRD schema node (`JSONSchemaProps`).
const CRD_SCHEMA_KEYS: &[&str] = &[
    "$ref",
    "$schema",
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "default",
    "definitions",
    "dependencies",
    "description",
    "enum",
    "example",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "externalDocs",
    "format",
    "id",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "nullable",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

/// The CRD of one kind: `apiextensions.k8s.io/v1`, named `{plural}.{group}`, one served and
/// stored version, short names for the bundled kinds, the category `steward`, the status
/// subresource, printer columns Phase, Ready, Reason, the kind's own ([`KindInfo::columns`]) and Age, and an
/// `openAPIV3Schema` whose `spec` is the plugin's spec schema made structural ([`structural_schema`])
/// and whose `status` types what the host writes (`observedGeneration`, `conditions`, and the host's
/// record under [`HOST_STATUS_KEY`]) while keeping the plugin's own status fields.
///
/// The schema passed [`check_structural`]; the same `kind` always gives the same CRD.
pub fn crd_for(kind: &KindInfo) -> Result<CustomResourceDefinition, CrdError> {
    check_names(kind)?;
    let raw: Value = serde_json::from_str(&kind.spec_schema)
        .map_err(|e| CrdError::BadSchema { kind: kind.kind.clone(), message: e.to_string() })?;
    let spec = structural_schema(&kind.kind, &raw)?;
    let schema = object_schema(&kind.kind, spec);
    check_structural(&schema).map_err(|problems| CrdError::NotStructural { kind: kind.kind.clone(), problems })?;
    let props: JSONSchemaProps = serde_json::from_value(schema)
        .map_err(|e| CrdError::Shape { kind: kind.kind.clone(), message: e.to_string() })?;
    let column = |name: &str, type_: &str, json_path: String, description: &str| CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path,
        description: Some(description.into()),
        ..Default::default()
    };
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{}", kind.plural, kind.group)),
            labels: Some(BTreeMap::from([("app.kubernetes.io/part-of".to_string(), "steward".to_string())])),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: kind.group.clone(),
            names: CustomResourceDefinitionNames {
                kind: kind.kind.clone(),
                plural: kind.plural.clone(),
                singular: Some(kind.kind.to_ascii_lowercase()),
                list_kind: Some(format!("{}List", kind.kind)),
                short_names: short_names(kind),
                categories: Some(vec![CATEGORY.to_string()]),
            },
            scope: if kind.namespaced { "Namespaced" } else { "Cluster" }.into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: kind.version.clone(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation { open_api_v3_schema: Some(props) }),
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(json!({}))),
                    ..Default::default()
                }),
                additional_printer_columns: Some({
                    let mut columns = vec![
                        column(
                            "Phase",
                            "string",
                            format!(".status.{HOST_STATUS_KEY}.phase"),
                            "Where the last reconcile left the object",
                        ),
                        column(
                            "Ready",
                            "string",
                            r#".status.conditions[?(@.type=="Ready")].status"#.to_string(),
                            "The Ready condition the plugin reports",
                        ),
                        column(
                            "Reason",
                            "string",
                            r#".status.conditions[?(@.type=="Ready")].reason"#.to_string(),
                            "Why the object is or is not ready",
                        ),
                    ];
                    // The kind's own columns, the same declaration `steward status KIND` and the page use.
                    columns.extend(kind.columns.iter().map(|c| CustomResourceColumnDefinition {
                        name: c.name.clone(),
                        type_: c.type_.as_str().into(),
                        json_path: c.json_path.clone(),
                        description: (!c.description.is_empty()).then(|| c.description.clone()),
                        priority: (c.priority > 0).then(|| i32::try_from(c.priority).unwrap_or(i32::MAX)),
                        ..Default::default()
                    }));
                    columns.push(column(
                        "Age",
                        "date",
                        ".metadata.creationTimestamp".to_string(),
                        "Time since creation",
                    ));
                    columns
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
}

/// The category every Steward CRD is in: `kubectl get steward` lists the objects of every kind.
pub const CATEGORY: &str = "steward";

/// The short names of the bundled kinds (`kubectl get mcps`); other kinds have none, so a plugin's
/// kind never takes a name another kind (built in or bundled) answers to.
fn short_names(kind: &KindInfo) -> Option<Vec<String>> {
    let short = match (kind.group.as_str(), kind.kind.as_str()) {
        ("steward.dev", "MCPServer") => "mcps",
        ("steward.dev", "MCPServerGroup") => "mcpg",
        ("steward.dev", "Workflow") => "wf",
        ("steward.dev", "WorkflowRun") => "wfr",
        _ => return None,
    };
    Some(vec![short.to_string()])
}

/// `crds` as multi-document YAML for `kubectl apply -f`: a comment saying where it came from,
/// then each CRD after a `---` line, keys in alphabetical order, so the same CRDs always give the
/// same text. A document YAML cannot express (none is known) is written as JSON, which is YAML too.
pub fn crd_yaml(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# CustomResourceDefinitions generated by `steward crds` from the plugins' own schemas; do not edit.\n\
         # Installing them needs the right to create CustomResourceDefinitions (a cluster admin):\n\
         # Steward's runtime role (`steward rbac`) does not include it.\n",
    );
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&yaml_document(crd));
    }
    out
}

/// One object as a YAML document (ending in a newline), keys sorted, whole floats written as integers.
pub(crate) fn yaml_document<T: serde::Serialize>(object: &T) -> String {
    let mut value = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => return format!("# cannot be written: {e}\n"),
    };
    whole_numbers(&mut value);
    match serde_saphyr::to_string(&value) {
        Ok(text) if text.ends_with('\n') => text,
        Ok(text) => text + "\n",
        Err(_) => serde_json::to_string_pretty(&value).unwrap_or_default() + "\n",
    }
}

/// `3600.0` becomes `3600`: the CRD types hold bounds as floats, people write them as integers.
fn whole_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64()
                && !n.is_i64()
                && !n.is_u64()
                && f.fract() == 0.0
                && f.abs() < 9_007_199_254_740_992.0
            {
                *v = json!(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

fn check_names(k: &KindInfo) -> Result<(), CrdError> {
    let bad = |message: String| Err(CrdError::BadName { kind: k.kind.clone(), message });
    let kind_ok = k.kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && k.kind.chars().all(|c| c.is_ascii_alphanumeric())
        && k.kind.len() <= 63;
    if !kind_ok {
        return bad(format!("the kind `{}` must be CamelCase ASCII letters and digits, at most 63", k.kind));
    }
    if !crate::plugin::is_dns_label(&k.plural) {
        return bad(format!("the plural `{}` must be a lower-case DNS-1123 label, for example `mcpservers`", k.plural));
    }
    if !k.group.contains('.') || k.group.len() > 253 || !k.group.split('.').all(crate::plugin::is_dns_label) {
        return bad(format!(
            "the group `{}` must be a lower-case domain with at least one dot, for example `example.dev`",
            k.group
        ));
    }
    let version_ok = crate::plugin::is_dns_label(&k.version) && k.version.starts_with(|c: char| c.is_ascii_lowercase());
    if !version_ok {
        return bad(format!("the version `{}` must be a lower-case DNS-1035 label, for example `v1alpha1`", k.version));
    }
    if k.plural.len() + 1 + k.group.len() > 253 {
        return bad(format!("the CRD name `{}.{}` is longer than 253 characters", k.plural, k.group));
    }
    Ok(())
}

/// The whole object's schema around the converted `spec`.
fn object_schema(kind: &str, spec: Value) -> Value {
    let spec_required = spec.get("required").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
    let condition = json!({
        "type": "object",
        "description": "A condition the plugin reports.",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "CamelCase type, for example `Ready`."},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"], "description": "Whether it holds."},
            "reason": {"type": "string", "description": "CamelCase machine-readable reason."},
            "message": {"type": "string", "description": "A sentence for people."},
            "lastTransitionTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the status last changed."
            }
        }
    });
    let mut root = json!({
        "type": "object",
        "description": format!("{kind}: reconciled by Steward; `spec` is what its plugin describes."),
        "properties": {
            "apiVersion": {"type": "string", "description": "The group and version of this object."},
            "kind": {"type": "string", "description": "The kind of this object."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {
                "type": "object",
                "description": "Written by Steward: the plugin's own status fields, `conditions`, `observedGeneration`, and the host's record.",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "observedGeneration": {
                        "type": "integer",
                        "format": "int64",
                        "description": "The generation the last successful reconcile saw."
                    },
                    "conditions": {
                        "type": "array",
                        "description": "Conditions the plugin reports.",
                        "items": condition
                    },
                    HOST_STATUS_KEY: {
                        "type": "object",
                        "description": "The host's record of the last reconcile.",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "phase": {
                                "type": "string",
                                "description": "Pending, Reconciling, Synced, Error (retrying with backoff) or Failed (waits for a spec change or a trigger)."
                            },
                            "lastReconcileTime": {
                                "type": "string",
                                "format": "date-time",
                                "description": "When the last reconcile started."
                            },
                            "retryCount": {
                                "type": "integer",
                                "format": "int64",
                                "minimum": 0,
                                "description": "Failed attempts since the last success."
                            },
                            "lastError": {"type": "string", "description": "The last error, if the last attempt failed."},
                            "warnings": {
                                "type": "array",
                                "description": "Problems with the spec that do not stop the object: fields the schema does not know (source schema) and the plugin's own (source plugin).",
                                "items": {
                                    "type": "object",
                                    "required": ["path", "message"],
                                    "properties": {
                                        "path": {"type": "string", "description": "The field, for example `spec.steps[0].tool`."},
                                        "message": {"type": "string", "description": "What is wrong."},
                                        "source": {"type": "string", "enum": ["schema", "plugin"], "description": "Who says so."}
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    });
    if spec_required && let Some(m) = root.as_object_mut() {
        m.insert("required".into(), json!(["spec"]));
    }
    root
}

#[cfg(test)]
mod tests;
