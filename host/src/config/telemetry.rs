//! The `log` and `telemetry` sections: the log's format, and where traces go.

use serde::Deserialize;

/// How the host writes its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines for people (the default).
    #[default]
    Text,
    /// One JSON object per line, with the fields of the event and of the spans it is in.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    /// `text` or `json`, as the config and `--log-format` spell them.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("`{other}` is not a log format; use text or json")),
        }
    }
}

/// The host's log (`log:`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// The format; `steward run --log-format` overrides it.
    pub format: LogFormat,
}

/// Traces exported with OpenTelemetry's OTLP over HTTP (`telemetry:`). Off unless an endpoint is
/// set here or in `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (which win).
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://host:4318`); traces go to `{endpoint}/v1/traces`.
    pub endpoint: Option<String>,
    /// The `service.name` of the traces, unless `OTEL_SERVICE_NAME` sets it.
    pub service_name: String,
    /// The share of traces kept, from 0 to 1 (a trace's spans are kept or dropped together).
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { endpoint: None, service_name: "steward".into(), sample_ratio: 1.0 }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub(super) format: Option<LogFormat>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    endpoint: Option<String>,
    service_name: Option<String>,
    sample_ratio: Option<f64>,
}

/// The `telemetry` section; the error names the setting.
pub(super) fn telemetry_config(raw: RawTelemetry) -> Result<TelemetryConfig, String> {
    let mut t = TelemetryConfig::default();
    if let Some(url) = raw.endpoint.map(|u| u.trim().trim_end_matches('/').to_string()).filter(|u| !u.is_empty()) {
        let host = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/') || h.contains(char::is_whitespace)) {
            return Err(format!(
                "telemetry.endpoint `{url}` is not an http:// or https:// URL; write the collector's OTLP/HTTP base URL, for example http://127.0.0.1:4318"
            ));
        }
        t.endpoint = Some(url);
    }
    if let Some(name) = raw.service_name {
        if name.trim().is_empty() {
            return Err("telemetry.service_name is empty; leave it out for `steward`".into());
        }
        t.service_name = name;
    }
    if let Some(r) = raw.sample_ratio {
        if !(0.0..=1.0).contains(&r) {
            return Err(format!("telemetry.sample_ratio {r} is out of range; use 0 to 1 (1 keeps every trace)"));
        }
        t.sample_ratio = r;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{err, parse};

    #[test]
    fn the_log_and_telemetry_sections_parse_and_check_their_values() {
        let c = parse("").unwrap();
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(c.telemetry, TelemetryConfig::default());
        assert_eq!(c.telemetry.endpoint, None, "trace export is off by default");
        let c = parse(
            "log: { format: json }\ntelemetry: { endpoint: 'http://otel:4318/', service_name: edge, sample_ratio: 0.25 }\n",
        )
        .unwrap();
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.telemetry.endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(c.telemetry.service_name, "edge");
        assert_eq!(c.telemetry.sample_ratio, 0.25);
        let e = err("log:\n  format: xml\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("xml"), "{e}");
        let e = err("telemetry: { endpoint: 'otel:4318' }\n");
        assert!(e.contains("telemetry.endpoint `otel:4318` is not an http:// or https:// URL"), "{e}");
        let e = err("telemetry: { sample_ratio: 2 }\n");
        assert!(e.contains("telemetry.sample_ratio 2 is out of range"), "{e}");
        let e = err("telemetry: { service_name: ' ' }\n");
        assert!(e.contains("telemetry.service_name"), "{e}");
        let e = err("telemetry:\n  endpoint: http://a:1\n  headers: x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("headers"), "{e}");
    }
}
