//! A test plugin for the `children` capability: a `Parent` owns exactly the children its spec lists, and reports what it observes of them.

use std::collections::BTreeMap;

use steward_sdk::prelude::*;

/// One child, as the spec lists it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChildSpec {
    /// `v1`, `test.steward.dev/v1`.
    pub api_version: String,
    /// `ConfigMap`, `Noop`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The rest of the object.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>", extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub body: serde_json::Value,
}

/// The spec of a `Parent`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentSpec {
    /// The children it wants; absent leaves the host's children as they are.
    #[serde(default)]
    pub children: Option<Vec<ChildSpec>>,
}

/// What the parent saw of one child.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// `Kind/name`.
    pub child: String,
    /// Whether it exists.
    pub exists: bool,
    /// Its `metadata.uid` (Kubernetes mode), when it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Its status's `steward.phase`, when it has one (a child the host reconciles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Its status's `value` (a `Noop` child echoes its spec there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// The status of a `Parent`.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentStatus {
    /// What it observed of its children at its last reconcile, sorted.
    pub observed: Vec<Seen>,
}

/// The `Parent` kind.
pub struct Parent;

impl Kind for Parent {
    type Spec = ParentSpec;
    type Status = ParentStatus;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Parent";
    const PLURAL: &'static str = "parents";

    fn reconcile(ctx: &Context, obj: &Object<ParentSpec, ParentStatus>) -> Result<Outcome<ParentStatus>, Error> {
        let mut observed: Vec<Seen> = ctx
            .children()
            .into_iter()
            .map(|c| {
                let o = c.object.as_ref();
                let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
                Seen {
                    child: format!("{}/{}", c.kind, c.name),
                    exists: o.is_some(),
                    uid: text(o.and_then(|o| o.pointer("/metadata/uid"))),
                    phase: text(c.status().and_then(|s| s.pointer("/steward/phase"))),
                    value: text(c.status().and_then(|s| s.get("value"))),
                }
            })
            .collect();
        observed.sort_by(|a, b| a.child.cmp(&b.child));
        let mut out = Outcome::status(ParentStatus { observed }).condition(Condition::new(
            "Ready",
            true,
            "Applied",
            "the children are as listed",
        ));
        if let Some(children) = &obj.spec.children {
            out = out.with_children(
                children.iter().map(|c| Child::new(&c.api_version, &c.kind, &c.name, c.body.clone())).collect(),
            );
        }
        Ok(out)
    }
}

steward_sdk::export_plugin!(name: "parent", version: "0.1.0", capabilities: ["children"], kinds: [Parent]);
