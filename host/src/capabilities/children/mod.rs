//! The `children` unit: the `steward:plugin/children` import (the object's observed children in, the children it wants out), the check of its `kinds` setting, and the children made through the driver's generic object primitives ([`converge`]).

mod converge;
mod settings;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use steward_sdk::{Child, ObjectRef, ObservedChild, RawOutcome};
use wasmtime::component::{HasSelf, Linker};

use super::effects::{Effects, HostContext, Requeue, Unit};
use crate::driver::{Driver, DriverError};
use crate::model::{ObjectKey, Reason, StatusRecord, now_millis};
use crate::store::Store;
use converge::{Converge, all_children, owner_of};

use crate::objects::ObjectKind;
use crate::plugin::bindings::steward::plugin::children as wc;
use crate::plugin::{CallInput, CallState, Capability, Inputs, Plugin, PluginError, PluginSettings, Read};
pub use settings::ChildrenSettings;

/// The children unit's input to a call: the child objects the host holds for the object, as last seen.
#[derive(Clone, Debug, Default)]
pub struct ObservedChildren(pub Vec<ObservedChild>);

/// Child objects the host makes exist for an object (see [`crate::children`]).
pub struct Children;

/// The capability name of [`Children`].
pub const NAME: &str = "children";

/// Why an owner is reconciled when one of its children changed or vanished.
pub const CHANGED: Reason = Reason::Unit("childChanged");

impl Capability for Children {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["steward:plugin/children@0.1.0"]
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wc::add_to_linker::<CallState, HasSelf<ChildrenState>>(linker, |s| s.slot::<ChildrenState>())
    }

    /// `children.kinds` must be present and each entry `apiVersion/Kind`: a grant without it
    /// would let the plugin own nothing, which is never what the operator meant.
    fn check_settings(&self, plugin: &str, settings: &PluginSettings) -> Result<(), String> {
        let children = settings.sections.get_or_default::<ChildrenSettings>();
        if children.kinds.is_empty() {
            return Err(format!(
                "plugins.{plugin}.children.kinds: the `children` capability needs the kinds the plugin may own, \
                 for example `children: {{ kinds: [v1/ConfigMap, apps/v1/Deployment] }}`"
            ));
        }
        for (i, k) in children.kinds.iter().enumerate() {
            ObjectKind::parse(k).map_err(|e| format!("plugins.{plugin}.children.kinds[{i}]: {e}"))?;
        }
        Ok(())
    }

    fn begin_call(&self, state: &mut CallState, input: &CallInput) {
        let observed = input.inputs.get::<ObservedChildren>().map_or(&[][..], |o| &o.0);
        let slot = state.slot::<ChildrenState>();
        slot.observed = observed.iter().map(observed_to_wit).collect();
        slot.desired = None;
    }

    /// The children the plugin asked for through `desire` become the answer's `children` (left
    /// `None` when it never called it: the host's children stay as they are).
    fn finish_call(&self, state: &mut CallState, outcome: &mut RawOutcome) {
        outcome.children = state.slot::<ChildrenState>().take_desired();
    }

    fn output_size(&self, outcome: &RawOutcome) -> u64 {
        outcome.children.iter().flatten().map(child_size).sum()
    }

    /// Refuses children of a kind the grant does not list, and malformed ones, naming the child
    /// and what to change.
    fn check_outcome(&self, plugin: &str, settings: &PluginSettings, outcome: &RawOutcome) -> Result<(), PluginError> {
        let mut seen = std::collections::HashSet::new();
        for c in outcome.children.iter().flatten() {
            let what = format!("child {}/{} {}", c.api_version, c.kind, c.name);
            if !settings.sections.get_or_default::<ChildrenSettings>().allows(&c.api_version, &c.kind) {
                return Err(PluginError::ChildDenied {
                    plugin: plugin.to_string(),
                    child: what,
                    kind: format!("{}/{}", c.api_version, c.kind),
                });
            }
            if !crate::children::valid_name(&c.name) {
                return Err(PluginError::BadOutput(format!(
                    "{what}: the name must be a DNS subdomain (lower-case letters, digits, `-` and `.`, at most 253)"
                )));
            }
            if !c.body.is_object() {
                return Err(PluginError::BadOutput(format!("{what}: the body is not a JSON object")));
            }
            if !seen.insert((c.api_version.as_str(), c.kind.as_str(), c.name.as_str())) {
                return Err(PluginError::BadOutput(format!("{what} is listed twice")));
            }
        }
        Ok(())
    }
}

impl Unit for Children {
    /// The host applies, watches and deletes children of every kind the plugins are granted.
    fn access(&self, plugins: &[&PluginSettings]) -> super::Access {
        let manage = plugins.iter().flat_map(|s| s.sections.get_or_default::<ChildrenSettings>().kinds()).collect();
        super::Access::default().union(super::Access { read_secrets: false, manage })
    }

    fn start(&self, host: &HostContext) -> Result<Option<Arc<dyn Effects>>, String> {
        Ok(Some(Arc::new(Running {
            converge: Converge::new(host.driver.clone()),
            driver: host.driver.clone(),
            store: host.store.clone(),
            requeue: host.requeue.clone(),
            forward: std::sync::Mutex::new(None),
            reads_children: AtomicBool::new(false),
            desired: std::sync::Mutex::default(),
        })))
    }
}

/// The children unit as it runs: children made through the mode's driver.
struct Running {
    converge: Converge,
    driver: Arc<dyn Driver>,
    store: Arc<Store<StatusRecord>>,
    requeue: Requeue,
    forward: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether the children are objects of the source (the driver sends no changes of its
    /// own): an owner then depends on its children as on reads.
    reads_children: AtomicBool,
    /// The children each owner last asked for, by key, as reads while they are not seen yet.
    desired: std::sync::Mutex<HashMap<ObjectKey, Vec<ObjectKey>>>,
}

/// The kinds `plugin` may own children of, as the driver names kinds.
fn granted_kinds(plugin: &Plugin) -> Vec<ObjectKind> {
    plugin.settings().sections.get_or_default::<ChildrenSettings>().kinds()
}

#[async_trait::async_trait]
impl Effects for Running {
    /// The children the host holds for the owner, as last seen, for a plugin granted
    /// `children`. A child that is an object of the host (filesystem mode) shows the status the
    /// host keeps for it, as a child in a cluster shows its own.
    fn input(&self, plugin: &Plugin, owner: &ObjectKey, inputs: &mut Inputs) {
        if !plugin.settings().grants(NAME) {
            return;
        }
        let mut children = self.converge.observed_children(owner, &granted_kinds(plugin));
        for c in &mut children {
            let Some(obj) = c.object.as_mut().filter(|o| o.get("status").is_none()) else { continue };
            let child = ObjectKey::new(&c.kind, owner.namespace(), &c.name);
            if let Some(rec) = self.store.get(&child.to_string()) {
                obj["status"] = crate::kubernetes::writer::status_object(&rec, None, now_millis());
            }
        }
        inputs.insert(ObservedChildren(children));
    }

    /// When the children are objects of the source (filesystem mode), the owner's children,
    /// seen or just asked for: their changes queue it like a `get`'s.
    fn reads(&self, plugin: &Plugin, owner: &ObjectKey) -> Vec<Read> {
        if !plugin.settings().grants(NAME) || !self.reads_children.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let seen = self.converge.observed(owner, &granted_kinds(plugin));
        let mut keys: Vec<ObjectKey> =
            seen.iter().map(|o| ObjectKey::new(&o.id.kind.kind, &o.id.namespace, &o.id.name)).collect();
        if let Some(desired) = self.desired.lock().unwrap_or_else(|p| p.into_inner()).get(owner) {
            keys.extend(desired.iter().cloned());
        }
        keys.sort();
        keys.dedup();
        keys.into_iter().map(|c| Read::Get(ObjectRef::new(c.kind(), c.namespace(), c.name()))).collect()
    }

    /// Makes the owner's children as it wants them; the message says which child failed and
    /// why. A replica that lost the lease writes nothing: the new leader's reconcile makes them.
    async fn settle(&self, plugin: &Plugin, owner: &ObjectKey, outcome: &mut RawOutcome) -> Result<(), String> {
        let Some(children) = outcome.children.take() else { return Ok(()) };
        let keys = children.iter().map(|c| ObjectKey::new(&c.kind, owner.namespace(), &c.name)).collect();
        self.desired.lock().unwrap_or_else(|p| p.into_inner()).insert(owner.clone(), keys);
        match self.converge.apply(owner, &granted_kinds(plugin), &children).await {
            Ok(()) | Err(DriverError::NotLeader) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The owner goes only once its children are gone: no garbage collector is assumed.
    async fn finalize(&self, plugin: &Plugin, owner: &ObjectKey) -> Result<(), String> {
        if !plugin.settings().grants(NAME) {
            return Ok(());
        }
        self.converge.delete_all(owner, &granted_kinds(plugin)).await.map_err(|e| e.to_string())?;
        self.desired.lock().unwrap_or_else(|p| p.into_inner()).remove(owner);
        Ok(())
    }

    /// The object is gone: what it last asked for is no longer read.
    async fn forget(&self, owner: &ObjectKey) {
        self.desired.lock().unwrap_or_else(|p| p.into_inner()).remove(owner);
    }

    /// Owners one of whose children changed or vanished are reconciled again, when the driver
    /// sends the changes of the objects it watches (Kubernetes mode). Otherwise the children are
    /// objects of the source (filesystem mode) and their owners read them.
    fn mode_started(&self, started: &mut crate::driver::Started) {
        let Some(mut changes) = started.selected.take() else {
            self.reads_children.store(true, Ordering::Relaxed);
            return;
        };
        let requeue = self.requeue.clone();
        let forward = tokio::spawn(async move {
            while let Some(obj) = changes.recv().await {
                if let Some(owner) = owner_of(&obj) {
                    requeue.send(owner, CHANGED);
                }
            }
        });
        *self.forward.lock().unwrap_or_else(|p| p.into_inner()) = Some(forward);
    }

    async fn shutdown(&self, _grace: std::time::Duration) {
        if let Some(f) = self.forward.lock().unwrap_or_else(|p| p.into_inner()).take() {
            f.abort();
        }
    }

    /// The mode watches the child kinds granted to the loaded plugins, for the objects that
    /// carry the owner label.
    fn plugins_changed(&self, plugins: &[Arc<Plugin>]) {
        let mut kinds: Vec<ObjectKind> = plugins
            .iter()
            .filter(|p| p.settings().grants(NAME))
            .flat_map(|p| p.settings().sections.get_or_default::<ChildrenSettings>().kinds())
            .collect();
        kinds.sort();
        kinds.dedup();
        self.driver.watch_selected(&kinds, &all_children());
    }
}

/// The bytes a desired child takes (its body's JSON text and its identity).
fn child_size(c: &Child) -> u64 {
    (c.api_version.len() + c.kind.len() + c.name.len() + c.body.to_string().len()) as u64
}

/// The children unit's state in one store: the object's observed children, and the ones it wants.
#[derive(Default)]
pub struct ChildrenState {
    observed: Vec<wc::ObservedChild>,
    desired: Option<Vec<wc::Child>>,
}

impl ChildrenState {
    /// The children the last reconcile asked for through `desire` (`None` when it never called it).
    /// A body that is not JSON is kept as a string, which the host refuses on the object.
    fn take_desired(&mut self) -> Option<Vec<Child>> {
        self.desired.take().map(|children| {
            children
                .into_iter()
                .map(|c| Child {
                    body: serde_json::from_str(&c.body).unwrap_or(serde_json::Value::String(c.body.clone())),
                    api_version: c.api_version,
                    kind: c.kind,
                    name: c.name,
                })
                .collect()
        })
    }
}

impl wc::Host for ChildrenState {
    fn observed(&mut self) -> wasmtime::Result<Vec<wc::ObservedChild>> {
        Ok(self.observed.clone())
    }

    fn desire(&mut self, children: Vec<wc::Child>) -> wasmtime::Result<()> {
        self.desired = Some(children);
        Ok(())
    }
}

fn observed_to_wit(c: &ObservedChild) -> wc::ObservedChild {
    wc::ObservedChild {
        api_version: c.api_version.clone(),
        kind: c.kind.clone(),
        name: c.name.clone(),
        object: c.object.as_ref().map(|o| o.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wc::Host as _;

    fn settings(kinds: &[&str]) -> PluginSettings {
        let mut s = PluginSettings { capabilities: vec![NAME.into()], ..Default::default() };
        s.sections.insert(NAME, ChildrenSettings { kinds: kinds.iter().map(|s| s.to_string()).collect() });
        s
    }

    #[test]
    fn a_grant_needs_its_kinds_and_the_error_names_the_key() {
        let e = Children.check_settings("cm", &settings(&[])).unwrap_err();
        assert!(e.starts_with("plugins.cm.children.kinds:"), "{e}");
        let e = Children.check_settings("cm", &settings(&["v1/ConfigMap", "Deployment"])).unwrap_err();
        assert!(e.starts_with("plugins.cm.children.kinds[1]:") && e.contains("apps/v1/Deployment"), "{e}");
        let ok = settings(&["v1/ConfigMap", "apps/v1/Deployment"]);
        assert!(Children.check_settings("cm", &ok).is_ok());
        let ok = ok.sections.get::<ChildrenSettings>().unwrap();
        assert!(ok.allows("apps/v1", "Deployment"));
        assert!(ok.allows("v1", "ConfigMap"));
        assert!(!ok.allows("v1", "Secret"));
        assert!(!ok.allows("apps/v1", "ConfigMap"));
    }

    #[test]
    fn the_plugin_reads_what_was_observed_and_the_last_desire_wins() {
        let mut state = CallState::new(1 << 20, &[]);
        let seen = ObservedChild {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "web".into(),
            object: Some(serde_json::json!({"data": {"a": "b"}})),
        };
        let mut input = CallInput::none();
        input.inputs.insert(ObservedChildren(vec![seen]));
        Children.begin_call(&mut state, &input);
        let observed = state.slot::<ChildrenState>().observed().unwrap();
        assert_eq!(observed.len(), 1);
        assert!(observed[0].object.as_deref().unwrap().contains("\"a\""));
        let child = |name: &str, body: &str| wc::Child {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.into(),
            body: body.into(),
        };
        state.slot::<ChildrenState>().desire(vec![child("a", "{}")]).unwrap();
        state
            .slot::<ChildrenState>()
            .desire(vec![child("b", r#"{"data":{"k":"v"}}"#), child("c", "not json")])
            .unwrap();
        let got = state.slot::<ChildrenState>().take_desired().unwrap();
        assert_eq!(got.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(got[0].body, serde_json::json!({"data": {"k": "v"}}));
        assert_eq!(got[1].body, serde_json::json!("not json"));
        // A reconcile that never calls `desire` changes nothing.
        Children.begin_call(&mut state, &CallInput::none());
        assert!(state.slot::<ChildrenState>().take_desired().is_none());
    }
}
