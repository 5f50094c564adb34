//! Kubernetes object-name rules (DNS-1123 subdomains), checked by hand.

/// The longest DNS-1123 subdomain.
pub const MAX_NAME_LEN: usize = 253;

/// Why `name` is not a DNS-1123 subdomain, or `None` when it is one.
///
/// A subdomain is one or more labels joined by `.`; each label is lowercase
/// alphanumerics and `-`, starting and ending with an alphanumeric. Every
/// DNS-1123 label is also a subdomain.
pub fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    const RULE: &str = "must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit";
    if name.is_empty() {
        return Some("must not be empty".to_string());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!("must be at most {MAX_NAME_LEN} characters, not {}", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.')) {
        return Some(format!("{RULE}; {c:?} is not allowed"));
    }
    for label in name.split('.') {
        let ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        if !ok(label.chars().next()) || !ok(label.chars().last()) {
            return Some(format!("{RULE} (in each '.'-separated part)"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_labels_and_subdomains() {
        for ok in ["git", "git-tools", "a", "0", "tools.example.com", "a1-b2.c3"] {
            assert_eq!(dns1123_subdomain_problem(ok), None, "{ok}");
        }
        assert_eq!(dns1123_subdomain_problem(&"a".repeat(253)), None);
    }

    #[test]
    fn rejects_bad_names_with_a_reason() {
        for bad in ["", "Git", "git_tools", "-git", "git-", "a..b", ".a", "a.", "a b", "gït"] {
            assert!(dns1123_subdomain_problem(bad).is_some(), "{bad:?} should be rejected");
        }
        let long = dns1123_subdomain_problem(&"a".repeat(254)).unwrap();
        assert!(long.contains("at most 253"), "{long}");
        let upper = dns1123_subdomain_problem("Git").unwrap();
        assert!(upper.contains("'G'"), "{upper}");
    }
}
