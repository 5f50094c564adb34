//! The command line's log: a level per command, to stderr, with credentials removed.

use crate::sanitize::redact_credentials;

use super::Command;

/// Starts the log for `command`: `info` for `run`, errors only for the others; `STEWARD_LOG`
/// (an `EnvFilter`) overrides. Does nothing if a subscriber is already set.
pub(super) fn init(command: &Command) {
    let default = match command {
        Command::Run => "info,rmcp=warn",
        // `crds --apply` reports the client's failures itself, once.
        Command::Crds { .. } => "error,kube_client=off",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(RedactedStderr)
        .try_init();
}

/// The log's writer: each event goes to stderr with credentials removed (a library's error may
/// quote a URL with a token in it). One buffer per event, written at once.
struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine(Vec::new())
    }
}

/// One log event being written.
struct RedactedLine(Vec<u8>);

impl std::io::Write for RedactedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), redact_credentials(&text).as_bytes());
    }
}
