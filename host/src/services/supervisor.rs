//! One task per service: follows the wanted spec, runs it by transport, and reports `Stopped` once it is no longer wanted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use steward_sdk::{ServiceSpec, ServiceStatus, Transport};
use tokio::sync::watch;

use super::live::{LiveCell, Outcome};
use super::orphans::StateFile;
use super::redact::Redactor;
use super::status::{self, Phase, StatusCell};
use super::{Secrets, ServiceOptions, remote, stdio};
use crate::metrics::ServiceLabel;
use crate::model::{ObjectKey, now_millis, rfc3339};

/// Where restarts of services are counted, once the host gives a metric for it.
pub(crate) type RestartCounter = Arc<OnceLock<Family<ServiceLabel, Counter>>>;

/// What a supervisor works with.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The owner of the service.
    pub(crate) owner: ObjectKey,
    /// The driver's options.
    pub(crate) opts: Arc<ServiceOptions>,
    /// Where live children are recorded.
    pub(crate) state: Arc<StateFile>,
    /// The observed status.
    pub(crate) status: Arc<StatusCell>,
    /// Where the values of the service's secret references are read.
    pub(crate) secrets: Secrets,
    /// The trace of the reconcile that wanted the service first (when traces are exported).
    pub(crate) cause: Option<opentelemetry::Context>,
    /// The secret values of the current start or connect, never shown: a child's stderr or a
    /// server's error that prints one back has it replaced before it reaches the status.
    pub(crate) hidden: Mutex<Vec<String>>,
    /// The same values, registered for every text the host sanitizes (its log included).
    pub(crate) hidden_everywhere: crate::sanitize::Hidden,
    /// Where the open MCP session is shared while it is up.
    pub(crate) live: Arc<LiveCell>,
    /// The command of the spec as given, shown in place of a [`VERBATIM`] mark.
    pub(crate) command: Mutex<String>,
    /// What the host noticed of the service that does not stop it working (stderr lines
    /// dropped, tools left out), by what noticed it: the message while nothing else is.
    pub(crate) notices: Mutex<BTreeMap<&'static str, String>>,
    /// The message shown now is made of the notices.
    pub(crate) notices_shown: AtomicBool,
    /// Where restarts are counted.
    pub(crate) restarts: RestartCounter,
}

/// Stands in a message for the command as given, which [`Ctx::report`] shows with its path
/// (every other absolute path in a message is cut to its last component).
pub(crate) const VERBATIM: &str = "\u{1}command\u{1}";

impl Ctx {
    /// The span of one start of `spec` (`restart`: not the first); the first start is a child of
    /// the reconcile that wanted the service, a restart a trace of its own.
    pub(crate) fn start_span(&self, spec: &ServiceSpec, restart: bool) -> tracing::Span {
        let span = tracing::info_span!(
            parent: None,
            "service_start",
            owner = %self.owner,
            service = %spec.name,
            restart,
            pid = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        if !restart {
            crate::telemetry::set_parent(&span, self.cause.as_ref());
        }
        span
    }

    /// The span of one health probe of `spec`: a trace of its own, `healthy` recorded on it.
    pub(crate) fn probe_span(&self, spec: &ServiceSpec) -> tracing::Span {
        tracing::info_span!(
            parent: None,
            "service_probe",
            owner = %self.owner,
            service = %spec.name,
            healthy = tracing::field::Empty,
        )
    }

    /// Changes the observed status (and queues the owner when it changed). The message and
    /// the last exit are sanitized here, the one way into the status: what a child printed or a
    /// client library said reaches the plugin, the API and the log without host paths or the
    /// credentials of the spec's URL and headers.
    ///
    /// A [`VERBATIM`] mark in the message stands for the command of the spec as given, path
    /// included (an operator must see which program was asked for), with its credentials and
    /// secret values redacted.
    ///
    /// While `f` leaves no message, the message is the service's notices, one a line (see
    /// [`Ctx::notice`]). A rise of `restarts` is counted in the restarts metric.
    pub(crate) fn report(&self, f: impl FnOnce(&mut ServiceStatus)) {
        let redactor = self.redactor();
        let command = self.command.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut notices: Vec<String> =
            self.notices.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        // Prompts and resources are listed by the live session's own task: its notice is read here.
        notices.extend(self.live.get().and_then(|l| l.offered.notice()));
        let unhide = |text: &str| redactor.text(text).into_owned();
        let mut restarted = 0;
        self.status.update(|s| {
            let before = s.restarts;
            // A message made of notices is made again from the notices of now.
            if self.notices_shown.load(Ordering::Relaxed) {
                s.message = None;
            }
            f(s);
            restarted = s.restarts.saturating_sub(before);
            let shown = s.message.is_none() && !notices.is_empty();
            if shown {
                s.message = Some(notices.join("\n"));
            }
            self.notices_shown.store(shown, Ordering::Relaxed);
            for text in [&mut s.message, &mut s.last_exit].into_iter().flatten() {
                *text = crate::sanitize::sanitize(&unhide(text));
                if text.contains(VERBATIM) {
                    *text = text.replace(VERBATIM, &crate::sanitize::redact_credentials(&unhide(&command)));
                }
            }
        });
        if restarted > 0
            && let Some(family) = self.restarts.get()
        {
            let label = ServiceLabel {
                kind: self.owner.kind().to_string(),
                namespace: self.owner.namespace().to_string(),
                name: self.owner.name().to_string(),
                service: self.status.snapshot().name,
            };
            family.get_or_create(&label).inc_by(u64::from(restarted));
        }
    }

    /// Sets (`Some`) or clears (`None`) the notice of `source` (`stderr`, `tools`); the status
    /// shows it at the next [`Ctx::report`].
    pub(crate) fn notice(&self, source: &'static str, text: Option<String>) {
        let mut notices = self.notices.lock().unwrap_or_else(|p| p.into_inner());
        match text {
            Some(text) => notices.insert(source, text),
            None => notices.remove(source),
        };
    }

    /// `tools` as the status and the shared session may hold them (see
    /// [`super::taken::clean_tools`]); the `tools` notice says which were left out.
    pub(crate) fn take_tools(&self, tools: Vec<rmcp::model::Tool>) -> Vec<rmcp::model::Tool> {
        let (tools, notice) = super::taken::clean_tools(tools, &self.redactor());
        self.notice("tools", notice);
        tools
    }

    /// What removes the service's secret values (those of this and earlier starts or connects)
    /// from what its child or its server sends.
    pub(crate) fn redactor(&self) -> Redactor {
        Redactor::new(self.hidden.lock().unwrap_or_else(|p| p.into_inner()).iter())
    }

    /// Sets what a [`VERBATIM`] mark in a message stands for: the command of the spec, as given.
    pub(crate) fn set_command(&self, command: String) {
        *self.command.lock().unwrap_or_else(|p| p.into_inner()) = command;
    }

    /// Keeps `values` (the secrets of this start or connect) out of every later message.
    pub(crate) fn hide(&self, values: Vec<String>) {
        let mut hidden = self.hidden.lock().unwrap_or_else(|p| p.into_inner());
        for v in values {
            if !hidden.contains(&v) {
                hidden.push(v);
            }
        }
        // Values of earlier attempts stay hidden too (a rotated secret can still be echoed), within a bound.
        let excess = hidden.len().saturating_sub(64);
        hidden.drain(..excess);
        self.hidden_everywhere.set(&hidden);
    }
}

/// The wanted spec of one service; `None` once it is no longer wanted.
pub(crate) type Desired = watch::Receiver<Option<ServiceSpec>>;

/// Runs one service until it is no longer wanted; a changed spec restarts it in place.
pub(crate) async fn supervise(ctx: Ctx, mut desired: Desired) {
    while let Some(spec) = current(&mut desired) {
        // A new spec starts with nothing noticed.
        ctx.notices.lock().unwrap_or_else(|p| p.into_inner()).clear();
        ctx.report(|s| *s = status::fresh(&spec));
        match spec.transport {
            Transport::Stdio => stdio::run(&ctx, &spec, &mut desired).await,
            Transport::StreamableHttp | Transport::Sse => remote::run(&ctx, &spec, &mut desired).await,
        }
    }
    ctx.live.clear();
    ctx.report(|s| {
        s.phase = Phase::Stopped;
        s.pid = None;
        s.healthy = None;
        s.next_retry_at = None;
        s.message = None;
    });
}

/// The spec wanted now; `None` when the service is no longer wanted or its manager is gone.
fn current(desired: &mut Desired) -> Option<ServiceSpec> {
    if desired.has_changed().is_err() {
        return None;
    }
    desired.borrow_and_update().clone()
}

/// A spec that cannot work: reports `Failed` with `message` and waits, without retrying,
/// until a new spec supersedes it (only a new spec can help).
pub(crate) async fn failed_for_good(ctx: &Ctx, desired: &mut Desired, spec: &ServiceSpec, message: String) {
    ctx.report(|s| {
        s.phase = Phase::Failed;
        s.message = Some(message);
    });
    superseded(desired, spec).await;
}

/// Resolves once the wanted spec is no longer `spec`. Cancel-safe.
pub(crate) async fn superseded(desired: &mut Desired, spec: &ServiceSpec) {
    loop {
        if desired.borrow_and_update().as_ref() != Some(spec) {
            return;
        }
        if desired.changed().await.is_err() {
            return;
        }
    }
}

/// Waits `delay`, unless `spec` is superseded first; true when it was.
pub(crate) async fn pause(desired: &mut Desired, spec: &ServiceSpec, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => false,
        () = superseded(desired, spec) => true,
    }
}

/// Why [`wait`] returned.
#[derive(Debug)]
pub(crate) enum Wake {
    /// The spec was superseded.
    Superseded,
    /// The time was up.
    Elapsed,
    /// A call on the published session failed at the transport: the cause, in words.
    Broken(String),
    /// A call on the published session got no answer within its deadline.
    Slow,
}

/// Waits until `until`, the spec is superseded, or a call on the published session failed or
/// timed out; `answered` runs for each call that was answered meanwhile. Cancel-safe.
pub(crate) async fn wait(
    ctx: &Ctx,
    desired: &mut Desired,
    spec: &ServiceSpec,
    until: tokio::time::Instant,
    mut answered: impl FnMut(),
) -> Wake {
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return Wake::Elapsed,
            () = superseded(desired, spec) => return Wake::Superseded,
            outcome = ctx.live.outcome() => match outcome {
                Outcome::Answered => answered(),
                Outcome::Slow => return Wake::Slow,
                Outcome::Broken(cause) => return Wake::Broken(cause),
            },
        }
    }
}

/// The wait before the next attempt after `streak` failures in a row: initial × 2^(streak-1), capped.
pub(crate) fn backoff(opts: &ServiceOptions, streak: u32) -> Duration {
    let exp = streak.saturating_sub(1).min(30);
    opts.initial_backoff.saturating_mul(1u32 << exp).min(opts.max_backoff)
}

/// RFC 3339 time `delay` from now.
pub(crate) fn at(delay: Duration) -> String {
    rfc3339(now_millis().saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)))
}

/// RFC 3339 time now.
pub(crate) fn now() -> String {
    rfc3339(now_millis())
}

/// A duration for people: `1.5s`, `200ms`.
pub(crate) fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let opts = ServiceOptions::new("/nonexistent");
        let secs: Vec<u64> = (1..=9).map(|n| backoff(&opts, n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(&opts, 500), Duration::from_secs(60));
    }
}
