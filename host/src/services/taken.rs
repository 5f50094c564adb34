//! What the host keeps of a server's tool list: every text of each tool with the service's secret values redacted, and no tool whose name carries one.
//!
//! A tool's name is how a caller asks for it; a name with a secret value in it cannot be
//! shown, and a redacted name would call nothing (or the wrong tool). Such a tool is left out
//! (not in the status, not offered at `/mcp`, not callable by a Workflow), and the service
//! says so in a notice.

use rmcp::model::Tool;

use super::redact::Redactor;

/// `tools` as the host may store and show them, and the notice to give when tools were left
/// out. Descriptions, titles, schemas, annotations and metadata have each secret value
/// replaced; a tool whose name carries one, or that no longer reads as a tool once redacted,
/// is left out.
pub(crate) fn clean_tools(tools: Vec<Tool>, redactor: &Redactor) -> (Vec<Tool>, Option<String>) {
    if redactor.is_empty() {
        return (tools, None);
    }
    let mut left_out = Vec::new();
    let mut kept = Vec::with_capacity(tools.len());
    for tool in tools {
        if redactor.found_in(&tool.name) {
            left_out.push(redactor.text(&tool.name).into_owned());
            continue;
        }
        let Ok(mut value) = serde_json::to_value(&tool) else {
            left_out.push(tool.name.to_string());
            continue;
        };
        if !redactor.json(&mut value) {
            kept.push(tool);
            continue;
        }
        match serde_json::from_value::<Tool>(value) {
            Ok(clean) => kept.push(clean),
            Err(_) => left_out.push(tool.name.to_string()),
        }
    }
    let notice = (!left_out.is_empty()).then(|| {
        let names: Vec<String> = left_out.iter().map(|n| format!("`{n}`")).collect();
        format!(
            "tools not offered: {} (a tool's name or definition carries a secret value of this service, which \
             Steward never shows; rename the tool on the server)",
            names.join(", ")
        )
    });
    (kept, notice)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str) -> Tool {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string", "description": description}}});
        Tool::new(name.to_string(), description.to_string(), Arc::new(schema.as_object().unwrap().clone()))
    }

    #[test]
    fn a_tool_named_with_a_secret_is_left_out_and_the_others_lose_it() {
        let values = ["sk-live-42".to_string()];
        let r = Redactor::new(&values);
        let (kept, notice) = clean_tools(
            vec![tool("echo", "echoes; key sk-live-42"), tool("get_sk-live-42", "x"), tool("plain", "plain")],
            &r,
        );
        let names: Vec<&str> = kept.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["echo", "plain"]);
        let text = serde_json::to_string(&kept).unwrap();
        assert!(!text.contains("sk-live-42") && text.contains("echoes; key <redacted>"), "{text}");
        assert_eq!(kept[0].input_schema["properties"]["q"]["description"], "echoes; key <redacted>");
        let notice = notice.unwrap();
        assert!(notice.contains("`get_<redacted>`") && !notice.contains("sk-live-42"), "{notice}");

        let (all, none) = clean_tools(vec![tool("echo", "x")], &Redactor::default());
        assert_eq!((all.len(), none), (1, None));
    }
}
