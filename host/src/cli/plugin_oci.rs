//! `steward plugin push|pull|sign` and the registry side of `plugin inspect`: plugins as OCI artifacts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::oci::{Access, OciRef, PluginLabel, Pulled, Registry, SignKey, TrustKey, wasm_artifact};
use crate::plugin::{Plugin, PluginSettings};

/// How the CLI reaches a registry.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP (allowed for a registry on this machine; any other also needs --insecure).
    #[arg(long)]
    pub plain_http: bool,
    /// Allow --plain-http to a registry that is not this machine.
    #[arg(long)]
    pub insecure: bool,
    /// PEM CA certificates to trust for the registry, besides the system's.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A Docker config.json holding the registry's credentials (default: $DOCKER_CONFIG/config.json
    /// or ~/.docker/config.json, when present).
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
    /// A file holding a bearer token for the registry (instead of --docker-config).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl RegistryArgs {
    fn access(&self) -> Access {
        let docker_config = self.docker_config.clone().or_else(|| {
            let dir = std::env::var_os("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
            Some(dir.join("config.json")).filter(|f| self.token_file.is_none() && f.is_file())
        });
        Access {
            ca_file: self.ca_file.clone(),
            plain_http: self.plain_http,
            insecure: self.insecure,
            docker_config,
            token_file: self.token_file.clone(),
        }
    }
}

fn parse(reference: &str) -> Result<OciRef> {
    Ok(OciRef::parse(reference)?)
}

/// Whether `target` names a registry artifact rather than a file.
pub(super) fn is_reference(target: &Path) -> bool {
    target.to_str().is_some_and(|t| t.starts_with("oci://"))
}

/// Pulls `reference` (verifying its signature with `key` when given) for `inspect` and `pull`.
pub(super) async fn pull_verified(
    reference: &str,
    key: Option<&Path>,
    args: &RegistryArgs,
) -> Result<(OciRef, Pulled)> {
    let r = parse(reference)?;
    let key = key.map(TrustKey::load).transpose()?;
    let pulled = async { Registry::new(&r, &args.access())?.pull(&r, key.as_ref()).await }
        .await
        .with_context(|| r.to_string())?;
    Ok((r, pulled))
}

/// `steward plugin push FILE.wasm oci://…`: lays the plugin out as a Wasm OCI artifact,
/// annotated with what it describes, and pushes it; prints the digest reference.
pub(super) async fn push(file: &Path, reference: &str, args: &RegistryArgs) -> Result<ExitCode> {
    let r = parse(reference)?;
    let wasm = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runtime = super::plugin::standalone_runtime()?;
    // Only a component that loads and describes itself is pushed.
    let plugin = Plugin::load(runtime, file, wasm.clone(), |_| PluginSettings::default()).await?;
    let info = plugin.info();
    let label = PluginLabel {
        name: info.name.clone(),
        version: info.version.clone(),
        kinds: info.kinds.iter().map(|k| k.kind.clone()).collect(),
    };
    let artifact = wasm_artifact(&wasm, &label);
    let digest = async { Registry::new(&r, &args.access())?.push(&r, &wasm, &artifact).await }
        .await
        .with_context(|| r.to_string())?;
    eprintln!("pushed {} {} ({}) to {r}", label.name, label.version, label.kinds.join(","));
    println!("{}", r.at_digest(&digest));
    Ok(ExitCode::SUCCESS)
}

/// `steward plugin pull REF [-o FILE]`: pulls and verifies the plugin and writes its component.
pub(super) async fn pull(
    reference: &str,
    out: Option<&Path>,
    key: Option<&Path>,
    args: &RegistryArgs,
) -> Result<ExitCode> {
    let (r, pulled) = pull_verified(reference, key, args).await?;
    let name = pulled
        .manifest
        .annotations
        .get(crate::oci::layout::ANNOTATION_NAME)
        .filter(|n| crate::plugin::is_dns_label(n))
        .cloned()
        .unwrap_or_else(|| r.repository.rsplit('/').next().unwrap_or("plugin").to_string());
    let out = out.map_or_else(|| PathBuf::from(format!("{name}.wasm")), Path::to_path_buf);
    if std::fs::metadata(&out).is_ok_and(|m| !m.is_file()) {
        // A device, a pipe (`-o /dev/stdout`, `-o /dev/null`): written to, never replaced.
        std::fs::write(&out, &pulled.wasm).with_context(|| format!("cannot write {}", out.display()))?;
    } else {
        // A file appears whole or not at all.
        let tmp = out.with_extension("wasm.part");
        std::fs::write(&tmp, &pulled.wasm).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &out).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if let Some(k) = &pulled.signed_by {
        eprintln!("signature verified with {k}");
    }
    eprintln!("wrote {}", out.display());
    println!("{}", r.at_digest(&pulled.digest));
    Ok(ExitCode::SUCCESS)
}

/// `steward plugin sign REF --key KEY.pem [--bundle]`: signs the artifact `REF` names (a tag is
/// resolved to its digest first) the way `cosign sign --key` does: at the `.sig` tag (cosign v2),
/// or with `--bundle` as a Sigstore bundle referrer (cosign v3).
pub(super) async fn sign(reference: &str, key: &Path, bundle: bool, args: &RegistryArgs) -> Result<ExitCode> {
    let r = parse(reference)?;
    let key = SignKey::load(key)?;
    let (digest, sig) = async {
        let registry = Registry::new(&r, &args.access())?;
        let digest = registry.resolve(&r).await?;
        let sig = if bundle {
            registry.sign_bundle(&r, &digest, &key).await?
        } else {
            registry.sign(&r, &digest, &key).await?
        };
        Ok::<_, crate::oci::OciError>((digest, sig))
    }
    .await
    .with_context(|| r.to_string())?;
    let form = if bundle { "a Sigstore bundle referrer" } else { "the signature" };
    eprintln!("signed with the key {}; {form} is at {sig}", key.fingerprint());
    println!("{}", r.at_digest(&digest));
    Ok(ExitCode::SUCCESS)
}
