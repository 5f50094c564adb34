//! The trait a plugin author implements per kind, and what a reconcile returns.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::types::{CallRequest, Child, Condition, Event, EventType, FieldError, Object, ServiceSpec};

/// The reconcile logic of one kind.
///
/// The SDK parses the spec into [`Kind::Spec`] before any method runs (a
/// spec that does not parse is reported as [`Error::Invalid`] with the field
/// path), and runs [`Kind::validate`] before [`Kind::reconcile`], so
/// `reconcile` only ever sees specs that passed validation.
pub trait Kind: 'static {
    /// The typed spec; its JSON schema (schemars) becomes the kind's OpenAPI schema.
    type Spec: DeserializeOwned + JsonSchema;
    /// The typed status the plugin reports.
    type Status: Serialize + DeserializeOwned;
    /// API group, for example `steward.dev`.
    const GROUP: &'static str;
    /// API version, for example `v1alpha1`.
    const VERSION: &'static str;
    /// The kind, CamelCase.
    const KIND: &'static str;
    /// Lower-case plural.
    const PLURAL: &'static str;
    /// Whether objects live in namespaces.
    const NAMESPACED: bool = true;
    /// Default resync interval in seconds; 0 leaves it to the host.
    const RESYNC_SECONDS: u32 = 0;

    /// The columns the kind's lists show beyond the host's own (phase, ready, reason): in
    /// `steward status KIND`, the status page and the CRD's `additionalPrinterColumns`. Each
    /// names a JSON path into the spec or the status, for example
    /// `PrinterColumn::new("State", ".status.state", ColumnType::String)`. None by default.
    fn columns() -> Vec<crate::types::PrinterColumn> {
        Vec::new()
    }

    /// Checks the spec beyond what its type enforces; every problem with its path.
    fn validate(_obj: &Object<Self::Spec, Self::Status>) -> Vec<FieldError> {
        Vec::new()
    }

    /// Problems that do not stop the object, each with its path: the host reports them as
    /// warnings on the object (its status and history, and `steward check`), and reconciles
    /// it all the same. Runs only on specs that parse.
    fn warnings(_obj: &Object<Self::Spec, Self::Status>) -> Vec<FieldError> {
        Vec::new()
    }

    /// Brings the world towards the spec and reports the status.
    fn reconcile(ctx: &Context, obj: &Object<Self::Spec, Self::Status>) -> Result<Outcome<Self::Status>, Error>;

    /// Cleans up before the object is forgotten. The default keeps the last
    /// status and asks for no services, so the host stops them.
    fn finalize(_ctx: &Context, _obj: &Object<Self::Spec, Self::Status>) -> Result<Outcome<Self::Status>, Error> {
        Ok(Outcome::keep_status())
    }
}

/// What a successful reconcile wants: status, conditions, owned services, when to come back.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome<St> {
    /// The new status; `None` keeps the last one.
    pub status: Option<St>,
    /// Conditions to report.
    pub conditions: Vec<Condition>,
    /// The services the object should own now (needs the `services` capability).
    pub services: Vec<ServiceSpec>,
    /// Reconcile again after this long, sooner than the resync.
    pub requeue_after: Option<Duration>,
    /// Events to record.
    pub events: Vec<Event>,
    /// The tool calls the object wants (needs the `tools` capability and the SDK feature
    /// `tools`): `None` leaves the host's calls as they are; `Some` is the whole wanted set,
    /// so a pending or running call missing from it is cancelled.
    pub calls: Option<Vec<CallRequest>>,
    /// The child objects the object owns (needs the `children` capability and the SDK feature
    /// `children`): `None` leaves the host's children as they are; `Some` is the whole wanted
    /// set, so a child the host made earlier that is missing from it is deleted.
    pub children: Option<Vec<Child>>,
}

impl<St> Outcome<St> {
    /// Reports `status`, nothing else.
    pub fn status(status: St) -> Self {
        Self { status: Some(status), ..Self::keep_status() }
    }

    /// Keeps the last status; nothing else.
    pub fn keep_status() -> Self {
        Self {
            status: None,
            conditions: Vec::new(),
            services: Vec::new(),
            requeue_after: None,
            events: Vec::new(),
            calls: None,
            children: None,
        }
    }

    /// Adds a condition.
    pub fn condition(mut self, c: Condition) -> Self {
        self.conditions.push(c);
        self
    }

    /// Asks the host to own `service`.
    pub fn service(mut self, service: ServiceSpec) -> Self {
        self.services.push(service);
        self
    }

    /// Sets the tool calls the object wants now (see [`Outcome::calls`]).
    pub fn with_calls(mut self, calls: Vec<CallRequest>) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Sets the child objects the object owns now (see [`Outcome::children`]).
    pub fn with_children(mut self, children: Vec<Child>) -> Self {
        self.children = Some(children);
        self
    }

    /// Asks to be reconciled again after `after`.
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }

    /// Records an event.
    pub fn event(mut self, type_: EventType, reason: &str, message: impl Into<String>) -> Self {
        self.events.push(Event { type_, reason: reason.into(), message: message.into() });
        self
    }
}

/// Why a reconcile did not succeed, and so what the host does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Transient: the host retries with exponential backoff.
    Retry(String),
    /// Permanent: Failed until the spec changes or someone triggers a reconcile.
    Fatal(String),
    /// The spec is wrong: Failed with these field errors until the spec changes.
    Invalid(Vec<FieldError>),
}

impl Error {
    /// A transient error.
    pub fn retry(msg: impl Into<String>) -> Self {
        Self::Retry(msg.into())
    }
    /// A permanent error.
    pub fn fatal(msg: impl Into<String>) -> Self {
        Self::Fatal(msg.into())
    }
    /// One invalid field.
    pub fn invalid(path: impl Into<String>, msg: impl Into<String>) -> Self {
        Self::Invalid(vec![FieldError::new(path, msg)])
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retry(m) => write!(f, "retry: {m}"),
            Self::Fatal(m) => write!(f, "fatal: {m}"),
            Self::Invalid(errs) => {
                write!(f, "invalid: ")?;
                for (i, e) in errs.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}
