//! `steward plugin push|pull|inspect|sign` against a real registry: the layout, auth, TLS, digests, media types, signatures.

use crate::common::wasm;
use crate::oci_registry::{Options, PASSWORD, TestRegistry, key_pair, push, steward};
use steward::oci::layout::{ANNOTATION_KINDS, ANNOTATION_NAME, ANNOTATION_VERSION, WASM_CONFIG, WASM_LAYER};
use steward::oci::{OciRef, PluginLabel, Registry, wasm_artifact};

fn with_registry(reg: &TestRegistry, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(reg.cli_args());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    steward(&all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_writes_the_wasm_layout_and_pull_and_inspect_give_the_component_back() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:1");
    let digest = push(&reg, &wasm("noop"), &tag);

    // The standard layout, annotated with what the plugin describes.
    let r = OciRef::parse(&tag).unwrap();
    let pulled = Registry::new(&r, &reg.access()).unwrap().pull(&r, None).await.unwrap();
    assert_eq!(pulled.digest, digest);
    assert_eq!(pulled.manifest.config.media_type, WASM_CONFIG);
    assert_eq!(pulled.manifest.layers.len(), 1);
    assert_eq!(pulled.manifest.layers[0].media_type, WASM_LAYER);
    assert_eq!(pulled.manifest.annotations[ANNOTATION_NAME], "noop");
    assert_eq!(pulled.manifest.annotations[ANNOTATION_VERSION], "0.1.0");
    assert!(pulled.manifest.annotations[ANNOTATION_KINDS].split(',').any(|k| k == "Noop"));
    assert_eq!(pulled.wasm, std::fs::read(wasm("noop")).unwrap());

    // Pull by tag and by digest, to a file.
    let dir = tempfile::tempdir().unwrap();
    for (i, reference) in [tag.clone(), format!("{}@{digest}", reg.reference("steward/noop"))].iter().enumerate() {
        let out = dir.path().join(format!("{i}.wasm"));
        let (code, stdout, err) = with_registry(&reg, &["plugin", "pull", reference, "-o", out.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(stdout.trim().ends_with(&digest), "{stdout}");
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(wasm("noop")).unwrap());
    }

    // Inspect reads it as it reads a file, and says where it came from.
    let (code, stdout, err) = with_registry(&reg, &["plugin", "inspect", &tag]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["name"], "noop");
    assert_eq!(v["digest"], digest.as_str());
    assert_eq!(v["reference"], tag.as_str());
    assert_eq!(v["kinds"][0]["kind"], "Noop");

    // Pushing the same plugin again gives the same digest; a missing tag is a clear error.
    assert_eq!(push(&reg, &wasm("noop"), &tag), digest);
    let (code, _, err) = with_registry(&reg, &["plugin", "pull", &reg.reference("steward/noop:nope")]);
    assert_ne!(code, 0);
    assert!(err.contains("does not exist in the registry"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_and_tls_need_their_credentials_and_ca_and_never_print_the_password() {
    let reg = TestRegistry::start(Options { tls: true, auth: true }).await;
    let tag = reg.reference("steward/noop:1");
    let file = wasm("noop");
    let ca = reg.ca().unwrap();
    let docker = reg.docker_config().unwrap();

    // Without the CA, TLS fails; with it but without credentials, the registry says no.
    let (code, _, err) = steward(&["plugin", "push", file.to_str().unwrap(), &tag]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach the registry"), "{err}");
    let (code, _, err) = steward(&["plugin", "push", file.to_str().unwrap(), &tag, "--ca-file", ca.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("refused access") && err.contains("--docker-config"), "{err}");

    let digest = push(&reg, &file, &tag);
    let (code, out, err) = with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null"]);
    assert_eq!(code, 0, "{err}");
    let null = std::fs::metadata("/dev/null").unwrap().file_type();
    assert!(
        std::os::unix::fs::FileTypeExt::is_char_device(&null),
        "`-o /dev/null` writes to the device, never replaces it"
    );
    assert!(out.contains(&digest));
    assert!(!out.contains(PASSWORD) && !err.contains(PASSWORD));
    let _ = docker;

    // Plain HTTP to a registry that is not this machine is refused before anything is sent.
    let (code, _, err) = steward(&["plugin", "pull", "oci://registry.example.com/a/b:1", "--plain-http"]);
    assert_ne!(code, 0);
    assert!(err.contains("--insecure"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_does_not_match_its_digest_is_refused() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:1");
    push(&reg, &wasm("noop"), &tag);
    let r = OciRef::parse(&tag).unwrap();
    let pulled = Registry::new(&r, &reg.access()).unwrap().pull(&r, None).await.unwrap();
    // Something rewrites the stored component behind the registry's back.
    let mut other = pulled.wasm.clone();
    let n = other.len();
    other[n / 2] ^= 0xff;
    std::fs::write(reg.blob_file(&pulled.manifest.layers[0].digest), &other).unwrap();
    let (code, _, err) = with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null"]);
    assert_ne!(code, 0);
    assert!(err.contains("the component does not match its digest"), "{err}");

    // A digest reference whose manifest is served with other bytes (same length, still JSON).
    let manifest_file = reg.blob_file(&pulled.digest);
    let text = std::fs::read_to_string(&manifest_file).unwrap();
    assert!(text.contains("\"noop\""), "{text}");
    std::fs::write(&manifest_file, text.replacen("\"noop\"", "\"nooq\"", 1)).unwrap();
    let pinned = format!("{}@{}", reg.reference("steward/noop"), pulled.digest);
    let (code, _, err) = with_registry(&reg, &["plugin", "pull", &pinned, "-o", "/dev/null"]);
    assert_ne!(code, 0);
    assert!(err.contains("the manifest does not match its digest"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_of_another_media_type_is_refused() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/image:1");
    let bytes = std::fs::read(wasm("noop")).unwrap();
    let mut artifact = wasm_artifact(&bytes, &PluginLabel { name: "noop".into(), ..Default::default() });
    artifact.manifest.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar".into();
    artifact.manifest_bytes = serde_json::to_vec(&artifact.manifest).unwrap();
    let r = OciRef::parse(&tag).unwrap();
    Registry::new(&r, &reg.access()).unwrap().push(&r, &bytes, &artifact).await.unwrap();
    for cmd in ["pull", "inspect"] {
        let (code, _, err) = with_registry(&reg, &["plugin", cmd, &tag]);
        assert_ne!(code, 0);
        assert!(
            err.contains("the layer has media type `application/vnd.oci.image.layer.v1.tar`, not `application/wasm`"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_verifies_with_its_key_only_and_an_unsigned_artifact_names_the_key() {
    let reg = TestRegistry::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (a_private, a_public) = key_pair(dir.path(), "a");
    let (_, b_public) = key_pair(dir.path(), "b");
    let tag = reg.reference("steward/noop:1");
    let digest = push(&reg, &wasm("noop"), &tag);
    let a_fp = steward::oci::TrustKey::load(&a_public).unwrap().fingerprint().to_string();

    let (code, _, err) =
        with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null", "--key", a_public.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("has no signature (neither a `.sig` signature nor a Sigstore bundle referrer), and the key {} ({a_fp}) is required", a_public.display())),
        "{err}"
    );

    let (code, out, err) = with_registry(&reg, &["plugin", "sign", &tag, "--key", a_private.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().ends_with(&digest), "{out}");
    assert!(err.contains(&format!("sha256-{}.sig", &digest[7..])), "{err}");

    let (code, _, err) = with_registry(&reg, &["plugin", "inspect", &tag, "--key", a_public.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null", "--key", b_public.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("b.pub") && err.contains("another key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_artifact_is_named_once_with_the_digest_refused_and_what_to_do() {
    let reg = TestRegistry::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = key_pair(dir.path(), "a");
    let tag = reg.reference("steward/noop:refused");
    let digest = push(&reg, &wasm("noop"), &tag);
    let (code, _, err) =
        with_registry(&reg, &["plugin", "pull", &tag, "-o", "/dev/null", "--key", public.to_str().unwrap()]);
    assert_ne!(code, 0);
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line in {err}"));
    assert!(line.starts_with(&format!("error: {tag}: refused: the artifact {digest} has no signature")), "{line}");
    assert_eq!(line.matches(&tag).count(), 1, "the reference is named once: {line}");
    assert!(line.contains("steward plugin sign") && line.contains("cosign sign"), "{line}");
    assert!(line.contains("allow unsigned artifacts by removing `key`"), "{line}");
    assert!(!line.contains("cannot read") && !line.contains("signature layers"), "{line}");

    // A tag that is not there: named once too.
    let missing = reg.reference("steward/noop:nope");
    let (code, _, err) = with_registry(&reg, &["plugin", "pull", &missing]);
    assert_ne!(code, 0);
    assert!(err.contains(&format!("error: {missing}: the tag `nope` does not exist in the registry")), "{err}");
    assert_eq!(err.matches("steward/noop").count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_registry_that_answers_plain_http_says_to_add_plain_http() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:1");
    let registry = format!("127.0.0.1:{}", reg.port);
    let (code, _, err) = steward(&["plugin", "push", wasm("noop").to_str().unwrap(), &tag]);
    assert_ne!(code, 0);
    assert!(err.contains(&format!("the registry at {registry} answers plain HTTP; add --plain-http")), "{err}");
    assert!(err.contains("`plain_http: true`"), "the host's setting is named too: {err}");

    // The library says the same to the host's plugin sources.
    push(&reg, &wasm("noop"), &tag);
    let r = OciRef::parse(&tag).unwrap();
    let https = steward::oci::Access { plain_http: false, ..reg.access() };
    let e = Registry::new(&r, &https).unwrap().pull(&r, None).await.unwrap_err();
    assert!(matches!(e, steward::oci::OciError::AnswersPlainHttp { .. }), "{e}");
    assert!(e.is_unreachable(), "a cached copy may stand in: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytecode_alliance_wasm_client_reads_the_config_of_a_pushed_plugin() {
    use oci_client_017::client::{ClientConfig, ClientProtocol};
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:interop");
    let digest = push(&reg, &wasm("noop"), &tag);
    let client = oci_client_017::Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
    let client = oci_wasm::WasmClient::new(client);
    let image: oci_client_017::Reference = tag.strip_prefix("oci://").unwrap().parse().unwrap();
    let auth = oci_client_017::secrets::RegistryAuth::Anonymous;
    let (manifest, config, pulled) = client.pull_manifest_and_config(&image, &auth).await.unwrap();
    assert_eq!(pulled, digest);
    assert_eq!(config.created.timestamp(), 0, "created is fixed, so a push is reproducible");
    assert_eq!((config.architecture.as_str(), config.os.as_str()), ("wasm", "wasip2"));
    assert_eq!(config.layer_digests, [manifest.layers[0].digest.clone()]);

    // The component block lists the component's world as oci-wasm itself reads it.
    let component = config.component.expect("a component block");
    let bytes = std::fs::read(wasm("noop")).unwrap();
    let expected = oci_wasm::Component::from_raw_component(&bytes).unwrap();
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    assert_eq!(set(&component.exports), set(&expected.exports));
    assert_eq!(set(&component.imports), set(&expected.imports));
    assert!(component.exports.iter().any(|e| e.starts_with("steward:plugin/")), "{:?}", component.exports);
    assert!(component.imports.iter().any(|i| i.starts_with("wasi:")), "{:?}", component.imports);
}
