//! The classic Prometheus text format (0.0.4), made from the OpenMetrics text the registry writes, for scrapers that do not ask for OpenMetrics.

/// The content type of OpenMetrics text, served when the scraper asks for it.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic text format, served otherwise (as Prometheus' own client
/// libraries do).
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scraper's `Accept` header prefers OpenMetrics: it names
/// `application/openmetrics-text` with a weight above zero and at least that of any text format
/// it also accepts (`text/plain`, `text/*`, `*/*`). No header, or one that does not name
/// OpenMetrics, gets the classic format.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let weight =
            parts.filter_map(|p| p.trim().strip_prefix("q=")).find_map(|q| q.trim().parse::<f32>().ok()).unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(weight),
            "text/plain" | "text/*" | "*/*" => text = text.max(weight),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// `openmetrics` in the classic format: a counter's `# HELP` and `# TYPE` name its `_total`
/// samples, `_created` samples, `# UNIT` lines, exemplars and the closing `# EOF` are left out,
/// and an `info` metric becomes a gauge named `_info`. Everything else is the same in both.
pub fn to_classic(openmetrics: &str) -> String {
    use std::collections::HashMap;
    let mut renamed: HashMap<&str, String> = HashMap::new();
    let mut counters = Vec::new();
    for line in openmetrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        match rest.split_once(' ') {
            Some((name, "counter")) => {
                renamed.insert(name, format!("{name}_total"));
                counters.push(name);
            }
            Some((name, "info")) => {
                renamed.insert(name, format!("{name}_info"));
            }
            _ => {}
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("HELP", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("TYPE", r)));
        if let Some((what, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = renamed.get(name).map_or(name, String::as_str);
            let tail = match (what, tail) {
                ("TYPE", "info") => "gauge".to_string(),
                // OpenMetrics escapes a double quote in help text; the classic format does not.
                ("HELP", t) => t.replace("\\\"", "\""),
                (_, t) => t.to_string(),
            };
            out.push_str(&format!("# {what} {name} {tail}"));
            out.push('\n');
            continue;
        }
        if line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let sample_name = line.split(['{', ' ']).next().unwrap_or_default();
        if counters.iter().any(|c| sample_name.strip_prefix(c) == Some("_created")) {
            continue;
        }
        // An exemplar follows the value as ` # {labels} value [timestamp]`.
        let sample = line.split_once(" # ").map_or(line, |(sample, _)| sample);
        out.push_str(sample);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_the_scraper_prefers_it() {
        // Prometheus 2.x and 3.x, which prefer OpenMetrics.
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        )));
        assert!(wants_openmetrics(Some("application/openmetrics-text")));
        // A scraper that asks for the classic format, or anything, or says nothing.
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5")));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
    }

    #[test]
    fn counters_are_named_by_their_samples_and_openmetrics_only_lines_go() {
        let om = "# HELP steward_reconcile Reconciles by \\\"kind\\\".\n# TYPE steward_reconcile counter\n\
                  steward_reconcile_total{kind=\"Noop\",result=\"success\"} 3\n\
                  steward_reconcile_created{kind=\"Noop\",result=\"success\"} 1700000000.0\n\
                  # HELP steward_build Build.\n# TYPE steward_build info\nsteward_build_info{version=\"1\"} 1\n\
                  # HELP steward_reconcile_time_seconds Time.\n# TYPE steward_reconcile_time_seconds histogram\n\
                  # UNIT steward_reconcile_time_seconds seconds\n\
                  steward_reconcile_time_seconds_bucket{le=\"0.1\"} 1 # {trace_id=\"a\"} 0.05\n\
                  steward_reconcile_time_seconds_sum 0.05\nsteward_reconcile_time_seconds_count 1\n\
                  # HELP steward_workqueue_depth Depth.\n# TYPE steward_workqueue_depth gauge\nsteward_workqueue_depth 0\n# EOF\n";
        let classic = to_classic(om);
        assert_eq!(
            classic,
            "# HELP steward_reconcile_total Reconciles by \"kind\".\n# TYPE steward_reconcile_total counter\n\
             steward_reconcile_total{kind=\"Noop\",result=\"success\"} 3\n\
             # HELP steward_build_info Build.\n# TYPE steward_build_info gauge\nsteward_build_info{version=\"1\"} 1\n\
             # HELP steward_reconcile_time_seconds Time.\n# TYPE steward_reconcile_time_seconds histogram\n\
             steward_reconcile_time_seconds_bucket{le=\"0.1\"} 1\n\
             steward_reconcile_time_seconds_sum 0.05\nsteward_reconcile_time_seconds_count 1\n\
             # HELP steward_workqueue_depth Depth.\n# TYPE steward_workqueue_depth gauge\nsteward_workqueue_depth 0\n"
        );
    }
}
