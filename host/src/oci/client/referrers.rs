//! Sigstore bundles as OCI referrers: finding them (the referrers API, or the referrers tag schema) and attaching one.

use oci_client::RegistryOperation;

use super::super::OciError;
use super::super::bundle::{self, BUNDLE_V03, INDEX, MAX_BUNDLE};
use super::super::layout::{self, Descriptor, Manifest, sha256_digest};
use super::super::reference::{OciRef, check_digest};
use super::super::signature::SignKey;
use super::{MAX_SIGNATURES, Registry, is_not_found, not_found, transport};

impl Registry {
    /// The Sigstore bundles attached to `digest` beside `reference`: for each referrer of
    /// artifact type [`BUNDLE_V03`] (at most [`MAX_SIGNATURES`]), its bundle's bytes (digest
    /// checked), or why it is not one. Asks the referrers API, and the referrers tag
    /// `sha256-<hex>` when the registry has no such API. Empty when there are none.
    pub(super) async fn referrer_bundles(
        &self,
        reference: &OciRef,
        digest: &str,
    ) -> Result<Vec<Result<Vec<u8>, String>>, OciError> {
        let subject = reference.at_digest(digest);
        let index =
            self.client.pull_referrers(&subject.to_client(), None).await.map_err(|e| transport(reference, e))?;
        let mut out = Vec::new();
        for entry in
            index.manifests.iter().filter(|m| m.artifact_type.as_deref() == Some(BUNDLE_V03)).take(MAX_SIGNATURES)
        {
            if check_digest(&entry.digest).is_err() {
                out.push(Err(format!("a referrer with the malformed digest `{}`", entry.digest)));
                continue;
            }
            let at = reference.at_digest(&entry.digest);
            let bytes = match self.manifest(&at).await {
                Ok(Some((bytes, _))) => bytes,
                Ok(None) => {
                    out.push(Err(format!("a referrer {} the registry lists but does not have", entry.digest)));
                    continue;
                }
                Err(OciError::DigestMismatch { .. }) => {
                    out.push(Err(format!("a referrer {} served with other bytes", entry.digest)));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let layer = match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.layers.len() == 1 && m.layers[0].media_type == BUNDLE_V03 => m.layers[0].clone(),
                _ => {
                    out.push(Err(format!("a referrer {} that is not one bundle layer", entry.digest)));
                    continue;
                }
            };
            if layer.size > MAX_BUNDLE {
                out.push(Err(format!("a bundle of {} bytes (the limit is {MAX_BUNDLE})", layer.size)));
                continue;
            }
            match self.blob(&at, &layer).await {
                Ok(b) => out.push(Ok(b)),
                Err(OciError::DigestMismatch { .. }) => {
                    out.push(Err(format!("a bundle {} served with other bytes", layer.digest)));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Signs the artifact `digest` of `reference`'s repository with `key` the way `cosign sign
    /// --key` (v3) does: a Sigstore bundle pushed as a referrer of the artifact, listed in the
    /// referrers tag `sha256-<hex>` when the registry does not list it itself. Returns the
    /// referrer's reference.
    pub async fn sign_bundle(&self, reference: &OciRef, digest: &str, key: &SignKey) -> Result<OciRef, OciError> {
        self.attach_bundle(reference, digest, bundle::sign(key, digest)).await
    }

    /// Attaches the Sigstore bundle `bundle` (its bytes, not checked) to the artifact `digest`
    /// as cosign v3 does, as [`Registry::sign_bundle`] describes. Returns the referrer's reference.
    pub async fn attach_bundle(&self, reference: &OciRef, digest: &str, bundle: Vec<u8>) -> Result<OciRef, OciError> {
        let image = reference.to_client();
        self.client.auth(&image, &self.auth, RegistryOperation::Push).await.map_err(|e| transport(reference, e))?;
        let signed = reference.at_digest(digest);
        let (bytes, _) = self.manifest(&signed).await?.ok_or_else(|| not_found(&signed))?;
        let media_type = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|m| m.get("mediaType").and_then(|t| t.as_str()).map(str::to_string))
            .unwrap_or_else(|| layout::MANIFEST.into());
        let subject =
            Descriptor { media_type, digest: digest.into(), size: bytes.len() as u64, annotations: Default::default() };
        let referrer = bundle::referrer(subject, &bundle);
        let manifest = serde_json::to_vec(&referrer).unwrap_or_default();
        let at = reference.at_digest(&sha256_digest(&manifest));
        self.client
            .push_blob(&image, bundle::EMPTY_JSON.to_vec(), &referrer.config.digest)
            .await
            .map_err(|e| transport(reference, e))?;
        self.client.push_blob(&image, bundle, &referrer.layers[0].digest).await.map_err(|e| transport(reference, e))?;
        self.push_manifest(&at, &manifest).await?;
        self.list_referrer(&signed, &manifest).await?;
        Ok(at)
    }

    /// Makes sure the referrer `manifest` of `subject` is listed: a registry with the referrers
    /// API lists it itself; otherwise it is added to the referrers tag's index, as the
    /// distribution spec asks of a client.
    async fn list_referrer(&self, subject: &OciRef, manifest: &[u8]) -> Result<(), OciError> {
        let digest = sha256_digest(manifest);
        let listed = self.client.pull_referrers(&subject.to_client(), None).await.map_err(|e| transport(subject, e))?;
        if listed.manifests.iter().any(|m| m.digest == digest) {
            return Ok(());
        }
        let tag = subject.at_tag(&subject.digest().unwrap_or_default().replacen(':', "-", 1));
        let current = match self.client.pull_manifest_raw(&tag.to_client(), &self.auth, &[INDEX]).await {
            Ok((bytes, _)) if bytes.len() > layout::MAX_MANIFEST => {
                return Err(OciError::Refused(format!(
                    "the referrers tag {tag} is {} bytes; the limit is {}",
                    bytes.len(),
                    layout::MAX_MANIFEST
                )));
            }
            Ok((bytes, _)) => Some(bytes.to_vec()),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(transport(&tag, e)),
        };
        let index = bundle::add_to_index(current.as_deref(), manifest).map_err(|why| {
            OciError::Refused(format!(
                "the referrers tag {tag} cannot list the signature: {why}; remove the tag or use a registry with the referrers API"
            ))
        })?;
        let Some(index) = index else { return Ok(()) };
        let content_type = reqwest::header::HeaderValue::from_static(INDEX);
        self.client.push_manifest_raw(&tag.to_client(), index, content_type).await.map_err(|e| transport(&tag, e))?;
        Ok(())
    }
}
