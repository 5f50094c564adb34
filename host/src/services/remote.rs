//! Remote services (`streamable-http`, `sse`): no process, a fresh MCP handshake against the URL per probe.

use std::time::Duration;

use steward_sdk::ServiceSpec;
use tokio::time::{Instant, timeout};
use tracing::Instrument;

use super::live::LiveGuard;
use super::probe;
use super::status::Phase;
use super::supervisor::{Ctx, Desired, Wake, at, backoff, failed_for_good, human, now, pause, superseded, wait};

/// Probes `spec` until it is superseded: every health interval while connected, with backoff while not.
///
/// rmcp 3.x has no client for the legacy HTTP+SSE transport, so `sse` services
/// are spoken to with the streamable-HTTP client too (which reads SSE-framed
/// responses); a server that only offers the 2024-11-05 `GET /sse` endpoint
/// shows as `Disconnected` with the server's answer in the message.
pub(crate) async fn run(ctx: &Ctx, spec: &ServiceSpec, desired: &mut Desired) {
    let config = match probe::remote_config(spec).and_then(|c| ctx.secrets.check(&ctx.owner, spec).map(|()| c)) {
        Ok(config) => config,
        Err(message) => return failed_for_good(ctx, desired, spec, message).await,
    };
    let url = config.uri.clone();
    let limit = probe::probe_timeout(spec);
    let mut connected = false;
    let mut attempted = false;
    let mut streak = 0u32;
    // The session of the first good probe, shared (for tool calls) until a probe fails or finds
    // it closed; dropping it withdraws it and closes the session. Every way out of this
    // function drops it.
    let mut live: Option<(probe::Session, LiveGuard)> = None;
    loop {
        let reconnect = attempted && !connected;
        attempted = true;
        // Secret values are read for each connect (each probe is one), so a Secret that
        // appears or changes is used by the next one; they live only as long as the probe.
        let resolved = tokio::select! {
            r = ctx.secrets.resolve(&ctx.owner, spec) => r,
            () = superseded(desired, spec) => return,
        };
        let config = match resolved {
            Ok(resolved) => {
                ctx.hide(resolved.values());
                probe::with_headers(&config, resolved.headers)
            }
            Err(message) => {
                drop_if_closed(&mut live);
                connected = false;
                streak += 1;
                let delay = backoff(&ctx.opts, streak);
                let failed = Failed { phase: Phase::Failed, healthy: None, auth_required: false, message };
                failed.report(ctx, reconnect, delay);
                if pause(desired, spec, delay).await {
                    return;
                }
                continue;
            }
        };
        let probed = ctx.probe_span(spec);
        let result = tokio::select! {
            res = timeout(limit, probe::probe_remote(config)).instrument(probed.clone()) => res,
            () = superseded(desired, spec) => return,
        };
        probed.record("healthy", matches!(result, Ok(Ok(_))));
        drop(probed);
        let delay = match result {
            Ok(Ok((session, tools))) => {
                let tools = ctx.take_tools(tools);
                let info = probe::tools_info(&tools);
                // The published session is kept while it still answers, so tool calls in flight on
                // it go on (dropping a session cuts them). Asking it proves it: a server that
                // restarted meanwhile no longer knows it, and the request re-establishes it.
                let keep = match &live {
                    Some((old, _)) if !old.peer().is_transport_closed() => {
                        tokio::select! {
                            ok = probe::answers(old, limit) => ok,
                            () = superseded(desired, spec) => return,
                        }
                    }
                    _ => false,
                };
                match &live {
                    Some((old, guard)) if keep => {
                        // The new listing's extras (a tool's `execution`) go with its tools.
                        old.service().raw().set_extras(session.service().raw().extras());
                        guard.set_tools(tools);
                        drop(session);
                    }
                    _ => {
                        // The old session goes first (its guard would otherwise be the newer one's).
                        drop(live.take());
                        ctx.live.forget_outcome();
                        let guard =
                            ctx.live.publish(session.peer().clone(), session.service(), tools, limit, ctx.redactor());
                        live = Some((session, guard));
                    }
                }
                let newly = !connected;
                connected = true;
                streak = 0;
                ctx.report(|s| {
                    if reconnect {
                        s.restarts += 1;
                    }
                    s.phase = Phase::Connected;
                    s.healthy = Some(true);
                    s.consecutive_failures = 0;
                    s.next_retry_at = None;
                    if newly {
                        s.last_connected = Some(now());
                    }
                    s.tools = info;
                    s.auth_required = false;
                    s.message = None;
                });
                ctx.opts.health_interval
            }
            failed => {
                // A session that still works stays shared: a server slow to answer a probe
                // because it is busy with a long call must not have that call cut.
                drop_if_closed(&mut live);
                let (err, auth_required) = match failed {
                    Ok(Err(e)) => (e.message, e.auth_required),
                    _ => (format!("no answer within {}", human(limit)), false),
                };
                let message = if auth_required {
                    format!(
                        "{url} answered HTTP 401: the server wants authorization. Steward has no per-user OAuth \
                         flow; give the service a static `Authorization` header read from a secret"
                    )
                } else {
                    format!("cannot reach {url}: {err}")
                };
                connected = false;
                streak += 1;
                let delay = backoff(&ctx.opts, streak);
                Failed { phase: Phase::Disconnected, healthy: Some(false), auth_required, message }
                    .report(ctx, reconnect, delay);
                delay
            }
        };
        ctx.live.attempted();
        let until = Instant::now() + delay;
        loop {
            match wait(ctx, desired, spec, until, || {}).await {
                Wake::Superseded => return,
                Wake::Elapsed | Wake::Slow => break,
                // A call that failed at the transport: the server is shown as not reachable, with
                // the cause, and reconnected at once (then with backoff while it fails).
                Wake::Broken(cause) if connected => {
                    drop(live.take());
                    connected = false;
                    streak += 1;
                    ctx.report(|s| {
                        s.phase = Phase::Disconnected;
                        s.healthy = Some(false);
                        s.consecutive_failures += 1;
                        s.next_retry_at = None;
                        s.message = Some(format!("a tool call failed: {cause}; reconnecting to {url}"));
                    });
                    break;
                }
                // A late report about a session already given up.
                Wake::Broken(_) => {}
            }
        }
    }
}

/// Drops the shared session if its transport closed; a working one is kept.
fn drop_if_closed(live: &mut Option<(probe::Session, LiveGuard)>) {
    if live.as_ref().is_some_and(|(s, _)| s.peer().is_transport_closed()) {
        *live = None;
    }
}

/// One failed connect: a secret that could not be read (`Failed`) or a server that did not
/// answer as it should (`Disconnected`).
struct Failed {
    phase: Phase,
    healthy: Option<bool>,
    auth_required: bool,
    message: String,
}

impl Failed {
    /// Reports it: one more failure in a row, the next attempt `delay` from now.
    fn report(self, ctx: &Ctx, reconnect: bool, delay: Duration) {
        ctx.report(|s| {
            if reconnect {
                s.restarts += 1;
            }
            s.phase = self.phase;
            s.healthy = self.healthy;
            s.consecutive_failures += 1;
            s.next_retry_at = Some(at(delay));
            s.auth_required = self.auth_required;
            s.message = Some(self.message);
        });
    }
}
