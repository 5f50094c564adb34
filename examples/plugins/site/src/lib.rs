//! An example Steward plugin that owns child objects: kind `Site` (`examples.steward.dev/v1alpha1`).
//!
//! A Site is a title and a few pages. Its plugin renders them into one ConfigMap, `<site>-pages`,
//! whose `data` holds `index.html` (the title and a link to each page) and one key per page,
//! and, when the spec asks for `replicas`, a Deployment `<site>-web` of nginx serving that
//! ConfigMap. It never writes either: it lists them with `Outcome::with_children`, and the host
//! (granted the capability `children` for these kinds) makes them exist, removes what is no
//! longer listed, and reconciles the Site again when one of them changes. The next reconcile
//! reads them back through `Context::children` and reports whether the ConfigMap holds the
//! pages yet.
//!
//! `docs/kubernetes.md` ("Child objects") walks through it in a cluster.

mod render;
mod validate;

use std::collections::BTreeMap;

use steward_sdk::prelude::*;

pub use render::{CONFIG_MAP_KIND, DEPLOYMENT_KIND, INDEX, config_map_name, deployment_name, pages_data};
pub use validate::{MAX_BYTES, MAX_PAGES};

/// A small static web site.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteSpec {
    /// The site's title, shown on its index page.
    pub title: String,
    /// The pages, by name: each becomes a key of the ConfigMap (letters, digits, `-`, `_` and
    /// `.`; `about.html`), its value the page's text. The index links them in name order.
    #[serde(default)]
    pub pages: BTreeMap<String, String>,
    /// When set, the pages are also served: a Deployment `<site>-web` of this many nginx
    /// replicas mounting the ConfigMap (the host must be granted `apps/v1/Deployment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
}

/// What a Site reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteStatus {
    /// The name of the ConfigMap that holds the pages.
    pub config_map: String,
    /// How many pages the spec has (the index not counted).
    pub pages: usize,
    /// Whether the ConfigMap, as last seen, holds exactly the pages of this spec.
    pub ready: bool,
    /// The Deployment that serves the pages, when `replicas` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
}

/// The `Site` kind.
pub struct Site;

impl Kind for Site {
    type Spec = SiteSpec;
    type Status = SiteStatus;
    const GROUP: &'static str = "examples.steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "Site";
    const PLURAL: &'static str = "sites";

    fn validate(obj: &Object<SiteSpec, SiteStatus>) -> Vec<FieldError> {
        validate::validate(&obj.spec)
    }

    fn reconcile(ctx: &Context, obj: &Object<SiteSpec, SiteStatus>) -> Result<Outcome<SiteStatus>, Error> {
        let children = render::children(&obj.name, &obj.spec);
        let config_map = config_map_name(&obj.name);
        let data = pages_data(&obj.spec);
        let observed = ctx.children();
        let seen = observed.iter().find(|c| c.kind == CONFIG_MAP_KIND && c.name == config_map);
        // Ready once the host has seen the ConfigMap holding exactly these pages: the first
        // reconcile only asks for it; the host re-queues the Site when the ConfigMap appears.
        let (ready, reason, message) = match seen.and_then(|c| c.object.as_ref()) {
            None => (false, "Pending", format!("waiting for ConfigMap {config_map} to be created")),
            Some(live) if live.get("data") == Some(&serde_json::to_value(&data).unwrap_or_default()) => (
                true,
                "Published",
                format!("ConfigMap {config_map} holds the index and {} page(s)", obj.spec.pages.len()),
            ),
            Some(_) => (false, "Updating", format!("ConfigMap {config_map} does not hold these pages yet")),
        };
        let status = SiteStatus {
            config_map,
            pages: obj.spec.pages.len(),
            ready,
            deployment: obj.spec.replicas.map(|_| deployment_name(&obj.name)),
        };
        Ok(Outcome::status(status).condition(Condition::new("Ready", ready, reason, message)).with_children(children))
    }
}

steward_sdk::export_plugin!(
    name: "site",
    version: env!("CARGO_PKG_VERSION"),
    capabilities: ["children"],
    kinds: [Site],
);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::{FakeHost, object, reconcile};

    use super::*;

    fn site(spec: serde_json::Value) -> RawObject {
        RawObject { api_version: "examples.steward.dev/v1alpha1".into(), ..object("Site", "web", spec) }
    }

    fn spec() -> serde_json::Value {
        json!({"title": "Hello", "pages": {"about.html": "<p>About us</p>", "faq.html": "<p>FAQ</p>"}})
    }

    /// The ConfigMap as the host would show it once made: the rendered data and what the
    /// server adds.
    fn live_config_map(data: serde_json::Value) -> ObservedChild {
        ObservedChild {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "web-pages".into(),
            object: Some(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "web-pages", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
                "data": data,
            })),
        }
    }

    #[test]
    fn describes_the_kind_and_the_capability() {
        let info = __steward_plugin().info();
        assert_eq!((info.name.as_str(), info.version.as_str()), ("site", "0.1.0"));
        assert_eq!(info.capabilities, ["children"]);
        let k = &info.kinds[0];
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced),
            ("examples.steward.dev", "v1alpha1", "Site", "sites", true)
        );
        let s: serde_json::Value = serde_json::from_str(&k.spec_schema).unwrap();
        assert_eq!(s["required"], json!(["title"]));
        assert_eq!(s["properties"]["pages"]["additionalProperties"]["type"], "string");
    }

    #[test]
    fn a_site_wants_its_config_map_and_is_pending_until_the_host_shows_it() {
        let out = reconcile::<Site>(&FakeHost::new(), &site(spec()), &[]).unwrap();
        let children = out.children.as_ref().expect("the whole wanted set");
        assert_eq!(children.len(), 1, "no Deployment without replicas: {children:?}");
        let cm = &children[0];
        assert_eq!((cm.api_version.as_str(), cm.kind.as_str(), cm.name.as_str()), ("v1", "ConfigMap", "web-pages"));
        let data = &cm.body["data"];
        assert_eq!(data["about.html"], "<p>About us</p>");
        assert_eq!(data["faq.html"], "<p>FAQ</p>");
        let index = data["index.html"].as_str().unwrap();
        assert!(index.contains("<title>Hello</title>"), "{index}");
        assert!(index.find("href=\"about.html\"").unwrap() < index.find("href=\"faq.html\"").unwrap(), "{index}");
        assert_eq!(cm.body["metadata"]["labels"]["app.kubernetes.io/name"], "site");

        let st = out.status.unwrap();
        assert_eq!(st, SiteStatus { config_map: "web-pages".into(), pages: 2, ready: false, deployment: None });
        assert_eq!(out.conditions[0].type_, "Ready");
        assert_eq!(out.conditions[0].status, ConditionStatus::False);
        assert_eq!(out.conditions[0].reason, "Pending");
    }

    #[test]
    fn ready_once_the_observed_config_map_holds_exactly_these_pages() {
        let host = FakeHost::new();
        let wanted = reconcile::<Site>(&host, &site(spec()), &[]).unwrap().children.unwrap();
        host.set_children(vec![live_config_map(wanted[0].body["data"].clone())]);
        let out = reconcile::<Site>(&host, &site(spec()), &[]).unwrap();
        assert!(out.status.as_ref().unwrap().ready);
        assert_eq!(out.conditions[0].status, ConditionStatus::True);
        assert_eq!(out.conditions[0].reason, "Published");
        assert!(out.conditions[0].message.contains("2 page(s)"), "{:?}", out.conditions[0]);

        // The spec lost a page: the ConfigMap still has it, so not ready until the host updates it.
        let one_page = json!({"title": "Hello", "pages": {"about.html": "<p>About us</p>"}});
        let out = reconcile::<Site>(&host, &site(one_page), &[]).unwrap();
        assert!(!out.status.as_ref().unwrap().ready);
        assert_eq!(out.conditions[0].reason, "Updating");
        let data = &out.children.as_ref().unwrap()[0].body["data"];
        assert!(data.get("faq.html").is_none(), "{data}");
    }

    #[test]
    fn replicas_add_a_deployment_that_mounts_the_config_map() {
        let out = reconcile::<Site>(&FakeHost::new(), &site(json!({"title": "Hello", "replicas": 2})), &[]).unwrap();
        let children = out.children.unwrap();
        let d = children.iter().find(|c| c.kind == DEPLOYMENT_KIND).expect("a Deployment");
        assert_eq!((d.api_version.as_str(), d.name.as_str()), ("apps/v1", "web-web"));
        assert_eq!(d.body["spec"]["replicas"], 2);
        let pod = &d.body["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"][0]["configMap"]["name"], "web-pages");
        assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/usr/share/nginx/html");
        assert_eq!(d.body["spec"]["selector"]["matchLabels"], d.body["spec"]["template"]["metadata"]["labels"]);
        assert_eq!(out.status.unwrap().deployment.as_deref(), Some("web-web"));
    }

    #[test]
    fn an_invalid_site_wants_nothing() {
        let err = reconcile::<Site>(&FakeHost::new(), &site(json!({"title": " "})), &[]).unwrap_err();
        let Error::Invalid(errs) = err else { panic!("{err:?}") };
        assert_eq!(errs[0].path, "spec.title");
    }
}
