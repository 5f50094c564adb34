//! The `services` unit: the `steward:plugin/services` import, the grant check on answers, and the engine's hook that converges an owner's services.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use steward_sdk::{RawOutcome, SecretSource, ServiceSpec, ServiceStatus};
use wasmtime::component::{HasSelf, Linker};

use super::effects::{Effects, HostContext, Unit};
use crate::driver::Driver;
use crate::model::{ObjectKey, Reason};
use crate::plugin::bindings::steward::plugin::services;
use crate::plugin::{CallInput, CallState, Capability, Inputs, Plugin, PluginSettings, convert, lowered};
use crate::services::{ServiceManager, ServiceOptions};

/// Owned services: processes the host runs and endpoints it connects to for an object.
pub struct Services;

/// The capability name of [`Services`].
pub const NAME: &str = "services";

/// Why an owner is reconciled when the observed state of one of its services changed.
pub const CHANGED: Reason = Reason::Unit("serviceChanged");

/// The services unit's input to a call: what the host observes of the owner's services.
#[derive(Clone, Debug, Default)]
pub struct ObservedServices(pub Vec<ServiceStatus>);

impl Capability for Services {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["steward:plugin/services@0.1.0"]
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        services::add_to_linker::<CallState, HasSelf<ServicesState>>(linker, |s| s.slot::<ServicesState>())
    }

    fn begin_call(&self, state: &mut CallState, input: &CallInput) {
        let slot = state.slot::<ServicesState>();
        slot.observed = input.inputs.get_shared::<ObservedServices>();
        slot.desired = None;
    }

    /// Every plugin's request carries the observed services (the base contract's `request`).
    fn request<'a>(&self, inputs: &'a Inputs, request: &mut lowered::Request<'a>) {
        if let Some(o) = inputs.get::<ObservedServices>() {
            request.services = o.0.iter().map(lowered::Status::new).collect();
        }
    }

    /// What the plugin set through `set-desired` replaces the answer's services, each with its
    /// secret references; a plugin that never called it (one built before the interface)
    /// answers with the response's field, which names no secrets.
    fn finish_call(&self, state: &mut CallState, outcome: &mut RawOutcome) {
        if let Some(desired) = state.slot::<ServicesState>().desired.take() {
            outcome.services = desired
                .into_iter()
                .map(|d| ServiceSpec {
                    secrets: d.secrets.into_iter().map(convert::secret_from_wit).collect(),
                    ..convert::service_spec(d.spec)
                })
                .collect();
        }
    }

    fn output_size(&self, outcome: &RawOutcome) -> u64 {
        outcome.services.iter().map(convert::service_size).sum()
    }

    fn used_by(&self, outcome: &RawOutcome) -> bool {
        !outcome.services.is_empty()
    }
}

/// The services unit's state in one store: what the owner's services look like, and
/// what the plugin asked for.
#[derive(Default)]
pub struct ServicesState {
    /// The call's input, shared: converted only if the plugin calls `observed` (most find all
    /// they need in the request's copy).
    observed: Option<Arc<ObservedServices>>,
    desired: Option<Vec<services::DesiredService>>,
}

impl services::Host for ServicesState {
    fn observed(&mut self) -> wasmtime::Result<Vec<services::ObservedService>> {
        Ok(self.observed.as_ref().map_or_else(Vec::new, |o| o.0.iter().map(convert::observed_to_wit).collect()))
    }

    fn set_desired(&mut self, services: Vec<services::DesiredService>) -> wasmtime::Result<()> {
        self.desired = Some(services);
        Ok(())
    }
}

impl Unit for Services {
    /// A service's environment and headers may come from Secrets, which the host reads.
    fn access(&self, _plugins: &[&PluginSettings]) -> super::Access {
        super::Access { read_secrets: true, manage: Vec::new() }
    }

    /// Starts the services driver (reaping services an earlier run left behind, which it
    /// should not have) under the state directory; a change of a service queues its owner.
    fn start(&self, host: &HostContext) -> Result<Option<Arc<dyn Effects>>, String> {
        let (manager, events) =
            ServiceManager::start(ServiceOptions::new(host.state_dir().join("services")), host.secrets.clone())
                .map_err(|e| format!("cannot start the services driver: {e}"))?;
        manager.count_restarts_in(host.metrics.service_restarts.clone());
        let forward = host.requeue.forward(events, CHANGED);
        Ok(Some(Arc::new(Running { manager, driver: host.driver.clone(), config_dir: host.config_dir(), forward })))
    }
}

/// The services unit as it runs: the owners' services, converged after each reconcile.
struct Running {
    manager: Arc<ServiceManager>,
    driver: Arc<dyn Driver>,
    config_dir: PathBuf,
    forward: tokio::task::JoinHandle<()>,
}

#[async_trait::async_trait]
impl Effects for Running {
    fn input(&self, _plugin: &Plugin, owner: &ObjectKey, inputs: &mut Inputs) {
        inputs.insert(ObservedServices(observed(&self.manager, owner)));
    }

    /// Converges the owner's services to what it wants; a replica that lost the lease starts
    /// nothing (the new leader runs the services).
    fn reconciled(&self, _plugin: &Plugin, owner: &ObjectKey, outcome: &mut RawOutcome) {
        if self.driver.leads() {
            apply_desired(&self.manager, owner, std::mem::take(&mut outcome.services), &self.config_dir);
        }
    }

    async fn forget(&self, owner: &ObjectKey) {
        self.manager.remove_owner(owner);
    }

    fn lost_lead(&self) {
        for owner in self.manager.owners() {
            self.manager.remove_owner(&owner);
        }
    }

    /// Objects that may own services are reconciled at start, so their services start anew.
    fn reconcile_at_start(&self, settings: &PluginSettings) -> bool {
        owns_services(settings)
    }

    async fn shutdown(&self, _grace: Duration) {
        self.manager.shutdown().await;
        self.forward.abort();
    }

    fn exposed(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.manager.clone())
    }
}

/// Whether `settings` grant `services`: the objects of such a plugin's kinds may own
/// services, so the engine reconciles them at start to bring their services up again.
pub fn owns_services(settings: &PluginSettings) -> bool {
    settings.grants(NAME)
}

/// Makes each relative command with a `/` (for example `./bin/server`) relative to
/// `config_dir`, the directory of the host config file; other commands are kept.
pub fn resolve_commands(mut desired: Vec<ServiceSpec>, config_dir: &Path) -> Vec<ServiceSpec> {
    for s in &mut desired {
        if let Some(cmd) = &s.command
            && cmd.contains('/')
            && !cmd.starts_with('/')
        {
            s.command = Some(config_dir.join(cmd).display().to_string());
        }
    }
    desired
}

/// Makes each relative path of a `file` secret source relative to `config_dir`, the directory
/// of the host config file, as commands are; absolute paths are kept.
pub fn resolve_secret_files(mut desired: Vec<ServiceSpec>, config_dir: &Path) -> Vec<ServiceSpec> {
    for v in desired.iter_mut().flat_map(|s| s.secrets.iter_mut()) {
        if let SecretSource::File { path } = &mut v.source
            && !path.is_empty()
            && !Path::new(path.as_str()).is_absolute()
        {
            *path = config_dir.join(&*path).display().to_string();
        }
    }
    desired
}

/// The engine's hook after a successful reconcile of `owner`: converges its services to
/// exactly `desired` (commands and secret files resolved against `config_dir`); an empty
/// list stops them all. The answer was already refused at the call if the plugin is not
/// granted `services`. Secret values are read later, by the driver, when it starts or
/// connects a service.
pub fn apply_desired(manager: &ServiceManager, owner: &ObjectKey, desired: Vec<ServiceSpec>, config_dir: &Path) {
    manager.ensure(owner, resolve_secret_files(resolve_commands(desired, config_dir), config_dir));
}

/// What the host observes of `owner`'s services, for the next call's [`CallInput`].
pub fn observed(manager: &ServiceManager, owner: &ObjectKey) -> Vec<ServiceStatus> {
    manager.observed(owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use services::Host as _;
    use crate::plugin::bindings::steward::plugin::types as w;
    use steward_sdk::SecretValue;

    fn outcome(services: Vec<ServiceSpec>) -> RawOutcome {
        RawOutcome {
            status: "{}".into(),
            conditions: vec![],
            services,
            requeue_after_ms: None,
            events: vec![],
            calls: None,
            children: None,
        }
    }

    #[test]
    fn set_desired_replaces_the_response_field_and_the_last_call_wins() {
        let mut state = CallState::new(1 << 20, &[]);
        Services.begin_call(&mut state, &CallInput::none());
        let spec = |name: &str| w::ServiceSpec {
            name: name.into(),
            transport: w::Transport::Stdio,
            command: Some("srv".into()),
            args: vec![],
            env: vec![],
            working_dir: None,
            url: None,
            headers: vec![],
            timeout_ms: 1000,
        };
        let desired = |name: &str| services::DesiredService { spec: spec(name), secrets: vec![] };
        state.slot::<ServicesState>().set_desired(vec![desired("a")]).unwrap();
        let token = services::SecretValue {
            target: services::SecretTarget::Env,
            name: "TOKEN".into(),
            source: services::SecretSource::File("token.txt".into()),
        };
        state
            .slot::<ServicesState>()
            .set_desired(vec![desired("b"), services::DesiredService { spec: spec("c"), secrets: vec![token] }])
            .unwrap();
        let mut out = outcome(vec![convert::service_spec(spec("old"))]);
        Services.finish_call(&mut state, &mut out);
        assert_eq!(out.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        assert!(Services.used_by(&out));
        // Each service carries its own secret references.
        assert!(out.services[0].secrets.is_empty());
        assert_eq!(out.services[1].secrets[0].name, "TOKEN");
        assert_eq!(out.services[1].secrets[0].source, SecretSource::File { path: "token.txt".into() });
        assert!(Services.output_size(&out) > out.services.iter().map(|s| s.name.len() as u64).sum::<u64>());
        // The next call starts with nothing desired: a plugin built before the import answers by the field.
        Services.begin_call(&mut state, &CallInput::none());
        let mut out2 = outcome(vec![convert::service_spec(spec("field"))]);
        Services.finish_call(&mut state, &mut out2);
        assert_eq!(out2.services[0].name, "field");
    }

    #[test]
    fn observed_is_what_the_call_was_given() {
        let mut state = CallState::new(1 << 20, &[]);
        let status = ServiceStatus {
            name: "s".into(),
            phase: steward_sdk::ServicePhase::Running,
            pid: None,
            restarts: 0,
            consecutive_failures: 0,
            next_retry_at: None,
            last_exit: None,
            healthy: None,
            last_connected: None,
            tools: vec![],
            message: None,
            auth_required: true,
        };
        let mut input = CallInput::none();
        input.inputs.insert(ObservedServices(vec![status]));
        Services.begin_call(&mut state, &input);
        let observed = state.slot::<ServicesState>().observed().unwrap();
        assert_eq!(observed[0].status.name, "s");
        assert!(observed[0].auth_required, "the interface says what `service-status` cannot");
    }

    #[test]
    fn relative_commands_with_a_slash_resolve_against_the_config_directory() {
        let spec = |cmd: &str| ServiceSpec {
            name: "s".into(),
            transport: steward_sdk::Transport::Stdio,
            command: Some(cmd.into()),
            args: vec![],
            env: Default::default(),
            working_dir: None,
            url: None,
            headers: Default::default(),
            timeout_ms: 1000,
            secrets: Vec::new(),
        };
        let out = resolve_commands(vec![spec("./bin/srv"), spec("srv"), spec("/usr/bin/srv")], Path::new("/etc/st"));
        let cmds: Vec<_> = out.iter().map(|s| s.command.clone().unwrap()).collect();
        assert_eq!(cmds, ["/etc/st/./bin/srv", "srv", "/usr/bin/srv"]);
    }

    #[test]
    fn relative_secret_files_resolve_against_the_config_directory() {
        let spec = ServiceSpec {
            name: "s".into(),
            transport: steward_sdk::Transport::Stdio,
            command: Some("srv".into()),
            args: vec![],
            env: Default::default(),
            working_dir: None,
            url: None,
            headers: Default::default(),
            timeout_ms: 1000,
            secrets: ["token", "/run/secrets/token"]
                .into_iter()
                .map(|p| SecretValue {
                    target: steward_sdk::SecretTarget::Env,
                    name: "T".into(),
                    source: SecretSource::File { path: p.into() },
                })
                .chain([SecretValue {
                    target: steward_sdk::SecretTarget::Env,
                    name: "U".into(),
                    source: SecretSource::Env { name: "relative".into() },
                }])
                .collect(),
        };
        let out = resolve_secret_files(vec![spec], Path::new("/etc/st"));
        let sources: Vec<_> = out[0].secrets.iter().map(|v| v.source.clone()).collect();
        assert_eq!(
            sources,
            [
                SecretSource::File { path: "/etc/st/token".into() },
                SecretSource::File { path: "/run/secrets/token".into() },
                SecretSource::Env { name: "relative".into() },
            ]
        );
    }
}
