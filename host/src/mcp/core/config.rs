//! `core_config_get` and `core_config_get_aggregator`: the host config as it was loaded, without secrets (no token, key, certificate or plugin setting values; only whether they are set).

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use super::{CoreTool, ok};
use crate::config::mcp::{AllowDestructive, Management, ToolsMode};
use crate::config::{Config, McpSettings};
use crate::engine::Engine;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    Some(match tool {
        CoreTool::ConfigGet => {
            "Gets the host's configuration as it was loaded: mode, directories, API and /mcp settings, \
             queue, resync, field validation, Kubernetes settings and plugin names. Secrets are never \
             included: for a token, key or certificate only whether it is set."
        }
        CoreTool::ConfigGetAggregator => {
            "Gets the /mcp endpoint's settings (api.mcp): tools mode, prefix, destructive-tool guard, \
             management mode, authorization servers."
        }
        _ => return None,
    })
}

/// Runs `core_config_get` or `core_config_get_aggregator`.
pub(super) fn call(engine: &Engine, tool: CoreTool) -> CallToolResult {
    let cfg = engine.config();
    match tool {
        CoreTool::ConfigGetAggregator => ok(json!({"aggregator": aggregator(&cfg.api.mcp)})),
        _ => ok(config(cfg)),
    }
}

fn secs(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The `/mcp` settings, in the config's own words.
pub(super) fn aggregator(m: &McpSettings) -> Value {
    let tools = match m.tools {
        ToolsMode::Meta => "meta",
        ToolsMode::Direct => "direct",
        ToolsMode::Both => "both",
    };
    let allow = match &m.allow_destructive {
        AllowDestructive::None => json!(false),
        AllowDestructive::All => json!(true),
        AllowDestructive::Servers(s) => json!(s),
    };
    let management = match m.management {
        Management::ReadOnly => "read-only",
        Management::ReadWrite => "read-write",
    };
    json!({
        "tools": tools,
        "prefix": m.prefix,
        "allowDestructive": allow,
        "management": management,
        "authorizationServers": m.authorization_servers,
    })
}

/// The whole config, secrets left out.
pub(super) fn config(c: &Config) -> Value {
    let k = &c.kubernetes;
    json!({
        "file": c.file,
        "mode": c.mode,
        "resources": c.resources,
        "pluginDir": c.plugin_dir,
        "plugins": c.plugins.keys().collect::<Vec<_>>(),
        "pluginSources": c.plugin_sources.iter().map(|s| json!({
            "reference": s.reference,
            "poll": secs(s.poll),
            "plainHttp": s.plain_http,
            "insecure": s.insecure,
            "credentialsSet": s.token_file.is_some() || s.docker_config.is_some(),
            "keySet": s.key.is_some(),
        })).collect::<Vec<_>>(),
        "state": c.state,
        "cacheDir": c.cache_dir,
        "cacheLimit": c.cache_limit,
        "api": {
            "listen": c.api.listen.to_string(),
            "tokenSet": c.api.token_file.is_some(),
            "mcpMaxSessions": c.api.mcp_max_sessions,
            "mcp": aggregator(&c.api.mcp),
        },
        "queue": {
            "workers": c.queue.workers,
            "maxRetries": c.queue.max_retries,
            "initialBackoff": secs(c.queue.initial_backoff),
            "maxBackoff": secs(c.queue.max_backoff),
            "debounce": secs(c.queue.debounce),
            "debounceMax": secs(c.queue.debounce_max),
        },
        "resync": secs(c.resync),
        "fieldValidation": c.field_validation,
        "kubernetes": {
            "namespaces": k.namespaces,
            "labelSelector": k.label_selector,
            "leaderElection": {
                "enabled": k.leader_election.enabled,
                "leaseName": k.leader_election.lease_name,
                "leaseDuration": secs(k.leader_election.lease_duration),
            },
            "statusRetries": k.status_retries,
            "webhook": {
                "enabled": k.webhook.enabled,
                "listen": k.webhook.listen.to_string(),
                "failurePolicy": k.webhook.failure_policy,
                "timeoutSeconds": k.webhook.timeout_seconds,
            },
        },
        "telemetry": {"exportSet": c.telemetry.endpoint.is_some(), "serviceName": c.telemetry.service_name},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_shows_no_secret_and_the_mcp_settings_in_their_own_words() {
        let mut c = Config::defaults(std::path::Path::new("/tmp"));
        c.api.token_file = Some("/secret/token".into());
        c.api.mcp.management = Management::ReadWrite;
        let v = config(&c);
        let text = v.to_string();
        assert!(!text.contains("/secret/token"), "{text}");
        assert_eq!(v["api"]["tokenSet"], true);
        assert_eq!(v["api"]["mcp"]["management"], "read-write");
        assert_eq!(v["api"]["mcp"]["allowDestructive"], false);
    }
}
