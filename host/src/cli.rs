//! The `steward` command line: argument parsing and the commands that need no running host.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

use crate::client::Client;
use crate::config::Config;
use crate::engine::Engine;
use crate::model::ObjectKey;
use crate::plugin::{
    Plugin, PluginSet, PluginSettings, PluginState, PluginStatus, Runtime, RuntimeOptions, WIT_VERSION,
};
use crate::sanitize::redact_credentials;
use crate::scaffold::{Generated, NewPlugin};
use crate::source::fs::{FsOptions, FsSource};

/// Steward keeps the world the way its resources say it should be.
#[derive(Debug, Parser)]
#[command(name = "steward", version, about)]
pub struct Cli {
    /// The host config file.
    #[arg(long, short, global = true, default_value = "steward.yaml")]
    pub config: PathBuf,
    /// The API to talk to (client commands); default: `api.listen` of the config.
    #[arg(long, global = true, env = "STEWARD_API")]
    pub api: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the host: watch the resources, reconcile them, serve the API.
    Run,
    /// Validate the config, load the plugins and validate every resource; exits 1 on any problem.
    Check,
    /// Show objects: all, one kind (`KIND`), or one object (`KIND/NAMESPACE/NAME`).
    Status {
        /// `KIND` or `KIND/NAMESPACE/NAME`.
        target: Option<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Reconcile one object now (also retries a `Failed` one).
    Trigger {
        /// `KIND/NAMESPACE/NAME`.
        target: String,
    },
    /// List the loaded plugins and their state.
    Plugins {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Enable or disable reconciling a kind.
    Kinds {
        /// `enable` or `disable`.
        #[arg(value_enum)]
        action: KindAction,
        /// The kind.
        kind: String,
    },
    /// Work with plugin files.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Generate something new.
    #[command(subcommand)]
    New(NewCommand),
    /// Print a CustomResourceDefinition (YAML) for every enabled kind, or apply them to the cluster.
    Crds {
        /// A plugin file to read (repeatable), instead of the plugins in the config's `plugin_dir`.
        #[arg(long = "plugin", value_name = "FILE.wasm")]
        plugins: Vec<PathBuf>,
        /// Create or update the CRDs in the cluster (server-side apply) instead of printing them;
        /// the cluster is the kubeconfig's current context (`KUBECONFIG`, else `~/.kube/config`) or
        /// the in-cluster config, and the right to patch CRDs (a cluster admin) is needed.
        #[arg(long)]
        apply: bool,
    },
    /// Print the RBAC objects (YAML) the host needs at run time for every enabled kind.
    Rbac {
        /// A plugin file to read (repeatable), instead of the plugins in the config's `plugin_dir`.
        #[arg(long = "plugin", value_name = "FILE.wasm")]
        plugins: Vec<PathBuf>,
        /// The namespace Steward runs in (its ServiceAccount, leader-election Role and Lease).
        #[arg(long, default_value = "steward")]
        namespace: String,
        /// The ServiceAccount the Steward pods run as.
        #[arg(long, default_value = "steward")]
        service_account: String,
        /// Name of the ClusterRole and ClusterRoleBinding (`NAME-leader-election` for the Role).
        #[arg(long, default_value = "steward")]
        name: String,
    },
}

/// `steward new ...`
#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Write a plugin crate for one kind: typed spec and status, a reconcile, a native test, a README.
    Plugin {
        /// The plugin's name (lower-case, digits and '-'); also the crate's and the directory's name.
        name: String,
        /// The kind it reconciles, CamelCase, for example `Greeting`.
        #[arg(long)]
        kind: String,
        /// The kind's API group.
        #[arg(long, default_value = "example.dev")]
        group: String,
        /// The kind's API version.
        #[arg(long, default_value = "v1alpha1")]
        version: String,
        /// The directory to create the crate in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The `sdk/` directory of a Steward checkout (default: the one this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

/// What `steward kinds` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KindAction {
    /// Reconcile the kind (queues its objects).
    Enable,
    /// Leave the kind's objects alone.
    Disable,
}

/// `steward plugin ...`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Print what a plugin describes (kinds, versions, schemas, capabilities) as JSON, without a running host.
    Inspect {
        /// The plugin file.
        file: PathBuf,
    },
    /// Load a plugin directory and report every plugin's state; exits 1 if any is failed or blocked.
    Check {
        /// The plugin directory (default: `plugin_dir` of the config).
        dir: Option<PathBuf>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Runs the command line `args` (the first is the program name), as [`main`] does with the
/// process's own; lets another binary (the benchmarks) be the host.
pub fn main_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    init_logging(&cli.command);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(command: &Command) {
    let default = match command {
        Command::Run => "info,rmcp=warn",
        // `crds --apply` reports the client's failures itself, once.
        Command::Crds { .. } => "error,kube_client=off",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(RedactedStderr)
        .try_init();
}

/// The log's writer: each event goes to stderr with credentials removed (a library's error may
/// quote a URL with a token in it). One buffer per event, written at once.
struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine(Vec::new())
    }
}

/// One log event being written.
struct RedactedLine(Vec<u8>);

impl std::io::Write for RedactedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), redact_credentials(&text).as_bytes());
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Run => run_host(&cli.config).await,
        Command::Check => check_all(&cli.config).await,
        Command::Status { target, output } => status(&client(&cli)?, target.as_deref(), *output).await,
        Command::Trigger { target } => {
            let key = parse_key(target)?;
            let v = client(&cli)?
                .post(&format!("/api/v1/resources/{}/{}/{}/reconcile", key.kind, key.namespace, key.name))
                .await?;
            println!("queued {}", v["queued"].as_str().unwrap_or(target));
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins { output } => {
            let v = client(&cli)?.get("/api/v1/plugins").await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&v)?),
                Output::Table => print_table(
                    &serde_json::from_value::<Vec<PluginStatusOwned>>(v)?
                        .into_iter()
                        .map(Into::into)
                        .collect::<Vec<_>>(),
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Kinds { action, kind } => {
            let verb = if *action == KindAction::Enable { "enable" } else { "disable" };
            client(&cli)?.post(&format!("/api/v1/kinds/{kind}/{verb}")).await?;
            println!("{kind} {verb}d");
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(PluginCommand::Inspect { file }) => inspect(file).await,
        Command::Plugin(PluginCommand::Check { dir, output }) => check(dir.clone(), &cli.config, *output).await,
        Command::New(NewCommand::Plugin { name, kind, group, version, dir, sdk }) => {
            new_plugin(name, kind, group, version, dir, sdk.as_deref())
        }
        Command::Crds { plugins, apply } => crds(plugins, &cli.config, *apply).await,
        Command::Rbac { plugins, namespace, service_account, name } => {
            let opts = crate::kubernetes::rbac::RbacOptions {
                name: name.clone(),
                namespace: namespace.clone(),
                service_account: service_account.clone(),
            };
            opts.validate()?;
            let kinds = enabled_kinds(plugins, &cli.config).await?;
            print!("{}", crate::kubernetes::rbac::rbac_yaml(&crate::kubernetes::rbac::rbac_for(&kinds, &opts)));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The kinds to serve: those `plugins` describe, or, without any, those of the plugins in the
/// config's `plugin_dir`, each narrowed by its `kinds:` in the config. A plugin that does not
/// load, and a kind two plugins describe, are errors naming the files.
async fn enabled_kinds(plugins: &[PathBuf], config: &Path) -> Result<Vec<steward_sdk::KindInfo>> {
    let (files, cfg) = if plugins.is_empty() {
        if !config.exists() {
            bail!(
                "no --plugin given and no config file {} to find the plugins in: pass --plugin FILE.wasm (repeatable) or --config FILE",
                config.display()
            );
        }
        let cfg = Config::load(config)?;
        let dir = cfg.plugin_dir.clone();
        let read = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read plugin_dir {} (set in {})", dir.display(), config.display()))?;
        let mut files: Vec<PathBuf> =
            read.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| crate::plugin::is_plugin_file(p)).collect();
        files.sort();
        if files.is_empty() {
            bail!("there are no *.wasm plugins in {} (plugin_dir of {})", dir.display(), config.display());
        }
        (files, Some(cfg))
    } else {
        (plugins.to_vec(), None)
    };
    let runtime = Runtime::new(RuntimeOptions { pooling: false, ..Default::default() })?;
    let mut loads = Vec::new();
    for file in files {
        let runtime = runtime.clone();
        let cfg = cfg.clone();
        loads.push(tokio::spawn(async move {
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read the plugin {}", file.display()))?;
            let settings = |name: &str| cfg.as_ref().map(|c| c.plugin_settings(name)).unwrap_or_default();
            let plugin = Plugin::load(runtime, &file, bytes, settings).await?;
            anyhow::Ok((file, plugin))
        }));
    }
    let mut kinds = Vec::new();
    let mut owner: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for load in loads {
        let (file, plugin) = load.await.context("a plugin load task failed")??;
        let served = crate::plugin::served_kinds(&plugin);
        if let Some(allowed) = &plugin.settings().kinds {
            for k in allowed.iter().filter(|k| !plugin.info().kinds.iter().any(|i| &i.kind == *k)) {
                eprintln!(
                    "warning: plugins.{}.kinds in {} names {k}, which {} does not describe",
                    plugin.name(),
                    config.display(),
                    file.display()
                );
            }
        }
        for k in plugin.info().kinds.iter().filter(|k| served.contains(&k.kind)) {
            if let Some(first) = owner.insert(k.kind.clone(), file.clone()) {
                bail!(
                    "kind {} is described by both {} and {}; a host serves each kind from one plugin: leave one out, or narrow one with `kinds:` under its plugins section in the config",
                    k.kind,
                    first.display(),
                    file.display()
                );
            }
            kinds.push(k.clone());
        }
    }
    Ok(kinds)
}

/// `steward crds`: prints the CRDs, or applies them with server-side apply.
async fn crds(plugins: &[PathBuf], config: &Path, apply: bool) -> Result<ExitCode> {
    let kinds = enabled_kinds(plugins, config).await?;
    let mut crds = Vec::new();
    for k in &kinds {
        crds.push(crate::kubernetes::crd::crd_for(k)?);
    }
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if apply {
        apply_crds(&crds).await?;
    } else {
        print!("{}", crate::kubernetes::crd::crd_yaml(&crds));
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates or updates `crds` with server-side apply (field manager `steward`, forced), in the
/// cluster `kube::Config::infer` finds (as `kube::Client::try_default` does): the kubeconfig's
/// current context (`KUBECONFIG`, else `~/.kube/config`), or the in-cluster config.
async fn apply_crds(
    crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};

    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot find a Kubernetes cluster to apply the CRDs to ({e}); the kubeconfig is read from KUBECONFIG, else ~/.kube/config, or the in-cluster config is used inside a pod"
        )
    })?;
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .with_context(|| format!("cannot make a client for the Kubernetes API server at {server}"))?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = PatchParams::apply(crate::kubernetes::FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(crd)).await {
            return Err(match e {
                kube::Error::Api(s) => {
                    let hint = match s.code {
                        401 => "; the kubeconfig's credentials were refused: log in to the cluster again",
                        403 => {
                            "; applying CRDs needs the right to create and patch customresourcedefinitions (a cluster admin), which Steward's runtime role does not have"
                        }
                        422 => "; the API server found the generated CRD invalid: please report this with the plugin",
                        _ => "",
                    };
                    anyhow::anyhow!(
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
                    anyhow::anyhow!(
                        "cannot reach the Kubernetes API server at {server} to apply CustomResourceDefinition {name}: {why}; the server is the current context of the kubeconfig (KUBECONFIG, else ~/.kube/config), or the in-cluster config"
                    )
                }
            });
        }
        println!("customresourcedefinition.apiextensions.k8s.io/{name} configured");
    }
    Ok(())
}

fn new_plugin(name: &str, kind: &str, group: &str, version: &str, dir: &Path, sdk: Option<&Path>) -> Result<ExitCode> {
    let generated = NewPlugin::new(name, kind, group, version)?.write(dir, sdk)?;
    let shown = generated.dir.strip_prefix(".").unwrap_or(&generated.dir).display().to_string();
    println!("created {shown}: plugin `{name}`, kind {kind} ({group}/{version})");
    println!();
    println!("test it natively, then build it:");
    println!("  cd {shown}");
    println!("  {}", Generated::TEST);
    println!("  rustup target add wasm32-wasip2    # once");
    println!("  {}", Generated::BUILD);
    println!();
    println!("then copy {} into the plugin_dir of a Steward host,", generated.artifact.display());
    println!("and {shown}/resource.yaml into its resources.");
    Ok(ExitCode::SUCCESS)
}

/// The API client for the client commands: `--api`, else the config's `api.listen`, with its token.
fn client(cli: &Cli) -> Result<Client> {
    let config = if cli.config.exists() { Some(Config::load(&cli.config)?) } else { None };
    let base = match (&cli.api, &config) {
        (Some(a), _) => a.clone(),
        (None, Some(c)) => format!("http://{}", c.api.listen),
        (None, None) => "http://127.0.0.1:7878".to_string(),
    };
    let token = match config.as_ref().and_then(|c| c.api.token_file.clone()) {
        Some(f) => Some(read_token(&f)?),
        None => std::env::var("STEWARD_TOKEN").ok(),
    };
    Ok(Client::new(&base, token))
}

fn read_token(file: &Path) -> Result<String> {
    let t =
        std::fs::read_to_string(file).with_context(|| format!("cannot read the API token file {}", file.display()))?;
    let t = t.trim().to_string();
    if t.is_empty() {
        bail!("the API token file {} is empty", file.display());
    }
    Ok(t)
}

fn parse_key(target: &str) -> Result<ObjectKey> {
    ObjectKey::parse(target).with_context(|| format!("`{target}` is not KIND/NAMESPACE/NAME"))
}

async fn run_host(config: &Path) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let token = match &cfg.api.token_file {
        Some(f) => Some(read_token(f)?),
        None => None,
    };
    let listen = cfg.api.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (api.listen)"))?;
    // The API answers /healthz (and 503 elsewhere) while plugins compile and the first scan runs.
    let slot: crate::api::EngineSlot = Default::default();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let api = tokio::spawn(
        axum::serve(listener, crate::api::router_for(slot.clone(), token))
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    let engine = tokio::select! {
        e = Engine::start(cfg) => e?,
        _ = wait_for_signal() => {
            tracing::info!("stopped during start-up");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let _ = slot.set(engine.clone());
    tracing::info!(%listen, "API listening");
    wait_for_signal().await;
    tracing::info!("shutting down: finishing running reconciles (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("second signal: exiting now");
        std::process::exit(130);
    });
    engine.shutdown(std::time::Duration::from_secs(10)).await;
    let _ = stop_tx.send(());
    let _ = api.await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn check_all(config: &Path) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cfg.cache_dir.clone()), ..Default::default() })?;
    let set = PluginSet::new(runtime, &cfg.plugin_dir, cfg.plugins.clone(), PluginSettings::default());
    let statuses =
        set.load_all().await.with_context(|| format!("cannot read plugin_dir {}", cfg.plugin_dir.display()))?;
    let mut problems = 0;
    for s in &statuses {
        if s.state != PluginState::Ready {
            problems += 1;
            println!("{}: {}", s.file, s.message.clone().unwrap_or_else(|| format!("{:?}", s.state)));
        }
    }
    if cfg.mode == crate::config::Mode::Kubernetes {
        // The objects live in the cluster, where the CRDs' schemas check them.
        return Ok(if problems == 0 {
            println!(
                "ok: {} plugins, no problems (mode: kubernetes: objects are checked by the cluster)",
                statuses.len()
            );
            ExitCode::SUCCESS
        } else {
            eprintln!("{problems} problem(s)");
            ExitCode::FAILURE
        });
    }
    let source = FsSource::new(
        FsOptions {
            dir: cfg.resources.clone(),
            debounce: cfg.queue.debounce,
            debounce_max: cfg.queue.debounce_max,
            scan_interval: cfg.resync,
        },
        Default::default(),
    );
    if !cfg.resources.is_dir() {
        bail!("resources directory {} does not exist", cfg.resources.display());
    }
    source.scan().await;
    for p in source.problems() {
        problems += 1;
        println!("{p}");
    }
    for key in source.keys() {
        let Some(obj) = source.get(&key) else { continue };
        let at = format!("{}:{}:1", obj.file, obj.line);
        match set.resolve(&key.kind) {
            Err(e) => {
                problems += 1;
                println!("{at}: {key}: {e}");
            }
            Ok(plugin) => match plugin.validate(&obj.raw).await.result {
                Ok(errs) => {
                    for e in errs {
                        problems += 1;
                        println!("{at}: {key}: {}: {}", e.path, e.message);
                    }
                }
                Err(e) => {
                    problems += 1;
                    println!("{at}: {key}: validate failed: {e}");
                }
            },
        }
    }
    if problems == 0 {
        println!("ok: {} plugins, {} objects, no problems", statuses.len(), source.len());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{problems} problem(s)");
        Ok(ExitCode::FAILURE)
    }
}

async fn status(client: &Client, target: Option<&str>, output: Output) -> Result<ExitCode> {
    if let Some(t) = target.filter(|t| t.contains('/')) {
        let key = parse_key(t)?;
        let v = client.get(&format!("/api/v1/resources/{}/{}/{}", key.kind, key.namespace, key.name)).await?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let path = match target {
        Some(kind) => format!("/api/v1/resources?kind={kind}"),
        None => "/api/v1/resources".to_string(),
    };
    let v = client.get(&path).await?;
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows =
        vec![["NAMESPACE", "KIND", "NAME", "PHASE", "GEN", "OBSERVED", "READY", "MESSAGE"].map(String::from)];
    for o in v.as_array().into_iter().flatten() {
        let ready = o["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map_or("-".to_string(), |c| c["status"].as_str().unwrap_or("-").to_string());
        let message = o["lastError"].as_str().or(o["sourceProblem"].as_str()).unwrap_or("").chars().take(80).collect();
        rows.push([
            o["namespace"].as_str().unwrap_or("").to_string(),
            o["kind"].as_str().unwrap_or("").to_string(),
            o["name"].as_str().unwrap_or("").to_string(),
            o["phase"].as_str().unwrap_or("").to_string(),
            o["generation"].to_string(),
            o["observedGeneration"].as_u64().map_or("-".into(), |g| g.to_string()),
            ready,
            message,
        ]);
    }
    print_rows(&rows);
    Ok(ExitCode::SUCCESS)
}

fn print_rows<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(&format!("{:<w$}   ", c, w = widths[i]));
        }
        println!("{}", line.trim_end());
    }
}

/// `PluginStatus` as read back from the API.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PluginStatusOwned {
    file: String,
    name: Option<String>,
    version: Option<String>,
    state: PluginState,
    kinds: Vec<String>,
    capabilities: Vec<String>,
    message: Option<String>,
}

impl From<PluginStatusOwned> for PluginStatus {
    fn from(p: PluginStatusOwned) -> Self {
        PluginStatus {
            file: p.file,
            name: p.name,
            version: p.version,
            state: p.state,
            kinds: p.kinds,
            capabilities: p.capabilities,
            warnings: Vec::new(),
            origin: None,
            message: p.message,
        }
    }
}

async fn inspect(file: &Path) -> Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runtime = Runtime::new(RuntimeOptions { pooling: false, ..Default::default() })?;
    let started = std::time::Instant::now();
    let plugin = Plugin::load(runtime, file, bytes.clone(), |_| PluginSettings::default()).await?;
    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
    let info = plugin.info();
    let kinds: Vec<serde_json::Value> = info
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "group": k.group,
                "version": k.version,
                "kind": k.kind,
                "plural": k.plural,
                "namespaced": k.namespaced,
                "resyncSeconds": k.resync_seconds,
                "specSchema": serde_json::from_str::<serde_json::Value>(&k.spec_schema).unwrap_or_default(),
            })
        })
        .collect();
    let out = serde_json::json!({
        "name": info.name,
        "version": info.version,
        "contract": format!("steward:plugin@{WIT_VERSION}"),
        "capabilities": info.capabilities,
        "kinds": kinds,
        "sizeBytes": bytes.len(),
        "loadMs": (load_ms * 10.0).round() / 10.0,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

async fn check(dir: Option<PathBuf>, config: &Path, output: Output) -> Result<ExitCode> {
    let config = if config.exists() { Config::load(config)? } else { Config::defaults(&std::env::current_dir()?) };
    let dir = dir.unwrap_or_else(|| config.plugin_dir.clone());
    if !dir.is_dir() {
        bail!("plugin directory {} does not exist", dir.display());
    }
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(config.cache_dir.clone()), ..Default::default() })?;
    let set: Arc<PluginSet> = PluginSet::new(runtime, &dir, config.plugins.clone(), PluginSettings::default());
    let statuses = set.load_all().await.with_context(|| format!("cannot read {}", dir.display()))?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&statuses)?),
        Output::Table => print_table(&statuses),
    }
    let bad = statuses.iter().any(|s| s.state != PluginState::Ready);
    if statuses.is_empty() {
        eprintln!("no *.wasm plugins in {}", dir.display());
    }
    Ok(if bad { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn print_table(statuses: &[PluginStatus]) {
    let mut rows: Vec<[String; 5]> = vec![["FILE", "NAME", "VERSION", "STATE", "KINDS"].map(String::from)];
    rows.extend(statuses.iter().map(|s| {
        [
            s.file.clone(),
            s.name.clone().unwrap_or_else(|| "-".into()),
            s.version.clone().unwrap_or_else(|| "-".into()),
            format!("{:?}", s.state),
            if s.kinds.is_empty() { "-".into() } else { s.kinds.join(",") },
        ]
    }));
    print_rows(&rows);
    for s in statuses {
        if let Some(m) = &s.message {
            println!("\n{}: {m}", s.file);
        }
    }
}
