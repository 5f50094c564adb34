//! The host's own telemetry: its log (lines for people or JSON lines, filtered like `RUST_LOG`) and, when a collector is named, its spans exported as OpenTelemetry traces over OTLP/HTTP.
//!
//! With no collector named, no OpenTelemetry layer is installed: spans cost what `tracing`
//! spans cost, and [`current_trace_id`] is `None`.

#[cfg(test)]
pub(crate) mod capture;
mod export;
mod json;
mod redact;

pub use json::line as json_line;

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Layer, Registry};

use crate::config::{LogFormat, TelemetryConfig};

/// Whether an OpenTelemetry layer is installed in this process.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// What the process's telemetry is set up with.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The log's format.
    pub format: LogFormat,
    /// The log filter when neither `STEWARD_LOG` nor `RUST_LOG` gives one (an `EnvFilter` directive).
    pub default_filter: String,
    /// Trace export; `None` (or a config that names no collector, with no `OTEL_*` variable
    /// naming one) installs no OpenTelemetry layer.
    pub traces: Option<TelemetryConfig>,
}

/// Why telemetry cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter cannot be built (for example an `OTEL_EXPORTER_OTLP_*` variable that is not a URL).
    #[error("cannot export traces: {0}")]
    Exporter(String),
}

/// The process's telemetry, while it lives; dropping it (or [`Telemetry::shutdown`]) flushes the
/// spans not yet exported.
#[must_use = "dropping it stops and flushes trace export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what is pending and stops exporting; waits for the exporter (bounded by its timeout).
    pub fn shutdown(mut self) {
        self.flush_and_stop();
    }

    fn flush_and_stop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                tracing::warn!(error = %e, "trace export did not finish cleanly");
            }
            EXPORTING.store(false, Ordering::Release);
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush_and_stop();
    }
}

/// Sets the process's subscriber: the log to stderr in `settings.format`, filtered by
/// `STEWARD_LOG`, else `RUST_LOG`, else `settings.default_filter`; and, when a collector is
/// named, an OpenTelemetry layer that exports the `steward` crate's spans and events (debug and
/// up, whatever the log filter). Does nothing but return an inert guard if a subscriber is set.
pub fn init(settings: &Settings) -> Result<Telemetry, TelemetryError> {
    let filter = ["STEWARD_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()).map(EnvFilter::new))
        .unwrap_or_else(|| EnvFilter::new(&settings.default_filter));
    use std::io::IsTerminal;
    let log: Box<dyn Layer<Registry> + Send + Sync> = match settings.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(redact::Stderr { redact: true })
            .boxed(),
        // Credentials are removed from each value as the line is made (removing them from the
        // line's text could cut a JSON string's escape).
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(json::JsonSpanFields)
            .event_format(json::JsonLines)
            .with_writer(redact::Stderr { redact: false })
            .boxed(),
    };
    let mut layers = vec![log.with_filter(filter).boxed()];
    let mut provider = None;
    if let Some(cfg) = settings.traces.as_ref().filter(|c| export::wanted(c)) {
        let (p, tracer) = export::pipeline(cfg)?;
        let own = Targets::new().with_target(env!("CARGO_CRATE_NAME"), LevelFilter::DEBUG);
        layers.push(tracing_opentelemetry::layer().with_tracer(tracer).with_filter(own).boxed());
        provider = Some(p);
    }
    if tracing_subscriber::registry().with(layers).try_init().is_err() {
        return Ok(Telemetry { provider: None });
    }
    EXPORTING.store(provider.is_some(), Ordering::Release);
    Ok(Telemetry { provider })
}

/// Whether spans and events leave the process (to a collector) as well as to the log. What goes
/// there does not pass through the log's writer, which removes credentials from each line.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Acquire)
}

/// The trace id (32 hex digits) of the current span, when its trace is exported and sampled.
pub fn current_trace_id() -> Option<String> {
    if !EXPORTING.load(Ordering::Acquire) {
        return None;
    }
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    (sc.is_valid() && sc.is_sampled()).then(|| sc.trace_id().to_string())
}

/// The OpenTelemetry context of the current span, to parent spans of work it starts that
/// outlives it (a service's first start); `None` when nothing is exported.
pub fn current_context() -> Option<opentelemetry::Context> {
    EXPORTING.load(Ordering::Acquire).then(|| tracing::Span::current().context())
}

/// Marks `span` as failed with `message` in the exported trace (its status); nothing when
/// nothing is exported, so the log does not repeat what its events already say.
pub fn set_error(span: &tracing::Span, message: &str) {
    if exporting() {
        span.set_status(opentelemetry::trace::Status::error(message.to_string()));
    }
}

/// Makes `span` a child of `parent` (from [`current_context`]) in the exported trace.
pub fn set_parent(span: &tracing::Span, parent: Option<&opentelemetry::Context>) {
    if let Some(cx) = parent {
        let _ = span.set_parent(cx.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_exported_or_traced_without_a_collector() {
        // No subscriber with an OpenTelemetry layer in this process: no trace id, no context.
        let span = tracing::info_span!("reconcile");
        let _in = span.enter();
        assert_eq!(current_trace_id(), None);
        assert!(current_context().is_none());
        let off = TelemetryConfig::default();
        assert!(off.endpoint.is_none());
    }
}
