//! muster's CRD patterns, matched by hand (a plugin carries no regex engine).

/// Whitespace as RE2's `\s` sees it.
fn is_re2_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// muster's URL pattern `^https?://[^\s/$.?#].[^\s]*$` (https only when `https_only`).
fn url_pattern_matches(s: &str, https_only: bool) -> bool {
    let rest = match (s.strip_prefix("https://"), s.strip_prefix("http://")) {
        (Some(rest), _) => rest,
        (None, Some(rest)) if !https_only => rest,
        _ => return false,
    };
    let mut chars = rest.chars();
    let first_ok = chars.next().is_some_and(|c| !is_re2_space(c) && !matches!(c, '/' | '$' | '.' | '?' | '#'));
    let second_ok = chars.next().is_some_and(|c| c != '\n');
    first_ok && second_ok && !chars.any(is_re2_space)
}

/// muster's `url` pattern: `^https?://[^\s/$.?#].[^\s]*$`.
pub fn http_url_matches(s: &str) -> bool {
    url_pattern_matches(s, false)
}

/// muster's pattern of token-exchange URLs: `^https://[^\s/$.?#].[^\s]*$`.
pub fn https_url_matches(s: &str) -> bool {
    url_pattern_matches(s, true)
}

/// muster's issuer pattern `^https://[^/?#]+(/[^?#]*[^/?#])?$`: a host, then optionally a path
/// that does not end with `/`; never a query or fragment.
pub fn issuer_matches(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("https://") else {
        return false;
    };
    let (host, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if host.is_empty() || host.contains(['?', '#']) || host.contains('\n') {
        return false;
    }
    path.is_empty() || (path.len() > 1 && !path.contains(['?', '#', '\n']) && !path.ends_with('/'))
}

/// `^[a-zA-Z][a-zA-Z0-9_-]*$` (with `dash`) or `^[a-zA-Z][a-zA-Z0-9_]*$`.
pub fn identifier_matches(s: &str, dash: bool) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (dash && c == '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_pattern_is_musters() {
        for ok in ["http://a.b", "https://mcp-server:8080/mcp", "http://localhost:8080/mcp", "http://ab", "https://x:y"]
        {
            assert!(http_url_matches(ok), "{ok}");
        }
        for bad in
            ["http://a", "ftp://x.y", "https://", "http://.x", "http://xy z", "http://.x", "example.com", "http://?q"]
        {
            assert!(!http_url_matches(bad), "{bad}");
        }
        assert!(https_url_matches("https://dex.example.com/token"));
        assert!(!https_url_matches("http://dex.example.com/token"));
    }

    #[test]
    fn issuer_pattern_is_musters() {
        for ok in ["https://a", "https://auth.example.com", "https://a.example/realms/x"] {
            assert!(issuer_matches(ok), "{ok}");
        }
        for bad in ["https://", "https://a/", "https://a?x", "https://a/b#c", "http://a", "https://a/b/"] {
            assert!(!issuer_matches(bad), "{bad}");
        }
    }

    #[test]
    fn identifiers() {
        assert!(identifier_matches("git-tools_2", true));
        assert!(!identifier_matches("git-tools", false));
        assert!(!identifier_matches("1git", true));
        assert!(!identifier_matches("", true));
    }
}
