//! Tests of CRD generation: real schemars output made structural, the API server's rules, names and YAML.

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
        columns: Vec::new(),
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
    let e =
        structural_schema("Thing", &json!({"title": "Node", "type": "object", "properties": {"next": {"$ref": "#"}}}))
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
            ("Reason", "string", r#".status.conditions[?(@.type=="Ready")].reason"#),
            ("Age", "date", ".metadata.creationTimestamp")
        ]
    );
    assert_eq!(spec.names.categories.as_deref(), Some(&["steward".to_string()][..]));
    assert_eq!(spec.names.short_names, None, "a kind that is not bundled takes no short name");
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
    assert_eq!(host["warnings"]["items"]["properties"]["path"]["type"], "string");

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
    let typed: Vec<CustomResourceDefinition> = docs.into_iter().map(|d| serde_json::from_value(d).unwrap()).collect();
    assert_eq!(typed, vec![a, b]);
}

/// The status the host writes, warnings included, is what the CRD's schema keeps: a real API
/// server prunes the status by that schema the way [`crate::schema::prune`] does.
#[test]
fn the_status_the_host_writes_survives_the_crds_pruning() {
    use crate::model::{FieldWarning, StatusRecord, WarningSource};
    let crd = crd_for(&kind_info(json!({"type": "object", "properties": {"a": {"type": "string"}}}), true)).unwrap();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone();
    let rec = StatusRecord {
        last_error: Some("boom".into()),
        warnings: vec![FieldWarning {
            path: "spec.extra".into(),
            message: "unknown field, ignored".into(),
            source: WarningSource::Schema,
        }],
        ..Default::default()
    };
    let status = crate::kubernetes::writer::status_object(&rec, None, 0);
    let mut object =
        json!({"apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {}, "spec": {"a": "x"}, "status": status});
    let pruned = crate::schema::prune::prune(&schema, &mut object, "");
    assert!(pruned.is_empty(), "{pruned:?}");
    assert_eq!(object["status"][HOST_STATUS_KEY]["warnings"][0]["path"], "spec.extra");
    assert_eq!(object["status"][HOST_STATUS_KEY]["warnings"][0]["source"], "schema");
}

#[test]
fn a_kinds_printer_columns_and_a_bundled_kinds_short_name_are_in_its_crd() {
    use steward_sdk::{ColumnType, PrinterColumn};
    let kind = KindInfo {
        group: "steward.dev".into(),
        kind: "MCPServer".into(),
        plural: "mcpservers".into(),
        columns: vec![
            PrinterColumn::new("State", ".status.state", ColumnType::String).description("The lifecycle state"),
            PrinterColumn::new("Tools", ".status.toolCount", ColumnType::Integer).priority(1),
        ],
        ..kind_info(json!({}), true)
    };
    let crd = crd_for(&kind).unwrap();
    assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["mcps".to_string()][..]));
    let columns = crd.spec.versions[0].additional_printer_columns.clone().unwrap();
    let shown: Vec<(&str, &str, &str, Option<i32>)> =
        columns.iter().map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str(), c.priority)).collect();
    assert_eq!(
        shown[3..],
        [
            ("State", "string", ".status.state", None),
            ("Tools", "integer", ".status.toolCount", Some(1)),
            ("Age", "date", ".metadata.creationTimestamp", None),
        ]
    );
    assert_eq!(columns[3].description.as_deref(), Some("The lifecycle state"));
}
