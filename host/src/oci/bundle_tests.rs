use std::path::Path;

use super::*;

// Fixed vectors made by sigstore-js (`testing/sigstore-js/peer.js sign`, @sigstore/sign 5.1.0)
// with one P-256 key, for D: a bundle of the key, one of another key, one naming D2.
const KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEnxoStEzkcmvqMyNl3u3MGt6CpIjB
Dtn9hS2ITltUFeZAwoday7SPm/LBG173Em972qDdUNwPRMv/u1OOzTC6gg==
-----END PUBLIC KEY-----
";
const D: &str = "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";
const D2: &str = "sha256:a1fce4363854ff888cff4b8e7875d600c2682390412a8cf79b37d0b11148b0fa";
const SIGSTORE_JS: &str = r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc="},"timestampVerificationData":{}},"dsseEnvelope":{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJzdWJqZWN0IjpbeyJkaWdlc3QiOnsic2hhMjU2IjoiMmQ3MTE2NDJiNzI2YjA0NDAxNjI3Y2E5ZmJhYzMyZjVjODUzMGZiMTkwM2NjNGRiMDIyNTg3MTc5MjFhNDg4MSJ9fV0sInByZWRpY2F0ZVR5cGUiOiJodHRwczovL3NpZ3N0b3JlLmRldi9jb3NpZ24vc2lnbi92MSIsInByZWRpY2F0ZSI6e319","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"MEYCIQDIrq6SylWil49tCaf+gpHh35/yK1AwVtZwaH1mEJqkBgIhAINw8C0U4diV0nVQOy8rq6w0EHwgjghgnbEyhH0nKNFk","keyid":"LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc="}]}}"#;
const OTHER_KEY: &str = r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"k6XOV47RRy0y6xeu7wb3R+nn6trV70VKlak5QEIfCfU="},"timestampVerificationData":{}},"dsseEnvelope":{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJzdWJqZWN0IjpbeyJkaWdlc3QiOnsic2hhMjU2IjoiMmQ3MTE2NDJiNzI2YjA0NDAxNjI3Y2E5ZmJhYzMyZjVjODUzMGZiMTkwM2NjNGRiMDIyNTg3MTc5MjFhNDg4MSJ9fV0sInByZWRpY2F0ZVR5cGUiOiJodHRwczovL3NpZ3N0b3JlLmRldi9jb3NpZ24vc2lnbi92MSIsInByZWRpY2F0ZSI6e319","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"MEUCIBkcziAGunoAVDTmN/ZIh+QiNTTrMkNxrVr9Q9q4kZo8AiEAnAVHml61K8MeHkR5KqqZB7ULY35/IBfiRbytRiKpWZo=","keyid":"k6XOV47RRy0y6xeu7wb3R+nn6trV70VKlak5QEIfCfU="}]}}"#;
const OTHER_DIGEST: &str = r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc="},"timestampVerificationData":{}},"dsseEnvelope":{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJzdWJqZWN0IjpbeyJkaWdlc3QiOnsic2hhMjU2IjoiYTFmY2U0MzYzODU0ZmY4ODhjZmY0YjhlNzg3NWQ2MDBjMjY4MjM5MDQxMmE4Y2Y3OWIzN2QwYjExMTQ4YjBmYSJ9fV0sInByZWRpY2F0ZVR5cGUiOiJodHRwczovL3NpZ3N0b3JlLmRldi9jb3NpZ24vc2lnbi92MSIsInByZWRpY2F0ZSI6e319","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"MEUCIQCXYTlI21pon/DhpM4v4bbW2ZGj5aP07ZhaQasHAA0MdwIgA/93Dv1PnC8+1OlJI1G5uYi6EQRxoVIaVsjnD88Dc8Y=","keyid":"LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc="}]}}"#;
// The shape cosign v3 writes (protobuf JSON from sigstore-go: no `keyid`, the statement with
// protojson's spaces and an empty `annotations`, a Rekor entry), signed with KEY by Node's
// crypto over the DSSE PAE. The log entry is a stand-in: it is not checked offline.
const COSIGN_SHAPED: &str = r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc="},"tlogEntries":[{"logIndex":"123","logId":{"keyId":"wNI9atQGlz+VWfO6LRygH4QUfY/8W4RFwiT5i5WRgB0="},"kindVersion":{"kind":"dsse","version":"0.0.1"},"integratedTime":"1760000000","inclusionPromise":{"signedEntryTimestamp":"MEUCIQ=="},"canonicalizedBody":"e30="}]},"dsseEnvelope":{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCAic3ViamVjdCI6W3siZGlnZXN0Ijp7InNoYTI1NiI6IjJkNzExNjQyYjcyNmIwNDQwMTYyN2NhOWZiYWMzMmY1Yzg1MzBmYjE5MDNjYzRkYjAyMjU4NzE3OTIxYTQ4ODEifSwgImFubm90YXRpb25zIjp7fX1dLCAicHJlZGljYXRlVHlwZSI6Imh0dHBzOi8vc2lnc3RvcmUuZGV2L2Nvc2lnbi9zaWduL3YxIiwgInByZWRpY2F0ZSI6e319","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"MEYCIQD9Hd4zISzDc0s9y/h+mUAcv0/q1eNgfyE90Nc5NYUKPgIhAJByf9Uy3ONHZuQKWIsjpbAbwAIqQkFumNdpTvvsmcXs"}]}}"#;

fn trust() -> TrustKey {
    TrustKey::from_pem(Path::new("keys/cosign.pub"), KEY).unwrap()
}

fn key_pair(dir: &Path, name: &str) -> (SignKey, TrustKey) {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let private = dir.join(format!("{name}.key"));
    std::fs::write(&private, kp.serialize_pem()).unwrap();
    let sign = SignKey::load(&private).unwrap();
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&public, sign.public_pem()).unwrap();
    (sign, TrustKey::load(&public).unwrap())
}

/// A bundle of `content` (a JSON object with the bundle's other fields) over `payload`, signed
/// with `key` as a DSSE envelope of `payload_type`.
fn signed(key: &SignKey, payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let b64 = &base64::engine::general_purpose::STANDARD;
    let sig: Signature = key.signing_key().sign(&pae(payload_type, payload));
    serde_json::to_vec(&json!({
        "mediaType": BUNDLE_V03,
        "verificationMaterial": { "publicKey": { "hint": "" } },
        "dsseEnvelope": {
            "payload": b64.encode(payload),
            "payloadType": payload_type,
            "signatures": [{ "sig": b64.encode(sig.to_der().as_bytes()) }],
        },
    }))
    .unwrap()
}

#[test]
fn a_sigstore_js_bundle_verifies_with_its_key_only_and_for_its_digest_only() {
    let key = trust();
    verify(key.verifying_key(), D, SIGSTORE_JS.as_bytes()).unwrap();
    assert_eq!(verify(key.verifying_key(), D, OTHER_KEY.as_bytes()).unwrap_err(), "a bundle signed with another key");
    assert_eq!(
        verify(key.verifying_key(), D, OTHER_DIGEST.as_bytes()).unwrap_err(),
        format!("a valid bundle of another artifact ({D2})")
    );
    // The hint is what sigstore-js computed for the key too.
    assert_eq!(key_hint(key.verifying_key()), "LQg9GsUhI/WkwqMTn7ArUoVVgPRmxMjWpOEQdcTsAnc=");
}

#[test]
fn a_cosign_shaped_bundle_verifies_offline_and_a_changed_payload_does_not() {
    let key = trust();
    verify(key.verifying_key(), D, COSIGN_SHAPED.as_bytes()).unwrap();
    // The statement with one subject digit changed: still base64 and JSON, but not what was signed.
    let mut b: Value = serde_json::from_str(COSIGN_SHAPED).unwrap();
    let b64 = &base64::engine::general_purpose::STANDARD;
    let payload = b64.decode(b["dsseEnvelope"]["payload"].as_str().unwrap()).unwrap();
    let changed = String::from_utf8(payload).unwrap().replacen("2d71", "2d72", 1);
    b["dsseEnvelope"]["payload"] = json!(b64.encode(changed));
    let e = verify(key.verifying_key(), D, &serde_json::to_vec(&b).unwrap()).unwrap_err();
    assert_eq!(e, "a bundle signed with another key");
    // URL-safe, unpadded base64 (which protobuf JSON also accepts) reads the same.
    let mut b: Value = serde_json::from_str(SIGSTORE_JS).unwrap();
    let url = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let sig = b64.decode(b["dsseEnvelope"]["signatures"][0]["sig"].as_str().unwrap()).unwrap();
    b["dsseEnvelope"]["signatures"][0]["sig"] = json!(url.encode(sig));
    verify(key.verifying_key(), D, &serde_json::to_vec(&b).unwrap()).unwrap();
}

#[test]
fn what_is_not_a_key_signed_cosign_signature_says_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (sign_key, trust) = key_pair(dir.path(), "a");
    let k = trust.verifying_key();
    let reason = |bundle: &[u8]| verify(k, D, bundle).unwrap_err();

    // An attestation made with the key (cosign attest) is not a signature of the artifact.
    let attestation = serde_json::to_vec(&json!({
        "_type": STATEMENT_V1,
        "subject": [{ "digest": { "sha256": &D[7..] } }],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {},
    }))
    .unwrap();
    assert!(
        reason(&signed(&sign_key, IN_TOTO, &attestation)).contains("predicate type `https://slsa.dev/provenance/v1`")
    );
    assert!(reason(&signed(&sign_key, "text/plain", b"hello")).contains("payload type `text/plain`"));
    assert!(reason(&signed(&sign_key, IN_TOTO, b"{\"_type\":\"x\"}")).contains("not an in-toto statement"));

    let mut b: Value = serde_json::from_slice(&sign(&sign_key, D)).unwrap();
    b["mediaType"] = json!("application/vnd.dev.sigstore.bundle+json;version=0.1");
    assert!(
        reason(&serde_json::to_vec(&b).unwrap())
            .contains("media type `application/vnd.dev.sigstore.bundle+json;version=0.1`")
    );

    let mut b: Value = serde_json::from_slice(&sign(&sign_key, D)).unwrap();
    b["verificationMaterial"] = json!({ "certificate": { "rawBytes": "MIIB" } });
    assert!(reason(&serde_json::to_vec(&b).unwrap()).contains("keyless bundle"));

    let mut b: Value = serde_json::from_slice(&sign(&sign_key, D)).unwrap();
    b.as_object_mut().unwrap().remove("dsseEnvelope");
    b["messageSignature"] = json!({ "messageDigest": { "algorithm": "SHA2_256", "digest": "" }, "signature": "" });
    assert!(reason(&serde_json::to_vec(&b).unwrap()).contains("message-signature bundle"));

    let mut b: Value = serde_json::from_slice(&sign(&sign_key, D)).unwrap();
    b["dsseEnvelope"]["signatures"] = json!([]);
    assert!(reason(&serde_json::to_vec(&b).unwrap()).contains("without signatures"));
    assert!(reason(b"not json").contains("not Sigstore bundle JSON"));
}

#[test]
fn a_steward_bundle_is_the_cosign_form_and_verifies_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let (sign_key, trust) = key_pair(dir.path(), "a");
    let (_, other) = key_pair(dir.path(), "b");
    let bundle = sign(&sign_key, D);
    verify(trust.verifying_key(), D, &bundle).unwrap();
    assert_eq!(verify(other.verifying_key(), D, &bundle).unwrap_err(), "a bundle signed with another key");
    assert!(verify(trust.verifying_key(), D2, &bundle).unwrap_err().contains(&format!("another artifact ({D})")));

    let b: Value = serde_json::from_slice(&bundle).unwrap();
    assert_eq!(b["mediaType"], BUNDLE_V03);
    assert_eq!(b["verificationMaterial"]["publicKey"]["hint"], key_hint(trust.verifying_key()));
    assert_eq!(b["dsseEnvelope"]["payloadType"], IN_TOTO);
    let s: Value = serde_json::from_slice(&statement(D)).unwrap();
    assert_eq!(s["_type"], STATEMENT_V1);
    assert_eq!(s["predicateType"], SIGN_PREDICATE);
    assert_eq!(s["subject"][0]["digest"]["sha256"], &D[7..]);
    // The DSSE specification's own example of the PAE.
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    );
}

#[test]
fn the_sig_tag_and_the_bundles_are_tried_and_every_reason_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let (sign_key, trust) = key_pair(dir.path(), "a");
    let (other_key, _) = key_pair(dir.path(), "b");
    let e = verify_any(&trust, D, &[], &[]).unwrap_err().to_string();
    assert!(
        e.contains(D) && e.contains("a.pub") && e.contains("neither a `.sig` signature nor a Sigstore bundle"),
        "{e}"
    );
    let bundles = [Err("a referrer sha256:ab served with other bytes".to_string()), Ok(sign(&other_key, D))];
    let e = verify_any(&trust, D, &[], &bundles).unwrap_err().to_string();
    assert!(e.contains("served with other bytes; a bundle signed with another key"), "{e}");
    verify_any(&trust, D, &[], &[Ok(sign(&other_key, D)), Ok(sign(&sign_key, D))]).unwrap();
    // A good `.sig` layer is enough on its own.
    let (payload, sig) = sign_key.sign("localhost:5000/p", D);
    let mut layer = Descriptor::of(super::super::signature::PAYLOAD, &payload);
    layer.annotations.insert(super::super::signature::ANNOTATION_SIGNATURE.into(), sig);
    verify_any(&trust, D, &[(layer, payload)], &[]).unwrap();
}

#[test]
fn the_referrer_manifest_and_the_referrers_tag_index() {
    let subject = Descriptor::of(layout::MANIFEST, b"{}");
    let r = referrer(subject.clone(), b"bundle");
    assert_eq!(r.artifact_type.as_deref(), Some(BUNDLE_V03));
    assert_eq!(r.subject.as_ref(), Some(&subject));
    // The OCI empty descriptor's well-known digest.
    assert_eq!(r.config.digest, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
    assert_eq!(r.config.media_type, EMPTY_CONFIG);
    assert_eq!(r.layers, vec![Descriptor::of(BUNDLE_V03, b"bundle")]);
    let m = serde_json::to_vec(&r).unwrap();
    let digest = layout::sha256_digest(&m);

    let index = add_to_index(None, &m).unwrap().unwrap();
    let v: Value = serde_json::from_slice(&index).unwrap();
    assert_eq!(v["mediaType"], INDEX);
    assert_eq!(v["manifests"][0]["digest"], digest.as_str());
    assert_eq!(v["manifests"][0]["artifactType"], BUNDLE_V03);
    assert_eq!(v["manifests"][0]["size"], m.len());
    assert_eq!(add_to_index(Some(&index), &m).unwrap(), None, "listed once");

    let m2 = serde_json::to_vec(&referrer(subject, b"another")).unwrap();
    let v: Value = serde_json::from_slice(&add_to_index(Some(&index), &m2).unwrap().unwrap()).unwrap();
    let digests: Vec<&str> = v["manifests"].as_array().unwrap().iter().map(|e| e["digest"].as_str().unwrap()).collect();
    assert_eq!(digests.len(), 2);
    assert!(digests.windows(2).all(|w| w[0] < w[1]), "sorted by digest: {digests:?}");
    assert!(
        add_to_index(Some(br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#), &m)
            .unwrap_err()
            .contains("not an OCI image index")
    );
}
