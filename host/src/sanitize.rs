//! Makes error text safe to store and show: no absolute host paths, no credentials in URLs or headers, no secret values of services.

mod secret_values;

pub(crate) use secret_values::replace_all;
pub use secret_values::{Hidden, REDACTED};

/// Rewrites `text` so it carries no absolute filesystem paths (replaced by their last
/// component), no `user:password@` in URLs, and no values of `Authorization`, token, API key,
/// password or secret settings, nor the secret values services read (see [`Hidden`]). Also caps
/// it at 2 KiB. Whitespace (line breaks included) is kept.
pub fn sanitize(text: &str) -> String {
    let text = &*secret_values::redact(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        out.push_str(&clean_word(&rest[..word_end]));
        rest = &rest[word_end..];
        let space_end = rest.find(|c: char| !c.is_whitespace()).unwrap_or(rest.len());
        out.push_str(&rest[..space_end]);
        rest = &rest[space_end..];
    }
    let out = redact_secrets(&out);
    if out.len() > 2048 { format!("{}…", cut_at(&out, 2048)) } else { out }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut_at(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Removes credentials only (`user:password@` in URLs, token, password, secret and
/// `Authorization` values), keeping paths: for the host's own log, where an operator needs the
/// paths but a library's error may quote a URL with a token in it. The secret values services
/// read (see [`Hidden`]) go too.
pub fn redact_credentials(text: &str) -> String {
    let text = &*secret_values::redact(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..word_end];
        out.push_str(&if word.contains("://") { clean_word(word) } else { word.to_string() });
        rest = &rest[word_end..];
        let space_end = rest.find(|c: char| !c.is_whitespace()).unwrap_or(rest.len());
        out.push_str(&rest[..space_end]);
        rest = &rest[space_end..];
    }
    redact_secrets(&out)
}

fn clean_word(word: &str) -> String {
    // Credentials in URLs: scheme://user:pass@host → scheme://***@host
    if let Some(scheme_end) = word.find("://") {
        let rest = &word[scheme_end + 3..];
        let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            return format!("{}://***@{}", &word[..scheme_end], &rest[at + 1..]);
        }
        return word.to_string();
    }
    // Absolute paths, possibly quoted, after `=` or `:`, or followed by punctuation: keep the last component.
    match word.char_indices().find(|&(i, c)| c == '/' && is_path_start(word, i)) {
        Some((s, _)) => {
            let (prefix, path) = word.split_at(s);
            let trail_at = path.find(['\'', '"', ')', ']', '}', ',', ';', '`', '>']).unwrap_or(path.len());
            let (p, trail) = path.split_at(trail_at);
            let (p, colon_tail) = match p.find(':') {
                Some(c) => p.split_at(c),
                None => (p, ""),
            };
            let last = p.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
            // After the colon: a line number (`a.rs:3`), or more paths (`PATH=/a/b:/c/d`).
            format!("{prefix}{last}{}{}", clean_word(colon_tail), clean_word(trail))
        }
        None => word.to_string(),
    }
}

/// A `/` that starts an absolute path of at least two components: at the start of the word or
/// after punctuation (a quote, a bracket, `=`, `:`), not inside a relative path (`a/b`) or a
/// number (`1/2`), and followed by a name.
fn is_path_start(word: &str, slash: usize) -> bool {
    let before = word[..slash].chars().next_back();
    let after = &word[slash + 1..];
    before.is_none_or(|c| matches!(c, '\'' | '"' | '(' | '[' | '{' | '<' | '`' | '=' | ':' | ','))
        && after.contains('/')
        && after.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
}

fn redact_secrets(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let markers = [
        "bearer ",
        "basic ",
        "token=",
        "password=",
        "passwd=",
        "secret=",
        "api_key=",
        "apikey=",
        "api-key=",
        "token: ",
        "password: ",
        "secret: ",
        "api-key: ",
        "api_key: ",
        "cookie: ",
    ];
    while i < text.len() {
        let hit = markers.iter().find(|m| lower[i..].starts_with(**m));
        match hit {
            Some(m) => {
                out.push_str(&text[i..i + m.len()]);
                i += m.len();
                let end = text[i..]
                    .find(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '"' | '\'' | '&' | ')' | ']' | '}'))
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
    use super::{redact_credentials, sanitize};

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
        assert_eq!(sanitize("url?token=abc123&x=1 bad"), "url?token=***&x=1 bad");
        assert!(!sanitize("password=pa55, user=x").contains("pa55"));
    }

    #[test]
    fn long_text_is_capped() {
        assert!(sanitize(&"x".repeat(10_000)).len() < 2100);
    }

    #[test]
    fn line_breaks_separate_words_and_are_kept() {
        assert_eq!(
            sanitize(
                "exited with code 3; stderr (last lines):\n/tmp/.tmpX/conf/server.json is unreadable\n\tpassword=hunter2"
            ),
            "exited with code 3; stderr (last lines):\nserver.json is unreadable\n\tpassword=***"
        );
    }

    #[test]
    fn paths_after_punctuation_and_in_brackets_are_shortened() {
        assert_eq!(sanitize("cannot start `/tmp/.tmpZ/bin/no-such`: gone"), "cannot start `no-such`: gone");
        assert_eq!(sanitize("--config=/home/alice/x/steward.yaml"), "--config=steward.yaml");
        assert_eq!(sanitize("open(/srv/data/a.db)"), "open(a.db)");
        assert_eq!(sanitize("path:/var/lib/steward/state.redb"), "path:state.redb");
        assert_eq!(sanitize("ratio 1/2/3 and a/b/c stay"), "ratio 1/2/3 and a/b/c stay");
        assert_eq!(sanitize("PATH=/opt/x/bin:/root/.cargo/bin:/usr/bin"), "PATH=bin:bin:bin");
        assert_eq!(sanitize("at '/a/b/c.rs':3:7, then"), "at 'c.rs':3:7, then");
    }

    #[test]
    fn credentials_in_urls_queries_and_headers_are_removed() {
        assert_eq!(
            sanitize("cannot reach http://alice:pw@127.0.0.1:9/mcp: refused"),
            "cannot reach http://***@127.0.0.1:9/mcp: refused"
        );
        assert_eq!(sanitize("(http://h:1/sse?token=abc&x=1): refused"), "(http://h:1/sse?token=***&x=1): refused");
        assert_eq!(sanitize("url (http://h/?access_token=abc)"), "url (http://h/?access_token=***)");
        assert_eq!(sanitize("X-Api-Key: k3y sent"), "X-Api-Key: *** sent");
        assert_eq!(sanitize("https://u:p@h?x=@y"), "https://***@h?x=@y");
    }

    #[test]
    fn the_log_keeps_paths_but_loses_credentials() {
        let line =
            "ERROR connect http://bob:hunter2@mcp.example/x?token=abc123&x=1 failed for /etc/steward/steward.yaml";
        let out = redact_credentials(line);
        assert!(!out.contains("hunter2") && !out.contains("abc123"), "{out}");
        assert!(out.contains("/etc/steward/steward.yaml") && out.contains("&x=1"), "{out}");
    }
}
