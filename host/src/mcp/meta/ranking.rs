//! Ranked search for `filter_tools`: lexical BM25F over a tool's name, the first line of its description and its argument names, as muster ranks (name terms weigh most; `list` and `get` weigh little).

use std::collections::{BTreeMap, BTreeSet};

/// BM25's term-frequency saturation.
const K1: f64 = 1.5;
/// BM25's length normalisation.
const B: f64 = 0.75;
/// The weight of a term found in the name: a name says what a tool does.
const NAME_WEIGHT: f64 = 3.0;
/// The weight of a term found in the description's first line.
const DESCRIPTION_WEIGHT: f64 = 1.0;
/// The weight of a term found among the argument names.
const ARGS_WEIGHT: f64 = 1.0;
/// How much a verb that heads many tool names (`list`, `get`) counts, against 1 for any other term.
const COMMON_VERB_WEIGHT: f64 = 0.25;
const COMMON_VERBS: &[&str] = &["list", "get"];

/// One tool as the ranker sees it.
#[derive(Clone, Debug, Default)]
pub struct Doc {
    /// The exposed name.
    pub name: String,
    /// The description's first line.
    pub description: String,
    /// The argument names, space-separated.
    pub args: String,
}

/// The indices into `docs` of those that match at least one term of `query`, best first, each
/// with its score (> 0); ties keep the order of `docs`. Empty when the query has no term.
pub fn rank(query: &str, docs: &[Doc]) -> Vec<(usize, f64)> {
    let terms: BTreeSet<String> = tokenize(query).into_iter().collect();
    if terms.is_empty() || docs.is_empty() {
        return Vec::new();
    }
    let fields: Vec<[Vec<String>; 3]> =
        docs.iter().map(|d| [tokenize(&d.name), tokenize(&d.description), tokenize(&d.args)]).collect();
    let n = docs.len() as f64;
    let mut avg = [0.0f64; 3];
    let mut df: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &fields {
        for (i, field) in f.iter().enumerate() {
            avg[i] += field.len() as f64 / n;
        }
        let seen: BTreeSet<&str> = f.iter().flatten().map(String::as_str).collect();
        for t in seen {
            *df.entry(t).or_default() += 1;
        }
    }
    let weights = [NAME_WEIGHT, DESCRIPTION_WEIGHT, ARGS_WEIGHT];
    let mut ranked: Vec<(usize, f64)> = fields
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let score: f64 = terms
                .iter()
                .map(|term| {
                    let wtf: f64 = (0..3)
                        .map(|k| {
                            let tf = f[k].iter().filter(|t| *t == term).count() as f64;
                            weights[k] * normalised(tf, f[k].len() as f64, avg[k])
                        })
                        .sum();
                    if wtf == 0.0 {
                        return 0.0;
                    }
                    let d = df.get(term.as_str()).copied().unwrap_or(0) as f64;
                    let idf = (1.0 + (n - d + 0.5) / (d + 0.5)).ln();
                    let c = idf * wtf * (K1 + 1.0) / (wtf + K1);
                    if COMMON_VERBS.contains(&term.as_str()) { c * COMMON_VERB_WEIGHT } else { c }
                })
                .sum();
            (score > 0.0).then_some((i, score))
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// A term frequency normalised by its field's length against the average length.
fn normalised(tf: f64, len: f64, avg: f64) -> f64 {
    if tf == 0.0 || avg == 0.0 { 0.0 } else { tf / (1.0 - B + B * len / avg) }
}

/// Lower-case runs of letters and digits; a lower-to-upper change starts a new one (`ListPods`
/// is `list`, `pods`), so snake_case, kebab-case and camelCase names split into words.
pub fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.extend(c.to_lowercase());
            prev_lower = c.is_lowercase();
        } else {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A score rounded to 4 decimals; a positive score stays positive (at least 0.0001).
pub fn round(score: f64) -> f64 {
    let r = (score * 10_000.0).round() / 10_000.0;
    if r == 0.0 && score > 0.0 { 0.0001 } else { r }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str, description: &str, args: &str) -> Doc {
        Doc { name: name.into(), description: description.into(), args: args.into() }
    }

    #[test]
    fn words_split_at_separators_and_case_changes() {
        let table: &[(&str, &[&str])] = &[
            ("x_git_status", &["x", "git", "status"]),
            ("get-sum", &["get", "sum"]),
            ("ListPods now", &["list", "pods", "now"]),
            ("HTTPServer v2", &["httpserver", "v2"]),
            ("  ", &[]),
        ];
        for (text, want) in table {
            assert_eq!(tokenize(text), *want, "{text}");
        }
    }

    #[test]
    fn the_best_match_comes_first_and_non_matches_are_dropped() {
        // muster's own acceptance case (filter-tools-query-ranking).
        let docs = [
            doc("x_rank_prometheus_query_range", "Query Prometheus metrics over a time range.", ""),
            doc("x_rank_metrics_overview", "Show a metrics summary.", ""),
            doc("x_rank_service_restart", "Restart a running service.", ""),
            doc("x_rank_grafana_dashboard", "Fetch a Grafana monitoring dashboard.", ""),
        ];
        let ranked = rank("prometheus metrics query", &docs);
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1]);
        assert!(ranked[0].1 > ranked[1].1 && ranked[1].1 > 0.0);
        assert!(rank("", &docs).is_empty() && rank("-", &docs).is_empty());
        assert!(rank("nothing matches", &docs).is_empty());
    }

    #[test]
    fn a_name_outweighs_a_description_and_common_verbs_count_little() {
        let docs = [
            doc("x_k8s_list_nodes", "Lists the nodes.", ""),
            doc("x_k8s_pods", "Shows every pod's state.", ""),
            doc("x_k8s_events", "Lists events of pods.", ""),
        ];
        // "pods" in a name beats "pods" in a description; "list" hardly counts.
        let ranked = rank("list pods", &docs);
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 0]);
    }

    #[test]
    fn argument_names_are_searched_too() {
        let docs = [doc("x_a_run", "Runs it.", "namespace replicas"), doc("x_a_stop", "Stops it.", "name")];
        let ranked = rank("replicas", &docs);
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn scores_round_to_four_decimals_and_stay_positive() {
        assert_eq!(round(1.234_56), 1.2346);
        assert_eq!(round(0.000_01), 0.0001);
        assert_eq!(round(0.0), 0.0);
    }
}
