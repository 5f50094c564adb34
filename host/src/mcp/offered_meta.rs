//! muster's meta-tools for prompts and resources: `list_prompts`, `describe_prompt`, `get_prompt`, `list_resources`, `describe_resource`, `get_resource`, with muster's arguments and result texts.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Prompt, Resource, Tool};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{prompts, resources};
use crate::engine::Engine;

/// The names of the six meta-tools, in muster's order.
pub const NAMES: [&str; 6] =
    ["list_resources", "describe_resource", "get_resource", "list_prompts", "describe_prompt", "get_prompt"];

/// The six meta-tools' definitions (name, description, input schema), in muster's order.
pub fn tools() -> Vec<Tool> {
    let uri = |what: &str| arg("uri", "string", &format!("URI of the resource to {what}"), true);
    let name = |what: &str| arg("name", "string", &format!("Name of the prompt to {what}"), true);
    vec![
        tool("list_resources", "List all available resources from connected MCP servers", vec![]),
        tool("describe_resource", "Get detailed information about a specific resource", vec![uri("describe")]),
        tool("get_resource", "Retrieve the contents of a resource", vec![uri("retrieve")]),
        tool("list_prompts", "List all available prompts from connected MCP servers", vec![]),
        tool("describe_prompt", "Get detailed information about a specific prompt", vec![name("describe")]),
        tool(
            "get_prompt",
            "Get a prompt with the given arguments",
            vec![
                name("get"),
                arg(
                    "arguments",
                    "object",
                    "Arguments to pass to the prompt (as JSON object with string values)",
                    false,
                ),
            ],
        ),
    ]
}

fn arg(name: &str, kind: &str, description: &str, required: bool) -> (String, Value, bool) {
    (name.to_string(), json!({"type": kind, "description": description}), required)
}

fn tool(name: &str, description: &str, args: Vec<(String, Value, bool)>) -> Tool {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (n, schema, req) in args {
        if req {
            required.push(Value::String(n.clone()));
        }
        properties.insert(n, schema);
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

/// Runs the meta-tool `name` with `args` for a client of `namespace`; `None` when `name` is not
/// one of [`NAMES`]. As muster's, every failure is a result with `isError` and a message.
pub async fn call(
    engine: &Engine,
    namespace: &str,
    name: &str,
    args: &JsonObject,
    cancel: CancellationToken,
) -> Option<CallToolResult> {
    Some(match name {
        "list_prompts" => list_prompts(engine, namespace),
        "describe_prompt" => describe_prompt(engine, namespace, args),
        "get_prompt" => get_prompt(engine, namespace, args, cancel).await,
        "list_resources" => list_resources(engine, namespace),
        "describe_resource" => describe_resource(engine, namespace, args),
        "get_resource" => get_resource(engine, namespace, args, cancel).await,
        _ => return None,
    })
}

fn text(t: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

fn error(t: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(t)])
}

fn pretty<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// `list_prompts`: each prompt's name and description, or `No prompts available`.
pub fn list_prompts(engine: &Engine, namespace: &str) -> CallToolResult {
    text(format_prompts(&prompts::list(engine, namespace).into_iter().map(|e| e.prompt).collect::<Vec<_>>()))
}

fn format_prompts(prompts: &[Prompt]) -> String {
    if prompts.is_empty() {
        return "No prompts available".into();
    }
    #[derive(Serialize)]
    struct Info<'a> {
        name: &'a str,
        description: &'a str,
    }
    let list: Vec<Info> = prompts
        .iter()
        .map(|p| Info { name: &p.name, description: p.description.as_deref().unwrap_or_default() })
        .collect();
    pretty(&list)
}

/// `describe_prompt` (`name`): the prompt's name, description and arguments.
pub fn describe_prompt(engine: &Engine, namespace: &str, args: &JsonObject) -> CallToolResult {
    let Some(name) = args.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return error("name argument is required".into());
    };
    match prompts::list(engine, namespace).into_iter().find(|e| e.prompt.name == name) {
        Some(e) => text(format_prompt(&e.prompt)),
        None => error(format!("Prompt not found: {name}")),
    }
}

fn format_prompt(p: &Prompt) -> String {
    let mut info = Map::new();
    info.insert("name".into(), json!(p.name));
    info.insert("description".into(), json!(p.description.as_deref().unwrap_or_default()));
    if let Some(args) = p.arguments.as_ref().filter(|a| !a.is_empty()) {
        let args: Vec<Value> = args
            .iter()
            .map(|a| {
                json!({
                    "name": a.name,
                    "description": a.description.as_deref().unwrap_or_default(),
                    "required": a.required.unwrap_or(false),
                })
            })
            .collect();
        info.insert("arguments".into(), Value::Array(args));
    }
    pretty(&sorted(Value::Object(info)))
}

/// `get_prompt` (`name`, `arguments`): the prompt's messages, each its role and its content
/// (text whole; an image's or audio's type and size; an embedded resource's contents).
pub async fn get_prompt(
    engine: &Engine,
    namespace: &str,
    args: &JsonObject,
    cancel: CancellationToken,
) -> CallToolResult {
    let Some(name) = args.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return error("name argument is required".into());
    };
    let arguments = match args.get("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => {
            // The values go as strings, as muster sends them.
            Some(m.iter().map(|(k, v)| (k.clone(), Value::String(as_string(v)))).collect::<JsonObject>())
        }
        Some(_) => return error("arguments must be a JSON object".into()),
    };
    match prompts::get(engine, namespace, name, arguments, cancel).await {
        Ok(r) => text(format_messages(&r.messages)),
        Err(e) => error(format!("Prompt retrieval failed: {}", e.message)),
    }
}

fn as_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn format_messages(messages: &[rmcp::model::PromptMessage]) -> String {
    #[derive(Serialize)]
    struct Message {
        role: Value,
        content: Value,
    }
    let list: Vec<Message> = messages
        .iter()
        .map(|m| {
            let content = serde_json::to_value(&m.content).unwrap_or(Value::Null);
            let size = |c: &Value| c["data"].as_str().map_or(0, str::len);
            let content = match content["type"].as_str() {
                Some("text") => json!({"type": "text", "text": content["text"]}),
                Some(kind @ ("image" | "audio")) => {
                    json!({"type": kind, "mimeType": content["mimeType"], "dataSize": size(&content)})
                }
                Some("resource") => json!({"type": "embeddedResource", "resource": content["resource"]}),
                _ => content,
            };
            Message { role: serde_json::to_value(&m.role).unwrap_or(Value::Null), content: sorted(content) }
        })
        .collect();
    pretty(&list)
}

/// `list_resources`: each resource's URI, name, description (its name when it has none) and
/// MIME type, or `No resources available`.
pub fn list_resources(engine: &Engine, namespace: &str) -> CallToolResult {
    let listing = resources::list(engine, namespace);
    text(format_resources(&listing.resources.into_iter().map(|e| e.item).collect::<Vec<_>>()))
}

fn format_resources(resources: &[Resource]) -> String {
    if resources.is_empty() {
        return "No resources available".into();
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Info<'a> {
        uri: &'a str,
        name: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        description: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        mime_type: &'a str,
    }
    let list: Vec<Info> = resources
        .iter()
        .map(|r| Info {
            uri: &r.uri,
            name: &r.name,
            description: r.description.as_deref().filter(|d| !d.is_empty()).unwrap_or(&r.name),
            mime_type: r.mime_type.as_deref().unwrap_or_default(),
        })
        .collect();
    pretty(&list)
}

/// `describe_resource` (`uri`): the resource's URI, name, description and MIME type.
pub fn describe_resource(engine: &Engine, namespace: &str, args: &JsonObject) -> CallToolResult {
    let Some(uri) = args.get("uri").and_then(Value::as_str).filter(|u| !u.is_empty()) else {
        return error("uri argument is required".into());
    };
    match resources::list(engine, namespace).resources.into_iter().find(|e| e.item.uri == uri) {
        Some(e) => text(format_resource(&e.item)),
        None => error(format!("Resource not found: {uri}")),
    }
}

fn format_resource(r: &Resource) -> String {
    pretty(&json!({
        "uri": r.uri,
        "name": r.name,
        "description": r.description.as_deref().unwrap_or_default(),
        "mimeType": r.mime_type.as_deref().unwrap_or_default(),
    }))
}

/// `get_resource` (`uri`): the text of each content, a binary one as `[Binary data: N bytes]`
/// (N the length of its base64 text), one a line.
pub async fn get_resource(
    engine: &Engine,
    namespace: &str,
    args: &JsonObject,
    cancel: CancellationToken,
) -> CallToolResult {
    let Some(uri) = args.get("uri").and_then(Value::as_str).filter(|u| !u.is_empty()) else {
        return error("uri argument is required".into());
    };
    match resources::read(engine, namespace, uri, cancel).await {
        Ok(r) => text(format_contents(&r.contents)),
        Err(e) => error(format!("Resource retrieval failed: {}", e.message)),
    }
}

fn format_contents(contents: &[rmcp::model::ResourceContents]) -> String {
    let parts: Vec<String> = contents
        .iter()
        .filter_map(|c| {
            let v = serde_json::to_value(c).ok()?;
            if let Some(t) = v["text"].as_str() {
                return Some(t.to_string());
            }
            v["blob"].as_str().map(|b| format!("[Binary data: {} bytes]", b.len()))
        })
        .collect();
    parts.join("\n")
}

/// `v` with the keys of each object sorted, as muster's maps are written.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definitions_are_musters() {
        let tools = tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, NAMES);
        let get = &tools[5];
        assert_eq!(
            Value::Object((*get.input_schema).clone()),
            json!({"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "description": "Name of the prompt to get"},
                "arguments": {"type": "object", "description": "Arguments to pass to the prompt (as JSON object with string values)"},
            }})
        );
        assert_eq!(Value::Object((*tools[0].input_schema).clone()), json!({"type": "object", "properties": {}}));
    }

    #[test]
    fn lists_and_details_read_as_musters() {
        assert_eq!(format_prompts(&[]), "No prompts available");
        assert_eq!(format_resources(&[]), "No resources available");
        let p: Prompt =
            serde_json::from_value(json!({"name": "x_ev_args-prompt", "description": "A prompt with arguments",
            "arguments": [{"name": "city", "description": "City", "required": true}, {"name": "state"}]}))
            .unwrap();
        let listed: Value = serde_json::from_str(&format_prompts(std::slice::from_ref(&p))).unwrap();
        assert_eq!(listed, json!([{"name": "x_ev_args-prompt", "description": "A prompt with arguments"}]));
        assert_eq!(
            format_prompt(&p),
            "{\n  \"arguments\": [\n    {\n      \"description\": \"City\",\n      \"name\": \"city\",\n      \"required\": true\n    },\n    {\n      \"description\": \"\",\n      \"name\": \"state\",\n      \"required\": false\n    }\n  ],\n  \"description\": \"A prompt with arguments\",\n  \"name\": \"x_ev_args-prompt\"\n}"
        );
        let r: Resource =
            serde_json::from_value(json!({"uri": "demo://a", "name": "a", "mimeType": "text/plain"})).unwrap();
        let listed: Value = serde_json::from_str(&format_resources(std::slice::from_ref(&r))).unwrap();
        assert_eq!(listed, json!([{"uri": "demo://a", "name": "a", "description": "a", "mimeType": "text/plain"}]));
        assert_eq!(
            serde_json::from_str::<Value>(&format_resource(&r)).unwrap(),
            json!({"description": "", "mimeType": "text/plain", "name": "a", "uri": "demo://a"})
        );
    }

    #[test]
    fn messages_and_contents_read_as_musters() {
        let messages: Vec<rmcp::model::PromptMessage> = serde_json::from_value(json!([
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {"role": "assistant", "content": {"type": "image", "data": "QUJD", "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "demo://a", "text": "t"}}},
        ]))
        .unwrap();
        let got: Value = serde_json::from_str(&format_messages(&messages)).unwrap();
        assert_eq!(
            got,
            json!([
                {"role": "user", "content": {"text": "hi", "type": "text"}},
                {"role": "assistant", "content": {"dataSize": 4, "mimeType": "image/png", "type": "image"}},
                {"role": "user", "content": {"resource": {"text": "t", "uri": "demo://a"}, "type": "embeddedResource"}},
            ])
        );
        let contents: Vec<rmcp::model::ResourceContents> = serde_json::from_value(json!([
            {"uri": "demo://a", "text": "one"},
            {"uri": "demo://b", "blob": "AAAA"},
        ]))
        .unwrap();
        assert_eq!(format_contents(&contents), "one\n[Binary data: 4 bytes]");
        assert_eq!(as_string(&json!(3)), "3");
        assert_eq!(as_string(&json!("s")), "s");
    }
}
