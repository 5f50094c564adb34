//! Where a field is in a YAML file: the line and column of a path like `spec.steps[0].tool`, for `steward check`'s messages.

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::yaml;

/// A YAML node with the positions of its keys and items.
enum Node {
    /// A mapping: each key (as text) with where the key is, and its value.
    Map(Vec<(Spanned<Key>, Spanned<Node>)>),
    /// A sequence.
    Seq(Vec<Spanned<Node>>),
    /// A scalar or null.
    Scalar,
}

/// A mapping key as text, whatever scalar it is written as.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Key, E> {
                Ok(Key("null".into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Key, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Key(String::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Key, A::Error> {
                while a.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(Key(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = a.next_element::<Spanned<Node>>()? {
                    items.push(v);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(e) = a.next_entry::<Spanned<Key>, Spanned<Node>>()? {
                    entries.push(e);
                }
                Ok(Node::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// One step of a path: a mapping key or a sequence index.
#[derive(Debug, PartialEq, Eq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `spec.steps[0].tool` as steps; `None` for a path not written that way.
fn steps(path: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let (n, tail) = r.split_once(']')?;
            out.push(Step::Index(n.parse().ok()?));
            rest = tail;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// The documents of one YAML file, each with the positions of its fields.
pub struct Located {
    docs: Vec<Spanned<Node>>,
}

impl Located {
    /// Parses `text` (a whole file, any number of documents) with the hardened parser every
    /// resource file gets; `None` when it does not parse.
    pub fn parse(text: &str) -> Option<Self> {
        yaml::from_multiple::<Spanned<Node>>(text).ok().map(|docs| Self { docs })
    }

    /// The 1-based (line, column) of `path` (`spec.steps[0].tool`) in the document that starts at
    /// `doc_line`: where its key is written, or its item for an index. When the path goes deeper
    /// than the file (a key written with a dot in it), the deepest part found; `None` when no
    /// document starts at that line.
    pub fn position(&self, doc_line: u64, path: &str) -> Option<(u64, u64)> {
        let doc = self.docs.iter().find(|d| d.referenced.line().max(1) == doc_line.max(1))?;
        let mut at = (doc.referenced.line().max(1), doc.referenced.column().max(1));
        let mut node = &doc.value;
        for step in steps(path).unwrap_or_default() {
            let next = match (node, step) {
                (Node::Map(entries), Step::Key(k)) => {
                    entries.iter().find(|(key, _)| key.value.0 == k).map(|(key, v)| (&key.referenced, v))
                }
                (Node::Seq(items), Step::Index(i)) => items.get(i).map(|v| (&v.referenced, v)),
                _ => None,
            };
            let Some((loc, child)) = next else { break };
            if loc.line() > 0 {
                at = (loc.line(), loc.column().max(1));
            }
            node = &child.value;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
apiVersion: v1
kind: K
metadata: {name: a}
spec:
  command: x
  steps:
    - tool: t
      input_schema:
        type: object
  flow: {known: 1, extra: 2}
---
apiVersion: v1
kind: K
metadata:
  name: b
spec:
  1: one
  unknown: [1, 2]
";

    #[test]
    fn paths_are_found_where_their_keys_are_written() {
        let l = Located::parse(FILE).unwrap();
        assert_eq!(l.position(1, "spec.steps[0].input_schema"), Some((8, 7)));
        assert_eq!(l.position(1, "spec.steps[0]"), Some((7, 7)));
        assert_eq!(l.position(1, "spec.command"), Some((5, 3)));
        assert_eq!(l.position(1, "spec.flow.extra"), Some((10, 20)));
        assert_eq!(l.position(12, "spec.unknown"), Some((18, 3)));
        assert_eq!(l.position(12, "spec.1"), Some((17, 3)));
    }

    #[test]
    fn a_path_deeper_than_the_file_stops_at_the_deepest_part_found() {
        let l = Located::parse(FILE).unwrap();
        assert_eq!(l.position(1, "spec.steps[3].tool"), Some((6, 3)));
        assert_eq!(l.position(1, "spec.a.b"), Some((4, 1)));
        assert_eq!(l.position(99, "spec"), None);
        assert!(Located::parse("a: [").is_none());
    }

    #[test]
    fn paths_split_into_keys_and_indexes() {
        assert_eq!(
            steps("spec.steps[0][1].x").unwrap(),
            [Step::Key("spec"), Step::Key("steps"), Step::Index(0), Step::Index(1), Step::Key("x")]
        );
        assert_eq!(steps("spec.a[x]"), None);
    }
}
