//! The least RBAC the host needs for the kinds it serves.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use steward_sdk::KindInfo;

use super::crd::yaml_document;

/// Which Secrets the host must be able to read: those that services' secret references
/// (`secretKeyRef`) name, which it reads only in the namespace of the object naming them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecretAccess {
    /// No served plugin owns services: no Secret is read.
    #[default]
    None,
    /// The host watches these namespaces: `get` on `secrets` in each (a Role and RoleBinding).
    Namespaces(Vec<String>),
    /// The host watches every namespace: nothing is granted (a cluster-wide read of Secrets is
    /// too much); the YAML says what the operator must grant per namespace, and why.
    AllNamespaces,
}

/// Who the RBAC objects are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacOptions {
    /// Name of the ClusterRole and ClusterRoleBinding; the Role and RoleBinding are `{name}-leader-election`.
    pub name: String,
    /// The namespace Steward runs in: of the ServiceAccount, the Role and the leader-election Lease.
    pub namespace: String,
    /// The ServiceAccount the Steward pods run as.
    pub service_account: String,
    /// Which Secrets the host reads for services.
    pub secrets: SecretAccess,
    /// The kinds of objects the host manages for its plugins' objects (what the capability
    /// units need, `crate::capabilities::access`): created, updated, watched and deleted.
    pub managed_kinds: Vec<crate::objects::ObjectKind>,
    /// What the admission webhook writes, when the config enables it (`kubernetes.webhook`).
    pub webhook: Option<WebhookAccess>,
}

/// What the admission webhook (`kubernetes.webhook`) writes: its configuration, and the Secret
/// of its self-managed certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookAccess {
    /// The `ValidatingWebhookConfiguration`'s name.
    pub configuration: String,
    /// The certificate's Secret as (namespace, name); `None` with the user's certificate files.
    pub secret: Option<(String, String)>,
}

impl Default for RbacOptions {
    fn default() -> Self {
        Self {
            name: "steward".into(),
            namespace: "steward".into(),
            service_account: "steward".into(),
            secrets: SecretAccess::None,
            managed_kinds: Vec::new(),
            webhook: None,
        }
    }
}

/// An option that is not a valid Kubernetes name.
#[derive(Debug, thiserror::Error)]
#[error("{option} `{value}` is not a valid name: use lower-case letters, digits and '-' ({rule})")]
pub struct RbacError {
    /// The option, as the command line spells it (`--namespace`).
    pub option: &'static str,
    /// What was given.
    pub value: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

impl RbacOptions {
    /// Checks every name is one the API server accepts: `namespace` a DNS-1123 label,
    /// `name` and `service_account` DNS-1123 subdomains (`name` short enough for its `-leader-election` suffix).
    pub fn validate(&self) -> Result<(), RbacError> {
        let subdomain = |s: &str| s.len() <= 253 && s.split('.').all(crate::plugin::is_dns_label);
        if !crate::plugin::is_dns_label(&self.namespace) {
            return Err(RbacError {
                option: "--namespace",
                value: self.namespace.clone(),
                rule: "a DNS-1123 label of at most 63",
            });
        }
        if !subdomain(&self.service_account) {
            return Err(RbacError {
                option: "--service-account",
                value: self.service_account.clone(),
                rule: "a DNS-1123 subdomain",
            });
        }
        if !subdomain(&self.name) || self.name.len() > 253 - LEADER_SUFFIX.len() {
            return Err(RbacError { option: "--name", value: self.name.clone(), rule: "a DNS-1123 subdomain" });
        }
        Ok(())
    }
}

const LEADER_SUFFIX: &str = "-leader-election";
const SECRETS_SUFFIX: &str = "-secrets";
const WEBHOOK_SUFFIX: &str = "-webhook";

/// The RBAC objects of one Steward installation.
#[derive(Clone, Debug, PartialEq)]
pub struct Rbac {
    /// The kinds it covers, as `Kind.group`, sorted (for the generated comment).
    pub kinds: Vec<String>,
    /// The ServiceAccount the pods run as.
    pub service_account: ServiceAccount,
    /// What the host may do cluster-wide: its kinds, their status, Events.
    pub cluster_role: ClusterRole,
    /// Grants `cluster_role` to the ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
    /// What the host may do in its own namespace: the leader-election Lease.
    pub role: Role,
    /// Grants `role` to the ServiceAccount.
    pub role_binding: RoleBinding,
    /// `get` on `secrets`, one Role per watched namespace (`{name}-secrets`), when services
    /// may read Secrets there.
    pub secret_roles: Vec<Role>,
    /// Grants each of `secret_roles` to the ServiceAccount, in its namespace.
    pub secret_role_bindings: Vec<RoleBinding>,
    /// What the host reads Secrets for, as the options said.
    pub secrets: SecretAccess,
    /// The kinds it applies, watches and deletes for its plugins' objects (`apiVersion/Kind`).
    pub managed_kinds: Vec<String>,
    /// The ServiceAccount as `namespace:name`, for the instructions in the YAML.
    pub subject: String,
    /// Whether the ClusterRole lets the host write the admission webhook's configuration.
    pub webhook: bool,
    /// With the webhook's self-managed certificate: the Role on its Secret (`{name}-webhook`, in
    /// the Secret's namespace) and its RoleBinding.
    pub webhook_secret: Option<(Role, RoleBinding)>,
}

/// The verbs on a kind's objects: read and watch them, and patch or update them (finalizers).
pub const OBJECT_VERBS: &[&str] = &["get", "list", "patch", "update", "watch"];
pub use crate::model::HOST_CREATED_KINDS;
/// The verbs on the objects of [`HOST_CREATED_KINDS`], beside [`OBJECT_VERBS`].
pub const CREATE_VERBS: &[&str] = &["create", "delete"];
/// The verbs on a kind's status subresource.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];
/// The verbs on Events (core and `events.k8s.io`).
pub const EVENT_VERBS: &[&str] = &["create", "patch"];
/// The verbs on the leader-election Lease: create it, renew or take it (an update, guarded by its
/// resourceVersion), and watch who holds it. No `patch`: the election never patches.
pub const LEASE_VERBS: &[&str] = &["create", "get", "list", "update", "watch"];
/// The verbs on the objects the host manages: watch them, apply them (server-side
/// apply creates or patches), and delete the ones no longer wanted.
pub const CHILD_VERBS: &[&str] = &["create", "delete", "list", "patch", "watch"];
/// The verbs on Secrets: read one by name (never list or watch them).
pub const SECRET_VERBS: &[&str] = &["get"];
/// The verbs on the webhook's own configuration and certificate Secret, by name: read it, and
/// write it (server-side apply patches; a renewal updates). `create` cannot be limited to a
/// name, so it is granted on its own.
pub const WEBHOOK_VERBS: &[&str] = &["get", "patch", "update"];

/// The least RBAC the host needs to serve `kinds` from the namespace `opts.namespace`:
///
/// - a ClusterRole with, per API group, one rule on the kinds' plurals (get, list, watch, patch,
///   update), one on their `/status` (get, patch, update), create and delete on the kinds the
///   host creates itself ([`HOST_CREATED_KINDS`]), and rules to create and patch Events
///   (core and `events.k8s.io`), and [`CHILD_VERBS`] on the child kinds the config grants;
///   with the admission webhook, [`WEBHOOK_VERBS`] on its `ValidatingWebhookConfiguration` by
///   name and `create` on those; nothing else, in particular not CustomResourceDefinitions;
/// - a ClusterRoleBinding of it to the ServiceAccount;
/// - a Role and RoleBinding in `opts.namespace` for `coordination.k8s.io` Leases (leader election);
/// - with [`SecretAccess::Namespaces`], a Role (`get` on `secrets`) and RoleBinding in each of
///   those namespaces; nothing cluster-wide for Secrets, ever;
/// - with the webhook's self-managed certificate, a Role (`{name}-webhook`: [`WEBHOOK_VERBS`] on
///   its Secret by name, and `create` on Secrets) and RoleBinding in the Secret's namespace;
/// - the ServiceAccount itself.
///
/// Rules, resources and verbs are sorted and deduplicated, so the same kinds (in any order, with
/// repeats) always give the same objects.
pub fn rbac_for(kinds: &[KindInfo], opts: &RbacOptions) -> Rbac {
    let mut by_group: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for k in kinds {
        by_group.entry(k.group.as_str()).or_default().insert(k.plural.as_str());
    }
    let mut rules = Vec::new();
    for (group, plurals) in &by_group {
        rules.push(rule(&[group], plurals.iter().map(|p| p.to_string()), OBJECT_VERBS));
        rules.push(rule(&[group], plurals.iter().map(|p| format!("{p}/status")), STATUS_VERBS));
    }
    for k in kinds.iter().filter(|k| HOST_CREATED_KINDS.contains(&k.kind.as_str())) {
        rules.push(rule(&[k.group.as_str()], [k.plural.clone()], CREATE_VERBS));
    }
    for c in &opts.managed_kinds {
        // A served kind's plural is the plugin's; any other is the API's usual plural of the kind.
        let plural = kinds
            .iter()
            .find(|k| k.kind == c.kind && k.group == c.group() && k.version == c.version())
            .map(|k| k.plural.clone())
            .unwrap_or_else(|| {
                kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(c.group(), c.version(), &c.kind))
                    .plural
            });
        rules.push(rule(&[c.group()], [plural], CHILD_VERBS));
    }
    rules.push(rule(&[""], ["events".to_string()], EVENT_VERBS));
    rules.push(rule(&["events.k8s.io"], ["events".to_string()], EVENT_VERBS));
    if let Some(w) = &opts.webhook {
        let configurations = "validatingwebhookconfigurations".to_string();
        let group = ["admissionregistration.k8s.io"];
        rules.push(PolicyRule {
            resource_names: Some(vec![w.configuration.clone()]),
            ..rule(&group, [configurations.clone()], WEBHOOK_VERBS)
        });
        rules.push(rule(&group, [configurations], &["create"]));
    }
    rules.sort_by(|a, b| (&a.api_groups, &a.resources).cmp(&(&b.api_groups, &b.resources)));
    rules.dedup();

    let labels = || Some(BTreeMap::from([("app.kubernetes.io/part-of".to_string(), "steward".to_string())]));
    let cluster_meta = |name: &str| ObjectMeta { name: Some(name.into()), labels: labels(), ..Default::default() };
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(opts.namespace.clone()),
        labels: labels(),
        ..Default::default()
    };
    let subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: opts.service_account.clone(),
        namespace: Some(opts.namespace.clone()),
        ..Default::default()
    }]);
    let leader = format!("{}{LEADER_SUFFIX}", opts.name);
    let secrets_name = format!("{}{SECRETS_SUFFIX}", opts.name);
    let in_ns = |ns: &str| ObjectMeta {
        name: Some(secrets_name.clone()),
        namespace: Some(ns.to_string()),
        labels: labels(),
        ..Default::default()
    };
    let secret_namespaces: BTreeSet<&str> = match &opts.secrets {
        SecretAccess::Namespaces(list) => list.iter().map(String::as_str).collect(),
        SecretAccess::None | SecretAccess::AllNamespaces => BTreeSet::new(),
    };
    let secret_roles = secret_namespaces
        .iter()
        .map(|ns| Role { metadata: in_ns(ns), rules: Some(vec![rule(&[""], ["secrets".to_string()], SECRET_VERBS)]) })
        .collect();
    let secret_role_bindings = secret_namespaces
        .iter()
        .map(|ns| RoleBinding {
            metadata: in_ns(ns),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: secrets_name.clone(),
            },
            subjects: subjects.clone(),
        })
        .collect();
    let mut kind_names: Vec<String> = kinds.iter().map(|k| format!("{}.{}", k.kind, k.group)).collect();
    kind_names.sort();
    kind_names.dedup();
    let webhook_secret = opts.webhook.as_ref().and_then(|w| w.secret.as_ref()).map(|(ns, secret)| {
        let name = format!("{}{WEBHOOK_SUFFIX}", opts.name);
        let meta = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: labels(),
            ..Default::default()
        };
        let secrets = "secrets".to_string();
        let rules = vec![
            PolicyRule { resource_names: Some(vec![secret.clone()]), ..rule(&[""], [secrets.clone()], WEBHOOK_VERBS) },
            rule(&[""], [secrets], &["create"]),
        ];
        let role = Role { metadata: meta.clone(), rules: Some(rules) };
        let role_ref = RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name };
        (role, RoleBinding { metadata: meta, role_ref, subjects: subjects.clone() })
    });
    Rbac {
        kinds: kind_names,
        service_account: ServiceAccount { metadata: meta(&opts.service_account), ..Default::default() },
        cluster_role: ClusterRole { metadata: cluster_meta(&opts.name), rules: Some(rules), ..Default::default() },
        cluster_role_binding: ClusterRoleBinding {
            metadata: cluster_meta(&opts.name),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: opts.name.clone(),
            },
            subjects: subjects.clone(),
        },
        role: Role {
            metadata: meta(&leader),
            rules: Some(vec![rule(&["coordination.k8s.io"], ["leases".to_string()], LEASE_VERBS)]),
        },
        role_binding: RoleBinding {
            metadata: meta(&leader),
            role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: leader },
            subjects,
        },
        secret_roles,
        secret_role_bindings,
        secrets: opts.secrets.clone(),
        managed_kinds: opts.managed_kinds.iter().map(ToString::to_string).collect(),
        webhook: opts.webhook.is_some(),
        webhook_secret,
        subject: format!("{}:{}", opts.namespace, opts.service_account),
    }
}

fn rule(groups: &[&str], resources: impl IntoIterator<Item = String>, verbs: &[&str]) -> PolicyRule {
    let resources: BTreeSet<String> = resources.into_iter().collect();
    let verbs: BTreeSet<&str> = verbs.iter().copied().collect();
    PolicyRule {
        api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        resources: Some(resources.into_iter().collect()),
        verbs: verbs.into_iter().map(str::to_string).collect(),
        ..Default::default()
    }
}

/// `rbac` as multi-document YAML for `kubectl apply -f`: a comment saying what it grants and
/// that installing CRDs is not part of it (and, when the host reads Secrets in every namespace,
/// what the operator must grant and why), then the ServiceAccount, ClusterRole,
/// ClusterRoleBinding, Role and RoleBinding, and each namespace's Secrets Role and RoleBinding,
/// each after a `---` line, keys in alphabetical order.
pub fn rbac_yaml(rbac: &Rbac) -> String {
    let kinds = if rbac.kinds.is_empty() { "none".to_string() } else { rbac.kinds.join(", ") };
    let mut out = format!(
        "# RBAC generated by `steward rbac`; do not edit. The least Steward needs at run time:\n\
         # read, watch and patch its kinds and write their status, record Events,\n\
         # and hold the leader-election Lease in its own namespace.\n\
         # Kinds: {kinds}\n\
         # Installing the CustomResourceDefinitions (`steward crds --apply`) is an admin action\n\
         # and is deliberately not granted here.\n"
    );
    out.push_str(&secrets_comment(rbac));
    if !rbac.managed_kinds.is_empty() {
        out.push_str(&format!(
            "# Objects the host manages for its plugins' objects: apply, watch and delete {}.\n",
            rbac.managed_kinds.join(", ")
        ));
    }
    if rbac.webhook {
        let secret = match &rbac.webhook_secret {
            Some((role, _)) => format!(
                ", and in\n# namespace {} the Secret of its self-managed certificate, which it creates and renews",
                role.metadata.namespace.as_deref().unwrap_or_default()
            ),
            None => String::new(),
        };
        out.push_str(&format!(
            "# Admission webhook (kubernetes.webhook): its ValidatingWebhookConfiguration{secret}.\n"
        ));
    }
    for doc in [
        yaml_document(&rbac.service_account),
        yaml_document(&rbac.cluster_role),
        yaml_document(&rbac.cluster_role_binding),
        yaml_document(&rbac.role),
        yaml_document(&rbac.role_binding),
    ]
    .into_iter()
    .chain(
        rbac.secret_roles
            .iter()
            .zip(&rbac.secret_role_bindings)
            .flat_map(|(r, b)| [yaml_document(r), yaml_document(b)]),
    )
    .chain(rbac.webhook_secret.iter().flat_map(|(r, b)| [yaml_document(r), yaml_document(b)]))
    {
        out.push_str("---\n");
        out.push_str(&doc);
    }
    out
}

/// What the YAML says about Secrets: which namespaces it grants `get` in, or, when the host
/// watches every namespace, what the operator must grant and why nothing is granted here.
fn secrets_comment(rbac: &Rbac) -> String {
    let role = rbac.secret_roles.first().and_then(|r| r.metadata.name.clone()).unwrap_or_else(|| {
        let name = rbac.cluster_role.metadata.name.clone().unwrap_or_default();
        format!("{name}{SECRETS_SUFFIX}")
    });
    match &rbac.secrets {
        SecretAccess::None => String::new(),
        SecretAccess::Namespaces(list) => {
            let mut list = list.clone();
            list.sort();
            list.dedup();
            format!(
                "# Secrets: `get` (never list or watch) in the watched namespaces ({}), for services whose\n\
                 # env or headers come from a Secret (secretKeyRef); Steward reads a Secret only in the\n\
                 # namespace of the object that names it.\n",
                list.join(", ")
            )
        }
        SecretAccess::AllNamespaces => {
            let subject = &rbac.subject;
            format!(
                "# Secrets: services may take env and header values from a Secret (secretKeyRef), which\n\
                 # Steward reads with `get`, only in the namespace of the object that names it. This host\n\
                 # watches every namespace, so none can be listed here, and a cluster-wide right to read\n\
                 # Secrets is deliberately not granted (it would let the host read every Secret in the\n\
                 # cluster). In each namespace whose objects reference Secrets, grant it yourself:\n\
                 #   kubectl -n NAMESPACE create role {role} --verb=get --resource=secrets\n\
                 #   kubectl -n NAMESPACE create rolebinding {role} --role={role} --serviceaccount={subject}\n\
                 # or list the namespaces under `kubernetes.namespaces` in the host config and run\n\
                 # `steward rbac` again. Without it such a service fails, saying which namespace lacks it.\n"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(kind: &str, group: &str, plural: &str) -> KindInfo {
        KindInfo {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
            spec_schema: "{}".into(),
            resync_seconds: 0,
            columns: Vec::new(),
        }
    }

    fn kinds() -> Vec<KindInfo> {
        vec![
            kind("Workflow", "steward.dev", "workflows"),
            kind("Widget", "example.dev", "widgets"),
            kind("MCPServer", "steward.dev", "mcpservers"),
        ]
    }

    /// `(apiGroups, resources, verbs)` of each rule.
    fn rules(rules: &Option<Vec<PolicyRule>>) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .flatten()
            .map(|r| {
                (r.api_groups.clone().unwrap_or_default(), r.resources.clone().unwrap_or_default(), r.verbs.clone())
            })
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_cluster_role_grants_the_kinds_their_status_and_events_and_nothing_else() {
        let rbac = rbac_for(&kinds(), &RbacOptions::default());
        let want = vec![
            (strings(&[""]), strings(&["events"]), strings(&["create", "patch"])),
            (strings(&["events.k8s.io"]), strings(&["events"]), strings(&["create", "patch"])),
            (strings(&["example.dev"]), strings(&["widgets"]), strings(&["get", "list", "patch", "update", "watch"])),
            (strings(&["example.dev"]), strings(&["widgets/status"]), strings(&["get", "patch", "update"])),
            (
                strings(&["steward.dev"]),
                strings(&["mcpservers", "workflows"]),
                strings(&["get", "list", "patch", "update", "watch"]),
            ),
            (
                strings(&["steward.dev"]),
                strings(&["mcpservers/status", "workflows/status"]),
                strings(&["get", "patch", "update"]),
            ),
        ];
        assert_eq!(rules(&rbac.cluster_role.rules), want);
        let all = rules(&rbac.cluster_role.rules);
        assert!(
            all.iter()
                .all(|(g, r, v)| !g.contains(&"*".into()) && !r.contains(&"*".into()) && !v.contains(&"*".into()))
        );
        assert!(all.iter().all(|(g, _, _)| !g.contains(&"apiextensions.k8s.io".into())), "no CRD rights at run time");
        assert_eq!(rbac.kinds, ["MCPServer.steward.dev", "Widget.example.dev", "Workflow.steward.dev"]);
    }

    #[test]
    fn the_same_kinds_in_any_order_with_repeats_give_the_same_objects() {
        let opts = RbacOptions::default();
        let mut shuffled = kinds();
        shuffled.reverse();
        shuffled.push(kind("Workflow", "steward.dev", "workflows"));
        assert_eq!(rbac_for(&shuffled, &opts), rbac_for(&kinds(), &opts));
        assert_eq!(rbac_yaml(&rbac_for(&shuffled, &opts)), rbac_yaml(&rbac_for(&kinds(), &opts)));
        // Without kinds, only Events remain.
        let none = rbac_for(&[], &opts);
        assert_eq!(rules(&none.cluster_role.rules).len(), 2);
    }

    #[test]
    fn bindings_name_the_service_account_and_leases_stay_in_stewards_namespace() {
        let opts = RbacOptions {
            name: "steward-a".into(),
            namespace: "ops".into(),
            service_account: "runner".into(),
            ..RbacOptions::default()
        };
        let rbac = rbac_for(&kinds(), &opts);
        assert_eq!(rbac.service_account.metadata.name.as_deref(), Some("runner"));
        assert_eq!(rbac.service_account.metadata.namespace.as_deref(), Some("ops"));
        assert_eq!(rbac.cluster_role.metadata.name.as_deref(), Some("steward-a"));
        assert_eq!(rbac.cluster_role.metadata.namespace, None);
        let crb = &rbac.cluster_role_binding;
        assert_eq!((crb.role_ref.kind.as_str(), crb.role_ref.name.as_str()), ("ClusterRole", "steward-a"));
        for subjects in [&crb.subjects, &rbac.role_binding.subjects] {
            let [s] = subjects.as_deref().unwrap_or_default() else { panic!("one subject") };
            assert_eq!(
                (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()),
                ("ServiceAccount", "runner", Some("ops"))
            );
        }
        assert_eq!(rbac.role.metadata.name.as_deref(), Some("steward-a-leader-election"));
        assert_eq!(rbac.role.metadata.namespace.as_deref(), Some("ops"));
        assert_eq!(
            rules(&rbac.role.rules),
            vec![(
                strings(&["coordination.k8s.io"]),
                strings(&["leases"]),
                strings(&["create", "get", "list", "update", "watch"])
            )]
        );
        let rb = &rbac.role_binding;
        assert_eq!((rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()), ("Role", "steward-a-leader-election"));
        assert_eq!(rb.metadata.namespace.as_deref(), Some("ops"));
    }

    #[test]
    fn the_yaml_says_what_it_grants_and_reads_back_as_five_objects() {
        let text = rbac_yaml(&rbac_for(&kinds(), &RbacOptions::default()));
        assert!(text.starts_with("# RBAC generated by `steward rbac`"), "{text}");
        assert!(text.contains("MCPServer.steward.dev, Widget.example.dev, Workflow.steward.dev"), "{text}");
        assert!(text.contains("Installing the CustomResourceDefinitions (`steward crds --apply`) is an admin action"));
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(kinds, ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);
        assert!(docs.iter().filter(|d| !d.is_null()).all(|d| d["apiVersion"].is_string()));
        // The core API group is the empty string, which must stay a string.
        assert!(text.contains("- ''") || text.contains("- \"\""), "{text}");
    }

    #[test]
    fn granted_managed_kinds_get_exactly_the_verbs_children_need() {
        let opts = RbacOptions {
            managed_kinds: ["v1/ConfigMap", "apps/v1/Deployment", "steward.dev/v1alpha1/MCPServer"]
                .iter()
                .map(|k| crate::objects::ObjectKind::parse(k).unwrap())
                .collect(),
            ..RbacOptions::default()
        };
        let rbac = rbac_for(&kinds(), &opts);
        let got = rules(&rbac.cluster_role.rules);
        let verbs = strings(CHILD_VERBS);
        for (group, plural) in [("", "configmaps"), ("apps", "deployments"), ("steward.dev", "mcpservers")] {
            assert!(
                got.contains(&(strings(&[group]), strings(&[plural]), verbs.clone())),
                "{group}/{plural} missing from {got:?}"
            );
        }
        let text = rbac_yaml(&rbac);
        assert!(
            text.contains("# Objects the host manages for its plugins' objects: apply, watch and delete v1/ConfigMap"),
            "{text}"
        );
        // Nothing about children without a grant.
        let plain = rules(&rbac_for(&kinds(), &RbacOptions::default()).cluster_role.rules);
        assert!(plain.iter().all(|(_, r, _)| !r.contains(&"configmaps".to_string())), "{plain:?}");
    }

    #[test]
    fn the_webhook_may_write_its_configuration_and_its_certificate_secret_by_name_only() {
        let opts = RbacOptions {
            webhook: Some(WebhookAccess {
                configuration: "steward".into(),
                secret: Some(("ops".into(), "steward-webhook-tls".into())),
            }),
            ..RbacOptions::default()
        };
        let rbac = rbac_for(&kinds(), &opts);
        let named: Vec<_> = rbac
            .cluster_role
            .rules
            .iter()
            .flatten()
            .filter(|r| r.api_groups.as_deref() == Some(&["admissionregistration.k8s.io".to_string()]))
            .map(|r| (r.resources.clone().unwrap_or_default(), r.resource_names.clone(), r.verbs.clone()))
            .collect();
        let configurations = strings(&["validatingwebhookconfigurations"]);
        assert_eq!(
            named,
            vec![
                (configurations.clone(), Some(strings(&["steward"])), strings(&["get", "patch", "update"])),
                (configurations, None, strings(&["create"])),
            ]
        );
        let (role, binding) = rbac.webhook_secret.as_ref().expect("a Role on the Secret");
        assert_eq!(role.metadata.namespace.as_deref(), Some("ops"));
        assert_eq!(role.metadata.name.as_deref(), Some("steward-webhook"));
        let rules = role.rules.as_deref().unwrap_or_default();
        assert_eq!(rules[0].resource_names, Some(strings(&["steward-webhook-tls"])));
        assert_eq!(rules[0].verbs, strings(&["get", "patch", "update"]));
        assert_eq!((rules[1].resource_names.clone(), rules[1].verbs.clone()), (None, strings(&["create"])));
        assert_eq!(binding.role_ref.name, "steward-webhook");
        let text = rbac_yaml(&rbac);
        assert!(text.contains("# Admission webhook (kubernetes.webhook)"), "{text}");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let objects: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            objects,
            ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding"]
        );
        // The user's certificate files: no Secret to write; without the webhook: nothing of it.
        let files = RbacOptions {
            webhook: Some(WebhookAccess { configuration: "steward".into(), secret: None }),
            ..RbacOptions::default()
        };
        assert!(rbac_for(&kinds(), &files).webhook_secret.is_none());
        let plain = rbac_for(&kinds(), &RbacOptions::default());
        assert!(!plain.webhook && plain.webhook_secret.is_none());
        assert!(!rbac_yaml(&plain).contains("validatingwebhookconfigurations"));
    }

    #[test]
    fn options_must_be_kubernetes_names() {
        assert!(RbacOptions::default().validate().is_ok());
        let bad = RbacOptions { namespace: "Ops".into(), ..RbacOptions::default() };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "--namespace `Ops` is not a valid name: use lower-case letters, digits and '-' (a DNS-1123 label of at most 63)"
        );
        let bad = RbacOptions { service_account: "a_b".into(), ..RbacOptions::default() };
        assert!(bad.validate().unwrap_err().to_string().starts_with("--service-account `a_b`"));
        let bad = RbacOptions { name: String::new(), ..RbacOptions::default() };
        assert!(bad.validate().unwrap_err().to_string().starts_with("--name ``"));
    }

    #[test]
    fn secrets_are_read_with_get_in_each_watched_namespace_and_never_cluster_wide() {
        let opts = RbacOptions {
            secrets: SecretAccess::Namespaces(vec!["team-b".into(), "team-a".into(), "team-b".into()]),
            ..RbacOptions::default()
        };
        let rbac = rbac_for(&kinds(), &opts);
        assert!(
            rules(&rbac.cluster_role.rules).iter().all(|(_, r, _)| !r.contains(&"secrets".to_string())),
            "no cluster-wide Secrets"
        );
        let namespaces: Vec<_> = rbac.secret_roles.iter().map(|r| r.metadata.namespace.clone().unwrap()).collect();
        assert_eq!(namespaces, ["team-a", "team-b"]);
        for (role, binding) in rbac.secret_roles.iter().zip(&rbac.secret_role_bindings) {
            assert_eq!(rules(&role.rules), vec![(strings(&[""]), strings(&["secrets"]), strings(&["get"]))]);
            assert_eq!(role.metadata.name.as_deref(), Some("steward-secrets"));
            assert_eq!(binding.metadata.namespace, role.metadata.namespace);
            assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("Role", "steward-secrets"));
            let [s] = binding.subjects.as_deref().unwrap_or_default() else { panic!("one subject") };
            assert_eq!((s.name.as_str(), s.namespace.as_deref()), ("steward", Some("steward")));
        }
        let text = rbac_yaml(&rbac);
        assert!(text.contains("in the watched namespaces (team-a, team-b)"), "{text}");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
    }

    #[test]
    fn watching_every_namespace_grants_no_secrets_and_says_what_to_grant_and_why() {
        let opts = RbacOptions { secrets: SecretAccess::AllNamespaces, ..RbacOptions::default() };
        let rbac = rbac_for(&kinds(), &opts);
        assert!(rbac.secret_roles.is_empty() && rbac.secret_role_bindings.is_empty());
        let text = rbac_yaml(&rbac);
        assert!(!text.contains("- secrets"), "nothing is granted on Secrets: {text}");
        assert!(text.contains("cluster-wide right to read\n# Secrets is deliberately not granted"), "{text}");
        assert!(
            text.contains("kubectl -n NAMESPACE create role steward-secrets --verb=get --resource=secrets"),
            "{text}"
        );
        assert!(text.contains("--role=steward-secrets --serviceaccount=steward:steward"), "{text}");
        // Without services, nothing about Secrets at all.
        assert!(!rbac_yaml(&rbac_for(&kinds(), &RbacOptions::default())).contains("Secret"));
    }
}
