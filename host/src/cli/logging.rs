//! The command line's log: a level per command, the format of `--log-format` or the config, and (for `run`) trace export.

use crate::config::{Config, LogFormat};
use crate::telemetry::{self, Settings, Telemetry, TelemetryError};

use super::{Cli, Command};

/// Starts the log for `cli`'s command: `info` for `run`, errors only for the others;
/// `STEWARD_LOG` or `RUST_LOG` (an `EnvFilter`) overrides. The format is `--log-format`, else the
/// config's `log.format` (for `run`), else text. `run` also exports traces when the config or
/// the `OTEL_EXPORTER_OTLP_*` variables name a collector.
pub(super) fn init(cli: &Cli) -> Result<Telemetry, TelemetryError> {
    let default = match cli.command {
        Command::Run => "info,rmcp=warn",
        // `crds --apply` reports the client's failures itself, once.
        Command::Crds { .. } => "error,kube_client=off",
        _ => "error",
    };
    // A config that does not load is reported by `run` itself, after the log is set up.
    let config = run_config(cli);
    let format = cli.log_format.or(config.as_ref().map(|c| c.log.format)).unwrap_or(LogFormat::Text);
    let traces = match cli.command {
        Command::Run => Some(config.map(|c| c.telemetry).unwrap_or_default()),
        _ => None,
    };
    telemetry::init(&Settings { format, default_filter: default.into(), traces })
}

/// The log's format for `cli`: `--log-format`, else the config's `log.format` (for `run`), else text.
pub(super) fn format(cli: &Cli) -> LogFormat {
    cli.log_format.or_else(|| run_config(cli).map(|c| c.log.format)).unwrap_or(LogFormat::Text)
}

/// The config `run` reads, when it loads.
fn run_config(cli: &Cli) -> Option<Config> {
    matches!(cli.command, Command::Run).then(|| Config::load(&cli.config).ok()).flatten()
}

/// Prints `message`, why the command failed, to stderr: a JSON line when the log is JSON (every
/// line of a JSON log is one JSON object, the last one included), else `error: MESSAGE`.
pub(super) fn fatal(format: LogFormat, message: &str) {
    match format {
        LogFormat::Json => eprintln!("{}", telemetry::json_line(tracing::Level::ERROR, "steward", message)),
        LogFormat::Text => eprintln!("error: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_log_format_flag_takes_text_or_json_anywhere_on_the_line() {
        let cli = Cli::try_parse_from(["steward", "run", "--log-format", "json"]).unwrap();
        assert_eq!(cli.log_format, Some(LogFormat::Json));
        let cli = Cli::try_parse_from(["steward", "--log-format", "text", "status"]).unwrap();
        assert_eq!(cli.log_format, Some(LogFormat::Text));
        assert_eq!(Cli::try_parse_from(["steward", "run"]).unwrap().log_format, None);
        let e = Cli::try_parse_from(["steward", "run", "--log-format", "xml"]).unwrap_err().to_string();
        assert!(e.contains("`xml` is not a log format; use text or json"), "{e}");
    }
}
