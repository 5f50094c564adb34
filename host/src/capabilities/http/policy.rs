//! The allow-list check: which rule allows a request, or why none does, in words that name the config key.

use super::settings::{HttpSettings, Rule};

/// What the check looks at of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// `GET`, `PUT`, ….
    pub method: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The host as the URL names it, lower case, without brackets for IPv6.
    pub host: &'a str,
    /// The port, the scheme's default when the URL names none.
    pub port: u16,
}

/// The index of the first rule of `settings` that allows `target`; else the refusal, naming
/// for each rule the first field that did not match and the config key to change.
pub fn check(plugin: &str, settings: &HttpSettings, target: &Target<'_>) -> Result<usize, String> {
    let key = format!("plugins.{plugin}.http.rules");
    let mut why = Vec::new();
    for (i, rule) in settings.rules.iter().enumerate() {
        match mismatch(rule, target) {
            None => return Ok(i),
            Some(field) => why.push(format!("rules[{i}].{field}")),
        }
    }
    let Target { method, scheme, host, port } = target;
    let what = format!("{method} {scheme}://{host}:{port}");
    if why.is_empty() {
        return Err(format!("{what} refused: {key} is empty, so no request is allowed; add a rule that allows it"));
    }
    Err(format!("{what} refused: no rule of {key} allows it ({}); add it to that rule or add a rule", why.join("; ")))
}

/// The first field of `rule` that `target` does not match, with what it holds.
fn mismatch(rule: &Rule, t: &Target<'_>) -> Option<String> {
    if !rule.schemes.iter().any(|s| s == t.scheme) {
        return Some(format!("schemes {:?} has not `{}`", rule.schemes, t.scheme));
    }
    if !rule.hosts.iter().any(|h| host_matches(h, t.host)) {
        return Some(format!("hosts {:?} does not match `{}`", rule.hosts, t.host));
    }
    let port_ok = if rule.ports.is_empty() { t.port == default_port(t.scheme) } else { rule.ports.contains(&t.port) };
    if !port_ok {
        let ports = if rule.ports.is_empty() {
            format!("ports (left out: the scheme's default {} only)", default_port(t.scheme))
        } else {
            format!("ports {:?}", rule.ports)
        };
        return Some(format!("{ports} has not {}", t.port));
    }
    if !rule.methods.is_empty() && !rule.methods.iter().any(|m| m == t.method) {
        return Some(format!("methods {:?} has not {}", rule.methods, t.method));
    }
    None
}

/// The port a URL of `scheme` means when it names none.
pub fn default_port(scheme: &str) -> u16 {
    if scheme == "http" { 80 } else { 443 }
}

/// Whether host pattern `pattern` (`name`, `*.domain`, `*`) matches `host`, without case.
fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim_start_matches('[').trim_end_matches(']');
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(domain) => {
            host.len() > domain.len() + 1
                && host.to_ascii_lowercase().ends_with(&format!(".{}", domain.to_ascii_lowercase()))
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> HttpSettings {
        crate::yaml::from_str(yaml).unwrap()
    }

    fn target<'a>(method: &'a str, scheme: &'a str, host: &'a str, port: u16) -> Target<'a> {
        Target { method, scheme, host, port }
    }

    #[test]
    fn a_rule_allows_what_every_field_matches() {
        let s = settings(
            "rules:\n  - hosts: [\"*.example.com\", 127.0.0.1]\n    schemes: [http, https]\n    ports: [443, 2379]\n    methods: [GET, POST]\n  - hosts: [api.other.org]\n",
        );
        let table = [
            (target("GET", "https", "a.example.com", 443), Ok(0)),
            (target("POST", "http", "127.0.0.1", 2379), Ok(0)),
            (target("GET", "https", "A.B.Example.COM", 443), Ok(0)),
            (target("DELETE", "https", "api.other.org", 443), Ok(1)),
        ];
        for (t, want) in table {
            assert_eq!(check("p", &s, &t), want, "{t:?}");
        }
    }

    #[test]
    fn a_refusal_names_each_rule_s_first_mismatch_and_the_key() {
        let s = settings(
            "rules:\n  - hosts: [\"*.example.com\"]\n    methods: [GET]\n  - hosts: [api.other.org]\n    schemes: [http]\n    ports: [8080]\n",
        );
        let cases = [
            (
                target("GET", "https", "example.com", 443),
                "rules[0].hosts [\"*.example.com\"] does not match `example.com`",
            ),
            (target("PUT", "https", "x.example.com", 443), "rules[0].methods [\"GET\"] has not PUT"),
            (target("GET", "https", "x.example.com", 8443), "the scheme's default 443 only) has not 8443"),
            (target("GET", "https", "api.other.org", 443), "rules[1].schemes [\"http\"] has not `https`"),
            (target("GET", "http", "api.other.org", 80), "rules[1].ports [8080] has not 80"),
        ];
        for (t, want) in cases {
            let e = check("etcd", &s, &t).unwrap_err();
            assert!(e.contains(want) && e.contains("plugins.etcd.http.rules"), "{t:?}: {e}");
        }
        let e = check("p", &settings("rules: []\n"), &target("GET", "https", "x", 443)).unwrap_err();
        assert!(e.contains("plugins.p.http.rules is empty"), "{e}");
    }

    #[test]
    fn host_patterns() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        assert!(host_matches("*", "anything"));
        assert!(host_matches("[::1]", "::1"));
        assert!(host_matches("API.example.com", "api.EXAMPLE.com"));
    }
}
