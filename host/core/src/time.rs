//! Points in time as the Kubernetes and cloud APIs write them (RFC 3339, UTC), and the
//! conversions between `SystemTime` and jiff's [`Timestamp`], in one place: the host, the
//! emulator and the fake clouds all format and parse timestamps through here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// `at` as a jiff timestamp (`None` outside the years −9999 to 9999).
pub fn timestamp(at: SystemTime) -> Option<Timestamp> {
    let nanos = match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).ok()?,
        Err(before) => -i128::try_from(before.duration().as_nanos()).ok()?,
    };
    Timestamp::from_nanosecond(nanos).ok()
}

/// A jiff timestamp as a `SystemTime`.
pub fn system_time(at: Timestamp) -> SystemTime {
    let nanos = at.as_nanosecond();
    let magnitude = nanos.unsigned_abs();
    let span = Duration::new(
        (magnitude / 1_000_000_000) as u64,
        (magnitude % 1_000_000_000) as u32,
    );
    if nanos >= 0 {
        UNIX_EPOCH + span
    } else {
        UNIX_EPOCH - span
    }
}

/// `at` in RFC 3339, UTC, whole seconds (`2024-02-29T12:00:00Z`), as Kubernetes writes
/// `creationTimestamp`; times outside the years −9999 to 9999 are written as the epoch.
pub fn rfc3339(at: SystemTime) -> String {
    let seconds = timestamp(at).map_or(0, |t| t.as_second());
    Timestamp::from_second(seconds)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// An RFC 3339 timestamp (`2024-02-29T12:00:00Z`, with or without fractional seconds, with
/// `Z` or a `±hh:mm` offset, `T`, `t` or a space between date and time).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    text.parse::<Timestamp>().ok().map(system_time)
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (`month` 1–12);
/// `None` for a date that does not exist or lies outside the years −9999 to 9999.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    let date = jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .ok()?;
    let epoch = jiff::civil::date(1970, 1, 1);
    Some(i64::from(date.since(epoch).ok()?.get_days()))
}

/// The proleptic Gregorian date `(year, month 1–12, day 1–31)` of a day count since
/// 1970-01-01 (`None` outside the years −9999 to 9999).
pub fn civil_from_days(days: i64) -> Option<(i64, i64, i64)> {
    let days = i32::try_from(days).ok()?;
    let date = jiff::civil::date(1970, 1, 1)
        .checked_add(jiff::Span::new().try_days(days).ok()?)
        .ok()?;
    Some((
        i64::from(date.year()),
        i64::from(date.month()),
        i64::from(date.day()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_and_read_as_kubernetes_does() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_208_000) + Duration::from_millis(250);
        assert_eq!(rfc3339(at), "2024-02-29T12:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let whole = UNIX_EPOCH + Duration::from_secs(1_709_208_000);
        assert_eq!(parse_rfc3339("2024-02-29T12:00:00Z"), Some(whole));
        assert_eq!(parse_rfc3339("2024-02-29t14:00:00+02:00"), Some(whole));
        assert_eq!(parse_rfc3339("2024-02-29 12:00:00Z"), Some(whole));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00.25Z"),
            Some(whole + Duration::from_millis(250))
        );
        assert_eq!(parse_rfc3339("2024-02-30T12:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        let before = UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(parse_rfc3339("1969-12-31T00:00:00Z"), Some(before));
        assert_eq!(system_time(timestamp(before).unwrap()), before);
    }

    #[test]
    fn calendar_days_round_trip() {
        assert_eq!(civil_from_days(0), Some((1970, 1, 1)));
        assert_eq!(days_from_civil(2024, 2, 29), Some(19_782));
        assert_eq!(days_from_civil(2023, 2, 29), None);
        for days in [-719_162, -1, 0, 11_016, 19_782, 20_788, 2_932_896] {
            let (y, m, d) = civil_from_days(days).unwrap();
            assert_eq!(days_from_civil(y, m, d), Some(days), "{days}");
        }
    }
}
