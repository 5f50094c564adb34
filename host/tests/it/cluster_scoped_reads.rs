//! A plugin's read of a cluster-scoped object is recorded under that object's own key (the
//! empty namespace), so in Kubernetes mode a change to the object re-queues its reader.

use crate::common;

use crate::common::kube::kube_e2e;
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

kube_e2e! {
    /// Cluster-scoped objects are shared by every test on the real server: this test's carry a
    /// label of its own, and its host serves only objects with that label.
    async fn a_change_to_a_cluster_scoped_object_reconciles_the_object_that_read_it(k: Kube) {
        let label = ("test.steward.dev/run".to_string(), k.ns.clone());
        let (_engine, _dir) = k.host(&["noop-twin"], &format!("labelSelector: {}={}", label.0, label.1)).await;
        let api: Api<DynamicObject> = Api::all_with(k.client.clone(), &shared_ar());
        let (leader, reader) = (format!("{}-leader", k.ns), format!("{}-reader", k.ns));
        for (name, spec) in [(&leader, json!({"value": "one"})), (&reader, json!({"follows": leader}))] {
            let mut o = shared(name, spec);
            o.metadata.labels = Some([label.clone()].into());
            api.create(&PostParams::default(), &o).await.unwrap();
        }
        wait_obj(&api, &reader, "the reader reports the leader's value", |o| status(o)["seen"] == "one").await;

        // Nothing but the recorded read brings the reader back (its resync is minutes away).
        api.patch(&leader, &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "two"}}))).await.unwrap();
        wait_obj(&api, &reader, "the reader follows the leader's change", |o| status(o)["seen"] == "two").await;
    }
}
