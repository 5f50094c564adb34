//! The `services` unit: the `steward:plugin/services` import, the grant check on answers, and the engine's hook that converges an owner's services.

use std::path::Path;

use steward_sdk::{ServiceSpec, ServiceStatus};
use wasmtime::component::{HasSelf, Linker};

use super::{CallInput, Capability};
use crate::model::ObjectKey;
use crate::plugin::bindings::steward::plugin::{services, types as w};
use crate::plugin::{CallState, PluginSettings, convert};
use crate::services::ServiceManager;

/// Owned services: processes the host runs and endpoints it connects to for an object.
pub struct Services;

/// The capability name of [`Services`].
pub const NAME: &str = "services";

impl Capability for Services {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["steward:plugin/services@0.1.0"]
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        services::add_to_linker::<CallState, HasSelf<ServicesState>>(linker, |s| &mut s.services)
    }

    fn begin_call(&self, state: &mut CallState, input: &CallInput) {
        state.services.observed = input.services.iter().map(convert::service_status_to_wit).collect();
        state.services.desired = None;
    }

    /// What the plugin set through `set-desired` replaces `response.services`; a plugin
    /// that never called it (one built before the interface) answers with the field.
    fn finish_call(&self, state: &mut CallState, response: &mut w::Response) {
        if let Some(desired) = state.services.desired.take() {
            response.services = desired;
        }
    }

    fn used_by(&self, response: &w::Response) -> bool {
        !response.services.is_empty()
    }
}

/// The services unit's state in one store: what the owner's services look like, and
/// what the plugin asked for.
#[derive(Default)]
pub struct ServicesState {
    observed: Vec<w::ServiceStatus>,
    desired: Option<Vec<w::ServiceSpec>>,
}

impl services::Host for ServicesState {
    fn observed(&mut self) -> wasmtime::Result<Vec<w::ServiceStatus>> {
        Ok(self.observed.clone())
    }

    fn set_desired(&mut self, services: Vec<w::ServiceSpec>) -> wasmtime::Result<()> {
        self.desired = Some(services);
        Ok(())
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

/// The engine's hook after a successful reconcile of `owner`: converges its services to
/// exactly `desired` (commands resolved against `config_dir`); an empty list stops them all.
/// The answer was already refused at the call if the plugin is not granted `services`.
pub fn apply_desired(manager: &ServiceManager, owner: &ObjectKey, desired: Vec<ServiceSpec>, config_dir: &Path) {
    manager.ensure(owner, resolve_commands(desired, config_dir));
}

/// What the host observes of `owner`'s services, for the next call's [`CallInput`].
pub fn observed(manager: &ServiceManager, owner: &ObjectKey) -> Vec<ServiceStatus> {
    manager.observed(owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use services::Host as _;

    #[test]
    fn set_desired_replaces_the_response_field_and_the_last_call_wins() {
        let mut state = CallState::new(1 << 20);
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
        state.services.set_desired(vec![spec("a")]).unwrap();
        state.services.set_desired(vec![spec("b")]).unwrap();
        let mut resp = w::Response {
            status: "{}".into(),
            conditions: vec![],
            services: vec![spec("old")],
            requeue_after_ms: None,
            events: vec![],
        };
        Services.finish_call(&mut state, &mut resp);
        assert_eq!(resp.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert!(Services.used_by(&resp));
        // The next call starts with nothing desired: a plugin built before the import answers by the field.
        Services.begin_call(&mut state, &CallInput::none());
        let mut resp2 = w::Response { services: vec![spec("field")], ..resp };
        Services.finish_call(&mut state, &mut resp2);
        assert_eq!(resp2.services[0].name, "field");
    }

    #[test]
    fn observed_is_what_the_call_was_given() {
        let mut state = CallState::new(1 << 20);
        let input = CallInput {
            services: vec![ServiceStatus {
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
                auth_required: false,
            }],
            ..CallInput::none()
        };
        Services.begin_call(&mut state, &input);
        assert_eq!(state.services.observed().unwrap()[0].name, "s");
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
}
