//! Parsing `--interval` values: `50ms`, `0.5s`, `2s`, `1m`, or a bare number of seconds.

use std::time::Duration;

/// Parses an interval; the error says what was expected.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit.trim() {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit; expected a duration such as 50ms, 0.5s or 2"
            ))
        }
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected a duration such as 50ms, 0.5s or 2"))?;
    let secs = v * scale;
    if !(0.001..=3600.0).contains(&secs) {
        return Err(format!(
            "{s:?}: the interval must be between 1ms and 1 hour"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_interval("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_interval("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval(" 1m "), Ok(Duration::from_secs(60)));
        assert!(parse_interval("0ms").is_err());
        assert!(parse_interval("fast").is_err());
        assert!(parse_interval("5h").is_err());
        assert!(parse_interval("-1s").is_err());
    }
}
