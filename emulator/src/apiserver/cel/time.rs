//! Durations and timestamps: parsing and printing them as Go's `time` package and CEL do.

use joinery_core::time::{civil_from_days, days_from_civil};

use super::CelError;
use super::functions::go_quote;

pub(super) const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Parses a duration as Go's `time.ParseDuration` does (`1h30m`, `-1.5s`, `300ms`, `0`).
pub(super) fn parse_duration(text: &str) -> Result<i128, CelError> {
    let invalid = || CelError::Eval(format!("time: invalid duration {}", go_quote(text)));
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(whole_len);
        rest = after;
        let mut fraction = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let fraction_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            fraction = &after_dot[..fraction_len];
            rest = &after_dot[fraction_len..];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        rest = after;
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SECOND,
            "m" => 60 * NANOS_PER_SECOND,
            "h" => 3600 * NANOS_PER_SECOND,
            "" => {
                return Err(CelError::Eval(format!(
                    "time: missing unit in duration {}",
                    go_quote(text)
                )));
            }
            other => {
                return Err(CelError::Eval(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(other),
                    go_quote(text)
                )));
            }
        };
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !fraction.is_empty() {
            let digits = &fraction[..fraction.len().min(18)];
            let numerator: i128 = digits.parse().map_err(|_| invalid())?;
            value += numerator * scale / 10_i128.pow(digits.len() as u32);
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > i128::from(i64::MAX) {
            return Err(invalid());
        }
    }
    Ok(if negative { -total } else { total })
}

/// A duration as CEL prints it: seconds with the needed fraction, `"90s"`, `"1.5s"`.
pub(super) fn format_duration(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.abs();
    let (seconds, fraction) = (magnitude / NANOS_PER_SECOND, magnitude % NANOS_PER_SECOND);
    if fraction == 0 {
        format!("{sign}{seconds}s")
    } else {
        let digits = format!("{fraction:09}");
        format!("{sign}{seconds}.{}s", digits.trim_end_matches('0'))
    }
}

/// Parses an RFC 3339 timestamp (`2024-01-02T03:04:05Z`, `...05.5+01:00`).
pub(super) fn parse_timestamp(text: &str) -> Result<i128, CelError> {
    let invalid = || CelError::Eval(format!("invalid timestamp {}", go_quote(text)));
    let number = |from: usize, to: usize| -> Result<i64, CelError> {
        text.get(from..to)
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .ok_or_else(invalid)
    };
    let separator =
        |at: usize, allowed: &[u8]| text.as_bytes().get(at).is_some_and(|b| allowed.contains(b));
    if !(separator(4, b"-")
        && separator(7, b"-")
        && separator(10, b"Tt")
        && separator(13, b":")
        && separator(16, b":"))
    {
        return Err(invalid());
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let mut at = 19;
    let mut nanos: i128 = 0;
    if separator(at, b".") {
        let digits = text
            .get(at + 1..)
            .unwrap_or_default()
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits == 0 {
            return Err(invalid());
        }
        let kept = digits.min(9);
        nanos = i128::from(number(at + 1, at + 1 + kept)?) * 10_i128.pow(9 - kept as u32);
        at += 1 + digits;
    }
    let offset_seconds = match text.get(at..) {
        Some("Z" | "z") => 0,
        Some(zone)
            if zone.len() == 6
                && (zone.starts_with('+') || zone.starts_with('-'))
                && separator(at + 3, b":") =>
        {
            let magnitude = number(at + 1, at + 3)? * 3600 + number(at + 4, at + 6)? * 60;
            if zone.starts_with('-') {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return Err(invalid()),
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(invalid()),
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return Err(invalid());
    }
    let seconds = days_from_civil(year, month, day).ok_or_else(invalid)? * 86_400
        + hour * 3600
        + minute * 60
        + second
        - offset_seconds;
    Ok(i128::from(seconds) * NANOS_PER_SECOND + nanos)
}

/// An RFC 3339 timestamp in UTC, with the fraction of a second when there is one.
pub(super) fn format_timestamp(nanos: i128) -> String {
    let seconds = nanos.div_euclid(NANOS_PER_SECOND);
    let fraction = nanos.rem_euclid(NANOS_PER_SECOND);
    let days = i64::try_from(seconds.div_euclid(86_400)).unwrap_or_default();
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days).unwrap_or((1970, 1, 1));
    let fraction = if fraction == 0 {
        String::new()
    } else {
        format!(".{}", format!("{fraction:09}").trim_end_matches('0'))
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}
