//! The child objects of a Site: the ConfigMap of its pages and, when it is served, a Deployment.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;
use steward_sdk::Child;

use crate::SiteSpec;

/// The kind of the child that holds the pages.
pub const CONFIG_MAP_KIND: &str = "ConfigMap";
/// The kind of the child that serves them.
pub const DEPLOYMENT_KIND: &str = "Deployment";
/// The ConfigMap key of the index page.
pub const INDEX: &str = "index.html";
/// The image that serves the pages.
const IMAGE: &str = "nginx:1.27-alpine";

/// The ConfigMap of Site `site`: `<site>-pages`.
pub fn config_map_name(site: &str) -> String {
    format!("{site}-pages")
}

/// The Deployment of Site `site`: `<site>-web`.
pub fn deployment_name(site: &str) -> String {
    format!("{site}-web")
}

/// The children Site `site` wants: always its ConfigMap, and its Deployment when `replicas` is set.
pub fn children(site: &str, spec: &SiteSpec) -> Vec<Child> {
    let labels = json!({ "app.kubernetes.io/name": "site", "app.kubernetes.io/instance": site });
    let mut out = vec![Child::new(
        "v1",
        CONFIG_MAP_KIND,
        config_map_name(site),
        json!({ "metadata": { "labels": labels }, "data": pages_data(spec) }),
    )];
    if let Some(replicas) = spec.replicas {
        let pod = json!({
            "containers": [{
                "name": "nginx",
                "image": IMAGE,
                "ports": [{ "containerPort": 80 }],
                "volumeMounts": [{ "name": "pages", "mountPath": "/usr/share/nginx/html", "readOnly": true }],
            }],
            "volumes": [{ "name": "pages", "configMap": { "name": config_map_name(site) } }],
        });
        out.push(Child::new(
            "apps/v1",
            DEPLOYMENT_KIND,
            deployment_name(site),
            json!({
                "metadata": { "labels": labels },
                "spec": {
                    "replicas": replicas,
                    "selector": { "matchLabels": labels },
                    "template": { "metadata": { "labels": labels }, "spec": pod },
                },
            }),
        ));
    }
    out
}

/// The ConfigMap's `data`: `index.html` and one key per page.
pub fn pages_data(spec: &SiteSpec) -> BTreeMap<String, String> {
    let mut data = spec.pages.clone();
    data.insert(INDEX.to_string(), index(spec));
    data
}

/// The index page: the title, and a link to each page in name order.
fn index(spec: &SiteSpec) -> String {
    let title = escape(&spec.title);
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n<body>\n<h1>{title}</h1>\n<ul>\n"
    );
    for name in spec.pages.keys() {
        // Page names are ConfigMap keys (letters, digits, `-`, `_`, `.`): safe in a URL and in HTML.
        let _ = writeln!(html, "<li><a href=\"{name}\">{name}</a></li>");
    }
    html.push_str("</ul>\n</body></html>\n");
    html
}

/// `text` with HTML's special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_escapes_the_title_and_links_every_page() {
        let spec = SiteSpec {
            title: "Fish & <Chips>".into(),
            pages: [("b.html", "B"), ("a.html", "A")].into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
            replicas: None,
        };
        let data = pages_data(&spec);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["a.html", "b.html", "index.html"]);
        let index = &data[INDEX];
        assert!(index.contains("<h1>Fish &amp; &lt;Chips&gt;</h1>"), "{index}");
        assert!(
            index.contains("<li><a href=\"a.html\">a.html</a></li>\n<li><a href=\"b.html\">b.html</a></li>"),
            "{index}"
        );
    }

    #[test]
    fn a_site_without_pages_still_has_an_index() {
        let data = pages_data(&SiteSpec { title: "Empty".into(), ..Default::default() });
        assert_eq!(data.len(), 1);
        assert!(data[INDEX].contains("<ul>\n</ul>"), "{}", data[INDEX]);
    }
}
