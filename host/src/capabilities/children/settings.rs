//! `plugins.<name>.children`, the `children` capability's own settings: the kinds of child objects a plugin may own.

use serde::{Deserialize, Serialize};

use crate::objects::ObjectKind;

/// What `plugins.<name>.children` says: the kinds of child objects a plugin granted
/// `children` may own, as `apiVersion/Kind` (`v1/ConfigMap`, `apps/v1/Deployment`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildrenSettings {
    /// `apiVersion/Kind` of each kind the plugin may own; a child of any other kind is refused.
    #[serde(default)]
    pub kinds: Vec<String>,
}

impl ChildrenSettings {
    /// The granted kinds that parse (the unit's settings check refuses the others at load).
    pub fn kinds(&self) -> Vec<ObjectKind> {
        self.kinds.iter().filter_map(|k| ObjectKind::parse(k).ok()).collect()
    }

    /// Whether a child of `api_version`/`kind` is granted.
    pub fn allows(&self, api_version: &str, kind: &str) -> bool {
        self.kinds().iter().any(|k| k.api_version == api_version && k.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_into_group_and_version() {
        let d = ObjectKind::parse("apps/v1/Deployment").unwrap();
        assert_eq!((d.group(), d.version(), d.kind.as_str()), ("apps", "v1", "Deployment"));
        let c = ObjectKind::parse("v1/ConfigMap").unwrap();
        assert_eq!((c.group(), c.version()), ("", "v1"));
        for bad in ["ConfigMap", "/ConfigMap", "v1/", "a/b/c/Kind", "v1/configMap", "apps//v1/X"] {
            assert!(ObjectKind::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn only_the_granted_kinds_are_allowed() {
        let s = ChildrenSettings { kinds: vec!["v1/ConfigMap".into(), "apps/v1/Deployment".into(), "bad".into()] };
        assert_eq!(s.kinds().len(), 2, "a kind that does not parse grants nothing");
        assert!(s.allows("apps/v1", "Deployment") && s.allows("v1", "ConfigMap"));
        assert!(!s.allows("v1", "Secret") && !s.allows("apps/v1", "ConfigMap"));
    }
}
