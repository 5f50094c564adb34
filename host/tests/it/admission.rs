//! The admission webhook (`kubernetes.webhook`) against the real kube-apiserver: `kubectl apply`
//! of an invalid object is refused at once with its plugin's field errors, a valid one is
//! accepted, the plugin's warnings are printed by kubectl, and the configuration follows the
//! kinds the host serves. The API server reaches the in-process host through
//! `clientConfig.url` (`https://127.0.0.1:PORT/validate`) and the self-managed CA's `caBundle`.
//!
//! The server is shared by the whole test binary, so the configuration is this test's own
//! (`steward-<namespace>`), matches only the test's namespace (its `namespaceSelector`, from
//! `kubernetes.namespaces`; Kubernetes 1.20 does not label namespaces with their name, so the
//! test does), and is deleted at the end.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use crate::common;
use crate::common::kube::*;
use crate::common::realkube::RealKube;

/// The bundled `Workflow` kind.
fn workflow_ar() -> ApiResource {
    ApiResource { kind: "Workflow".into(), plural: "workflows".into(), ..mcp_ar() }
}

/// What `kubectl apply` said.
#[derive(Debug)]
struct Applied {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// `kubectl apply -f -` of `manifest` in the test's namespace, with `extra` arguments.
async fn kubectl_apply(kubectl: &PathBuf, k: &Kube, manifest: &str, extra: &[&str]) -> Applied {
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(&k.kubeconfig).args(["-n", &k.ns, "apply", "-f", "-"]).args(extra);
    let manifest = manifest.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("kubectl runs");
        child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        Applied {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// The webhook's rules as `group/resource` lists, `None` while the configuration is absent.
async fn rules(api: &Api<ValidatingWebhookConfiguration>, name: &str) -> Option<Vec<String>> {
    let c = api.get_opt(name).await.unwrap_or_else(|e| panic!("get {name}: {e}"))?;
    let w = c.webhooks.unwrap_or_default().into_iter().next()?;
    Some(
        w.rules
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| {
                let group = r.api_groups.unwrap_or_default().join(",");
                r.resources.unwrap_or_default().into_iter().map(move |p| format!("{group}/{p}"))
            })
            .collect(),
    )
}

/// A TLS client that trusts only `ca` (PEM).
fn client_trusting(ca: &[u8]) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder().tls_backend_preconfigured(tls).build().unwrap()
}

const BROKEN_MCP: &str =
    "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: broken\nspec:\n  type: stdio\n";
const BROKEN_WORKFLOW: &str = "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: broken\nspec:\n  steps:\n  - id: first\n  - id: second\n    tool: ''\n";
const GOOD_MCP: &str = "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: remote\nspec:\n  type: streamable-http\n  url: http://127.0.0.1:9/mcp\n";
/// Valid, with a field the transport ignores (the plugin's warning) and one no schema knows.
const WARNED_MCP: &str = "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: warned\nspec:\n  type: stdio\n  command: git-mcp\n  url: http://127.0.0.1:9/mcp\n  colour: blue\n";

/// Valid, but its plugin panics (a wasm trap) when asked for its warnings.
const TRAPPING_LINT: &str = "apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: trapped\nspec:\n  behavior: ok\n  warn: panic\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_an_invalid_object_is_refused_with_the_plugins_field_errors() {
    let Some(k) = Kube::real("admission").await else { return };
    let Backend::Real(real) = &k.backend else { unreachable!("Kube::real is the real server") };
    let real: &RealKube = real;
    let kubectl = real
        .kubectl()
        .expect("kubectl: install Debian's kubernetes-client (the test harness does so as root), or put one on PATH");

    // Kubernetes 1.20 does not label namespaces with their name; 1.21 and later do.
    let namespaces: Api<Namespace> = Api::all(k.client.clone());
    let label = json!({"metadata": {"labels": {"kubernetes.io/metadata.name": k.ns}}});
    namespaces.patch(&k.ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();

    let port = common::host::free_port();
    let name = format!("steward-{}", k.ns);
    let packages = ["mcpserver", "workflow", "misbehave"];
    k.install_crds(&packages).await;
    let (dir, cfg) = k.host_dir(
        &packages,
        &format!(
            "webhook:\n  enabled: true\n  listen: 127.0.0.1:{port}\n  url: https://127.0.0.1:{port}/validate\n  configurationName: {name}\n  namespace: {ns}\n  timeoutSeconds: 10\n",
            ns = k.ns
        ),
    );
    let engine = start(&cfg, k.client.clone()).await;
    let webhook = steward::host::start_webhook(&engine, k.client.clone()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(webhook.local_addr().port(), port);

    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(k.client.clone());
    let all = ["steward.dev/mcpservers", "steward.dev/workflows", "test.steward.dev/misbehaves"].map(String::from);
    common::eventually(
        T,
        "the configuration lists MCPServer, Workflow and Misbehave",
        async || rules(&configurations, &name).await,
        |r| r.as_deref() == Some(&all[..]),
    )
    .await;

    // The configuration's caBundle is the CA of the certificate the webhook serves.
    let c = configurations.get(&name).await.unwrap();
    let hook = &c.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.client_config.url.as_deref(), Some(format!("https://127.0.0.1:{port}/validate").as_str()));
    assert_eq!(
        hook.namespace_selector.as_ref().unwrap().match_expressions.as_ref().unwrap()[0].values,
        Some(vec![k.ns.clone()])
    );
    let ca = hook.client_config.ca_bundle.as_ref().expect("a caBundle").0.clone();
    let r = client_trusting(&ca).post(format!("https://127.0.0.1:{port}/validate")).body("{}").send().await;
    let r = r.unwrap_or_else(|e| panic!("the caBundle does not verify the webhook's certificate: {e:?}"));
    assert_eq!(r.status(), 400, "an empty object is not an AdmissionReview");
    let secret: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(k.client.clone(), &k.ns);
    let stored = secret.get("steward-webhook-tls").await.unwrap();
    assert_eq!(stored.data.as_ref().unwrap()["ca.crt"].0, ca, "the CA is the Secret's");

    // An invalid MCPServer and an invalid Workflow: refused, with the plugin's field paths.
    // kubectl shows a 422's causes as it shows the API server's own (`The Kind "name" is invalid:`).
    let refused = kubectl_apply(&kubectl, &k, BROKEN_MCP, &[]).await;
    println!("kubectl apply (invalid MCPServer):\n{}{}", refused.stdout, refused.stderr);
    assert!(!refused.ok, "{refused:?}");
    assert!(refused.stderr.contains("\"broken\" is invalid"), "{refused:?}");
    assert!(refused.stderr.contains("spec.command: a stdio server needs a command: the program to run"), "{refused:?}");
    // Each answer is counted by kind and result.
    let admissions = |result: &str| {
        let labels = ["kind=\"MCPServer\"".to_string(), format!("result=\"{result}\"")];
        common::metric(&engine.render_metrics(), "steward_webhook_admissions_total", &[&labels[0], &labels[1]])
    };
    assert_eq!((admissions("denied"), admissions("allowed"), admissions("warned")), (1.0, 0.0, 0.0));
    let refused = kubectl_apply(&kubectl, &k, BROKEN_WORKFLOW, &[]).await;
    println!("kubectl apply (invalid Workflow):\n{}{}", refused.stdout, refused.stderr);
    assert!(!refused.ok, "{refused:?}");
    for path in [
        "spec.steps[0]: a step needs exactly one of tool, forEach or parallel; it has none",
        "spec.steps[1].tool: the tool name must not be empty",
    ] {
        assert!(refused.stderr.contains(path), "{path} not in {refused:?}");
    }
    // What the API server answers: the webhook named, each error in the message and as a cause.
    let workflows = k.api(&workflow_ar());
    let obj: DynamicObject = serde_saphyr::from_str(BROKEN_WORKFLOW).unwrap();
    let e = match workflows.create(&PostParams::default(), &obj).await {
        Err(kube::Error::Api(e)) => e,
        other => panic!("an invalid Workflow was not refused: {other:?}"),
    };
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    assert!(
        e.message.starts_with("admission webhook \"validate.steward.dev\" denied the request: Workflow.steward.dev \"broken\" is invalid: [spec.steps[0]: a step needs exactly one"),
        "{}",
        e.message
    );
    let causes: Vec<String> = e.details.iter().flat_map(|d| d.causes.iter().map(|c| c.field.clone())).collect();
    assert_eq!(causes, ["spec.steps[0]", "spec.steps[1].tool"], "{e:?}");
    let mcp = k.api(&mcp_ar());
    assert!(mcp.get_opt("broken").await.unwrap().is_none(), "a refused object is not stored");

    // A valid one is accepted.
    let accepted = kubectl_apply(&kubectl, &k, GOOD_MCP, &[]).await;
    assert!(accepted.ok && accepted.stdout.contains("mcpserver.steward.dev/remote created"), "{accepted:?}");
    // Allowed: its create (and the host's own finalizer write, which may have come already).
    assert!(admissions("allowed") >= 1.0 && admissions("denied") == 1.0, "{}", engine.render_metrics());

    // The plugin's warnings are printed by kubectl; the object is accepted. The unknown field
    // is pruned by the API server (the CRD's schema) before admission, so only the plugin warns.
    // (kubectl's own client-side schema check would refuse the unknown field: --validate=false.)
    let warned = kubectl_apply(&kubectl, &k, WARNED_MCP, &["--validate=false"]).await;
    println!("kubectl apply (a warning):\n{}{}", warned.stdout, warned.stderr);
    assert!(warned.ok, "{warned:?}");
    assert!(
        warned.stderr.contains("Warning: spec.url: a stdio server is a process Steward starts: its url is ignored"),
        "{warned:?}"
    );
    assert_eq!(admissions("warned"), 1.0, "{}", engine.render_metrics());
    let timed = common::metric(
        &engine.render_metrics(),
        "steward_webhook_admission_duration_seconds_count",
        &["kind=\"MCPServer\""],
    );
    assert!(timed >= 3.0, "{timed}");
    let stored: DynamicObject = mcp.get("warned").await.unwrap();
    assert!(stored.data["spec"].get("colour").is_none(), "{:?}", stored.data);

    // A plugin that traps in `lint` (Misbehave's `warn: panic`) takes nothing down: the object is
    // accepted with a warning that says so, and the webhook goes on answering.
    let trapped = kubectl_apply(&kubectl, &k, TRAPPING_LINT, &[]).await;
    println!("kubectl apply (a plugin that traps in lint):\n{}{}", trapped.stdout, trapped.stderr);
    assert!(trapped.ok, "{trapped:?}");
    assert!(trapped.stderr.contains("Warning: the plugin misbehave's warnings could not be read"), "{trapped:?}");
    assert!(!kubectl_apply(&kubectl, &k, BROKEN_MCP, &[]).await.ok, "the webhook still refuses");

    // The host's own writes go through: the valid objects get their finalizer and a status.
    wait_obj(&mcp, "remote", "a status from the host", |o| status(o)["steward"]["phase"].is_string()).await;

    // Disabling MCPServer at run time takes it out of the configuration: the API server then
    // accepts an invalid MCPServer (the host does not serve the kind).
    engine.set_kind_enabled("MCPServer", false).await.unwrap();
    common::eventually(
        T,
        "the configuration lists Workflow and Misbehave only",
        async || rules(&configurations, &name).await,
        |r| r.as_deref() == Some(&all[1..]),
    )
    .await;
    let let_through = kubectl_apply(&kubectl, &k, BROKEN_MCP, &[]).await;
    assert!(let_through.ok, "{let_through:?}");
    assert!(!kubectl_apply(&kubectl, &k, BROKEN_WORKFLOW, &[]).await.ok, "Workflow is still validated");
    // No kind served: the configuration stays, with no rules, and sends nothing to the webhook.
    for kind in ["Workflow", "Misbehave"] {
        engine.set_kind_enabled(kind, false).await.unwrap();
    }
    common::eventually(
        T,
        "the configuration without rules",
        async || rules(&configurations, &name).await,
        |r| r.as_ref().is_some_and(|r| r.is_empty()),
    )
    .await;
    assert!(kubectl_apply(&kubectl, &k, BROKEN_WORKFLOW, &[]).await.ok, "nothing is validated");
    // Enabled again: listed again.
    for kind in ["MCPServer", "Workflow", "Misbehave"] {
        engine.set_kind_enabled(kind, true).await.unwrap();
    }
    common::eventually(
        T,
        "the configuration lists every kind again",
        async || rules(&configurations, &name).await,
        |r| r.as_deref() == Some(&all[..]),
    )
    .await;

    // A plugin removed from the plugin directory at run time takes its kind out; put back, in.
    let file = dir.path().join("plugins/workflow.wasm");
    std::fs::remove_file(&file).unwrap();
    let without_workflow = [all[0].clone(), all[2].clone()];
    common::eventually(
        T,
        "the configuration without Workflow",
        async || rules(&configurations, &name).await,
        |r| r.as_deref() == Some(&without_workflow[..]),
    )
    .await;
    common::install(&common::wasm("workflow"), &file);
    common::eventually(
        T,
        "the configuration with Workflow again",
        async || rules(&configurations, &name).await,
        |r| r.as_deref() == Some(&all[..]),
    )
    .await;

    // `steward webhook` prints the same configuration, with the caBundle of the Secret, and
    // `--apply` applies it.
    let steward = |args: &[&str]| {
        let mut cmd = crate::common::steward();
        cmd.args(args).arg("--config").arg(&cfg).env("KUBECONFIG", &k.kubeconfig).env("STEWARD_LOG", "warn");
        async move { tokio::task::spawn_blocking(move || cmd.output().expect("steward runs")).await.unwrap() }
    };
    let out = steward(&["webhook"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("# ValidatingWebhookConfiguration generated by `steward webhook`"), "{text}");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let printed = docs.iter().find(|d| d["kind"] == "ValidatingWebhookConfiguration").expect("the configuration");
    let mut live = serde_json::to_value(configurations.get(&name).await.unwrap()).unwrap();
    // The API server's default: no object selector.
    live["webhooks"][0].as_object_mut().unwrap().remove("objectSelector");
    assert_eq!(printed["webhooks"], live["webhooks"], "{text}");
    let out = steward(&["webhook", "--apply"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("validatingwebhookconfiguration.admissionregistration.k8s.io/{name} configured\n")
    );

    drop(webhook);
    configurations.delete(&name, &DeleteParams::default()).await.unwrap();
    engine.shutdown(Duration::from_secs(5)).await;
}
