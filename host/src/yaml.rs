//! YAML parsing with the hardening every input of Steward gets: strict booleans, duplicate keys refused, a budget.

use serde::de::DeserializeOwned;
use serde_saphyr::options::DuplicateKeyPolicy;

/// Largest YAML file Steward reads (config or resources); larger files are refused before parsing.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Deepest nesting of sequences and mappings accepted, flow (`[[[`) or block (`- - -`) style.
pub const MAX_DEPTH: usize = 64;
/// Most aliases (`*name`) in one file.
pub const MAX_ALIASES: usize = 1_000;
/// Most anchors (`&name`) in one file.
pub const MAX_ANCHORS: usize = 1_000;
/// Most documents in one file.
pub const MAX_DOCUMENTS: usize = 10_000;
/// Most nodes (scalars, sequences, mappings) in one file, counting what aliases repeat.
pub const MAX_NODES: usize = 1_000_000;
/// Most bytes of scalar text in one file, counting what aliases repeat.
pub const MAX_SCALAR_BYTES: usize = MAX_FILE_BYTES as usize * 2;
/// Most nodes that aliases may repeat in one file, all aliases together.
pub const MAX_REPLAYED: usize = 100_000;

/// Parser options: YAML 1.2 booleans only (`on:`/`yes:` stay strings), duplicate keys are
/// errors, and a budget that ends alias bombs and deep nesting as errors in bounded time.
pub fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            // The scanner's own limit on flow collections (`[[[[`), which it checks before the
            // budget sees the nesting: the same depth, so that both styles end alike.
            flow_nesting_limit: MAX_DEPTH,
            max_aliases: MAX_ALIASES,
            max_anchors: MAX_ANCHORS,
            max_events: 2_000_000,
            max_nodes: MAX_NODES,
            max_documents: MAX_DOCUMENTS,
            max_total_scalar_bytes: MAX_SCALAR_BYTES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED,
            max_replay_stack_depth: 16,
        },
    }
}

/// A parse error with its position, 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    /// Line, when known.
    pub line: Option<u64>,
    /// Column, when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl YamlError {
    fn from_saphyr(e: serde_saphyr::Error) -> Self {
        let loc = e.location();
        use serde_saphyr::MessageFormatter as _;
        // The message alone: the position is kept apart, and `Display` would repeat it.
        let message = plain_message(&e)
            .unwrap_or_else(|| serde_saphyr::UserMessageFormatter.format_message(e.without_snippet()).into_owned());
        let message = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        Self {
            line: loc.as_ref().map(|l| l.line()).filter(|l| *l > 0),
            column: loc.as_ref().map(|l| l.column()).filter(|c| *c > 0),
            message,
        }
    }

    /// `file:line:column: message`, leaving out what is not known.
    pub fn at(&self, file: &str) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}: {}", self.message),
            (Some(l), None) => format!("{file}:{l}: {}", self.message),
            _ => format!("{file}: {}", self.message),
        }
    }
}

/// The error under the wrappers that only add a snippet or the alias's locations.
fn original(mut e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    use serde_saphyr::Error as E;
    loop {
        match e {
            E::WithSnippet { error, .. } | E::AliasError { error, .. } => e = error,
            other => return other,
        }
    }
}

/// What a limit breach or a type mismatch means, said for people: the parser's own words are
/// `limits breached: Depth { depth: 65 }` or `expected string scalar`.
fn plain_message(e: &serde_saphyr::Error) -> Option<String> {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach as B;
    let too_complex = "the YAML is too large or too complex";
    Some(match original(e) {
        E::Budget { breach, .. } => match breach {
            B::Depth { .. } => format!("{too_complex}: nested deeper than {MAX_DEPTH} levels"),
            B::Aliases { .. } => format!("{too_complex}: more than {MAX_ALIASES} aliases"),
            B::Anchors { .. } => format!("{too_complex}: more than {MAX_ANCHORS} anchors"),
            B::Documents { .. } => format!("{too_complex}: more than {MAX_DOCUMENTS} documents in one file"),
            B::Nodes { .. } => {
                format!("{too_complex}: more than {MAX_NODES} values, counting those aliases repeat")
            }
            B::ScalarBytes { .. } => {
                format!("{too_complex}: more than {MAX_SCALAR_BYTES} bytes of text, counting what aliases repeat")
            }
            B::AliasAnchorRatio { aliases, anchors } => {
                format!("{too_complex}: {aliases} aliases of only {anchors} anchors (an alias bomb?)")
            }
            B::Events { .. } => format!("{too_complex}: too many YAML events"),
            other => format!("{too_complex}: {other:?}"),
        },
        E::AliasReplayLimitExceeded { .. } | E::AliasReplayCounterOverflow { .. } => {
            format!("{too_complex}: aliases repeat more than {MAX_REPLAYED} values in all (an alias bomb?)")
        }
        E::AliasReplayStackDepthExceeded { max_depth, .. } => {
            format!("{too_complex}: aliases nested more than {max_depth} deep")
        }
        E::AliasExpansionLimitExceeded { .. } => format!("{too_complex}: an anchor is repeated too often"),
        E::InvalidScalar { ty, .. } => match *ty {
            "u8" | "u16" | "u32" | "u64" | "usize" => "expected a whole number (0 or more)".to_string(),
            "i8" | "i16" | "i32" | "i64" | "isize" => "expected a whole number".to_string(),
            "f32" | "f64" | "floating point" => "expected a number".to_string(),
            "bool" => "expected true or false".to_string(),
            other => format!("expected a value of type {other}"),
        },
        E::Unexpected { expected, .. } => match *expected {
            "string scalar" => "expected a string".to_string(),
            "mapping start" => "expected a mapping".to_string(),
            "sequence start" => "expected a sequence".to_string(),
            _ => return None,
        },
        other => {
            // The scanner's flow-nesting limit has no variant of its own.
            use serde_saphyr::MessageFormatter as _;
            let text = serde_saphyr::UserMessageFormatter.format_message(other);
            if text.contains("recursion limit exceeded") {
                format!("{too_complex}: nested deeper than {MAX_DEPTH} levels")
            } else {
                return None;
            }
        }
    })
}

/// Parses one YAML document into `T` with [`options`].
///
/// A document that is not well-formed YAML is reported as such (`unclosed bracket '['`), even
/// where the typed reading met a value of the wrong shape first; a scalar of the wrong type
/// names what it found (``expected a whole number (0 or more), found `four` ``).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| explained(text, e, false))
}

/// Parses every document of a YAML stream into `T` with [`options`], with the errors of
/// [`from_str`].
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(|e| explained(text, e, true))
}

/// The error to report for `text`, whose typed reading failed with `e`: the syntax error when
/// the text is not well-formed (a typed reading can stop at a value before the parser reaches
/// the broken bracket), else `e` with the scalar it found when it is a type mismatch.
fn explained(text: &str, e: serde_saphyr::Error, multiple: bool) -> YamlError {
    let typed = YamlError::from_saphyr(e);
    let syntax = if multiple {
        serde_saphyr::from_multiple_with_options::<serde::de::IgnoredAny>(text, options()).err()
    } else {
        serde_saphyr::from_str_with_options::<serde::de::IgnoredAny>(text, options()).err()
    };
    if let Some(syntax) = syntax.map(YamlError::from_saphyr) {
        return syntax;
    }
    match (typed.message.starts_with("expected "), typed.line, typed.column) {
        (true, Some(line), Some(column)) => match scalar_at(text, line, column) {
            Some(found) => YamlError { message: format!("{}, found `{found}`", typed.message), ..typed },
            None => typed,
        },
        _ => typed,
    }
}

/// The plain scalar that starts at `line`:`column` (1-based) of `text`, if one does and it is
/// short enough to quote.
fn scalar_at(text: &str, line: u64, column: u64) -> Option<String> {
    let row = text.lines().nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let rest: String = row.chars().skip(usize::try_from(column).ok()?.checked_sub(1)?).collect();
    let end = rest.find([',', ']', '}', '#']).unwrap_or(rest.len());
    let found = rest[..end].trim();
    let plain = !found.is_empty() && !found.starts_with(['[', '{', '&', '*', '!', '|', '>']);
    (plain && found.chars().count() <= 40)
        .then(|| found.chars().map(|c| if c.is_control() { ' ' } else { c }).collect())
}

/// Whether `line` (without its newline) is a YAML document marker: `---` (a document starts) or
/// `...` (one ends) at its very start, then nothing, a blank or the rest of the line. YAML
/// allows neither at column 0 inside a document, so such a line always ends the one before it.
pub fn is_document_marker(line: &[u8]) -> bool {
    (line.starts_with(b"---") || line.starts_with(b"...")) && matches!(line.get(3), None | Some(b' ' | b'\t' | b'\r'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn yaml_1_1_booleans_are_not_booleans() {
        let v: BTreeMap<String, serde_json::Value> = from_str("on: yes\n").unwrap();
        assert_eq!(v["on"], serde_json::json!("yes"));
        let e = from_str::<BTreeMap<String, bool>>("a: yes\n").unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn a_syntax_error_wins_over_the_typed_reading_that_stopped_before_it() {
        let e = from_str::<BTreeMap<String, BTreeMap<String, u32>>>("queue:\n  workers: [4\n").unwrap_err();
        assert!(e.message.contains("unclosed bracket"), "{e:?}");
        assert_eq!(e.line, Some(2), "{e:?}");
        let e = from_multiple::<BTreeMap<String, u32>>("a: 1\n---\nb: [4\n").unwrap_err();
        assert!(e.message.contains("unclosed bracket"), "{e:?}");
    }

    #[test]
    fn a_scalar_of_the_wrong_type_is_named_with_what_was_expected() {
        let e = from_str::<BTreeMap<String, BTreeMap<String, u32>>>("queue:\n  workers: four\n").unwrap_err();
        assert_eq!(e.message, "expected a whole number (0 or more), found `four`");
        assert_eq!((e.line, e.column), (Some(2), Some(12)));
        let e = from_str::<BTreeMap<String, i32>>("n: -x  # a comment\n").unwrap_err();
        assert_eq!(e.message, "expected a whole number, found `-x`");
        let e = from_str::<BTreeMap<String, Vec<f64>>>("x: [1, many]\n").unwrap_err();
        assert_eq!(e.message, "expected a number, found `many`");
    }

    #[test]
    fn duplicate_keys_are_errors_with_a_position() {
        let e = from_str::<BTreeMap<String, u32>>("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e:?}");
        assert!(e.message.to_lowercase().contains("duplicate"), "{e:?}");
    }

    #[test]
    fn an_alias_bomb_ends_as_an_error() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        // Refused by the parser's alias budget, not expanded (10^12 nodes): the error says so.
        let e = from_str::<serde_json::Value>(&doc).unwrap_err();
        assert!(e.message.contains("alias bomb") && e.line.is_some() && e.column.is_some(), "{e:?}");
    }

    #[test]
    fn deep_nesting_ends_as_an_error_at_the_limit_in_either_style() {
        for (doc, width) in [
            (format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000)), 1),
            (format!("{}1{}", "{a: ".repeat(10_000), "}".repeat(10_000)), 4),
            (format!("{}x\n", "- ".repeat(10_000)), 2),
        ] {
            let e = from_str::<serde_json::Value>(&doc).unwrap_err();
            assert_eq!(e.message, "the YAML is too large or too complex: nested deeper than 64 levels", "{e:?}");
            assert_eq!(e.line, Some(1), "{e:?}");
            assert!(e.column.is_some_and(|c| c as usize <= width * (MAX_DEPTH + 1)), "at the limit, not later: {e:?}");
        }
    }

    #[test]
    fn type_mismatches_say_what_was_expected_in_plain_words() {
        let e = from_str::<BTreeMap<String, String>>("a: [1]\n").unwrap_err();
        assert_eq!((e.message.as_str(), e.line, e.column), ("expected a string", Some(1), Some(4)));
        let e = from_str::<BTreeMap<String, BTreeMap<String, u8>>>("a: x\n").unwrap_err();
        assert_eq!(e.message, "expected a mapping, found `x`");
    }

    #[test]
    fn a_document_marker_is_three_dashes_or_dots_at_the_start_of_a_line() {
        for line in ["---", "--- # next", "--- !tag", "---\r", "...", "... # end", "---\tx"] {
            assert!(is_document_marker(line.as_bytes()), "{line:?}");
        }
        for line in ["", "--", "----", "---x: 1", " ---", "....", "- --"] {
            assert!(!is_document_marker(line.as_bytes()), "{line:?}");
        }
    }

    #[test]
    fn errors_render_as_file_line_column() {
        let e = YamlError { line: Some(3), column: Some(7), message: "bad".into() };
        assert_eq!(e.at("a.yaml"), "a.yaml:3:7: bad");
    }
}
