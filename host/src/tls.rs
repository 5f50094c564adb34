//! The host's TLS client settings (rustls, `ring`, the system's CA roots), shared by every outbound HTTPS client.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The host's TLS client settings: rustls with the `ring` provider and the system's CA roots
/// (without roots, https fails with a message that says so). Installs no process-wide provider.
pub fn client_config() -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // Built by hand rather than by reqwest, so that a machine without CA
    // certificates gets an error on https connections instead of no client at all
    // (rmcp's own default client panics then), and no process-wide provider is installed.
    let verifier: Arc<dyn ServerCertVerifier> = match rustls_platform_verifier::Verifier::new(provider.clone()) {
        Ok(verifier) => Arc::new(verifier),
        Err(e) => {
            tracing::warn!(error = %e, "no CA certificates: remote services over https cannot be verified");
            Arc::new(NoRoots { provider: provider.clone(), why: e.to_string() })
        }
    };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tls)
}

/// Rejects every certificate: what is left when the system has no CA roots.
#[derive(Debug)]
struct NoRoots {
    provider: Arc<CryptoProvider>,
    why: String,
}

impl NoRoots {
    fn error(&self) -> rustls::Error {
        rustls::Error::General(format!("cannot verify the server certificate: {}", self.why))
    }
}

impl ServerCertVerifier for NoRoots {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Err(self.error())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(self.error())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(self.error())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_config_builds() {
        client_config().unwrap();
    }
}
