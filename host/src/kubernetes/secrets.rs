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
                    return Err(SecretReadError::Other {
                        namespace: namespace.into(),
                        name: name.into(),
                        message: crate::services::error_text(&e),
                    });
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
