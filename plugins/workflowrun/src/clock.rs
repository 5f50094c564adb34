//! Wall-clock time as RFC 3339 text and back, from the WASI clock the sandbox provides.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds after the Unix epoch; a clock before 1970 reads as the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `secs` seconds after the Unix epoch as RFC 3339 text in UTC, to the second: `2026-11-24T01:02:03Z`.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The seconds after the Unix epoch of RFC 3339 text in UTC (`YYYY-MM-DDTHH:MM:SS[.frac]Z`,
/// as [`rfc3339`] writes it); `None` for anything else or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = &text[19..];
    let rest = rest.strip_prefix('.').map_or(rest, |f| f.trim_start_matches(|c: char| c.is_ascii_digit()));
    if !matches!(rest, "Z" | "z") || !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as u32, d as u32);
    u64::try_from(days).ok().map(|days| days * 86_400 + h * 3600 + mi * 60 + s)
}

/// The proleptic Gregorian date `days` days after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days from 1970-01-01 to the proleptic Gregorian date `y-m-d` (the inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_known_instants() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_795_482_123, "2026-11-24T01:02:03Z"),
        ] {
            assert_eq!(rfc3339(secs), text);
            assert_eq!(parse_rfc3339(text), Some(secs));
        }
        assert_eq!(parse_rfc3339("2026-11-24T01:02:03.250Z"), Some(1_795_482_123));
        for bad in ["", "2026-11-24", "2026-11-24T01:02:03+02:00", "2026-13-24T01:02:03Z", "1969-12-31T23:59:59Z"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert!(now_secs() > 1_700_000_000);
    }
}
