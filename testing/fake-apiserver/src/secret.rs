//! Core `v1` Secrets as the real server stores them: `stringData` folded into base64 `data`, `data` checked, `type` defaulted.

use k8s_openapi::ByteString;
use serde_json::{Map, Value, json};

use crate::resource::{ResourceDef, StorageKey};
use crate::status::{ApiError, Cause};

/// The core `v1` `secrets` resource.
pub(crate) fn def() -> ResourceDef {
    ResourceDef::new("", "v1", "Secret", "secrets", true)
}

/// Whether `def` is core Secrets.
pub(crate) fn is_secret(def: &ResourceDef) -> bool {
    def.storage_key() == StorageKey { group: String::new(), plural: "secrets".into() }
}

/// Brings a Secret to its stored form, as the real server does on every write: each
/// `stringData` entry replaces the `data` entry of its key (base64-encoded) and `stringData`
/// goes; `data` values must be base64 (400, the decode error) and keys valid config keys
/// (422); `type` defaults to `Opaque`.
pub(crate) fn normalize(obj: &mut Value) -> Result<(), ApiError> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let Some(map) = obj.as_object_mut() else { return Ok(()) };
    let mut data: Map<String, Value> = match map.remove("data") {
        Some(Value::Object(d)) => d,
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(ApiError::bad_request(
                "Secret in version \"v1\" cannot be handled as a Secret: data must be an object",
            ));
        }
    };
    for (key, value) in &data {
        if serde_json::from_value::<ByteString>(value.clone()).is_err() {
            return Err(ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data in data[{key}]"
            )));
        }
    }
    match map.remove("stringData") {
        Some(Value::Object(strings)) => {
            for (key, value) in strings {
                let Some(text) = value.as_str() else {
                    return Err(ApiError::bad_request(format!(
                        "Secret in version \"v1\" cannot be handled as a Secret: stringData[{key}] must be a string"
                    )));
                };
                let encoded = serde_json::to_value(ByteString(text.as_bytes().to_vec()))
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                data.insert(key, encoded);
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData must be an object",
            ));
        }
    }
    let bad: Vec<Cause> = data
        .keys()
        .filter(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .map(|k| {
            Cause::invalid(
                format!("data[{k}]"),
                &json!(k),
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            )
        })
        .collect();
    if !bad.is_empty() {
        return Err(ApiError::invalid("Secret", "", &name, bad));
    }
    if !data.is_empty() {
        map.insert("data".into(), Value::Object(data));
    }
    if map.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        map.insert("type".into(), json!("Opaque"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_becomes_base64_data_and_bad_data_is_refused() {
        let mut s = json!({"metadata": {"name": "creds"}, "data": {"a": "eA=="}, "stringData": {"b": "tok en"}});
        normalize(&mut s).unwrap();
        assert_eq!(s, json!({"metadata": {"name": "creds"}, "data": {"a": "eA==", "b": "dG9rIGVu"}, "type": "Opaque"}));
        let mut bad = json!({"metadata": {"name": "creds"}, "data": {"a": "not base64!"}});
        assert_eq!(normalize(&mut bad).unwrap_err().code, 400);
        let mut bad_key = json!({"metadata": {"name": "creds"}, "stringData": {"a/b": "x"}});
        assert_eq!(normalize(&mut bad_key).unwrap_err().code, 422);
    }
}
