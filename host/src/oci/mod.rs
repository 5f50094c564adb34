//! Plugins from OCI registries: references, pull and push, the on-disk cache, cosign signatures, and following tags.
//!
//! - [`reference`]: `oci://registry/repository:tag` and `…@sha256:<hex>`.
//! - [`layout`]: the CNCF Wasm OCI artifact layout (one `application/wasm` layer).
//! - [`client`]: a registry client that returns only verified plugins.
//! - [`signature`]: cosign key-based signatures, verified offline.
//! - [`bundle`]: Sigstore bundles attached as referrers (cosign v3), verified offline.
//! - [`cache`]: pulled components by digest, for a start with the registry down.
//! - [`follow`]: the host's plugin sources, loaded into the [`crate::plugin::PluginSet`] and polled.

pub mod auth;
pub mod bundle;
pub mod cache;
pub mod client;
pub mod follow;
pub mod layout;
pub mod reference;
pub mod signature;

pub use cache::ArtifactCache;
pub use client::{Access, Pulled, Registry};
pub use follow::{FollowHandle, follow};
pub use layout::{PluginLabel, wasm_artifact};
pub use reference::{BadReference, OciRef, Target};
pub use signature::{SignKey, TrustKey};

/// Why a registry operation did not give a usable plugin.
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
    /// Bytes did not match the digest that names them.
    #[error(
        "{what} does not match its digest: expected {expected}, got {found}; the registry or something between is serving other bytes than were pushed"
    )]
    DigestMismatch {
        /// What was checked.
        what: String,
        /// The digest expected.
        expected: String,
        /// What the bytes hash to.
        found: String,
    },
    /// The artifact is not signed with the key its source requires (checked again at every poll,
    /// since a signature can be added without moving the tag).
    #[error("{0}")]
    Unsigned(String),
    /// The registry answered with something that is not a usable, trusted plugin.
    #[error("{0}")]
    Refused(String),
    /// Another answer of the registry that is an error.
    #[error("{reference}: {message}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// The local setup (credentials, CA file, key) is unusable.
    #[error("{0}")]
    Config(String),
}
