//! Wall-clock time for plugins: now (from the WASI clock the sandbox provides), RFC 3339 text, and human durations.
//!
//! Statuses carry times as RFC 3339 text in UTC, and specs carry durations as the same human
//! strings the host config uses (`500ms`, `30s`, `10m`, `1h30m`); these helpers read and write
//! both the way the host does (humantime), so a plugin needs no date code of its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in whole seconds after the Unix epoch; a clock before 1970 reads as the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Now as RFC 3339 text in UTC, to the second: `2026-11-24T01:02:03Z`.
pub fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

/// `secs` seconds after the Unix epoch as RFC 3339 text in UTC, to the second.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// The whole seconds after the Unix epoch of RFC 3339 text (`2026-11-24T01:02:03Z`, with or
/// without a fraction); `None` for anything else or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(text.trim()).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// A human duration (`500ms`, `30s`, `10m`, `1h30m`), as the host config writes them; zero is
/// refused. The error says what is wrong, for a field error.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}); write for example 30s, 10m or 1h30m"))?;
    if d.is_zero() {
        return Err(format!("{text:?} is zero; it must be longer"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_and_knows_leap_days() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00.250Z"), Some(951_782_400));
        for secs in [0, 1, 86_399, 1_700_000_000, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs));
        }
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("2000-13-01T00:00:00Z"), None);
        assert!(now_secs() > 1_700_000_000, "the clock reads now");
    }

    #[test]
    fn durations_are_the_host_configs() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(" 10m "), Ok(Duration::from_secs(600)));
        assert!(parse_duration("0s").unwrap_err().contains("zero"));
        assert!(parse_duration("soon").unwrap_err().contains("not a duration"));
        assert!(parse_duration("10").unwrap_err().contains("not a duration"));
    }
}
