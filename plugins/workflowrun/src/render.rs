//! Go templates over the run's data (`.input`, `.results`, `.vars`), rendered with `gotmpl`
//! (a port of Go's text/template that needs no threads, unlike `gtmpl`, whose lexer spawns
//! one and so panics inside WebAssembly).
//!
//! Three renderings, as muster has them:
//! - [`resolve`] (step and condition args, `forEach.items`, expected values): a string that is
//!   one bare path (`{{ .input.list }}`, `{{ .results.get.items[0] }}`) becomes the value there,
//!   of any JSON type; any other template renders to text, and the text `true` or `false`
//!   becomes a boolean.
//! - [`render_typed`] (the output template, `jsonPath` keys): like [`resolve`], and a template
//!   that is one action (`{{ len .results.list }}`) keeps its value's type (a number here);
//!   mixed text renders to a string; text is never guessed into a number.
//! - [`render_text`] (condition templates): the rendered text.
//!
//! A field a template reads that the data does not have is an error, as muster's
//! `missingkey=error` makes it. Ranging over a map visits its keys in sorted order, as Go does.

use std::sync::Arc;

use gotmpl::{MissingKey, Template, TemplateError, Value as G};
use serde_json::{Map, Number, Value};

/// The name of the function that hands a single action's value back as JSON text.
const CAPTURE: &str = "__steward_json";

/// The data templates see: `.input` (and its alias `.args`), `.results` (and its alias
/// `.context`), `.vars`.
pub fn data(input: &Map<String, Value>, results: &Map<String, Value>, vars: &Map<String, Value>) -> Value {
    let mut d = Map::new();
    d.insert("input".into(), Value::Object(input.clone()));
    d.insert("args".into(), Value::Object(input.clone()));
    d.insert("results".into(), Value::Object(results.clone()));
    d.insert("context".into(), Value::Object(results.clone()));
    d.insert("vars".into(), Value::Object(vars.clone()));
    Value::Object(d)
}

/// Resolves every string of `value` (recursively through arrays and objects) as [`resolve`] does.
pub fn resolve_value(value: &Value, data: &Value) -> Result<Value, String> {
    match value {
        Value::String(s) => resolve(s, data),
        Value::Array(items) => items.iter().map(|v| resolve_value(v, data)).collect::<Result<_, _>>().map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| resolve_value(v, data).map(|v| (k.clone(), v)).map_err(|e| format!("{k}: {e}")))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// One string as an argument: text without actions as is, a bare path as the value there,
/// else the rendered text (`true` and `false` as booleans).
pub fn resolve(text: &str, data: &Value) -> Result<Value, String> {
    if !(text.contains("{{") && text.contains("}}")) {
        return Ok(Value::String(text.to_string()));
    }
    if let Some(v) = pure_path(text).and_then(|p| lookup(data, p)) {
        return Ok(v.clone());
    }
    Ok(match render_text(text, data)?.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        s => Value::String(s.to_string()),
    })
}

/// Renders every string of `value` (recursively) as [`render_typed`] does; errors name the path.
pub fn render_typed_value(value: &Value, data: &Value, path: &str) -> Result<Value, String> {
    match value {
        Value::String(s) => render_typed(s, data).map_err(|e| format!("{path}: {e}")),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| render_typed_value(v, data, &format!("{path}[{i}]")))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| render_typed_value(v, data, &format!("{path}.{k}")).map(|v| (k.clone(), v)))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// One string, keeping the type of a bare path's or a single action's value.
pub fn render_typed(text: &str, data: &Value) -> Result<Value, String> {
    if !text.contains("{{") {
        return Ok(Value::String(text.to_string()));
    }
    if let Some(v) = pure_path(text).and_then(|p| lookup(data, p)) {
        return Ok(v.clone());
    }
    match single_action(text) {
        Some(pipe) => {
            let json = render_text(&format!("{{{{ {pipe} | {CAPTURE} }}}}"), data)?;
            serde_json::from_str(&json).map_err(|e| format!("the value of {text:?} is not JSON: {e}"))
        }
        None => render_text(text, data).map(Value::String),
    }
}

/// The rendered text of the Go template `text` over `data`.
pub fn render_text(text: &str, data: &Value) -> Result<String, String> {
    let tmpl = Template::new("arg")
        .missing_key(MissingKey::Error)
        .func(CAPTURE, capture)
        .parse(text)
        .map_err(|e| format!("template {text:?} does not parse: {e}"))?;
    tmpl.execute_to_string(&to_gotmpl(data)).map_err(|e| format!("template {text:?} failed: {e}"))
}

/// The value at `path` (dot-separated names, each with optional `[n]` indices) under `root`.
pub fn lookup<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = root;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, mut indices) = match segment.find('[') {
            Some(i) => (&segment[..i], &segment[i..]),
            None => (segment, ""),
        };
        if !name.is_empty() {
            cur = cur.as_object()?.get(name)?;
        }
        while let Some(rest) = indices.strip_prefix('[') {
            let end = rest.find(']')?;
            let idx: usize = rest[..end].trim().parse().ok()?;
            cur = cur.as_array()?.get(idx)?;
            indices = &rest[end + 1..];
        }
        if !indices.is_empty() {
            return None;
        }
    }
    Some(cur)
}

/// The path of a template that is exactly one bare reference, `{{ .a.b[0].c }}` → `a.b[0].c`.
fn pure_path(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let path = inner.strip_prefix('.')?;
    let ok = path.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-'));
    ok.then_some(path)
}

/// The pipeline of a template that is exactly one output action (no text around it, no
/// variable declaration, no control keyword), trim markers removed.
fn single_action(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") {
        return None;
    }
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner).trim();
    let first = inner.split(|c: char| !c.is_ascii_alphanumeric() && c != '/' && c != '*').next().unwrap_or("");
    let keyword = matches!(
        first,
        "if" | "else" | "end" | "range" | "with" | "define" | "template" | "block" | "break" | "continue"
    ) || inner.starts_with("/*");
    (!inner.is_empty() && !keyword && !inner.contains(":=") && !declares(inner)).then_some(inner)
}

/// Whether a pipeline assigns a variable (`$x = ...`).
fn declares(pipe: &str) -> bool {
    pipe.starts_with('$') && pipe.split_once('=').is_some_and(|(lhs, _)| !lhs.contains(['"', '`', '(']))
}

/// The capture function: its one argument as JSON text.
fn capture(args: &[G]) -> Result<G, TemplateError> {
    match args {
        [v] => Ok(G::String(from_gotmpl(v).to_string().into())),
        _ => Err(TemplateError::Exec(format!("{CAPTURE} takes exactly 1 argument, got {}", args.len()))),
    }
}

/// A JSON value as gotmpl's value; objects become maps, whose missing keys are errors here.
pub fn to_gotmpl(v: &Value) -> G {
    match v {
        Value::Null => G::Nil,
        Value::Bool(b) => G::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                G::Int(i)
            } else if let Some(u) = n.as_u64() {
                G::Uint(u)
            } else {
                let f = n.as_f64().unwrap_or_default();
                // A whole float acts as an integer, as Go prints a float64 3 as "3".
                if f.fract() == 0.0 && f.abs() < 9.0e15 { G::Int(f as i64) } else { G::Float(f) }
            }
        }
        Value::String(s) => G::String(s.as_str().into()),
        Value::Array(items) => G::List(items.iter().map(to_gotmpl).collect()),
        Value::Object(map) => {
            G::Map(Arc::new(map.iter().map(|(k, v)| (Arc::from(k.as_str()), to_gotmpl(v))).collect()))
        }
    }
}

/// gotmpl's value as JSON; nil is `null`, functions too.
pub fn from_gotmpl(v: &G) -> Value {
    match v {
        G::Nil | G::Function(_) => Value::Null,
        G::Bool(b) => Value::Bool(*b),
        G::Int(i) => Value::from(*i),
        G::Uint(u) => Value::from(*u),
        G::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        G::String(s) => Value::String(s.to_string()),
        G::List(items) => Value::Array(items.iter().map(from_gotmpl).collect()),
        G::Map(map) => Value::Object(map.iter().map(|(k, v)| (k.to_string(), from_gotmpl(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d() -> Value {
        let input = json!({"app": "web", "list": ["a", "b"], "n": 3, "env": "prod", "version": "1.20"});
        let results = json!({"get": {"items": [{"name": "x"}, {"name": "y"}], "ok": true}, "text": "plain"});
        data(
            input.as_object().unwrap(),
            results.as_object().unwrap(),
            json!({"item": "a", "item_index": 0}).as_object().unwrap(),
        )
    }

    #[test]
    fn resolve_keeps_the_type_of_a_bare_path_and_renders_the_rest_to_text() {
        let cases = [
            ("no template", json!("no template")),
            ("{{ .input.list }}", json!(["a", "b"])),
            ("{{.input.n}}", json!(3)),
            ("{{ .results.get.items[1].name }}", json!("y")),
            ("{{ .context.text }}", json!("plain")),
            ("{{ .args.app }}", json!("web")),
            ("deploy {{ .input.app }} #{{ .vars.item_index }}", json!("deploy web #0")),
            ("{{ eq .input.env \"prod\" }}", json!(true)),
            ("{{ len .input.list }}", json!("2")),
            ("{{ .input.version }}", json!("1.20")),
        ];
        for (text, want) in cases {
            assert_eq!(resolve(text, &d()), Ok(want), "{text}");
        }
    }

    #[test]
    fn render_typed_keeps_a_single_actions_type_and_never_guesses_from_text() {
        let cases = [
            ("{{ len .input.list }}", json!(2)),
            ("{{ eq .input.n 3 }}", json!(true)),
            ("{{ printf \"%s-%s\" .input.app .vars.item }}", json!("web-a")),
            ("{{ .results.get }}", json!({"items": [{"name": "x"}, {"name": "y"}], "ok": true})),
            ("v{{ .input.version }}", json!("v1.20")),
            ("{{ index .input.list 1 }}", json!("b")),
            ("{{- .input.version -}}", json!("1.20")),
        ];
        for (text, want) in cases {
            assert_eq!(render_typed(text, &d()), Ok(want), "{text}");
        }
        let out = render_typed_value(&json!({"a": ["{{ .input.n }}", 1], "b": "x"}), &d(), "output").unwrap();
        assert_eq!(out, json!({"a": [3, 1], "b": "x"}));
    }

    #[test]
    fn a_missing_field_is_an_error_naming_the_template() {
        for text in ["{{ .input.nope }}", "x {{ .results.get.missing }}", "{{ len .input.nope }}"] {
            let err = resolve(text, &d()).unwrap_err();
            assert!(err.contains(text), "{err}");
        }
        assert!(render_text("{{ .input.app", &d()).unwrap_err().contains("does not parse"));
        assert_eq!(render_text("{{ if eq .input.env \"prod\" }}true{{ end }}", &d()).unwrap(), "true");
    }

    #[test]
    fn a_map_ranges_in_key_order_as_go_does() {
        let d = data(json!({"m": {"b": 2, "c": 3, "a": 1}}).as_object().unwrap(), &Map::new(), &Map::new());
        let text = "{{ range $k, $v := .input.m }}{{ $k }}={{ $v }};{{ end }}";
        assert_eq!(render_text(text, &d).unwrap(), "a=1;b=2;c=3;");
        assert_eq!(render_text("{{ .input.m }}", &d).unwrap(), "map[a:1 b:2 c:3]");
    }

    #[test]
    fn lookup_walks_names_and_indices() {
        let v = json!({"a": {"b": [[1, 2], [3]]}});
        assert_eq!(lookup(&v, "a.b[0][1]"), Some(&json!(2)));
        assert_eq!(lookup(&v, "a.b[1]"), Some(&json!([3])));
        assert_eq!(lookup(&v, "a.c"), None);
        assert_eq!(lookup(&v, "a.b[5]"), None);
        assert_eq!(lookup(&v, "a.b[x]"), None);
    }
}
