//! Turns contract calls on raw objects into typed [`Kind`] calls; shared by wasm exports and native tests.

use schemars::generate::SchemaSettings;

use crate::context::{Context, Host};
use crate::kind::{Error, Kind, Outcome};
use crate::types::{
    CallRequest, Child, Condition, Event, FieldError, KindInfo, Object, PluginInfo, RawObject, ServiceSpec,
    ServiceStatus, parse_json,
};

/// A reconcile's result with the status already JSON text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawOutcome {
    /// Status as JSON text (an object).
    pub status: String,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// Desired services.
    pub services: Vec<ServiceSpec>,
    /// Requeue after, in milliseconds.
    pub requeue_after_ms: Option<u64>,
    /// Events.
    pub events: Vec<Event>,
    /// The wanted tool calls; `None` leaves the host's as they are.
    pub calls: Option<Vec<CallRequest>>,
    /// The wanted child objects; `None` leaves the host's as they are.
    pub children: Option<Vec<Child>>,
}

type ValidateFn = fn(&RawObject) -> Vec<FieldError>;
type ReconcileFn = fn(&dyn Host, &RawObject, &[ServiceStatus], bool) -> Result<RawOutcome, Error>;

/// One kind's entry points, monomorphised from its [`Kind`] impl.
pub struct KindEntry {
    /// The kind name.
    pub kind: &'static str,
    /// Describes the kind.
    pub info: fn() -> KindInfo,
    /// Validates a raw object.
    pub validate: ValidateFn,
    /// The warnings of a raw object (none when its spec does not parse).
    pub warnings: ValidateFn,
    /// Reconciles (`false`) or finalizes (`true`) a raw object.
    pub reconcile: ReconcileFn,
}

impl KindEntry {
    /// The entry points of `K`.
    pub fn of<K: Kind>() -> Self {
        Self {
            kind: K::KIND,
            info: kind_info::<K>,
            validate: validate::<K>,
            warnings: warnings::<K>,
            reconcile: reconcile::<K>,
        }
    }
}

/// A whole plugin, as [`crate::export_plugin!`] declares it.
pub struct PluginEntry {
    /// Plugin name.
    pub name: &'static str,
    /// Plugin version.
    pub version: &'static str,
    /// Capabilities it needs.
    pub capabilities: &'static [&'static str],
    /// Its kinds.
    pub kinds: Vec<KindEntry>,
    /// Its world, when it reconciles its kinds together in rounds ([`crate::World`]).
    pub world: Option<crate::world::WorldEntry>,
}

impl PluginEntry {
    /// What `describe` returns.
    pub fn info(&self) -> PluginInfo {
        PluginInfo {
            name: self.name.to_string(),
            version: self.version.to_string(),
            kinds: self.kinds.iter().map(|k| (k.info)()).collect(),
            capabilities: self.capabilities.iter().map(|c| c.to_string()).collect(),
        }
    }

    /// The entry of `kind`, or a fatal error naming the kinds this plugin has.
    pub fn kind(&self, kind: &str) -> Result<&KindEntry, Error> {
        self.kinds.iter().find(|k| k.kind == kind).ok_or_else(|| {
            let have: Vec<_> = self.kinds.iter().map(|k| k.kind).collect();
            Error::fatal(format!("plugin {} does not reconcile kind {kind} (it has: {})", self.name, have.join(", ")))
        })
    }

    /// Validates `obj` with its kind's logic.
    pub fn validate(&self, obj: &RawObject) -> Vec<FieldError> {
        match self.kind(&obj.kind) {
            Ok(k) => (k.validate)(obj),
            Err(e) => vec![FieldError::new("kind", e.to_string())],
        }
    }

    /// The warnings of `obj` by its kind's logic; none for a kind this plugin does not have.
    pub fn warnings(&self, obj: &RawObject) -> Vec<FieldError> {
        self.kind(&obj.kind).map(|k| (k.warnings)(obj)).unwrap_or_default()
    }

    /// Reconciles (or finalizes, with `finalize`) `obj` with its kind's logic. A plugin with a
    /// world never reconciles its objects one by one: that is a fatal error saying so.
    pub fn reconcile(
        &self,
        host: &dyn Host,
        obj: &RawObject,
        services: &[ServiceStatus],
        finalize: bool,
    ) -> Result<RawOutcome, Error> {
        let kind = self.kind(&obj.kind)?;
        if self.world.is_some() {
            return Err(Error::fatal(format!(
                "plugin {} reconciles kind {} in world rounds, never one object at a time; \
                 this host called {} for it (a host without world reconcilers cannot run this plugin)",
                self.name,
                obj.kind,
                if finalize { "finalize" } else { "reconcile" }
            )));
        }
        (kind.reconcile)(host, obj, services, finalize)
    }

    /// Runs a world round: the world's logic over `round`, its answer checked against the
    /// plugin's own kinds. A plugin without a world fails the round with a fatal error.
    pub fn reconcile_world(
        &self,
        host: &dyn Host,
        round: &crate::world::Round,
    ) -> Result<crate::world::RawAnswer, Error> {
        let Some(world) = &self.world else {
            return Err(Error::fatal(format!("plugin {} has no world reconciler", self.name)));
        };
        let own: Vec<&str> = self.kinds.iter().map(|k| k.kind).collect();
        (world.reconcile)(host, round, &own)
    }
}

/// The OpenAPI v3 schema of `K::Spec`, inlined (no `$ref`), as Kubernetes wants it.
pub fn spec_schema<K: Kind>() -> serde_json::Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<K::Spec>().to_value();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("components");
        map.remove("definitions");
        map.remove("$defs");
    }
    schema
}

fn kind_info<K: Kind>() -> KindInfo {
    KindInfo {
        group: K::GROUP.to_string(),
        version: K::VERSION.to_string(),
        kind: K::KIND.to_string(),
        plural: K::PLURAL.to_string(),
        namespaced: K::NAMESPACED,
        spec_schema: spec_schema::<K>().to_string(),
        resync_seconds: K::RESYNC_SECONDS,
        columns: K::columns(),
    }
}

/// Parses a raw object into the typed object of `K`.
pub fn typed<K: Kind>(raw: &RawObject) -> Result<Object<K::Spec, K::Status>, Vec<FieldError>> {
    if !raw.spec.trim_start().starts_with('{') {
        let found = raw.spec.trim_start().chars().next().map_or("nothing", |c| match c {
            '[' => "a list",
            '"' => "a string",
            'n' => "null",
            't' | 'f' => "a boolean",
            _ => "a number",
        });
        return Err(vec![FieldError::new("spec", format!("must be a mapping of fields, not {found}"))]);
    }
    let spec = parse_json::<K::Spec>(&raw.spec, "spec").map_err(|e| vec![e])?;
    Ok(Object {
        api_version: raw.api_version.clone(),
        kind: raw.kind.clone(),
        name: raw.name.clone(),
        namespace: raw.namespace.clone(),
        generation: raw.generation,
        labels: raw.labels.clone(),
        annotations: raw.annotations.clone(),
        spec,
        status: raw.status_as::<K::Status>(),
        deleting: raw.deleting,
    })
}

fn validate<K: Kind>(raw: &RawObject) -> Vec<FieldError> {
    match typed::<K>(raw) {
        Ok(obj) => K::validate(&obj),
        Err(errs) => errs,
    }
}

fn warnings<K: Kind>(raw: &RawObject) -> Vec<FieldError> {
    typed::<K>(raw).map(|obj| K::warnings(&obj)).unwrap_or_default()
}

fn reconcile<K: Kind>(
    host: &dyn Host,
    raw: &RawObject,
    services: &[ServiceStatus],
    finalize: bool,
) -> Result<RawOutcome, Error> {
    let ctx = Context::new(host, services);
    let outcome = if finalize {
        // A broken spec must not block deletion: finalize sees the spec when it
        // parses, and otherwise the default finalizer keeps the last status.
        match typed::<K>(raw) {
            Ok(obj) => K::finalize(&ctx, &obj)?,
            Err(_) => Outcome::keep_status(),
        }
    } else {
        let obj = typed::<K>(raw).map_err(Error::Invalid)?;
        let errs = K::validate(&obj);
        if !errs.is_empty() {
            return Err(Error::Invalid(errs));
        }
        K::reconcile(&ctx, &obj)?
    };
    raw_outcome(outcome, raw)
}

/// Serializes a typed outcome; `None` status keeps the object's last status.
pub fn raw_outcome<St: serde::Serialize>(o: Outcome<St>, raw: &RawObject) -> Result<RawOutcome, Error> {
    let status = match &o.status {
        Some(s) => {
            serde_json::to_string(s).map_err(|e| Error::fatal(format!("status does not serialize to JSON: {e}")))?
        }
        None => raw.status.clone().unwrap_or_else(|| "{}".to_string()),
    };
    Ok(RawOutcome {
        status,
        conditions: o.conditions,
        services: o.services,
        requeue_after_ms: o.requeue_after.map(|d| d.as_millis().min(u64::MAX as u128) as u64),
        events: o.events,
        calls: o.calls,
        children: o.children,
    })
}
