//! Output shared by the commands: aligned tables, and JSON for programs.

use anyhow::Result;
use serde::Serialize;

use crate::client::PluginView;

/// Formats `rows` (the first is the header) as columns padded to their widest cell, three
/// spaces apart, with no trailing blanks. Rows are arrays or vectors of the same length.
pub(super) fn format_rows<R: AsRef<[String]>>(rows: &[R]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        let r = r.as_ref();
        widths.resize(widths.len().max(r.len()), 0);
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, w) in r.as_ref().iter().zip(widths.iter().copied()) {
            line.push_str(&format!("{c:<w$}   "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Prints `value` as indented JSON.
pub(super) fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// The plugin table: one row per file, then each file's message and capability warnings below the table.
pub(super) fn plugin_table(plugins: &[PluginView]) -> String {
    let mut rows: Vec<[String; 5]> = vec![["FILE", "NAME", "VERSION", "STATE", "KINDS"].map(String::from)];
    rows.extend(plugins.iter().map(|p| {
        [
            p.file.clone(),
            p.name.clone().unwrap_or_else(|| "-".into()),
            p.version.clone().unwrap_or_else(|| "-".into()),
            format!("{:?}", p.state),
            if p.kinds.is_empty() { "-".into() } else { p.kinds.join(",") },
        ]
    }));
    let mut out = format_rows(&rows);
    for p in plugins {
        if let Some(s) = &p.source {
            out.push_str(&format!("\n{}\n", source_line(s)));
        }
        if let Some(m) = &p.message {
            // A load error names its file already; the file is named once.
            if m.starts_with(&format!("{}: ", p.file)) {
                out.push_str(&format!("\n{m}\n"));
            } else {
                out.push_str(&format!("\n{}: {m}\n", p.file));
            }
        }
        for w in &p.warnings {
            out.push_str(&format!("{}: warning: {w}\n", p.file));
        }
    }
    out
}

/// What the table says below a registry plugin: its digest, where it was read from, its key, and any note.
fn source_line(s: &crate::plugin::SourceInfo) -> String {
    let mut line = format!("{}: digest {}", s.reference, s.digest.as_deref().unwrap_or("-"));
    match s.fetched {
        Some(crate::plugin::Fetched::Registry) => line.push_str(", from the registry"),
        Some(crate::plugin::Fetched::Cache) => line.push_str(", from the cache"),
        None => {}
    }
    if let Some(k) = &s.signed_by {
        line.push_str(&format!(", signed by {k}"));
    }
    if let Some(n) = &s.note {
        line.push_str(&format!("; {n}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::PluginState;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = [["A", "LONG"].map(String::from), ["wide cell", "x"].map(String::from)];
        assert_eq!(format_rows(&rows), "A           LONG\nwide cell   x\n");
    }

    #[test]
    fn the_plugin_table_shows_dashes_for_unknowns_and_messages_below() {
        let failed = PluginView {
            file: "broken.wasm".into(),
            name: None,
            version: None,
            state: PluginState::Failed,
            kinds: vec![],
            capabilities: vec![],
            warnings: vec![],
            origin: None,
            message: Some("broken.wasm: not a WebAssembly file".into()),
            source: None,
        };
        let granted_unused = PluginView {
            file: "noop.wasm".into(),
            name: Some("noop".into()),
            version: Some("0.1.0".into()),
            state: PluginState::Ready,
            kinds: vec!["Noop".into()],
            capabilities: vec![],
            warnings: vec!["capability `services` is granted but the component never imports it".into()],
            origin: None,
            message: None,
            source: None,
        };
        assert!(
            plugin_table(&[granted_unused])
                .ends_with("noop.wasm: warning: capability `services` is granted but the component never imports it\n")
        );
        let text = plugin_table(&[failed]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["FILE", "NAME", "VERSION", "STATE", "KINDS"]);
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["broken.wasm", "-", "-", "Failed", "-"]);
        assert_eq!(lines[3], "broken.wasm: not a WebAssembly file", "the file is named once");
    }
}
