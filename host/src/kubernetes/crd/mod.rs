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
/// stored version, the status subresource, printer columns Phase, Ready and Age, and an
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
                ..Default::default()
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
                additional_printer_columns: Some(vec![
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
                    column("Age", "date", ".metadata.creationTimestamp".to_string(), "Time since creation"),
                ]),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
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
                            "lastError": {"type": "string", "description": "The last error, if the last attempt failed."}
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
mod tests {
    use std::collections::{BTreeMap, HashSet};
    use std::marker::PhantomData;

    use serde::Deserialize;
    use serde_json::{Value, json};
    use steward_sdk::prelude::schemars::JsonSchema;
    use steward_sdk::{Context, Error, Kind, Object, Outcome};

    use super::*;

    /// A kind with spec `S`, so that schemas come from the SDK exactly as plugins produce them.
    struct K<S>(PhantomData<S>);

    impl<S: serde::de::DeserializeOwned + JsonSchema + 'static> Kind for K<S> {
        type Spec = S;
        type Status = Value;
        const GROUP: &'static str = "test.steward.dev";
        const VERSION: &'static str = "v1";
        const KIND: &'static str = "Thing";
        const PLURAL: &'static str = "things";

        fn reconcile(_: &Context, _: &Object<S, Value>) -> Result<Outcome<Value>, Error> {
            Ok(Outcome::keep_status())
        }
    }

    /// The SDK's spec schema of `S`.
    fn sdk_schema<S: serde::de::DeserializeOwned + JsonSchema + 'static>() -> Value {
        steward_sdk::dispatch::spec_schema::<K<S>>()
    }

    /// Converts `schema` and checks the result is structural inside a whole CRD schema.
    fn convert(schema: Value) -> Value {
        let out = structural_schema("Thing", &schema).unwrap_or_else(|e| panic!("{e}"));
        let whole = object_schema("Thing", out.clone());
        if let Err(problems) = check_structural(&whole) {
            panic!("not structural: {problems:#?}\n{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        out
    }

    fn kind_info(spec_schema: Value, namespaced: bool) -> KindInfo {
        KindInfo {
            group: "test.steward.dev".into(),
            version: "v1alpha1".into(),
            kind: "Thing".into(),
            plural: "things".into(),
            namespaced,
            spec_schema: spec_schema.to_string(),
            resync_seconds: 0,
        }
    }

    /// How an argument is passed.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[serde(rename_all = "kebab-case")]
    #[allow(dead_code)]
    enum Transport {
        /// A local process.
        Stdio,
        /// A remote endpoint.
        StreamableHttp,
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[allow(dead_code)]
    enum Plain {
        A,
        B,
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[allow(dead_code)]
    struct Inner {
        /// A small number.
        x: u8,
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[serde(tag = "type", rename_all = "camelCase")]
    #[allow(dead_code)]
    enum Endpoint {
        /// Over HTTP.
        Http { url: String },
        /// A process.
        Stdio { command: String, args: Vec<String> },
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    enum External {
        Tool { name: String },
        Parallel(Vec<String>),
        Nothing,
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum IntOrName {
        Int(i64),
        Name(String),
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Spec {
        /// How it is reached.
        transport: Transport,
        plain: Option<Plain>,
        /// A count.
        count: u64,
        small: i8,
        ratio: f32,
        size: usize,
        tags: HashSet<String>,
        pair: (u32, String),
        inner: Option<Inner>,
        /// Documented at the field.
        inner2: Inner,
        free: serde_json::Value,
        maybe_free: Option<serde_json::Value>,
        endpoint: Endpoint,
        external: External,
        port: IntOrName,
        maybe_transport: Option<Transport>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default)]
        args: BTreeMap<String, serde_json::Value>,
        #[serde(default = "none")]
        nothing: Option<String>,
        bytes: [u8; 3],
    }

    fn none() -> Option<String> {
        None
    }

    #[test]
    fn real_schemars_output_becomes_structural() {
        let raw = sdk_schema::<Spec>();
        let s = convert(raw.clone());
        let p = &s["properties"];
        // A documented enum: one enum, its variants documented, no oneOf left.
        assert_eq!(p["transport"]["type"], "string");
        assert_eq!(p["transport"]["enum"], json!(["stdio", "streamable-http"]));
        assert!(p["transport"].get("oneOf").is_none(), "{}", p["transport"]);
        let d = p["transport"]["description"].as_str().unwrap();
        assert!(d.starts_with("How it is reached.") && d.contains("- `stdio`: A local process."), "{d}");
        // Option<enum>: nullable, null gone from the values.
        assert_eq!(p["plain"], json!({"type": "string", "enum": ["A", "B"], "nullable": true}));
        assert_eq!(p["maybeTransport"]["enum"], json!(["stdio", "streamable-http"]));
        assert_eq!(p["maybeTransport"]["nullable"], true);
        // Formats the API server does not know go; unsigned ones leave minimum 0; bounds stay.
        assert_eq!(p["count"], json!({"type": "integer", "minimum": 0, "description": "A count."}));
        assert_eq!(p["small"], json!({"type": "integer", "minimum": -128, "maximum": 127}));
        assert_eq!(p["ratio"], json!({"type": "number", "format": "float"}));
        assert_eq!(p["size"], json!({"type": "integer", "minimum": 0}));
        // uniqueItems is refused by the API server.
        assert_eq!(p["tags"], json!({"type": "array", "items": {"type": "string"}}));
        // A tuple of an integer and a string: items of either.
        assert_eq!(p["pair"]["items"], json!({"x-kubernetes-int-or-string": true}));
        assert_eq!((p["pair"]["minItems"].clone(), p["pair"]["maxItems"].clone()), (json!(2), json!(2)));
        assert_eq!(p["bytes"]["items"], json!({"type": "integer", "minimum": 0, "maximum": 255}));
        // Structs inlined, the field's own doc kept.
        assert_eq!(p["inner"]["nullable"], true);
        assert_eq!(p["inner"]["properties"]["x"]["description"], "A small number.");
        assert_eq!(p["inner2"]["description"], "Documented at the field.");
        // Free-form values keep every field.
        assert_eq!(p["free"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(p["maybeFree"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(p["args"], json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "default": {}}));
        assert_eq!(p["env"], json!({"type": "object", "additionalProperties": {"type": "string"}, "default": {}}));
        // default: null says nothing and is dropped.
        assert_eq!(p["nothing"], json!({"type": "string", "nullable": true}));
        // Untagged integer-or-string.
        assert_eq!(p["port"], json!({"x-kubernetes-int-or-string": true}));
        // `deny_unknown_fields` (additionalProperties: false) is dropped: pruning does it.
        assert!(s.get("additionalProperties").is_none());
        assert_eq!(s["type"], "object");
        // The required list is the struct's.
        assert_eq!(s["required"], raw["required"]);
    }

    #[test]
    fn an_internally_tagged_enum_is_one_object_with_its_branches_told_apart() {
        let s = convert(sdk_schema::<Spec>());
        let e = &s["properties"]["endpoint"];
        assert_eq!(e["type"], "object");
        let props: Vec<&String> = e["properties"].as_object().unwrap().keys().collect();
        assert_eq!(props, ["args", "command", "type", "url"]);
        assert_eq!(e["properties"]["type"], json!({"type": "string", "enum": ["http", "stdio"]}));
        assert_eq!(e["required"], json!(["type"]));
        // What tells the variants apart stays, as value validations only.
        assert_eq!(
            e["anyOf"],
            json!([
                {"properties": {"type": {"enum": ["http"]}}, "required": ["type", "url"]},
                {"properties": {"type": {"enum": ["stdio"]}}, "required": ["type", "command", "args"]}
            ])
        );
    }

    #[test]
    fn an_enum_of_strings_and_objects_keeps_any_value_but_still_tells_variants_apart() {
        let s = convert(sdk_schema::<Spec>());
        let e = &s["properties"]["external"];
        assert!(e.get("type").is_none(), "{e}");
        assert_eq!(e["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(e["anyOf"], json!([{"enum": ["nothing"]}, {"required": ["tool"]}, {"required": ["parallel"]}]));
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[allow(dead_code)]
    struct Tree {
        name: String,
        children: Vec<Tree>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[schemars(crate = "steward_sdk::prelude::schemars")]
    #[allow(dead_code)]
    struct Forest {
        tree: Tree,
    }

    #[test]
    fn a_recursive_type_is_an_error_naming_the_type() {
        // The SDK drops the definitions, so the recursion shows as a reference to nothing.
        let e = structural_schema("Thing", &sdk_schema::<Forest>()).unwrap_err().to_string();
        assert!(e.contains("kind Thing: at spec.tree.children[]"), "{e}");
        assert!(e.contains("#/components/schemas/Tree") && e.contains("(Tree)"), "{e}");
        assert!(e.contains("cannot be recursive") && e.contains("schema_with"), "{e}");
        // With the definitions kept, the cycle itself is named.
        let schema = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}},
            "$defs": {
                "Tree": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Branch"}}}},
                "Branch": {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Tree"}}}
            }
        });
        let e = structural_schema("Thing", &schema).unwrap_err();
        assert!(matches!(&e, CrdError::Recursive { type_name, .. } if type_name == "Tree"), "{e}");
        let e = e.to_string();
        assert!(e.contains("type `Tree` contains itself (Tree → Branch → Tree)"), "{e}");
        assert!(e.contains("at spec.tree.children[].tree"), "{e}");
        // `#` is the root itself.
        let e = structural_schema(
            "Thing",
            &json!({"title": "Node", "type": "object", "properties": {"next": {"$ref": "#"}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("type `Node` contains itself (Node → Node)"), "{e}");
    }

    #[test]
    fn references_are_inlined_from_every_definitions_section_with_the_site_winning() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/components/schemas/Port", "description": "At the site."},
                "b": {"$ref": "#/definitions/Port"},
                "c": {"allOf": [{"$ref": "#/$defs/Port"}], "nullable": true},
                "d": {"$ref": "#/$defs/Odd~1Name"}
            },
            "components": {"schemas": {"Port": {"type": "integer", "format": "int32", "description": "A port."}}},
            "definitions": {"Port": {"type": "integer", "format": "int32"}},
            "$defs": {"Port": {"type": "integer", "format": "int32", "description": "A port."}, "Odd/Name": {"type": "string"}}
        });
        let s = convert(schema);
        let p = &s["properties"];
        assert_eq!(p["a"], json!({"type": "integer", "format": "int32", "description": "At the site."}));
        assert_eq!(p["b"], json!({"type": "integer", "format": "int32"}));
        assert_eq!(p["c"], json!({"type": "integer", "format": "int32", "description": "A port.", "nullable": true}));
        assert_eq!(p["d"], json!({"type": "string"}));
        assert!(s.get("components").is_none() && s.get("$defs").is_none() && s.get("definitions").is_none());
        let e = structural_schema("Thing", &json!({"type": "object", "properties": {"x": {"$ref": "other.json#/A"}}}))
            .unwrap_err();
        assert!(matches!(e, CrdError::UnresolvedRef { ref path, .. } if path == "spec.x"), "{e}");
    }

    #[test]
    fn additional_properties_follow_the_api_server_rules() {
        let s = convert(json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "closed": {"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}},
                "open": {"type": "object", "additionalProperties": true, "properties": {"a": {"type": "string"}}},
                "anything": {"type": "object", "additionalProperties": {}},
                "map": {"type": "object", "additionalProperties": {"type": "integer"}},
                "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
                "untyped_map": {"additionalProperties": {"type": "boolean"}},
                "patterns": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}}
            }
        }));
        let p = &s["properties"];
        assert!(s.get("additionalProperties").is_none());
        assert_eq!(p["closed"], json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert_eq!(
            p["open"],
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(p["anything"], json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(p["map"], json!({"type": "object", "additionalProperties": {"type": "integer"}}));
        // A struct with a flattened map: nothing of the map may be pruned.
        assert_eq!(
            p["both"],
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(p["untyped_map"], json!({"type": "object", "additionalProperties": {"type": "boolean"}}));
        assert_eq!(p["patterns"], json!({"type": "object", "additionalProperties": {"type": "string"}}));
    }

    #[test]
    fn every_spelling_of_null_becomes_nullable() {
        let s = convert(json!({
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "Outer."},
                "c": {"oneOf": [{"const": null}, {"type": "object", "properties": {"x": {"type": "string"}}, "description": "Inner."}]},
                "d": {"enum": ["x", "y", null]},
                "e": {"anyOf": [{"description": "Inner.", "default": "x", "type": "string"}, {"enum": [null], "nullable": true}]},
                "f": {"type": ["integer", "string", "null"]},
                "g": {"type": ["object", "array"]}
            }
        }));
        let p = &s["properties"];
        assert_eq!(p["a"], json!({"type": "string", "nullable": true}));
        assert_eq!(p["b"], json!({"type": "integer", "nullable": true, "description": "Outer."}));
        assert_eq!(
            p["c"],
            json!({"type": "object", "nullable": true, "description": "Inner.", "properties": {"x": {"type": "string"}}})
        );
        assert_eq!(p["d"], json!({"type": "string", "enum": ["x", "y"], "nullable": true}));
        // Description and default move out of the branch.
        assert_eq!(p["e"], json!({"type": "string", "nullable": true, "description": "Inner.", "default": "x"}));
        assert_eq!(p["f"], json!({"x-kubernetes-int-or-string": true, "nullable": true}));
        assert_eq!(p["g"], json!({"x-kubernetes-preserve-unknown-fields": true}));
    }

    #[test]
    fn keywords_the_api_server_refuses_are_dropped_or_rewritten() {
        let s = convert(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "urn:x",
            "title": "Spec",
            "type": "object",
            "properties": {
                "k": {"const": "fixed", "examples": ["fixed"], "readOnly": true},
                "n": {"type": "integer", "format": "uint32", "writeOnly": true, "deprecated": true},
                "m": {"type": "integer", "format": "uint64", "minimum": 5},
                "o": {"type": "integer", "format": "int16", "minimum": -32768, "maximum": 32767},
                "e": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "e2": {"type": "number", "minimum": 3, "exclusiveMinimum": 1},
                "b": {"type": "boolean", "exclusiveMinimum": false},
                "t": {"type": "string", "format": "date-time", "x-rust-type": "chrono::DateTime", "contentEncoding": "x"},
                "u": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "contains": {"const": "a"}},
                "v": {"type": "string", "x-kubernetes-validations": [{"rule": "self != ''"}]}
            }
        }));
        let p = &s["properties"];
        assert_eq!(s["title"], "Spec");
        assert!(s.get("$schema").is_none() && s.get("$id").is_none());
        assert_eq!(p["k"], json!({"type": "string", "enum": ["fixed"]}));
        assert_eq!(p["n"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(p["m"], json!({"type": "integer", "minimum": 5}));
        assert_eq!(p["o"], json!({"type": "integer", "minimum": -32768, "maximum": 32767}));
        assert_eq!(
            p["e"],
            json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1, "exclusiveMaximum": true})
        );
        assert_eq!(p["e2"], json!({"type": "number", "minimum": 3}));
        assert_eq!(p["b"], json!({"type": "boolean"}));
        assert_eq!(p["t"], json!({"type": "string", "format": "date-time"}));
        assert_eq!(p["u"], json!({"type": "array", "items": {"type": "string"}}));
        assert_eq!(p["v"]["x-kubernetes-validations"], json!([{"rule": "self != ''"}]));
    }

    #[test]
    fn untyped_nodes_keep_every_value() {
        let s = convert(json!({
            "type": "object",
            "properties": {
                "t": true,
                "e": {},
                "d": {"description": "Anything."},
                "n": {"type": "null"},
                "arr": {"type": "array"},
                "inferred": {"properties": {"a": {"type": "string"}}},
                "list": {"items": {"type": "string"}},
                "choice": {"enum": [1, 2]}
            }
        }));
        let p = &s["properties"];
        assert_eq!(p["t"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(p["e"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(p["d"], json!({"x-kubernetes-preserve-unknown-fields": true, "description": "Anything."}));
        assert_eq!(p["n"], json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true}));
        assert_eq!(p["arr"], json!({"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}}));
        assert_eq!(p["inferred"]["type"], "object");
        assert_eq!(p["list"]["type"], "array");
        assert_eq!(p["choice"], json!({"type": "integer", "enum": [1, 2]}));
        // A spec that says nothing is an object that keeps its fields.
        assert_eq!(convert(json!({})), json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    }

    #[test]
    fn all_of_is_merged_and_contradictions_are_errors() {
        let s = convert(json!({
            "type": "object",
            "allOf": [
                {"properties": {"a": {"type": "string", "minLength": 1}}, "required": ["a"]},
                {"properties": {"a": {"maxLength": 5}, "b": {"type": "integer"}}, "required": ["b"]},
                {"properties": {"a": {"minLength": 2}}}
            ]
        }));
        assert_eq!(s["required"], json!(["a", "b"]));
        let a = &s["properties"]["a"];
        assert_eq!(
            (a["type"].clone(), a["minLength"].clone(), a["maxLength"].clone()),
            (json!("string"), json!(1), json!(5))
        );
        // The second, different minLength is kept as a value validation.
        assert_eq!(a["allOf"], json!([{"minLength": 2}]));
        // A branch that is only a description, or only value validations, adds just that.
        let s = convert(json!({
            "type": "object",
            "properties": {
                "p": {"allOf": [{"properties": {"a": {"description": "A."}}}, {"properties": {"a": {"type": "object", "properties": {"x": {"type": "string"}}}}}]},
                "q": {"$ref": "#/$defs/O", "x-kubernetes-preserve-unknown-fields": true}
            },
            "$defs": {"O": {"type": "object", "properties": {"x": {"type": "string"}}}}
        }));
        assert_eq!(
            s["properties"]["p"]["properties"]["a"],
            json!({"type": "object", "description": "A.", "properties": {"x": {"type": "string"}}})
        );
        assert_eq!(s["properties"]["q"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(s["properties"]["q"]["properties"]["x"]["type"], "string");
        let e = structural_schema(
            "Thing",
            &json!({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}, {"type": "object"}]}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("at spec.x") && e.contains("both type string and type object"), "{e}");
    }

    #[test]
    fn alternatives_of_one_type_merge_their_fields_and_keep_what_differs() {
        let s = convert(json!({
            "type": "object",
            "properties": {
                "size": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "number", "maximum": 9}]},
                "obj": {"anyOf": [
                    {"type": "object", "properties": {"a": {"type": "string", "description": "A."}}, "required": ["a"]},
                    {"type": "object", "properties": {"a": {"type": "string", "description": "A."}, "b": {"type": "array", "items": {"type": "string", "pattern": "^x"}}}}
                ]}
            }
        }));
        let p = &s["properties"];
        assert_eq!(p["size"], json!({"type": "number", "anyOf": [{"minimum": 1}, {"maximum": 9}]}));
        assert_eq!(p["obj"]["properties"]["a"], json!({"type": "string", "description": "A."}));
        assert_eq!(p["obj"]["properties"]["b"], json!({"type": "array", "items": {"type": "string", "pattern": "^x"}}));
        // The second branch adds nothing beyond the merged structure, so any object passes: no anyOf.
        assert!(p["obj"].get("anyOf").is_none(), "{}", p["obj"]);
    }

    #[test]
    fn what_cannot_be_said_exactly_is_said_less_strictly() {
        let s = convert(json!({
            "type": "object",
            "properties": {
                // `not` weakened to value validations would refuse values the original accepts.
                "n": {"type": "integer", "not": {"type": "string", "minLength": 3}},
                // A map or an empty struct: every field kept, none validated against the map's values.
                "m": {"anyOf": [{"type": "object", "additionalProperties": {"type": "integer"}}, {"type": "object"}]}
            }
        }));
        assert_eq!(s["properties"]["n"], json!({"type": "integer"}));
        assert_eq!(s["properties"]["m"], json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    }

    #[test]
    fn bad_schemas_are_errors_naming_the_field() {
        for (schema, want) in [
            (json!({"type": "object", "properties": {"x": false}}), "at spec.x: the schema `false`"),
            (
                json!({"type": "object", "properties": {"x": 3}}),
                "at spec.x: a schema must be an object or a boolean, not integer",
            ),
            (json!({"type": "object", "properties": {"x": {"anyOf": {}}}}), "at spec.x: anyOf must be a list"),
            (json!({"type": "string"}), "the spec must be an object (type: object), the schema describes string"),
            (json!({"type": "object", "properties": {"x": {"enum": "a"}}}), "at spec.x: `enum` must be a list"),
        ] {
            let e = structural_schema("Thing", &schema).unwrap_err().to_string();
            assert!(e.starts_with("kind Thing: ") && e.contains(want), "{e}\nwanted: {want}");
        }
        let e = crd_for(&KindInfo { spec_schema: "{not json".into(), ..kind_info(json!({}), true) }).unwrap_err();
        assert!(e.to_string().contains("not a JSON object"), "{e}");
    }

    #[test]
    fn check_structural_names_each_broken_rule_with_its_path() {
        let bad = json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
                "spec": {
                    "type": "object",
                    "properties": {
                        "untyped": {"description": "x"},
                        "ref": {"$ref": "#/x", "type": "string"},
                        "closed": {"type": "object", "additionalProperties": false},
                        "mixed": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
                        "tuple": {"type": "array", "items": [{"type": "string"}]},
                        "noitems": {"type": "array"},
                        "set": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                        "typed_branch": {"type": "string", "anyOf": [{"type": "string", "description": "no"}]},
                        "outside": {"type": "object", "oneOf": [{"properties": {"ghost": {"minLength": 1}}}]},
                        "nulltype": {"type": "null"},
                        "const": {"type": "string", "const": "a"},
                        "pf": {"type": "object", "x-kubernetes-preserve-unknown-fields": false}
                    }
                }
            }
        });
        let problems = check_structural(&bad).unwrap_err();
        let spec = "openAPIV3Schema.properties[spec].properties";
        for want in [
            "openAPIV3Schema.properties[metadata].properties: only restrictions of metadata.name".to_string(),
            format!("{spec}[untyped].type: must not be empty"),
            format!("{spec}[ref].$ref: $ref is not supported"),
            format!("{spec}[closed].additionalProperties: must not be false"),
            format!("{spec}[mixed].additionalProperties: additionalProperties and properties are mutually exclusive"),
            format!("{spec}[tuple].items: must be a schema object, not a list"),
            format!("{spec}[noitems].items: must be specified for an array"),
            format!("{spec}[set].uniqueItems: cannot be true"),
            format!("{spec}[typed_branch].anyOf[0].type: must not be set inside allOf, anyOf, oneOf or not"),
            format!("{spec}[typed_branch].anyOf[0].description: must not be set inside"),
            format!("{spec}[outside].oneOf[0].properties[ghost]: must also be specified outside"),
            format!("{spec}[nulltype].type: \"null\" is not one of"),
            format!("{spec}[const].const: is not a field of a CRD schema"),
            format!("{spec}[pf].x-kubernetes-preserve-unknown-fields: must be true or absent"),
        ] {
            assert!(problems.iter().any(|p| p.starts_with(&want)), "missing {want:?} in {problems:#?}");
        }
        assert_eq!(problems.len(), 14, "{problems:#?}");
        // The int-or-string pattern is allowed.
        let ok = json!({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}});
        assert_eq!(check_structural(&ok), Ok(()));
    }

    #[test]
    fn a_crd_has_the_names_scope_version_columns_and_status_of_its_kind() {
        let crd = crd_for(&kind_info(sdk_schema::<Spec>(), true)).unwrap();
        assert_eq!(crd.metadata.name.as_deref(), Some("things.test.steward.dev"));
        let spec = &crd.spec;
        assert_eq!(spec.group, "test.steward.dev");
        assert_eq!(spec.scope, "Namespaced");
        assert_eq!(spec.names.kind, "Thing");
        assert_eq!(spec.names.plural, "things");
        assert_eq!(spec.names.singular.as_deref(), Some("thing"));
        assert_eq!(spec.names.list_kind.as_deref(), Some("ThingList"));
        let [v] = spec.versions.as_slice() else { panic!("one version") };
        assert_eq!((v.name.as_str(), v.served, v.storage), ("v1alpha1", true, true));
        assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let columns: Vec<(&str, &str, &str)> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Phase", "string", ".status.steward.phase"),
                ("Ready", "string", r#".status.conditions[?(@.type=="Ready")].status"#),
                ("Age", "date", ".metadata.creationTimestamp")
            ]
        );
        let schema = serde_json::to_value(v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref())).unwrap();
        assert_eq!(check_structural(&schema), Ok(()));
        assert_eq!(schema["required"], json!(["spec"]));
        let status = &schema["properties"]["status"];
        assert_eq!(status["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(
            status["properties"]["observedGeneration"],
            json!({"type": "integer", "format": "int64", "description": "The generation the last successful reconcile saw."})
        );
        let cond = &status["properties"]["conditions"]["items"]["properties"];
        let fields: Vec<&String> = cond.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["lastTransitionTime", "message", "reason", "status", "type"]);
        let host = &status["properties"][HOST_STATUS_KEY]["properties"];
        assert_eq!(host["phase"]["type"], "string");
        assert_eq!(host["lastReconcileTime"]["format"], "date-time");
        assert_eq!(host["retryCount"]["type"], "integer");
        assert_eq!(host["lastError"]["type"], "string");

        let cluster = crd_for(&kind_info(json!({"type": "object"}), false)).unwrap();
        assert_eq!(cluster.spec.scope, "Cluster");
        // A spec with nothing required does not require `spec`.
        let schema = serde_json::to_value(&cluster.spec.versions[0].schema).unwrap();
        assert!(schema["openAPIV3Schema"].get("required").is_none());
    }

    #[test]
    fn names_the_api_server_refuses_are_errors() {
        for (change, want) in [
            (("kind", "thing"), "the kind `thing` must be CamelCase"),
            (("plural", "Things"), "the plural `Things` must be a lower-case DNS-1123 label"),
            (("group", "local"), "the group `local` must be a lower-case domain with at least one dot"),
            (("group", "Example.dev"), "the group `Example.dev`"),
            (("version", "1"), "the version `1` must be a lower-case DNS-1035 label"),
        ] {
            let mut k = kind_info(json!({"type": "object"}), true);
            match change.0 {
                "kind" => k.kind = change.1.into(),
                "plural" => k.plural = change.1.into(),
                "group" => k.group = change.1.into(),
                _ => k.version = change.1.into(),
            }
            let e = crd_for(&k).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn crd_yaml_is_stable_and_reads_back_as_the_same_objects() {
        let a = crd_for(&kind_info(sdk_schema::<Spec>(), true)).unwrap();
        let b = crd_for(&KindInfo {
            kind: "Other".into(),
            plural: "others".into(),
            ..kind_info(
                json!({"type": "object", "properties": {"t": {"type": "integer", "minimum": 1, "maximum": 3600}}}),
                false,
            )
        })
        .unwrap();
        let text = crd_yaml(&[a.clone(), b.clone()]);
        assert_eq!(text, crd_yaml(&[a.clone(), b.clone()]));
        assert!(text.starts_with("# CustomResourceDefinitions generated by `steward crds`"), "{text}");
        assert_eq!(text.matches("\n---\n").count(), 2);
        // Whole-number bounds read as integers, as people write them.
        assert!(text.contains("maximum: 3600\n") && !text.contains("3600.0"), "{text}");
        // YAML 1.1 readers (kubectl) must not see booleans in the condition status enum.
        assert!(text.contains("- \"True\"") || text.contains("- 'True'"), "{text}");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        let mut want = vec![serde_json::to_value(&a).unwrap(), serde_json::to_value(&b).unwrap()];
        want.iter_mut().for_each(whole_numbers);
        assert_eq!(docs, want);
        let typed: Vec<CustomResourceDefinition> =
            docs.into_iter().map(|d| serde_json::from_value(d).unwrap()).collect();
        assert_eq!(typed, vec![a, b]);
    }
}
