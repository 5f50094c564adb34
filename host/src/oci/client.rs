//! Talking to a registry: pull a plugin (manifest checked, digests verified, signature checked), push one, sign one.

use std::path::PathBuf;

use futures_util::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, RegistryOperation};

use super::OciError;
use super::layout::{self, Artifact, Descriptor, Manifest, sha256_digest};
use super::reference::OciRef;
use super::signature::{self, SignKey, TrustKey};

mod referrers;

/// The largest signature payload read.
const MAX_PAYLOAD: u64 = 64 * 1024;
/// The most signatures of one artifact that are read (cosign appends one per `sign`).
const MAX_SIGNATURES: usize = 32;

/// How to reach one registry: transport and credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// A PEM file of CA certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// Allow [`Access::plain_http`] to a registry that is not this machine.
    pub insecure: bool,
    /// A Docker `config.json` with the registry's credentials.
    pub docker_config: Option<PathBuf>,
    /// A file holding a bearer token for the registry.
    pub token_file: Option<PathBuf>,
}

/// A plugin pulled from a registry and verified.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The manifest digest (what a digest reference pins).
    pub digest: String,
    /// The manifest.
    pub manifest: Manifest,
    /// The component, whose digest matched the manifest's layer.
    pub wasm: Vec<u8>,
    /// The key its signature was verified with, as messages show it.
    pub signed_by: Option<String>,
}

/// A client for the registry of one reference.
pub struct Registry {
    client: Client,
    auth: RegistryAuth,
}

impl Registry {
    /// A client for `reference`'s registry with `access`. Plain HTTP to a registry that is not
    /// this machine is refused unless `access.insecure` is set.
    pub fn new(reference: &OciRef, access: &Access) -> Result<Self, OciError> {
        if access.plain_http && !access.insecure && !reference.is_loopback() {
            return Err(OciError::PlainHttp { registry: reference.registry.clone() });
        }
        // The host's TLS is rustls with ring; the client needs it as the process's provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientConfig {
            protocol: if access.plain_http { ClientProtocol::Http } else { ClientProtocol::Https },
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            platform_resolver: None,
            ..Default::default()
        };
        if let Some(ca) = &access.ca_file {
            let data = std::fs::read(ca)
                .map_err(|e| OciError::Config(format!("cannot read the CA file {}: {e}", ca.display())))?;
            config.extra_root_certificates.push(Certificate { encoding: CertificateEncoding::Pem, data });
        }
        let client = Client::try_from(config)
            .map_err(|e| OciError::Config(format!("cannot set up the registry client: {e}")))?;
        let auth = super::auth::credentials(
            &reference.registry,
            access.docker_config.as_deref(),
            access.token_file.as_deref(),
        )
        .map_err(|e| OciError::Config(e.to_string()))?;
        Ok(Self { client, auth })
    }

    /// The digest `reference` names now (for a tag: the manifest it points at).
    pub async fn resolve(&self, reference: &OciRef) -> Result<String, OciError> {
        if let Some(d) = reference.digest() {
            return Ok(d.to_string());
        }
        let (_, digest) = self.manifest(reference).await?.ok_or_else(|| not_found(reference))?;
        Ok(digest)
    }

    /// The manifest bytes and digest of `reference`; `None` when the registry has none.
    async fn manifest(&self, reference: &OciRef) -> Result<Option<(Vec<u8>, String)>, OciError> {
        let image = reference.to_client();
        let pulled = self.client.pull_manifest_raw(&image, &self.auth, &[layout::MANIFEST]).await;
        let (bytes, _) = match pulled {
            Ok(x) => x,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(transport(reference, e)),
        };
        if bytes.len() > layout::MAX_MANIFEST {
            return Err(OciError::Refused(format!(
                "the manifest is {} bytes; the limit is {}",
                bytes.len(),
                layout::MAX_MANIFEST
            )));
        }
        // The digest is computed here, never taken from a header.
        let digest = sha256_digest(&bytes);
        if let Some(pinned) = reference.digest()
            && pinned != digest
        {
            return Err(OciError::DigestMismatch {
                what: "the manifest".into(),
                expected: pinned.into(),
                found: digest,
            });
        }
        Ok(Some((bytes.to_vec(), digest)))
    }

    /// Pulls the plugin at `reference`: the manifest must be the Wasm layout, its signature
    /// (when `key` is given) must verify with `key`, and the component's bytes must match the
    /// layer's digest. Nothing unverified is returned.
    pub async fn pull(&self, reference: &OciRef, key: Option<&TrustKey>) -> Result<Pulled, OciError> {
        let (bytes, digest) = self.manifest(reference).await?.ok_or_else(|| not_found(reference))?;
        let manifest = layout::check(&bytes)
            .map_err(|e| OciError::Refused(format!("the artifact {digest} is not a Wasm plugin: {e}")))?;
        let signed_by = match key {
            Some(key) => {
                let layers = self.signature_layers(reference, &digest).await?;
                // The `.sig` tag first; the bundles attached as referrers (cosign v3) when that fails.
                if key.verify(&digest, &layers).is_err() {
                    let bundles = self.referrer_bundles(reference, &digest).await?;
                    if layers.is_empty() && bundles.is_empty() {
                        return Err(OciError::NoSignature { digest, key: key.describe() });
                    }
                    super::bundle::verify_any(key, &digest, &layers, &bundles)
                        .map_err(|e| OciError::Unsigned(e.to_string()))?;
                }
                Some(key.describe())
            }
            None => None,
        };
        let layer = &manifest.layers[0];
        let wasm = self.blob(reference, layer).await?;
        Ok(Pulled { digest, manifest, wasm, signed_by })
    }

    /// The annotations of the manifest `reference` names (what a refused artifact says it is).
    pub async fn annotations(
        &self,
        reference: &OciRef,
    ) -> Result<std::collections::BTreeMap<String, String>, OciError> {
        let (bytes, digest) = self.manifest(reference).await?.ok_or_else(|| not_found(reference))?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| OciError::Refused(format!("the artifact {digest} is not an OCI manifest: {e}")))?;
        Ok(manifest.annotations)
    }

    /// Downloads the blob `desc` (at most its declared size) and checks its digest.
    async fn blob(&self, reference: &OciRef, desc: &Descriptor) -> Result<Vec<u8>, OciError> {
        let image = reference.to_client();
        let digest: &str = &desc.digest;
        let mut stream = self.client.pull_blob_stream(&image, &digest).await.map_err(|e| transport(reference, e))?;
        let mut out = Vec::with_capacity(desc.size.min(layout::MAX_LAYER) as usize);
        while let Some(chunk) = stream.stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                // The client checks the digest as it streams; the check below says it better.
                Err(e) if e.to_string().to_lowercase().contains("digest") => break,
                Err(e) => {
                    return Err(OciError::Unreachable { registry: reference.registry.clone(), message: e.to_string() });
                }
            };
            if out.len() as u64 + chunk.len() as u64 > desc.size {
                return Err(OciError::DigestMismatch {
                    what: "the component".into(),
                    expected: format!("{} ({} bytes)", desc.digest, desc.size),
                    found: "more bytes than the manifest declares".into(),
                });
            }
            out.extend_from_slice(&chunk);
        }
        let found = sha256_digest(&out);
        if found != desc.digest {
            return Err(OciError::DigestMismatch {
                what: "the component".into(),
                expected: desc.digest.clone(),
                found,
            });
        }
        Ok(out)
    }

    /// The simple-signing layers stored for `digest` beside `reference` (none when unsigned).
    async fn signature_layers(&self, reference: &OciRef, digest: &str) -> Result<Vec<(Descriptor, Vec<u8>)>, OciError> {
        let sig_ref = reference.at_tag(&signature::signature_tag(digest));
        let Some((bytes, _)) = self.manifest(&sig_ref).await? else { return Ok(Vec::new()) };
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| OciError::Refused(format!("the signature manifest {sig_ref} is not a manifest: {e}")))?;
        let mut out = Vec::new();
        // At most MAX_SIGNATURES payloads are read: a signature manifest from a hostile registry
        // listing thousands of layers must not hold the host's memory.
        for layer in manifest
            .layers
            .into_iter()
            .filter(|l| l.media_type == signature::PAYLOAD && l.size <= MAX_PAYLOAD)
            .take(MAX_SIGNATURES)
        {
            match self.blob(&sig_ref, &layer).await {
                Ok(payload) => out.push((layer, payload)),
                Err(OciError::DigestMismatch { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Pushes `artifact` (its layer being `wasm`) to `reference`; returns the manifest digest.
    pub async fn push(&self, reference: &OciRef, wasm: &[u8], artifact: &Artifact) -> Result<String, OciError> {
        let image = reference.to_client();
        self.client.auth(&image, &self.auth, RegistryOperation::Push).await.map_err(|e| transport(reference, e))?;
        let layer = &artifact.manifest.layers[0];
        self.client.push_blob(&image, wasm.to_vec(), &layer.digest).await.map_err(|e| transport(reference, e))?;
        self.client
            .push_blob(&image, artifact.config.clone(), &artifact.manifest.config.digest)
            .await
            .map_err(|e| transport(reference, e))?;
        self.push_manifest(reference, &artifact.manifest_bytes).await?;
        Ok(artifact.digest())
    }

    async fn push_manifest(&self, reference: &OciRef, bytes: &[u8]) -> Result<(), OciError> {
        let content_type = reqwest::header::HeaderValue::from_static(layout::MANIFEST);
        self.client
            .push_manifest_raw(&reference.to_client(), bytes.to_vec(), content_type)
            .await
            .map_err(|e| transport(reference, e))?;
        Ok(())
    }

    /// Signs the artifact `digest` of `reference`'s repository with `key` the way `cosign sign
    /// --key` does, keeping signatures already there; returns the signature tag's reference.
    pub async fn sign(&self, reference: &OciRef, digest: &str, key: &SignKey) -> Result<OciRef, OciError> {
        let sig_ref = reference.at_tag(&signature::signature_tag(digest));
        let image = sig_ref.to_client();
        self.client.auth(&image, &self.auth, RegistryOperation::Push).await.map_err(|e| transport(reference, e))?;
        let (payload, sig) = key.sign(&format!("{}/{}", reference.registry, reference.repository), digest);
        let mut layer = Descriptor::of(signature::PAYLOAD, &payload);
        layer.annotations.insert(signature::ANNOTATION_SIGNATURE.into(), sig);
        let mut layers: Vec<Descriptor> = match self.manifest(&sig_ref).await? {
            Some((bytes, _)) => serde_json::from_slice::<Manifest>(&bytes).map(|m| m.layers).unwrap_or_default(),
            None => Vec::new(),
        };
        layers.retain(|l| l.digest != layer.digest || l.annotations != layer.annotations);
        layers.push(layer);
        self.client
            .push_blob(&image, payload, &layers[layers.len() - 1].digest)
            .await
            .map_err(|e| transport(reference, e))?;
        let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "created": "0001-01-01T00:00:00Z",
            "history": [{ "created": "0001-01-01T00:00:00Z" }],
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
        }))
        .unwrap_or_default();
        let config_desc = Descriptor::of("application/vnd.oci.image.config.v1+json", &config);
        self.client.push_blob(&image, config, &config_desc.digest).await.map_err(|e| transport(reference, e))?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(layout::MANIFEST.into()),
            config: config_desc,
            layers,
            annotations: Default::default(),
        };
        self.push_manifest(&sig_ref, &serde_json::to_vec(&manifest).unwrap_or_default()).await?;
        Ok(sig_ref)
    }
}

fn not_found(reference: &OciRef) -> OciError {
    let what = match &reference.target {
        super::Target::Tag(t) => format!("the tag `{t}`"),
        super::Target::Digest(d) => format!("the artifact {d}"),
    };
    OciError::NotFound { what }
}

fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|x| {
            matches!(
                x.code,
                oci_client::errors::OciErrorCode::ManifestUnknown | oci_client::errors::OciErrorCode::NotFound
            )
        }),
        _ => false,
    }
}

/// Sorts a client error into unreachable (the cache may stand in) and refused.
fn transport(reference: &OciRef, e: OciDistributionError) -> OciError {
    match e {
        OciDistributionError::RequestError(e) if super::tls::answers_plain_http(&e) => {
            OciError::AnswersPlainHttp { registry: reference.registry.clone(), loopback: reference.is_loopback() }
        }
        OciDistributionError::RequestError(e) => {
            OciError::Unreachable { registry: reference.registry.clone(), message: error_chain(&e) }
        }
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError { expected, actual }) => {
            OciError::DigestMismatch { what: "the manifest".into(), expected, found: actual }
        }
        OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
            OciError::Unauthorized { registry: reference.registry.clone() }
        }
        OciDistributionError::ServerError { code: 401 | 403, .. } => {
            OciError::Unauthorized { registry: reference.registry.clone() }
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|x| {
                matches!(
                    x.code,
                    oci_client::errors::OciErrorCode::Unauthorized | oci_client::errors::OciErrorCode::Denied
                )
            }) =>
        {
            OciError::Unauthorized { registry: reference.registry.clone() }
        }
        other => OciError::Registry { registry: reference.registry.clone(), message: other.to_string() },
    }
}

/// An error with its sources, on one line (a transport error's cause is where the detail is).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
