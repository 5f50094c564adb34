//! `oci://registry/repository:tag` and `oci://registry/repository@sha256:<hex>`: parsing, checking and printing.

use std::fmt;

/// Why a text is not a plugin reference; the message says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a plugin reference: {reason}; write oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST"
)]
pub struct BadReference {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A plugin's place in a registry: a registry host (with its port), a repository, and a tag or a
/// digest (never both). A digest reference names one artifact forever; a tag may move.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OciRef {
    /// `host` or `host:port`.
    pub registry: String,
    /// `path/to/repository`, lower case.
    pub repository: String,
    /// The tag or the pinned digest.
    pub target: Target,
}

/// What a reference names inside its repository.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A tag, which the host polls.
    Tag(String),
    /// A manifest digest `sha256:<64 hex>`, which never changes.
    Digest(String),
}

impl OciRef {
    /// Parses `oci://registry/repository:tag` or `oci://registry/repository@sha256:<hex>`.
    /// The `oci://` prefix is required, so that a reference is never mistaken for a file path.
    pub fn parse(text: &str) -> Result<Self, BadReference> {
        let bad = |reason: &str| BadReference { text: text.to_string(), reason: reason.to_string() };
        let rest = text.trim().strip_prefix("oci://").ok_or_else(|| bad("it does not start with oci://"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("it names no repository after the registry"))?;
        if registry.is_empty() || !registry.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
            return Err(bad("the registry is not a host name with an optional :port"));
        }
        let (repository, target) = if let Some((repo, digest)) = path.split_once('@') {
            check_digest(digest).map_err(|r| bad(&r))?;
            (repo, Target::Digest(digest.to_string()))
        } else {
            // The tag follows the last ':' after the last '/'.
            let slash = path.rfind('/').map_or(0, |i| i + 1);
            match path[slash..].rfind(':') {
                Some(i) => {
                    let tag = &path[slash + i + 1..];
                    check_tag(tag).map_err(|r| bad(&r))?;
                    (&path[..slash + i], Target::Tag(tag.to_string()))
                }
                None => return Err(bad("it has neither a :tag nor an @sha256: digest")),
            }
        };
        check_repository(repository).map_err(|r| bad(&r))?;
        Ok(Self { registry: registry.to_string(), repository: repository.to_string(), target })
    }

    /// The same repository at `digest`.
    pub fn at_digest(&self, digest: &str) -> Self {
        Self { target: Target::Digest(digest.to_string()), ..self.clone() }
    }

    /// The same repository at `tag`.
    pub fn at_tag(&self, tag: &str) -> Self {
        Self { target: Target::Tag(tag.to_string()), ..self.clone() }
    }

    /// The pinned digest, for a digest reference.
    pub fn digest(&self) -> Option<&str> {
        match &self.target {
            Target::Digest(d) => Some(d),
            Target::Tag(_) => None,
        }
    }

    /// Whether the registry is this machine (`localhost`, `127.0.0.0/8`, `[::1]`): the only
    /// registries spoken to over plain HTTP without `insecure: true`.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
            _ => &self.registry,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The reference as the OCI client takes it.
    pub fn to_client(&self) -> oci_client::Reference {
        match &self.target {
            Target::Tag(t) => {
                oci_client::Reference::with_tag(self.registry.clone(), self.repository.clone(), t.clone())
            }
            Target::Digest(d) => {
                oci_client::Reference::with_digest(self.registry.clone(), self.repository.clone(), d.clone())
            }
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Tag(t) => write!(f, "oci://{}/{}:{t}", self.registry, self.repository),
            Target::Digest(d) => write!(f, "oci://{}/{}@{d}", self.registry, self.repository),
        }
    }
}

/// Checks a `sha256:<64 lower-case hex>` digest.
pub fn check_digest(digest: &str) -> Result<(), String> {
    let hex = digest.strip_prefix("sha256:").ok_or("the digest does not start with sha256:")?;
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) {
        return Err("the digest is not sha256: followed by 64 lower-case hex digits".into());
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok { Ok(()) } else { Err(format!("the tag `{tag}` has characters other than letters, digits, '_', '.', '-'")) }
}

fn check_repository(repo: &str) -> Result<(), String> {
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
            && c.ends_with(|ch: char| ch.is_ascii_alphanumeric())
    };
    if repo.is_empty() || repo.len() > 255 || !repo.split('/').all(component_ok) {
        return Err(format!(
            "the repository `{repo}` is not lower-case letters, digits and separators ('.', '_', '-') between '/'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_and_digests_parse_and_print_back() {
        let r = OciRef::parse("oci://127.0.0.1:5000/steward/mcpserver:v1.2").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "steward/mcpserver");
        assert_eq!(r.target, Target::Tag("v1.2".into()));
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/steward/mcpserver:v1.2");
        assert!(r.is_loopback());
        let text = format!("oci://ghcr.io/acme/plugins/workflow@{D}");
        let r = OciRef::parse(&text).unwrap();
        assert_eq!(r.digest(), Some(D));
        assert_eq!(r.to_string(), text);
        assert!(!r.is_loopback());
        assert!(OciRef::parse("oci://localhost/p:1").unwrap().is_loopback());
        assert!(OciRef::parse("oci://[::1]:5000/p:1").unwrap().is_loopback());
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        for (text, why) in [
            ("ghcr.io/acme/p:1", "oci://"),
            ("oci://ghcr.io", "no repository"),
            ("oci://ghcr.io/acme/p", "neither a :tag"),
            ("oci://ghcr.io/Acme/p:1", "repository"),
            ("oci://ghcr.io/acme/p:1 2", "tag"),
            ("oci://ghcr.io/acme/p@sha256:abc", "64 lower-case hex"),
            ("oci://ghcr.io/acme/p@md5:abc", "sha256:"),
            ("oci://gh cr.io/acme/p:1", "registry"),
        ] {
            let e = OciRef::parse(text).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("write oci://"), "{text}: {e}");
        }
    }

    #[test]
    fn a_reference_moves_between_tag_and_digest() {
        let r = OciRef::parse("oci://localhost:5000/p:1").unwrap();
        assert_eq!(r.at_digest(D).to_string(), format!("oci://localhost:5000/p@{D}"));
        assert_eq!(r.at_tag("2").to_string(), "oci://localhost:5000/p:2");
    }
}
