//! A test plugin whose `SecretOwner` objects own exactly the services their spec lists (secret
//! references included, in the SDK's own JSON form) and report what the host observes of them.
//!
//! It exists so the host's tests can hand the services driver any [`ServiceSpec`] through the
//! real contract (`services.set-desired`) without depending on a bundled kind's spec format.

use steward_sdk::prelude::*;

/// The spec of a `SecretOwner` object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretOwnerSpec {
    /// The services to own, each a `ServiceSpec` as the SDK serializes it (camelCase).
    #[serde(default)]
    pub services: Vec<serde_json::Value>,
}

/// The `SecretOwner` kind.
pub struct SecretOwner;

impl Kind for SecretOwner {
    type Spec = SecretOwnerSpec;
    type Status = serde_json::Value;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "SecretOwner";
    const PLURAL: &'static str = "secretowners";

    fn validate(obj: &Object<SecretOwnerSpec, serde_json::Value>) -> Vec<FieldError> {
        parse(&obj.spec).err().into_iter().collect()
    }

    fn reconcile(
        ctx: &Context,
        obj: &Object<SecretOwnerSpec, serde_json::Value>,
    ) -> Result<Outcome<serde_json::Value>, Error> {
        let services = parse(&obj.spec).map_err(|e| Error::Invalid(vec![e]))?;
        let observed: Vec<serde_json::Value> = ctx
            .services()
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "phase": s.phase.as_str(),
                    "pid": s.pid,
                    "message": s.message,
                    "authRequired": s.auth_required,
                    "tools": s.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut out = Outcome::status(serde_json::json!({ "services": observed }));
        for s in services {
            out = out.service(s);
        }
        Ok(out)
    }
}

/// The spec's services, typed; the error names the failing entry.
fn parse(spec: &SecretOwnerSpec) -> Result<Vec<ServiceSpec>, FieldError> {
    spec.services
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v.clone()).map_err(|e| FieldError::new(format!("spec.services[{i}]"), e.to_string()))
        })
        .collect()
}

steward_sdk::export_plugin!(name: "secret-owner", version: "0.1.0", kinds: [SecretOwner]);
