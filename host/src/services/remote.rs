//! Remote services (`streamable-http`, `sse`): no process, a fresh MCP handshake against the URL per probe.

use steward_sdk::ServiceSpec;
use tokio::time::timeout;
use tracing::Instrument;

use super::probe;
use super::status::Phase;
use super::supervisor::{Ctx, Desired, at, backoff, failed_for_good, human, now, pause, superseded};

/// Probes `spec` until it is superseded: every health interval while connected, with backoff while not.
///
/// rmcp 3.x has no client for the legacy HTTP+SSE transport, so `sse` services
/// are spoken to with the streamable-HTTP client too (which reads SSE-framed
/// responses); a server that only offers the 2024-11-05 `GET /sse` endpoint
/// shows as `Disconnected` with the server's answer in the message.
pub(crate) async fn run(ctx: &Ctx, spec: &ServiceSpec, desired: &mut Desired) {
    let config = match probe::remote_config(spec) {
        Ok(config) => config,
        Err(message) => return failed_for_good(ctx, desired, spec, message).await,
    };
    let url = config.uri.clone();
    let limit = probe::probe_timeout(spec);
    let mut connected = false;
    let mut attempted = false;
    let mut streak = 0u32;
    loop {
        let reconnect = attempted && !connected;
        attempted = true;
        let probed = ctx.probe_span(spec);
        let result = tokio::select! {
            res = timeout(limit, probe::probe_remote(config.clone())).instrument(probed.clone()) => res,
            () = superseded(desired, spec) => return,
        };
        probed.record("healthy", matches!(result, Ok(Ok(_))));
        drop(probed);
        let delay = match result {
            Ok(Ok(tools)) => {
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
                    s.tools = tools;
                    s.message = None;
                });
                ctx.opts.health_interval
            }
            failed => {
                let err = match failed {
                    Ok(Err(e)) => e,
                    _ => format!("no answer within {}", human(limit)),
                };
                connected = false;
                streak += 1;
                let delay = backoff(&ctx.opts, streak);
                ctx.report(|s| {
                    if reconnect {
                        s.restarts += 1;
                    }
                    s.phase = Phase::Disconnected;
                    s.healthy = Some(false);
                    s.consecutive_failures += 1;
                    s.next_retry_at = Some(at(delay));
                    s.message = Some(format!("cannot reach {url}: {err}"));
                });
                delay
            }
        };
        if pause(desired, spec, delay).await {
            return;
        }
    }
}
