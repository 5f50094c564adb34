//! muster's tool meta-tools: `list_tools`, `describe_tool`, `list_core_tools`, `filter_tools` and `call_tool`, with its names, arguments and result shapes.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Map, Value, json};

use super::filter::{self, Item, Options};
use super::{Ctx, Group, refusal};
use crate::mcp::catalog::{self, Catalog, Target};

/// The group of the tool meta-tools.
pub struct ToolsGroup;

/// `list_tools`.
pub const LIST_TOOLS: &str = "list_tools";
/// `describe_tool`.
pub const DESCRIBE_TOOL: &str = "describe_tool";
/// `list_core_tools`.
pub const LIST_CORE_TOOLS: &str = "list_core_tools";
/// `filter_tools`.
pub const FILTER_TOOLS: &str = "filter_tools";
/// `call_tool`.
pub const CALL_TOOL: &str = "call_tool";

#[async_trait::async_trait]
impl Group for ToolsGroup {
    fn tools(&self) -> Vec<Tool> {
        let s = |d: &str| json!({"type": "string", "description": d});
        let b = |d: &str, default: bool| json!({"type": "boolean", "description": d, "default": default});
        vec![
            tool(
                LIST_TOOLS,
                "Lists every tool this endpoint can call for you (name and description): the tools of the namespace's MCPServers (x_<server>_<tool>), its Workflows (workflow_<name>) and Steward's core_* tools.",
                json!({}),
                &[],
            ),
            tool(
                DESCRIBE_TOOL,
                "Describes one tool: its whole description and the JSON Schema of its arguments.",
                json!({"name": s("The tool's name, as list_tools or filter_tools give it.")}),
                &["name"],
            ),
            tool(
                LIST_CORE_TOOLS,
                "Lists Steward's own core_* tools (what the host manages, apart from the MCP servers' tools), with their descriptions and argument schemas.",
                json!({"include_schema": b("Whether each tool comes with the JSON Schema of its arguments (default true).", true)}),
                &[],
            ),
            tool(
                FILTER_TOOLS,
                "Finds tools cheaply: by name pattern, description words or labels, optionally ranked by a question in plain words, one short page at a time. Each tool comes with a one-line summary; describe_tool gives the whole of the one you pick.",
                json!({
                    "pattern": s("Shell pattern the tool's name must match, for example x_github_* (* any run of characters, ? one character)."),
                    "description_filter": s("Text the tool's description must contain."),
                    "query": s("A question in plain words: matching tools come best first, each with a score; tools that match no word are left out."),
                    "labels": {"type": "object", "description": "Labels the tool must all carry, as key/value pairs (a Workflow's labels), for example {\"category\": \"delivery\"}."},
                    "case_sensitive": b("Whether pattern and description_filter tell upper from lower case (default false).", false),
                    "include_schema": b("Whether each tool comes with its whole description and argument schema instead of a summary (default false).", false),
                    "limit": {"type": "number", "description": "The most tools in this page (default 5); page on with offset.", "default": filter::DEFAULT_LIMIT},
                    "offset": {"type": "number", "description": "How many matching tools to skip before this page (default 0).", "default": 0},
                }),
                &[],
            ),
            tool(
                CALL_TOOL,
                "Calls a tool by name with its arguments. The answer is the tool's whole result as JSON text ({\"isError\", \"content\", \"structuredContent\"}); isError is the tool's own.",
                json!({
                    "name": s("The tool's name, as list_tools or filter_tools give it."),
                    "arguments": {"type": "object", "description": "The tool's arguments, as a JSON object."},
                }),
                &["name"],
            ),
        ]
    }

    async fn call(&self, name: &str, args: &JsonObject, ctx: &Ctx<'_>) -> Option<CallToolResult> {
        let answer = match name {
            LIST_TOOLS => Ok(list_tools(&catalog::build(ctx.engine, ctx.namespace))),
            DESCRIBE_TOOL => describe_tool(ctx.engine, &catalog::build(ctx.engine, ctx.namespace), args),
            LIST_CORE_TOOLS => run_filter(ctx, &Options::core(args)),
            FILTER_TOOLS => Options::from_args(args).and_then(|o| run_filter(ctx, &o)),
            CALL_TOOL => return Some(call_tool(ctx, args).await),
            _ => return None,
        };
        Some(match answer {
            Ok(v) => text(&v),
            Err(words) => CallToolResult::error(vec![ContentBlock::text(words)]),
        })
    }
}

fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    Tool::new(name, description, Arc::new(schema))
}

/// A result whose one text block is `v` as indented JSON, as muster answers.
fn text(v: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(serde_json::to_string_pretty(v).unwrap_or_default())])
}

fn description(t: &Tool) -> String {
    t.description.as_deref().unwrap_or_default().to_string()
}

/// `{"tools": [{"name", "description"}]}`.
fn list_tools(offered: &Catalog) -> Value {
    let tools: Vec<Value> =
        offered.entries.iter().map(|e| json!({"name": e.name(), "description": description(&e.tool)})).collect();
    json!({ "tools": tools })
}

/// `{"name", "description", "inputSchema"}`, the tool's `annotations` when it has any, and
/// the fields its server gave that rmcp does not model (its `execution`).
fn describe_tool(engine: &crate::engine::Engine, offered: &Catalog, args: &JsonObject) -> Result<Value, String> {
    let name = args.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let Some(name) = name else { return Err("the name argument is required: the tool to describe".into()) };
    let Some(entry) = offered.get(name) else {
        return Err(format!(
            "no tool {name} in namespace {}: list_tools or filter_tools name the tools offered",
            offered.namespace
        ));
    };
    let mut v = json!({
        "name": name,
        "description": description(&entry.tool),
        "inputSchema": Value::Object((*entry.tool.input_schema).clone()),
    });
    if let Some(a) = &entry.tool.annotations {
        v["annotations"] = serde_json::to_value(a).unwrap_or_default();
    }
    if let (Some(fields), Some(extras)) = (v.as_object_mut(), catalog::extras(engine, entry)) {
        for (k, x) in extras {
            fields.entry(k).or_insert(x);
        }
    }
    Ok(v)
}

/// The filter over the namespace's tools, each Workflow's tool labelled with its object's labels.
fn run_filter(ctx: &Ctx<'_>, options: &Options) -> Result<Value, String> {
    let offered = catalog::build(ctx.engine, ctx.namespace);
    let items: Vec<Item> = offered
        .entries
        .iter()
        .map(|e| Item {
            name: e.name().to_string(),
            description: description(&e.tool),
            input_schema: Value::Object((*e.tool.input_schema).clone()),
            labels: match &e.target {
                Target::Workflow(key) => ctx.engine.cached(key).map(|o| o.raw.labels).unwrap_or_default(),
                _ => Default::default(),
            },
        })
        .collect();
    filter::run(&items, options)
}

/// `call_tool`: the named tool called as the client's own `tools/call` would be (guard,
/// routing, progress, cancellation), its whole result wrapped as muster wraps it; a refusal of
/// the guard or a failure to reach the tool is `call_tool`'s own error, in words.
async fn call_tool(ctx: &Ctx<'_>, args: &JsonObject) -> CallToolResult {
    let Some(name) = args.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return CallToolResult::error(vec![ContentBlock::text("the name argument is required: the tool to call")]);
    };
    let arguments = match args.get("arguments") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return CallToolResult::error(vec![ContentBlock::text("the arguments argument must be a JSON object")]);
        }
    };
    // A refused call never reached the tool: the refusal is call_tool's own error, not wrapped.
    if let Some(refused) = refusal(ctx, name) {
        return CallToolResult::error(vec![ContentBlock::text(refused)]);
    }
    match ctx.route.route(name, arguments).await {
        Ok(result) => wrap(result),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("{name} failed: {}", e.message))]),
    }
}

/// A called tool's result as `call_tool` answers it, as muster does: one text block holding
/// `{"isError", "content", "structuredContent"}` as JSON (an image's or audio's data there
/// replaced by its `dataSize`), with the tool's `isError` and `structuredContent` on the result
/// itself too. Steward also keeps the tool's `_meta` on the result, and adds the tool's image
/// and audio blocks after the text whole, so that nothing the tool gave is lost.
pub fn wrap(result: CallToolResult) -> CallToolResult {
    let is_error = result.is_error == Some(true);
    let mut binary = Vec::new();
    let content: Vec<Value> = result
        .content
        .iter()
        .map(|block| {
            let v = serde_json::to_value(block).unwrap_or_default();
            match v["type"].as_str() {
                Some(kind @ ("image" | "audio")) => {
                    binary.push(block.clone());
                    json!({"type": kind, "mimeType": v["mimeType"], "dataSize": v["data"].as_str().map_or(0, str::len)})
                }
                _ => v,
            }
        })
        .collect();
    let mut envelope = json!({"isError": is_error, "content": content});
    if let Some(s) = &result.structured_content {
        envelope["structuredContent"] = s.clone();
    }
    let mut blocks = vec![ContentBlock::text(envelope.to_string())];
    blocks.extend(binary);
    let mut out = if is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
    out.structured_content = result.structured_content;
    out.meta = result.meta;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_tool_keeps_the_whole_result() {
        let mut inner =
            CallToolResult::success(vec![ContentBlock::text("hello"), ContentBlock::image("aGVsbG8=", "image/png")]);
        inner.structured_content = Some(json!({"n": 1}));
        let out = wrap(inner.clone());
        assert_eq!(out.is_error, Some(false));
        assert_eq!(out.structured_content, Some(json!({"n": 1})));
        let blocks = serde_json::to_value(&out.content).unwrap();
        let envelope: Value = serde_json::from_str(blocks[0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            envelope,
            json!({
                "isError": false,
                "content": [{"type": "text", "text": "hello"}, {"type": "image", "mimeType": "image/png", "dataSize": 8}],
                "structuredContent": {"n": 1},
            })
        );
        assert_eq!(blocks[1], serde_json::to_value(&inner.content[1]).unwrap(), "the image itself follows");

        let failed = wrap(CallToolResult::error(vec![ContentBlock::text("no")]));
        assert_eq!(failed.is_error, Some(true));
        let envelope: Value =
            serde_json::from_str(serde_json::to_value(&failed.content).unwrap()[0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(envelope, json!({"isError": true, "content": [{"type": "text", "text": "no"}]}));
    }

    #[test]
    fn the_meta_tools_are_musters() {
        let names: Vec<String> = ToolsGroup.tools().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["list_tools", "describe_tool", "list_core_tools", "filter_tools", "call_tool"]);
        let filter = &ToolsGroup.tools()[3];
        let props = filter.input_schema["properties"].as_object().unwrap();
        let args: Vec<&str> = props.keys().map(String::as_str).collect();
        for a in
            ["pattern", "description_filter", "query", "labels", "case_sensitive", "include_schema", "limit", "offset"]
        {
            assert!(args.contains(&a), "{a} in {args:?}");
        }
        assert_eq!(ToolsGroup.tools()[4].input_schema["required"], json!(["name"]));
    }
}
