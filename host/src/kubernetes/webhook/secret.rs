//! The Secret that holds the self-managed CA and serving certificate, shared by the replicas:
//! created by the first, read by the others, renewed by whichever finds it due (a write that
//! meets another replica's is retried on what that one wrote).

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use super::WebhookError;
use super::certs::{self, Bundle, Plan, Validity};

/// The Secret's keys: the serving pair as a `kubernetes.io/tls` Secret has them, and the CA's.
pub const TLS_CRT: &str = "tls.crt";
/// The serving certificate's key.
pub const TLS_KEY: &str = "tls.key";
/// The CA certificate (the configuration's `caBundle`).
pub const CA_CRT: &str = "ca.crt";
/// The CA's key.
pub const CA_KEY: &str = "ca.key";

/// How many times a write that met another replica's is tried again.
const ATTEMPTS: usize = 5;

/// The certificate Secret `name` in `namespace`.
#[derive(Clone)]
pub struct CertSecret {
    api: Api<Secret>,
    name: String,
    namespace: String,
}

impl CertSecret {
    /// The Secret `namespace/name`, through `client`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self { api: Api::namespaced(client, namespace), name: name.into(), namespace: namespace.into() }
    }

    /// `namespace/name`, for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The CA certificate the Secret holds now, if it exists and holds one.
    pub async fn ca(&self) -> Result<Option<String>, WebhookError> {
        let s = self.api.get_opt(&self.name).await.map_err(|e| self.error("read", e))?;
        Ok(s.and_then(|s| text(&s, CA_CRT)))
    }

    /// A bundle good for `names` at `now`: the Secret's when [`certs::plan`] keeps it; otherwise
    /// a renewed one, written back (created when there is no Secret). When another replica wrote
    /// first (409), what it wrote is read and judged again.
    pub async fn ensure(&self, names: &[String], now: SystemTime, v: &Validity) -> Result<Bundle, WebhookError> {
        for _ in 0..ATTEMPTS {
            let existing = self.api.get_opt(&self.name).await.map_err(|e| self.error("read", e))?;
            let Some(secret) = existing else {
                let b = certs::new_bundle(names, now, v)?;
                match self.api.create(&PostParams::default(), &self.secret(&b, None)).await {
                    Ok(_) => {
                        tracing::info!(
                            "created the webhook's CA and serving certificate in the Secret {}",
                            self.describe()
                        );
                        return Ok(b);
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(self.error("create", e)),
                }
            };
            let held = bundle_of(&secret);
            let plan = match &held {
                Some(b) => certs::plan(b, names, now, v),
                None => Plan::All(format!("it lacks one of {CA_CRT}, {CA_KEY}, {TLS_CRT}, {TLS_KEY}")),
            };
            if let (Plan::Keep, Some(b)) = (&plan, &held) {
                return Ok(b.clone());
            }
            let why = plan.reason().unwrap_or_default().to_string();
            let b = certs::carry_out(held.as_ref(), &plan, names, now, v)?;
            let version = secret.metadata.resource_version.clone();
            match self.api.replace(&self.name, &PostParams::default(), &self.secret(&b, version)).await {
                Ok(_) => {
                    let what =
                        if matches!(plan, Plan::All(_)) { "CA and serving certificate" } else { "serving certificate" };
                    tracing::info!(reason = %why, "renewed the webhook's {what} in the Secret {}", self.describe());
                    return Ok(b);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(self.error("update", e)),
            }
        }
        Err(WebhookError::Secret {
            secret: self.describe(),
            message: format!("{ATTEMPTS} writes in a row met another writer's (409 Conflict); it is tried again later"),
        })
    }

    fn secret(&self, b: &Bundle, resource_version: Option<String>) -> Secret {
        let data = [(CA_CRT, &b.ca_cert), (CA_KEY, &b.ca_key), (TLS_CRT, &b.cert), (TLS_KEY, &b.key)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([("app.kubernetes.io/part-of".into(), "steward".into())])),
                resource_version,
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn error(&self, op: &str, e: kube::Error) -> WebhookError {
        let hint = match &e {
            kube::Error::Api(s) if s.code == 403 => {
                "; the host's ServiceAccount needs get, create and update on this Secret: apply the RBAC of `steward rbac --config` with kubernetes.webhook enabled"
            }
            kube::Error::Api(s) if s.code == 404 && op != "read" => {
                "; does the namespace exist? set kubernetes.webhook.namespace"
            }
            _ => "",
        };
        WebhookError::Secret { secret: self.describe(), message: format!("cannot {op} it: {e}{hint}") }
    }
}

/// The bundle `s` holds, when it holds all four parts as UTF-8 text.
pub fn bundle_of(s: &Secret) -> Option<Bundle> {
    Some(Bundle {
        ca_cert: text(s, CA_CRT)?,
        ca_key: text(s, CA_KEY)?,
        cert: text(s, TLS_CRT)?,
        key: text(s, TLS_KEY)?,
    })
}

fn text(s: &Secret, key: &str) -> Option<String> {
    let bytes = s.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok().filter(|t| !t.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn t0() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_893_456_000)
    }

    fn names() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    #[tokio::test]
    async fn the_first_replica_creates_the_secret_the_others_reuse_it_and_a_due_renewal_keeps_the_ca() {
        let server = steward_fake_apiserver::FakeApiServer::start().await;
        let v = Validity::default();
        let a = CertSecret::new(server.client(), "default", "steward-webhook-tls");
        let b = CertSecret::new(server.client(), "default", "steward-webhook-tls");
        assert_eq!(a.ca().await.unwrap(), None);
        // Two replicas at once: one creates, the other meets 409 and takes what it wrote.
        let n = names();
        let (x, y) = tokio::join!(a.ensure(&n, t0(), &v), b.ensure(&n, t0(), &v));
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_eq!(x, y);
        assert_eq!(a.ca().await.unwrap().as_deref(), Some(x.ca_cert.as_str()));
        let s: Secret = Api::namespaced(server.client(), "default").get("steward-webhook-tls").await.unwrap();
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(bundle_of(&s), Some(x.clone()));
        // Later, on a restart: reused as it is.
        assert_eq!(b.ensure(&names(), t0() + Duration::from_secs(86_400), &v).await.unwrap(), x);
        // 61 days on: the serving certificate is renewed, with the same CA, and written back.
        let later = t0() + Duration::from_secs(61 * 86_400);
        let renewed = a.ensure(&names(), later, &v).await.unwrap();
        assert_eq!(renewed.ca_cert, x.ca_cert);
        assert_ne!(renewed.cert, x.cert);
        assert_eq!(b.ensure(&names(), later, &v).await.unwrap(), renewed, "the other replica reads the renewal");
    }

    #[tokio::test]
    async fn a_secret_missing_a_part_is_filled_anew() {
        let server = steward_fake_apiserver::FakeApiServer::start().await;
        let api: Api<Secret> = Api::namespaced(server.client(), "default");
        let partial: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "x", "tls.key": "y"}
        }))
        .unwrap();
        api.create(&PostParams::default(), &partial).await.unwrap();
        let s = CertSecret::new(server.client(), "default", "tls");
        let b = s.ensure(&names(), t0(), &Validity::default()).await.unwrap();
        assert_eq!(bundle_of(&api.get("tls").await.unwrap()), Some(b));
    }
}
