//! `deploy/registry/`, the registry variant of the Kubernetes manifests, checked against the host config and the base.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn doc(file: &str) -> Value {
    let path = repo_root().join("deploy/registry").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_registry_variant_lists_references_mounts_what_they_need_and_uses_the_plugin_free_image() {
    let k = doc("kustomization.yaml");
    assert_eq!(k["resources"], serde_json::json!(["../base"]), "the base is deploy/base/");
    let patches: Vec<&str> = k["patches"].as_array().unwrap().iter().filter_map(|p| p["path"].as_str()).collect();
    assert_eq!(patches, ["config.yaml", "deployment.yaml"]);
    assert_eq!(k["images"][0]["newTag"], "host");

    // The config is valid, lists only references, and keeps the base's paths.
    let cm = doc("config.yaml");
    let text = cm["data"]["steward.yaml"].as_str().expect("steward.yaml");
    let cfg = steward::config::Config::parse(text, Path::new("steward.yaml"), Path::new("/etc/steward"))
        .unwrap_or_else(|e| panic!("deploy/registry/config.yaml: {e}"));
    assert!(cfg.plugin_sources.len() >= 3, "{:?}", cfg.plugin_sources);
    let base: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join("deploy/base/config.yaml")).unwrap()).unwrap();
    let base = steward::config::Config::parse(
        base["data"]["steward.yaml"].as_str().unwrap(),
        Path::new("steward.yaml"),
        Path::new("/etc/steward"),
    )
    .unwrap();
    assert_eq!((&cfg.plugin_dir, &cfg.state, &cfg.cache_dir), (&base.plugin_dir, &base.state, &base.cache_dir));
    assert!(base.plugin_sources.is_empty());

    // Each source's key is a file of the ConfigMap (mounted at /etc/steward), its credentials
    // are on the Secret the patch mounts, and it speaks HTTPS.
    let deployment = doc("deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(pod["initContainers"].is_null(), "the plugin-copying initContainer is removed");
    let mount = &pod["containers"][0]["volumeMounts"][0];
    let secret_dir = Path::new(mount["mountPath"].as_str().unwrap());
    assert_eq!(pod["volumes"][0]["name"], mount["name"]);
    assert!(pod["volumes"][0]["secret"]["secretName"].is_string());
    for s in &cfg.plugin_sources {
        let key = s.key.as_deref().expect("a key per source");
        let name = key.strip_prefix("/etc/steward").expect("the key is in the ConfigMap").to_str().unwrap();
        assert!(cm["data"][name.trim_start_matches('/')].is_string(), "the ConfigMap has {name}");
        assert!(s.docker_config.as_deref().is_some_and(|d| d.starts_with(secret_dir)), "{s:?}");
        assert!(!s.plain_http && !s.insecure, "{s:?}");
    }

    let dockerfile = std::fs::read_to_string(repo_root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains("FROM debian:bookworm-slim AS host"), "the plugin-free image is a stage");
}
