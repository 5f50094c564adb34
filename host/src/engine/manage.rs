//! What the management tools (`core_*_create`, `_update`, `_delete`, `_validate`) ask of the engine: an object checked as the webhook and `steward check` check it, and written where the mode keeps desired state.

use steward_sdk::{FieldError, KindInfo, RawObject};

use super::{Engine, RequestError};
use crate::driver::DriverError;
use crate::model::ObjectKey;

impl Engine {
    /// The kind `kind` as the plugin that serves it describes it (group, version, plural, schema).
    pub fn served_info(&self, kind: &str) -> Result<KindInfo, RequestError> {
        self.plugins
            .plugins()
            .iter()
            .find_map(|p| p.info().kinds.iter().find(|k| k.kind == kind).cloned())
            .ok_or_else(|| RequestError::UnknownKind(kind.to_string()))
    }

    /// The field errors of `obj` as any other object would get them: the schema's field check
    /// (`field_validation`), then its plugin's `validate`. Empty: the object is valid. The
    /// object's spec is left pruned as the plugin saw it.
    pub async fn validate_object(&self, obj: &mut RawObject) -> Result<Vec<FieldError>, RequestError> {
        let plugin = self.plugins.resolve(&obj.kind).map_err(|e| RequestError::Refused(e.to_string()))?;
        let checked =
            crate::schema::check_spec(self.config().field_validation, plugin.spec_schema(&obj.kind), &obj.spec);
        obj.spec = checked.spec;
        let mut errors = checked.errors;
        match plugin.validate(obj).await.result {
            Ok(found) => errors.extend(found),
            Err(e) => {
                return Err(RequestError::Refused(format!(
                    "the plugin {} failed in validate: {e}; the object was not checked",
                    plugin.name()
                )));
            }
        }
        errors.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.message.cmp(&b.message)));
        errors.dedup();
        Ok(errors)
    }

    /// Creates `obj` (of any served, namespaced kind) where the mode keeps desired state: in
    /// filesystem mode a new file `<plural>/<namespace>/<name>.yaml` under the resources
    /// directory, in Kubernetes mode the custom resource. Refused when it exists. The caller
    /// validates it first ([`Engine::validate_object`]).
    pub async fn manage_create(&self, obj: &RawObject) -> Result<ObjectKey, RequestError> {
        let key = ObjectKey::new(&obj.kind, &obj.namespace, &obj.name);
        let info = self.served_info(&obj.kind)?;
        if !info.namespaced {
            return Err(RequestError::Refused(format!("kind {} is cluster-scoped; only namespaced kinds", obj.kind)));
        }
        if self.source().get(&key).is_some() {
            return Err(RequestError::Exists(key));
        }
        self.driver.create(&info, obj).await.map_err(write_error)?;
        Ok(key)
    }

    /// Replaces the spec of the existing object `obj` where it is defined: in filesystem mode
    /// the file it came from (refused for a file that defines other objects too), in Kubernetes
    /// mode the custom resource.
    pub async fn manage_replace(&self, obj: &RawObject) -> Result<ObjectKey, RequestError> {
        let key = ObjectKey::new(&obj.kind, &obj.namespace, &obj.name);
        let info = self.served_info(&obj.kind)?;
        let current = self.source().get(&key).ok_or_else(|| RequestError::NotFound(key.clone()))?;
        let mut obj = obj.clone();
        obj.labels = current.raw.labels.clone();
        obj.annotations = current.raw.annotations.clone();
        self.driver.replace(&info, &obj, &current.location).await.map_err(write_error)?;
        Ok(key)
    }

    /// Deletes `key` where it is defined: in filesystem mode its file (refused for a file that
    /// defines other objects too), in Kubernetes mode the custom resource. Its finalize follows.
    pub async fn manage_delete(&self, key: &ObjectKey) -> Result<(), RequestError> {
        let info = self.served_info(key.kind())?;
        let current = self.source().get(key).ok_or_else(|| RequestError::NotFound(key.clone()))?;
        self.driver.remove(&info, key, &current.location).await.map_err(write_error)
    }
}

fn write_error(e: DriverError) -> RequestError {
    match e {
        DriverError::Exists(key) => RequestError::Exists(key),
        DriverError::Refused(m) => RequestError::Refused(m),
        other => RequestError::Unavailable(other.to_string()),
    }
}
