//! muster's `auth` of an MCPServer: its fields, its CRD rules, and what Steward makes of them.
//!
//! Steward connects to a remote server once, for the whole host, with the credentials in
//! `headers`. `forwardToken` and `tokenExchange` concern per-user sessions, which a
//! reconciler does not have: they are accepted and checked, and a condition says that
//! they have no effect here.

use std::borrow::Cow;

use schemars::{Schema, SchemaGenerator, json_schema};
use steward_sdk::FieldError;
use steward_sdk::prelude::*;

use crate::patterns::{https_url_matches, identifier_matches, issuer_matches};

fn default_scopes() -> String {
    "openid profile email groups".to_string()
}

fn default_client_id_key() -> String {
    "client-id".to_string()
}

fn default_client_secret_key() -> String {
    "client-secret".to_string()
}

/// How a remote server authenticates (muster's `spec.auth`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Auth {
    /// `none` (the default) or `oauth`: the server wants an OAuth 2.0 / OIDC token.
    #[serde(rename = "type", default)]
    pub type_: AuthType,
    /// muster forwards the signed-in user's ID token to the server. Per-user: no effect under Steward.
    #[serde(default)]
    pub forward_token: bool,
    /// Audiences the forwarded ID token must carry. Per-user: no effect under Steward.
    #[serde(default)]
    pub required_audiences: Vec<String>,
    /// RFC 8693 token exchange with the server's own identity provider. Per-user: no effect under Steward.
    pub token_exchange: Option<TokenExchange>,
    /// The OAuth authorization server, for servers that do not publish RFC 9728 metadata; `type: oauth` only.
    pub authorization_server: Option<AuthorizationServer>,
}

/// The kind of authentication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthType {
    /// No authentication.
    #[default]
    None,
    /// OAuth 2.0 / OIDC.
    Oauth,
}

// A plain `enum`, as a structural schema wants (the derive would make a `oneOf`).
impl JsonSchema for AuthType {
    fn schema_name() -> Cow<'static, str> {
        "AuthType".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "enum": ["oauth", "none"], "default": "none" })
    }
}

/// muster's `auth.tokenExchange`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenExchange {
    /// Whether the exchange is attempted.
    #[serde(default)]
    pub enabled: bool,
    /// The remote identity provider's token endpoint, an https:// URL.
    #[schemars(regex(pattern = r"^https://[^\s/$.?#].[^\s]*$"))]
    pub dex_token_endpoint: Option<String>,
    /// The issuer expected in the exchanged token, an https:// URL.
    #[schemars(regex(pattern = r"^https://[^\s/$.?#].[^\s]*$"))]
    pub expected_issuer: Option<String>,
    /// The connector on the remote identity provider that trusts the local one.
    #[schemars(regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_-]*$"))]
    pub connector_id: Option<String>,
    /// The scopes requested for the exchanged token.
    #[serde(default = "default_scopes")]
    #[schemars(extend("default" = "openid profile email groups"))]
    pub scopes: String,
    /// The Secret holding the client credentials used at the token endpoint.
    pub client_credentials_secret_ref: Option<ClientCredentialsSecretRef>,
}

/// A Secret holding a client id and secret (muster's `clientCredentialsSecretRef`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientCredentialsSecretRef {
    /// The Secret's name.
    pub name: String,
    /// Its namespace; the MCPServer's when none.
    pub namespace: Option<String>,
    /// The key holding the client id.
    #[serde(default = "default_client_id_key")]
    #[schemars(extend("default" = "client-id"))]
    pub client_id_key: String,
    /// The key holding the client secret.
    #[serde(default = "default_client_secret_key")]
    #[schemars(extend("default" = "client-secret"))]
    pub client_secret_key: String,
}

/// muster's `auth.authorizationServer`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthorizationServer {
    /// The issuer: an https:// URL without query, fragment or trailing slash.
    #[schemars(regex(pattern = r"^https://[^/?#]+(/[^?#]*[^/?#])?$"))]
    pub issuer: String,
    /// The scopes to ask for, space-separated.
    pub scopes: Option<String>,
}

impl Auth {
    /// Whether the spec asks for per-user behaviour Steward does not have.
    pub fn per_user_settings(&self) -> Vec<&'static str> {
        let mut used = Vec::new();
        if self.forward_token {
            used.push("forwardToken");
        }
        if !self.required_audiences.is_empty() {
            used.push("requiredAudiences");
        }
        if self.token_exchange.as_ref().is_some_and(|t| t.enabled) {
            used.push("tokenExchange");
        }
        used
    }
}

/// muster's rules of `spec.auth` on a server of transport `remote` or not: its CRD's patterns
/// and admission rules, and its Go check that a stdio server takes no authentication.
pub fn errors(auth: &Auth, remote: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let err = |errs: &mut Vec<FieldError>, path: &str, msg: String| errs.push(FieldError::new(path, msg));
    if !remote && auth.type_ != AuthType::None {
        err(
            &mut errs,
            "spec.auth.type",
            "authentication is only for remote servers (streamable-http or sse); a stdio server takes type none".into(),
        );
    }
    if let Some(server) = &auth.authorization_server {
        if auth.type_ != AuthType::Oauth {
            err(
                &mut errs,
                "spec.auth.authorizationServer",
                "authorizationServer is only valid when type is oauth".into(),
            );
        }
        if auth.forward_token {
            err(
                &mut errs,
                "spec.auth.authorizationServer",
                "forwardToken bypasses per-server OAuth; set forwardToken or authorizationServer, not both".into(),
            );
        }
        if auth.token_exchange.as_ref().is_some_and(|t| t.enabled) {
            err(
                &mut errs,
                "spec.auth.authorizationServer",
                "tokenExchange has its own issuer and endpoint; set tokenExchange or authorizationServer, not both"
                    .into(),
            );
        }
        if !issuer_matches(&server.issuer) {
            err(
                &mut errs,
                "spec.auth.authorizationServer.issuer",
                "must be an https:// URL with a host, without query, fragment or trailing '/'".into(),
            );
        }
    }
    if let Some(te) = &auth.token_exchange {
        for (field, value) in [("dexTokenEndpoint", &te.dex_token_endpoint), ("expectedIssuer", &te.expected_issuer)] {
            if value.as_deref().is_some_and(|v| !https_url_matches(v)) {
                err(&mut errs, &format!("spec.auth.tokenExchange.{field}"), "must be an https:// URL".into());
            }
        }
        if te.connector_id.as_deref().is_some_and(|c| !identifier_matches(c, true)) {
            err(
                &mut errs,
                "spec.auth.tokenExchange.connectorId",
                "must start with a letter and hold only letters, digits, '_' and '-'".into(),
            );
        }
        if let Some(creds) = &te.client_credentials_secret_ref {
            let p = "spec.auth.tokenExchange.clientCredentialsSecretRef";
            if creds.name.trim().is_empty() {
                err(&mut errs, &format!("{p}.name"), "the Secret's name must not be empty".into());
            }
            for (field, key) in [("clientIdKey", &creds.client_id_key), ("clientSecretKey", &creds.client_secret_key)] {
                if key.is_empty() {
                    err(&mut errs, &format!("{p}.{field}"), "must not be empty; leave it out for the default".into());
                }
            }
        }
    }
    errs
}

/// What muster accepts in `spec.auth` but does not work: an enabled token exchange without
/// the endpoint or connector it needs.
pub fn warnings(auth: &Auth) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(te) = auth.token_exchange.as_ref().filter(|t| t.enabled) {
        for (field, missing) in
            [("dexTokenEndpoint", te.dex_token_endpoint.is_none()), ("connectorId", te.connector_id.is_none())]
        {
            if missing {
                out.push(FieldError::new(
                    format!("spec.auth.tokenExchange.{field}"),
                    "an enabled token exchange needs it (muster refuses to exchange without it)",
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn auth(v: serde_json::Value) -> Auth {
        serde_json::from_value(v).unwrap()
    }

    fn paths(a: &Auth, remote: bool) -> Vec<String> {
        errors(a, remote).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn muster_admission_rules_of_authorization_server() {
        let ok = auth(json!({"type": "oauth", "authorizationServer": {"issuer": "https://auth.example.com"}}));
        assert!(paths(&ok, true).is_empty());
        let not_oauth = auth(json!({"authorizationServer": {"issuer": "https://auth.example.com"}}));
        assert_eq!(paths(&not_oauth, true), ["spec.auth.authorizationServer"]);
        let both = auth(json!({"type": "oauth", "forwardToken": true, "tokenExchange": {"enabled": true},
                              "authorizationServer": {"issuer": "https://a.example/x"}}));
        assert_eq!(paths(&both, true), ["spec.auth.authorizationServer", "spec.auth.authorizationServer"]);
        let disabled_exchange = auth(json!({"type": "oauth", "tokenExchange": {"enabled": false},
                                           "authorizationServer": {"issuer": "https://a.example/x"}}));
        assert!(paths(&disabled_exchange, true).is_empty());
        for bad in ["http://a.example", "https://a.example/", "https://a.example?x=1", "https://"] {
            let a = auth(json!({"type": "oauth", "authorizationServer": {"issuer": bad}}));
            assert_eq!(paths(&a, true), ["spec.auth.authorizationServer.issuer"], "{bad}");
        }
    }

    #[test]
    fn token_exchange_patterns_and_secret_ref() {
        let a = auth(json!({"tokenExchange": {"enabled": true, "dexTokenEndpoint": "http://dex/token",
                           "expectedIssuer": "https://dex.example.com", "connectorId": "1bad",
                           "clientCredentialsSecretRef": {"name": "", "clientIdKey": ""}}}));
        assert_eq!(
            paths(&a, true),
            [
                "spec.auth.tokenExchange.dexTokenEndpoint",
                "spec.auth.tokenExchange.connectorId",
                "spec.auth.tokenExchange.clientCredentialsSecretRef.name",
                "spec.auth.tokenExchange.clientCredentialsSecretRef.clientIdKey"
            ]
        );
        let missing = warnings(&auth(json!({"tokenExchange": {"enabled": true}})));
        assert_eq!(missing.len(), 2);
        assert_eq!(auth(json!({"forwardToken": true, "requiredAudiences": ["k8s"]})).per_user_settings().len(), 2);
    }

    #[test]
    fn stdio_servers_take_no_authentication() {
        assert_eq!(paths(&auth(json!({"type": "oauth"})), false), ["spec.auth.type"]);
        assert!(paths(&auth(json!({"type": "none"})), false).is_empty());
    }
}
