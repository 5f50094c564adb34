//! One loaded plugin: its pre-linked component, what it describes, and every call into it under its limits.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward_sdk::{FieldError, LogLevel, PluginInfo, RawObject, RawOutcome};
use tracing::Instrument;
use wasmtime::component::{ComponentExportIndex, Func, TypedFunc};
use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::columns::exports::steward::plugin::columns as wc;
use super::bindings::columns::exports::steward::plugin::columns::GuestIndices as ColumnsIndices;
use super::bindings::lint::exports::steward::plugin::lint::GuestIndices as LintIndices;
use super::bindings::{self, steward::plugin::types as w};
use super::cache::Origin;
use super::convert;
use super::error::{LoadError, PluginError, UngrantedCall};
use super::imports::ImportCheck;
use super::logs::{DropReport, LINES_BURST, LINES_PER_SEC, LogLine, MAX_LINES_PER_CALL, RateLimit, one_line};
use super::lowered;
use super::reads::{HostReads, Read};
use super::runtime::Runtime;
use super::sandbox::CallState;
use super::settings::PluginSettings;
use super::unit::{CallInput, Capability, Inputs};
use crate::model::{Name, is_dns_label};
use crate::world::WorldSpec;

mod world;

use super::bindings::world::exports::steward::plugin::world_reconciler as ww;
use world::WorldIndices;
pub use world::{RoundAnswer, RoundRequest};

/// Most idle instances kept per plugin when instances are reused.
const MAX_IDLE: usize = 16;
/// Copy budget beyond `max_output` for the structure around the answer.
const OUTPUT_SLACK: usize = 64 * 1024;
/// Extra time past the deadline before the host abandons a call that did not stop itself.
const BACKSTOP: Duration = Duration::from_secs(2);
/// Most events one reconcile may report; each becomes a host log line (and a Kubernetes Event).
const MAX_EVENTS_PER_CALL: usize = 16;

/// What one reconcile or finalize is given.
#[derive(Clone, Debug, Default)]
pub struct ReconcileRequest {
    /// The object, with its last status.
    pub resource: RawObject,
    /// What each capability unit is given for the call, under the unit's own types.
    pub inputs: Inputs,
}

/// The result of one call, with what the plugin read and logged on the way.
#[derive(Debug)]
pub struct CallReport<T> {
    /// The answer, or why there is none.
    pub result: Result<T, PluginError>,
    /// Distinct reads the call made through `get`/`list`, sorted.
    pub reads: Vec<Read>,
    /// True when the call made more distinct reads than are recorded.
    pub reads_overflowed: bool,
    /// Lines the plugin wrote (log import, stdout, stderr), bounded per call.
    pub logs: Vec<LogLine>,
    /// Lines dropped by the per-call bound.
    pub logs_dropped: u64,
    /// Wall time of the call, instance creation included.
    pub elapsed: Duration,
    /// CPU time the call took on the host's threads (instance set-up and teardown included).
    pub cpu: Duration,
    /// Whether a new instance was created for the call.
    pub fresh_instance: bool,
    /// The plugin's warnings, when they were asked first in the same instance
    /// ([`Plugin::reconcile_linted`]); their CPU time is not in `cpu`.
    linted: Option<Box<Linted>>,
}

/// The warnings asked first in a reconcile's instance, and whether their failure spent that
/// instance before the reconcile ran in it.
#[derive(Debug)]
struct Linted {
    report: CallReport<Vec<FieldError>>,
    spent: bool,
}

/// How the warnings asked first in a reconcile's instance ended, inside the call.
enum LintStep {
    /// They answered (the answer may still be refused for its size); the reconcile ran after.
    Answered(CallReport<Vec<FieldError>>),
    /// They failed (classified once the call is over); the instance is spent.
    Failed { started: Instant, cpu: Duration },
}

enum Op<'a> {
    Describe,
    Validate(w::Resource),
    Lint(w::Resource),
    Columns,
    /// A reconcile, and the object to ask `lint` about first, in the same instance.
    Reconcile(lowered::Request<'a>, Option<w::Resource>),
    Finalize(lowered::Request<'a>),
    DescribeWorld,
    /// A world round, and the plugin's own objects in it with their units' inputs.
    World(ww::Round, std::collections::HashMap<crate::model::ObjectKey, Inputs>),
}

impl Op<'_> {
    /// The export's name, as spans and metrics say it.
    fn name(&self) -> &'static str {
        match self {
            Op::Describe => "describe",
            Op::Validate(_) => "validate",
            Op::Lint(_) => "warnings",
            Op::Columns => "printer-columns",
            Op::Reconcile(..) => "reconcile",
            Op::Finalize(_) => "finalize",
            Op::DescribeWorld => "describe-world",
            Op::World(..) => "reconcile-world",
        }
    }
}

enum OpOut {
    Describe(w::PluginInfo),
    Validate(Vec<w::FieldError>),
    Lint(Vec<w::FieldError>),
    Columns(Vec<wc::KindColumns>),
    /// The answer, with what each granted unit folded into it ([`Capability::finish_call`]).
    Reconcile(Result<RawOutcome, w::ReconcileError>),
    DescribeWorld(Option<ww::WorldInfo>),
    /// A round's outcomes, with what the units folded into each, and its requeue; or why the
    /// round as a whole failed.
    World(Result<(world::RawOutcomes, Option<u64>), PluginError>),
}

struct Instance {
    store: Store<CallState>,
    /// The instance itself, where the optional exports are looked up.
    raw: wasmtime::component::Instance,
    exports: Exports,
}

/// Where the reconciler's four exports are in a component, looked up once at load.
struct ExportIndices {
    describe: ComponentExportIndex,
    validate: ComponentExportIndex,
    reconcile: ComponentExportIndex,
    finalize: ComponentExportIndex,
}

impl ExportIndices {
    /// The indices of `steward:plugin/reconciler`'s functions in `component`, if it exports them all.
    fn new(component: &wasmtime::component::Component) -> Option<Self> {
        let iface =
            component.get_export_index(None, format!("{}/reconciler@{}", bindings::WIT_PACKAGE, super::WIT_VERSION))?;
        let func = |name: &str| component.get_export_index(Some(&iface), name);
        Some(Self {
            describe: func("describe")?,
            validate: func("validate")?,
            reconcile: func("reconcile")?,
            finalize: func("finalize")?,
        })
    }

    /// The four functions of `instance`, without checking their types again.
    fn load(&self, store: &mut Store<CallState>, instance: &wasmtime::component::Instance) -> Option<Exports> {
        Some(Exports {
            describe: instance.get_func(&mut *store, self.describe)?,
            validate: instance.get_func(&mut *store, self.validate)?,
            reconcile: instance.get_func(&mut *store, self.reconcile)?,
            finalize: instance.get_func(&mut *store, self.finalize)?,
        })
    }
}

/// The reconciler's exports in one instance.
///
/// Their types are checked once per plugin, on the first instance (bindgen's typed load, which
/// type-checks every export: a few microseconds that a fresh instance per call would otherwise
/// pay each time); every instance of one component has the same export types, so later instances
/// call them through [`TypedFunc::new_unchecked`] with the same signatures bindgen uses.
#[derive(Clone, Copy)]
struct Exports {
    describe: Func,
    validate: Func,
    reconcile: Func,
    finalize: Func,
}

impl Exports {
    fn describe(&self) -> TypedFunc<(), (w::PluginInfo,)> {
        // SAFETY: the types of this component's exports were checked on its first instance (see `Exports`).
        unsafe { TypedFunc::new_unchecked(self.describe) }
    }

    fn validate<'a>(&self) -> TypedFunc<(&'a w::Resource,), (Vec<w::FieldError>,)> {
        // SAFETY: as in `describe`.
        unsafe { TypedFunc::new_unchecked(self.validate) }
    }

    fn reconcile<'a, 'b>(&self, finalize: bool) -> TypedFunc<(&'a lowered::Request<'b>,), ReconcileResults> {
        let f = if finalize { self.finalize } else { self.reconcile };
        // SAFETY: as in `describe`; [`lowered::Request`]'s type is checked against both
        // exports on the same first instance (`Exports::check_lowered`).
        unsafe { TypedFunc::new_unchecked(f) }
    }

    /// Checks that `reconcile` and `finalize` take [`lowered::Request`] and answer with what
    /// bindgen's types say: the request is the host's borrowed mirror of the generated record.
    fn check_lowered(&self, store: &Store<CallState>) -> wasmtime::Result<()> {
        for f in [self.reconcile, self.finalize] {
            f.typed::<(&lowered::Request<'_>,), ReconcileResults>(store)?;
        }
        Ok(())
    }
}

/// What `reconcile` and `finalize` answer with.
type ReconcileResults = (Result<w::Response, w::ReconcileError>,);

/// A plugin that compiled, linked and described itself.
///
/// Calls are safe to make concurrently; each runs in its own store, fresh by
/// default, or taken from a pool of idle instances when the plugin's settings
/// ask for reuse (an instance is discarded after any failed call).
pub struct Plugin {
    runtime: Arc<Runtime>,
    pre: bindings::PluginFullPre<CallState>,
    /// Where `pre`'s required exports are, looked up once.
    indices: bindings::PluginFullIndices,
    /// The same exports, for the calls that skip the type check.
    exports: ExportIndices,
    /// Whether the exports' types were checked on an instance of this component (then later
    /// instances skip the check).
    types_checked: std::sync::atomic::AtomicBool,
    /// Where the optional `lint` export is, when the component has it.
    lint: Option<LintIndices>,
    /// Where the optional `columns` export is, when the component has it.
    columns: Option<ColumnsIndices>,
    /// Where the optional `world-reconciler` export is, when the component has it.
    world: Option<WorldIndices>,
    /// The world `describe-world` named, if any.
    world_spec: Option<WorldSpec>,
    /// Each kind's spec schema made structural, when it can be: what unknown fields are pruned by.
    schemas: std::collections::BTreeMap<String, Arc<serde_json::Value>>,
    imports: ImportCheck,
    /// The units it is linked with (the always-granted ones until its grants are known).
    units: Vec<&'static dyn Capability>,
    warnings: Vec<String>,
    info: PluginInfo,
    /// `info`'s name and version as shared [`Name`]s (see [`Plugin::names`]).
    names: (Name, Name),
    file: PathBuf,
    settings: PluginSettings,
    origin: Origin,
    /// Keeps its compile cache entry from being pruned while it is loaded.
    _cache_entry: Option<super::InUse>,
    idle: Mutex<Vec<Instance>>,
    /// Store states of fresh instances that ended, recycled for the next ones ([`CallState::recycled`]).
    spare: Mutex<Vec<CallState>>,
    rate: RateLimit,
}

impl Plugin {
    /// Compiles (or loads from cache) `bytes`, checks the contract, calls `describe`, checks its
    /// answer, and links the component with exactly the capability units its settings grant.
    /// A component importing a capability that is not granted loads, with the imports of that
    /// capability failing each call that reaches them with [`PluginError::CapabilityDenied`];
    /// one *declaring* a capability that is not granted is blocked ([`Plugin::missing_capabilities`]).
    pub async fn load(
        runtime: Arc<Runtime>,
        file: &Path,
        bytes: Vec<u8>,
        settings_for: impl FnOnce(&str) -> PluginSettings,
    ) -> Result<Self, LoadError> {
        let rt = runtime.clone();
        let f = file.to_path_buf();
        let prepared = tokio::task::spawn_blocking(move || rt.prepare(&f, &bytes)).await.map_err(|e| {
            LoadError::Compile { file: file.to_path_buf(), message: format!("compiler task failed: {e}") }
        })??;
        let origin = prepared.origin;
        let rt_units = runtime.units();
        let (indices, exports, lint) = exports_of(file, &prepared.base_pre)?;
        let columns = ColumnsIndices::new(prepared.base_pre.instance_pre()).ok();
        let world = WorldIndices::new(prepared.base_pre.instance_pre()).ok();
        let mut plugin = Self {
            runtime,
            pre: prepared.base_pre,
            indices,
            exports,
            types_checked: Default::default(),
            lint,
            columns,
            world,
            world_spec: None,
            schemas: Default::default(),
            imports: prepared.imports,
            units: rt_units.base(),
            warnings: Vec::new(),
            info: PluginInfo { name: String::new(), version: String::new(), kinds: vec![], capabilities: vec![] },
            names: Default::default(),
            file: file.to_path_buf(),
            settings: PluginSettings::default(),
            origin,
            _cache_entry: prepared.cache_entry,
            idle: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            rate: RateLimit::new(LINES_PER_SEC, LINES_BURST),
        };
        let report = plugin.invoke(Op::Describe, CallInput::none(), Ok).await;
        let mut info = match report.result {
            Ok(OpOut::Describe(i)) => convert::plugin_info(i),
            Ok(_) => unreachable!("describe answers with describe"),
            Err(error) => return Err(LoadError::Describe { file: file.to_path_buf(), error }),
        };
        check_info(&info).map_err(|message| LoadError::BadInfo { file: file.to_path_buf(), message })?;
        if plugin.columns.is_some() {
            let report = plugin.invoke(Op::Columns, CallInput::none(), Ok).await;
            let declared = match report.result {
                Ok(OpOut::Columns(c)) => c,
                Ok(_) => unreachable!("printer-columns answers with columns"),
                Err(error) => return Err(LoadError::Describe { file: file.to_path_buf(), error }),
            };
            convert::add_columns(&mut info, declared)
                .map_err(|message| LoadError::BadInfo { file: file.to_path_buf(), message })?;
        }
        if plugin.world.is_some() {
            let report = plugin.invoke(Op::DescribeWorld, CallInput::none(), Ok).await;
            let declared = match report.result {
                Ok(OpOut::DescribeWorld(w)) => w,
                Ok(_) => unreachable!("describe-world answers with a world"),
                Err(error) => return Err(LoadError::Describe { file: file.to_path_buf(), error }),
            };
            if let Some(declared) = declared {
                let spec = world::world_spec(declared, info.kinds.iter().map(|k| k.kind.clone()).collect());
                spec.check()
                    .map_err(|e| LoadError::BadInfo { file: file.to_path_buf(), message: format!("its world: {e}") })?;
                plugin.world_spec = Some(spec);
            }
        }
        let settings = settings_for(&info.name);
        // Imports of capabilities not granted fail their calls, naming the grant.
        let stub = !plugin.imports.ungranted(&settings).is_empty();
        let granted = plugin.runtime.units().granted(&settings);
        plugin.pre = plugin.runtime.link(file, &prepared.component, &granted, stub)?;
        plugin.units = granted;
        // No instance of the describe phase (linked before the grants were known) is reused,
        // nor a store state made under its default limits.
        plugin.idle.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
        plugin.spare.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
        (plugin.indices, plugin.exports, plugin.lint) = exports_of(file, &plugin.pre)?;
        plugin.columns = ColumnsIndices::new(plugin.pre.instance_pre()).ok();
        plugin.world = WorldIndices::new(plugin.pre.instance_pre()).ok();
        plugin.schemas = structural_schemas(&info);
        plugin.warnings = plugin.imports.unused(plugin.runtime.units(), &info.name, &info.capabilities, &settings);
        plugin.settings = settings;
        plugin.names = (Name::interned(&info.name), Name::interned(&info.version));
        plugin.info = info;
        Ok(plugin)
    }

    /// The structural schema of `kind`'s spec (what `steward crds` puts in its CRD), by which
    /// the host prunes unknown fields; `None` for a kind it does not have, or whose schema cannot
    /// be made structural (then nothing is pruned and the plugin's own parsing decides).
    pub fn spec_schema(&self, kind: &str) -> Option<&serde_json::Value> {
        self.schemas.get(kind).map(|s| s.as_ref())
    }

    /// Whether the component exports the optional `lint` interface (its own warnings).
    pub fn has_warnings(&self) -> bool {
        self.lint.is_some()
    }

    /// What the plugin described.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Its name and version as [`Name::interned`] does: what a status record or a metric label
    /// holds of the plugin on every reconcile, cloned without copying the text.
    pub fn names(&self) -> (&Name, &Name) {
        (&self.names.0, &self.names.1)
    }

    /// The file it was loaded from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Its settings from the host config.
    pub fn settings(&self) -> &PluginSettings {
        &self.settings
    }

    /// Whether it was compiled now or loaded from the compile cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Capabilities it declares that its settings do not grant. A plugin with any is blocked;
    /// an import alone never blocks (calling it without the grant fails that call).
    pub fn missing_capabilities(&self) -> Vec<String> {
        self.imports.missing(&self.info.capabilities, &self.settings)
    }

    /// Whether it needs a capability the host config does not grant ([`Self::missing_capabilities`]
    /// is not empty), answered without building that list.
    pub fn is_blocked(&self) -> bool {
        self.info.capabilities.iter().any(|c| !self.settings.grants(c))
    }

    /// The capabilities it may use: those it declares, then those its component imports that
    /// its settings grant, each once (what a config line granting all it needs lists).
    pub fn needed_capabilities(&self) -> Vec<String> {
        self.imports.usable(&self.info.capabilities, &self.settings)
    }

    /// The capabilities its component imports that its settings do not grant: calling them
    /// fails the call with [`PluginError::CapabilityDenied`].
    pub fn ungranted_imports(&self) -> Vec<&'static str> {
        self.imports.ungranted(&self.settings)
    }

    /// The capabilities (beyond the base) its component imports.
    pub fn imported_capabilities(&self) -> Vec<&'static str> {
        self.imports.imported.iter().map(|(n, _)| *n).collect()
    }

    /// Capabilities it declares or is granted but never imports, one sentence each.
    pub fn capability_warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Calls `describe` again (it must be pure; used by `plugin inspect` and tests).
    pub async fn describe(&self) -> CallReport<PluginInfo> {
        self.invoke(Op::Describe, CallInput::none(), |o| match o {
            OpOut::Describe(i) => Ok(convert::plugin_info(i)),
            _ => unreachable!("describe answers with describe"),
        })
        .await
    }

    /// Calls `validate` on `obj`; an empty list means valid.
    pub async fn validate(&self, obj: &RawObject) -> CallReport<Vec<FieldError>> {
        self.invoke(Op::Validate(convert::resource_to_wit(obj)), CallInput::none(), |o| match o {
            OpOut::Validate(errs) => Ok(errs.into_iter().map(convert::field_error).collect()),
            _ => unreachable!("validate answers with validate"),
        })
        .await
    }

    /// Calls the optional `lint` export's `warnings` on `obj` under the same limits as `validate`;
    /// `None` when the component does not export it (it has no warnings of its own).
    pub async fn warnings(&self, obj: &RawObject) -> Option<CallReport<Vec<FieldError>>> {
        self.lint.as_ref()?;
        let report =
            self.invoke(Op::Lint(convert::resource_to_wit(obj)), CallInput::none(), |o| Ok(lint_answer(o))).await;
        Some(report)
    }

    /// Calls `reconcile`; reads go to `reads` and are recorded in the report.
    pub async fn reconcile(&self, req: &ReconcileRequest, reads: Arc<dyn HostReads>) -> CallReport<RawOutcome> {
        let input = CallInput { reads, inputs: req.inputs.clone() };
        let op = Op::Reconcile(self.request_to_wit(req), None);
        self.invoke(op, input, |o| self.check_response(o, req.resource.status.as_deref())).await
    }

    /// Calls `reconcile`, and first, when `lint` is set and the component exports `lint`, its
    /// `warnings` on the same object in the same instance: the two calls share one instance's
    /// set-up and teardown, which is most of what a call of a Rust plugin costs. The warnings are
    /// pure, like `validate`, so what they leave in the instance is nothing the reconcile relies
    /// on. Warnings that fail (a trap, a panic, the deadline) leave that instance spent: the
    /// reconcile then runs in a fresh one, as on its own. Each call keeps its own deadline and
    /// output bound, and its own CPU time (the warnings' is not in the reconcile's report).
    /// The first report is the warnings', `None` when they were not asked or there is no `lint`.
    pub async fn reconcile_linted(
        &self,
        req: &ReconcileRequest,
        reads: Arc<dyn HostReads>,
        lint: bool,
    ) -> (Option<CallReport<Vec<FieldError>>>, CallReport<RawOutcome>) {
        if !lint || self.lint.is_none() {
            return (None, self.reconcile(req, reads).await);
        }
        let input = CallInput { reads: reads.clone(), inputs: req.inputs.clone() };
        let op = Op::Reconcile(self.request_to_wit(req), Some(convert::resource_to_wit(&req.resource)));
        let mut report = self.invoke(op, input, |o| self.check_response(o, req.resource.status.as_deref())).await;
        match report.linted.take().map(|l| *l) {
            // The reconcile did not run: the instance the warnings failed in is not used again.
            Some(Linted { report: warnings, spent: true }) => (Some(warnings), self.reconcile(req, reads).await),
            warnings => (warnings.map(|l| l.report), report),
        }
    }

    /// Calls `finalize`; reads go to `reads` and are recorded in the report.
    pub async fn finalize(&self, req: &ReconcileRequest, reads: Arc<dyn HostReads>) -> CallReport<RawOutcome> {
        let input = CallInput { reads, inputs: req.inputs.clone() };
        let op = Op::Finalize(self.request_to_wit(req));
        self.invoke(op, input, |o| self.check_response(o, req.resource.status.as_deref())).await
    }

    /// `had` is the status the request carried.
    fn check_response(&self, out: OpOut, had: Option<&str>) -> Result<RawOutcome, PluginError> {
        let OpOut::Reconcile(res) = out else { unreachable!("reconcile answers with reconcile") };
        self.check_answer(res.map_err(reconcile_error)?, had)
    }

    /// Checks one object's answer (a reconcile's, or a round's outcome for the object): grants,
    /// events bounded, the status a JSON object. A status the same, byte for byte, as `had`, the
    /// one the object carried (what the host stored, or the cluster's JSON), is not parsed again:
    /// an object at rest answers with the status it has.
    fn check_answer(&self, mut out: RawOutcome, had: Option<&str>) -> Result<RawOutcome, PluginError> {
        // An answer that uses a capability the plugin is not granted (a plugin built before the
        // capability had an interface answers through the response) is refused.
        if let Some(unit) = self
            .runtime
            .units()
            .all()
            .iter()
            .find(|u| !u.always_granted() && !self.settings.grants(u.name()) && u.used_by(&out))
        {
            return Err(PluginError::CapabilityDenied {
                plugin: self.info.name.clone(),
                capability: unit.name().into(),
                used: format!("answered with what only capability `{}` may ask for", unit.name()),
            });
        }
        for unit in &self.units {
            unit.check_outcome(&self.info.name, &self.settings, &out)?;
        }
        self.bound_events(&mut out.events);
        if !status_is_object(&out.status, had) {
            return Err(PluginError::BadOutput(format!(
                "status is not a JSON object: {}",
                out.status.chars().take(80).collect::<String>()
            )));
        }
        Ok(out)
    }

    /// The WIT request of a reconcile or finalize, borrowed from `req`: the object, and what
    /// the units add to it.
    fn request_to_wit<'a>(&self, req: &'a ReconcileRequest) -> lowered::Request<'a> {
        let mut request = lowered::Request::new(&req.resource);
        for unit in self.runtime.units().all() {
            unit.request(&req.inputs, &mut request);
        }
        request
    }

    /// The host logs every event a reconcile reports: they count against the plugin's log limits
    /// (at most [`MAX_EVENTS_PER_CALL`] a call, within its rate), and each is one line.
    fn bound_events(&self, events: &mut Vec<steward_sdk::Event>) {
        let over = events.len().saturating_sub(MAX_EVENTS_PER_CALL);
        events.truncate(MAX_EVENTS_PER_CALL);
        let (admitted, report) = self.rate.admit(events.len(), over as u64);
        events.truncate(admitted);
        for e in events.iter_mut() {
            e.reason = one_line(&e.reason);
            e.message = one_line(&e.message);
        }
        if let Some(r) = report {
            self.report_drops(r);
        }
    }

    async fn instance(&self) -> Result<(Instance, bool), PluginError> {
        if self.settings.limits.reuse_instances
            && let Some(i) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
        {
            return Ok((i, false));
        }
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let state = spare.unwrap_or_else(|| CallState::new(self.settings.limits.memory, self.runtime.plugin_env()));
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|s| &mut s.memory);
        for unit in &self.units {
            unit.bind(store.data_mut(), &self.info.name, &self.settings);
        }
        let limit = self.settings.limits.timeout;
        store.data_mut().deadline = Instant::now() + limit;
        store.epoch_deadline_callback(|mut ctx| {
            let st = ctx.data_mut();
            if Instant::now() >= st.deadline {
                st.timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);
        let raw = self.pre.instance_pre().instantiate_async(&mut store).await.map_err(|e| {
            if store.data().memory.hit {
                PluginError::MemoryLimit { limit: self.settings.limits.memory, trap: "while instantiating".into() }
            } else {
                PluginError::Host(format!("cannot instantiate plugin {}: {e:#}", self.info.name))
            }
        })?;
        let cannot = |e: &dyn std::fmt::Display| {
            PluginError::Host(format!("cannot instantiate plugin {}: {e:#}", self.info.name))
        };
        let exports = self.exports.load(&mut store, &raw).ok_or_else(|| cannot(&"an export is missing"))?;
        if !self.types_checked.load(Ordering::Acquire) {
            self.indices.load(&mut store, &raw).map_err(|e| cannot(&e))?;
            exports.check_lowered(&store).map_err(|e| cannot(&e))?;
            self.types_checked.store(true, Ordering::Release);
        }
        self.runtime.note_instance();
        Ok((Instance { store, raw, exports }, true))
    }

    /// Runs `op` in its own `plugin_call` span (a child of the reconcile span) and makes its answer
    /// `T` with `check`: the plugin's log lines are written inside the span, and its CPU time
    /// (`cpu_time_ms`), wall time and error (the answer's too) are recorded on it.
    async fn invoke<T>(
        &self,
        op: Op<'_>,
        input: CallInput,
        check: impl FnOnce(OpOut) -> Result<T, PluginError>,
    ) -> CallReport<T> {
        let span = tracing::info_span!(
            "plugin_call",
            plugin = %self.span_name(),
            op = op.name(),
            cpu_time_ms = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        // Boxed: the call's future is kilobytes, and each layer around it would move it.
        let (report, cpu) = metered(Box::pin(self.invoke_unmetered(op, input))).instrument(span.clone()).await;
        let mut report = report.map(check);
        report.cpu = cpu.saturating_sub(report.linted.as_ref().map_or(Duration::ZERO, |l| l.report.cpu));
        span.record("cpu_time_ms", cpu.as_secs_f64() * 1000.0);
        span.record("elapsed_ms", report.elapsed.as_secs_f64() * 1000.0);
        if let Err(e) = &report.result {
            span.record("error", e.label());
            crate::telemetry::set_error(&span, e.label());
        }
        report
    }

    /// The plugin's name in its spans: the one it describes itself with, and before that is
    /// known (its `describe` call) the name of its file.
    fn span_name(&self) -> std::borrow::Cow<'_, str> {
        if self.info.name.is_empty() {
            self.file.file_stem().map_or_else(|| "".into(), |s| s.to_string_lossy())
        } else {
            self.info.name.as_str().into()
        }
    }

    async fn invoke_unmetered(&self, op: Op<'_>, input: CallInput) -> CallReport<OpOut> {
        let started = Instant::now();
        let _tick = self.runtime.enter();
        let limits = &self.settings.limits;
        let (mut inst, fresh) = match self.instance().await {
            Ok(i) => i,
            Err(e) => return CallReport::failed(e, started),
        };
        inst.store.data_mut().reset(&self.units, &input);
        arm(&mut inst.store, limits, started);
        let exports = inst.exports;
        let lint = match (&op, &self.lint) {
            (Op::Lint(_) | Op::Reconcile(_, Some(_)), Some(indices)) => {
                match indices.load(&mut inst.store, &inst.raw) {
                    Ok(l) => Some(l),
                    Err(e) => return CallReport::failed(PluginError::Host(format!("{e:#}")), started),
                }
            }
            _ => None,
        };
        let columns = match (&op, &self.columns) {
            (Op::Columns, Some(indices)) => match indices.load(&mut inst.store, &inst.raw) {
                Ok(c) => Some(c),
                Err(e) => return CallReport::failed(PluginError::Host(format!("{e:#}")), started),
            },
            _ => None,
        };
        let world = match (&op, &self.world) {
            (Op::World(..) | Op::DescribeWorld, Some(indices)) => match indices.load(&mut inst.store, &inst.raw) {
                Ok(w) => Some(w),
                Err(e) => return CallReport::failed(PluginError::Host(format!("{e:#}")), started),
            },
            _ => None,
        };
        let op = match op {
            Op::World(round, targets) => {
                // A round may receive and answer up to the world's byte bound.
                let fuel = usize::try_from(limits.world_bytes.max(limits.max_output)).unwrap_or(usize::MAX);
                inst.store.set_hostcall_fuel(fuel.saturating_add(OUTPUT_SLACK));
                inst.store.data_mut().round = Some(super::round::RoundScope::new(
                    self.units.clone(),
                    self.info.name.clone(),
                    self.settings.clone(),
                    input.reads.clone(),
                    targets.clone(),
                ));
                let own: std::collections::HashSet<crate::model::ObjectKey> = targets.into_keys().collect();
                Op::World(round, own.into_iter().map(|k| (k, Inputs::default())).collect())
            }
            op => op,
        };
        let own_keys: std::collections::HashSet<crate::model::ObjectKey> = match &op {
            Op::World(_, t) => t.keys().cloned().collect(),
            _ => Default::default(),
        };
        let linting = matches!(op, Op::Reconcile(_, Some(_))) && lint.is_some();
        let mut lint_step: Option<LintStep> = None;
        let store = &mut inst.store;
        let call = async {
            match op {
                Op::Columns => match &columns {
                    Some(c) => c.call_printer_columns(&mut *store).await.map(OpOut::Columns),
                    None => Err(wasmtime::format_err!("the component does not export steward:plugin/columns")),
                },
                Op::Lint(r) => match &lint {
                    Some(l) => l.call_warnings(&mut *store, &r).await.map(OpOut::Lint),
                    None => Err(wasmtime::format_err!("the component does not export steward:plugin/lint")),
                },
                Op::Describe => exports.describe().call_async(&mut *store, ()).await.map(|(i,)| OpOut::Describe(i)),
                Op::Validate(r) => {
                    exports.validate().call_async(&mut *store, (&r,)).await.map(|(e,)| OpOut::Validate(e))
                }
                Op::Reconcile(r, first) => {
                    if let (Some(res), Some(l)) = (first, &lint) {
                        let started = Instant::now();
                        let (answer, cpu) = metered(l.call_warnings(&mut *store, &res)).await;
                        let out = match answer {
                            Ok(errs) => OpOut::Lint(errs),
                            // Classified with the store's state once the call is over; the
                            // reconcile does not run in this instance.
                            Err(e) => {
                                lint_step = Some(LintStep::Failed { started, cpu });
                                return Err(e);
                            }
                        };
                        let result = self.check_size(&out).map(|()| lint_answer(out));
                        lint_step = Some(LintStep::Answered(CallReport::answered(result, started).with_cpu(cpu)));
                        // The reconcile's own deadline and output bound, as on its own.
                        arm(&mut *store, limits, Instant::now());
                    }
                    exports.reconcile(false).call_async(&mut *store, (&r,)).await.map(|(o,)| reconciled(o))
                }
                Op::Finalize(r) => {
                    exports.reconcile(true).call_async(&mut *store, (&r,)).await.map(|(o,)| reconciled(o))
                }
                Op::DescribeWorld => match &world {
                    Some(w) => w.call_describe_world(&mut *store).await.map(OpOut::DescribeWorld),
                    None => Err(wasmtime::format_err!("the component does not export steward:plugin/world-reconciler")),
                },
                Op::World(r, _) => match &world {
                    Some(w) => w.call_reconcile_world(&mut *store, &r).await.map(|res| {
                        OpOut::World(match res {
                            Ok(answer) => world::outcomes(answer, |r| {
                                let key = crate::model::ObjectKey::new(&r.kind, &r.namespace, &r.name);
                                own_keys.contains(&key).then_some(key)
                            })
                            .map_err(PluginError::BadOutput),
                            Err(e) => Err(reconcile_error(e)),
                        })
                    }),
                    None => Err(wasmtime::format_err!("the component does not export steward:plugin/world-reconciler")),
                },
            }
        };
        let backstop = if linting { limits.timeout * 2 + BACKSTOP } else { limits.timeout + BACKSTOP };
        let mut raw = tokio::time::timeout(backstop, call).await;
        let state = inst.store.data_mut();
        if let Ok(Ok(OpOut::Reconcile(Ok(out)))) = &mut raw {
            for unit in &self.units {
                unit.finish_call(state, out);
            }
        }
        if let Ok(Ok(OpOut::World(res))) = &mut raw {
            let finished = match res {
                Ok((outcomes, _)) => super::round::finish(state, outcomes),
                Err(_) => Ok(()),
            };
            if let Err(e) = finished {
                *res = Err(e);
            }
        }
        state.round = None;
        let (logs, logs_dropped, panic) = {
            let mut log = state.host.log.lock().unwrap_or_else(|e| e.into_inner());
            log.finish();
            (std::mem::take(&mut log.lines), log.dropped, log.panic.take())
        };
        self.emit(&logs, logs_dropped);
        let reads: Vec<Read> = std::mem::take(&mut state.host.recorded).into_iter().collect();
        let reads_overflowed = state.host.reads_overflowed;
        state.host.release();
        let result = match raw {
            Err(_elapsed) => Err(PluginError::Timeout { limit: limits.timeout }),
            Ok(Err(e)) => Err(self.classify(e, state, panic)),
            Ok(Ok(out)) => self.check_size(&out).map(|()| out),
        };
        // Warnings that failed (or never answered) take the call's error: the reconcile did not run.
        let (linted, result) = match lint_step {
            Some(LintStep::Answered(report)) => (Some(Linted { report, spent: false }), result),
            None if !linting => (None, result),
            // Failed, or stopped by the backstop before they answered.
            step => {
                let (from, cpu) = match step {
                    Some(LintStep::Failed { started, cpu }) => (started, cpu),
                    _ => (started, Duration::ZERO),
                };
                let failed = result.err().unwrap_or(PluginError::Timeout { limit: limits.timeout });
                let report = CallReport::failed(failed, from).with_cpu(cpu);
                (Some(Linted { report, spent: true }), Err(PluginError::Host("the reconcile did not run".into())))
            }
        };
        if result.is_ok() && limits.reuse_instances {
            keep(&self.idle, inst);
        } else if result.is_ok() {
            keep(&self.spare, inst.store.into_data().recycled());
        }
        CallReport {
            result,
            reads,
            reads_overflowed,
            logs,
            logs_dropped,
            elapsed: started.elapsed(),
            cpu: Duration::ZERO,
            fresh_instance: fresh,
            linted: linted.map(Box::new),
        }
    }

    fn check_size(&self, out: &OpOut) -> Result<(), PluginError> {
        let size = match out {
            OpOut::Describe(i) => convert::info_size(i),
            OpOut::Validate(errs) | OpOut::Lint(errs) => {
                errs.iter().map(|e| (e.path.len() + e.message.len()) as u64).sum()
            }
            OpOut::Columns(kinds) => kinds
                .iter()
                .flat_map(|k| {
                    k.columns
                        .iter()
                        .map(|c| (k.kind.len() + c.name.len() + c.json_path.len() + c.description.len()) as u64)
                })
                .sum(),
            OpOut::Reconcile(Ok(r)) => {
                convert::outcome_size(r) + self.runtime.units().all().iter().map(|u| u.output_size(r)).sum::<u64>()
            }
            OpOut::Reconcile(Err(w::ReconcileError::Retry(m) | w::ReconcileError::Fatal(m))) => m.len() as u64,
            OpOut::Reconcile(Err(w::ReconcileError::Invalid(errs))) => {
                errs.iter().map(|e| (e.path.len() + e.message.len()) as u64).sum()
            }
            OpOut::DescribeWorld(w) => w.as_ref().map_or(0, |w| {
                let kinds: usize = w.kinds.iter().map(String::len).sum();
                let links: usize = w.links.iter().map(|l| l.name.len() + l.from.len() + l.to.len() + 64).sum();
                (kinds + links) as u64
            }),
            OpOut::World(Ok((outcomes, _))) => {
                let size: u64 = outcomes
                    .iter()
                    .map(|(k, r)| {
                        k.to_string().len() as u64
                            + match r {
                                Ok(o) => {
                                    convert::outcome_size(o)
                                        + self.runtime.units().all().iter().map(|u| u.output_size(o)).sum::<u64>()
                                }
                                Err(_) => 0,
                            }
                    })
                    .sum();
                let limit = self.settings.limits.world_bytes.max(self.settings.limits.max_output);
                return if size > limit {
                    Err(PluginError::OutputTooLarge { size: Some(size), limit })
                } else {
                    Ok(())
                };
            }
            OpOut::World(Err(_)) => 0,
        };
        let limit = self.settings.limits.max_output;
        if size > limit { Err(PluginError::OutputTooLarge { size: Some(size), limit }) } else { Ok(()) }
    }

    fn classify(&self, err: wasmtime::Error, state: &CallState, panic: Option<String>) -> PluginError {
        if let Some(call) = err.downcast_ref::<UngrantedCall>() {
            return PluginError::CapabilityDenied {
                plugin: self.info.name.clone(),
                capability: call.capability.into(),
                used: format!("called {}", call.function),
            };
        }
        let trap = err.downcast_ref::<Trap>().copied();
        if state.timed_out || trap == Some(Trap::Interrupt) {
            return PluginError::Timeout { limit: self.settings.limits.timeout };
        }
        // wasmtime refuses to copy more than the store's hostcall fuel out of the guest.
        if format!("{err}").contains("fuel allocated for hostcalls has been exhausted") {
            return PluginError::OutputTooLarge { size: None, limit: self.settings.limits.max_output };
        }
        // The panic message is the plugin's own text (`panicked at FILE:LINE:COL:\nMESSAGE`).
        let message = one_line(&match (&panic, trap) {
            (Some(p), _) => format!("panicked: {}", p.replacen(":\n", ": ", 1)),
            (None, Some(t)) => t.to_string(),
            (None, None) => format!("{err:#}"),
        });
        if state.memory.hit {
            return PluginError::MemoryLimit { limit: self.settings.limits.memory, trap: message };
        }
        PluginError::Trap { message }
    }

    /// Writes what the plugin logged to the host log, within the plugin's limits.
    fn emit(&self, lines: &[LogLine], dropped: u64) {
        let plugin = self.info.name.as_str();
        let (admitted, report) = self.rate.admit(lines.len(), dropped);
        // The log's writer removes credentials from each line; a collector gets the event as it is.
        let exporting = crate::telemetry::exporting();
        for l in &lines[..admitted] {
            let source = format!("{:?}", l.source).to_lowercase();
            let redacted = exporting.then(|| crate::sanitize::redact_credentials(&l.message));
            let msg = redacted.as_deref().unwrap_or(&l.message);
            match l.level {
                LogLevel::Trace => tracing::trace!(plugin, source, "{msg}"),
                LogLevel::Debug => tracing::debug!(plugin, source, "{msg}"),
                LogLevel::Info => tracing::info!(plugin, source, "{msg}"),
                LogLevel::Warn => tracing::warn!(plugin, source, "{msg}"),
                LogLevel::Error => tracing::error!(plugin, source, "{msg}"),
            }
        }
        if let Some(r) = report {
            self.report_drops(r);
        }
    }

    /// Says that the plugin's output went over its limits: once when it first does, then at
    /// most once every [`super::logs::REPORT_EVERY`], with the count of what was dropped.
    fn report_drops(&self, r: DropReport) {
        let plugin = self.info.name.as_str();
        if r.first {
            tracing::warn!(
                plugin,
                dropped = r.dropped,
                "plugin log limit reached: output beyond {MAX_LINES_PER_CALL} lines and {MAX_EVENTS_PER_CALL} events \
                 a call, or {LINES_PER_SEC} lines a second (bursts of {LINES_BURST}), is dropped; how many is \
                 reported here at most once a minute"
            );
        } else {
            tracing::warn!(plugin, dropped = r.dropped, "plugin log limit: lines dropped since the last report");
        }
    }
}

/// Keeps `item` in `pool` for a later call, unless [`MAX_IDLE`] are kept already.
fn keep<T>(pool: &Mutex<Vec<T>>, item: T) {
    let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < MAX_IDLE {
        pool.push(item);
    }
}

/// Whether `status` is a JSON object: it starts with `{` and parses, or it is `had` (a status the
/// host already holds as JSON) byte for byte.
fn status_is_object(status: &str, had: Option<&str>) -> bool {
    status.trim_start().starts_with('{')
        && (had == Some(status) || serde_json::from_str::<serde::de::IgnoredAny>(status).is_ok())
}

/// A poll that takes less than this on the wall clock is counted at its wall time rather than
/// read on the thread's CPU clock a second time: that read is a system call (0.4 µs here, 3–4 %
/// of a reused instance's reconcile), and over so short a poll the two clocks differ only if the
/// thread was preempted, then by less than this.
const SHORT_POLL: Duration = Duration::from_micros(50);
// The read before each poll stays. Skipping it for a plugin whose polls had been short (and
// counting a poll that turned out long at its wall time) saved those 3 % but, with 10,000
// objects converging on two cores, put 15-25 % of preemption into the plugins' CPU figure.

/// Runs `f`, adding up the CPU time of the polling thread over each of its polls: the work of
/// this call alone, whichever worker thread polls it and whatever runs there between polls.
/// A poll shorter than [`SHORT_POLL`] counts at its wall time.
///
/// A meter polled inside another's poll (a plugin's warnings, asked inside its reconcile's
/// call) that starts less than [`SHORT_POLL`] after the outer poll did takes its starting CPU
/// time from the outer's reading plus the wall time since, rather than reading the clock again:
/// over so short a time the two clocks differ only if the thread was preempted, as above.
async fn metered<F: std::future::Future>(f: F) -> (F::Output, Duration) {
    let mut f = std::pin::pin!(f);
    let mut spent = Duration::ZERO;
    let out = std::future::poll_fn(|cx| {
        let started = Instant::now();
        let before = cpu_at(started, POLLING.get(), thread_cpu);
        let outer = Restore(POLLING.replace(Some((started, before))));
        let r = f.as_mut().poll(cx);
        drop(outer);
        spent += poll_cost(started.elapsed(), before, thread_cpu);
        r
    })
    .await;
    (out, spent)
}

thread_local! {
    /// The poll a [`metered`] call is in on this thread: when it started, and the thread's CPU
    /// time then.
    static POLLING: std::cell::Cell<Option<(Instant, Option<Duration>)>> = const { std::cell::Cell::new(None) };
}

/// The thread's CPU time at `started`: estimated from `outer` (the poll this one is inside, when
/// there is one: its start and the CPU time then) when it started less than [`SHORT_POLL`]
/// before, otherwise read with `read`.
fn cpu_at(
    started: Instant,
    outer: Option<(Instant, Option<Duration>)>,
    read: impl FnOnce() -> Option<Duration>,
) -> Option<Duration> {
    match outer {
        Some((outer_started, Some(outer_cpu))) if started.saturating_duration_since(outer_started) < SHORT_POLL => {
            Some(outer_cpu + started.saturating_duration_since(outer_started))
        }
        _ => read(),
    }
}

/// Puts back the [`POLLING`] entry of the poll around this one when dropped, also when the
/// poll panics.
struct Restore(Option<(Instant, Option<Duration>)>);

impl Drop for Restore {
    fn drop(&mut self) {
        POLLING.set(self.0);
    }
}

/// What a poll that took `wall` costs: `wall` when it was short, otherwise the thread's CPU time
/// since `before` (read with `now` only then; nothing when the clock cannot be read).
fn poll_cost(wall: Duration, before: Option<Duration>, now: impl FnOnce() -> Option<Duration>) -> Duration {
    if wall < SHORT_POLL {
        return wall;
    }
    match (before, now()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    }
}

/// `CLOCK_THREAD_CPUTIME_ID`.
fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

impl<T> CallReport<T> {
    fn failed(e: PluginError, started: Instant) -> Self {
        Self::answered(Err(e), started)
    }

    /// A call's `result` with nothing else to report, timed from `started`.
    fn answered(result: Result<T, PluginError>, started: Instant) -> Self {
        Self {
            result,
            reads: Vec::new(),
            reads_overflowed: false,
            logs: Vec::new(),
            logs_dropped: 0,
            elapsed: started.elapsed(),
            cpu: Duration::ZERO,
            fresh_instance: true,
            linted: None,
        }
    }

    fn with_cpu(self, cpu: Duration) -> Self {
        Self { cpu, ..self }
    }

    fn map<U>(self, f: impl FnOnce(T) -> Result<U, PluginError>) -> CallReport<U> {
        CallReport {
            result: self.result.and_then(f),
            reads: self.reads,
            reads_overflowed: self.reads_overflowed,
            logs: self.logs,
            logs_dropped: self.logs_dropped,
            elapsed: self.elapsed,
            cpu: self.cpu,
            fresh_instance: self.fresh_instance,
            linted: self.linted,
        }
    }
}

/// Sets the deadline (from `started`) and the output bound of the next call in `store`.
fn arm(store: &mut Store<CallState>, limits: &super::settings::Limits, started: Instant) {
    store.data_mut().deadline = started + limits.timeout;
    store.set_epoch_deadline(1);
    // Bounds what the guest can make the host copy out of it in one call (the
    // answer, a log line, a read's arguments) before the host allocates it.
    store.set_hostcall_fuel(usize::try_from(limits.max_output).unwrap_or(usize::MAX).saturating_add(OUTPUT_SLACK));
}

/// The warnings call's answer as the host reports it.
fn lint_answer(out: OpOut) -> Vec<FieldError> {
    match out {
        OpOut::Lint(errs) => errs.into_iter().map(convert::field_error).collect(),
        _ => unreachable!("warnings answer with warnings"),
    }
}

/// A plugin's `reconcile-error` as the host reports it; what it says becomes one line.
fn reconcile_error(e: w::ReconcileError) -> PluginError {
    match e {
        w::ReconcileError::Retry(m) => PluginError::Retry(one_line(&m)),
        w::ReconcileError::Fatal(m) => PluginError::Fatal(one_line(&m)),
        w::ReconcileError::Invalid(errs) => PluginError::Invalid(errs.into_iter().map(convert::field_error).collect()),
    }
}

/// A reconcile's or finalize's answer, before the units fold their state into it.
fn reconciled(res: Result<w::Response, w::ReconcileError>) -> OpOut {
    OpOut::Reconcile(res.map(convert::response))
}

/// Where `pre`'s required exports are (for bindgen's checked load and for the unchecked one),
/// and the optional `lint` export when the component has it.
fn exports_of(
    file: &Path,
    pre: &bindings::PluginFullPre<CallState>,
) -> Result<(bindings::PluginFullIndices, ExportIndices, Option<LintIndices>), LoadError> {
    let wrong = |message: String| LoadError::WrongWorld {
        file: file.to_path_buf(),
        expected: super::WIT_VERSION.into(),
        message,
    };
    let indices = bindings::PluginFullIndices::new(pre.instance_pre()).map_err(|e| wrong(format!("{e:#}")))?;
    let exports = ExportIndices::new(pre.instance_pre().component())
        .ok_or_else(|| wrong("a function of steward:plugin/reconciler is missing".into()))?;
    Ok((indices, exports, LintIndices::new(pre.instance_pre()).ok()))
}

/// Each kind's spec schema made structural, for the kinds whose schema can be.
fn structural_schemas(info: &PluginInfo) -> std::collections::BTreeMap<String, Arc<serde_json::Value>> {
    info.kinds
        .iter()
        .filter_map(|k| {
            let raw: serde_json::Value = serde_json::from_str(&k.spec_schema).ok()?;
            match crate::kubernetes::crd::structural_schema(&k.kind, &raw) {
                Ok(s) => Some((k.kind.clone(), Arc::new(s))),
                Err(e) => {
                    tracing::warn!(plugin = %info.name, kind = %k.kind, error = %e,
                        "the spec schema cannot be made structural: unknown fields of this kind are not pruned");
                    None
                }
            }
        })
        .collect()
}

/// Checks what `describe` returned: a usable name, at least one kind, sane kind names, JSON schemas.
fn check_info(info: &PluginInfo) -> Result<(), String> {
    if !is_dns_label(&info.name) {
        return Err(format!("plugin name `{}` is not a DNS-1123 label (lower-case letters, digits, '-')", info.name));
    }
    if info.kinds.is_empty() {
        return Err("it reconciles no kinds".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for k in &info.kinds {
        let starts_upper = k.kind.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if !starts_upper || !k.kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("kind `{}` must be CamelCase letters and digits", k.kind));
        }
        if !seen.insert(k.kind.as_str()) {
            return Err(format!("kind {} is listed twice", k.kind));
        }
        if k.group.is_empty() || k.version.is_empty() {
            return Err(format!("kind {} needs a group and a version", k.kind));
        }
        if !is_dns_label(&k.plural) {
            return Err(format!("kind {}: plural `{}` must be a lower-case DNS-1123 label", k.kind, k.plural));
        }
        match serde_json::from_str::<serde_json::Value>(&k.spec_schema) {
            Ok(serde_json::Value::Object(_)) => {}
            _ => return Err(format!("kind {}: the spec schema is not a JSON object", k.kind)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_poll_costs_its_wall_time_a_long_one_its_cpu_time() {
        let us = Duration::from_micros;
        let unread = || -> Option<Duration> { panic!("a short poll reads no clock") };
        assert_eq!(poll_cost(us(8), Some(us(100)), unread), us(8));
        // A long poll that waited (preempted, or blocked in a host call) costs only its CPU time.
        assert_eq!(poll_cost(us(900), Some(us(100)), || Some(us(160))), us(60));
        assert_eq!(poll_cost(us(900), None, || Some(us(160))), Duration::ZERO, "no clock, no figure");
    }

    #[test]
    fn a_poll_inside_another_that_started_just_before_starts_from_its_reading() {
        let us = Duration::from_micros;
        let t0 = Instant::now();
        let unread = || -> Option<Duration> { panic!("no clock read within the outer poll's first 50 µs") };
        assert_eq!(cpu_at(t0 + us(20), Some((t0, Some(us(700)))), unread), Some(us(720)));
        // Later in the outer poll, with no outer poll, or when the outer could not read: read.
        assert_eq!(cpu_at(t0 + us(50), Some((t0, Some(us(700)))), || Some(us(900))), Some(us(900)));
        assert_eq!(cpu_at(t0, None, || Some(us(5))), Some(us(5)));
        assert_eq!(cpu_at(t0 + us(1), Some((t0, None)), || Some(us(5))), Some(us(5)));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_meter_inside_another_counts_its_own_work() {
        let spin = |ms| {
            let t = thread_cpu().unwrap();
            while thread_cpu().unwrap() - t < Duration::from_millis(ms) {}
        };
        // A long inner poll still counts its CPU time (its start estimated from the outer's
        // reading, which is off by less than SHORT_POLL), and the outer counts it too.
        let ((_, inner), outer) = metered(metered(async { spin(3) })).await;
        assert!(inner + SHORT_POLL >= Duration::from_millis(3), "{inner:?}");
        assert!(outer >= inner, "{outer:?} holds {inner:?}");
        // An inner meter that starts late in the outer's poll reads the clock itself.
        let (((), inner), _) = metered(async {
            spin(1);
            metered(async { spin(2) }).await
        })
        .await;
        assert!(inner >= Duration::from_millis(2) && inner < Duration::from_millis(3), "{inner:?}");
    }

    #[tokio::test]
    async fn a_metered_call_counts_its_own_work() {
        // Work over two polls: both count, and the wait between them does not.
        let spin = || {
            let t = thread_cpu().unwrap();
            while thread_cpu().unwrap() - t < Duration::from_millis(2) {}
        };
        let (_, cpu) = metered(async {
            spin();
            tokio::task::yield_now().await;
            spin();
        })
        .await;
        assert!(cpu >= Duration::from_millis(4), "{cpu:?}");
    }

    #[test]
    fn a_status_is_a_json_object_or_the_one_the_object_had() {
        assert!(status_is_object(r#" {"a": [1, 2]}"#, None));
        assert!(!status_is_object(r#"{"a": "#, None), "not JSON");
        assert!(!status_is_object("[1]", None), "not an object");
        assert!(!status_is_object(r#"{"a": 1} trailing"#, Some(r#"{"a": 1}"#)), "differs from what it had: parsed");
        // What the object had is JSON the host wrote or the cluster holds: it is not parsed again.
        assert!(status_is_object(r#"{"a": 1}"#, Some(r#"{"a": 1}"#)));
        assert!(!status_is_object("[1]", Some("[1]")), "still an object");
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("mcpserver"));
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
