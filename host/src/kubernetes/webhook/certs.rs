//! The self-managed certificates: a CA and a serving certificate made with rcgen, and whether a
//! pair a Secret holds is still good for the webhook's names (checked the way a client checks
//! it, at a later time, so no certificate is ever parsed by hand).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// The common name of the self-managed CA (the issuer of every serving certificate it signs).
pub const CA_NAME: &str = "steward-webhook-ca";

/// How long certificates are valid, and how early the serving one is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The CA's lifetime.
    pub ca: Duration,
    /// The serving certificate's lifetime.
    pub serving: Duration,
    /// A certificate (or its CA) that is no longer valid this long from now is renewed.
    pub renew_before: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// A `SystemTime` as rcgen's time type (which this crate does not name).
macro_rules! at {
    ($t:expr) => {
        rcgen::date_time_ymd(1970, 1, 1) + $t.duration_since(UNIX_EPOCH).unwrap_or_default()
    };
}

impl Default for Validity {
    /// A CA for 10 years; a serving certificate for 90 days, renewed when under 30 days are left.
    fn default() -> Self {
        Self { ca: DAY * 3650, serving: DAY * 90, renew_before: DAY * 30 }
    }
}

/// Slack before "now" in a new certificate's `notBefore`, for clocks a little behind this one.
const BACKDATE: Duration = Duration::from_secs(3600);

/// A CA and a serving certificate signed by it, each with its private key, all PEM: what the
/// Secret holds (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`).
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The CA certificate: the configuration's `caBundle`.
    pub ca_cert: String,
    /// The CA's private key (PKCS#8).
    pub ca_key: String,
    /// The serving certificate.
    pub cert: String,
    /// The serving certificate's private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Bundle").field("ca_cert", &self.ca_cert).field("cert", &self.cert).finish_non_exhaustive()
    }
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the webhook's {what}: {message}")]
pub struct CertError {
    /// `CA`, `serving certificate`.
    pub what: &'static str,
    /// Why.
    pub message: String,
}

/// What to do with the pair a Secret holds, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Both are good until at least `renew_before` from now, for every name.
    Keep,
    /// The CA is good; issue a new serving certificate with it.
    Serving(String),
    /// The CA is unusable or about to expire: make a new CA and serving certificate.
    All(String),
}

impl Plan {
    /// Why a renewal is planned; `None` for [`Plan::Keep`].
    pub fn reason(&self) -> Option<&str> {
        match self {
            Plan::Keep => None,
            Plan::Serving(why) | Plan::All(why) => Some(why),
        }
    }
}

/// A new CA valid from about `now` for `v.ca`, as (certificate, key) PEM.
pub fn new_ca(now: SystemTime, v: &Validity) -> Result<(String, String), CertError> {
    let err = |e: rcgen::Error| CertError { what: "CA", message: e.to_string() };
    let key = KeyPair::generate().map_err(err)?;
    let params = ca_params(now, v);
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn ca_params(now: SystemTime, v: &Validity) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, CA_NAME);
    p.distinguished_name.push(DnType::OrganizationName, "Steward");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p.not_before = at!(now.checked_sub(BACKDATE).unwrap_or(UNIX_EPOCH));
    p.not_after = at!(now + v.ca);
    p
}

/// A serving certificate for `names` (DNS names, or IP addresses as IP SANs) valid from about
/// `now` for `lifetime`, signed by the CA whose key is `ca_key`, as (certificate, key) PEM.
///
/// The issuer is named as [`new_ca`] names its CA; a CA of another name in a Secret gives
/// certificates that do not verify against it, and [`plan`] then replaces both.
pub fn issue(
    ca_key: &str,
    names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<(String, String), CertError> {
    let err = |e: rcgen::Error| CertError { what: "serving certificate", message: e.to_string() };
    if names.is_empty() {
        return Err(CertError { what: "serving certificate", message: "it has no name to be valid for".into() });
    }
    let ca_signing = KeyPair::from_pem(ca_key).map_err(err)?;
    let issuer = Issuer::new(ca_params(now, &Validity::default()), ca_signing);
    let key = KeyPair::generate().map_err(err)?;
    let mut p = CertificateParams::new(names.to_vec()).map_err(err)?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, names[0].as_str());
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = at!(now.checked_sub(BACKDATE).unwrap_or(UNIX_EPOCH));
    p.not_after = at!(now + lifetime);
    let cert = p.signed_by(&key, &issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A new CA and a serving certificate for `names`.
pub fn new_bundle(names: &[String], now: SystemTime, v: &Validity) -> Result<Bundle, CertError> {
    let (ca_cert, ca_key) = new_ca(now, v)?;
    let (cert, key) = issue(&ca_key, names, now, v.serving)?;
    Ok(Bundle { ca_cert, ca_key, cert, key })
}

/// What `plan` says, carried out: `existing` kept, its serving certificate renewed with its CA,
/// or both made anew.
pub fn carry_out(
    existing: Option<&Bundle>,
    plan: &Plan,
    names: &[String],
    now: SystemTime,
    v: &Validity,
) -> Result<Bundle, CertError> {
    match (existing, plan) {
        (Some(b), Plan::Keep) => Ok(b.clone()),
        (Some(b), Plan::Serving(_)) => {
            let (cert, key) = issue(&b.ca_key, names, now, v.serving)?;
            Ok(Bundle { cert, key, ..b.clone() })
        }
        _ => new_bundle(names, now, v),
    }
}

/// Whether `b` can go on serving `names`: its serving certificate must verify against its CA,
/// as the API server verifies it, both now and `v.renew_before` from now. A CA that cannot sign
/// a serving certificate any more (its key does not parse or is not the certificate's), or that
/// expires before a serving certificate issued now would (within `v.serving`), is replaced
/// along with the serving certificate.
pub fn plan(b: &Bundle, names: &[String], now: SystemTime, v: &Validity) -> Plan {
    let later = now + v.renew_before;
    // The CA's key and name: a throwaway certificate signed with it must verify against it.
    let probe_names = ["ca-check.steward.invalid".to_string()];
    let probe = issue(&b.ca_key, &probe_names, now, DAY);
    if let Err(why) =
        probe.map_err(|e| e.to_string()).and_then(|(cert, _)| verify(&b.ca_cert, &cert, &probe_names, now))
    {
        return Plan::All(format!("the CA cannot sign serving certificates: {why}"));
    }
    // Its lifetime (a client checks it, though a trust anchor's is not checked by `verify`).
    match CertificateDer::from_pem_slice(b.ca_cert.as_bytes()).ok().and_then(|der| not_after(&der)) {
        None => return Plan::All("the CA's expiry cannot be read".into()),
        Some(end) if end < now + v.serving => {
            let left = end.duration_since(now).unwrap_or_default().as_secs() / DAY.as_secs();
            return Plan::All(format!("the CA expires in {left} days, before a new serving certificate would"));
        }
        Some(_) => {}
    }
    for when in [now, later] {
        if let Err(why) = verify(&b.ca_cert, &b.cert, names, when) {
            let what = if when == now {
                "the serving certificate is not valid now".to_string()
            } else {
                format!("the serving certificate is not valid {} from now", days(v))
            };
            return Plan::Serving(format!("{what}: {why}"));
        }
    }
    Plan::Keep
}

fn days(v: &Validity) -> String {
    format!("{} days", v.renew_before.as_secs() / DAY.as_secs())
}

/// The `notAfter` of the DER certificate `der`; `None` when it does not parse.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Verifies the serving certificate `cert` against the CA `ca` for each of `names` at `when`,
/// as a TLS client does (chain, validity period, server usage, subject alternative names).
pub fn verify(ca: &str, cert: &str, names: &[String], when: SystemTime) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        let c = c.map_err(|e| format!("the CA is not PEM: {e}"))?;
        roots.add(c).map_err(|e| format!("the CA is not a usable certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("there is no CA certificate".into());
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    let (leaf, intermediates) = chain.split_first().ok_or("there is no certificate")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("cannot check it: {e}"))?;
    let since = when.duration_since(UNIX_EPOCH).unwrap_or_default();
    for name in names {
        let server_name = match name.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(name.clone()).map_err(|_| format!("`{name}` is not a DNS name"))?,
        };
        verifier
            .verify_server_cert(leaf, intermediates, &server_name, &[], UnixTime::since_unix_epoch(since))
            .map_err(|e| format!("for {name}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["steward-webhook.ops.svc".into(), "steward-webhook.ops.svc.cluster.local".into()]
    }

    /// A fixed "now" (2030-01-01): nothing here reads the clock.
    fn t0() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_893_456_000)
    }

    #[test]
    fn a_new_ca_signs_a_serving_certificate_valid_for_exactly_its_names() {
        let v = Validity::default();
        let b = new_bundle(&names(), t0(), &v).unwrap();
        assert!(b.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"), "{}", b.ca_cert);
        assert!(b.key.contains("PRIVATE KEY"));
        verify(&b.ca_cert, &b.cert, &names(), t0()).unwrap();
        let e = verify(&b.ca_cert, &b.cert, &["other.ops.svc".into()], t0()).unwrap_err();
        assert!(e.contains("other.ops.svc"), "{e}");
        // Another CA does not vouch for it.
        let other = new_bundle(&names(), t0(), &v).unwrap();
        assert!(verify(&other.ca_cert, &b.cert, &names(), t0()).is_err());
        // It is valid 89 days on and not 91.
        verify(&b.ca_cert, &b.cert, &names(), t0() + DAY * 89).unwrap();
        assert!(verify(&b.ca_cert, &b.cert, &names(), t0() + DAY * 91).is_err());
    }

    #[test]
    fn an_address_becomes_an_ip_san() {
        let ip = vec!["127.0.0.1".to_string()];
        let b = new_bundle(&ip, t0(), &Validity::default()).unwrap();
        verify(&b.ca_cert, &b.cert, &ip, t0()).unwrap();
        assert!(verify(&b.ca_cert, &b.cert, &["127.0.0.2".into()], t0()).is_err());
        let v6 = vec!["::1".to_string()];
        let b = new_bundle(&v6, t0(), &Validity::default()).unwrap();
        verify(&b.ca_cert, &b.cert, &v6, t0()).unwrap();
    }

    #[test]
    fn the_serving_certificate_is_renewed_thirty_days_before_it_expires_and_the_ca_kept() {
        let v = Validity::default();
        let b = new_bundle(&names(), t0(), &v).unwrap();
        assert_eq!(plan(&b, &names(), t0(), &v), Plan::Keep);
        assert_eq!(plan(&b, &names(), t0() + DAY * 59, &v), Plan::Keep);
        let later = t0() + DAY * 61;
        let p = plan(&b, &names(), later, &v);
        assert!(matches!(&p, Plan::Serving(why) if why.contains("not valid 30 days from now")), "{p:?}");
        let renewed = carry_out(Some(&b), &p, &names(), later, &v).unwrap();
        assert_eq!((renewed.ca_cert.as_str(), renewed.ca_key.as_str()), (b.ca_cert.as_str(), b.ca_key.as_str()));
        assert_ne!(renewed.cert, b.cert);
        assert_eq!(plan(&renewed, &names(), later, &v), Plan::Keep);
        // Kept as it is when nothing is due.
        assert_eq!(carry_out(Some(&b), &Plan::Keep, &names(), t0(), &v).unwrap(), b);
    }

    #[test]
    fn a_serving_certificate_for_other_names_or_not_valid_yet_is_renewed() {
        let v = Validity::default();
        let b = new_bundle(&names(), t0(), &v).unwrap();
        let moved = vec!["steward-webhook.elsewhere.svc".to_string()];
        assert!(matches!(plan(&b, &moved, t0(), &v), Plan::Serving(why) if why.contains("elsewhere")));
        // A replica whose clock is two hours behind the one that made it (one hour is allowed for).
        let p = plan(&b, &names(), t0() - Duration::from_secs(7200), &v);
        assert!(matches!(&p, Plan::Serving(why) if why.contains("not valid now")), "{p:?}");
    }

    #[test]
    fn a_ca_about_to_expire_or_unusable_is_replaced_with_the_serving_certificate() {
        let short = Validity { ca: DAY * 20, ..Validity::default() };
        let b = new_bundle(&names(), t0(), &short).unwrap();
        let p = plan(&b, &names(), t0(), &Validity::default());
        assert!(matches!(&p, Plan::All(why) if why.contains("the CA expires in 20 days")), "{p:?}");
        let fresh = carry_out(Some(&b), &p, &names(), t0(), &Validity::default()).unwrap();
        assert_ne!(fresh.ca_cert, b.ca_cert);
        assert_eq!(plan(&fresh, &names(), t0(), &Validity::default()), Plan::Keep);

        let v = Validity::default();
        let good = new_bundle(&names(), t0(), &v).unwrap();
        let broken_key = Bundle { ca_key: "not a key".into(), ..good.clone() };
        assert!(matches!(plan(&broken_key, &names(), t0(), &v), Plan::All(_)));
        // A CA certificate that is not the one of the key.
        let other = new_bundle(&names(), t0(), &v).unwrap();
        let mismatched = Bundle { ca_cert: other.ca_cert, ..good };
        assert!(matches!(plan(&mismatched, &names(), t0(), &v), Plan::All(_)));
    }

    #[test]
    fn the_expiry_of_a_certificate_is_read_from_its_der() {
        let v = Validity::default();
        let b = new_bundle(&names(), t0(), &v).unwrap();
        let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(not_after(&der(&b.ca_cert)), Some(t0() + v.ca));
        assert_eq!(not_after(&der(&b.cert)), Some(t0() + v.serving));
        // UTCTime before 2050, GeneralizedTime from 2050 on.
        let late = new_ca(UNIX_EPOCH + Duration::from_secs(2_556_057_600), &Validity { ca: DAY, ..v }).unwrap();
        assert_eq!(not_after(&der(&late.0)), Some(UNIX_EPOCH + Duration::from_secs(2_556_057_600) + DAY));
        for junk in [&b""[..], &[0x30], &[0x30, 0x82, 0xff, 0xff], &[0x04, 0x01, 0x00]] {
            assert_eq!(not_after(junk), None);
        }
    }

    #[test]
    fn a_bundle_never_shows_its_keys() {
        let b = new_bundle(&names(), t0(), &Validity::default()).unwrap();
        let shown = format!("{b:?}");
        assert!(!shown.contains("PRIVATE KEY") && shown.contains("CERTIFICATE"), "{shown}");
        assert!(issue(&b.ca_key, &[], t0(), DAY).unwrap_err().to_string().contains("no name"));
    }
}
