//! The checks of an MCPServer beyond what its type enforces, each reported with its field path.
//!
//! Errors are what muster refuses (its CRD's schema and admission rules, and its own checks);
//! warnings are what muster accepts but Steward thinks is a mistake (a field the transport
//! ignores, a URL that cannot be reached).

use std::collections::BTreeMap;

use steward_sdk::FieldError;

use crate::auth;
use crate::names::dns1123_subdomain_problem;
use crate::naming::ToolNaming;
use crate::patterns::{http_url_matches, identifier_matches};
use crate::spec::{MAX_DESCRIPTION_LEN, MAX_TIMEOUT_SECONDS, McpServerSpec, ServerType};
use crate::url::http_url_problem;
use crate::values;

/// Every problem of the object named `name` with `spec` and `annotations`; empty when it is valid.
pub fn validate(name: &str, annotations: &BTreeMap<String, String>, spec: &McpServerSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(problem) = dns1123_subdomain_problem(name) {
        errs.push(FieldError::new("metadata.name", format!("the name {problem}")));
    }
    if let Err(e) = ToolNaming::of(annotations) {
        errs.push(e);
    }
    let ty = spec.type_.as_str();
    if spec.type_ == ServerType::Stdio {
        if spec.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
            errs.push(FieldError::new("spec.command", "a stdio server needs a command: the program to run"));
        }
        if spec.headers.is_some() {
            errs.push(FieldError::new(
                "spec.headers",
                "headers are only for streamable-http and sse servers; set environment variables with spec.env",
            ));
        }
    } else {
        match spec.url.as_deref() {
            None => errs.push(FieldError::new(
                "spec.url",
                format!("a {ty} server needs a url: its http:// or https:// endpoint"),
            )),
            Some(url) if !http_url_matches(url) => errs.push(FieldError::new(
                "spec.url",
                "must be an http:// or https:// URL with a host of at least two characters and no whitespace",
            )),
            Some(_) => {}
        }
        if spec.args.is_some() {
            errs.push(FieldError::new(
                "spec.args",
                format!("args are only for stdio servers; a {ty} server is a remote endpoint, not a process"),
            ));
        }
    }
    errs.extend(values::errors(&spec.env, "spec.env"));
    if let Some(headers) = &spec.headers {
        errs.extend(values::errors(headers, "spec.headers"));
    }
    if spec.timeout == 0 || spec.timeout > MAX_TIMEOUT_SECONDS {
        errs.push(FieldError::new(
            "spec.timeout",
            format!("must be from 1 to {MAX_TIMEOUT_SECONDS} seconds, not {}", spec.timeout),
        ));
    }
    if spec.tool_prefix.as_deref().is_some_and(|p| !identifier_matches(p, true)) {
        errs.push(FieldError::new(
            "spec.toolPrefix",
            "must start with a letter and hold only letters, digits, '_' and '-'",
        ));
    }
    if let Some(d) = &spec.description
        && d.chars().count() > MAX_DESCRIPTION_LEN
    {
        errs.push(FieldError::new(
            "spec.description",
            format!("must be at most {MAX_DESCRIPTION_LEN} characters, not {}", d.chars().count()),
        ));
    }
    if let Some(family) = &spec.family {
        if !identifier_matches(&family.name, true) {
            errs.push(FieldError::new(
                "spec.family.name",
                "must start with a letter and hold only letters, digits, '_' and '-'",
            ));
        }
        if !identifier_matches(&family.instance_arg, false) {
            errs.push(FieldError::new(
                "spec.family.instanceArg",
                "must start with a letter and hold only letters, digits and '_'",
            ));
        }
    }
    if let Some(a) = &spec.auth {
        errs.extend(auth::errors(a, spec.type_.is_remote()));
    }
    errs
}

/// What muster accepts in `spec` but has no effect or cannot work.
pub fn warnings(spec: &McpServerSpec) -> Vec<FieldError> {
    let mut out = Vec::new();
    let ty = spec.type_.as_str();
    if spec.type_ == ServerType::Stdio {
        if spec.url.is_some() {
            out.push(FieldError::new("spec.url", "a stdio server is a process Steward starts: its url is ignored"));
        }
    } else {
        if spec.command.is_some() {
            out.push(FieldError::new(
                "spec.command",
                format!("a {ty} server is a remote endpoint: its command is ignored"),
            ));
        }
        if !spec.env.is_empty() {
            out.push(FieldError::new(
                "spec.env",
                format!("a {ty} server is a remote endpoint: env is ignored; send credentials with spec.headers"),
            ));
        }
        if let Some(problem) = spec.url.as_deref().filter(|u| http_url_matches(u)).and_then(http_url_problem) {
            out.push(FieldError::new("spec.url", format!("the url {problem}, so Steward cannot connect to it")));
        }
    }
    if let Some(a) = &spec.auth {
        out.extend(auth::warnings(a));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::{object, validate, warnings};

    use crate::McpServer;

    fn paths(name: &str, spec: serde_json::Value) -> Vec<String> {
        validate::<McpServer>(&object("MCPServer", name, spec)).into_iter().map(|e| e.path).collect()
    }

    fn warned(spec: serde_json::Value) -> Vec<String> {
        warnings::<McpServer>(&object("MCPServer", "s", spec)).into_iter().map(|e| e.path).collect()
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
        assert_eq!(paths("api", json!({"type": "streamable-http", "url": "ftp://x.y"})), ["spec.url"]);
        assert_eq!(paths("api", json!({"type": "sse", "url": "https://"})), ["spec.url"]);
    }

    #[test]
    fn muster_refuses_args_on_remote_and_headers_on_stdio_even_empty() {
        assert_eq!(paths("git", json!({"type": "stdio", "command": "x", "headers": {}})), ["spec.headers"]);
        assert_eq!(paths("api", json!({"type": "sse", "url": "https://a.example", "args": []})), ["spec.args"]);
    }

    #[test]
    fn the_looser_transport_combinations_are_warnings() {
        assert!(paths("git", json!({"type": "stdio", "command": "x", "url": "https://a.example"})).is_empty());
        assert_eq!(warned(json!({"type": "stdio", "command": "x", "url": "https://a.example"})), ["spec.url"]);
        let remote = json!({"type": "sse", "url": "https://a.example", "command": "x", "env": {"K": "v"}});
        assert!(paths("api", remote.clone()).is_empty());
        assert_eq!(warned(remote), ["spec.command", "spec.env"]);
        assert_eq!(warned(json!({"type": "sse", "url": "http://example.com:http/x"})), ["spec.url"]);
    }

    #[test]
    fn timeout_is_musters_one_to_three_hundred_seconds() {
        let base = |t: i64| json!({"type": "stdio", "command": "x", "timeout": t});
        assert_eq!(paths("git", base(0)), ["spec.timeout"]);
        assert_eq!(paths("git", base(301)), ["spec.timeout"]);
        assert!(paths("git", base(1)).is_empty());
        assert!(paths("git", base(300)).is_empty());
        assert_eq!(paths("git", base(-1)), ["spec.timeout"]);
    }

    #[test]
    fn description_family_and_auth_follow_muster() {
        let long = "é".repeat(501);
        assert_eq!(paths("git", json!({"type": "stdio", "command": "x", "description": long})), ["spec.description"]);
        assert!(paths("git", json!({"type": "stdio", "command": "x", "description": "é".repeat(500)})).is_empty());
        assert_eq!(
            paths("git", json!({"type": "stdio", "command": "x", "family": {"name": "1k", "instanceArg": "a-b"}})),
            ["spec.family.name", "spec.family.instanceArg"]
        );
        assert_eq!(paths("git", json!({"type": "stdio", "command": "x", "family": {"name": "k"}})), ["spec.family"]);
        assert_eq!(
            paths("git", json!({"type": "stdio", "command": "x", "auth": {"type": "oauth"}})),
            ["spec.auth.type"]
        );
    }

    #[test]
    fn secret_references_are_checked_with_their_path() {
        let spec = json!({"type": "sse", "url": "https://a.example",
                          "headers": {"Authorization": {"valueFrom": {"secretKeyRef": {"name": "gh"}}}}});
        assert_eq!(paths("api", spec), ["spec.headers.Authorization.valueFrom.secretKeyRef.key"]);
    }

    #[test]
    fn name_and_naming_annotation_are_checked() {
        let errs = validate::<McpServer>(&object("MCPServer", "Git_Tools", json!({"type": "stdio", "command": "x"})));
        assert_eq!(errs[0].path, "metadata.name");
        let mut o = object("MCPServer", "git", json!({"type": "stdio", "command": "x"}));
        o.annotations.insert(crate::NAMING_ANNOTATION.into(), "other".into());
        assert_eq!(validate::<McpServer>(&o)[0].path, "metadata.annotations.steward.dev/tool-naming");
    }

    #[test]
    fn unknown_fields_are_rejected_by_the_parser() {
        let errs =
            validate::<McpServer>(&object("MCPServer", "git", json!({"type": "stdio", "command": "x", "comand": "y"})));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("unknown field `comand`"), "{}", errs[0].message);
    }
}
