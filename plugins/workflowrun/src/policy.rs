//! Tool policy enforcement: before the run asks the host to call a tool, it reads the
//! `EffectiveToolPolicy` of the MCPServer that serves the tool and refuses a denied call.
//!
//! The run knows nothing of how the rules were made (that is the toolpolicy plugin's business);
//! it reads only the EffectiveToolPolicy contract: an object named like the MCPServer, in the
//! server's namespace, with `spec.allow` and `spec.deny` (globs: `*` any run of characters, `?`
//! one, matched against the tool's name as the host offers it, `x_git_status`), and, for the
//! message, `spec.decidedBy.policy` and `spec.policies`. A tool is denied when it matches a
//! `deny` glob, or when `allow` is not empty and it matches none of it.
//!
//! The server of a tool: every MCPServer (in any namespace) whose status lists the tool among
//! its `tools`; when none does (a server not up yet), every MCPServer whose muster prefix makes
//! the name, `<host prefix>_<toolPrefix or name>_`. The tool is denied when any of their
//! EffectiveToolPolicies denies it. No EffectiveToolPolicy, or no server, allows it (as before
//! policies existed). The reads go through the host, so a change of a server or of its
//! EffectiveToolPolicy (or its appearance) reconciles the run again.

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use steward_sdk::{Context, RawObject};

/// The kind the run reads.
pub const EFFECTIVE_KIND: &str = "EffectiveToolPolicy";
/// The kind of the servers.
pub const SERVER_KIND: &str = "MCPServer";
/// The reason of a step (and a run) refused by a policy.
pub const TOOL_DENIED: &str = "ToolDenied";

/// Whether a call may be made: `None` when it may, else why not (a sentence naming the tool,
/// the EffectiveToolPolicy and the policies).
pub trait Gate {
    /// The refusal of a call of `tool`, if refused.
    fn denial(&self, tool: &str) -> Option<String>;
}

/// A gate that allows everything (finalizing a run, which asks for no call).
pub struct Open;

impl Gate for Open {
    fn denial(&self, _tool: &str) -> Option<String> {
        None
    }
}

/// The part of an EffectiveToolPolicy's spec the run reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rules {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    decided_by: Option<DecidedBy>,
    #[serde(default)]
    policies: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct DecidedBy {
    #[serde(default)]
    policy: String,
}

/// The gate of a reconcile: reads servers and EffectiveToolPolicies through the host, once each.
pub struct Policies<'a> {
    ctx: &'a Context<'a>,
    prefix: String,
    servers: RefCell<Option<Vec<RawObject>>>,
    decided: RefCell<BTreeMap<String, Option<String>>>,
}

impl<'a> Policies<'a> {
    /// A gate reading through `ctx`, with the host's tool prefix `prefix` (`x` by default).
    pub fn new(ctx: &'a Context<'a>, prefix: String) -> Self {
        Self { ctx, prefix, servers: RefCell::new(None), decided: RefCell::new(BTreeMap::new()) }
    }

    fn servers_of(&self, tool: &str) -> Vec<(String, String)> {
        let mut cache = self.servers.borrow_mut();
        let servers = cache.get_or_insert_with(|| self.ctx.list(SERVER_KIND, None));
        let listing = |s: &RawObject| -> bool {
            s.status
                .as_deref()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .and_then(|v| v.get("tools").and_then(Value::as_array).cloned())
                .is_some_and(|tools| tools.iter().any(|t| t.as_str() == Some(tool)))
        };
        let mut found: Vec<(String, String)> =
            servers.iter().filter(|s| listing(s)).map(|s| (s.namespace.clone(), s.name.clone())).collect();
        if found.is_empty() {
            found = servers
                .iter()
                .filter(|s| {
                    let spec: Value = serde_json::from_str(&s.spec).unwrap_or(Value::Null);
                    let prefix = spec.get("toolPrefix").and_then(Value::as_str).unwrap_or(&s.name);
                    tool.starts_with(&format!("{}_{prefix}_", self.prefix))
                })
                .map(|s| (s.namespace.clone(), s.name.clone()))
                .collect();
        }
        found
    }
}

impl Gate for Policies<'_> {
    fn denial(&self, tool: &str) -> Option<String> {
        if let Some(d) = self.decided.borrow().get(tool) {
            return d.clone();
        }
        let mut denial = None;
        for (ns, server) in self.servers_of(tool) {
            let Some(obj) = self.ctx.get(EFFECTIVE_KIND, &ns, &server) else { continue };
            let rules: Rules = match serde_json::from_str(&obj.spec) {
                Ok(r) => r,
                Err(e) => {
                    // A broken EffectiveToolPolicy is no permission: refuse rather than guess.
                    denial = Some(format!(
                        "tool {tool:?} is refused: EffectiveToolPolicy {ns}/{server} does not parse ({e})"
                    ));
                    break;
                }
            };
            if let Some(why) = refuses(&rules, tool) {
                let decided = rules.decided_by.as_ref().map(|d| d.policy.as_str()).filter(|p| !p.is_empty());
                denial = Some(format!(
                    "tool {tool:?} is denied by EffectiveToolPolicy {ns}/{server} ({why}){}{}",
                    decided.map(|p| format!("; rules of ToolPolicy {p:?}")).unwrap_or_default(),
                    if rules.policies.is_empty() {
                        String::new()
                    } else {
                        format!("; policies: {}", rules.policies.join(", "))
                    }
                ));
                break;
            }
        }
        self.decided.borrow_mut().insert(tool.to_string(), denial.clone());
        denial
    }
}

/// Why `rules` refuse `tool`, if they do.
fn refuses(rules: &Rules, tool: &str) -> Option<String> {
    if let Some(g) = rules.deny.iter().find(|g| glob(g, tool)) {
        return Some(format!("it matches deny {g:?}"));
    }
    if !rules.allow.is_empty() && !rules.allow.iter().any(|g| glob(g, tool)) {
        return Some(format!("it matches none of allow {:?}", rules.allow));
    }
    None
}

/// Whether `name` matches `pattern`: `*` any run of characters, `?` one, else itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_sdk::ObjectRef;
    use steward_sdk::testing::{FakeHost, Read, object};

    fn server(ns: &str, name: &str, spec: Value, tools: &[&str]) -> RawObject {
        let mut s = object(SERVER_KIND, name, spec);
        s.namespace = ns.into();
        if !tools.is_empty() {
            s.status = Some(json!({"tools": tools}).to_string());
        }
        s
    }

    fn effective(ns: &str, name: &str, spec: Value) -> RawObject {
        let mut e = object(EFFECTIVE_KIND, name, spec);
        e.namespace = ns.into();
        e
    }

    #[test]
    fn globs() {
        assert!(glob("x_git_*", "x_git_push") && !glob("x_git_*", "x_kube_pods") && glob("*_delete", "x_a_delete"));
        assert!(glob("x_?it_log", "x_git_log") && !glob("push", "x_git_push"));
    }

    #[test]
    fn the_server_listing_the_tool_decides_and_the_message_names_the_policies() {
        let host = FakeHost::new()
            .with(server("team", "git", json!({"type": "stdio", "command": "g"}), &["x_git_push", "x_git_status"]))
            .with(effective(
                "team",
                "git",
                json!({"target": {"kind": "MCPServer", "name": "git"}, "deny": ["x_git_push"],
                       "decidedBy": {"policy": "lock"}, "policies": ["srv", "lock"]}),
            ));
        let ctx = Context::new(&host, &[]);
        let gate = Policies::new(&ctx, "x".into());
        assert_eq!(gate.denial("x_git_status"), None);
        let msg = gate.denial("x_git_push").unwrap();
        assert!(msg.contains("\"x_git_push\"") && msg.contains("EffectiveToolPolicy team/git"), "{msg}");
        assert!(msg.contains("ToolPolicy \"lock\"") && msg.contains("policies: srv, lock"), "{msg}");
        assert!(host.reads().contains(&Read::Get(ObjectRef::new(EFFECTIVE_KIND, "team", "git"))));
        let lists = host.reads().iter().filter(|r| matches!(r, Read::List { .. })).count();
        assert_eq!(lists, 1, "the servers are listed once per reconcile");
    }

    #[test]
    fn a_server_not_up_yet_is_found_by_its_prefix() {
        let host = FakeHost::new()
            .with(server("team", "kube", json!({"type": "stdio", "command": "k", "toolPrefix": "k8s"}), &[]))
            .with(effective("team", "kube", json!({"allow": ["x_k8s_get_*"]})));
        let ctx = Context::new(&host, &[]);
        let gate = Policies::new(&ctx, "x".into());
        assert_eq!(gate.denial("x_k8s_get_pods"), None);
        let msg = gate.denial("x_k8s_delete_pod").unwrap();
        assert!(msg.contains("none of allow"), "{msg}");
        assert_eq!(Policies::new(&ctx, "m".into()).denial("x_k8s_delete_pod"), None, "another host prefix");
    }

    #[test]
    fn no_policy_or_no_server_allows_and_a_broken_policy_refuses() {
        let host = FakeHost::new().with(server("team", "git", json!({}), &["x_git_push"]));
        let ctx = Context::new(&host, &[]);
        assert_eq!(Policies::new(&ctx, "x".into()).denial("x_git_push"), None);
        assert_eq!(Policies::new(&ctx, "x".into()).denial("workflow_other"), None);
        assert!(
            host.reads().contains(&Read::Get(ObjectRef::new(EFFECTIVE_KIND, "team", "git"))),
            "its appearance wakes the run"
        );
        host.insert(effective("team", "git", json!({"deny": "not a list"})));
        let msg = Policies::new(&ctx, "x".into()).denial("x_git_push").unwrap();
        assert!(msg.contains("does not parse"), "{msg}");
    }
}
