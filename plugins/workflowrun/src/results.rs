//! How a finished tool call becomes a step's result (`.results.<id>`) or its error, as muster reads it.

use serde_json::{Value, json};
use steward_sdk::{CallRecord, CallState};

/// How one call ended, as the run sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    /// The tool answered without `isError`; its parsed answer.
    Succeeded(Value),
    /// The tool answered with `isError` (or the host recorded a failed answer): the parsed
    /// answer and its text, which is the error.
    ErrorResult(Value, String),
    /// No answer: every attempt failed, the host refused the call, or it was cancelled.
    NoResult(String),
}

impl Ended {
    /// How `call` ended, or `None` while it has not.
    pub fn of(call: &CallRecord) -> Option<Self> {
        if !call.state.is_final() {
            return None;
        }
        let answered = call.result.as_ref();
        Some(match (call.state, answered) {
            (CallState::Succeeded, Some(r)) if !is_error(r) => Self::Succeeded(parse(r)),
            (CallState::Succeeded, None) => Self::Succeeded(Value::Null),
            (CallState::Cancelled, _) => {
                Self::NoResult(call.error.clone().unwrap_or_else(|| "the call was cancelled".to_string()))
            }
            (_, Some(r)) => {
                let text =
                    text(r).or_else(|| call.error.clone()).unwrap_or_else(|| "the tool reported an error".into());
                Self::ErrorResult(parse(r), text)
            }
            (_, None) => Self::NoResult(call.error.clone().unwrap_or_else(|| "the call failed".to_string())),
        })
    }
}

/// Whether an MCP `CallToolResult` says `isError: true`.
pub fn is_error(result: &Value) -> bool {
    result.get("isError").and_then(Value::as_bool).unwrap_or(false)
}

/// The text of the first content item, when it is text.
pub fn text(result: &Value) -> Option<String> {
    let first = result.get("content")?.as_array()?.first()?;
    (first.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| first.get("text")?.as_str().map(str::to_string))?
}

/// The result as muster stores it: the first text content parsed as JSON, or the text itself
/// when it is not JSON; without text content, `structuredContent` when there is one; else null.
pub fn parse(result: &Value) -> Value {
    match text(result) {
        Some(t) => serde_json::from_str(&t).unwrap_or(Value::String(t)),
        None => result.get("structuredContent").cloned().unwrap_or(Value::Null),
    }
}

/// What muster records for a failed step that has no usable result (or one allowed to fail).
pub fn failure_value(error: &str) -> Value {
    json!({"success": false, "isError": true, "error": error})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(state: CallState, result: Option<Value>, error: Option<&str>) -> CallRecord {
        CallRecord {
            id: "c".into(),
            tool: "t".into(),
            state,
            attempts: 1,
            result,
            truncated: false,
            error: error.map(str::to_string),
            started_at: None,
            finished_at: None,
        }
    }

    fn answer(text: &str, is_error: bool) -> Value {
        json!({"content": [{"type": "text", "text": text}], "isError": is_error})
    }

    #[test]
    fn text_is_parsed_as_json_when_it_is_json() {
        assert_eq!(parse(&answer(r#"{"a": [1]}"#, false)), json!({"a": [1]}));
        assert_eq!(parse(&answer("42", false)), json!(42));
        assert_eq!(parse(&answer("hello", false)), json!("hello"));
        assert_eq!(parse(&json!({"content": [], "structuredContent": {"x": 1}})), json!({"x": 1}));
        assert_eq!(parse(&json!({"content": [{"type": "image", "data": "..."}]})), Value::Null);
    }

    #[test]
    fn ends_are_told_apart() {
        assert_eq!(Ended::of(&call(CallState::Running, None, None)), None);
        assert_eq!(
            Ended::of(&call(CallState::Succeeded, Some(answer("1", false)), None)),
            Some(Ended::Succeeded(json!(1)))
        );
        assert_eq!(
            Ended::of(&call(CallState::Failed, Some(answer("boom", true)), None)),
            Some(Ended::ErrorResult(json!("boom"), "boom".into()))
        );
        assert_eq!(
            Ended::of(&call(CallState::Succeeded, Some(answer("{\"e\":1}", true)), None)),
            Some(Ended::ErrorResult(json!({"e": 1}), "{\"e\":1}".into())),
            "isError wins over the state"
        );
        assert_eq!(Ended::of(&call(CallState::Failed, None, Some("refused"))), Some(Ended::NoResult("refused".into())));
        assert_eq!(
            Ended::of(&call(CallState::Cancelled, None, None)),
            Some(Ended::NoResult("the call was cancelled".into()))
        );
    }
}
