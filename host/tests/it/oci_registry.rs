//! A real OCI registry for the tests: Debian's `docker-registry` (the CNCF distribution registry),
//! installed when missing, on a free loopback port with its storage in a temporary directory,
//! optionally behind basic auth (bcrypt htpasswd) and TLS from a CA generated here.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::eventually;
use crate::common::host::free_port;

/// The user and password of a registry with basic auth.
pub const USER: &str = "steward";
/// The password (never to be seen in any output).
pub const PASSWORD: &str = "s3cret-registry-password";

/// How a registry is set up.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Serve HTTPS with a certificate of a CA generated for it.
    pub tls: bool,
    /// Require basic auth ([`USER`], [`PASSWORD`]).
    pub auth: bool,
}

/// A running registry process.
pub struct TestRegistry {
    /// Its config, storage, certificates and credentials.
    pub dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
    opts: Options,
    child: Option<Child>,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// The `docker-registry` binary, installed with apt (Debian's `docker-registry`) when missing.
fn ensure_installed() -> PathBuf {
    if let Some(r) = on_path("docker-registry") {
        return r;
    }
    assert!(
        crate::common::apt_install(&["docker-registry"]),
        "`apt-get install docker-registry` failed; run it by hand to see why"
    );
    on_path("docker-registry").expect("docker-registry is still not on PATH after installing it")
}

impl TestRegistry {
    /// Starts a registry set up as `opts` and waits until it accepts connections.
    pub async fn start(opts: Options) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog: {{ disabled: true }}\nstorage:\n  filesystem: {{ rootdirectory: {} }}\n  delete: {{ enabled: true }}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: steward-test\n",
            dir.path().join("storage").display()
        );
        if opts.tls {
            let (cert, key) = write_tls(dir.path());
            config.push_str(&format!("  tls:\n    certificate: {}\n    key: {}\n", cert.display(), key.display()));
        }
        if opts.auth {
            let hash = bcrypt::hash(PASSWORD, 5).unwrap();
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{hash}\n")).unwrap();
            config
                .push_str(&format!("auth:\n  htpasswd:\n    realm: steward-test\n    path: {}\n", htpasswd.display()));
            let auth = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
            let docker = format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"auth":"{auth}"}}}}}}"#);
            std::fs::write(dir.path().join("docker-config.json"), docker).unwrap();
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let mut r = Self { dir, port, opts, child: None };
        r.restart().await;
        r
    }

    /// Starts the process again (same port, storage and credentials) after [`TestRegistry::stop`].
    pub async fn restart(&mut self) {
        let bin = ensure_installed();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("registry.log")).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let port = self.port;
        let log = self.dir.path().join("registry.log");
        eventually(
            Duration::from_secs(30),
            format_args!("the registry to listen on 127.0.0.1:{port} (its log: {})", log.display()),
            async || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            |up| *up,
        )
        .await;
    }

    /// Stops the process (`kill -9`); the storage stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `oci://127.0.0.1:PORT/{path}`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://127.0.0.1:{}/{path}", self.port)
    }

    /// The generated CA, when serving TLS.
    pub fn ca(&self) -> Option<PathBuf> {
        self.opts.tls.then(|| self.dir.path().join("ca.pem"))
    }

    /// The Docker `config.json` with the credentials, when auth is on.
    pub fn docker_config(&self) -> Option<PathBuf> {
        self.opts.auth.then(|| self.dir.path().join("docker-config.json"))
    }

    /// The CLI flags that reach this registry: the transport and the credentials.
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        match self.ca() {
            Some(ca) => args.extend(["--ca-file".to_string(), ca.display().to_string()]),
            None => args.push("--plain-http".into()),
        }
        if let Some(d) = self.docker_config() {
            args.extend(["--docker-config".to_string(), d.display().to_string()]);
        }
        args
    }

    /// The lines of a `plugin_sources` entry (after `- ref: …`) that reach this registry.
    pub fn source_yaml(&self) -> String {
        let mut y = String::new();
        match self.ca() {
            Some(ca) => y.push_str(&format!("    ca_file: {}\n", ca.display())),
            None => y.push_str("    plain_http: true\n"),
        }
        if let Some(d) = self.docker_config() {
            y.push_str(&format!("    docker_config: {}\n", d.display()));
        }
        y
    }

    /// The access the library's client needs for this registry.
    pub fn access(&self) -> steward::oci::Access {
        steward::oci::Access {
            ca_file: self.ca(),
            plain_http: !self.opts.tls,
            insecure: false,
            docker_config: self.docker_config(),
            token_file: None,
        }
    }

    /// The file in the registry's storage holding the blob `digest` (`sha256:<hex>`).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join("storage/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CA and a certificate for 127.0.0.1 and localhost signed by it; writes `ca.pem` and returns
/// the certificate's and its key's files.
fn write_tls(dir: &Path) -> (PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "steward test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    leaf.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let (cert_file, key_file) = (dir.join("registry.crt"), dir.join("registry.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (cert_file, key_file)
}

/// A fresh ECDSA P-256 key pair in `dir`: `{name}.pem` (private, PKCS#8) and `{name}.pub`.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let private = dir.join(format!("{name}.pem"));
    std::fs::write(&private, kp.serialize_pem()).unwrap();
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&public, steward::oci::SignKey::load(&private).unwrap().public_pem()).unwrap();
    (private, public)
}

/// Runs `steward` with `args`; returns (exit code, stdout, stderr).
pub fn steward(args: &[&str]) -> (i32, String, String) {
    let out = crate::common::steward().args(args).env("HOME", "/nonexistent").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `steward plugin push FILE REF` with the flags that reach `reg`; returns the pushed digest.
pub fn push(reg: &TestRegistry, file: &Path, reference: &str) -> String {
    let mut args = vec!["plugin".to_string(), "push".into(), file.display().to_string(), reference.to_string()];
    args.extend(reg.cli_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = steward(&args);
    assert_eq!(code, 0, "push failed: {err}");
    out.trim().rsplit_once('@').map(|(_, d)| d.to_string()).unwrap_or_else(|| panic!("no digest in {out:?}"))
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
