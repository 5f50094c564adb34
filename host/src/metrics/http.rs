//! The metrics of the host's HTTP servers (connections of each listener, MCP sessions), kept apart from the engine because the API serves before the engine starts.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// The label of a listener's metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabel {
    /// `api` (which also serves `/mcp`) or `webhook`.
    pub server: String,
}

impl ServerLabel {
    /// The label of `server`.
    pub fn of(server: &str) -> Self {
        Self { server: server.to_string() }
    }
}

/// The HTTP servers' metrics. Clones share their values, so the API (serving from the start),
/// the webhook and the engine's registry (which renders them, see
/// [`super::Metrics::use_http`]) all see the same ones.
#[derive(Clone, Debug, Default)]
pub struct HttpMetrics {
    /// `steward_http_connections{server}`: connections open now.
    pub connections: Family<ServerLabel, Gauge>,
    /// `steward_http_connection_cap_reached_total{server}`: times the server had as many
    /// connections open as it allows and stopped accepting until one closed.
    pub cap_reached: Family<ServerLabel, Counter>,
    /// `steward_http_header_timeouts_total{server}`: connections closed because the request's
    /// headers did not arrive within the header-read timeout (idle keep-alive connections included).
    pub header_timeouts: Family<ServerLabel, Counter>,
    /// `steward_http_body_timeouts_total{server}`: requests answered 408 because their body did
    /// not arrive within the header-read timeout of their headers.
    pub body_timeouts: Family<ServerLabel, Counter>,
    /// `steward_mcp_sessions`: MCP sessions open at `/mcp`.
    pub mcp_sessions: Gauge,
    /// `steward_mcp_sessions_evicted_total`: idle MCP sessions closed to make room for a new one.
    pub mcp_sessions_evicted: Counter,
    /// `steward_mcp_sessions_refused_total`: `initialize` requests refused because every open
    /// session was busy at the cap.
    pub mcp_sessions_refused: Counter,
}

impl Collector for HttpMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let metrics: [(&str, &str, &dyn EncodeMetric); 7] = [
            ("http_connections", "Connections open, by server", &self.connections),
            (
                "http_connection_cap_reached",
                "Times a server reached its connection cap and stopped accepting until a connection closed",
                &self.cap_reached,
            ),
            (
                "http_header_timeouts",
                "Connections closed because a request's headers did not arrive in time",
                &self.header_timeouts,
            ),
            (
                "http_body_timeouts",
                "Requests answered 408 because their body did not arrive in time",
                &self.body_timeouts,
            ),
            ("mcp_sessions", "MCP sessions open at /mcp", &self.mcp_sessions),
            ("mcp_sessions_evicted", "Idle MCP sessions closed to make room for a new one", &self.mcp_sessions_evicted),
            (
                "mcp_sessions_refused",
                "MCP initialize requests refused because every session was busy at the cap",
                &self.mcp_sessions_refused,
            ),
        ];
        for (name, help, metric) in metrics {
            // As the registry does for its own metrics: a family without samples is left out.
            if metric.is_empty() {
                continue;
            }
            let m = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
            metric.encode(m)?;
        }
        Ok(())
    }
}

/// The HTTP servers' metrics as the engine's registry holds them: none until the host hands its
/// own over, or until the first caller of [`super::Metrics::http`] makes them.
#[derive(Clone, Debug, Default)]
pub(super) struct Slot(pub(super) std::sync::Arc<std::sync::OnceLock<HttpMetrics>>);

impl Collector for Slot {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        match self.0.get() {
            Some(m) => m.encode(encoder),
            None => Ok(()),
        }
    }
}
