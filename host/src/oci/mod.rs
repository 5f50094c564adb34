//! Plugins from OCI registries: references, pull and push, the on-disk cache, cosign signatures, and following tags.
//!
//! - [`reference`]: `oci://registry/repository:tag` and `…@sha256:<hex>`.
//! - [`layout`]: the CNCF Wasm OCI artifact layout (one `application/wasm` layer).
//! - [`client`]: a registry client that returns only verified plugins.
//! - [`signature`]: cosign key-based signatures, verified offline.
//! - [`bundle`]: Sigstore bundles attached as referrers (cosign v3), verified offline.
//! - [`cache`]: pulled components by digest, for a start with the registry down.
//! - [`follow`]: the host's plugin sources, loaded into the [`crate::plugin::PluginSet`] and polled.
//! - [`world`]: a component's imports and exports, for the artifact's config.
//! - `tls`: telling HTTPS spoken to a plain-HTTP registry from other transport failures.

pub mod auth;
pub mod bundle;
pub mod cache;
pub mod client;
pub mod follow;
pub mod layout;
pub mod reference;
pub mod signature;
mod tls;
pub mod world;

pub use cache::ArtifactCache;
pub use client::{Access, Pulled, Registry};
pub use follow::{FollowHandle, follow};
pub use layout::{PluginLabel, wasm_artifact};
pub use reference::{BadReference, OciRef, Target};
pub use signature::{SignKey, TrustKey};

/// Why a registry operation did not give a usable plugin.
///
/// No message names the reference: whoever reports the error names it once, in front
/// (`oci://…: refused: the artifact sha256:… has no signature; …`). A refusal names the
/// artifact's digest and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The registry did not answer (down, unreachable, TLS failed); a cached copy may stand in.
    #[error("cannot reach the registry {registry}: {message}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// The transport error.
        message: String,
    },
    /// HTTPS was spoken to a registry that answers plain HTTP (the TLS handshake got an HTTP
    /// answer); a cached copy may stand in.
    #[error(
        "cannot reach the registry {registry} over HTTPS: the registry at {registry} answers plain HTTP; add --plain-http{} (for a plugin source: `plain_http: true`{})",
        if *.loopback { "" } else { " --insecure" },
        if *.loopback { "" } else { " and `insecure: true`" }
    )]
    AnswersPlainHttp {
        /// The registry.
        registry: String,
        /// Whether it is this machine (plain HTTP to any other also needs `insecure`).
        loopback: bool,
    },
    /// The registry refused the credentials (or there were none).
    #[error(
        "the registry {registry} refused access; give credentials with `docker_config` or `token_file` (for the CLI: --docker-config or --token-file)"
    )]
    Unauthorized {
        /// The registry.
        registry: String,
    },
    /// Plain HTTP was asked for a registry that is not this machine.
    #[error(
        "plain HTTP to {registry}, which is not this machine, sends plugins and credentials in the clear; use HTTPS, or also set `insecure: true` (--insecure) if you mean it"
    )]
    PlainHttp {
        /// The registry.
        registry: String,
    },
    /// The tag or digest names nothing in the registry.
    #[error("{what} does not exist in the registry; push it first (`steward plugin push`)")]
    NotFound {
        /// What was asked for: `the tag `1`` or `the artifact sha256:…`.
        what: String,
    },
    /// Bytes did not match the digest that names them.
    #[error(
        "refused: {what} does not match its digest: expected {expected}, got {found}; the registry or something between is serving other bytes than were pushed"
    )]
    DigestMismatch {
        /// What was checked.
        what: String,
        /// The digest expected.
        expected: String,
        /// What the bytes hash to.
        found: String,
    },
    /// The source requires a signature and the artifact has none at all.
    #[error(
        "refused: the artifact {digest} has no signature (neither a `.sig` signature nor a Sigstore bundle referrer), and the key {key} is required; sign it with `steward plugin sign REF --key` (or `cosign sign --key`) using the private half of that key, or allow unsigned artifacts by removing `key` from the plugin source (for the CLI: leave out --key)"
    )]
    NoSignature {
        /// The artifact's manifest digest.
        digest: String,
        /// The key required, as [`TrustKey::describe`] names it.
        key: String,
    },
    /// The artifact's signatures do not verify with the key its source requires (checked again
    /// at every poll, since a signature can be added without moving the tag). The message names
    /// the artifact's digest and the key.
    #[error("refused: {0}")]
    Unsigned(String),
    /// The registry answered with something that is not a usable, trusted plugin; the message
    /// names the artifact.
    #[error("refused: {0}")]
    Refused(String),
    /// Another answer of the registry that is an error.
    #[error("the registry {registry} answered with an error: {message}")]
    Registry {
        /// The registry.
        registry: String,
        /// The registry's answer.
        message: String,
    },
    /// The local setup (credentials, CA file, key) is unusable.
    #[error("{0}")]
    Config(String),
}

impl OciError {
    /// Whether the registry could not be read at all (a cached copy may stand in, and the
    /// source is tried again), as opposed to an artifact that was read and refused.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::AnswersPlainHttp { .. })
    }

    /// Whether the artifact itself was refused (layout, digest, signature): it stays refused
    /// while its source names it.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::DigestMismatch { .. } | Self::NoSignature { .. } | Self::Unsigned(_) | Self::Refused(_))
    }

    /// A short label for metrics: `unreachable`, `unauthorized`, `not_found`, `config`,
    /// `registry_error`, or for a refusal `digest_mismatch`, `unsigned`, `bad_signature`, `layout`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } | Self::AnswersPlainHttp { .. } => "unreachable",
            Self::Unauthorized { .. } => "unauthorized",
            Self::NotFound { .. } => "not_found",
            Self::PlainHttp { .. } | Self::Config(_) => "config",
            Self::Registry { .. } => "registry_error",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::NoSignature { .. } => "unsigned",
            Self::Unsigned(_) => "bad_signature",
            Self::Refused(_) => "layout",
        }
    }
}
