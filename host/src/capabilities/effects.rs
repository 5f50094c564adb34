//! What a unit does beyond the call: its executor, started with the engine ([`Unit::start`]), and its hooks around a reconcile, a finalize, leadership and the plugins' changes ([`Effects`]).
//!
//! The engine names no unit: it hands each started unit the call's input, the outcome of a
//! reconcile, and the moments that matter (a finalize, an object let go, a lost lease, new
//! plugins, shutdown). A unit reaches the mode only through the driver it is given, and asks
//! for a reconcile through [`Requeue`] with a reason it names.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use steward_sdk::RawOutcome;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::driver::Driver;
use crate::metrics::Metrics;
use crate::model::{ObjectKey, Reason, StatusRecord};
use crate::plugin::{Capability, Inputs, Plugin, PluginError, PluginSettings, Read};
use crate::services::{Secrets, ServiceManager};
use crate::store::Store;
use crate::tools::Executor;

/// A capability as the host runs it: what it links into plugins ([`Capability`]), and what
/// it starts beside the engine.
pub trait Unit: Capability {
    /// Adds the unit's metric families to the host's registry (under its `steward_` prefix).
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}

    /// Starts the unit's executor with the host; `None` for a unit with no effects beyond the call.
    fn start(&self, _host: &HostContext) -> Result<Option<Arc<dyn Effects>>, String> {
        Ok(None)
    }

    /// What the host's ServiceAccount must be allowed in Kubernetes mode for the plugins that
    /// use this unit, each given by its settings: `steward rbac` grants the union of every
    /// unit's. Nothing by default.
    fn access(&self, _plugins: &[&PluginSettings]) -> Access {
        Access::default()
    }
}

/// What a unit needs the host to be allowed in a cluster (see [`Unit::access`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Read Secrets in the namespaces the host watches (values the unit resolves by reference).
    pub read_secrets: bool,
    /// Kinds of objects the unit creates, updates, watches and deletes.
    pub manage: Vec<crate::objects::ObjectKind>,
}

impl Access {
    /// Both: secrets if either reads them, and every kind either manages, each once, sorted.
    pub fn union(mut self, other: Access) -> Access {
        self.read_secrets |= other.read_secrets;
        self.manage.extend(other.manage);
        self.manage.sort();
        self.manage.dedup();
        self
    }
}

/// Asks the engine to reconcile an object again, for a reason the unit names.
#[derive(Clone)]
pub struct Requeue(mpsc::UnboundedSender<(ObjectKey, Reason)>);

impl Requeue {
    /// A requeue handle and the receiver the engine reads from.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<(ObjectKey, Reason)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self(tx), rx)
    }

    /// Queues `owner` for `reason` (nothing once the engine stopped).
    pub fn send(&self, owner: ObjectKey, reason: Reason) {
        let _ = self.0.send((owner, reason));
    }

    /// Forwards every owner `events` names as a requeue for `reason`, until `events` closes.
    pub fn forward(
        &self,
        mut events: mpsc::UnboundedReceiver<ObjectKey>,
        reason: Reason,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            while let Some(owner) = events.recv().await {
                me.send(owner, reason);
            }
        })
    }
}

/// What a unit is given when the host starts.
pub struct HostContext {
    /// The host config.
    pub cfg: Config,
    /// The mode's driver: whether this replica leads, and the mode's objects.
    pub driver: Arc<dyn Driver>,
    /// The host's store of status records.
    pub store: Arc<Store<StatusRecord>>,
    /// The host's metrics.
    pub metrics: Arc<Metrics>,
    /// Where secret references are read from in this mode.
    pub secrets: Secrets,
    /// Where the unit asks for reconciles.
    pub requeue: Requeue,
}

impl HostContext {
    /// The directory of the host config file, which relative paths in objects are relative to.
    pub fn config_dir(&self) -> PathBuf {
        self.cfg.file.parent().map(PathBuf::from).unwrap_or_default()
    }

    /// The directory of the state store, where units keep their own files.
    pub fn state_dir(&self) -> PathBuf {
        self.cfg.state.parent().map_or_else(|| PathBuf::from("."), PathBuf::from)
    }
}

/// A started unit's hooks. Every hook has a default that does nothing.
#[async_trait::async_trait]
pub trait Effects: Send + Sync + 'static {
    /// Adds the unit's input for a reconcile or finalize of `owner` by `plugin`.
    fn input(&self, _plugin: &Plugin, _owner: &ObjectKey, _inputs: &mut Inputs) {}

    /// What a reconcile of `owner` depends on besides its own `get`s and `list`s.
    fn reads(&self, _plugin: &Plugin, _owner: &ObjectKey) -> Vec<Read> {
        Vec::new()
    }

    /// Before the decision about a reconcile that succeeded: what must be done for it to count
    /// (the error becomes the call's error, with the object's status and retries).
    async fn settle(&self, _plugin: &Plugin, _owner: &ObjectKey, _outcome: &mut RawOutcome) -> Result<(), String> {
        Ok(())
    }

    /// After a reconcile that succeeded, as one of its effects: the unit takes its part of `outcome`.
    fn reconciled(&self, _plugin: &Plugin, _owner: &ObjectKey, _outcome: &mut RawOutcome) {}

    /// Before a finalize that succeeded counts: the error becomes the call's error (the owner
    /// stays until the unit let go of what it made).
    async fn finalize(&self, _plugin: &Plugin, _owner: &ObjectKey) -> Result<(), String> {
        Ok(())
    }

    /// The object is gone (finalized, or left this replica's scope): let go of what it owns.
    async fn forget(&self, _owner: &ObjectKey) {}

    /// The mode's driver started: the unit takes what it reads from `started`.
    fn mode_started(&self, _started: &mut crate::driver::Started) {}

    /// The loaded plugins are now `plugins`.
    fn plugins_changed(&self, _plugins: &[Arc<Plugin>]) {}

    /// This replica lost the lease, once its running reconciles finished: stop what the new leader runs.
    fn lost_lead(&self) {}

    /// Whether objects of a plugin with `settings` are reconciled at start, converged or not.
    fn reconcile_at_start(&self, _settings: &PluginSettings) -> bool {
        false
    }

    /// Objects to reconcile at start, converged or not (work of the last run to go on with).
    fn startup_owners(&self) -> Vec<ObjectKey> {
        Vec::new()
    }

    /// Stops the unit's executor, waiting up to `grace`.
    async fn shutdown(&self, _grace: Duration) {}

    /// The executor the unit lets the faces reach (the API, `/mcp`), if any.
    fn exposed(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// The units as they run: every started unit's hooks, and the executors the faces reach.
pub struct Started {
    /// Each started unit, in [`super::UNITS`] order.
    pub effects: Vec<Arc<dyn Effects>>,
    /// The capability name of each of `effects`.
    names: Vec<&'static str>,
    services: Arc<ServiceManager>,
    tools: Arc<Executor>,
}

impl Started {
    /// The owned-services driver: the sessions to the objects' MCP servers.
    pub fn services(&self) -> &Arc<ServiceManager> {
        &self.services
    }

    /// The executor of the tool calls objects ask for; the host sets its router.
    pub fn tools(&self) -> &Arc<Executor> {
        &self.tools
    }

    /// Runs every unit's [`Effects::settle`] after a reconcile of `owner` that succeeded; the
    /// first error, labelled with its unit, is the call's error.
    pub async fn settle(
        &self,
        plugin: &Plugin,
        owner: &ObjectKey,
        outcome: &mut RawOutcome,
    ) -> Result<(), PluginError> {
        for (unit, name) in self.effects.iter().zip(&self.names) {
            unit.settle(plugin, owner, outcome)
                .await
                .map_err(|message| PluginError::Unit { capability: name, message })?;
        }
        Ok(())
    }

    /// Runs every unit's [`Effects::finalize`] after a finalize of `owner` that succeeded; the
    /// first error, labelled with its unit, is the call's error.
    pub async fn finalize(&self, plugin: &Plugin, owner: &ObjectKey) -> Result<(), PluginError> {
        for (unit, name) in self.effects.iter().zip(&self.names) {
            unit.finalize(plugin, owner).await.map_err(|message| PluginError::Unit { capability: name, message })?;
        }
        Ok(())
    }

    /// What a reconcile of `owner` depends on through the units.
    pub fn reads(&self, plugin: &Plugin, owner: &ObjectKey) -> Vec<Read> {
        self.effects.iter().flat_map(|e| e.reads(plugin, owner)).collect()
    }

    /// Whether objects of a plugin with `settings` are reconciled at start, converged or not.
    pub fn reconcile_at_start(&self, settings: &PluginSettings) -> bool {
        self.effects.iter().any(|e| e.reconcile_at_start(settings))
    }

    /// Stops every unit, the last started first, each waiting up to `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        for e in self.effects.iter().rev() {
            e.shutdown(grace).await;
        }
    }

    /// What the units are given for a call of `plugin` about `owner`.
    pub fn inputs(&self, plugin: &Plugin, owner: &ObjectKey) -> Inputs {
        let mut inputs = Inputs::default();
        for e in &self.effects {
            e.input(plugin, owner, &mut inputs);
        }
        inputs
    }
}

/// Starts every unit of [`super::UNITS`] with `host`; the error names the unit.
pub fn start(host: &HostContext) -> Result<Started, String> {
    let (mut effects, mut names) = (Vec::new(), Vec::new());
    for unit in super::UNITS {
        if let Some(e) = unit.start(host).map_err(|e| format!("capability {}: {e}", unit.name()))? {
            effects.push(e);
            names.push(unit.name());
        }
    }
    let services = exposed::<ServiceManager>(&effects).ok_or("the services unit did not start")?;
    let tools = exposed::<Executor>(&effects).ok_or("the tools unit did not start")?;
    Ok(Started { effects, names, services, tools })
}

/// The executor of type `T` one of `effects` exposes.
fn exposed<T: std::any::Any + Send + Sync>(effects: &[Arc<dyn Effects>]) -> Option<Arc<T>> {
    effects.iter().find_map(|e| e.exposed().and_then(|a| a.downcast::<T>().ok()))
}
