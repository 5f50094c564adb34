//! Secret values of a service: checked against the mode, read from a file, the host's environment or a Kubernetes Secret each time the service starts or connects, and never kept, logged or reported.
//!
//! What a plugin may name depends on the mode, because whoever can write an
//! object decides where its service's values go:
//!
//! - filesystem mode reads `file` (a path on the host) and `env` (a variable of
//!   the host process): whoever writes the resource files already runs the host;
//! - Kubernetes mode reads only `secretKeyRef`, and only in the object's own
//!   namespace: a `file` or `env` source would let anyone who can create an
//!   object send the host pod's files or environment to a URL of their choosing,
//!   and another namespace's Secret is not theirs to read.
//!
//! A refused reference fails the service until the spec changes; a reference
//! that names something missing fails one attempt, and the supervisor tries
//! again with its backoff. Messages name the reference, never the value.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::os::unix::ffi::OsStringExt;
use std::pin::Pin;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use steward_sdk::{SecretSource, SecretTarget, SecretValue, ServiceSpec, Transport};

use crate::model::ObjectKey;

/// Why one key of a Kubernetes Secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretReadError {
    /// The Secret does not exist.
    #[error("Secret `{namespace}/{name}` does not exist")]
    NoSecret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The Secret exists without the key.
    #[error("Secret `{namespace}/{name}` has no key `{key}`")]
    NoKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
    /// The API server refused the read (RBAC).
    #[error(
        "Steward may not read Secrets in namespace `{namespace}`: grant its ServiceAccount `get` on `secrets` \
         there (a Role and RoleBinding; `steward rbac` prints them)"
    )]
    Forbidden {
        /// The namespace.
        namespace: String,
    },
    /// Anything else (the API server is unreachable, ...), for people.
    #[error("cannot read Secret `{namespace}/{name}`: {message}")]
    Other {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What went wrong (never the Secret's data).
        message: String,
    },
}

/// The future a [`SecretReader`] returns.
pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, SecretReadError>> + Send + 'a>>;

/// Reads one key of a Kubernetes Secret: what Kubernetes mode gives the services driver.
pub trait SecretReader: Send + Sync + fmt::Debug {
    /// The decoded value of `key` of Secret `namespace/name`.
    fn read<'a>(&'a self, namespace: &'a str, name: &'a str, key: &'a str) -> ReadFuture<'a>;
}

/// Where secret values may come from: the host's mode.
#[derive(Clone, Debug)]
pub enum Secrets {
    /// Filesystem mode: `file` and `env` sources.
    Files,
    /// Kubernetes mode: `secretKeyRef` in the object's own namespace, read with this reader.
    Kubernetes(Arc<dyn SecretReader>),
}

/// A value read from a secret; its `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct SecretBytes(Vec<u8>);

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What the secrets of one service resolved to, for one start or connect.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// stdio: environment variables.
    pub(crate) env: Vec<(OsString, SecretBytes)>,
    /// remote: headers, marked sensitive.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

impl Resolved {
    /// The environment variables, as a process takes them.
    pub(crate) fn env_vars(&self) -> Vec<(OsString, OsString)> {
        self.env.iter().map(|(k, v)| (k.clone(), OsString::from_vec(v.0.clone()))).collect()
    }

    /// Every resolved value as text, and for a header value with a scheme (`Bearer abc`) its
    /// last word too: what a child or a server could print back, to be redacted from messages.
    pub(crate) fn values(&self) -> Vec<String> {
        let env = self.env.iter().map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned());
        let headers = self.headers.iter().flat_map(|(_, v)| {
            let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            let last = text.rsplit(' ').next().filter(|w| w.len() < text.len()).map(str::to_string);
            std::iter::once(text).chain(last)
        });
        env.chain(headers).filter(|v| !v.trim().is_empty()).collect()
    }
}

/// What a reference is called in messages: `env TOKEN` or `header Authorization`.
fn what(v: &SecretValue) -> String {
    match v.target {
        SecretTarget::Env => format!("env `{}`", v.name),
        SecretTarget::Header => format!("header `{}`", v.name),
    }
}

impl Secrets {
    /// Checks `spec`'s secret references against the mode and the spec itself: targets that fit
    /// the transport, valid and distinct names not also given literally, sources this mode reads
    /// (in Kubernetes mode, only Secrets of `owner`'s namespace). The error is for the service's
    /// status and says what to change; only a new spec can fix it.
    pub(crate) fn check(&self, owner: &ObjectKey, spec: &ServiceSpec) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for v in &spec.secrets {
            let w = what(v);
            match (v.target, spec.transport) {
                (SecretTarget::Env, Transport::Stdio)
                | (SecretTarget::Header, Transport::StreamableHttp | Transport::Sse) => {}
                (SecretTarget::Env, _) => {
                    return Err(format!("secret {w}: a remote service takes headers, not environment variables"));
                }
                (SecretTarget::Header, _) => {
                    return Err(format!("secret {w}: a stdio service takes environment variables, not headers"));
                }
            }
            match v.target {
                SecretTarget::Env => {
                    if v.name.is_empty() || v.name.contains(['=', '\0']) {
                        return Err(format!("secret {w}: not a valid environment variable name"));
                    }
                    if spec.env.contains_key(&v.name) {
                        return Err(format!("{w} has both a literal value and a secret reference; keep one"));
                    }
                    if !seen.insert(v.name.clone()) {
                        return Err(format!("{w} is read from two secrets; keep one"));
                    }
                }
                SecretTarget::Header => {
                    if HeaderName::try_from(v.name.as_str()).is_err() {
                        return Err(format!("secret {w}: not a valid HTTP header name"));
                    }
                    if spec.headers.keys().any(|k| k.eq_ignore_ascii_case(&v.name)) {
                        return Err(format!("{w} has both a literal value and a secret reference; keep one"));
                    }
                    if !seen.insert(v.name.to_ascii_lowercase()) {
                        return Err(format!("{w} is read from two secrets; keep one"));
                    }
                }
            }
            self.check_source(owner, v, &w)?;
        }
        Ok(())
    }

    fn check_source(&self, owner: &ObjectKey, v: &SecretValue, w: &str) -> Result<(), String> {
        match (self, &v.source) {
            (Secrets::Files, SecretSource::SecretKeyRef { .. }) => Err(format!(
                "secret {w}: `secretKeyRef` needs Kubernetes mode, and this host reads its resources from files \
                 (there is no cluster to read a Secret from); use a `file` or `env` source"
            )),
            (Secrets::Files, SecretSource::File { path }) if path.trim().is_empty() => {
                Err(format!("secret {w}: the `file` source needs a path"))
            }
            (Secrets::Files, SecretSource::Env { name }) if name.is_empty() || name.contains(['=', '\0']) => {
                Err(format!("secret {w}: `{name}` is not a valid environment variable name"))
            }
            (Secrets::Files, _) => Ok(()),
            (Secrets::Kubernetes(_), SecretSource::File { .. } | SecretSource::Env { .. }) => {
                let kind = if matches!(v.source, SecretSource::File { .. }) { "file" } else { "env" };
                Err(format!(
                    "secret {w}: a `{kind}` source is refused in Kubernetes mode: anyone who can write this object \
                     could send the host pod's {} to a server of their choosing; put the value in a Secret in \
                     namespace `{}` and use `secretKeyRef`",
                    if kind == "file" { "files" } else { "environment" },
                    owner.namespace()
                ))
            }
            (Secrets::Kubernetes(_), SecretSource::SecretKeyRef { name, namespace, key }) => {
                if owner.namespace().is_empty() {
                    return Err(format!(
                        "secret {w}: a cluster-scoped object has no namespace to read Secrets from; \
                         Steward reads a Secret only in the namespace of the object that names it"
                    ));
                }
                if let Some(ns) = namespace.as_deref().filter(|ns| !ns.is_empty() && **ns != **owner.namespace()) {
                    return Err(format!(
                        "secret {w}: Secret `{ns}/{name}` is in another namespace; Steward reads a Secret only in \
                         the namespace of the object that names it (`{}`): copy the Secret there",
                        owner.namespace()
                    ));
                }
                if name.is_empty() || key.is_empty() {
                    return Err(format!("secret {w}: `secretKeyRef` needs a `name` and a `key`"));
                }
                // The name goes into the API path: only what Kubernetes allows a Secret's name and key to be.
                let subdomain = name.len() <= 253
                    && name.split('.').all(|l| {
                        !l.is_empty()
                            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                            && !l.starts_with('-')
                            && !l.ends_with('-')
                    });
                if !subdomain {
                    return Err(format!(
                        "secret {w}: `{name}` is not a Secret name (lowercase letters, digits, '-' and '.')"
                    ));
                }
                if key.len() > 253 || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
                    return Err(format!("secret {w}: `{key}` is not a Secret key (letters, digits, '-', '_' and '.')"));
                }
                Ok(())
            }
        }
    }

    /// Reads every secret value of `spec` (already [`Secrets::check`]ed) for one start or
    /// connect. The error names the missing reference and what to do; the caller retries.
    pub(crate) async fn resolve(&self, owner: &ObjectKey, spec: &ServiceSpec) -> Result<Resolved, String> {
        let mut out = Resolved::default();
        for v in &spec.secrets {
            let w = what(v);
            let value = self.read(owner, v, &w).await?;
            match v.target {
                SecretTarget::Env => out.env.push((OsString::from(&v.name), SecretBytes(value))),
                SecretTarget::Header => {
                    let name = HeaderName::try_from(v.name.as_str())
                        .map_err(|_| format!("secret {w}: not a valid HTTP header name"))?;
                    let mut value = HeaderValue::from_bytes(&value).map_err(|_| {
                        format!("secret {w}: the value read is not a valid HTTP header value (control characters?)")
                    })?;
                    value.set_sensitive(true);
                    out.headers.push((name, value));
                }
            }
        }
        Ok(out)
    }

    async fn read(&self, owner: &ObjectKey, v: &SecretValue, w: &str) -> Result<Vec<u8>, String> {
        match (self, &v.source) {
            (Secrets::Files, SecretSource::File { path }) => match tokio::fs::read(path).await {
                Ok(bytes) => Ok(without_final_newline(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                    "secret {w}: file `{path}` does not exist; create it (the service starts once it does)"
                )),
                Err(e) => Err(format!("secret {w}: cannot read file `{path}`: {e}")),
            },
            (Secrets::Files, SecretSource::Env { name }) => match std::env::var_os(name) {
                Some(value) => Ok(value.into_vec()),
                None => Err(format!(
                    "secret {w}: the host's environment variable `{name}` is not set; set it where the host \
                     starts (then restart the host)"
                )),
            },
            (Secrets::Kubernetes(reader), SecretSource::SecretKeyRef { name, key, .. }) => {
                // A Secret made with `kubectl create secret --from-file` keeps its file's newline.
                reader.read(owner.namespace(), name, key).await.map(without_final_newline).map_err(|e| match e {
                    SecretReadError::NoSecret { .. } | SecretReadError::NoKey { .. } => {
                        format!("secret {w}: {e}; create it (the service starts once it exists)")
                    }
                    other => format!("secret {w}: {other}"),
                })
            }
            // `check` refused every other pairing before the first start.
            _ => Err(format!("secret {w}: this source is not read in this mode")),
        }
    }
}

/// A file's (or a Secret key's) content less one trailing newline (`\n` or `\r\n`), as editors
/// and `kubectl create secret --from-file` leave one.
fn without_final_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn spec(transport: Transport, secrets: Vec<SecretValue>) -> ServiceSpec {
        ServiceSpec {
            name: "s".into(),
            transport,
            command: Some("srv".into()),
            args: vec![],
            env: BTreeMap::from([("LITERAL".to_string(), "x".to_string())]),
            working_dir: None,
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: BTreeMap::from([("X-Literal".to_string(), "x".to_string())]),
            timeout_ms: 1000,
            secrets,
        }
    }

    fn env(name: &str, source: SecretSource) -> SecretValue {
        SecretValue { target: SecretTarget::Env, name: name.into(), source }
    }

    fn header(name: &str, source: SecretSource) -> SecretValue {
        SecretValue { target: SecretTarget::Header, name: name.into(), source }
    }

    fn key_ref(ns: Option<&str>) -> SecretSource {
        SecretSource::SecretKeyRef { name: "creds".into(), namespace: ns.map(str::to_string), key: "token".into() }
    }

    #[derive(Debug)]
    struct NoReader;

    impl SecretReader for NoReader {
        fn read<'a>(&'a self, namespace: &'a str, name: &'a str, _key: &'a str) -> ReadFuture<'a> {
            Box::pin(async move {
                Err(SecretReadError::NoSecret { namespace: namespace.to_string(), name: name.to_string() })
            })
        }
    }

    fn owner() -> ObjectKey {
        ObjectKey::new("MCPServer", "team-a", "srv")
    }

    #[test]
    fn each_mode_refuses_the_sources_it_does_not_read_and_says_why() {
        let files = Secrets::Files;
        let kube = Secrets::Kubernetes(Arc::new(NoReader));
        let file = || SecretSource::File { path: "/etc/token".into() };
        let host_env = || SecretSource::Env { name: "TOKEN".into() };
        let stdio = |s| spec(Transport::Stdio, vec![env("T", s)]);

        let e = files.check(&owner(), &stdio(key_ref(None))).unwrap_err();
        assert!(e.contains("needs Kubernetes mode") && e.contains("use a `file` or `env` source"), "{e}");
        assert!(files.check(&owner(), &stdio(file())).is_ok());
        assert!(files.check(&owner(), &stdio(host_env())).is_ok());

        let e = kube.check(&owner(), &stdio(file())).unwrap_err();
        assert!(e.contains("`file` source is refused in Kubernetes mode") && e.contains("pod's files"), "{e}");
        let e = kube.check(&owner(), &stdio(host_env())).unwrap_err();
        assert!(e.contains("`env` source is refused in Kubernetes mode"), "{e}");
        assert!(kube.check(&owner(), &stdio(key_ref(None))).is_ok());
        assert!(kube.check(&owner(), &stdio(key_ref(Some("team-a")))).is_ok());
        let e = kube.check(&owner(), &stdio(key_ref(Some("kube-system")))).unwrap_err();
        assert!(e.contains("`kube-system/creds` is in another namespace") && e.contains("(`team-a`)"), "{e}");
        let cluster = ObjectKey::new("Thing", "", "x");
        assert!(kube.check(&cluster, &stdio(key_ref(None))).unwrap_err().contains("cluster-scoped"));
        // The name and key go into an API path: only what Kubernetes allows them to be.
        let named =
            |name: &str, key: &str| SecretSource::SecretKeyRef { name: name.into(), namespace: None, key: key.into() };
        let e = kube.check(&owner(), &stdio(named("x/../../kube-system/secrets/y", "k"))).unwrap_err();
        assert!(e.contains("is not a Secret name"), "{e}");
        let e = kube.check(&owner(), &stdio(named("creds", "a/b"))).unwrap_err();
        assert!(e.contains("is not a Secret key"), "{e}");
        assert!(kube.check(&owner(), &stdio(named("gh.creds-1", "API_token.v2"))).is_ok());
    }

    #[test]
    fn targets_must_fit_the_transport_and_names_must_be_valid_and_distinct() {
        let files = Secrets::Files;
        let file = || SecretSource::File { path: "t".into() };
        let bad = [
            (spec(Transport::Stdio, vec![header("Authorization", file())]), "takes environment variables"),
            (spec(Transport::StreamableHttp, vec![env("T", file())]), "takes headers"),
            (spec(Transport::Stdio, vec![env("A=B", file())]), "not a valid environment variable name"),
            (spec(Transport::Sse, vec![header("bad header", file())]), "not a valid HTTP header name"),
            (spec(Transport::Stdio, vec![env("LITERAL", file())]), "both a literal value and a secret"),
            (spec(Transport::Sse, vec![header("x-literal", file())]), "both a literal value and a secret"),
            (spec(Transport::Stdio, vec![env("T", file()), env("T", file())]), "read from two secrets"),
            (spec(Transport::Stdio, vec![env("T", SecretSource::File { path: " ".into() })]), "needs a path"),
        ];
        for (s, want) in bad {
            let e = files.check(&owner(), &s).unwrap_err();
            assert!(e.contains(want), "{e} should say {want}");
        }
    }

    #[tokio::test]
    async fn files_lose_one_final_newline_and_missing_ones_are_named_not_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cr3t-value\r\n").unwrap();
        let s = spec(Transport::Stdio, vec![env("T", SecretSource::File { path: path.display().to_string() })]);
        let got = Secrets::Files.resolve(&owner(), &s).await.unwrap();
        assert_eq!(got.env_vars(), [(OsString::from("T"), OsString::from("s3cr3t-value"))]);
        assert!(!format!("{got:?}").contains("s3cr3t"), "Debug hides values: {got:?}");

        let missing = spec(Transport::Stdio, vec![env("T", SecretSource::File { path: "/nonexistent/tok".into() })]);
        let e = Secrets::Files.resolve(&owner(), &missing).await.unwrap_err();
        assert!(e.contains("env `T`") && e.contains("/nonexistent/tok") && e.contains("does not exist"), "{e}");

        let unset = spec(Transport::Stdio, vec![env("T", SecretSource::Env { name: "STEWARD_TEST_UNSET_VAR".into() })]);
        let e = Secrets::Files.resolve(&owner(), &unset).await.unwrap_err();
        assert!(e.contains("`STEWARD_TEST_UNSET_VAR` is not set"), "{e}");

        let kube = Secrets::Kubernetes(Arc::new(NoReader));
        let e = kube.resolve(&owner(), &spec(Transport::Stdio, vec![env("T", key_ref(None))])).await.unwrap_err();
        assert!(e.contains("Secret `team-a/creds` does not exist") && e.contains("create it"), "{e}");
    }

    #[tokio::test]
    async fn headers_are_sensitive_and_must_be_valid_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth");
        std::fs::write(&path, "Bearer abc\n").unwrap();
        let s = spec(
            Transport::StreamableHttp,
            vec![header("Authorization", SecretSource::File { path: path.display().to_string() })],
        );
        let got = Secrets::Files.resolve(&owner(), &s).await.unwrap();
        assert_eq!(got.headers.len(), 1);
        assert!(got.headers[0].1.is_sensitive());
        assert_eq!(got.headers[0].1.as_bytes(), b"Bearer abc");
        std::fs::write(&path, "two\nlines\n").unwrap();
        let e = Secrets::Files.resolve(&owner(), &s).await.unwrap_err();
        assert!(e.contains("not a valid HTTP header value") && !e.contains("lines"), "{e}");
    }
}
