//! Telling a TLS handshake that got a plain-HTTP answer from other transport failures, so the error can say to add `--plain-http`.

use std::error::Error;

/// Whether `e` (a transport error, with its sources) is a TLS handshake that received something
/// that is not TLS at all: what a client speaking HTTPS gets from a registry serving plain HTTP
/// (rustls: "received corrupt message of type InvalidContentType").
pub fn answers_plain_http(e: &(dyn Error + 'static)) -> bool {
    let mut next: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(err) = next {
        if is_not_tls(err) {
            return true;
        }
        // An `io::Error` wrapping another error gives that error's *source*, not the error
        // itself, as its source (and hyper wraps one `io::Error` in another): go inside it.
        next = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => err.source(),
        };
    }
    false
}

fn is_not_tls(e: &(dyn Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rustls::Error>(),
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_tls_record_that_is_not_tls_is_told_apart_from_other_failures() {
        let not_tls = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        // As hyper-rustls gives it: an I/O error of kind Other around one of kind InvalidData.
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, not_tls);
        let wrapped = Outer(std::io::Error::other(inner));
        assert!(answers_plain_http(&wrapped));
        let refused = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"));
        assert!(!answers_plain_http(&refused));
        let bad_cert = Outer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        assert!(!answers_plain_http(&bad_cert));
    }
}
