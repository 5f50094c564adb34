//! The OTLP trace pipeline: an HTTP/protobuf exporter behind a batch processor, configured from the standard `OTEL_*` variables or the config's `telemetry:` section.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use super::TelemetryError;
use crate::config::TelemetryConfig;

/// The variables that name a collector; either one turns export on and wins over the config.
const ENDPOINT_VARS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Whether traces are exported: a collector is named (environment or config) and
/// `OTEL_SDK_DISABLED` is not `true`.
pub(super) fn wanted(cfg: &TelemetryConfig) -> bool {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (cfg.endpoint.is_some() || ENDPOINT_VARS.iter().any(|v| env_set(v)))
}

/// The exporter's client: reqwest's blocking client (the batch processor exports from a thread of
/// its own) over the host's TLS settings. Built on a thread of its own too, as a blocking client
/// cannot be built inside an async runtime.
fn client() -> Result<reqwest::blocking::Client, TelemetryError> {
    let build = || -> Result<reqwest::blocking::Client, String> {
        let tls = crate::tls::client_config()?;
        reqwest::blocking::Client::builder().tls_backend_preconfigured(tls).build().map_err(|e| e.to_string())
    };
    std::thread::spawn(build)
        .join()
        .map_err(|_| TelemetryError::Exporter("building the HTTP client failed".into()))?
        .map_err(|e| TelemetryError::Exporter(format!("cannot build the HTTP client: {e}")))
}

/// The provider (kept to flush it on shutdown) and the tracer of the host's spans.
pub(super) fn pipeline(cfg: &TelemetryConfig) -> Result<(SdkTracerProvider, SdkTracer), TelemetryError> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(client()?);
    // A programmatic endpoint would override the environment's: set it only when no variable does.
    if !ENDPOINT_VARS.iter().any(|v| env_set(v))
        && let Some(base) = &cfg.endpoint
    {
        exporter = exporter.with_endpoint(format!("{base}/v1/traces"));
    }
    let exporter = exporter.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    // The default resource reads `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
    let mut resource = Resource::builder();
    if !env_set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(cfg.service_name.clone());
    }
    let mut provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build());
    // Left alone, the sampler follows `OTEL_TRACES_SAMPLER` (always on by default).
    if cfg.sample_ratio < 1.0 {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sample_ratio))));
    }
    let provider = provider.build();
    let tracer = provider.tracer("steward");
    Ok((provider, tracer))
}
