//! The size limit of what a step records in the status, and how an oversized value is cut.

use serde_json::Value;

/// The most JSON text one recorded value of a step (its arguments, result or error) may take
/// in the status: 16 KiB. A larger value is replaced by the first 16 KiB of its JSON text
/// (as a string) and the step says so (`truncated`, `note`).
pub const STEP_VALUE_LIMIT: usize = 16 * 1024;

/// The most JSON text the run's `output` may take in the status: 64 KiB, cut the same way.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// The budget of the JSON text of the status's `steps`: 512 KiB. Past it, the values
/// (`arguments`, `result`, condition `result`) of the oldest ended records are dropped, except
/// those a replay may still read (see the crate doc). What stays of a record (id, state, tool,
/// call id, attempts, times, error, the note) takes about 250 bytes, so a loop of about 2,000
/// iterations fits; a longer one goes past the budget by those bytes.
pub const STEPS_BUDGET: usize = 512 * 1024;

/// The note of a record whose values were dropped for [`STEPS_BUDGET`].
pub const STEPS_BUDGET_NOTE: &str = "value dropped: the run's status is over its 512 KiB budget";

/// `value` when its JSON text fits in `limit` bytes; else the first `limit` bytes of that text
/// (cut at a character boundary) as a string, and the full size in bytes.
pub fn cut(value: Value, limit: usize) -> (Value, Option<usize>) {
    let text = value.to_string();
    if text.len() <= limit {
        return (value, None);
    }
    (Value::String(prefix(&text, limit).to_string()), Some(text.len()))
}

/// `text` when it fits in `limit` bytes; else its first `limit` bytes at a character boundary and the full size.
pub fn cut_text(text: String, limit: usize) -> (String, Option<usize>) {
    if text.len() <= limit {
        return (text, None);
    }
    let size = text.len();
    (prefix(&text, limit).to_string(), Some(size))
}

fn prefix(text: &str, limit: usize) -> &str {
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_values_stay_and_large_ones_are_cut_at_a_char_boundary() {
        assert_eq!(cut(json!({"a": 1}), 100), (json!({"a": 1}), None));
        let (v, size) = cut(json!("é".repeat(100)), 11);
        assert_eq!(size, Some(202));
        assert_eq!(v, json!("\"ééééé"), "11 bytes would split a character");
        assert_eq!(cut_text("abcdef".into(), 3), ("abc".into(), Some(6)));
        assert_eq!(cut_text("abc".into(), 3), ("abc".into(), None));
    }

    #[test]
    fn the_budget_note_names_the_budget() {
        assert!(STEPS_BUDGET_NOTE.contains(&format!("{} KiB", STEPS_BUDGET / 1024)));
    }
}
