//! Makes error text safe to store and show: no absolute host paths, no credentials in URLs or headers.

/// Rewrites `text` so it carries no absolute filesystem paths (replaced by their last
/// component), no `user:password@` in URLs, and no values of `Authorization`,
/// `token`, `password` or `secret` settings. Also caps it at 2 KiB.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&clean_word(word));
    }
    let out = redact_secrets(&out);
    if out.len() > 2048 {
        let mut end = 2048;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &out[..end])
    } else {
        out
    }
}

fn clean_word(word: &str) -> String {
    // Credentials in URLs: scheme://user:pass@host → scheme://***@host
    if let Some(scheme_end) = word.find("://") {
        let rest = &word[scheme_end + 3..];
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            return format!("{}://***@{}", &word[..scheme_end], &rest[at + 1..]);
        }
        return word.to_string();
    }
    // Absolute paths, possibly quoted or followed by punctuation: keep the last component.
    let start = word.find('/');
    match start {
        Some(s) if is_path_start(word, s) => {
            let (prefix, path) = word.split_at(s);
            let trail_at = path.find(['\'', '"', ')', ',', ';', '`']).unwrap_or(path.len());
            let (p, trail) = path.split_at(trail_at);
            let (p, colon_tail) = match p.find(':') {
                Some(c) => p.split_at(c),
                None => (p, ""),
            };
            let last = p.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
            format!("{prefix}{last}{colon_tail}{trail}")
        }
        _ => word.to_string(),
    }
}

fn is_path_start(word: &str, slash: usize) -> bool {
    let before = &word[..slash];
    let after = &word[slash + 1..];
    before.chars().all(|c| matches!(c, '\'' | '"' | '(' | '`' | '='))
        && after.contains('/')
        && after.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
}

fn redact_secrets(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let markers = ["bearer ", "basic ", "token=", "password=", "secret=", "token: ", "password: ", "secret: "];
    while i < text.len() {
        let hit = markers.iter().find(|m| lower[i..].starts_with(**m));
        match hit {
            Some(m) => {
                out.push_str(&text[i..i + m.len()]);
                i += m.len();
                let end = text[i..]
                    .find(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '"')
                    .map_or(text.len(), |e| i + e);
                if end > i {
                    out.push_str("***");
                }
                i = end;
            }
            None => {
                let ch = text[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn absolute_paths_keep_only_their_file_name() {
        assert_eq!(sanitize("cannot open /home/alice/secret/plan.yaml: denied"), "cannot open plan.yaml: denied");
        assert_eq!(sanitize("file '/srv/x/a.wasm' failed"), "file 'a.wasm' failed");
        assert_eq!(sanitize("exec: /usr/bin/mcp-git:3 exited"), "exec: mcp-git:3 exited");
        assert_eq!(sanitize("a/b relative stays"), "a/b relative stays");
    }

    #[test]
    fn credentials_are_removed() {
        assert_eq!(
            sanitize("GET https://bob:hunter2@example.com/mcp failed"),
            "GET https://***@example.com/mcp failed"
        );
        assert_eq!(
            sanitize("header Authorization: Bearer abc.def rejected"),
            "header Authorization: Bearer *** rejected"
        );
        assert_eq!(sanitize("url?token=abc123&x=1 bad"), "url?token=*** bad");
        assert!(!sanitize("password=pa55, user=x").contains("pa55"));
    }

    #[test]
    fn long_text_is_capped() {
        assert!(sanitize(&"x".repeat(10_000)).len() < 2100);
    }
}
