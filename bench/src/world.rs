//! The `world` scenario (in process): one round of the bundled `toolpolicy` world over a
//! realistic world of N objects, beside N per-object reconciles of the same size.
//!
//! The world ([`toolpolicy_world`]) is mostly MCPServers over four namespaces, labelled by team,
//! app (50 servers each) and tier; one MCPServerGroup per app, selecting its production servers
//! (about 25) in its namespace; and one ToolPolicy per 10 servers: one per namespace (overrides), one
//! per group for up to a quarter of them (defaults), the rest on single servers (defaults). Its
//! figures:
//!
//! - `objects` (the objects generated, N) and `nodes` (the topology's, namespace nodes
//!   included), `servers`, `groups`, `policies`, `edges`;
//! - `topology_ms`: the median over the rounds of the host's [`topology::build`] with the
//!   plugin's own [`WorldSpec`];
//! - `round_ms_median` (and every round in `round_ms_all`): the wall time of
//!   [`Plugin::reconcile_world`] over that topology, a fresh instance per round, every own object
//!   a target with empty inputs and no host reads (`NoReads`); `plugin_cpu_ms`: the median of
//!   the call's CPU time (its report's `cpu`);
//! - `bytes`: the topology's size as its bounds count it ([`topology::size_of`] over the nodes);
//!   `rss_growth_mib`: the process's VmRSS after the rounds less before them (the world and
//!   its topology already built, the plugin loaded), and `rss_mib` after them;
//! - `outcomes` and `children`: what the last round answered (every outcome must be a success,
//!   or the scenario fails), the children being the EffectiveToolPolicies it asked for;
//! - `per_object_calls`, `per_object_total_ms`, `per_object_median_us`: the per-object
//!   reconciles of the same objects, N fresh `mcpserver` reconcile calls (one per object of the
//!   world, taking its MCPServers in turn, each running and healthy), as the engine makes them
//!   object by object; `round_vs_per_object`: `round_ms_median` over `per_object_total_ms`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use steward::capabilities::{CHILDREN, ChildrenSettings, ObservedServices};
use steward::model::ObjectKey;
use steward::plugin::{HostReads, Inputs, NoReads, Plugin, PluginSettings, ReconcileRequest, RoundRequest, Runtime};
use steward::world::topology::{self, Bounds};
use steward::world::{Topology, WorldSpec, changes};
use steward_sdk::RawObject;

use crate::child::ProcStats;
use crate::inproc::{build_one, healthy_services};
use crate::{median_ms, round};

/// The apiVersion of every object of the world.
const API_VERSION: &str = "steward.dev/v1alpha1";
/// The namespaces the world's objects live in.
const NAMESPACES: &[&str] = &["team-a", "team-b", "team-c", "team-d"];
/// Servers per app label (about half of them `tier: prod`); one MCPServerGroup per app.
const SERVERS_PER_APP: usize = 50;
/// The rounds measured at each size (after one unmeasured warm-up round).
const ROUNDS: usize = 5;

/// `world N`: the figures of the module docs for a world of `n` objects.
pub async fn world(n: usize) -> Result<serde_json::Value> {
    anyhow::ensure!(n >= 100, "a world of {n} objects is too small to hold servers, groups and policies");
    let objects = toolpolicy_world(n);
    let count = |kind: &str| objects.iter().filter(|o| o.kind == kind).count();
    let (servers, groups, policies) = (count("MCPServer"), count("MCPServerGroup"), count("ToolPolicy"));

    let runtime = Runtime::new(steward::plugin::RuntimeOptions::default())?;
    let wasm = build_one("toolpolicy")?;
    let bytes = std::fs::read(&wasm)?;
    let plugin = Plugin::load(runtime.clone(), &wasm, bytes, |_: &str| world_settings()).await?;
    let spec: WorldSpec = plugin.world().cloned().context("toolpolicy describes no world")?;
    let bounds = Bounds { objects: usize::MAX, bytes: u64::MAX };
    let own: Vec<ObjectKey> = objects
        .iter()
        .filter(|o| spec.own.contains(&o.kind))
        .map(|o| ObjectKey::new(&o.kind, &o.namespace, &o.name))
        .collect();
    let added = changes::between(&changes::Fingerprints::new(), &changes::fingerprints(&objects));

    let mut topology_times = Vec::with_capacity(ROUNDS);
    let mut topology = Topology::default();
    for _ in 0..ROUNDS {
        let input = objects.clone();
        let t = Instant::now();
        topology = topology::build(&spec, input, bounds).context("building the topology")?;
        topology_times.push(t.elapsed());
    }
    let topology_bytes: u64 = topology.nodes.iter().map(topology::size_of).sum();

    let reads: Arc<dyn HostReads> = Arc::new(NoReads);
    let round_request = || RoundRequest {
        changes: added.clone(),
        first: true,
        topology: topology.clone(),
        targets: own.iter().map(|k| (k.clone(), Inputs::default())).collect(),
    };
    // One unmeasured round: the first call compiles lazily-touched code paths and grows the heap.
    plugin.reconcile_world(round_request(), reads.clone()).await.result.context("the warm-up round")?;
    let rss_before = ProcStats::of(std::process::id())?.rss_mib;
    let mut round_times = Vec::with_capacity(ROUNDS);
    let mut cpu = Vec::with_capacity(ROUNDS);
    let mut last = None;
    for _ in 0..ROUNDS {
        let req = round_request();
        let report = plugin.reconcile_world(req, reads.clone()).await;
        round_times.push(report.elapsed);
        cpu.push(report.cpu);
        last = Some(report.result.context("a round")?);
    }
    let rss_after = ProcStats::of(std::process::id())?.rss_mib;
    let answer = last.context("no round ran")?;
    let mut children = 0;
    for (key, outcome) in &answer.outcomes {
        match outcome {
            Ok(o) => children += o.children.as_ref().map_or(0, Vec::len),
            Err(e) => bail!("the round answered an error for {key}: {e}"),
        }
    }
    anyhow::ensure!(
        answer.outcomes.len() == own.len(),
        "the round answered for {} of its {} own objects",
        answer.outcomes.len(),
        own.len()
    );

    let per_object = per_object_calls(&runtime, &objects, n).await?;
    let per_object_total: Duration = per_object.iter().sum();
    let round_median = median_ms(&round_times);
    let per_object_total_ms = per_object_total.as_secs_f64() * 1e3;
    Ok(json!({
        "scenario": "world",
        "objects": n,
        "nodes": topology.nodes.len(),
        "servers": servers,
        "groups": groups,
        "policies": policies,
        "edges": topology.edges.len(),
        "rounds": ROUNDS,
        "topology_ms": median_ms(&topology_times),
        "round_ms_median": round_median,
        "round_ms_all": round_times.iter().map(|d| round(d.as_secs_f64() * 1e3)).collect::<Vec<_>>(),
        "plugin_cpu_ms": median_ms(&cpu),
        "bytes": topology_bytes,
        "rss_growth_mib": round(rss_after - rss_before),
        "rss_mib": round(rss_after),
        "outcomes": answer.outcomes.len(),
        "children": children,
        "per_object_calls": per_object.len(),
        "per_object_total_ms": round(per_object_total_ms),
        "per_object_median_us": round(crate::percentiles(per_object).0),
        "round_vs_per_object": round(round_median / per_object_total_ms),
    }))
}

/// The settings of the toolpolicy plugin in the bench: `children` granted for
/// EffectiveToolPolicies (without it a round that asks for children fails), and limits
/// generous enough for a world of 10,000 objects.
fn world_settings() -> PluginSettings {
    let mut s = PluginSettings { capabilities: vec![CHILDREN.to_string()], ..Default::default() };
    s.sections.insert(CHILDREN, ChildrenSettings { kinds: vec![format!("{API_VERSION}/EffectiveToolPolicy")] });
    s.limits.world_objects = 1_000_000;
    s.limits.world_bytes = 1 << 30;
    s.limits.memory = 512 * 1024 * 1024;
    s.limits.timeout = Duration::from_secs(60);
    s
}

/// `n` fresh `mcpserver` reconciles, one per object of the world, over its MCPServers in turn
/// (each running and healthy); the wall time of each call.
async fn per_object_calls(runtime: &Arc<Runtime>, world: &[RawObject], n: usize) -> Result<Vec<Duration>> {
    let wasm = build_one("mcpserver")?;
    let bytes = std::fs::read(&wasm)?;
    let settings = |_: &str| PluginSettings { capabilities: vec!["services".into()], ..Default::default() };
    let plugin = Plugin::load(runtime.clone(), &wasm, bytes, settings).await?;
    let requests: Vec<ReconcileRequest> = world
        .iter()
        .filter(|o| o.kind == "MCPServer")
        .map(|o| ReconcileRequest {
            resource: o.clone(),
            inputs: Inputs::default().with(ObservedServices(healthy_services())),
        })
        .collect();
    anyhow::ensure!(!requests.is_empty(), "the world holds no MCPServer");
    let reads: Arc<dyn HostReads> = Arc::new(NoReads);
    let mut times = Vec::with_capacity(n);
    for req in requests.iter().cycle().take(n) {
        let report = plugin.reconcile(req, reads.clone()).await;
        report
            .result
            .with_context(|| format!("reconciling MCPServer {}/{}", req.resource.namespace, req.resource.name))?;
        times.push(report.elapsed);
    }
    Ok(times)
}

/// A world of `n` objects for toolpolicy (servers, groups and policies as the module docs say),
/// each with a status as the host would hand it over.
pub fn toolpolicy_world(n: usize) -> Vec<RawObject> {
    let servers = n * 100 / 112;
    // A multiple of the namespaces, so that each app lives in one namespace.
    let apps = (servers / SERVERS_PER_APP).next_multiple_of(NAMESPACES.len()).max(NAMESPACES.len());
    let groups = apps;
    let policies = n - servers - groups;
    let object = |kind: &str, namespace: &str, name: String| RawObject {
        api_version: API_VERSION.into(),
        kind: kind.into(),
        name,
        namespace: namespace.into(),
        generation: 1,
        ..RawObject::default()
    };
    let mut out = Vec::with_capacity(n);
    // Server i: namespace i % 4, app i % apps (so an app lives in one namespace), tier by i / apps.
    for i in 0..servers {
        let ns = NAMESPACES[i % NAMESPACES.len()];
        let app = format!("app-{:03}", i % apps);
        let tier = if (i / apps).is_multiple_of(2) { "prod" } else { "dev" };
        let mut s = object("MCPServer", ns, format!("srv-{i:05}"));
        s.labels = BTreeMap::from([
            ("app".to_string(), app.clone()),
            ("tier".to_string(), tier.to_string()),
            ("team".to_string(), ns.to_string()),
        ]);
        s.spec = json!({
            "type": "stdio", "command": "mcp-server", "args": ["--app", app], "env": {"LOG": "info"},
            "autoStart": true, "toolPrefix": format!("{}_", app.replace('-', "")), "timeout": 30
        })
        .to_string();
        s.status = Some(
            json!({"type": "stdio", "state": "Running", "health": "Healthy", "restartCount": 0,
                   "consecutiveFailures": 0, "tools": ["log", "status", "diff"]})
            .to_string(),
        );
        out.push(s);
    }
    // Group g: the production servers of app g (about 25), in that app's namespace.
    let group_names: Vec<(String, &str)> = (0..groups)
        .map(|g| {
            let ns = NAMESPACES[g % NAMESPACES.len()];
            let mut o = object("MCPServerGroup", ns, format!("grp-{g:04}"));
            o.spec = json!({"selector": {"matchLabels": {"app": format!("app-{g:03}"), "tier": "prod"}},
                            "requiredTools": ["status"]})
            .to_string();
            o.status = Some(json!({"members": [], "ready": true}).to_string());
            let name = o.name.clone();
            out.push(o);
            (name, ns)
        })
        .collect();
    // Policies: one per namespace, then up to a quarter on groups, the rest on single servers.
    let on_namespaces = NAMESPACES.len().min(policies);
    let on_groups = (policies / 4).min(groups).min(policies - on_namespaces);
    let on_servers = policies - on_namespaces - on_groups;
    let policy = |ns: &str, name: String, kind: &str, target: &str, rules: serde_json::Value| {
        let mut o = object("ToolPolicy", ns, name);
        let mut spec = json!({"targetRef": {"kind": kind, "name": target}});
        spec.as_object_mut().expect("an object").extend(rules.as_object().expect("an object").clone());
        o.spec = spec.to_string();
        o
    };
    for ns in &NAMESPACES[..on_namespaces] {
        out.push(policy(
            ns,
            format!("ns-{ns}"),
            "Namespace",
            ns,
            json!({"overrides": {"deny": ["*_delete", "*_drop"]}}),
        ));
    }
    for (g, (group, ns)) in group_names.iter().take(on_groups).enumerate() {
        out.push(policy(
            ns,
            format!("grp-pol-{g:04}"),
            "MCPServerGroup",
            group,
            json!({"defaults": {"allow": ["*_status", "*_log"], "deny": ["*_push"]}}),
        ));
    }
    for k in 0..on_servers {
        let i = k * servers / on_servers.max(1);
        let ns = NAMESPACES[i % NAMESPACES.len()];
        out.push(policy(
            ns,
            format!("srv-pol-{k:05}"),
            "MCPServer",
            &format!("srv-{i:05}"),
            json!({"defaults": {"allow": ["*"], "deny": [format!("app{:03}_diff", i % apps)]}}),
        ));
    }
    out
}
