//! stdio services: a supervised child that speaks MCP over its stdin/stdout, restarted with backoff.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use steward_sdk::ServiceSpec;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, MissedTickBehavior, timeout};
use tracing::Instrument;

use super::framing::{self, Metered, Oversize};
use super::live::Outcome;
use super::logtail::{self, Stderr};
use super::probe::{self, EofWatch, Prober};
use super::process::{self, Launch, Proc, describe_exit};
use super::status::Phase;
use super::supervisor::{Ctx, Desired, VERBATIM, at, backoff, failed_for_good, human, now, pause, superseded};

/// How long a child whose stdout closed may take to exit before it counts as alive.
const EXIT_SETTLE: Duration = Duration::from_secs(1);
/// How long the stderr reader may take to drain once the process group is gone.
const TAIL_DRAIN: Duration = Duration::from_secs(1);

/// Why one run of the process ended.
enum Reason {
    /// The spec changed or the service is no longer wanted.
    Superseded,
    /// The process ended on its own.
    Exited { status: ExitStatus, handshake_done: bool },
    /// The driver gave up on the process: the message says why.
    Broken(String),
}

/// Runs `spec` until it is superseded: spawn, handshake, probe, restart with backoff.
pub(crate) async fn run(ctx: &Ctx, spec: &ServiceSpec, desired: &mut Desired) {
    let launch = match Launch::from_spec(spec).and_then(|l| ctx.secrets.check(&ctx.owner, spec).map(|()| l)) {
        Ok(launch) => launch,
        Err(message) => return failed_for_good(ctx, desired, spec, message).await,
    };
    // The command as given (program and arguments), for messages that must name it whole.
    ctx.set_command(
        std::iter::once(launch.program.as_str())
            .chain(spec.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let mut restart = false;
    // Failures since the process last passed a periodic probe; drives the backoff.
    let mut streak = 0u32;
    loop {
        // Secret values are read for each start, so a Secret that appears or changes is used by the next one.
        let resolved = tokio::select! {
            r = ctx.secrets.resolve(&ctx.owner, spec) => r,
            () = superseded(desired, spec) => return,
        };
        let failure = match resolved {
            Err(message) => Failure::new(message, restart),
            Ok(resolved) => {
                ctx.hide(resolved.values());
                let launch = launch.with_env(resolved.env_vars());
                drop(resolved);
                let started = ctx.start_span(spec, restart);
                let spawned = process::spawn(launch.clone()).instrument(started.clone()).await.map(Proc::new);
                match &spawned {
                    // As a signed number: the trace exporter writes unsigned ones as text.
                    Ok(Some(p)) => {
                        started.record("pid", i64::from(p.pid));
                    }
                    Ok(None) => failed_start(&started, "the process vanished as soon as it was spawned"),
                    Err(e) => failed_start(&started, &format!("cannot start: {e}")),
                };
                drop(started);
                match spawned {
                    Ok(Some(proc)) => match run_child(ctx, spec, &launch, proc, desired, restart, &mut streak).await {
                        None => return,
                        Some(failure) => failure,
                    },
                    Ok(None) => Failure::new("the process vanished as soon as it was spawned", restart),
                    Err(e) => Failure::new(format!("cannot start `{VERBATIM}`: {e}"), restart),
                }
            }
        };
        streak += 1;
        let delay = backoff(&ctx.opts, streak);
        ctx.report(|s| {
            if failure.bump_restarts {
                s.restarts += 1;
            }
            if !failure.counted {
                s.consecutive_failures += 1;
            }
            s.phase = Phase::Failed;
            s.pid = None;
            s.healthy = None;
            s.next_retry_at = Some(at(delay));
            if failure.last_exit.is_some() {
                s.last_exit = failure.last_exit;
            }
            s.message = Some(failure.message);
        });
        tracing::debug!(?delay, "restarting after backoff");
        if pause(desired, spec, delay).await {
            return;
        }
        restart = true;
    }
}

/// A run that ended badly.
struct Failure {
    message: String,
    last_exit: Option<String>,
    /// The failure is already in `consecutive_failures`.
    counted: bool,
    /// This attempt is a restart not yet counted in `restarts`.
    bump_restarts: bool,
}

impl Failure {
    fn new(message: impl Into<String>, bump_restarts: bool) -> Self {
        Self { message: message.into(), last_exit: None, counted: false, bump_restarts }
    }
}

/// Runs one spawned process to its end; `None` when it ended because the spec was superseded.
async fn run_child(
    ctx: &Ctx,
    spec: &ServiceSpec,
    launch: &Launch,
    mut proc: Proc,
    desired: &mut Desired,
    restart: bool,
    streak: &mut u32,
) -> Option<Failure> {
    let pid = proc.pid;
    ctx.state.record(pid, &ctx.owner.to_string(), &spec.name, &launch.program);
    let tail = Arc::new(Stderr::default());
    let child = proc.child_mut();
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let reader = stderr.map(|stderr| tokio::spawn(logtail::collect(stderr, tail.clone(), ctx.redactor())));
    // What the last process's stderr and tools gave notice of is not this one's.
    ctx.notice("stderr", None);
    ctx.notice("tools", None);
    ctx.report(|s| {
        if restart {
            s.restarts += 1;
        }
        s.phase = Phase::Starting;
        s.pid = Some(pid);
        s.healthy = None;
        s.next_retry_at = None;
        s.message = None;
    });
    let (reason, counted) = match (stdin, stdout) {
        (Some(stdin), Some(stdout)) => drive(ctx, spec, &mut proc, (stdin, stdout), &tail, desired, streak).await,
        _ => (Reason::Broken("the child has no stdin/stdout pipes".into()), false),
    };
    let exit = proc.stop(ctx.opts.stop_grace).await;
    ctx.state.forget(pid);
    if let Some(reader) = reader {
        // The group is dead, so stderr ends now unless something outside the group holds it.
        let _ = timeout(TAIL_DRAIN, reader).await;
    }
    let message = match reason {
        Reason::Superseded => return None,
        Reason::Exited { status, handshake_done: false } => {
            format!("{} before the MCP handshake completed", describe_exit(status))
        }
        Reason::Exited { status, handshake_done: true } => format!("{} unexpectedly", describe_exit(status)),
        Reason::Broken(why) => why,
    };
    let message = match tail.dropped() {
        0 => message,
        n => format!("{message}; {}", logtail::drop_notice(n)),
    };
    let stderr = tail.text();
    let message = if stderr.is_empty() { message } else { format!("{message}; stderr (last lines):\n{stderr}") };
    Some(Failure { message, last_exit: Some(describe_exit(exit)), counted, bump_restarts: false })
}

/// Handshake, then health probes until the process ends or is given up; returns why, and
/// whether the failure is already in `consecutive_failures`.
async fn drive(
    ctx: &Ctx,
    spec: &ServiceSpec,
    proc: &mut Proc,
    (stdin, stdout): (tokio::process::ChildStdin, tokio::process::ChildStdout),
    stderr: &Stderr,
    desired: &mut Desired,
    streak: &mut u32,
) -> (Reason, bool) {
    let limit = probe::probe_timeout(spec);
    let (eof_tx, mut eof_rx) = oneshot::channel();
    let tools_changed = Arc::new(Notify::new());
    let oversize = Arc::new(Oversize::default());
    let prober = Prober::new(tools_changed.clone());
    let tapped = super::raw::Tapped::new(EofWatch::new(stdout, eof_tx), prober.raw(), framing::MAX_MESSAGE);
    let transport = framing::transport(Metered::new(tapped, oversize.clone()), stdin);
    let handshake = timeout(limit, probe::open(transport, prober.clone()));
    let (session, tools) = tokio::select! {
        biased;
        status = proc.wait() => return (Reason::Exited { status, handshake_done: false }, false),
        () = superseded(desired, spec) => return (Reason::Superseded, true),
        // The answer the handshake waits for was too large, and dropped: it will never come.
        () = oversize.ended() => {
            return (Reason::Broken(format!("MCP handshake failed: {}", oversize.describe(prober.waits_for()))), false);
        }
        res = handshake => match res {
            Ok(Ok((session, tools))) => {
                let tools = ctx.take_tools(tools);
                let info = probe::tools_info(&tools);
                ctx.report(|s| {
                    s.phase = Phase::Running;
                    s.healthy = Some(true);
                    s.consecutive_failures = 0;
                    s.last_connected = Some(now());
                    s.tools = info;
                    s.message = None;
                });
                (session, tools)
            }
            failed => {
                // A server that closed its stdout, or whose stdin broke while the handshake was
                // written, is probably exiting: report how it ended (which of the two the
                // handshake notices first is a race, so both are handled the same way).
                if (eof_rx.try_recv().is_ok() || matches!(&failed, Ok(Err(e)) if e.closed))
                    && let Ok(status) = timeout(EXIT_SETTLE, proc.wait()).await
                {
                    return (Reason::Exited { status, handshake_done: false }, false);
                }
                let why = match failed {
                    Ok(Err(e)) => format!("MCP handshake failed: {}", e.message),
                    _ if oversize.count() > 0 => {
                        format!("MCP handshake failed: {}", oversize.describe(prober.waits_for()))
                    }
                    _ => format!("MCP handshake timed out after {}", human(limit)),
                };
                return (Reason::Broken(why), false);
            }
        },
    };

    // Shared while this function runs: every way out of it drops the guard, which withdraws it.
    ctx.live.forget_outcome();
    let live = ctx.live.publish(session.peer().clone(), session.service(), tools, limit, ctx.redactor());
    let every = ctx.opts.health_interval;
    let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let max = ctx.opts.max_failed_probes.max(1);
    let mut failed = 0u32;
    loop {
        let periodic = tokio::select! {
            biased;
            status = proc.wait() => return (Reason::Exited { status, handshake_done: true }, false),
            () = superseded(desired, spec) => return (Reason::Superseded, true),
            _ = &mut eof_rx => {
                if let Ok(status) = timeout(EXIT_SETTLE, proc.wait()).await {
                    return (Reason::Exited { status, handshake_done: true }, false);
                }
                return (Reason::Broken("the server closed its stdout: the MCP session is gone".into()), false);
            }
            _ = ticker.tick() => true,
            // A server that did not answer is probed again within its probe timeout, not a
            // whole health interval later, so that its restart comes soon.
            () = tokio::time::sleep(limit), if failed > 0 => false,
            () = tools_changed.notified() => false,
            // Lines over the rate were dropped: the status says how many (at most every few seconds).
            () = stderr.dropped_changed() => {
                ctx.notice("stderr", Some(logtail::drop_notice(stderr.dropped())));
                ctx.report(|_| {});
                continue;
            }
            outcome = ctx.live.outcome() => match outcome {
                // A call was answered: a server shown unhealthy answers again.
                Outcome::Answered => {
                    if failed > 0 {
                        failed = 0;
                        ctx.report(|s| {
                            s.healthy = Some(true);
                            s.consecutive_failures = 0;
                            s.message = None;
                        });
                    }
                    continue;
                }
                // A call got no answer in time: probe now, to tell a slow tool from a server
                // that does not answer.
                Outcome::Slow => false,
                Outcome::Broken(cause) => {
                    ctx.report(|s| {
                        s.healthy = Some(false);
                        s.message = Some(format!("a tool call failed: {cause}"));
                    });
                    false
                }
            },
        };
        let probed = ctx.probe_span(spec);
        let oversized_before = oversize.count();
        let result = timeout(limit, probe::list_tools(&session)).instrument(probed.clone()).await;
        probed.record("healthy", matches!(result, Ok(Ok(_))));
        drop(probed);
        ctx.live.attempted();
        let err = match result {
            Ok(Ok(tools)) => {
                failed = 0;
                if periodic {
                    // It survived a whole health interval: the next crash starts the backoff afresh.
                    *streak = 0;
                }
                let tools = ctx.take_tools(tools);
                let info = probe::tools_info(&tools);
                live.set_tools(tools);
                ctx.report(|s| {
                    s.healthy = Some(true);
                    s.consecutive_failures = 0;
                    s.tools = info;
                    s.message = None;
                });
                continue;
            }
            Ok(Err(e)) => e,
            Err(_) if oversize.count() > oversized_before => oversize.describe("tools/list"),
            Err(_) => format!("the server does not answer: tools/list got no answer within {}", human(limit)),
        };
        if session.peer().is_transport_closed() {
            return (Reason::Broken(format!("the MCP session broke: {err}")), false);
        }
        failed += 1;
        ctx.report(|s| {
            s.healthy = Some(false);
            s.consecutive_failures += 1;
            s.message = Some(format!("health probe failed ({failed} of {max} in a row): {err}"));
        });
        if failed >= max {
            return (Reason::Broken(format!("{failed} health probes in a row failed; the last: {err}")), true);
        }
    }
}

/// Marks the `service_start` span `span` as failed: its `error` field, and its status in an
/// exported trace.
fn failed_start(span: &tracing::Span, why: &str) {
    span.record("error", why);
    crate::telemetry::set_error(span, why);
}
