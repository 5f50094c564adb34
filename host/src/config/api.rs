//! The `api` section: the HTTP API's address, token, connection limits and `/mcp` session limit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::McpSettings;
use super::values::{Count, ListenAddr};
use crate::plugin::HumanDuration;

/// The HTTP API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// File holding the bearer token; required when `listen` is not a loopback address.
    pub token_file: Option<PathBuf>,
    /// Its connection limits (`api.max_connections`, `api.header_read_timeout`).
    pub limits: ServerLimits,
    /// Most MCP sessions open at once at `/mcp` (`api.mcp_max_sessions`).
    pub mcp_max_sessions: usize,
    /// The rest of `/mcp`'s settings (`api.mcp`).
    pub mcp: McpSettings,
}

/// The limits of one of the host's HTTP listeners (the API, the admission webhook).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most connections open at once; past it, new ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers, and then its body (a body that
    /// has not arrived by then is answered 408); also how long an idle keep-alive connection
    /// stays open.
    pub header_read_timeout: Duration,
}

/// The API's default [`ServerLimits::max_connections`].
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 512;
/// The default [`ServerLimits::header_read_timeout`] of both listeners.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`ApiConfig::mcp_max_sessions`].
pub const DEFAULT_MCP_MAX_SESSIONS: usize = 256;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    listen: Option<ListenAddr>,
    token_file: Option<PathBuf>,
    max_connections: Option<Count>,
    header_read_timeout: Option<HumanDuration>,
    mcp_max_sessions: Option<Count>,
    #[serde(default)]
    mcp: super::mcp::RawMcp,
}

/// The `api` section, with relative paths resolved against `base`; the error names the setting.
pub(super) fn api_config(raw: RawApi, base: &Path) -> Result<ApiConfig, String> {
    let listen = raw.listen.map_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878)), |l| l.0);
    let token_file = raw.token_file.map(|p| if p.is_absolute() { p } else { base.join(p) });
    if !listen.ip().is_loopback() && token_file.is_none() {
        return Err(format!(
            "api.listen {listen} is not a loopback address, so the API needs a bearer token: set api.token_file to a file that holds it"
        ));
    }
    Ok(ApiConfig {
        listen,
        token_file,
        limits: ServerLimits {
            max_connections: raw.max_connections.map_or(DEFAULT_API_MAX_CONNECTIONS, |n| n.0),
            header_read_timeout: raw.header_read_timeout.map_or(DEFAULT_HEADER_READ_TIMEOUT, |t| t.0),
        },
        mcp_max_sessions: raw.mcp_max_sessions.map_or(DEFAULT_MCP_MAX_SESSIONS, |n| n.0),
        mcp: raw.mcp.resolve(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::test_support::{err, parse};

    #[test]
    fn the_http_servers_limits_have_defaults_and_bad_values_name_their_line() {
        let c = parse("").unwrap();
        let defaults = ServerLimits { max_connections: 512, header_read_timeout: Duration::from_secs(30) };
        assert_eq!((c.api.limits, c.api.mcp_max_sessions), (defaults, 256));
        assert_eq!(c.kubernetes.webhook.limits, ServerLimits { max_connections: 256, ..defaults });
        let c = parse(
            "api:\n  max_connections: 64\n  header_read_timeout: 5s\n  mcp_max_sessions: 8\nkubernetes:\n  webhook: { maxConnections: 32, headerReadTimeout: 2s }\n",
        )
        .unwrap();
        assert_eq!(c.api.limits, ServerLimits { max_connections: 64, header_read_timeout: Duration::from_secs(5) });
        assert_eq!(c.api.mcp_max_sessions, 8);
        assert_eq!(
            c.kubernetes.webhook.limits,
            ServerLimits { max_connections: 32, header_read_timeout: Duration::from_secs(2) }
        );
        let e = err("api:\n  mcp:\n    prefix: 1x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("start with a letter"), "{e}");
        assert_eq!(c.api.mcp, McpSettings::default());
        let e = err("api:\n  mcp_max_sessions: 0\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("0 is out of range; use 1 to 65536"), "{e}");
        let e = err("api:\n  listen: 127.0.0.1:7878\n  header_read_timeout: 0s\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("`0s` must be longer than zero"), "{e}");
        let e = err("kubernetes:\n  webhook:\n    maxConnections: 100000\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("out of range"), "{e}");
        let e = err("kubernetes:\n  webhook:\n    headerReadTimeout: soon\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("`soon` is not a duration"), "{e}");
    }

    #[test]
    fn a_public_listen_address_needs_a_token_file() {
        let e = err("api: { listen: 0.0.0.0:7878 }\n");
        assert!(e.contains("api.token_file"), "{e}");
        let c = parse("api: { listen: 0.0.0.0:7878, token_file: token }\n").unwrap();
        assert_eq!(c.api.token_file.as_deref(), Some(Path::new("/srv/steward/token")));
    }
}
