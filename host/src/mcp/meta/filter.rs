//! The engine of `filter_tools` and `list_core_tools`: filter by name pattern, description and labels, rank by a query, page, and answer in muster's shape.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::glob;
use super::ranking::{self, Doc};

/// How many tools one `filter_tools` page holds when the call names no `limit` (muster's).
pub const DEFAULT_LIMIT: usize = 5;

/// The most characters of a summary (the first line of a description) before it is cut.
pub const SUMMARY_MAX: usize = 120;

/// One tool as the filter sees it.
#[derive(Clone, Debug, Default)]
pub struct Item {
    /// The exposed name.
    pub name: String,
    /// The whole description.
    pub description: String,
    /// The input schema.
    pub input_schema: Value,
    /// Its discovery labels (a Workflow's `metadata.labels`).
    pub labels: BTreeMap<String, String>,
}

/// One query of the filter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// A name pattern ([`glob`]); empty matches every name.
    pub pattern: String,
    /// A substring the description must hold; empty matches every description.
    pub description_filter: String,
    /// Words to rank by; empty keeps the catalog's order and gives no scores.
    pub query: String,
    /// Labels a tool must all carry.
    pub labels: BTreeMap<String, String>,
    /// Whether the pattern and description filter tell case apart.
    pub case_sensitive: bool,
    /// Whether each tool comes with its input schema.
    pub include_schema: bool,
    /// Whether each tool comes with a one-line summary instead of its whole description.
    pub summarize: bool,
    /// The most tools in the page; 0 for all.
    pub limit: usize,
    /// How many matching tools come before the page.
    pub offset: usize,
}

impl Options {
    /// `filter_tools`' options from its arguments: cheap discovery (summaries, no schema, a page
    /// of [`DEFAULT_LIMIT`]) unless asked otherwise; the error says which argument is wrong.
    pub fn from_args(args: &Map<String, Value>) -> Result<Self, String> {
        let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let flag = |k: &str| args.get(k).and_then(Value::as_bool).unwrap_or(false);
        let include_schema = flag("include_schema");
        let labels = args
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string))))
            .map(BTreeMap::from_iter)
            .unwrap_or_default();
        let number = |k: &str, min: i64, default: usize| -> Result<usize, String> {
            match args.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => {
                    let n = v.as_f64().ok_or_else(|| format!("{k} must be a number"))? as i64;
                    if n < min { Err(format!("{k} must be at least {min}")) } else { Ok(n as usize) }
                }
            }
        };
        Ok(Self {
            pattern: text("pattern"),
            description_filter: text("description_filter"),
            query: text("query"),
            labels,
            case_sensitive: flag("case_sensitive"),
            include_schema,
            summarize: !include_schema,
            limit: number("limit", 1, DEFAULT_LIMIT)?,
            offset: number("offset", 0, 0)?,
        })
    }

    /// `list_core_tools`' options: every `core*` tool, whole descriptions, schemas unless
    /// `include_schema` is false.
    pub fn core(args: &Map<String, Value>) -> Self {
        Self {
            pattern: "core*".into(),
            include_schema: args.get("include_schema").and_then(Value::as_bool).unwrap_or(true),
            ..Self::default()
        }
    }
}

/// Filters, ranks and pages `items` by `options`: muster's `filter_tools` answer (`filters`,
/// `total_tools`, `filtered_count` (this page), `total` (every match), `truncated`, `tools`).
pub fn run(items: &[Item], options: &Options) -> Result<Value, String> {
    if !options.pattern.is_empty() {
        glob::check(&options.pattern).map_err(|e| e.to_string())?;
    }
    let fold = |s: &str| if options.case_sensitive { s.to_string() } else { s.to_lowercase() };
    let pattern = fold(&options.pattern);
    let wanted = fold(&options.description_filter);
    let matched: Vec<&Item> = items
        .iter()
        .filter(|i| pattern.is_empty() || glob::matches(&pattern, &fold(&i.name)))
        .filter(|i| wanted.is_empty() || fold(&i.description).contains(&wanted))
        .filter(|i| options.labels.iter().all(|(k, v)| i.labels.get(k) == Some(v)))
        .collect();
    let ordered: Vec<(&Item, Option<f64>)> = if options.query.is_empty() {
        matched.iter().map(|i| (*i, None)).collect()
    } else {
        let docs: Vec<Doc> = matched
            .iter()
            .map(|i| Doc { name: i.name.clone(), description: summary(&i.description, 0), args: arg_names(i) })
            .collect();
        ranking::rank(&options.query, &docs).into_iter().map(|(k, s)| (matched[k], Some(s))).collect()
    };
    let total = ordered.len();
    let start = options.offset.min(total);
    let end = if options.limit > 0 { (start + options.limit).min(total) } else { total };
    let tools: Vec<Value> = ordered[start..end]
        .iter()
        .map(|(item, score)| {
            let mut t = Map::new();
            t.insert("name".into(), json!(item.name));
            if options.summarize {
                insert_text(&mut t, "summary", summary(&item.description, SUMMARY_MAX));
            } else {
                insert_text(&mut t, "description", item.description.clone());
            }
            if let Some(s) = score {
                t.insert("score".into(), json!(ranking::round(*s)));
            }
            if !item.labels.is_empty() {
                t.insert("labels".into(), json!(item.labels));
            }
            if options.include_schema {
                t.insert("inputSchema".into(), item.input_schema.clone());
            }
            Value::Object(t)
        })
        .collect();
    let mut filters = Map::new();
    for (k, v) in
        [("pattern", &options.pattern), ("description_filter", &options.description_filter), ("query", &options.query)]
    {
        insert_text(&mut filters, k, v.clone());
    }
    if !options.labels.is_empty() {
        filters.insert("labels".into(), json!(options.labels));
    }
    filters.insert("case_sensitive".into(), json!(options.case_sensitive));
    filters.insert("include_schema".into(), json!(options.include_schema));
    filters.insert("limit".into(), json!(options.limit));
    filters.insert("offset".into(), json!(options.offset));
    Ok(json!({
        "filters": filters,
        "total_tools": items.len(),
        "filtered_count": tools.len(),
        "total": total,
        "truncated": end < total,
        "tools": tools,
    }))
}

fn insert_text(map: &mut Map<String, Value>, key: &str, text: String) {
    if !text.is_empty() {
        map.insert(key.into(), Value::String(text));
    }
}

/// The first line of `description`, trimmed, cut at `max` characters with `...` (0: no cut).
pub fn summary(description: &str, max: usize) -> String {
    let line = description.lines().next().unwrap_or_default().trim();
    if max > 0 && line.chars().count() > max {
        format!("{}...", line.chars().take(max).collect::<String>().trim_end())
    } else {
        line.to_string()
    }
}

/// The names of a tool's arguments (its schema's `properties`), space-separated.
fn arg_names(item: &Item) -> String {
    item.input_schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, description: &str, args: &[&str], labels: &[(&str, &str)]) -> Item {
        let props: Map<String, Value> = args.iter().map(|a| (a.to_string(), json!({"type": "string"}))).collect();
        Item {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object", "properties": props}),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn catalog() -> Vec<Item> {
        vec![
            item("core_plugin_list", "Lists the host's plugins.\nMore words.", &[], &[]),
            item("workflow_deploy", "Deploys an app.", &["app", "replicas"], &[("category", "delivery")]),
            item("x_git_log", "Shows the commit log.", &["path"], &[]),
            item("x_git_status", "Shows the working tree status.", &[], &[]),
        ]
    }

    fn names(v: &Value) -> Vec<&str> {
        v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn filters_combine_and_pages_say_what_is_left() {
        let items = catalog();
        let table: Vec<(Value, Vec<&str>, usize, bool)> = vec![
            (json!({}), vec!["core_plugin_list", "workflow_deploy", "x_git_log", "x_git_status"], 4, false),
            (json!({"pattern": "X_GIT_*"}), vec!["x_git_log", "x_git_status"], 2, false),
            (json!({"pattern": "X_GIT_*", "case_sensitive": true}), vec![], 0, false),
            (json!({"description_filter": "SHOWS"}), vec!["x_git_log", "x_git_status"], 2, false),
            (json!({"labels": {"category": "delivery"}}), vec!["workflow_deploy"], 1, false),
            (json!({"labels": {"category": "other"}}), vec![], 0, false),
            (json!({"limit": 2}), vec!["core_plugin_list", "workflow_deploy"], 4, true),
            (json!({"limit": 2, "offset": 3}), vec!["x_git_status"], 4, false),
            (json!({"offset": 9}), vec![], 4, false),
            // Ranked: the name, the description and the argument names all count.
            (json!({"query": "status"}), vec!["x_git_status"], 1, false),
            (json!({"query": "commit"}), vec!["x_git_log"], 1, false),
            (json!({"query": "replicas"}), vec!["workflow_deploy"], 1, false),
        ];
        for (a, want, total, truncated) in table {
            let got = run(&items, &Options::from_args(&args(a.clone())).unwrap()).unwrap();
            assert_eq!(names(&got), want, "{a}");
            assert_eq!((got["total"].as_u64().unwrap() as usize, got["truncated"] == true), (total, truncated), "{a}");
            assert_eq!(got["filtered_count"], want.len(), "{a}");
            assert_eq!(got["total_tools"], 4);
        }
    }

    #[test]
    fn discovery_is_cheap_unless_asked_and_ranked_tools_carry_scores() {
        let items = catalog();
        let got = run(&items, &Options::from_args(&args(json!({"query": "status shows"}))).unwrap()).unwrap();
        let first = &got["tools"][0];
        assert_eq!(first["name"], "x_git_status");
        assert_eq!(first["summary"], "Shows the working tree status.");
        assert!(first["score"].as_f64().unwrap() > got["tools"][1]["score"].as_f64().unwrap());
        assert!(first.get("description").is_none() && first.get("inputSchema").is_none(), "{first}");
        assert_eq!(
            got["filters"],
            json!({"query": "status shows", "case_sensitive": false, "include_schema": false, "limit": 5, "offset": 0})
        );
        let full = run(&items, &Options::from_args(&args(json!({"include_schema": true}))).unwrap()).unwrap();
        assert_eq!(full["tools"][0]["description"], "Lists the host's plugins.\nMore words.");
        assert_eq!(full["tools"][1]["inputSchema"]["properties"]["app"]["type"], "string");
        assert_eq!(full["tools"][1]["labels"], json!({"category": "delivery"}));
    }

    #[test]
    fn list_core_tools_lists_every_core_tool_whole() {
        let got = run(&catalog(), &Options::core(&Map::new())).unwrap();
        assert_eq!(names(&got), ["core_plugin_list"]);
        assert!(got["tools"][0]["inputSchema"].is_object() && got["tools"][0]["description"].is_string());
        assert_eq!(got["filters"]["limit"], 0);
        let bare = run(&catalog(), &Options::core(&args(json!({"include_schema": false})))).unwrap();
        assert!(bare["tools"][0].get("inputSchema").is_none());
    }

    #[test]
    fn bad_arguments_are_named() {
        for (a, says) in [
            (json!({"limit": 0}), "limit must be at least 1"),
            (json!({"limit": "five"}), "limit must be a number"),
            (json!({"offset": -1}), "offset must be at least 0"),
        ] {
            assert_eq!(Options::from_args(&args(a)).unwrap_err(), says);
        }
        let bad = Options { pattern: "x_[".into(), ..Options::default() };
        assert!(run(&catalog(), &bad).unwrap_err().contains("no closing ']'"));
    }

    #[test]
    fn summaries_are_one_cut_line() {
        assert_eq!(summary("  First line. \nSecond.", 0), "First line.");
        assert_eq!(summary(&"a".repeat(130), 120), format!("{}...", "a".repeat(120)));
        assert_eq!(summary("", 120), "");
    }
}
