//! The checks of an MCPServer beyond what its type enforces, each reported with its field path.

use steward_sdk::FieldError;

use crate::names::dns1123_subdomain_problem;
use crate::spec::{MAX_TIMEOUT_SECONDS, McpServerSpec, ServerType};
use crate::url::http_url_problem;

/// Every problem of the object named `name` with `spec`; empty when it is valid.
pub fn validate(name: &str, spec: &McpServerSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(problem) = dns1123_subdomain_problem(name) {
        errs.push(FieldError::new("metadata.name", format!("the name {problem}")));
    }
    let ty = spec.type_.as_str();
    if spec.type_ == ServerType::Stdio {
        if spec.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
            errs.push(FieldError::new("spec.command", "a stdio server needs a command: the program to run"));
        }
        if spec.url.is_some() {
            errs.push(FieldError::new(
                "spec.url",
                "a stdio server takes no url; use type streamable-http or sse for a remote server",
            ));
        }
        if !spec.headers.is_empty() {
            errs.push(FieldError::new(
                "spec.headers",
                "a stdio server takes no headers; set environment variables with spec.env",
            ));
        }
    } else {
        match spec.url.as_deref() {
            None => errs.push(FieldError::new(
                "spec.url",
                format!("a {ty} server needs a url: its http:// or https:// endpoint"),
            )),
            Some(url) => {
                if let Some(problem) = http_url_problem(url) {
                    errs.push(FieldError::new("spec.url", format!("the url {problem}")));
                }
            }
        }
        for (field, given) in
            [("command", spec.command.is_some()), ("args", !spec.args.is_empty()), ("env", !spec.env.is_empty())]
        {
            if given {
                errs.push(FieldError::new(
                    format!("spec.{field}"),
                    format!("a {ty} server takes no {field}: it is a remote endpoint, not a process Steward starts"),
                ));
            }
        }
    }
    if spec.timeout == 0 {
        errs.push(FieldError::new("spec.timeout", "must be at least 1 second"));
    } else if spec.timeout > MAX_TIMEOUT_SECONDS {
        errs.push(FieldError::new(
            "spec.timeout",
            format!("must be at most {MAX_TIMEOUT_SECONDS} seconds (one hour), not {}", spec.timeout),
        ));
    }
    if let Some(prefix) = &spec.tool_prefix {
        let mut chars = prefix.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            errs.push(FieldError::new(
                "spec.toolPrefix",
                "must start with a letter and hold only letters, digits, '_' and '-'",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::{object, validate};

    use crate::McpServer;

    fn paths(name: &str, spec: serde_json::Value) -> Vec<String> {
        validate::<McpServer>(&object("MCPServer", name, spec)).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn valid_stdio_and_remote_servers_pass() {
        assert!(paths("git", json!({"type": "stdio", "command": "git-mcp", "args": ["--ro"]})).is_empty());
        assert!(paths("api", json!({"type": "streamable-http", "url": "https://api.example.com/mcp"})).is_empty());
        assert!(
            paths("events", json!({"type": "sse", "url": "http://localhost:9000/sse", "headers": {"A": "b"}}))
                .is_empty()
        );
    }

    #[test]
    fn stdio_without_command_is_rejected_at_spec_command() {
        assert_eq!(paths("git", json!({"type": "stdio"})), ["spec.command"]);
        assert_eq!(paths("git", json!({"type": "stdio", "command": "  "})), ["spec.command"]);
    }

    #[test]
    fn remote_without_or_with_bad_url_is_rejected_at_spec_url() {
        assert_eq!(paths("api", json!({"type": "sse"})), ["spec.url"]);
        let errs =
            validate::<McpServer>(&object("MCPServer", "api", json!({"type": "streamable-http", "url": "ftp://x"})));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "spec.url");
        assert!(errs[0].message.contains("http or https"), "{}", errs[0].message);
        assert_eq!(paths("api", json!({"type": "sse", "url": "https://"})), ["spec.url"]);
    }

    #[test]
    fn fields_of_the_other_transport_are_rejected() {
        assert_eq!(
            paths("git", json!({"type": "stdio", "command": "x", "url": "https://a.example", "headers": {"A": "b"}})),
            ["spec.url", "spec.headers"]
        );
        assert_eq!(
            paths(
                "api",
                json!({"type": "sse", "url": "https://a.example", "command": "x", "args": ["y"], "env": {"K": "v"}})
            ),
            ["spec.command", "spec.args", "spec.env"]
        );
    }

    #[test]
    fn timeout_must_be_between_one_second_and_one_hour() {
        let base = |t: i64| json!({"type": "stdio", "command": "x", "timeout": t});
        assert_eq!(paths("git", base(0)), ["spec.timeout"]);
        assert_eq!(paths("git", base(3601)), ["spec.timeout"]);
        assert!(paths("git", base(1)).is_empty());
        assert!(paths("git", base(3600)).is_empty());
        // A negative timeout does not even parse; serde names the field.
        assert_eq!(paths("git", base(-1)), ["spec.timeout"]);
    }

    #[test]
    fn name_must_be_dns1123() {
        let errs = validate::<McpServer>(&object("MCPServer", "Git_Tools", json!({"type": "stdio", "command": "x"})));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "metadata.name");
        assert!(errs[0].message.starts_with("the name must be lowercase"), "{}", errs[0].message);
    }

    #[test]
    fn tool_prefix_must_be_an_identifier() {
        assert_eq!(paths("git", json!({"type": "stdio", "command": "x", "toolPrefix": "1git"})), ["spec.toolPrefix"]);
        assert!(paths("git", json!({"type": "stdio", "command": "x", "toolPrefix": "git_"})).is_empty());
    }

    #[test]
    fn every_error_is_reported_not_just_the_first() {
        assert_eq!(
            paths("Bad Name", json!({"type": "stdio", "url": "https://a.example", "timeout": 0})),
            ["metadata.name", "spec.command", "spec.url", "spec.timeout"]
        );
    }

    #[test]
    fn unknown_fields_are_rejected_by_the_parser() {
        let errs =
            validate::<McpServer>(&object("MCPServer", "git", json!({"type": "stdio", "command": "x", "comand": "y"})));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("unknown field `comand`"), "{}", errs[0].message);
    }
}
