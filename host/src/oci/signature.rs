//! Cosign key-based signatures (ECDSA P-256): the simple-signing payload, signing, and offline verification.
//!
//! The layout is cosign's: the signatures of the artifact `sha256:<hex>` live in the same
//! repository at the tag `sha256-<hex>.sig`, an OCI manifest whose layers are simple-signing
//! payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each with its base64 ASN.1
//! signature in the annotation `dev.cosignproject.cosign/signature`. `cosign sign --key` writes
//! the same, and `cosign verify --key KEY.pub --insecure-ignore-tlog` reads what Steward writes.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use serde_json::json;

use super::layout::sha256_digest;

/// The media type of a simple-signing payload layer.
pub const PAYLOAD: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const ANNOTATION_SIGNATURE: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` of a cosign image signature.
const SIGNATURE_TYPE: &str = "cosign container image signature";

/// Why a key cannot be used, or an artifact's signature does not hold.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// The key file could not be read.
    #[error("cannot read the key {}: {message}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The key file is not a key of the right type.
    #[error("{}: {message}", .file.display())]
    BadKey {
        /// The file.
        file: PathBuf,
        /// What is wrong and what to use.
        message: String,
    },
    /// No signature made with the expected key covers the artifact.
    #[error(
        "{digest} is not signed with the key {key}: {why}; sign it with `steward plugin sign REF --key` (or `cosign sign --key`) using the private half of that key"
    )]
    NotSigned {
        /// The artifact's manifest digest.
        digest: String,
        /// The expected key: its file and fingerprint.
        key: String,
        /// What was found instead.
        why: String,
    },
}

/// The public key a source's artifacts must be signed with.
#[derive(Clone, Debug)]
pub struct TrustKey {
    file: PathBuf,
    fingerprint: String,
    key: VerifyingKey,
}

impl TrustKey {
    /// Reads a PEM public key (`-----BEGIN PUBLIC KEY-----`, ECDSA P-256), as `cosign
    /// generate-key-pair` writes `cosign.pub`.
    pub fn load(file: &Path) -> Result<Self, SignatureError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| SignatureError::Read { file: file.into(), message: e.to_string() })?;
        Self::from_pem(file, &text)
    }

    /// Reads `text` as the PEM public key of `file`.
    pub fn from_pem(file: &Path, text: &str) -> Result<Self, SignatureError> {
        let key = VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| SignatureError::BadKey {
            file: file.into(),
            message: format!("not a PEM ECDSA P-256 public key ({e}); use the cosign.pub of `cosign generate-key-pair` or the public half of a P-256 key"),
        })?;
        Ok(Self { file: file.into(), fingerprint: fingerprint(&key), key })
    }

    /// `sha256:<first 16 hex digits>` of the key's DER encoding, as messages show it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The key as messages name it: `FILE (sha256:…)`.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.file.display(), self.fingerprint)
    }

    /// The key itself, for the other signature forms ([`super::bundle`]).
    pub(super) fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// Checks that one of `layers` (a `.sig` manifest's layers, each with its payload bytes) is a
    /// payload for `digest` signed with this key.
    pub fn verify(&self, digest: &str, layers: &[(super::layout::Descriptor, Vec<u8>)]) -> Result<(), SignatureError> {
        let mut why = Vec::new();
        for (desc, payload) in layers {
            match self.verify_one(digest, desc, payload) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            }
        }
        if why.is_empty() {
            why.push("no signature layers".into());
        }
        why.dedup();
        Err(SignatureError::NotSigned { digest: digest.into(), key: self.describe(), why: why.join("; ") })
    }

    fn verify_one(&self, digest: &str, desc: &super::layout::Descriptor, payload: &[u8]) -> Result<(), String> {
        if desc.media_type != PAYLOAD {
            return Err(format!("a layer of media type {}", desc.media_type));
        }
        if sha256_digest(payload) != desc.digest {
            return Err("a payload whose bytes do not match its digest".into());
        }
        let sig = desc.annotations.get(ANNOTATION_SIGNATURE).ok_or("a payload without a signature annotation")?;
        let der = base64::engine::general_purpose::STANDARD
            .decode(sig.trim())
            .map_err(|_| "a signature that is not base64".to_string())?;
        let sig =
            Signature::from_der(&der).map_err(|_| "a signature that is not an ASN.1 ECDSA signature".to_string())?;
        self.key.verify(payload, &sig).map_err(|_| "a signature made with another key".to_string())?;
        let p: serde_json::Value =
            serde_json::from_slice(payload).map_err(|_| "a payload that is not JSON".to_string())?;
        let signed = p.pointer("/critical/image/docker-manifest-digest").and_then(|d| d.as_str());
        if signed != Some(digest) {
            return Err(format!("a valid signature of another artifact ({})", signed.unwrap_or("none")));
        }
        if p.pointer("/critical/type").and_then(|t| t.as_str()) != Some(SIGNATURE_TYPE) {
            return Err("a payload that is not a cosign image signature".into());
        }
        Ok(())
    }
}

/// A private key that signs artifacts.
pub struct SignKey {
    key: SigningKey,
}

impl std::fmt::Debug for SignKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignKey(..)")
    }
}

impl SignKey {
    /// Reads a PEM ECDSA P-256 private key: PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 (`BEGIN EC
    /// PRIVATE KEY`). Cosign's own encrypted format is not read.
    pub fn load(file: &Path) -> Result<Self, SignatureError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| SignatureError::Read { file: file.into(), message: e.to_string() })?;
        let bad = |message: String| SignatureError::BadKey { file: file.into(), message };
        if text.contains("ENCRYPTED") {
            return Err(bad("an encrypted key (such as cosign.key) is not read; use an unencrypted PEM P-256 key (`openssl ecparam -name prime256v1 -genkey | openssl pkcs8 -topk8 -nocrypt`), which `cosign import-key-pair --key` also imports".into()));
        }
        let key = SigningKey::from_pkcs8_pem(text.trim())
            .or_else(|_| p256::SecretKey::from_sec1_pem(text.trim()).map(SigningKey::from))
            .map_err(|_| bad("not a PEM ECDSA P-256 private key (PKCS#8 or SEC1)".into()))?;
        Ok(Self { key })
    }

    /// The matching public key as PEM, for `cosign verify --key` or a source's `key:`.
    pub fn public_pem(&self) -> String {
        self.key.verifying_key().to_public_key_pem(Default::default()).unwrap_or_default()
    }

    /// The key itself, for the other signature forms ([`super::bundle`]).
    pub(super) fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// The fingerprint of the public half, as [`TrustKey::fingerprint`] shows it.
    pub fn fingerprint(&self) -> String {
        fingerprint(self.key.verifying_key())
    }

    /// The simple-signing payload for `digest` in `repository` (`registry/path`), and its
    /// base64 ASN.1 signature.
    pub fn sign(&self, repository: &str, digest: &str) -> (Vec<u8>, String) {
        let payload = payload(repository, digest);
        let sig: Signature = self.key.sign(&payload);
        (payload, base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes()))
    }
}

/// The simple-signing payload cosign writes for `digest` in `repository`.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": digest },
            "type": SIGNATURE_TYPE,
        },
        "optional": null,
    }))
    .unwrap_or_default()
}

/// The tag holding the signatures of `digest` (`sha256:<hex>` → `sha256-<hex>.sig`).
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

fn fingerprint(key: &VerifyingKey) -> String {
    let der = key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
    let full = sha256_digest(&der);
    full[..23].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::layout::Descriptor;

    fn key_pair(dir: &Path, name: &str) -> (SignKey, TrustKey) {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let private = dir.join(format!("{name}.key"));
        std::fs::write(&private, kp.serialize_pem()).unwrap();
        let sign = SignKey::load(&private).unwrap();
        let public = dir.join(format!("{name}.pub"));
        std::fs::write(&public, sign.public_pem()).unwrap();
        (sign, TrustKey::load(&public).unwrap())
    }

    fn layer(payload: &[u8], sig: &str) -> (Descriptor, Vec<u8>) {
        let mut d = Descriptor::of(PAYLOAD, payload);
        d.annotations.insert(ANNOTATION_SIGNATURE.into(), sig.into());
        (d, payload.to_vec())
    }

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_signature_verifies_with_its_key_and_not_another() {
        let dir = tempfile::tempdir().unwrap();
        let (sign, trust) = key_pair(dir.path(), "a");
        let (_, other) = key_pair(dir.path(), "b");
        assert_eq!(sign.fingerprint(), trust.fingerprint());
        let (payload, sig) = sign.sign("localhost:5000/p", D);
        trust.verify(D, &[layer(&payload, &sig)]).unwrap();
        let e = other.verify(D, &[layer(&payload, &sig)]).unwrap_err().to_string();
        assert!(e.contains("b.pub") && e.contains(other.fingerprint()) && e.contains("another key"), "{e}");
        let e = trust.verify(D, &[]).unwrap_err().to_string();
        assert!(e.contains("no signature layers"), "{e}");
    }

    #[test]
    fn a_signature_of_another_artifact_or_a_tampered_payload_does_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let (sign, trust) = key_pair(dir.path(), "a");
        let other = D.replace('0', "f");
        let (payload, sig) = sign.sign("localhost:5000/p", &other);
        let e = trust.verify(D, &[layer(&payload, &sig)]).unwrap_err().to_string();
        assert!(e.contains("another artifact"), "{e}");
        let (mut d, mut bytes) = layer(&payload, &sig);
        bytes[3] ^= 1;
        assert!(trust.verify(D, &[(d.clone(), bytes)]).unwrap_err().to_string().contains("do not match"));
        d.annotations.insert(ANNOTATION_SIGNATURE.into(), "not base64!".into());
        assert!(trust.verify(&other, &[(d, payload)]).unwrap_err().to_string().contains("not base64"));
    }

    #[test]
    fn keys_of_the_wrong_kind_say_what_to_use() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k.pem");
        std::fs::write(&f, "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nxx\n").unwrap();
        assert!(SignKey::load(&f).unwrap_err().to_string().contains("import-key-pair"));
        std::fs::write(&f, "hello").unwrap();
        assert!(TrustKey::load(&f).unwrap_err().to_string().contains("P-256 public key"));
        assert!(TrustKey::load(&dir.path().join("none")).unwrap_err().to_string().contains("cannot read"));
        assert_eq!(signature_tag(D), format!("sha256-{}.sig", &D[7..]));
    }
}
