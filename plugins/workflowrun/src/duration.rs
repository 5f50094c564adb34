//! Human duration strings (`30s`, `10m`, `1h30m`, `500ms`), as Steward's config writes them.

use std::time::Duration;

/// Parses `text` as one or more `<number><unit>` parts (units `ms`, `s`, `m`, `h`, `d`), summed;
/// the error says what is wrong. Zero is refused: a run cannot end before it starts.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("must be a duration such as 30s, 10m or 1h30m".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "{text:?} is not a duration: expected a number at {rest:?} (for example 30s, 10m, 1h30m)"
            ));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("{text:?} is too large a duration"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            "" => return Err(format!("{text:?} needs a unit after {n}: ms, s, m, h or d")),
            other => return Err(format!("{text:?} has unknown unit {other:?}; use ms, s, m, h or d")),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    if total.is_zero() {
        return Err(format!("{text:?} is zero; a timeout must be positive"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        for (text, secs) in [("30s", 30), ("10m", 600), ("1h30m", 5400), ("2d", 172_800), (" 1m1s ", 61)] {
            assert_eq!(parse(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for (text, needle) in [
            ("", "must be"),
            ("10", "needs a unit"),
            ("5y", "unknown unit"),
            ("m", "expected a number"),
            ("0s", "zero"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
