//! The `http` unit: outbound HTTP through the standard `wasi:http/outgoing-handler`, allowed per plugin by the rules of `plugins.<name>.http`.
//!
//! A request is checked against the plugin's allow-list ([`policy`]) before anything is
//! resolved or connected; a request no rule allows fails with wasi:http's
//! `HTTP-request-denied`, and the host's words (which rule did not match on which field, and
//! the config key) go to the call log and to `steward:plugin/http#last-error`. An allowed
//! request gets the headers its rule injects from secrets the plugin never sees, waits for
//! one of the plugin's concurrency permits, and must finish within the call's deadline; its
//! response body is cut at the cap. Each request is an `http_request` span under the plugin
//! call and a count in `steward_plugin_http_requests_total{plugin,host,status}`.

mod metrics;
mod policy;
mod send;
mod settings;

use std::sync::{Arc, OnceLock};

use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi_http::p2::bindings::http as wasi_http;
use wasmtime_wasi_http::{WasiHttp, WasiHttpCtx, WasiHttpCtxView};

use super::effects::Unit;
use crate::plugin::bindings::steward::plugin::http as sh;
use crate::plugin::{CallInput, CallState, Capability, PluginSettings};

pub use metrics::{RequestLabel, requests};
pub use policy::{Target, check as check_request};
pub use settings::{DEFAULT_CONCURRENCY, DEFAULT_MAX_RESPONSE_BODY, HttpSettings, Rule, SecretHeader};

/// Outbound HTTP for the objects of a plugin, within its allow-list.
pub struct Http;

/// The capability name of [`Http`].
pub const NAME: &str = "http";

impl Capability for Http {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["wasi:http/outgoing-handler@0.2.12", "wasi:http/*", "steward:plugin/http@0.1.0"]
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        let options = wasmtime_wasi_http::p2::bindings::LinkOptions::default();
        wasi_http::outgoing_handler::add_to_linker::<CallState, WasiHttp>(linker, view)?;
        wasi_http::types::add_to_linker::<CallState, WasiHttp>(linker, &options.into(), view)?;
        sh::add_to_linker::<CallState, HasSelf<HttpState>>(linker, |s| s.slot::<HttpState>())
    }

    /// A grant needs at least one rule: without one the plugin could send nothing, which is
    /// never what the operator meant.
    fn check_settings(&self, plugin: &str, settings: &PluginSettings) -> Result<(), String> {
        if settings.sections.get::<HttpSettings>().is_none_or(|h| h.rules.is_empty()) {
            return Err(format!(
                "plugins.{plugin}.http.rules: the `http` capability needs the requests the plugin may make, for \
                 example `http: {{ rules: [{{ hosts: [api.example.com], methods: [GET] }}] }}`"
            ));
        }
        Ok(())
    }

    /// A store's requests are its plugin's, within the plugin's allow-list.
    fn bind(&self, state: &mut CallState, plugin: &str, settings: &PluginSettings) {
        let http = state.slot::<HttpState>();
        http.hooks.plugin = plugin.to_string();
        http.hooks.settings = settings.sections.get::<HttpSettings>().cloned().unwrap_or_default();
    }

    fn begin_call(&self, state: &mut CallState, _input: &CallInput) {
        let log = state.host.log.clone();
        let http = state.slot::<HttpState>();
        http.hooks.log = Some(log);
        *http.hooks.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Unit for Http {
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register("plugin_http_requests", "Plugins' HTTP requests by plugin, host and status", requests());
    }
}

/// The projection wasi:http's imports reach the store through: the unit's context and hooks,
/// the store's resource table, and the call's deadline as it stands now.
fn view(s: &mut CallState) -> WasiHttpCtxView<'_> {
    let deadline = s.deadline;
    let (http, table) = s.slot_and_table::<HttpState>();
    http.hooks.deadline = deadline;
    WasiHttpCtxView { ctx: &mut http.ctx, table, hooks: &mut http.hooks }
}

/// The http unit's state in one store: the wasi:http context and the unit's hooks (the
/// plugin's settings, the call's deadline, the host's words about the last failure).
#[derive(Default)]
pub struct HttpState {
    ctx: WasiHttpCtx,
    hooks: send::Hooks,
}

impl sh::Host for HttpState {
    fn last_error(&mut self) -> wasmtime::Result<Option<String>> {
        Ok(self.hooks.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// The TLS client settings of plugins' requests: the host's ([`crate::tls::client_config`]),
/// made once. Without CA roots an https request fails its handshake with an error that says so.
fn tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static TLS: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    TLS.get_or_init(|| crate::tls::client_config().map(Arc::new)).clone()
}
