//! Name patterns for `filter_tools`: `*` (any run of characters), `?` (one character), `[abc]`, `[a-z]`, `[^a-z]` and `\` escapes, the shell patterns muster accepts.

/// A pattern that is not well formed, in words.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("pattern {pattern:?} is not valid: {why}")]
pub struct BadPattern {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Checks that `pattern` is well formed, so that [`matches`] means what it says.
pub fn check(pattern: &str) -> Result<(), BadPattern> {
    let p: Vec<char> = pattern.chars().collect();
    let bad = |why| Err(BadPattern { pattern: pattern.to_string(), why });
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' if i + 1 == p.len() => return bad("it ends with a lone '\\'"),
            '\\' => i += 2,
            '[' => match class_end(&p, i) {
                Some(end) => i = end + 1,
                None => return bad("a '[' has no closing ']'"),
            },
            _ => i += 1,
        }
    }
    Ok(())
}

/// Whether all of `name` matches `pattern` (which [`check`] accepted; a malformed part matches nothing).
pub fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_at(&p, &n)
}

fn match_at(p: &[char], n: &[char]) -> bool {
    let Some(&first) = p.first() else { return n.is_empty() };
    match first {
        '*' => (0..=n.len()).any(|k| match_at(&p[1..], &n[k..])),
        '?' => !n.is_empty() && match_at(&p[1..], &n[1..]),
        '[' => {
            let Some(end) = class_end(p, 0) else { return false };
            !n.is_empty() && in_class(&p[1..end], n[0]) && match_at(&p[end + 1..], &n[1..])
        }
        '\\' => p.len() > 1 && n.first() == Some(&p[1]) && match_at(&p[2..], &n[1..]),
        c => n.first() == Some(&c) && match_at(&p[1..], &n[1..]),
    }
}

/// The index of the `]` that closes the class opened at `p[start]`.
fn class_end(p: &[char], start: usize) -> Option<usize> {
    let mut i = start + 1;
    if p.get(i) == Some(&'^') {
        i += 1;
    }
    let first = i;
    while i < p.len() {
        match p[i] {
            '\\' => i += 2,
            ']' if i > first => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Whether `c` is in the class whose inside (between `[` and `]`) is `body`.
fn in_class(body: &[char], c: char) -> bool {
    let (negated, body) = match body.split_first() {
        Some(('^', rest)) => (true, rest),
        _ => (false, body),
    };
    let mut found = false;
    let mut i = 0;
    while i < body.len() {
        let lo = if body[i] == '\\' && i + 1 < body.len() {
            i += 1;
            body[i]
        } else {
            body[i]
        };
        i += 1;
        if i + 1 < body.len() && body[i] == '-' {
            let hi = body[i + 1];
            i += 2;
            found |= lo <= c && c <= hi;
        } else {
            found |= lo == c;
        }
    }
    found != negated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        let table: &[(&str, &str, bool)] = &[
            ("", "", true),
            ("", "a", false),
            ("core*", "core_plugin_list", true),
            ("core*", "x_core", false),
            ("*list*", "core_plugin_list", true),
            ("x_?it_*", "x_git_status", true),
            ("x_?it_*", "x_it_status", false),
            ("x_[gh]it_*", "x_hit_log", true),
            ("x_[^g]it_*", "x_git_log", false),
            ("x_[a-f]*", "x_everything_echo", true),
            ("x_[a-d]*", "x_everything_echo", false),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("x_*_get-sum", "x_everything_get-sum", true),
        ];
        for (p, n, want) in table {
            assert!(check(p).is_ok(), "{p}");
            assert_eq!(matches(p, n), *want, "{p} ~ {n}");
        }
    }

    #[test]
    fn malformed_patterns_are_named() {
        for (p, why) in [("x_[ab", "no closing"), ("abc\\", "lone"), ("[]", "no closing")] {
            let e = check(p).unwrap_err();
            assert!(e.to_string().contains(why) && e.to_string().contains(p), "{p}: {e}");
        }
    }
}
