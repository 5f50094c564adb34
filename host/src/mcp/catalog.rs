//! The tools the host offers in one namespace: MCP servers' tools under muster's names, `workflow_<name>`, and `core_*`.

use std::collections::BTreeSet;
use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::{Map, Value, json};
use steward_sdk::ConditionStatus;

use super::core;
use crate::engine::{Engine, ResourceView};
use crate::model::ObjectKey;

/// The kind whose objects become `workflow_<name>` tools.
pub const WORKFLOW_KIND: &str = "Workflow";

/// The prefix of the tool that runs a Workflow.
pub const WORKFLOW_PREFIX: &str = "workflow_";

/// Where a call of one offered tool goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A tool of an object's live MCP session.
    Server {
        /// The object that owns the service (an MCPServer).
        owner: ObjectKey,
        /// The service's name among the owner's.
        service: String,
        /// The tool's name on the server.
        tool: String,
    },
    /// A Workflow of the namespace, run as a WorkflowRun.
    Workflow(ObjectKey),
    /// One of the host's management tools.
    Core(core::CoreTool),
}

/// One offered tool.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The tool as clients see it: the exposed name, description, input schema (and, for a
    /// server's tool, its title, annotations and output schema as the server gave them).
    pub tool: Tool,
    /// Where a call goes.
    pub target: Target,
}

impl Entry {
    /// The exposed name.
    pub fn name(&self) -> &str {
        &self.tool.name
    }
}

/// The tools of one namespace, sorted by name, each name once.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// The namespace.
    pub namespace: String,
    /// The tools.
    pub entries: Vec<Entry>,
}

impl Catalog {
    /// The tool named `name`, if offered.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.binary_search_by(|e| e.name().cmp(name)).ok().map(|i| &self.entries[i])
    }

    /// The names, sorted.
    pub fn names(&self) -> BTreeSet<String> {
        self.entries.iter().map(|e| e.name().to_string()).collect()
    }
}

/// What `engine` offers in `namespace` now. Never fails: an object that cannot be read offers nothing.
///
/// A server's tools are offered while its object reports `state` `Running` or `Connected` and
/// `health` `Healthy`, under the names its status lists in `tools`, each mapped back to a tool
/// of the object's live session ([`real_tool`]); a listed name with no such tool is left out.
/// `workflow_<name>` is offered for each Workflow of the namespace whose `Ready` condition is
/// true. On a clash of names, core tools win over server tools, which win over workflows.
pub fn build(engine: &Engine, namespace: &str) -> Catalog {
    let mut entries: Vec<Entry> = core::tools(engine.config().api.mcp.management);
    entries.extend(server_tools(engine, namespace));
    entries.extend(workflow_tools(engine, namespace));
    let mut seen = BTreeSet::new();
    entries.retain(|e| seen.insert(e.name().to_string()));
    entries.sort_by(|a, b| a.name().cmp(b.name()));
    Catalog { namespace: namespace.to_string(), entries }
}

/// The fields of `entry`'s tool that rmcp's `Tool` does not model (a server tool's
/// `execution`), as its server listed them; `None` for a tool of the host's or a tool with none.
pub fn extras(engine: &Engine, entry: &Entry) -> Option<JsonObject> {
    let Target::Server { owner, service, tool } = &entry.target else { return None };
    engine.units().services().session(owner, service)?.tool_extras(tool)
}

/// `tool` as a client sees it: its JSON with `extras` added (a field it has already wins).
pub fn shown(tool: &Tool, extras: Option<JsonObject>) -> Value {
    let mut v = serde_json::to_value(tool).unwrap_or_else(|_| json!({"name": tool.name}));
    if let (Some(fields), Some(extras)) = (v.as_object_mut(), extras) {
        for (k, x) in extras {
            fields.entry(k).or_insert(x);
        }
    }
    v
}

/// Whether an object's status says its tools are usable: `Running`/`Connected` and `Healthy`.
pub fn offers_tools(status: &Value) -> bool {
    matches!(status["state"].as_str(), Some("Running" | "Connected")) && status["health"] == "Healthy"
}

fn server_tools(engine: &Engine, namespace: &str) -> Vec<Entry> {
    let services = engine.units().services();
    let mut out = Vec::new();
    for owner in services.owners().into_iter().filter(|o| o.namespace() == namespace) {
        let Some(status) = engine.view(&owner).and_then(|v| v.status) else { continue };
        if !offers_tools(&status) {
            continue;
        }
        let exposed: Vec<&str> =
            status["tools"].as_array().map(|t| t.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let sessions: Vec<(String, crate::services::LiveSession)> = services
            .observed(&owner)
            .into_iter()
            .filter_map(|s| services.session(&owner, &s.name).map(|live| (s.name, live)))
            .collect();
        for name in exposed {
            let best = sessions
                .iter()
                .filter_map(|(service, live)| {
                    let t = real_tool(name, live.tools.iter().map(|t| t.name.as_ref()))?;
                    Some((service, live.tool(t)?))
                })
                .max_by_key(|(_, t)| t.name.len());
            let Some((service, tool)) = best else { continue };
            let mut offered = tool.clone();
            offered.name = name.to_string().into();
            out.push(Entry {
                tool: offered,
                target: Target::Server { owner: owner.clone(), service: service.clone(), tool: tool.name.to_string() },
            });
        }
    }
    out
}

/// The server tool that the exposed name `exposed` stands for among `tools`: the longest `t`
/// that `exposed` ends with (muster's `x_<prefix>_t`, `x_t` when `t` starts with `<prefix>_`,
/// or the plain `<prefix>t`). `None` when no tool fits. The host's prefix (`x`, or
/// `api.mcp.prefix`) is already in the names the object's status lists, so this needs none.
pub fn real_tool<'a>(exposed: &str, tools: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    tools.into_iter().filter(|t| !t.is_empty() && exposed.ends_with(t)).max_by_key(|t| t.len())
}

fn workflow_tools(engine: &Engine, namespace: &str) -> Vec<Entry> {
    engine
        .views(Some(WORKFLOW_KIND))
        .into_iter()
        .filter(|v| v.namespace == namespace && workflow_ready(v))
        .filter_map(|v| {
            let key = ObjectKey::new(&v.kind, &v.namespace, &v.name);
            let spec: Value = serde_json::from_str(&engine.cached(&key)?.raw.spec).ok()?;
            Some(Entry { tool: workflow_tool(&v.name, &spec), target: Target::Workflow(key) })
        })
        .collect()
}

/// Whether a Workflow can run: its `Ready` condition is true (every tool it calls is offered)
/// and it is not being deleted.
pub fn workflow_ready(view: &ResourceView) -> bool {
    !view.deleting && view.conditions.iter().any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
}

/// The `workflow_<name>` tool of a Workflow with `spec`: its description, and an input schema
/// made of its `args` (type, description, default, required).
pub fn workflow_tool(name: &str, spec: &Value) -> Tool {
    let description = spec["description"]
        .as_str()
        .filter(|d| !d.trim().is_empty())
        .map_or_else(|| format!("Runs the workflow {name}."), str::to_string);
    Tool::new(format!("{WORKFLOW_PREFIX}{name}"), description, Arc::new(args_schema(&spec["args"])))
}

/// The JSON Schema of a Workflow's `args`: an object with one property per argument; an
/// argument of an unknown type accepts anything.
pub fn args_schema(args: &Value) -> JsonObject {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (arg, decl) in args.as_object().into_iter().flatten() {
        let mut prop = Map::new();
        if let Some(t) = decl["type"].as_str().filter(|t| TYPES.contains(t)) {
            prop.insert("type".into(), json!(t));
        }
        if let Some(d) = decl["description"].as_str() {
            prop.insert("description".into(), json!(d));
        }
        if let Some(d) = decl.get("default").filter(|d| !d.is_null()) {
            prop.insert("default".into(), d.clone());
        }
        if decl["required"] == true {
            required.push(json!(arg));
        }
        properties.insert(arg.clone(), Value::Object(prop));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema
}

const TYPES: &[&str] = &["string", "number", "integer", "boolean", "object", "array"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_map_back_to_the_longest_fitting_tool() {
        let tools = ["status", "us", "log", "github_search", "search", "a_b"];
        let table: &[(&str, Option<&str>)] = &[
            ("x_git_status", Some("status")),
            ("x_git_log", Some("log")),
            // muster does not repeat the prefix: x_github_search stands for github_search.
            ("x_github_search", Some("github_search")),
            ("x_other_search", Some("search")),
            // plain naming: <toolPrefix><tool>, no separator.
            ("ghstatus", Some("status")),
            ("status", Some("status")),
            ("x_fam_a_b", Some("a_b")),
            ("x_git_diff", None),
            ("", None),
        ];
        for (exposed, want) in table {
            assert_eq!(real_tool(exposed, tools), *want, "{exposed}");
        }
        assert_eq!(real_tool("x_git_status", [""]), None, "an empty tool name fits nothing");
    }

    #[test]
    fn a_server_offers_tools_only_running_or_connected_and_healthy() {
        let table = [
            (json!({"state": "Running", "health": "Healthy"}), true),
            (json!({"state": "Connected", "health": "Healthy"}), true),
            (json!({"state": "Running", "health": "Unhealthy"}), false),
            (json!({"state": "Starting", "health": "Healthy"}), false),
            (json!({"state": "Failed"}), false),
            (json!({}), false),
            (json!("Running"), false),
        ];
        for (status, want) in table {
            assert_eq!(offers_tools(&status), want, "{status}");
        }
    }

    #[test]
    fn a_workflow_schema_comes_from_its_args() {
        let spec = json!({
            "description": "Deploys an app.",
            "args": {
                "app": {"type": "string", "required": true, "description": "The app."},
                "replicas": {"type": "integer", "default": 2},
                "odd": {"type": "tuple"},
            },
            "steps": [],
        });
        let tool = workflow_tool("deploy", &spec);
        assert_eq!(tool.name, "workflow_deploy");
        assert_eq!(tool.description.as_deref(), Some("Deploys an app."));
        assert_eq!(
            Value::Object((*tool.input_schema).clone()),
            json!({
                "type": "object",
                "properties": {
                    "app": {"type": "string", "description": "The app."},
                    "odd": {},
                    "replicas": {"type": "integer", "default": 2},
                },
                "required": ["app"],
            })
        );
        let bare = workflow_tool("w", &json!({"steps": []}));
        assert_eq!(bare.description.as_deref(), Some("Runs the workflow w."));
        assert_eq!(Value::Object((*bare.input_schema).clone()), json!({"type": "object", "properties": {}}));
    }
}
