//! The three calls of etcd's v3 JSON gateway the kind needs (range, put, deleterange), over the SDK's HTTP client.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use steward_sdk::http;

/// What etcd holds under a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The value, when the key exists (bytes that are not UTF-8 are replaced).
    pub value: Option<String>,
    /// The revision at which it was last changed (`mod_revision`), when it exists.
    pub mod_revision: Option<i64>,
}

/// A client of the etcd at `endpoint` (`http://127.0.0.1:2379`).
pub struct Etcd<'a> {
    endpoint: &'a str,
}

impl<'a> Etcd<'a> {
    /// A client of `endpoint`, without a trailing slash.
    pub fn new(endpoint: &'a str) -> Self {
        Self { endpoint: endpoint.trim_end_matches('/') }
    }

    fn call(&self, path: &str, body: Value) -> Result<Value, http::Error> {
        http::post(format!("{}/v3/kv/{path}", self.endpoint))
            .header("accept", "application/json")
            .json(&body)?
            .send()?
            .error_for_status()?
            .json()
    }

    /// What etcd holds under `key`.
    pub fn get(&self, key: &str) -> Result<Held, http::Error> {
        let answer = self.call("range", json!({"key": STANDARD.encode(key)}))?;
        Ok(held(&answer))
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &str, value: &str) -> Result<(), http::Error> {
        self.call("put", json!({"key": STANDARD.encode(key), "value": STANDARD.encode(value)})).map(|_| ())
    }

    /// Deletes `key` (nothing when it does not exist).
    pub fn delete(&self, key: &str) -> Result<(), http::Error> {
        self.call("deleterange", json!({"key": STANDARD.encode(key)})).map(|_| ())
    }
}

/// The first key-value of a range answer (the gateway leaves `kvs` out when there is none, and
/// writes 64-bit numbers as strings).
pub fn held(answer: &Value) -> Held {
    let Some(kv) = answer.get("kvs").and_then(|k| k.get(0)) else {
        return Held { value: None, mod_revision: None };
    };
    let value = kv
        .get("value")
        .and_then(Value::as_str)
        .map(|v| STANDARD.decode(v).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default())
        .or(Some(String::new()));
    let mod_revision = kv.get("mod_revision").and_then(|r| r.as_str().and_then(|s| s.parse().ok()).or(r.as_i64()));
    Held { value, mod_revision }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_answer_reads_as_etcd_writes_it() {
        let answer = json!({"header": {"revision": "7"}, "kvs": [{"key": "Zm9v", "value": "YmFy", "mod_revision": "5"}], "count": "1"});
        assert_eq!(held(&answer), Held { value: Some("bar".into()), mod_revision: Some(5) });
        assert_eq!(held(&json!({"header": {"revision": "7"}})), Held { value: None, mod_revision: None });
        // An empty value is left out by the gateway, and is still a value.
        let empty = json!({"kvs": [{"key": "Zm9v", "mod_revision": "6"}]});
        assert_eq!(held(&empty).value, Some(String::new()));
    }
}
