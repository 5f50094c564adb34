//! CRD registration, structural-schema refusal, deletion, discovery, namespaces and kubeconfig.

mod common;

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::runtime::{conditions, wait::await_condition};
use serde_json::json;
use steward_fake_apiserver::{FakeApiServer, ResourceDef};

#[tokio::test]
async fn creating_a_crd_registers_its_resource_and_sets_its_status() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let widgets_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widgets());
    let before = api_error(widgets_api.list(&Default::default()).await);
    assert_eq!(before.code, 404, "not served before the CRD exists");

    install_widgets(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = await_condition(crds.clone(), "widgets.example.com", conditions::is_crd_established());
    tokio::time::timeout(DEADLINE, established).await.unwrap().unwrap();
    let crd = crds.get("widgets.example.com").await.unwrap();
    let status = crd.status.unwrap();
    assert_eq!(status.accepted_names.unwrap().kind, "Widget");
    assert!(status.conditions.unwrap().iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"));
    assert!(widgets_api.list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn a_non_structural_crd_is_refused_naming_the_path() {
    let server = FakeApiServer::start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"properties": {"size": {"type": "integer"}}});
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    let err = api_error(crds.create(&PostParams::default(), &crd).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
    );
    assert!(server.objects("apiextensions.k8s.io", "v1", "customresourcedefinitions").is_empty());
}

#[tokio::test]
async fn discovery_finds_crd_kinds_and_status_subresources() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    install_widgets(&client).await;
    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone()).run_aggregated().await.unwrap(),
    ] {
        let (ar, caps) = discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget"))
            .expect("Widget discovered");
        assert_eq!(ar.plural, "widgets");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(
            caps.subresources.iter().any(|(sub, _)| sub.plural == "widgets/status" || sub.plural == "status"),
            "{:?}",
            caps.subresources
        );
        let (lease, _) =
            discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease")).unwrap();
        assert_eq!(lease.plural, "leases");
        assert!(discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Namespace")).is_some());
    }
    let version = client.apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "33"));
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_it() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api = install_widgets(&client).await;
    api.create(&PostParams::default(), &widget("a", json!({}))).await.unwrap();
    let mut held = widget("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    // A custom resource with a finalizer keeps the CRD terminating.
    let crd = crds.get("widgets.example.com").await.unwrap();
    assert!(crd.metadata.deletion_timestamp.is_some());
    assert!(api.get("held").await.unwrap().metadata.deletion_timestamp.is_some());
    assert_eq!(api_error(api.get("a").await).code, 404);

    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    server
        .wait_for(DEADLINE, |s| s.objects("apiextensions.k8s.io", "v1", "customresourcedefinitions").is_empty())
        .await
        .unwrap();
    assert_eq!(api_error(api.list(&Default::default()).await).code, 404, "no longer served");
}

#[tokio::test]
async fn registered_resources_namespaces_and_kubeconfig() {
    let server = FakeApiServer::start().await;
    // A resource registered without a CRD, cluster-scoped.
    server.register(ResourceDef::new("example.org", "v1alpha1", "Gadget", "gadgets", false).with_status());
    let client = server.client();
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.org", "v1alpha1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut g = DynamicObject::new("g1", &ar);
    g.data = json!({"spec": {}});
    let created = gadgets.create(&PostParams::default(), &g).await.unwrap();
    assert!(created.metadata.namespace.is_none());

    // Namespaces: built-ins exist; deleting one deletes its contents, then the namespace.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get("kube-system").await.is_ok());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let ns = namespaces.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    let api = install_widgets(&client).await;
    let team: Api<DynamicObject> = Api::namespaced_with(client.clone(), "team", &widgets());
    team.create(&PostParams::default(), &widget("w", json!({}))).await.unwrap();
    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    server.wait_for(DEADLINE, |s| s.object("", "v1", "namespaces", None, "team").is_none()).await.unwrap();
    assert_eq!(api_error(team.get("w").await).code, 404);
    drop(api);

    // A kubeconfig written to disk reaches the server.
    let dir = std::env::temp_dir().join(format!("fake-apiserver-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    server.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.unwrap();
    assert_eq!(config.default_namespace, "default");
    let from_file = kube::Client::try_from(config).unwrap();
    let via_file: Api<DynamicObject> = Api::all_with(from_file, &ar);
    assert_eq!(via_file.get("g1").await.unwrap().metadata.uid, created.metadata.uid);
    std::fs::remove_dir_all(dir).unwrap();
}
