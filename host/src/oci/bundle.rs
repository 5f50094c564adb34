//! Sigstore bundles as cosign v3 attaches them: a DSSE-signed in-toto statement in an OCI referrer, built, signed and verified offline with a P-256 key.
//!
//! `cosign sign --key` (v3, or v2 with `--new-bundle-format`) signs an image by pushing an OCI
//! artifact whose `subject` is the signed manifest, `artifactType` and one layer of
//! [`BUNDLE_V03`]: a Sigstore bundle whose `dsseEnvelope` carries an in-toto statement
//! ([`STATEMENT_V1`], predicate type [`SIGN_PREDICATE`]) naming the manifest digest as its
//! subject, signed over the DSSE pre-authentication encoding. Registries without the referrers
//! API list such artifacts in an image index at the tag `sha256-<hex>` (the referrers tag schema).

use std::collections::BTreeMap;

use base64::Engine as _;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::EncodePublicKey;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::layout::{self, Descriptor};
use super::signature::{SignKey, SignatureError, TrustKey};

/// The media type of a Sigstore bundle v0.3: the referrer's `artifactType` and its one layer.
pub const BUNDLE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The DSSE payload type of an in-toto statement.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The `_type` of an in-toto statement v1, as cosign v3 writes it.
pub const STATEMENT_V1: &str = "https://in-toto.io/Statement/v1";
/// The earlier statement type, still read.
const STATEMENT_V01: &str = "https://in-toto.io/Statement/v0.1";
/// The predicate type of a `cosign sign` signature (as opposed to an attestation).
pub const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The config media type of a referrer artifact (its blob is `{}`).
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
/// The media type of an OCI image index (the referrers tag schema's tag holds one).
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Referrer annotation: what the bundle holds (`dsse-envelope`), as cosign writes it.
pub const ANNOTATION_CONTENT: &str = "dev.sigstore.bundle.content";
/// Referrer annotation: the statement's predicate type, as cosign writes it.
pub const ANNOTATION_PREDICATE: &str = "dev.sigstore.bundle.predicateType";
/// The largest bundle read (a key-signed bundle with a Rekor entry is a few KiB).
pub const MAX_BUNDLE: u64 = 256 * 1024;

/// A Sigstore bundle, as far as key-based verification reads it (protobuf JSON: camelCase
/// names, and the proto names protobuf JSON also accepts).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    #[serde(default, alias = "media_type")]
    media_type: String,
    #[serde(default, alias = "verification_material")]
    verification_material: Option<Material>,
    #[serde(default, alias = "dsse_envelope")]
    dsse_envelope: Option<Envelope>,
    #[serde(default, alias = "message_signature")]
    message_signature: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    #[serde(default, alias = "public_key")]
    public_key: Option<Value>,
    #[serde(default)]
    certificate: Option<Value>,
    #[serde(default, alias = "x509_certificate_chain")]
    x509_certificate_chain: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    payload: String,
    #[serde(default, alias = "payload_type")]
    payload_type: String,
    #[serde(default)]
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    #[serde(default)]
    sig: String,
}

/// The in-toto statement a `cosign sign` bundle signs for `digest` (`sha256:<hex>`).
pub fn statement(digest: &str) -> Vec<u8> {
    let (algorithm, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    serde_json::to_vec(&json!({
        "_type": STATEMENT_V1,
        "subject": [{ "digest": { algorithm: hex } }],
        "predicateType": SIGN_PREDICATE,
        "predicate": {},
    }))
    .unwrap_or_default()
}

/// The DSSE pre-authentication encoding: `DSSEv1 <len> <type> <len> <payload>`, what a DSSE
/// signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The key hint cosign writes: base64 of the SHA-256 of the key's DER (SubjectPublicKeyInfo).
pub fn key_hint(key: &VerifyingKey) -> String {
    let der = key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&der))
}

/// The bundle `cosign sign --key` writes for `digest`: a v0.3 bundle with the key's hint, no
/// transparency-log entry, and a DSSE envelope of [`statement`] signed with `key`.
pub fn sign(key: &SignKey, digest: &str) -> Vec<u8> {
    let payload = statement(digest);
    let sig: Signature = key.signing_key().sign(&pae(IN_TOTO, &payload));
    let b64 = &base64::engine::general_purpose::STANDARD;
    serde_json::to_vec(&json!({
        "mediaType": BUNDLE_V03,
        "verificationMaterial": { "publicKey": { "hint": key_hint(key.signing_key().verifying_key()) } },
        "dsseEnvelope": {
            "payload": b64.encode(&payload),
            "payloadType": IN_TOTO,
            "signatures": [{ "sig": b64.encode(sig.to_der().as_bytes()) }],
        },
    }))
    .unwrap_or_default()
}

/// Protobuf JSON bytes: standard or URL-safe base64, padded or not.
fn decode(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let config = GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let text = text.trim();
    GeneralPurpose::new(&base64::alphabet::STANDARD, config)
        .decode(text)
        .or_else(|_| GeneralPurpose::new(&base64::alphabet::URL_SAFE, config).decode(text))
        .ok()
}

/// Checks that `bundle` is a `cosign sign` signature of `digest` made with `key`: a v0.3 bundle
/// whose DSSE envelope is signed with the key (the hint is not trusted, and transparency-log
/// entries are not checked: the check is offline) and whose statement is a cosign signature
/// naming `digest`. The error says what the bundle is instead.
pub fn verify(key: &VerifyingKey, digest: &str, bundle: &[u8]) -> Result<(), String> {
    let b: Bundle =
        serde_json::from_slice(bundle).map_err(|_| "a bundle that is not Sigstore bundle JSON".to_string())?;
    if b.media_type != BUNDLE_V03 {
        return Err(format!("a bundle of media type `{}`, not `{BUNDLE_V03}`", b.media_type));
    }
    let material = b.verification_material.ok_or("a bundle without verification material")?;
    if material.public_key.is_none() {
        return Err(if material.certificate.is_some() || material.x509_certificate_chain.is_some() {
            "a keyless bundle (a certificate, not a key; only key-signed bundles are verified)".to_string()
        } else {
            "a bundle without a public key".to_string()
        });
    }
    let Some(envelope) = b.dsse_envelope else {
        return Err(match b.message_signature {
            Some(_) => "a message-signature bundle (as `cosign sign-blob` writes), not the DSSE envelope `cosign sign` writes for an image".into(),
            None => "a bundle without signed content".into(),
        });
    };
    if envelope.payload_type != IN_TOTO {
        return Err(format!("a DSSE envelope of payload type `{}`, not `{IN_TOTO}`", envelope.payload_type));
    }
    let payload = decode(&envelope.payload).ok_or("a DSSE payload that is not base64")?;
    let signed = pae(IN_TOTO, &payload);
    let valid = envelope.signatures.iter().any(|s| {
        decode(&s.sig)
            .and_then(|der| Signature::from_der(&der).ok())
            .is_some_and(|sig| key.verify(&signed, &sig).is_ok())
    });
    if !valid {
        return Err(if envelope.signatures.is_empty() {
            "a DSSE envelope without signatures".into()
        } else {
            "a bundle signed with another key".into()
        });
    }
    check_statement(digest, &payload)
}

/// Checks the signed statement: a cosign signature whose subjects include `digest`.
fn check_statement(digest: &str, payload: &[u8]) -> Result<(), String> {
    let s: Value = serde_json::from_slice(payload).map_err(|_| "a DSSE payload that is not JSON".to_string())?;
    let kind = s.get("_type").and_then(Value::as_str).unwrap_or("none");
    if kind != STATEMENT_V1 && kind != STATEMENT_V01 {
        return Err(format!("a DSSE payload of type `{kind}`, not an in-toto statement"));
    }
    let predicate = s.get("predicateType").and_then(Value::as_str).unwrap_or("none");
    if predicate != SIGN_PREDICATE {
        return Err(format!(
            "a signed attestation of predicate type `{predicate}`, not a cosign signature (`{SIGN_PREDICATE}`)"
        ));
    }
    let (algorithm, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    let subjects = s.get("subject").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut named = Vec::new();
    for subject in subjects {
        let Some(digests) = subject.get("digest").and_then(Value::as_object) else { continue };
        if digests.get(algorithm).and_then(Value::as_str) == Some(hex) {
            return Ok(());
        }
        named.extend(digests.iter().filter_map(|(a, h)| Some(format!("{a}:{}", h.as_str()?))));
    }
    let named = if named.is_empty() { "none".to_string() } else { named.join(", ") };
    Err(format!("a valid bundle of another artifact ({named})"))
}

/// Checks that one of the `.sig` tag's `layers` or one of `bundles` (each a bundle's bytes, or
/// why a referrer could not be read) is a signature of `digest` made with `key`; the error names
/// the digest, the key, and what each signature found is instead.
pub fn verify_any(
    key: &TrustKey,
    digest: &str,
    layers: &[(Descriptor, Vec<u8>)],
    bundles: &[Result<Vec<u8>, String>],
) -> Result<(), SignatureError> {
    let mut why = Vec::new();
    if !layers.is_empty() {
        match key.verify(digest, layers) {
            Ok(()) => return Ok(()),
            Err(SignatureError::NotSigned { why: w, .. }) => why.push(w),
            Err(e) => return Err(e),
        }
    }
    for b in bundles {
        match b.as_deref().map_err(Clone::clone).and_then(|b| verify(key.verifying_key(), digest, b)) {
            Ok(()) => return Ok(()),
            Err(w) => why.push(w),
        }
    }
    if why.is_empty() {
        why.push("neither a `.sig` signature nor a Sigstore bundle referrer".into());
    }
    why.dedup();
    Err(SignatureError::NotSigned { digest: digest.into(), key: key.describe(), why: why.join("; ") })
}

/// An OCI image manifest with the fields of OCI 1.1 artifacts (`artifactType`, `subject`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Referrer {
    /// Always 2.
    pub schema_version: u32,
    /// [`layout::MANIFEST`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// What the artifact is ([`BUNDLE_V03`] for a bundle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob ([`EMPTY_CONFIG`], `{}`).
    pub config: Descriptor,
    /// The layers (one bundle).
    pub layers: Vec<Descriptor>,
    /// The manifest it refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The config blob of a referrer artifact.
pub const EMPTY_JSON: &[u8] = b"{}";

/// The referrer manifest cosign pushes for `bundle`, attached to `subject` (the signed
/// manifest's descriptor).
pub fn referrer(subject: Descriptor, bundle: &[u8]) -> Referrer {
    Referrer {
        schema_version: 2,
        media_type: Some(layout::MANIFEST.into()),
        artifact_type: Some(BUNDLE_V03.into()),
        config: Descriptor::of(EMPTY_CONFIG, EMPTY_JSON),
        layers: vec![Descriptor::of(BUNDLE_V03, bundle)],
        subject: Some(subject),
        annotations: BTreeMap::from([
            (ANNOTATION_CONTENT.to_string(), "dsse-envelope".to_string()),
            (ANNOTATION_PREDICATE.to_string(), SIGN_PREDICATE.to_string()),
        ]),
    }
}

/// The referrers tag schema's index with `manifest` (a referrer's bytes) added: `index` is the
/// tag's current bytes (`None`: no tag yet). `Ok(None)` when it is listed already; an error
/// when the tag holds something other than an image index.
pub fn add_to_index(index: Option<&[u8]>, manifest: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let referrer: Referrer =
        serde_json::from_slice(manifest).map_err(|e| format!("the referrer is not a manifest: {e}"))?;
    let digest = layout::sha256_digest(manifest);
    let mut index: Value = match index {
        Some(bytes) => serde_json::from_slice(bytes).map_err(|_| "it is not JSON".to_string())?,
        None => json!({ "schemaVersion": 2, "mediaType": INDEX, "manifests": [] }),
    };
    if index.get("schemaVersion").and_then(Value::as_u64) != Some(2)
        || index.get("mediaType").and_then(Value::as_str).is_some_and(|m| m != INDEX)
    {
        return Err("it is not an OCI image index".into());
    }
    let manifests =
        index.get_mut("manifests").and_then(Value::as_array_mut).ok_or("it is an index without a manifests list")?;
    if manifests.iter().any(|m| m.get("digest").and_then(Value::as_str) == Some(digest.as_str())) {
        return Ok(None);
    }
    let mut entry = json!({
        "mediaType": layout::MANIFEST,
        "digest": digest,
        "size": manifest.len(),
    });
    if let Some(t) = &referrer.artifact_type {
        entry["artifactType"] = json!(t);
    }
    if !referrer.annotations.is_empty() {
        entry["annotations"] = json!(referrer.annotations);
    }
    manifests.push(entry);
    manifests.sort_by(|a, b| a.get("digest").and_then(Value::as_str).cmp(&b.get("digest").and_then(Value::as_str)));
    Ok(Some(serde_json::to_vec(&index).unwrap_or_default()))
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
