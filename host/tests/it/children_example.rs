//! The example plugin `examples/plugins/site` in Kubernetes mode, the walkthrough of
//! `docs/kubernetes.md` ("Child objects"): a `Site` owns a ConfigMap of its pages (capability
//! `children`), which the host makes, updates, restores, prunes and deletes with its owner.
//!
//! One body, run by [`kube_e2e!`] against the in-process fake API server (`::fake`) and the
//! shared real kube-apiserver (`::real`). Neither runs a garbage collector: a child that goes
//! with its owner was deleted by the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use steward::engine::Engine;
use steward::plugin::{Plugin, PluginSettings};
use tempfile::TempDir;

use crate::common;
use crate::common::kube::kube_e2e;
use crate::common::kube::*;

/// The example's kind.
fn site_ar() -> ApiResource {
    ApiResource {
        group: "examples.steward.dev".into(),
        version: "v1alpha1".into(),
        api_version: "examples.steward.dev/v1alpha1".into(),
        kind: "Site".into(),
        plural: "sites".into(),
    }
}

fn config_map_ar() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"))
}

fn deployment_ar() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("apps", "v1", "Deployment"))
}

/// The example plugin, built once per test process.
async fn site_wasm() -> PathBuf {
    match tokio::task::spawn_blocking(|| steward_plugin_build::example_plugin("site")).await {
        Ok(p) => p,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Installs the CRD of what the plugin describes, as `steward crds --apply` does (a forced
/// server-side apply: the shared real server may have it already).
async fn install_site_crd(k: &Kube, wasm: &Path) {
    let bytes = std::fs::read(wasm).unwrap();
    let plugin = Plugin::load(common::runtime(), wasm, bytes, |_| PluginSettings::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let crds: Api<CustomResourceDefinition> = Api::all(k.client.clone());
    for kind in &plugin.info().kinds {
        let crd = steward::kubernetes::crd::crd_for(kind).unwrap_or_else(|e| panic!("{e}"));
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("steward-tests").force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("applying the CRD {name}: {e}"));
        wait_established(&crds, &name).await;
    }
}

/// Writes the host config granting the plugin `children` of `kinds` (a YAML list's items).
fn write_config(k: &Kube, dir: &TempDir, kinds: &str) -> PathBuf {
    let cfg = dir.path().join("steward.yaml");
    let text = format!(
        "mode: kubernetes\nplugins:\n  site: {{ capabilities: [children], children: {{ kinds: [{kinds}] }} }}\n\
         queue: {{ initial_backoff: 50ms, max_backoff: 1s }}\n{}{}",
        crate::common::host::shared_cache_line(""),
        k.kubernetes_section("")
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn site(k: &Kube, name: &str, spec: Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &site_ar()).within(&k.ns);
    o.data = json!({ "spec": spec });
    o
}

/// The object's `data` (null when none).
fn data(o: Option<&DynamicObject>) -> &Value {
    static NULL: Value = Value::Null;
    o.and_then(|o| o.data.get("data")).unwrap_or(&NULL)
}

/// Whether the Site reports its ConfigMap observed with the pages of its generation `gen`.
fn ready_at(o: Option<&DynamicObject>, generation: u64) -> bool {
    let s = status(o);
    s["observedGeneration"] == generation && s["ready"] == true && s["steward"]["phase"] == "Synced"
}

/// Asserts that `child` carries the host's marks of its owner `site` (`Site/<ns>/<name>`).
fn assert_owned_by(child: &DynamicObject, site: &DynamicObject, ns: &str) {
    let name = site.metadata.name.as_deref().unwrap();
    let refs = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(refs.len(), 1, "{child:#?}");
    let r = &refs[0];
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str(), r.name.as_str(), r.controller),
        ("examples.steward.dev/v1alpha1", "Site", name, Some(true)),
        "{child:#?}"
    );
    assert_eq!(Some(&r.uid), site.metadata.uid.as_ref(), "the owner reference names this Site's uid");
    let labels = child.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("steward.dev/owner-kind").map(String::as_str), Some("Site"), "{labels:?}");
    assert_eq!(labels.get("steward.dev/owner-name").map(String::as_str), Some(name), "{labels:?}");
    // The plugin's own label is kept beside the host's.
    assert_eq!(labels.get("app.kubernetes.io/instance").map(String::as_str), Some(name), "{labels:?}");
    let annotations = child.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("steward.dev/owner"), Some(&format!("Site/{ns}/{name}")), "{annotations:?}");
}

async fn start_host(k: &Kube, cfg: &Path) -> Arc<Engine> {
    start(cfg, k.client.clone()).await
}

kube_e2e! {
    async fn a_site_owns_the_config_map_of_its_pages(k: Kube) {
        let wasm = site_wasm().await;
        install_site_crd(&k, &wasm).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        std::fs::copy(&wasm, dir.path().join("plugins/site.wasm")).unwrap();
        // The grant names ConfigMaps only.
        let cfg = write_config(&k, &dir, "v1/ConfigMap");
        let engine = start_host(&k, &cfg).await;
        let sites = k.api(&site_ar());
        let cms = k.api(&config_map_ar());
        let deployments = k.api(&deployment_ar());

        // A Site: its ConfigMap appears, marked as its child, with the index and each page.
        let spec = json!({"title": "Hello", "pages": {"about.html": "<p>About us</p>", "faq.html": "<p>FAQ</p>"}});
        sites.create(&PostParams::default(), &site(&k, "web", spec)).await.unwrap();
        let cm = wait_obj(&cms, "web-pages", "made with both pages", |o| data(o)["faq.html"] == "<p>FAQ</p>")
            .await
            .unwrap();
        let web = wait_obj(&sites, "web", "ready: the ConfigMap observed", |o| ready_at(o, 1)).await.unwrap();
        assert_owned_by(&cm, &web, &k.ns);
        let d = data(Some(&cm));
        assert_eq!(d["about.html"], "<p>About us</p>");
        let index = d["index.html"].as_str().expect("an index");
        assert!(index.contains("<title>Hello</title>") && index.contains("href=\"faq.html\""), "{index}");
        let s = status(Some(&web));
        assert_eq!((s["configMap"].as_str(), s["pages"].as_u64()), (Some("web-pages"), Some(2)), "{s:#}");
        assert_eq!(
            (s["conditions"][0]["type"].as_str(), s["conditions"][0]["status"].as_str(), s["conditions"][0]["reason"].as_str()),
            (Some("Ready"), Some("True"), Some("Published")),
            "{s:#}"
        );

        // An edit of the Site: the ConfigMap follows.
        let edit = json!({"spec": {"title": "Hello again", "pages": {"about.html": "<p>About us, v2</p>"}}});
        sites.patch("web", &PatchParams::default(), &Patch::Merge(edit)).await.unwrap();
        wait_obj(&cms, "web-pages", "the new title and page", |o| {
            data(o)["about.html"] == "<p>About us, v2</p>"
                && data(o)["index.html"].as_str().is_some_and(|i| i.contains("<h1>Hello again</h1>"))
        })
        .await;
        wait_obj(&sites, "web", "ready at generation 2", |o| ready_at(o, 2)).await;

        // A page removed from the spec is removed from the ConfigMap.
        let remove = json!({"spec": {"pages": {"faq.html": null}}});
        sites.patch("web", &PatchParams::default(), &Patch::Merge(remove)).await.unwrap();
        let cm = wait_obj(&cms, "web-pages", "without faq.html", |o| {
            o.is_some_and(|_| data(o).get("faq.html").is_none())
        })
        .await
        .unwrap();
        assert_eq!(data(Some(&cm))["about.html"], "<p>About us, v2</p>", "the other page stays");
        assert!(!data(Some(&cm))["index.html"].as_str().unwrap().contains("faq.html"), "{cm:#?}");
        let web = wait_obj(&sites, "web", "ready at generation 3", |o| ready_at(o, 3)).await.unwrap();
        assert_eq!(status(Some(&web))["pages"], 1);

        // The ConfigMap deleted by hand comes back: its watch queues the Site.
        let old_uid = cm.metadata.uid.clone().unwrap();
        cms.delete("web-pages", &DeleteParams::default()).await.unwrap();
        let back = wait_obj(&cms, "web-pages", "made again", |o| {
            o.is_some_and(|o| o.metadata.uid.as_ref() != Some(&old_uid))
        })
        .await
        .unwrap();
        assert_eq!(data(Some(&back))["about.html"], "<p>About us, v2</p>");
        assert_owned_by(&back, &web, &k.ns);
        let key = k.key("Site", "web");
        let view = engine.view(&key).expect("the host shows the Site");
        assert!(view.history.iter().any(|h| h.reason == "childChanged"), "{:#?}", view.history);

        // A Site that asks for a Deployment, a kind not granted: refused on the Site, with the key to add.
        let served = json!({"title": "Served", "pages": {"a.html": "A"}, "replicas": 1});
        sites.create(&PostParams::default(), &site(&k, "served", served)).await.unwrap();
        let refused = wait_obj(&sites, "served", "refused", |o| {
            status(o)["steward"]["lastError"].as_str().is_some_and(|e| e.contains("children.kinds"))
        })
        .await
        .unwrap();
        let err = status(Some(&refused))["steward"]["lastError"].as_str().unwrap().to_string();
        assert!(
            err.contains("child apps/v1/Deployment served-web")
                && err.contains("add `apps/v1/Deployment` to plugins.site.children.kinds in the host config"),
            "{err}"
        );
        assert!(matches!(status(Some(&refused))["steward"]["phase"].as_str(), Some("Error" | "Failed")), "{refused:#?}");
        // Nothing of the refused set was made.
        assert!(cms.get_opt("served-pages").await.unwrap().is_none());
        assert!(deployments.get_opt("served-web").await.unwrap().is_none());

        // The operator adds the grant and restarts the host, then reruns the Site (`steward trigger`):
        // both children are made.
        engine.shutdown(Duration::from_secs(5)).await;
        drop(engine);
        write_config(&k, &dir, "v1/ConfigMap, apps/v1/Deployment");
        let engine = start_host(&k, &cfg).await;
        let served_key = k.key("Site", "served");
        common::eventually(T, "the restarted host to know the Site", async || engine.view(&served_key), Option::is_some).await;
        engine.trigger(&served_key).unwrap_or_else(|e| panic!("trigger: {e}"));
        let served = wait_obj(&sites, "served", "ready with its Deployment", |o| ready_at(o, 1)).await.unwrap();
        assert_eq!(status(Some(&served))["deployment"], "served-web");
        let dep = deployments.get("served-web").await.unwrap();
        assert_owned_by(&dep, &served, &k.ns);
        assert_eq!(dep.data["spec"]["replicas"], 1);
        assert_eq!(dep.data["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], "served-pages");
        assert_owned_by(&cms.get("served-pages").await.unwrap(), &served, &k.ns);

        // Deleting a Site deletes its children (the host does it: there is no garbage collector),
        // then the Site goes.
        for (name, children) in [("web", vec![("ConfigMap", "web-pages")]), ("served", vec![("ConfigMap", "served-pages"), ("Deployment", "served-web")])] {
            sites.delete(name, &DeleteParams::default()).await.unwrap();
            for (kind, child) in children {
                let api = if kind == "ConfigMap" { &cms } else { &deployments };
                wait_obj(api, child, "deleted with its owner", |o| o.is_none()).await;
            }
            wait_obj(&sites, name, "gone", |o| o.is_none()).await;
        }
        engine.shutdown(Duration::from_secs(5)).await;
    }
}
