//! `steward crds`: a CustomResourceDefinition for every enabled kind, printed or applied.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use crate::kubernetes::cluster::{ClusterError, connect_to_server};
use crate::kubernetes::crd::{crd_for, crd_yaml};

use super::served::enabled_kinds;

/// Prints (YAML) the CRDs of the enabled kinds of `plugins` (or the config's plugins), sorted
/// by name, or applies them to the cluster.
pub(super) async fn crds(plugins: &[PathBuf], config: &Path, apply: bool) -> Result<ExitCode> {
    let kinds = enabled_kinds(plugins, config).await?;
    let mut crds = kinds.iter().map(crd_for).collect::<Result<Vec<_>, _>>()?;
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if apply {
        apply_crds(&crds).await?;
    } else {
        print!("{}", crd_yaml(&crds));
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates or updates `crds` with server-side apply (field manager `steward`, forced), in the
/// cluster the host itself would connect to ([`connect_to_server`]): the kubeconfig's current
/// context (`KUBECONFIG`, else `~/.kube/config`), or the in-cluster config. Stops at the first
/// refusal, with an error naming the server and the CRD; each CRD is reported once its kind is
/// served (`Established`).
async fn apply_crds(crds: &[CustomResourceDefinition]) -> Result<()> {
    let (client, server) = connect_to_server().await.map_err(|e| match e {
        ClusterError::Config(_) => anyhow!("cannot find a Kubernetes cluster to apply the CRDs to: {e}"),
        other => anyhow!("cannot make a client to apply the CRDs: {other}"),
    })?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = PatchParams::apply(crate::kubernetes::FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(crd)).await {
            return Err(refused(&server, &name, e));
        }
        established(&api, &name).await?;
        println!("customresourcedefinition.apiextensions.k8s.io/{name} configured");
    }
    Ok(())
}

/// How long an applied CRD may take to be served.
const ESTABLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until the API server serves the kind of CRD `name` (its `Established` condition), so
/// objects of it can be created as soon as the command returns: a real API server establishes
/// a new CRD a moment after accepting it.
async fn established(api: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    use kube::runtime::wait::{await_condition, conditions::is_crd_established};
    match tokio::time::timeout(ESTABLISH_TIMEOUT, await_condition(api.clone(), name, is_crd_established())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(anyhow!("CustomResourceDefinition {name} was applied, but watching it failed: {e}")),
        Err(_) => Err(anyhow!(
            "CustomResourceDefinition {name} was applied but is not Established after {}s; \
             `kubectl describe crd {name}` shows its conditions",
            ESTABLISH_TIMEOUT.as_secs()
        )),
    }
}

/// Why the server at `server` did not take CRD `name`, with what to do about it.
fn refused(server: &str, name: &str, e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => {
            let hint = match s.code {
                401 => "; the kubeconfig's credentials were refused: log in to the cluster again",
                403 => {
                    "; applying CRDs needs the right to create and patch customresourcedefinitions (a cluster admin), which Steward's runtime role does not have"
                }
                422 => "; the API server found the generated CRD invalid: please report this with the plugin",
                _ => "",
            };
            anyhow!(
                "the Kubernetes API server at {server} refused CustomResourceDefinition {name}: {} ({}){hint}",
                s.message,
                s.code
            )
        }
        other => {
            // The causes say why (`Connection refused`, a TLS failure...); kube's own message does not.
            let mut why = other.to_string();
            let mut cause = std::error::Error::source(&other);
            while let Some(c) = cause {
                let text = c.to_string();
                if !why.contains(&text) {
                    why = format!("{why}: {text}");
                }
                cause = c.source();
            }
            anyhow!(
                "cannot reach the Kubernetes API server at {server} to apply CustomResourceDefinition {name}: {why}; the server is the current context of the kubeconfig (KUBECONFIG, else ~/.kube/config), or the in-cluster config"
            )
        }
    }
}
