//! `steward_plugin_http_requests_total{plugin,host,status}`: every request a plugin made or was refused, process-wide.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The labels of one request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// The plugin that made it.
    pub plugin: String,
    /// `host:port` it was for; empty for a request no rule allows (so a plugin cannot add
    /// series by asking for hosts).
    pub host: String,
    /// The response's status code (`200`), or why there was none: `denied` (no rule allows
    /// it), `busy` (no concurrency permit before the deadline), `timeout` (the call's deadline),
    /// `secret` (an injected header could not be read), `error` (connect, TLS or protocol).
    pub status: String,
}

static REQUESTS: LazyLock<Family<RequestLabel, Counter>> = LazyLock::new(Family::default);

/// The family every host's registry shows (clones share the values).
pub fn requests() -> Family<RequestLabel, Counter> {
    REQUESTS.clone()
}

/// Counts one request of `plugin` to `host` that ended with `status`.
pub(super) fn count(plugin: &str, host: &str, status: &str) {
    REQUESTS.get_or_create(&RequestLabel { plugin: plugin.into(), host: host.into(), status: status.into() }).inc();
}
