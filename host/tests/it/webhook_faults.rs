//! The admission webhook's configuration cannot be written, on the real kube-apiserver, because
//! the host's ServiceAccount lacks the RBAC for it: `WebhookServing` is `False` in the overview
//! and the metrics, naming what to apply, and clears by itself once the RBAC is applied.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;
use serde_json::Value;

use crate::common;
use crate::common::kube::*;

const T: Duration = Duration::from_secs(90);

/// `steward rbac` for the config `cfg`, as the ServiceAccount `steward` of `k`'s namespace.
fn rbac(k: &Kube, cfg: &std::path::Path, name: &str) -> String {
    let out = crate::common::steward()
        .args(["rbac", "--namespace", &k.ns, "--service-account", "steward", "--name", name, "-c"])
        .arg(cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "steward rbac: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The host condition `WebhookServing` in `engine`'s overview.
fn serving(engine: &steward::engine::Engine) -> Option<Value> {
    let o = serde_json::to_value(engine.overview()).unwrap();
    o["conditions"].as_array()?.iter().find(|c| c["type"] == "WebhookServing").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_whose_configuration_is_forbidden_is_a_condition_until_the_rbac_is_applied() {
    let Some(k) = Kube::real("webhook-fault").await else { return };
    let port = common::host::free_port();
    let name = format!("steward-{}", k.ns);
    let packages = ["mcpserver"];
    k.install_crds(&packages).await;
    let (_dir, cfg) = k.host_dir(
        &packages,
        &format!(
            "webhook:\n  enabled: true\n  listen: 127.0.0.1:{port}\n  url: https://127.0.0.1:{port}/validate\n  configurationName: {name}\n  namespace: {ns}\n",
            ns = k.ns
        ),
    );
    // The RBAC `steward rbac` prints, less its rules for the webhook's configuration.
    let full = rbac(&k, &cfg, &name);
    assert!(full.contains("validatingwebhookconfigurations"), "{full}");
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&full).unwrap();
    for doc in &mut docs {
        if let Some(rules) = doc.get_mut("rules").and_then(Value::as_array_mut) {
            rules.retain(|r| !r["resources"].to_string().contains("validatingwebhookconfigurations"));
        }
    }
    let partial: Vec<String> =
        docs.iter().filter(|d| !d.is_null()).map(|d| serde_json::to_string(d).unwrap()).collect();
    k.apply_yaml(&partial.join("\n---\n")).await;

    let as_steward = k.client_as_service_account("steward").await;
    let engine = start(&cfg, as_steward.clone()).await;
    let _webhook = steward::host::start_webhook(&engine, as_steward).await.unwrap_or_else(|e| panic!("{e}"));

    let bad = common::eventually(
        T,
        "WebhookServing False",
        async || serving(&engine),
        |c| c.as_ref().is_some_and(|c| c["status"] == "False"),
    )
    .await
    .unwrap();
    assert_eq!(bad["reason"], "ConfigurationNotApplied", "{bad}");
    let message = bad["message"].as_str().unwrap();
    assert!(message.contains("validatingwebhookconfigurations") && message.contains("steward rbac"), "{message}");
    let metrics = engine.render_metrics();
    let series = "steward_host_condition{type=\"WebhookServing\",subject=\"\",status=\"False\"} 1";
    assert!(metrics.contains(series), "{metrics}");
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(k.client.clone());
    assert!(configurations.get_opt(&name).await.unwrap().is_none(), "nothing was written");

    // The repair: the whole RBAC. The host notices at its next try, with no restart.
    k.apply_yaml(&full).await;
    let good = common::eventually(
        T,
        "WebhookServing True again",
        async || serving(&engine),
        |c| c.as_ref().is_some_and(|c| c["status"] == "True"),
    )
    .await
    .unwrap();
    assert_eq!(good["reason"], "Serving", "{good}");
    assert!(configurations.get_opt(&name).await.unwrap().is_some(), "the configuration is written");
    let metrics = engine.render_metrics();
    assert!(
        metrics.contains("steward_host_condition{type=\"WebhookServing\",subject=\"\",status=\"True\"} 1"),
        "{metrics}"
    );
    configurations.delete(&name, &Default::default()).await.unwrap();
    engine.shutdown(Duration::from_secs(5)).await;
}
