//! A small hand-written check that a string is an absolute http(s) URL with a host.

/// Why `url` is not an absolute `http://` or `https://` URL with a non-empty host, or `None`.
///
/// The message never repeats the URL, which may carry credentials.
pub fn http_url_problem(url: &str) -> Option<String> {
    if url.is_empty() {
        return Some("must not be empty".to_string());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("must not contain whitespace or control characters".to_string());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some("must start with http:// or https://".to_string());
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Some(format!("the scheme must be http or https, not {scheme:?}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        let Some((host, after)) = bracketed.split_once(']') else {
            return Some("has an unclosed '[' in its host".to_string());
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Some("has text after the ']' of its host".to_string()),
            },
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Some("has no host".to_string());
    }
    if let Some(port) = port.filter(|p| !p.is_empty())
        && (!port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err())
    {
        return Some("has a port that is not a number from 0 to 65535".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_endpoints() {
        for ok in [
            "http://localhost:8080/mcp",
            "https://api.example.com/mcp",
            "HTTPS://example.com",
            "https://user:secret@example.com/sse?x=1",
            "http://[::1]:9000/mcp",
            "http://127.0.0.1",
        ] {
            assert_eq!(http_url_problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn rejects_other_schemes_and_missing_hosts() {
        let cases = [
            ("", "empty"),
            ("example.com/mcp", "http:// or https://"),
            ("ftp://example.com", "scheme"),
            ("https://", "no host"),
            ("https:///mcp", "no host"),
            ("https://user@/mcp", "no host"),
            ("http://:8080", "no host"),
            ("http://example.com:http", "port"),
            ("http://example.com:70000", "port"),
            ("http://example.com:99999999999", "port"),
            ("http://[::1", "unclosed"),
            ("http://exa mple.com", "whitespace"),
        ];
        for (bad, why) in cases {
            let msg = http_url_problem(bad).unwrap_or_else(|| panic!("{bad:?} should be rejected"));
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
    }

    #[test]
    fn message_does_not_leak_credentials() {
        let msg = http_url_problem("ftp://user:hunter2@example.com").unwrap();
        assert!(!msg.contains("hunter2"), "{msg}");
    }
}
