//! Create, get, list, replace, patch, apply and delete through `kube::Client` over loopback HTTP.

mod common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_fake_apiserver::FakeApiServer;

#[tokio::test]
async fn create_get_list_replace_with_optimistic_concurrency() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;

    let created = api.create(&PostParams::default(), &widget("a", json!({"size": 1}))).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let rv1: u64 = created.metadata.resource_version.clone().unwrap().parse().unwrap();
    assert_eq!(rv1, server.resource_version());

    let dup = api_error(api.create(&PostParams::default(), &widget("a", json!({}))).await);
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, "widgets.example.com \"a\" already exists");

    let got = api.get("a").await.unwrap();
    assert_eq!(got.data["spec"]["size"], 1);
    assert_eq!(got.metadata.resource_version, created.metadata.resource_version);

    api.create(&PostParams::default(), &widget("b", json!({}))).await.unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.iter().map(|o| o.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(list.metadata.resource_version.unwrap(), server.resource_version().to_string());

    // Replace with the current resourceVersion works and bumps it.
    let mut next = got.clone();
    next.data["spec"]["size"] = json!(2);
    let replaced = api.replace("a", &PostParams::default(), &next).await.unwrap();
    assert_ne!(replaced.metadata.resource_version, got.metadata.resource_version);
    // The same (now stale) resourceVersion again: 409 Conflict.
    let stale = api_error(api.replace("a", &PostParams::default(), &next).await);
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on widgets.example.com \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // Without a resourceVersion: refused, as custom resources allow no unconditional update.
    next.metadata.resource_version = None;
    next.data["spec"]["size"] = json!(3);
    let unconditional = api_error(api.replace("a", &PostParams::default(), &next).await);
    assert_eq!((unconditional.code, unconditional.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        unconditional.message,
        "widgets.example.com \"a\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    assert_eq!(api.get("a").await.unwrap().data["spec"]["size"], 2);

    let missing = api_error(api.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    let details = missing.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.group.as_str(), details.kind.as_str()),
        ("nope", "example.com", "widgets")
    );
}

#[tokio::test]
async fn create_validates_names_namespaces_and_generate_name() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api = install_widgets(&client).await;
    let bad = api_error(api.create(&PostParams::default(), &widget("Bad_Name", json!({}))).await);
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"));
    assert!(
        bad.message.starts_with("Widget.example.com \"Bad_Name\" is invalid: metadata.name: Invalid value"),
        "{}",
        bad.message
    );

    let mut generated = widget("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let created = api.create(&PostParams::default(), &generated).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let mut other_ns = widget("x", json!({}));
    other_ns.metadata.namespace = Some("elsewhere".into());
    let mismatch = api_error(api.create(&PostParams::default(), &other_ns).await);
    assert_eq!((mismatch.code, mismatch.reason.as_str()), (400, "BadRequest"));

    let missing_ns: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "missing", &widgets());
    let err = api_error(missing_ns.create(&PostParams::default(), &widget("x", json!({}))).await);
    assert_eq!((err.code, err.message.as_str()), (404, "namespaces \"missing\" not found"));
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    api.create(&PostParams::default(), &widget("a", json!({"size": 1}))).await.unwrap();
    let merge = |v| Patch::Merge(v);
    let pp = PatchParams::default();

    let o = api
        .patch("a", &pp, &merge(json!({"metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(1), "labels and annotations do not bump generation");
    let o = api.patch("a", &pp, &merge(json!({"metadata": {"finalizers": ["example.com/f"]}}))).await.unwrap();
    assert_eq!(o.metadata.generation, Some(1), "finalizers do not bump generation");
    let o = api.patch_status("a", &pp, &merge(json!({"status": {"ready": true}}))).await.unwrap();
    assert_eq!(o.metadata.generation, Some(1), "status does not bump generation");
    let o = api.patch("a", &pp, &merge(json!({"spec": {"size": 2}}))).await.unwrap();
    assert_eq!(o.metadata.generation, Some(2), "spec bumps generation");
    let same = api.patch("a", &pp, &merge(json!({"spec": {"size": 2}}))).await.unwrap();
    assert_eq!(same.metadata.resource_version, o.metadata.resource_version, "a no-op patch writes nothing");
}

#[tokio::test]
async fn status_subresource_is_isolated_both_ways() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    let mut w = widget("a", json!({"size": 1}));
    w.data["status"] = json!({"phase": "ignored"});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(created.data.get("status").is_none(), "status is dropped on create");

    let pp = PatchParams::default();
    let o = api
        .patch_status(
            "a",
            &pp,
            &Patch::Merge(
                json!({"status": {"phase": "Ready"}, "spec": {"size": 9}, "metadata": {"labels": {"l": "v"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(o.data["status"]["phase"], "Ready");
    assert_eq!(o.data["spec"]["size"], 1, "a status write does not change spec");
    assert!(o.metadata.labels.is_none(), "a status write does not change metadata");

    let mut put = o.clone();
    put.data["status"]["phase"] = json!("Changed");
    put.data["spec"]["size"] = json!(2);
    let o = api.replace("a", &PostParams::default(), &put).await.unwrap();
    assert_eq!(o.data["status"]["phase"], "Ready", "a main-resource write does not change status");
    assert_eq!(o.data["spec"]["size"], 2);

    let mut put = o.clone();
    put.data["status"]["phase"] = json!("ViaPut");
    put.data["spec"]["size"] = json!(5);
    let o = api.replace_status("a", &PostParams::default(), &put).await.unwrap();
    assert_eq!((o.data["status"]["phase"].clone(), o.data["spec"]["size"].clone()), (json!("ViaPut"), json!(2)));
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api = install_widgets(&client).await;
    api.create(&PostParams::default(), &widget("a", json!({"list": [1, 2], "keep": true, "drop": 1}))).await.unwrap();
    let pp = PatchParams::default();
    let o = api.patch("a", &pp, &Patch::Merge(json!({"spec": {"list": [3], "drop": null}}))).await.unwrap();
    assert_eq!(o.data["spec"], json!({"list": [3], "keep": true}));

    let path = "/apis/example.com/v1/namespaces/default/widgets/a";
    let ops =
        r#"[{"op": "test", "path": "/spec/keep", "value": true}, {"op": "add", "path": "/spec/list/-", "value": 4}]"#;
    let o = raw(&client, "PATCH", path, "application/json-patch+json", ops).await.unwrap();
    assert_eq!(o["spec"]["list"], json!([3, 4]));
    let failing = r#"[{"op": "test", "path": "/spec/keep", "value": false}]"#;
    let err = api_error(raw(&client, "PATCH", path, "application/json-patch+json", failing).await);
    assert_eq!(err.code, 422);

    // A resourceVersion in a patch is a precondition.
    let err = api_error(
        api.patch("a", &pp, &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "spec": {"x": 1}}))).await,
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // Strategic merge: 415 for custom resources, accepted (as a merge patch) for built-ins.
    let err = api_error(api.patch("a", &pp, &Patch::Strategic(json!({"spec": {"x": 1}}))).await);
    assert_eq!((err.code, err.reason.as_str()), (415, "UnsupportedMediaType"));
    let leases: Api<Lease> = Api::default_namespaced(client);
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})).unwrap(),
        )
        .await
        .unwrap();
    let l = leases
        .patch("l", &pp, &Patch::Strategic(json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": 5}})))
        .await
        .unwrap();
    let spec = l.spec.unwrap();
    assert_eq!((spec.holder_identity, spec.lease_duration_seconds), (None, Some(5)));
}

#[tokio::test]
async fn server_side_apply_conflicts_shared_ownership_and_force() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    let cfg = |spec: serde_json::Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": spec});

    // Apply to a missing object creates it.
    let o = api
        .patch("a", &PatchParams::apply("alice"), &Patch::Apply(cfg(json!({"owner": "alice", "size": 1}))))
        .await
        .unwrap();
    assert_eq!(o.metadata.generation, Some(1));
    assert_eq!(o.data["spec"], json!({"owner": "alice", "size": 1}));

    // Changing a field alice owns: conflict naming field and manager.
    let err = api_error(api.patch("a", &PatchParams::apply("bob"), &Patch::Apply(cfg(json!({"owner": "bob"})))).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(err.message, "Apply failed with 1 conflict: conflict with \"alice\": .spec.owner");

    // The same value: shared ownership, no conflict.
    api.patch("a", &PatchParams::apply("bob"), &Patch::Apply(cfg(json!({"size": 1})))).await.unwrap();
    let managers = server.field_managers("example.com", "widgets", Some("default"), "a");
    assert!(managers.iter().all(|m| m.fields.contains(&".spec.size".to_string())), "{managers:?}");

    // Force takes the field over.
    let o = api
        .patch("a", &PatchParams::apply("bob").force(), &Patch::Apply(cfg(json!({"owner": "bob", "size": 1}))))
        .await
        .unwrap();
    assert_eq!(o.data["spec"]["owner"], "bob");
    let alice = server
        .field_managers("example.com", "widgets", Some("default"), "a")
        .into_iter()
        .find(|m| m.manager == "alice")
        .unwrap();
    assert_eq!(alice.fields, [".spec.size"]);

    // YAML bodies work; a missing fieldManager is 422.
    let yaml = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nspec:\n  color: red\n";
    let path = "/apis/example.com/v1/namespaces/default/widgets/a?fieldManager=carol";
    let o = raw(&server.client(), "PATCH", path, "application/apply-patch+yaml", yaml).await.unwrap();
    assert_eq!(o["spec"]["color"], "red");
    let no_manager = api_error(api.patch("a", &PatchParams::default(), &Patch::Apply(cfg(json!({})))).await);
    assert_eq!(no_manager.code, 422);
}

#[tokio::test]
async fn finalizers_delay_deletion_until_the_last_one_goes() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    let mut w = widget("a", json!({}));
    w.metadata.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
    api.create(&PostParams::default(), &w).await.unwrap();

    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    let marked = deleted.left().expect("an object with finalizers is returned, not a Status");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.generation, Some(2), "setting deletionTimestamp bumps generation");
    let got = api.get("a").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(
        server.object("example.com", "v1", "widgets", Some("default"), "a").unwrap()["metadata"]["deletionGracePeriodSeconds"],
        0
    );

    // No new finalizers on a deleting object.
    let err = api_error(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}})),
        )
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("no new finalizers can be added if the object is being deleted"), "{}", err.message);

    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/b"]}})))
        .await
        .unwrap();
    assert!(api.get("a").await.is_ok(), "still there with one finalizer");
    let remove = r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#;
    raw(
        &server.client(),
        "PATCH",
        "/apis/example.com/v1/namespaces/default/widgets/a",
        "application/json-patch+json",
        remove,
    )
    .await
    .unwrap();
    assert_eq!(api_error(api.get("a").await).code, 404, "removed with the last finalizer");

    // Without finalizers: gone at once; deleting again is 404; preconditions are honoured.
    api.create(&PostParams::default(), &widget("b", json!({}))).await.unwrap();
    let err = api_error(
        api.delete(
            "b",
            &DeleteParams::default()
                .preconditions(kube::api::Preconditions { uid: Some("wrong".into()), resource_version: None }),
        )
        .await,
    );
    assert_eq!(err.code, 409);
    let status =
        api.delete("b", &DeleteParams::default()).await.unwrap().right().expect("a Status for an immediate delete");
    assert_eq!(status.details.unwrap().name, "b");
    assert_eq!(api_error(api.delete("b", &DeleteParams::default()).await).code, 404);
}

#[tokio::test]
async fn selectors_and_pagination_on_list() {
    let server = FakeApiServer::start().await;
    let api = install_widgets(&server.client()).await;
    for (name, app, tier) in [("a", "web", "front"), ("b", "web", "back"), ("c", "db", "back"), ("d", "cache", "")] {
        let mut labels = vec![("app", app)];
        if !tier.is_empty() {
            labels.push(("tier", tier));
        }
        api.create(&PostParams::default(), &widget_labeled(name, &labels)).await.unwrap();
    }
    let names = |l: kube::api::ObjectList<kube::api::DynamicObject>| {
        l.items.into_iter().map(|o| o.metadata.name.unwrap()).collect::<Vec<_>>()
    };
    let by_labels = |s: &'static str| {
        let api = api.clone();
        async move { names(api.list(&ListParams::default().labels(s)).await.unwrap()) }
    };
    assert_eq!(by_labels("app=web").await, ["a", "b"]);
    assert_eq!(by_labels("app==web,tier!=front").await, ["b"]);
    assert_eq!(by_labels("app in (db,cache)").await, ["c", "d"]);
    assert_eq!(by_labels("app notin (web)").await, ["c", "d"]);
    assert_eq!(by_labels("tier").await, ["a", "b", "c"]);
    assert_eq!(by_labels("!tier").await, ["d"]);
    assert_eq!(names(api.list(&ListParams::default().fields("metadata.name=c")).await.unwrap()), ["c"]);
    assert_eq!(
        names(api.list(&ListParams::default().fields("metadata.name!=c,metadata.namespace=default")).await.unwrap()),
        ["a", "b", "d"]
    );
    assert_eq!(api_error(api.list(&ListParams::default().fields("spec.x=1")).await).code, 400);
    assert_eq!(api_error(api.list(&ListParams::default().labels("a in b")).await).code, 400);

    // Pagination: consistent with the first page's resourceVersion even when writes happen between pages.
    let page1 = api.list(&ListParams::default().limit(2)).await.unwrap();
    let rv = page1.metadata.resource_version.clone().unwrap();
    let token = page1.metadata.continue_.clone().unwrap();
    assert_eq!(page1.metadata.remaining_item_count, Some(2));
    assert_eq!(names(page1), ["a", "b"]);
    api.delete("d", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &widget("e", json!({}))).await.unwrap();
    let page2 = api.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(page2.metadata.resource_version.as_deref(), Some(rv.as_str()));
    assert!(page2.metadata.continue_.is_none());
    assert_eq!(names(page2), ["c", "d"], "the snapshot of the first page, not the current state");

    // After compaction the token is too old: 410 Expired.
    server.compact();
    let err = api_error(api.list(&ListParams::default().limit(2).continue_token(&token)).await);
    assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
    // "0" and NotOlderThan both serve the current state.
    let any = api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(names(any), ["a", "b", "c", "e"]);
}
