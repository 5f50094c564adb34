//! YAML parsing with the hardening every input of Steward gets: strict booleans, duplicate keys refused, a budget.

use serde::de::DeserializeOwned;
use serde_saphyr::options::DuplicateKeyPolicy;

/// Largest YAML file Steward reads (config or resources); larger files are refused before parsing.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Parser options: YAML 1.2 booleans only (`on:`/`yes:` stay strings), duplicate keys are
/// errors, and a budget that ends alias bombs and deep nesting as errors in bounded time.
pub fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        budget: serde_saphyr::budget! {
            max_depth: 64,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_events: 2_000_000,
            max_nodes: 1_000_000,
            max_documents: 10_000,
            max_total_scalar_bytes: MAX_FILE_BYTES as usize * 2,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
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
        let message = serde_saphyr::UserMessageFormatter.format_message(e.without_snippet());
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

/// Parses one YAML document into `T` with [`options`].
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(YamlError::from_saphyr)
}

/// Parses every document of a YAML stream into `T` with [`options`].
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(YamlError::from_saphyr)
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
        let started = std::time::Instant::now();
        assert!(from_str::<serde_json::Value>(&doc).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn deep_nesting_ends_as_an_error() {
        let doc = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(from_str::<serde_json::Value>(&doc).is_err());
    }

    #[test]
    fn errors_render_as_file_line_column() {
        let e = YamlError { line: Some(3), column: Some(7), message: "bad".into() };
        assert_eq!(e.at("a.yaml"), "a.yaml:3:7: bad");
    }
}
