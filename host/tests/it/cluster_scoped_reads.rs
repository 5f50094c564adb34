//! A plugin's read of a cluster-scoped object is recorded under that object's own key (the
//! empty namespace), so in Kubernetes mode a change to the object re-queues its reader.

use crate::common;

use common::kube::*;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// The cluster-scoped `Shared` test kind (served by `noop-twin`).
fn shared_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "Shared".into(),
        plural: "shareds".into(),
    }
}

fn shared(name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &shared_ar());
    o.data = json!({ "spec": spec });
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_a_cluster_scoped_object_reconciles_the_object_that_read_it() {
    let Cluster { server: _server, client, engine: _engine, dir: _dir } = Cluster::start(&["noop-twin"], "").await;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &shared_ar());
    api.create(&PostParams::default(), &shared("leader", json!({"value": "one"}))).await.unwrap();
    api.create(&PostParams::default(), &shared("reader", json!({"follows": "leader"}))).await.unwrap();
    wait_obj(&api, "reader", "the reader reports the leader's value", |o| status(o)["seen"] == "one").await;

    // Nothing but the recorded read brings the reader back (its resync is minutes away).
    api.patch("leader", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "two"}}))).await.unwrap();
    wait_obj(&api, "reader", "the reader follows the leader's change", |o| status(o)["seen"] == "two").await;
}
