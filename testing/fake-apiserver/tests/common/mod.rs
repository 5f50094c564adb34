//! Shared helpers of the integration tests: a `Widget` CRD and small constructors.
#![allow(dead_code)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

/// Generous deadline for conditions that should hold almost at once.
pub const DEADLINE: Duration = Duration::from_secs(10);

pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

pub fn widgets() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets")
}

/// Creates the Widget CRD through the API and returns the namespaced Widget API of `default`.
pub async fn install_widgets(client: &Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd()).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    Api::namespaced_with(client.clone(), "default", &widgets())
}

pub fn widget(name: &str, spec: Value) -> DynamicObject {
    let mut obj = DynamicObject::new(name, &widgets());
    obj.data = json!({"spec": spec});
    obj
}

pub fn widget_labeled(name: &str, labels: &[(&str, &str)]) -> DynamicObject {
    let mut obj = widget(name, json!({}));
    obj.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    obj
}

/// The `kube::Error::Api` status of a failed call.
pub fn api_error<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Sends a raw request through kube's client (auth, base URL, error mapping) and decodes the JSON answer.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body.as_bytes().to_vec())
        .unwrap();
    client.request::<Value>(req).await
}
