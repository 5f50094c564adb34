//! `steward-example-mcp`: a small, real MCP server.
//!
//! Steward's end-to-end tests and the local example run it to have something
//! to supervise and probe. It speaks MCP over stdin/stdout (the default) or
//! streamable HTTP on a loopback address, exposes a few small tools, and has
//! switches that make it misbehave on purpose: exit after a while, or refuse
//! the `initialize` handshake.
//!
//! Built-in tools (all exposed unless `--tools` picks some):
//!
//! - `echo` {message: string}: answers the message;
//! - `add` {a, b: numbers}: answers their sum;
//! - `time` {}: answers the current unix time in seconds;
//! - `sleep` {ms: integer}: waits ms milliseconds, then answers "slept <ms>";
//!   a `notifications/cancelled` from the client stops it early;
//! - `fail` {message: string}: answers a tool error (`isError: true`) with the
//!   message as its text;
//! - `crash` {}: the process exits at once with status 4, without answering;
//! - `json` {value: any JSON}: answers the value as JSON text, and also as
//!   `structuredContent` when it is an object;
//! - `count` {key: string}: increments this process's counter for key and
//!   answers `{"key":KEY,"count":N}` (JSON text and `structuredContent`).
//!
//! With `--journal FILE` every `tools/call` is recorded as JSON lines appended
//! to FILE (see [`journal`]), so tests can count how often a tool really ran.

mod journal;
mod refuse;
mod server;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, error::ErrorKind};
use tracing_subscriber::EnvFilter;

use crate::server::{BUILTIN_TOOLS, ExampleServer};

/// Status used by `--exit-after-secs`.
const EXIT_AFTER_STATUS: i32 = 3;

/// A small MCP server with a few tools, for tests and examples.
///
/// By default it speaks MCP over stdin/stdout (newline-delimited JSON-RPC) and
/// logs only to stderr. With `--http` it serves MCP streamable HTTP at `/mcp`
/// on a loopback address instead.
///
/// Built-in tools: `echo` (message: string -> the message), `add` (a, b:
/// numbers -> their sum), `time` (-> the current unix time in seconds),
/// `sleep` (ms: integer -> "slept <ms>" after that long; stops early when the
/// client cancels the call), `fail` (message: string -> a tool error, isError
/// true, with that text), `crash` (-> the process exits at once with status
/// 4, without answering), `json` (value: any JSON -> the value as JSON text,
/// and as structuredContent when it is an object), `count` (key: string ->
/// {"key": key, "count": n}, n counting the calls with that key in this
/// process).
#[derive(Debug, Parser)]
#[command(name = "steward-example-mcp", version, about, long_about)]
#[command(after_help = "Log level: RUST_LOG (default: info,rmcp=warn). Logs go to stderr only.")]
struct Args {
    /// Serve MCP over stdin/stdout (the default).
    #[arg(long, conflicts_with = "http")]
    stdio: bool,

    /// Serve MCP streamable HTTP at http://ADDR/mcp instead of stdio. ADDR must
    /// be a loopback address, e.g. 127.0.0.1:8080; port 0 picks a free port.
    /// Prints `listening on http://ADDR/mcp` to stderr once bound.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,

    /// Expose only these built-in tools (comma-separated: echo, add, time,
    /// sleep, fail, crash, json, count). An empty list exposes none. Default:
    /// all of them.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    tools: Option<Vec<String>>,

    /// Also expose a tool named NAME that takes no arguments and returns
    /// "NAME ok". Repeatable.
    #[arg(long = "extra-tool", value_name = "NAME")]
    extra_tools: Vec<String>,

    /// Exit with status 3 after SECS seconds, whatever is going on.
    #[arg(long, value_name = "SECS")]
    exit_after_secs: Option<u64>,

    /// Start, but answer every `initialize` request with an error, so that a
    /// health probe fails while the process keeps running.
    #[arg(long)]
    fail_initialize: bool,

    /// Append one JSON line to FILE per tool-call event: a `call` line
    /// {"event":"call","tool":NAME,"arguments":{..},"pid":PID} when a
    /// tools/call is received (before it runs); a `done` line
    /// {"event":"done","tool":NAME,"pid":PID} when it has finished (before
    /// answering); a `cancelled` line {"event":"cancelled","tool":NAME,"pid":PID}
    /// instead when the client cancelled it first (notifications/cancelled).
    /// Several processes may share FILE.
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
}

/// What to serve, after validating the arguments.
struct Plan {
    tools: BTreeSet<&'static str>,
    extra_tools: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let plan = match validate(&args) {
        Ok(plan) => plan,
        Err(message) => Args::command().error(ErrorKind::ValueValidation, message).exit(),
    };

    init_logging();

    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            report(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };

    let result = runtime.block_on(run(args, plan));
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            report(&format!("error: {e:#}"));
            1
        }
    };
    // A blocking read of stdin may still be parked on a runtime thread (for
    // example when the client closed our stdout but not our stdin); waiting
    // for it would hang, so leave without dropping the runtime.
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

fn validate(args: &Args) -> Result<Plan, String> {
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
    {
        return Err(format!("--http {addr}: only loopback addresses are allowed (use 127.0.0.1:PORT or [::1]:PORT)"));
    }

    let tools = match &args.tools {
        None => BUILTIN_TOOLS.iter().copied().collect(),
        Some(names) => {
            let mut tools = BTreeSet::new();
            for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
                let Some(known) = BUILTIN_TOOLS.iter().find(|t| **t == name) else {
                    return Err(format!("--tools: unknown tool {name:?} (known tools: {})", BUILTIN_TOOLS.join(", ")));
                };
                tools.insert(*known);
            }
            tools
        }
    };

    let mut seen = BTreeSet::new();
    for name in &args.extra_tools {
        if name.is_empty() || name.len() > 128 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("--extra-tool {name:?}: a tool name must be 1 to 128 characters without spaces"));
        }
        if tools.contains(name.as_str()) {
            return Err(format!(
                "--extra-tool {name:?}: clashes with the built-in tool of that name (drop it with --tools)"
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(format!("--extra-tool {name:?} is given twice"));
        }
    }

    Ok(Plan { tools, extra_tools: args.extra_tools.clone() })
}

async fn run(args: Args, plan: Plan) -> anyhow::Result<()> {
    if let Some(secs) = args.exit_after_secs {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            tracing::warn!("exiting with status {EXIT_AFTER_STATUS} after {secs}s (--exit-after-secs)");
            let _ = std::io::stdout().flush();
            std::process::exit(EXIT_AFTER_STATUS);
        });
    }

    let journal = match &args.journal {
        None => None,
        Some(path) => {
            Some(journal::Journal::open(path).with_context(|| format!("cannot open the journal {}", path.display()))?)
        }
    };
    let server = ExampleServer::new(&plan.tools, &plan.extra_tools, journal);
    tracing::info!(
        tools = ?server.tool_names(),
        fail_initialize = args.fail_initialize,
        journal = ?args.journal,
        "starting"
    );

    match args.http {
        None => {
            if args.fail_initialize {
                refuse::serve_stdio().await
            } else {
                server::serve_stdio(server).await
            }
        }
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
            let local = listener.local_addr().context("cannot read the bound address")?;
            let app = if args.fail_initialize { refuse::router() } else { server::router(server) };
            report(&format!("listening on http://{local}/mcp"));
            tokio::select! {
                served = axum::serve(listener, app) => served.context("HTTP server failed"),
                () = shutdown_signal() => {
                    tracing::info!("shutting down on signal");
                    Ok(())
                }
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
}

/// Writes one line to stderr; never panics, even if stderr is closed.
fn report(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let args = Args::try_parse_from(std::iter::once("steward-example-mcp").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        validate(&args)
    }

    #[test]
    fn defaults_expose_every_builtin_tool() {
        let plan = plan(&[]).unwrap();
        assert_eq!(plan.tools.len(), BUILTIN_TOOLS.len());
        assert!(plan.extra_tools.is_empty());
    }

    #[test]
    fn tools_are_filtered_and_checked() {
        let filtered = plan(&["--tools", "echo, add"]).unwrap();
        assert_eq!(filtered.tools.into_iter().collect::<Vec<_>>(), ["add", "echo"]);
        assert!(plan_err(&["--tools", "echo,nope"]).contains("unknown tool \"nope\""));
        assert!(plan(&["--tools", ""]).unwrap().tools.is_empty());
    }

    #[test]
    fn extra_tools_are_checked() {
        assert!(plan_err(&["--extra-tool", ""]).contains("1 to 128 characters"));
        assert!(plan_err(&["--extra-tool", "a b"]).contains("without spaces"));
        assert!(plan_err(&["--extra-tool", "x", "--extra-tool", "x"]).contains("twice"));
        assert!(plan_err(&["--extra-tool", "time"]).contains("clashes"));
        assert!(plan(&["--tools", "echo", "--extra-tool", "time"]).is_ok());
    }

    #[test]
    fn http_must_be_loopback() {
        assert!(plan(&["--http", "127.0.0.1:0"]).is_ok());
        assert!(plan(&["--http", "[::1]:8080"]).is_ok());
        assert!(plan_err(&["--http", "10.1.2.3:80"]).contains("only loopback"));
        assert!(plan(&["--http", "localhost:80"]).is_err());
    }

    fn plan_err(args: &[&str]) -> String {
        match plan(args) {
            Ok(_) => panic!("{args:?} should be rejected"),
            Err(e) => e,
        }
    }
}
