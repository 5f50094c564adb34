//! A small scanner of Go-template actions (`{{ ... }}`): finds the variable paths a template reads.
//!
//! It is not a template parser. It finds each action, skips comments and
//! string literals, and returns every field chain that starts at the root
//! data (`.input.cluster`, `$.results.deploy.name`), which is all validation
//! needs. Chains on other values (`$x.field`, `(index .a 0).field`) are
//! ignored, and so are `.field` chains inside `range`, `with`, `define` and
//! `block` bodies, where `.` is no longer the root (`$.` still is).

/// One field chain read from the root data, split at the dots: `.input.cluster` is `["input", "cluster"]`.
pub type VarPath = Vec<String>;

/// Every root field chain the `{{ ... }}` actions of `text` read, in order.
///
/// Text outside actions is ignored. The only error is an action that is never
/// closed, since then nothing after it can be read.
pub fn scan(text: &str) -> Result<Vec<VarPath>, String> {
    let mut out = Vec::new();
    // One entry per open block: whether it rebinds `.` away from the root.
    let mut blocks: Vec<bool> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let body = &rest[start + 2..];
        let Some(end) = action_end(body) else {
            let near: String = rest[start..].chars().take(24).collect();
            return Err(format!("the template action at {near:?} is not closed with }}}}"));
        };
        let action = &body[..end];
        let words = action.trim_matches(|c: char| c == '-' || c.is_whitespace());
        let keyword = words.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or_default();
        let opens = match keyword {
            "end" => {
                blocks.pop();
                None
            }
            "else" => {
                // `else` ends the branch that rebound `.`; `else with` starts a new one.
                blocks.pop();
                let next = words["else".len()..].trim_start();
                Some(next.starts_with("with") || next.starts_with("range"))
            }
            "range" | "with" | "define" | "block" => Some(true),
            "if" => Some(false),
            _ => None,
        };
        // The pipeline of a block's own action is read in the enclosing context.
        if !words.starts_with("/*") {
            scan_action(action, blocks.iter().any(|b| *b), &mut out);
        }
        blocks.extend(opens);
        rest = &body[end + 2..];
    }
    Ok(out)
}

/// Whether `text` holds a template action at all.
pub fn has_template(text: &str) -> bool {
    text.contains("{{")
}

/// The byte offset of the `}}` that closes the action starting at `body`, skipping strings and comments.
fn action_end(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let trimmed = body.trim_start_matches('-').trim_start();
    if let Some(comment) = trimmed.strip_prefix("/*") {
        let offset = body.len() - comment.len();
        let close = comment.find("*/")? + offset + 2;
        return body[close..].find("}}").map(|i| i + close);
    }
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'\'' | b'`' => i = skip_literal(bytes, i),
            b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The offset just past the string, raw string or char literal starting at `i`.
fn skip_literal(bytes: &[u8], i: usize) -> usize {
    let quote = bytes[i];
    let mut j = i + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' if quote != b'`' => j += 2,
            b if b == quote => return j + 1,
            _ => j += 1,
        }
    }
    bytes.len()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Adds the root chains of one action to `out`; when `rebound`, only `$.` chains are root chains.
fn scan_action(action: &str, rebound: bool, out: &mut Vec<VarPath>) {
    let bytes = action.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if matches!(b, b'"' | b'\'' | b'`') {
            i = skip_literal(bytes, i);
            continue;
        }
        let prev = i.checked_sub(1).map(|p| bytes[p]);
        let starts_root_chain = b == b'.'
            && prev.is_none_or(|p| !is_ident(p) && p != b')' && p != b']')
            && bytes.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_');
        if !starts_root_chain {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        while i < bytes.len() && bytes[i] == b'.' && bytes.get(i + 1).is_some_and(|n| is_ident(*n)) {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && is_ident(bytes[end]) {
                end += 1;
            }
            path.push(action[start..end].to_string());
            i = end;
        }
        if !rebound || prev == Some(b'$') {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Vec<String> {
        scan(text).unwrap().into_iter().map(|p| p.join(".")).collect()
    }

    #[test]
    fn finds_args_results_and_loop_variables() {
        assert_eq!(paths("{{ .input.cluster }}"), ["input.cluster"]);
        assert_eq!(
            paths("deploy {{.input.app}} to {{ .results.get_info.endpoint }} as {{ .vars.item }}"),
            ["input.app", "results.get_info.endpoint", "vars.item"]
        );
    }

    #[test]
    fn text_without_actions_reads_nothing() {
        assert!(paths("plain text with .input.x and { braces }").is_empty());
        assert!(!has_template("no actions"));
        assert!(has_template("a {{ .b }}"));
    }

    #[test]
    fn functions_pipes_and_trim_markers_are_seen_through() {
        assert_eq!(paths("{{- eq .input.env \"prod\" -}}"), ["input.env"]);
        assert_eq!(paths("{{ .input.name | upper | default .args.fallback }}"), ["input.name", "args.fallback"]);
        assert_eq!(paths("{{ len .results.events.items }}"), ["results.events.items"]);
        assert_eq!(paths("{{ if and (.input.a) (gt .input.b 1) }}x{{ end }}"), ["input.a", "input.b"]);
    }

    #[test]
    fn string_literals_and_comments_are_skipped() {
        assert_eq!(paths(r#"{{ printf "%s .input.nope }}" .input.yes }}"#), ["input.yes"]);
        assert_eq!(paths("{{ `raw .input.nope` }}{{ '.' }}"), Vec::<String>::new());
        assert_eq!(paths("{{/* .input.nope }} */}}{{ .input.yes }}"), ["input.yes"]);
        assert_eq!(paths(r#"{{ "escaped \" .input.nope" }}"#), Vec::<String>::new());
    }

    #[test]
    fn chains_on_other_values_and_numbers_are_ignored() {
        assert_eq!(paths("{{ $x.field }}{{ 1.5 }}{{ .5 }}"), Vec::<String>::new());
        assert_eq!(paths("{{ (index .results \"a\").b }}"), ["results"]);
        assert_eq!(paths("{{ $.input.x }}"), ["input.x"]);
        assert_eq!(paths("{{ . }}"), Vec::<String>::new());
    }

    #[test]
    fn range_and_with_bodies_do_not_read_the_root() {
        assert_eq!(
            paths("{{ range .input.items }}{{ .name }}{{ $.input.z }}{{ end }}{{ .input.after }}"),
            ["input.items", "input.z", "input.after"]
        );
        assert_eq!(paths("{{ with .results.a }}{{ .x }}{{ else }}{{ .input.y }}{{ end }}"), ["results.a", "input.y"]);
        assert_eq!(paths("{{ if .input.a }}{{ .input.b }}{{ end }}"), ["input.a", "input.b"]);
        assert_eq!(paths("{{ end }}{{ end }}{{ .input.c }}"), ["input.c"], "stray ends are harmless");
    }

    #[test]
    fn an_unclosed_action_is_an_error() {
        let err = scan("hello {{ .input.x ").unwrap_err();
        assert!(err.contains("not closed"), "{err}");
        assert!(scan("{{ \"}}\" ").is_err(), "a }} inside a string does not close the action");
    }

    #[test]
    fn non_ascii_text_does_not_confuse_the_scanner() {
        assert_eq!(paths("déploiement {{ .input.nom }} ✓ {{ \"ü\" }}"), ["input.nom"]);
    }
}
