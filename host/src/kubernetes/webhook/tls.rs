//! The certificate the webhook presents: read from the self-managed Secret (renewed before it
//! expires) or from the user's files (read again when they change), and swapped in place for
//! the next handshake, without restarting the server.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::WebhookError;
use super::certs::Validity;
use super::secret::CertSecret;

/// How often the Secret is read again: a renewal due, or another replica's, is picked up then.
pub const SECRET_CHECK: Duration = Duration::from_secs(600);
/// How often the user's certificate files are looked at for a change.
pub const FILE_CHECK: Duration = Duration::from_secs(10);

/// The certificate handshakes get now; [`CurrentCert::set`] swaps it for the next one.
#[derive(Debug, Default)]
pub struct CurrentCert {
    key: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CurrentCert {
    /// Serves `key` from the next handshake on.
    pub fn set(&self, key: CertifiedKey) {
        *self.key.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(key));
    }

    /// The certificate served now, if any.
    pub fn get(&self) -> Option<Arc<CertifiedKey>> {
        self.key.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// A certificate chain and its private key (PEM) as rustls serves them (ring's signer).
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    if chain.is_empty() {
        return Err("it holds no PEM CERTIFICATE block".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("the private key is not PEM: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("the private key cannot sign: {e}"))?;
    let ck = CertifiedKey::new(chain, signer);
    ck.keys_match().map_err(|e| format!("the private key is not the certificate's: {e}"))?;
    Ok(ck)
}

/// A TLS server config (ring, TLS 1.2 and 1.3, HTTP/1.1) that presents what `current` holds.
pub fn server_config(current: Arc<CurrentCert>) -> Result<Arc<ServerConfig>, WebhookError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WebhookError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(current);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The user's certificate files (`certificate.certFile`, `keyFile`, `caFile`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// The serving certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA for the configuration's `caBundle` (PEM), if given.
    pub ca: Option<PathBuf>,
}

/// What the files held when last read: their bytes, to tell a change.
type FileBytes = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

impl CertFiles {
    fn read_bytes(&self) -> Result<FileBytes, String> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        Ok((read(&self.cert)?, read(&self.key)?, self.ca.as_ref().map(read).transpose()?))
    }

    /// Reads the files: the key to serve and the CA text.
    pub fn load(&self) -> Result<(CertifiedKey, Option<String>), String> {
        let (cert, key, ca) = self.read_bytes()?;
        let ck = certified_key(&cert, &key)
            .map_err(|e| format!("{} and {}: {e}", self.cert.display(), self.key.display()))?;
        let ca = ca.map(|c| String::from_utf8_lossy(&c).into_owned());
        Ok((ck, ca))
    }
}

/// Where the certificate comes from.
#[derive(Clone)]
pub enum CertSource {
    /// The self-managed Secret, for these names, with these lifetimes.
    Secret {
        /// The Secret.
        secret: Box<CertSecret>,
        /// The names the serving certificate must be valid for.
        names: Vec<String>,
        /// Lifetimes and renewal.
        validity: Validity,
    },
    /// The user's files.
    Files(CertFiles),
}

/// The certificate being served and its CA, kept current by a background task.
pub struct Tls {
    /// What handshakes get.
    pub current: Arc<CurrentCert>,
    /// The CA PEM for the configuration's `caBundle` (`None`: none is known).
    pub ca: watch::Receiver<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tls {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tls {
    /// Loads the certificate once (an error here stops the start, with what to fix), then keeps
    /// it current: the Secret is read (and renewed when due) every [`SECRET_CHECK`], the files
    /// every [`FILE_CHECK`]; a failure later is logged and the certificate served stays.
    pub async fn start(source: CertSource) -> Result<Self, WebhookError> {
        let current = Arc::new(CurrentCert::default());
        let (ca_tx, ca) = watch::channel(None);
        let task = match source {
            CertSource::Secret { secret, names, validity } => {
                let b = secret.ensure(&names, SystemTime::now(), &validity).await?;
                current.set(certified_key(b.cert.as_bytes(), b.key.as_bytes()).map_err(|message| {
                    WebhookError::Secret { secret: secret.describe(), message: format!("its serving pair: {message}") }
                })?);
                ca_tx.send_replace(Some(b.ca_cert.clone()));
                tokio::spawn(keep_secret_current(*secret, names, validity, b, current.clone(), ca_tx))
            }
            CertSource::Files(files) => {
                let (ck, ca_pem) = files.load().map_err(WebhookError::Files)?;
                current.set(ck);
                ca_tx.send_replace(ca_pem);
                let seen = files.read_bytes().ok();
                tokio::spawn(keep_files_current(files, seen, current.clone(), ca_tx))
            }
        };
        Ok(Self { current, ca, task })
    }
}

async fn keep_secret_current(
    secret: CertSecret,
    names: Vec<String>,
    validity: Validity,
    mut served: super::certs::Bundle,
    current: Arc<CurrentCert>,
    ca: watch::Sender<Option<String>>,
) {
    loop {
        tokio::time::sleep(SECRET_CHECK).await;
        match secret.ensure(&names, SystemTime::now(), &validity).await {
            Ok(b) if b == served => {}
            Ok(b) => match certified_key(b.cert.as_bytes(), b.key.as_bytes()) {
                Ok(ck) => {
                    current.set(ck);
                    ca.send_if_modified(|c| replace_if_changed(c, &b.ca_cert));
                    tracing::info!("serving the webhook's new certificate from the Secret {}", secret.describe());
                    served = b;
                }
                Err(e) => tracing::warn!("the serving pair in the Secret {} is unusable: {e}", secret.describe()),
            },
            Err(e) => tracing::warn!("{e}; the webhook serves its current certificate and tries again later"),
        }
    }
}

async fn keep_files_current(
    files: CertFiles,
    mut seen: Option<FileBytes>,
    current: Arc<CurrentCert>,
    ca: watch::Sender<Option<String>>,
) {
    loop {
        tokio::time::sleep(FILE_CHECK).await;
        refresh_files(&files, &mut seen, &current, &ca);
    }
}

/// Reads the files again; when they changed and hold a usable pair, serves it and publishes the
/// CA. Returns whether the served certificate changed.
pub fn refresh_files(
    files: &CertFiles,
    seen: &mut Option<FileBytes>,
    current: &CurrentCert,
    ca: &watch::Sender<Option<String>>,
) -> bool {
    let now = match files.read_bytes() {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("the webhook's certificate files: {e}; the current certificate stays");
            return false;
        }
    };
    if seen.as_ref() == Some(&now) {
        return false;
    }
    // A rotation writes the files one by one: a pair that does not match yet is read again next time.
    match files.load() {
        Ok((ck, ca_pem)) => {
            current.set(ck);
            ca.send_if_modified(|c| match &ca_pem {
                Some(pem) => replace_if_changed(c, pem),
                None => c.take().is_some(),
            });
            *seen = Some(now);
            tracing::info!(cert = %files.cert.display(), "the webhook's certificate files changed: serving the new certificate");
            true
        }
        Err(e) => {
            tracing::warn!("the webhook's certificate files changed but are not usable yet: {e}");
            false
        }
    }
}

fn replace_if_changed(slot: &mut Option<String>, pem: &str) -> bool {
    if slot.as_deref() == Some(pem) {
        return false;
    }
    *slot = Some(pem.to_string());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::webhook::certs::{Validity, new_bundle};

    fn pair() -> (String, String, String) {
        let b = new_bundle(&["127.0.0.1".into()], SystemTime::now(), &Validity::default()).unwrap();
        (b.cert, b.key, b.ca_cert)
    }

    #[test]
    fn a_pair_loads_and_a_key_of_another_certificate_or_junk_is_refused() {
        let (cert, key, _) = pair();
        certified_key(cert.as_bytes(), key.as_bytes()).unwrap();
        let (_, other_key, _) = pair();
        let e = certified_key(cert.as_bytes(), other_key.as_bytes()).unwrap_err();
        assert!(e.contains("not the certificate's"), "{e}");
        assert!(certified_key(b"junk", key.as_bytes()).unwrap_err().contains("no PEM CERTIFICATE"));
        assert!(certified_key(cert.as_bytes(), b"junk").unwrap_err().contains("private key"));
    }

    #[test]
    fn changed_files_are_served_once_they_hold_a_matching_pair() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            ca: Some(dir.path().join("ca.crt")),
        };
        let write = |(cert, key, ca): &(String, String, String)| {
            std::fs::write(&files.cert, cert).unwrap();
            std::fs::write(&files.key, key).unwrap();
            std::fs::write(files.ca.as_ref().unwrap(), ca).unwrap();
        };
        let first = pair();
        write(&first);
        let current = CurrentCert::default();
        let (ca_tx, ca) = watch::channel(None);
        let mut seen = None;
        assert!(refresh_files(&files, &mut seen, &current, &ca_tx));
        assert_eq!(ca.borrow().as_deref(), Some(first.2.as_str()));
        let served = current.get().unwrap();
        assert!(!refresh_files(&files, &mut seen, &current, &ca_tx), "nothing changed");
        // cert-manager rotates: the new certificate is written before its key.
        let second = pair();
        std::fs::write(&files.cert, &second.0).unwrap();
        assert!(!refresh_files(&files, &mut seen, &current, &ca_tx));
        assert!(Arc::ptr_eq(&served, &current.get().unwrap()), "a half-written pair is not served");
        write(&second);
        assert!(refresh_files(&files, &mut seen, &current, &ca_tx));
        assert!(!Arc::ptr_eq(&served, &current.get().unwrap()));
        assert_eq!(ca.borrow().as_deref(), Some(second.2.as_str()));
        // Gone files keep the current certificate.
        std::fs::remove_file(&files.key).unwrap();
        assert!(!refresh_files(&files, &mut seen, &current, &ca_tx));
        assert!(current.get().is_some());
    }
}
