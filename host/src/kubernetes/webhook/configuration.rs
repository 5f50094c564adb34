//! The `ValidatingWebhookConfiguration`: one webhook whose rules list exactly the served,
//! enabled kinds, built from the config, and kept applied (server-side apply) by the leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use kube::api::{Api, Patch, PatchParams};
use steward_sdk::KindInfo;
use tokio::sync::{Notify, watch};

use super::{WebhookError, WebhookHost};
use crate::config::{WebhookConfig, WebhookEndpoint};
use crate::health::WEBHOOK_SERVING;

/// The name of the one webhook in the configuration (the API server names it in refusals:
/// `admission webhook "validate.steward.dev" denied the request: …`).
pub const WEBHOOK_NAME: &str = "validate.steward.dev";
/// The label the API server (1.21 and later) puts on every namespace with its name; the
/// configuration's `namespaceSelector` matches it when the host serves listed namespaces.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// How often the leader applies the configuration even when nothing changed, repairing an edit
/// or a delete by someone else.
pub const RESYNC: Duration = Duration::from_secs(60);

/// What the configuration is made from besides the kinds: the webhook's settings and the part
/// of the cluster the host serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// `kubernetes.webhook`.
    pub webhook: WebhookConfig,
    /// `kubernetes.namespaces`: when set, only objects in them are sent to the webhook.
    pub namespaces: Vec<String>,
    /// `kubernetes.labelSelector`: when set, only objects it selects are sent.
    pub label_selector: Option<String>,
    /// The namespace of a Service that names none (the host's own).
    pub namespace: String,
}

/// The configuration for `kinds` (each validated on CREATE and UPDATE), calling the webhook
/// where `shape` says, trusting `ca_bundle` (PEM) when given. With no kinds its webhook has no
/// rules: nothing is sent to it.
pub fn configuration(shape: &Shape, kinds: &[KindInfo], ca_bundle: Option<&str>) -> ValidatingWebhookConfiguration {
    let w = &shape.webhook;
    let mut groups: BTreeMap<(&str, &str, bool), BTreeSet<&str>> = BTreeMap::new();
    for k in kinds {
        groups.entry((k.group.as_str(), k.version.as_str(), k.namespaced)).or_default().insert(k.plural.as_str());
    }
    let rules = groups
        .into_iter()
        .map(|((group, version, namespaced), plurals)| RuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec![version.to_string()]),
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            resources: Some(plurals.into_iter().map(str::to_string).collect()),
            scope: Some(if namespaced { "Namespaced" } else { "Cluster" }.into()),
        })
        .collect();
    let client_config = WebhookClientConfig {
        ca_bundle: ca_bundle.map(|pem| ByteString(pem.as_bytes().to_vec())),
        service: match &w.endpoint {
            Some(WebhookEndpoint::Service { name, namespace, port, path }) => Some(ServiceReference {
                name: name.clone(),
                namespace: namespace.clone().unwrap_or_else(|| shape.namespace.clone()),
                path: Some(path.clone()),
                port: Some(i32::from(*port)),
            }),
            _ => None,
        },
        url: match &w.endpoint {
            Some(WebhookEndpoint::Url(url)) => Some(url.clone()),
            _ => None,
        },
    };
    let namespace_selector = (!shape.namespaces.is_empty()).then(|| LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: NAMESPACE_NAME_LABEL.into(),
            operator: "In".into(),
            values: Some(shape.namespaces.clone()),
        }]),
        match_labels: None,
    });
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(w.configuration_name.clone()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/part-of".into(), "steward".into())])),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: WEBHOOK_NAME.into(),
            admission_review_versions: vec!["v1".into()],
            client_config,
            failure_policy: Some(w.failure_policy.as_str().into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector,
            object_selector: shape.label_selector.as_deref().map(crate::kubernetes::selector::to_label_selector),
            rules: Some(rules),
            side_effects: "None".into(),
            timeout_seconds: Some(w.timeout_seconds as i32),
            match_conditions: None,
        }]),
    }
}

/// `c` as a YAML document.
pub fn yaml(c: &ValidatingWebhookConfiguration) -> String {
    crate::kubernetes::crd::yaml_document(c)
}

/// Creates or updates `c` with server-side apply under the host's field manager (forced: the
/// host owns this configuration).
pub async fn apply(client: kube::Client, c: &ValidatingWebhookConfiguration) -> Result<(), WebhookError> {
    let name = c.metadata.name.clone().unwrap_or_default();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let params = PatchParams::apply(crate::kubernetes::FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(c)).await.map(|_| ()).map_err(|e| {
        let hint = match &e {
            kube::Error::Api(s) if s.code == 403 => {
                "; the host's ServiceAccount needs get, create and patch on validatingwebhookconfigurations: apply the RBAC of `steward rbac --config` with kubernetes.webhook enabled"
            }
            _ => "",
        };
        WebhookError::Configuration { name, message: format!("{e}{hint}") }
    })
}

/// How often the loop looks at leadership, so a replica that takes the lease over applies the
/// configuration within about this long.
pub const LEADERSHIP_CHECK: Duration = Duration::from_secs(1);

/// Keeps the configuration applied while this replica leads: as soon as it leads, whenever
/// `changed` is notified (a kind enabled or disabled, a plugin loaded or gone) or the CA
/// changes, and every [`RESYNC`]. A write that fails is logged (the 1st, 2nd, 4th… in a row)
/// and made again after a pause that doubles up to [`RESYNC`].
pub async fn keep_applied(
    client: kube::Client,
    shape: Shape,
    host: Arc<dyn WebhookHost>,
    mut ca: watch::Receiver<Option<String>>,
    changed: Arc<Notify>,
) {
    let mut written: Option<ValidatingWebhookConfiguration> = None;
    let mut next_write = tokio::time::Instant::now();
    let mut failures = 0u32;
    let conditions = host.conditions();
    let mut tick = tokio::time::interval(LEADERSHIP_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let nudged = tokio::select! {
            _ = tick.tick() => false,
            _ = changed.notified() => true,
            r = ca.changed() => {
                if r.is_err() {
                    // The certificate's task is gone: the webhook is stopping.
                    return;
                }
                true
            }
        };
        if !host.leads() {
            written = None;
            continue;
        }
        let kinds: Vec<KindInfo> = host.served().into_iter().map(|s| s.info).collect();
        let want = configuration(&shape, &kinds, ca.borrow().as_deref());
        let now = tokio::time::Instant::now();
        let differs = written.as_ref() != Some(&want);
        // A change is written at once, unless writes are failing (then at the retry time).
        if !(differs && (failures == 0 || nudged) || now >= next_write) {
            continue;
        }
        match apply(client.clone(), &want).await {
            Ok(()) => {
                if differs {
                    let names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
                    tracing::info!(configuration = %shape.webhook.configuration_name, kinds = ?names, "admission webhook configuration applied");
                }
                written = Some(want);
                if failures > 0
                    && let Some(c) = &conditions
                {
                    c.ok(
                        WEBHOOK_SERVING,
                        None,
                        "Serving",
                        "the admission webhook serves and its configuration is applied",
                    );
                }
                failures = 0;
                next_write = now + RESYNC;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                written = None;
                // At most 8 s apart: one request, and the condition clears within seconds of the repair.
                next_write = now + (LEADERSHIP_CHECK * 2u32.saturating_pow(failures.min(3))).min(RESYNC);
                if failures.is_power_of_two() {
                    tracing::warn!(failures, "{e}; trying again");
                }
                if let Some(c) = &conditions {
                    c.fail(
                        WEBHOOK_SERVING,
                        None,
                        "ConfigurationNotApplied",
                        format!(
                            "{e}; until it is, the API server does not send this host the reviews of the served kinds; \
                             tried again with backoff: check that the API server is reachable and the RBAC from `steward rbac`"
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::FailurePolicy;

    fn kind(kind: &str, group: &str, plural: &str, namespaced: bool) -> KindInfo {
        KindInfo {
            group: group.into(),
            version: "v1alpha1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
            spec_schema: "{}".into(),
            resync_seconds: 0,
            columns: Vec::new(),
        }
    }

    fn shape(endpoint: WebhookEndpoint) -> Shape {
        Shape {
            webhook: WebhookConfig { enabled: true, endpoint: Some(endpoint), ..WebhookConfig::default() },
            namespaces: Vec::new(),
            label_selector: None,
            namespace: "steward".into(),
        }
    }

    fn service() -> WebhookEndpoint {
        WebhookEndpoint::Service {
            name: "steward-webhook".into(),
            namespace: None,
            port: 443,
            path: "/validate".into(),
        }
    }

    #[test]
    fn one_webhook_whose_rules_are_exactly_the_served_kinds_on_create_and_update() {
        let kinds = [
            kind("Workflow", "steward.dev", "workflows", true),
            kind("MCPServer", "steward.dev", "mcpservers", true),
            kind("Shared", "test.steward.dev", "shareds", false),
        ];
        let c = configuration(&shape(service()), &kinds, Some("PEM"));
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(v["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(v["metadata"]["name"], "steward");
        let w = &v["webhooks"][0];
        assert_eq!(v["webhooks"].as_array().unwrap().len(), 1);
        assert_eq!(w["name"], WEBHOOK_NAME);
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(w["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["timeoutSeconds"], 10);
        assert_eq!(
            w["rules"],
            json!([
                {"apiGroups": ["steward.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["mcpservers", "workflows"], "scope": "Namespaced"},
                {"apiGroups": ["test.steward.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["shareds"], "scope": "Cluster"},
            ])
        );
        assert_eq!(
            w["clientConfig"],
            json!({"caBundle": "UEVN", "service": {"name": "steward-webhook", "namespace": "steward", "path": "/validate", "port": 443}})
        );
        assert!(w.get("namespaceSelector").is_none() && w.get("objectSelector").is_none());
        // No kinds: no rules, nothing is sent to it.
        let none = serde_json::to_value(configuration(&shape(service()), &[], None)).unwrap();
        assert_eq!(none["webhooks"][0]["rules"], json!([]));
        assert!(none["webhooks"][0]["clientConfig"].get("caBundle").is_none());
        assert!(yaml(&c).contains("name: validate.steward.dev"));
    }

    #[test]
    fn a_url_a_policy_and_the_served_namespaces_and_labels_shape_it() {
        let mut s = shape(WebhookEndpoint::Url("https://127.0.0.1:9443/validate".into()));
        s.webhook.failure_policy = FailurePolicy::Ignore;
        s.webhook.configuration_name = "steward-a".into();
        s.namespaces = vec!["team-a".into(), "team-b".into()];
        s.label_selector = Some("shard=a, tier in (x, y),env!=prod,!legacy,owner,z notin (q)".into());
        let v = serde_json::to_value(configuration(&s, &[kind("MCPServer", "steward.dev", "mcpservers", true)], None))
            .unwrap();
        let w = &v["webhooks"][0];
        assert_eq!(v["metadata"]["name"], "steward-a");
        assert_eq!(w["failurePolicy"], "Ignore");
        assert_eq!(w["clientConfig"], json!({"url": "https://127.0.0.1:9443/validate"}));
        assert_eq!(
            w["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]})
        );
        assert_eq!(
            w["objectSelector"]["matchExpressions"],
            json!([
                {"key": "shard", "operator": "In", "values": ["a"]},
                {"key": "tier", "operator": "In", "values": ["x", "y"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "owner", "operator": "Exists"},
                {"key": "z", "operator": "NotIn", "values": ["q"]},
            ])
        );
    }
}
