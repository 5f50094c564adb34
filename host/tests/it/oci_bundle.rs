//! Sigstore bundles attached as OCI referrers (cosign v3's signatures) against a real registry, with sigstore-js as the independent peer.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::wasm;
use crate::oci_host::{host_of, wait_plugin};
use crate::oci_registry::{Options, TestRegistry, key_pair, push, steward};
use steward::oci::bundle::{BUNDLE_V03, INDEX};
use steward::oci::{OciRef, Registry};

/// The `node_modules` of sigstore-js (`testing/sigstore-js/install`), installed on first use.
fn sigstore_js() -> PathBuf {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/sigstore-js/install");
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed:\n{}", script.display(), String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs `testing/sigstore-js/peer.js` with `args`; returns (exit code, stdout, stderr).
fn peer(args: &[&str]) -> (i32, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/sigstore-js/peer.js");
    let out = Command::new("node").arg(script).args(args).env("NODE_PATH", sigstore_js()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `steward ARGS` with the flags that reach `reg`.
fn with_registry(reg: &TestRegistry, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(reg.cli_args());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    steward(&all)
}

/// GET `/v2/{path}` of the (plain HTTP) registry, as an independent reader: status and body.
async fn get(reg: &TestRegistry, path: &str, accept: &str) -> (u16, Vec<u8>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/v2/{path}", reg.port))
        .header("Accept", accept)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

/// The bundles the referrers tag of `digest` lists in `repo`, read straight from the registry:
/// for each, its referrer manifest and the bundle's bytes.
async fn attached(reg: &TestRegistry, repo: &str, digest: &str) -> Vec<(Value, Vec<u8>)> {
    let (status, body) = get(reg, &format!("{repo}/manifests/{}", digest.replacen(':', "-", 1)), INDEX).await;
    assert_eq!(status, 200, "the referrers tag of {digest}: {}", String::from_utf8_lossy(&body));
    let index: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(index["mediaType"], INDEX);
    let mut out = Vec::new();
    for entry in index["manifests"].as_array().unwrap() {
        assert_eq!(entry["artifactType"], BUNDLE_V03, "{index}");
        let m = entry["digest"].as_str().unwrap();
        let (_, body) = get(reg, &format!("{repo}/manifests/{m}"), steward::oci::layout::MANIFEST).await;
        let manifest: Value = serde_json::from_slice(&body).unwrap();
        let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_string();
        let (status, bundle) = get(reg, &format!("{repo}/blobs/{layer}"), "*/*").await;
        assert_eq!(status, 200);
        out.push((manifest, bundle));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_from_plugin_sign_is_the_cosign_v3_form_and_verifies_with_its_key_only() {
    let reg = TestRegistry::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (a_private, a_public) = key_pair(dir.path(), "a");
    let (b_private, b_public) = key_pair(dir.path(), "b");
    let tag = reg.reference("steward/noop:1");
    let digest = push(&reg, &wasm("noop"), &tag);
    // This registry (distribution 2.8) has no referrers API: the referrers tag schema it is.
    let (status, _) = get(&reg, &format!("steward/noop/referrers/{digest}"), INDEX).await;
    assert_eq!(status, 404);

    let (code, out, err) =
        with_registry(&reg, &["plugin", "sign", &tag, "--key", a_private.to_str().unwrap(), "--bundle"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().ends_with(&digest), "{out}");
    assert!(err.contains("a Sigstore bundle referrer is at"), "{err}");

    // What the registry holds: one referrer of the artifact, the shape cosign v3 writes.
    let found = attached(&reg, "steward/noop", &digest).await;
    assert_eq!(found.len(), 1);
    let (manifest, bundle) = &found[0];
    assert_eq!(manifest["artifactType"], BUNDLE_V03);
    assert_eq!(manifest["subject"]["digest"], digest.as_str());
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.empty.v1+json");
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    assert_eq!(manifest["layers"][0]["mediaType"], BUNDLE_V03);
    assert_eq!(manifest["annotations"]["dev.sigstore.bundle.predicateType"], "https://sigstore.dev/cosign/sign/v1");
    // No `.sig` tag was written.
    let (status, _) = get(&reg, &format!("steward/noop/manifests/sha256-{}.sig", &digest[7..]), "*/*").await;
    assert_eq!(status, 404);

    // sigstore-js verifies the bundle with the key, offline, and refuses it with another key.
    let file = dir.path().join("bundle.json");
    std::fs::write(&file, bundle).unwrap();
    let (code, out, err) = peer(&["verify", file.to_str().unwrap(), a_public.to_str().unwrap(), &digest]);
    assert_eq!((code, out.trim()), (0, "verified"), "{err}");
    let (code, _, err) = peer(&["verify", file.to_str().unwrap(), b_public.to_str().unwrap(), &digest]);
    assert_ne!(code, 0, "sigstore-js accepted the bundle with another key");
    assert!(err.contains("signature"), "{err}");

    // Steward verifies it with the key, by tag and by digest; another key is refused, naming the
    // digest and what was found.
    for reference in [tag.clone(), format!("{}@{digest}", reg.reference("steward/noop"))] {
        let (code, _, err) = with_registry(
            &reg,
            &["plugin", "pull", &reference, "-o", "/dev/null", "--key", a_public.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("signature verified with"), "{err}");
    }
    let (code, _, err) =
        with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null", "--key", b_public.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains(&format!("{digest} is not signed with the key {}", b_public.display())), "{err}");
    assert!(err.contains("a bundle signed with another key"), "{err}");

    // A `.sig` signature of the wrong key does not hide a good bundle; a second bundle is listed
    // beside the first.
    let (code, _, err) = with_registry(&reg, &["plugin", "sign", &tag, "--key", b_private.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = with_registry(&reg, &["plugin", "inspect", &tag, "--key", a_public.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        with_registry(&reg, &["plugin", "sign", &tag, "--key", b_private.to_str().unwrap(), "--bundle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(attached(&reg, "steward/noop", &digest).await.len(), 2);
    let (code, _, err) =
        with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null", "--key", b_public.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_refuses_bundles_of_another_key_or_digest_and_loads_one_sigstore_js_made() {
    // Behind basic auth and TLS: the referrers are read with the source's credentials.
    let reg = TestRegistry::start(Options { tls: true, auth: true }).await;
    let keys = tempfile::tempdir().unwrap();
    let (a_private, a_public) = key_pair(keys.path(), "a");
    let (b_private, _) = key_pair(keys.path(), "b");
    let fingerprint = steward::oci::TrustKey::load(&a_public).unwrap().fingerprint().to_string();
    let tag = reg.reference("steward/noop:signed");
    let digest = push(&reg, &wasm("noop"), &tag);
    let other = push(&reg, &wasm("noop-v2"), &reg.reference("steward/noop:other"));
    let r = OciRef::parse(&tag).unwrap();
    let registry = Registry::new(&r, &reg.access()).unwrap();
    let mut h = host_of(&reg, &tag, &format!("    key: {}\n", a_public.display()));
    h.start().await;
    let p = wait_plugin(&h, &tag, "refused as unsigned", |p| p["state"] == "Failed").await;
    assert!(p["message"].as_str().unwrap().contains("nor a Sigstore bundle referrer"), "{p}");

    // (b) A bundle signed with another key: refused, the message naming the digest and the key.
    registry.sign_bundle(&r, &digest, &steward::oci::SignKey::load(&b_private).unwrap()).await.unwrap();
    let p = wait_plugin(&h, &tag, "refused: a bundle of another key", |p| {
        p["message"].as_str().is_some_and(|m| m.contains("a bundle signed with another key"))
    })
    .await;
    assert_eq!(p["state"], "Failed");
    let m = p["message"].as_str().unwrap();
    assert!(m.contains(&format!("{digest} is not signed with the key {} ({fingerprint})", a_public.display())), "{m}");

    // (c) A bundle made with the key, by sigstore-js, of another artifact: refused, naming it.
    let (code, bundle, err) = peer(&["sign", a_private.to_str().unwrap(), &other]);
    assert_eq!(code, 0, "{err}");
    registry.attach_bundle(&r, &digest, bundle.trim().as_bytes().to_vec()).await.unwrap();
    let p = wait_plugin(&h, &tag, "refused: a bundle of another digest", |p| {
        p["message"].as_str().is_some_and(|m| m.contains("another artifact"))
    })
    .await;
    assert_eq!(p["state"], "Failed");
    assert!(p["message"].as_str().unwrap().contains(&format!("a valid bundle of another artifact ({other})")), "{p}");

    // (a) The bundle sigstore-js makes with the key for this digest: loaded, signed by the key.
    let (code, bundle, err) = peer(&["sign", a_private.to_str().unwrap(), &digest]);
    assert_eq!(code, 0, "{err}");
    registry.attach_bundle(&r, &digest, bundle.trim().as_bytes().to_vec()).await.unwrap();
    let p = wait_plugin(&h, &tag, "loaded once a good bundle is attached", |p| p["state"] == "Ready").await;
    assert_eq!(p["source"]["digest"], digest.as_str());
    assert!(p["source"]["signedBy"].as_str().unwrap().contains(&fingerprint), "{p}");
}
