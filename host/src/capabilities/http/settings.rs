//! What `plugins.<name>.http` says: the allow-list of rules, the headers the host injects from secrets, and the limits.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::plugin::HumanSize;

/// The response body cap when the config names none: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: u64 = 1024 * 1024;
/// Requests of one plugin under way at once when the config names no limit.
pub const DEFAULT_CONCURRENCY: u32 = 4;

/// The parsed `http` section of one plugin. Clones share one concurrency limiter, so every
/// instance of the plugin draws on the same permits; equality ignores the limiter.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "RawHttp")]
pub struct HttpSettings {
    /// The allow-list: a request is made only when one rule allows it (the first that does
    /// decides which headers are injected).
    pub rules: Vec<Rule>,
    /// Most bytes of one response body the plugin may read.
    pub max_response_body: u64,
    /// Most requests of the plugin under way at once (over all its objects and instances).
    pub concurrency: u32,
    limiter: Arc<tokio::sync::Semaphore>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self::new(Vec::new(), DEFAULT_MAX_RESPONSE_BODY, DEFAULT_CONCURRENCY)
    }
}

impl PartialEq for HttpSettings {
    fn eq(&self, other: &Self) -> bool {
        self.rules == other.rules
            && self.max_response_body == other.max_response_body
            && self.concurrency == other.concurrency
    }
}

impl Eq for HttpSettings {}

impl HttpSettings {
    /// Settings with these rules and limits, and a limiter of `concurrency` permits.
    pub fn new(rules: Vec<Rule>, max_response_body: u64, concurrency: u32) -> Self {
        let permits = usize::try_from(concurrency).unwrap_or(usize::MAX);
        Self { rules, max_response_body, concurrency, limiter: Arc::new(tokio::sync::Semaphore::new(permits)) }
    }

    /// The limiter every request of the plugin takes a permit of.
    pub(super) fn limiter(&self) -> Arc<tokio::sync::Semaphore> {
        self.limiter.clone()
    }
}

/// One rule of the allow-list: a request is allowed when every field matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Host names or IP addresses, or patterns: `*.example.com` matches any name under
    /// `example.com` (not `example.com` itself), `*` any host. Compared without case.
    pub hosts: Vec<String>,
    /// `http` or `https`; `[https]` when left out.
    #[serde(default = "default_schemes")]
    pub schemes: Vec<String>,
    /// Ports; when left out, the default port of the request's scheme (80, 443) only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Methods (`GET`, `PUT`, …); every method when left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Headers the host sets on every request this rule allows, from secrets the plugin never
    /// sees; a header of the same name the plugin set is replaced.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, SecretHeader>,
}

fn default_schemes() -> Vec<String> {
    vec!["https".into()]
}

/// Where the host reads an injected header's value, each time it sends a request (a rotated
/// secret is picked up at once). Exactly one of `file` and `env`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretHeader {
    /// An absolute path to a file holding the value (trailing newlines are dropped); in a
    /// cluster, mount the Secret into the host's pod and name the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// An environment variable of the host process holding the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Text put before the value (`"Bearer "`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// The section as written; [`HttpSettings`] is made from it with every value checked.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    max_response_body: Option<HumanSize>,
    #[serde(default)]
    concurrency: Option<u32>,
}

/// Shown as written (`max_response_body` as a human size); the limiter is not shown.
impl Serialize for HttpSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            rules: &'a [Rule],
            max_response_body: String,
            concurrency: u32,
        }
        let max_response_body = bytesize::ByteSize::b(self.max_response_body).to_string();
        Shown { rules: &self.rules, max_response_body, concurrency: self.concurrency }.serialize(s)
    }
}

impl TryFrom<RawHttp> for HttpSettings {
    type Error = String;

    fn try_from(raw: RawHttp) -> Result<Self, String> {
        for (i, rule) in raw.rules.iter().enumerate() {
            check_rule(rule).map_err(|e| format!("rules[{i}].{e}"))?;
        }
        let concurrency = raw.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if concurrency == 0 {
            return Err("concurrency: must be at least 1".into());
        }
        let cap = raw.max_response_body.map_or(DEFAULT_MAX_RESPONSE_BODY, |s| s.0);
        Ok(Self::new(raw.rules, cap, concurrency))
    }
}

/// Checks one rule; the error starts with the field it concerns.
fn check_rule(rule: &Rule) -> Result<(), String> {
    if rule.hosts.is_empty() {
        return Err(
            "hosts: a rule needs at least one host, for example [api.example.com] or [\"*.example.com\"]".into()
        );
    }
    for (i, h) in rule.hosts.iter().enumerate() {
        let bare = h.strip_prefix("*.").unwrap_or(h);
        let ok = h == "*"
            || (!bare.is_empty()
                && !bare.contains('*')
                && bare.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']')));
        if !ok {
            return Err(format!(
                "hosts[{i}]: `{h}` is not a host name, an IP address, `*.domain` or `*` (no scheme, port or path)"
            ));
        }
    }
    if rule.schemes.is_empty() {
        return Err("schemes: list http, https or both (or leave the key out for https only)".into());
    }
    for (i, s) in rule.schemes.iter().enumerate() {
        if s != "http" && s != "https" {
            return Err(format!("schemes[{i}]: `{s}` is not http or https"));
        }
    }
    if let Some(i) = rule.ports.iter().position(|p| *p == 0) {
        return Err(format!("ports[{i}]: 0 is not a port"));
    }
    for (i, m) in rule.methods.iter().enumerate() {
        if m.is_empty() || !m.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(format!("methods[{i}]: `{m}` is not a method in capitals (GET, PUT, POST, DELETE, …)"));
        }
    }
    for (name, h) in &rule.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("headers.{name}: not a valid header name"));
        }
        match (&h.file, &h.env) {
            (Some(f), None) if std::path::Path::new(f).is_absolute() => {}
            (Some(f), None) => return Err(format!("headers.{name}.file: `{f}` must be an absolute path")),
            (None, Some(e)) if !e.is_empty() && !e.contains(['=', '\0']) => {}
            (None, Some(e)) => return Err(format!("headers.{name}.env: `{e}` is not an environment variable name")),
            _ => return Err(format!("headers.{name}: name exactly one of `file` (an absolute path) and `env`")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section as the host config holds it: under a key, indented.
    fn parse(yaml: &str) -> Result<HttpSettings, crate::yaml::YamlError> {
        #[derive(Deserialize)]
        struct Plugin {
            http: HttpSettings,
        }
        let nested: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
        crate::yaml::from_str::<Plugin>(&format!("http:\n{nested}")).map(|p| p.http)
    }

    #[test]
    fn defaults_are_https_one_mib_and_four_at_once() {
        let s = parse("rules: [{hosts: [api.example.com]}]\n").unwrap();
        assert_eq!(s.rules[0].schemes, ["https"]);
        assert!(s.rules[0].ports.is_empty() && s.rules[0].methods.is_empty());
        assert_eq!((s.max_response_body, s.concurrency), (DEFAULT_MAX_RESPONSE_BODY, DEFAULT_CONCURRENCY));
        let s = parse("rules: []\nmax_response_body: 64KiB\nconcurrency: 2\n").unwrap();
        assert_eq!((s.max_response_body, s.concurrency), (64 * 1024, 2));
    }

    #[test]
    fn bad_values_name_the_field_and_point_at_their_line() {
        let cases = [
            ("rules:\n  - hosts: [\"https://x.example\"]\n", "rules[0].hosts[0]"),
            ("rules:\n  - hosts: [x]\n    schemes: [ftp]\n", "rules[0].schemes[0]"),
            ("rules:\n  - hosts: [x]\n    methods: [get]\n", "rules[0].methods[0]"),
            ("rules:\n  - hosts: [x]\n    ports: [0]\n", "rules[0].ports[0]"),
            ("rules:\n  - hosts: []\n", "rules[0].hosts"),
            ("rules:\n  - hosts: [x]\n    headers: {A: {file: rel}}\n", "must be an absolute path"),
            ("rules:\n  - hosts: [x]\n    headers: {A: {}}\n", "exactly one of"),
            ("rules:\n  - hosts: [x]\n    hots: [y]\n", "hots"),
            ("concurrency: 0\n", "concurrency"),
        ];
        for (yaml, want) in cases {
            let e = parse(yaml).unwrap_err();
            assert!(e.message.contains(want), "{yaml}: {e:?}");
            assert!(e.line.is_some(), "{yaml}: {e:?}");
        }
    }

    #[test]
    fn clones_share_the_limiter_and_equality_ignores_it() {
        let a = parse("rules: [{hosts: [x]}]\nconcurrency: 1\n").unwrap();
        let b = a.clone();
        let _permit = a.limiter().try_acquire_owned().unwrap();
        assert!(b.limiter().try_acquire_owned().is_err(), "one plugin, one set of permits");
        assert_eq!(a, parse("rules: [{hosts: [x]}]\nconcurrency: 1\n").unwrap());
    }
}
