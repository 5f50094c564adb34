//! The `steward` command line: the arguments, and one module per command.

mod check;
mod client;
mod crds;
mod kinds;
mod logging;
mod new;
mod plugin;
mod plugin_oci;
mod plugin_test;
mod plugins;
mod rbac;
mod run;
mod served;
mod status;
mod table;
mod trigger;
mod webhook;
mod workflow;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

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
    /// The log's format: `text` (for people) or `json` (one object per line); default: the
    /// config's `log.format` for `run`, else `text`.
    #[arg(long, global = true, env = "STEWARD_LOG_FORMAT", value_name = "text|json")]
    pub log_format: Option<crate::config::LogFormat>,
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
    /// Warnings (`file:line:column: warning: ...`) do not change the exit code unless `--strict`.
    Check {
        /// Exit 1 when there are warnings too.
        #[arg(long)]
        strict: bool,
    },
    /// Show objects: all, one kind (`KIND`), or one object (`KIND/NAMESPACE/NAME`).
    Status {
        /// `KIND` or `KIND/NAMESPACE/NAME`.
        target: Option<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Work with workflows: run one (`steward workflow run NAME --arg KEY=VALUE --wait`).
    #[command(subcommand)]
    Workflow(WorkflowCommand),
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
    /// Work with plugin files and plugins in OCI registries.
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
    /// Print the ValidatingWebhookConfiguration (YAML) of the admission webhook the config
    /// describes (`kubernetes.webhook`) for every enabled kind, or apply it to the cluster.
    Webhook {
        /// A plugin file to read (repeatable), instead of the plugins in the config's `plugin_dir`.
        #[arg(long = "plugin", value_name = "FILE.wasm")]
        plugins: Vec<PathBuf>,
        /// Create or update it in the cluster (server-side apply), creating the self-managed
        /// certificate's Secret first when there is none; needs the right to patch
        /// validatingwebhookconfigurations (and to create Secrets in the webhook's namespace).
        #[arg(long)]
        apply: bool,
    },
}

/// `steward workflow ...`
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Start a WorkflowRun of the Workflow NAME; with --wait, follow it to its end, print its
    /// output and exit 0 only if it succeeded.
    Run {
        /// The Workflow's name.
        name: String,
        /// An argument, `KEY=VALUE` (repeatable); VALUE is JSON (`3`, `true`, `[1,2]`) unless
        /// the Workflow declares KEY a string or VALUE is not JSON.
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// The namespace of the Workflow and the run.
        #[arg(long, short, default_value = "default")]
        namespace: String,
        /// End the run as Failed if it has not ended after this long (`30s`, `10m`).
        #[arg(long)]
        timeout: Option<String>,
        /// Follow the run to its end and print its output.
        #[arg(long)]
        wait: bool,
        /// With --wait: delete the run once it ended (its output is printed; its steps are gone).
        #[arg(long, requires = "wait")]
        rm: bool,
        /// Output format of the result.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// `steward new ...`
#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Write a plugin for one kind: spec and status, validate and reconcile, scenarios to test the
    /// built component with, a sample resource and a README; in Rust (a crate on the SDK, with a
    /// native test) or Python (componentize-py).
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
        /// The SDK to build on: the `sdk/` (Rust) or `sdk-ts/` (TypeScript) directory of a Steward
        /// checkout (default: the one of the checkout this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
        /// The plugin's language.
        #[arg(long, value_enum, default_value_t = crate::scaffold::Lang::Rust)]
        lang: crate::scaffold::Lang,
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
        /// The plugin file, or an `oci://registry/repository:tag` (or `@sha256:…`) reference.
        file: PathBuf,
        /// For a reference: verify its cosign signature with this PEM public key.
        #[arg(long, value_name = "KEY.pub")]
        key: Option<PathBuf>,
        /// How to reach the registry.
        #[command(flatten)]
        registry: plugin_oci::RegistryArgs,
    },
    /// Push a plugin to a registry as a Wasm OCI artifact (annotated with its name, version and
    /// kinds); prints the pushed `oci://…@sha256:…` reference.
    Push {
        /// The plugin file.
        file: PathBuf,
        /// Where to: `oci://registry/repository:tag`.
        reference: String,
        /// How to reach the registry.
        #[command(flatten)]
        registry: plugin_oci::RegistryArgs,
    },
    /// Pull a plugin from a registry (media types, digests and, with --key, its signature
    /// checked) and write its component; prints the `oci://…@sha256:…` reference pulled.
    Pull {
        /// `oci://registry/repository:tag` or `oci://registry/repository@sha256:…`.
        reference: String,
        /// The file to write (default: `NAME.wasm` in the current directory).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Verify its cosign signature with this PEM public key.
        #[arg(long, value_name = "KEY.pub")]
        key: Option<PathBuf>,
        /// How to reach the registry.
        #[command(flatten)]
        registry: plugin_oci::RegistryArgs,
    },
    /// Sign a plugin in a registry with a PEM ECDSA P-256 private key, as `cosign sign --key`
    /// does (`cosign verify --key` reads the signature); prints the signed digest reference.
    Sign {
        /// `oci://registry/repository:tag` (signed at the digest it points to) or `…@sha256:…`.
        reference: String,
        /// The private key (PKCS#8 or SEC1 PEM, unencrypted).
        #[arg(long, value_name = "KEY.pem")]
        key: PathBuf,
        /// Write a Sigstore bundle attached as an OCI referrer, as cosign v3 does, instead of
        /// the `sha256-<hex>.sig` tag.
        #[arg(long)]
        bundle: bool,
        /// How to reach the registry.
        #[command(flatten)]
        registry: plugin_oci::RegistryArgs,
    },
    /// Run scenario files (YAML: an object, what the host answers, the expected outcome) against
    /// a plugin with the host's runtime and limits; prints a diff for each scenario that fails and
    /// exits 1 if any does. See docs/plugins.md, "Testing a plugin against scenarios".
    Test {
        /// The plugin file (`.wasm`), in any language.
        file: PathBuf,
        /// Scenario files.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Output format: `table` prints a line per scenario, `json` every outcome in full.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
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

/// Caps glibc's malloc arenas at one per core (glibc's default is eight per core). Every
/// worker thread that allocates gets an arena of its own, and memory freed in one arena is not
/// reused by another: with many objects that costs a tenth of the resident set, for no speed a
/// host with one worker per core can measure. `MALLOC_ARENA_MAX`, when set, wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        // SAFETY: mallopt only sets an allocator parameter; it runs before the host starts threads.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(cores).unwrap_or(i32::MAX));
        }
    }
}

/// How long the process waits, once a command is done, for work left on the runtime's blocking
/// pool before it exits anyway.
const RUNTIME_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// A command that prints and exits ends quietly when its reader goes away (`steward status |
/// head`), as other command-line tools do: SIGPIPE gets its default action back for every command
/// but `run`, a server whose closed sockets must not end it.
fn default_sigpipe(command: &Command) {
    #[cfg(unix)]
    if !matches!(command, Command::Run) {
        // SAFETY: sets the disposition of one signal to its default, before any other thread runs
        // code of ours; no handler of ours is replaced.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Runs the command line `args` (the first is the program name), as [`main`] does with the
/// process's own; lets another binary (the benchmarks) be the host.
pub fn main_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse_from(args);
    default_sigpipe(&cli.command);
    let format = logging::format(&cli);
    let telemetry = match logging::init(&cli) {
        Ok(t) => t,
        Err(e) => {
            logging::fatal(format, &e.to_string());
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            logging::fatal(format, &format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let code = match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            logging::fatal(format, &format!("{e:#}"));
            ExitCode::FAILURE
        }
    };
    // Outside the runtime: the exporter's last batch is sent before the process exits. Work
    // left on the blocking pool (a file read, a name lookup) gets a bounded time, so the exit
    // stays within the bound `steward run` documents (crate::host::SHUTDOWN_LIMIT).
    rt.shutdown_timeout(RUNTIME_DRAIN);
    telemetry.shutdown();
    code
}

/// Runs the command `cli` names.
async fn dispatch(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Run => run::run(&cli.config).await,
        Command::Check { strict } => check::check(&cli.config, *strict).await,
        Command::Status { target, output } => status::status(&client::connect(&cli)?, target.as_deref(), *output).await,
        Command::Workflow(WorkflowCommand::Run { name, args, namespace, timeout, wait, rm, output }) => {
            let how = workflow::How { wait: *wait, rm: *rm, output: *output };
            workflow::run(&client::connect(&cli)?, name, namespace, args, timeout.as_deref(), how).await
        }
        Command::Trigger { target } => trigger::trigger(&client::connect(&cli)?, target).await,
        Command::Plugins { output } => plugins::plugins(&client::connect(&cli)?, *output).await,
        Command::Kinds { action, kind } => kinds::kinds(&client::connect(&cli)?, *action, kind).await,
        Command::Plugin(PluginCommand::Inspect { file, key, registry }) => {
            plugin::inspect(file, key.as_deref(), registry).await
        }
        Command::Plugin(PluginCommand::Push { file, reference, registry }) => {
            plugin_oci::push(file, reference, registry).await
        }
        Command::Plugin(PluginCommand::Pull { reference, output, key, registry }) => {
            plugin_oci::pull(reference, output.as_deref(), key.as_deref(), registry).await
        }
        Command::Plugin(PluginCommand::Sign { reference, key, bundle, registry }) => {
            plugin_oci::sign(reference, key, *bundle, registry).await
        }
        Command::Plugin(PluginCommand::Test { file, scenarios, output }) => {
            plugin_test::test(file, scenarios, *output).await
        }
        Command::Plugin(PluginCommand::Check { dir, output }) => plugin::check(dir.clone(), &cli.config, *output).await,
        Command::New(NewCommand::Plugin { name, kind, group, version, dir, sdk, lang }) => {
            new::plugin(&crate::scaffold::NewPlugin::in_lang(name, kind, group, version, *lang)?, dir, sdk.as_deref())
        }
        Command::Crds { plugins, apply } => crds::crds(plugins, &cli.config, *apply).await,
        Command::Rbac { plugins, namespace, service_account, name } => {
            rbac::rbac(plugins, &cli.config, namespace, service_account, name).await
        }
        Command::Webhook { plugins, apply } => webhook::webhook(plugins, &cli.config, *apply).await,
    }
}
