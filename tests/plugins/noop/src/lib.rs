//! A cheap, well-behaved test plugin: kind `Noop` echoes its spec into its status.
//!
//! Built twice: `noop` (version 0.1.0) and `noop-v2` (the same source with
//! feature `v2`, version 0.2.0) so that tests can hot-reload one over the other,
//! and `noop-twin` (feature `twin`): another plugin name claiming the same kind, and serving
//! the cluster-scoped kind `Shared` too.

use steward_sdk::prelude::*;

/// The spec of a `Noop` object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NoopSpec {
    /// Any text; copied to the status.
    #[serde(default)]
    pub value: String,
}

/// The status of a `Noop` object.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NoopStatus {
    /// The spec's value.
    pub value: String,
    /// The generation that was seen.
    pub seen_generation: u64,
    /// The plugin version that wrote this status.
    pub by: String,
}

/// The `Noop` kind.
pub struct Noop;

/// The version this build reports.
pub const VERSION: &str = if cfg!(feature = "v2") { "0.2.0" } else { "0.1.0" };

impl Kind for Noop {
    type Spec = NoopSpec;
    type Status = NoopStatus;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Noop";
    const PLURAL: &'static str = "noops";

    fn validate(obj: &Object<NoopSpec, NoopStatus>) -> Vec<FieldError> {
        if obj.spec.value.len() > 1024 {
            vec![FieldError::new("spec.value", "must be at most 1024 bytes")]
        } else {
            Vec::new()
        }
    }

    fn reconcile(_ctx: &Context, obj: &Object<NoopSpec, NoopStatus>) -> Result<Outcome<NoopStatus>, Error> {
        Ok(Outcome::status(NoopStatus {
            value: obj.spec.value.clone(),
            seen_generation: obj.generation,
            by: VERSION.to_string(),
        })
        .condition(Condition::new("Ready", true, "Echoed", "the value was copied")))
    }
}

/// The plugin name this build reports (`noop-twin` claims the same kind under another name).
pub const NAME: &str = if cfg!(feature = "twin") { "noop-twin" } else { "noop" };

/// The spec of a `Shared` object (built into `noop-twin` only).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedSpec {
    /// Any text.
    #[serde(default)]
    pub value: String,
    /// Another `Shared` object whose value this one reports, read through the host.
    #[serde(default)]
    pub follows: Option<String>,
}

/// The status of a `Shared` object.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SharedStatus {
    /// The followed object's `spec.value`, or the own one when it follows none.
    pub seen: String,
}

/// `Shared`: a cluster-scoped kind whose objects may follow one another, for the test that a
/// read of a cluster-scoped object re-queues its reader when that object changes.
pub struct Shared;

impl Kind for Shared {
    type Spec = SharedSpec;
    type Status = SharedStatus;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Shared";
    const PLURAL: &'static str = "shareds";
    const NAMESPACED: bool = false;

    fn reconcile(ctx: &Context, obj: &Object<SharedSpec, SharedStatus>) -> Result<Outcome<SharedStatus>, Error> {
        let seen = match &obj.spec.follows {
            None => obj.spec.value.clone(),
            // A cluster-scoped object has no namespace: the read names none.
            Some(name) => match ctx.get("Shared", "", name) {
                Some(o) => serde_json::from_str::<serde_json::Value>(&o.spec)
                    .ok()
                    .and_then(|v| v["value"].as_str().map(str::to_string))
                    .unwrap_or_default(),
                None => return Err(Error::retry(format!("Shared {name} does not exist yet"))),
            },
        };
        Ok(Outcome::status(SharedStatus { seen }))
    }
}

#[cfg(not(feature = "twin"))]
steward_sdk::export_plugin!(name: NAME, version: VERSION, kinds: [Noop]);
#[cfg(feature = "twin")]
steward_sdk::export_plugin!(name: NAME, version: VERSION, kinds: [Noop, Shared]);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_sdk::testing::{FakeHost, object, reconcile, validate};

    #[test]
    fn echoes_value_and_generation() {
        let mut obj = object("Noop", "a", json!({"value": "hello"}));
        obj.generation = 7;
        let out = reconcile::<Noop>(&FakeHost::new(), &obj, &[]).unwrap();
        let status = out.status.unwrap();
        assert_eq!(status.value, "hello");
        assert_eq!(status.seen_generation, 7);
        assert_eq!(out.conditions[0].type_, "Ready");
    }

    #[test]
    fn unknown_field_is_invalid_with_its_path() {
        let errs = validate::<Noop>(&object("Noop", "a", json!({"valeu": "x"})));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "spec.valeu");
        assert!(errs[0].message.contains("unknown field `valeu`"), "{}", errs[0].message);
    }

    #[test]
    fn a_shared_object_reports_the_value_of_the_one_it_follows_read_without_a_namespace() {
        let mut leader = object("Shared", "leader", json!({"value": "one"}));
        leader.namespace = String::new();
        let host = FakeHost::new().with(leader);
        let mut reader = object("Shared", "reader", json!({"follows": "leader"}));
        reader.namespace = String::new();
        let out = reconcile::<Shared>(&host, &reader, &[]).unwrap();
        assert_eq!(out.status.unwrap().seen, "one");
        let missing = object("Shared", "lost", json!({"follows": "nobody"}));
        assert!(reconcile::<Shared>(&host, &missing, &[]).is_err(), "a missing leader is retried");
    }

    #[test]
    fn describes_one_kind_with_a_schema() {
        let info = __steward_plugin().info();
        assert_eq!(info.name, NAME);
        assert_eq!(info.kinds[0].kind, "Noop");
        let schema: serde_json::Value = serde_json::from_str(&info.kinds[0].spec_schema).unwrap();
        assert_eq!(schema["properties"]["value"]["type"], "string");
    }
}
