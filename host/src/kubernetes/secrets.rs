//! Reading one key of a Secret for the services driver: a `get` on the Secret with the host's client, its data base64-decoded by k8s-openapi.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::services::{ReadFuture, SecretReadError, SecretReader};

/// Reads Secrets with the host's client; needs `get` on `secrets` in the namespaces it reads.
#[derive(Clone)]
pub struct ClusterSecrets {
    client: kube::Client,
}

impl ClusterSecrets {
    /// A reader using `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecrets")
    }
}

impl SecretReader for ClusterSecrets {
    /// One `get` of Secret `namespace/name`; the value of `key` from `data` (decoded), else
    /// from `stringData` (which a real API server folds into `data`). Errors name the
    /// Secret and the key, never a value.
    fn read<'a>(&'a self, namespace: &'a str, name: &'a str, key: &'a str) -> ReadFuture<'a> {
        Box::pin(async move {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let secret = match api.get_opt(name).await {
                Ok(Some(s)) => s,
                Ok(None) => {
                    return Err(SecretReadError::NoSecret { namespace: namespace.into(), name: name.into() });
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    return Err(SecretReadError::Forbidden { namespace: namespace.into() });
                }
                Err(e) => {
                    // A decoding error may quote what it could not decode: part of the data.
                    let message = match &e {
                        kube::Error::SerdeError(_) => "the API server's answer is not a readable Secret".to_string(),
                        kube::Error::Api(status) => status.message.clone(),
                        other => crate::services::error_text(other),
                    };
                    return Err(SecretReadError::Other { namespace: namespace.into(), name: name.into(), message });
                }
            };
            let from_data = secret.data.and_then(|mut d| d.remove(key)).map(|b| b.0);
            let from_string = || secret.string_data.and_then(|mut d| d.remove(key)).map(String::into_bytes);
            from_data.or_else(from_string).ok_or_else(|| SecretReadError::NoKey {
                namespace: namespace.into(),
                name: name.into(),
                key: key.into(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::PostParams;
    use steward_fake_apiserver::{FakeApiServer, Fault, Verb};

    use super::*;

    #[tokio::test]
    async fn reads_a_decoded_key_and_names_what_is_missing_or_forbidden() {
        let server = FakeApiServer::start().await;
        let reader = ClusterSecrets::new(server.client());
        let err = reader.read("default", "creds", "token").await.unwrap_err();
        assert!(matches!(err, SecretReadError::NoSecret { .. }), "{err}");

        let api: Api<Secret> = Api::namespaced(server.client(), "default");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds"}, "data": {"token": "dmFsdWUgMQ=="},
        }))
        .unwrap();
        api.create(&PostParams::default(), &secret).await.unwrap();
        assert_eq!(reader.read("default", "creds", "token").await.unwrap(), b"value 1");
        let err = reader.read("default", "creds", "other").await.unwrap_err();
        assert_eq!(err.to_string(), "Secret `default/creds` has no key `other`");

        let _denied = server.inject(Fault::forbidden().resource("secrets").verb(Verb::Get).times(1));
        let err = reader.read("default", "creds", "token").await.unwrap_err();
        assert!(matches!(err, SecretReadError::Forbidden { .. }), "{err}");
        assert!(err.to_string().contains("grant its ServiceAccount `get` on `secrets`"), "{err}");
        assert!(!err.to_string().contains("value 1"));
    }
}
