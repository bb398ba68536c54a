//! Duration strings as used by the Karpenter API.
//!
//! Karpenter writes durations in Go's `time.Duration` text syntax (`"30s"`, `"1h30m"`,
//! `"720h"`). Two wrappers live here:
//!
//! * [`NillableDuration`] — a duration that may also be the literal `Never` (used by
//!   `expireAfter` and `consolidateAfter`).
//! * [`Duration`] — a plain duration (used by `terminationGracePeriod` and budget `duration`).
//!
//! Both keep the text exactly as it was written and serialize it back unchanged, so that reading
//! and re-writing an object never rewrites `720h` as `720h0m0s` (which would cause diff noise for
//! GitOps tools). Values built from a [`std::time::Duration`] are rendered the way Go's
//! `Duration.String()` renders them.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::patterns;

/// The literal that disables a [`NillableDuration`].
pub const NEVER: &str = "Never";

/// Error returned when a duration string cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty.
    #[error("empty duration string")]
    Empty,
    /// The input was negative; Karpenter durations are never negative.
    #[error("negative duration {0:?} is not allowed")]
    Negative(String),
    /// The input is not valid Go duration syntax.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A segment had no unit or an unknown unit.
    #[error("unknown or missing unit in duration {0:?}")]
    Unit(String),
    /// The value does not fit in a duration.
    #[error("duration {0:?} is out of range")]
    Overflow(String),
}

/// Parses a duration in Go's `time.ParseDuration` syntax.
///
/// Accepts a sequence of decimal numbers (optionally fractional) each followed by a unit
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g. `"300ms"`, `"1.5h"`, `"2h45m"`, plus the bare
/// `"0"`. A leading `+` is accepted; negative durations are rejected because no Karpenter field
/// can hold one.
pub fn parse_go_duration(input: &str) -> Result<std::time::Duration, DurationError> {
    let mut s = input;
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Some(rest) = s.strip_prefix('-') {
        // "-0" is technically valid Go; everything else negative is not representable.
        if rest.chars().all(|c| c == '0') && !rest.is_empty() {
            return Ok(std::time::Duration::ZERO);
        }
        return Err(DurationError::Negative(input.to_owned()));
    }
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError::Invalid(input.to_owned()));
    }

    let overflow = || DurationError::Overflow(input.to_owned());
    let mut total_nanos: u128 = 0;
    while !s.is_empty() {
        // Integer part.
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, rest) = s.split_at(int_len);
        s = rest;
        // Fractional part.
        let mut frac_digits = "";
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &rest[..frac_len];
            s = &rest[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::Invalid(input.to_owned()));
        }
        // Unit: everything up to the next digit or '.'.
        let unit_len = s
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(s.len(), |(i, _)| i);
        let (unit, rest) = s.split_at(unit_len);
        s = rest;
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            _ => return Err(DurationError::Unit(input.to_owned())),
        };
        let int_value: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| overflow())?
        };
        let mut nanos = int_value.checked_mul(unit_nanos).ok_or_else(overflow)?;
        if !frac_digits.is_empty() {
            // Go truncates fractional nanoseconds; do the same.
            let mut scale: u128 = 1;
            let mut frac_value: u128 = 0;
            for d in frac_digits.bytes().take(18) {
                frac_value = frac_value * 10 + u128::from(d - b'0');
                scale *= 10;
            }
            nanos = nanos
                .checked_add(frac_value * unit_nanos / scale)
                .ok_or_else(overflow)?;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(overflow)?;
    }
    // Go durations are int64 nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(overflow());
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| overflow())?;
    let sub = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| overflow())?;
    Ok(std::time::Duration::new(secs, sub))
}

/// Formats a duration the way Go's `time.Duration.String()` does (`"1h0m0s"`, `"1.5s"`,
/// `"300ms"`, `"0s"`).
pub fn format_go_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        // Sub-second: pick the largest unit that keeps an integer part.
        let (unit, per) = if nanos < 1_000 {
            ("ns", 1u128)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", fixed_point(nanos, per));
    }
    let total_secs = nanos / 1_000_000_000;
    let frac_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3_600;
    let minutes = (total_secs % 3_600) / 60;
    let seconds = total_secs % 60;
    let secs_text = fixed_point(seconds * 1_000_000_000 + frac_nanos, 1_000_000_000);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&secs_text);
    out.push('s');
    out
}

/// Renders `value / per` with the fractional part trimmed of trailing zeros.
fn fixed_point(value: u128, per: u128) -> String {
    let int = value / per;
    let frac = value % per;
    if frac == 0 {
        return int.to_string();
    }
    let width = per.ilog10() as usize;
    let frac_text = format!("{frac:0width$}");
    format!("{int}.{}", frac_text.trim_end_matches('0'))
}

/// A duration that may be disabled with the literal `Never`.
///
/// Mirrors upstream's `NillableDuration`: `Never` means "no duration" (the feature it controls is
/// off), anything else is a Go duration string. The original text is kept and written back as is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NillableDuration {
    raw: String,
    value: Option<std::time::Duration>,
}

impl NillableDuration {
    /// The disabled value, written as `Never`.
    pub fn never() -> Self {
        Self {
            raw: NEVER.to_owned(),
            value: None,
        }
    }

    /// A set duration, rendered in Go's `Duration.String()` form.
    pub fn from_std(d: std::time::Duration) -> Self {
        Self {
            raw: format_go_duration(d),
            value: Some(d),
        }
    }

    /// Parses `Never` or a Go duration string, keeping the text as written.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        if text == NEVER {
            return Ok(Self::never());
        }
        Ok(Self {
            raw: text.to_owned(),
            value: Some(parse_go_duration(text)?),
        })
    }

    /// The duration, or `None` when the value is `Never`.
    pub fn duration(&self) -> Option<std::time::Duration> {
        self.value
    }

    /// Whether the value is `Never`.
    pub fn is_never(&self) -> bool {
        self.value.is_none()
    }

    /// The text exactly as it will be serialized.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl From<std::time::Duration> for NillableDuration {
    fn from(d: std::time::Duration) -> Self {
        Self::from_std(d)
    }
}

impl From<Option<std::time::Duration>> for NillableDuration {
    fn from(d: Option<std::time::Duration>) -> Self {
        d.map_or_else(Self::never, Self::from_std)
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": patterns::NILLABLE_DURATION,
        })
    }
}

/// A Go duration string (never `Never`), kept exactly as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Duration {
    raw: String,
    value: std::time::Duration,
}

impl Duration {
    /// Builds a value rendered in Go's `Duration.String()` form.
    pub fn from_std(d: std::time::Duration) -> Self {
        Self {
            raw: format_go_duration(d),
            value: d,
        }
    }

    /// Parses a Go duration string, keeping the text as written.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        Ok(Self {
            raw: text.to_owned(),
            value: parse_go_duration(text)?,
        })
    }

    /// The parsed duration.
    pub fn duration(&self) -> std::time::Duration {
        self.value
    }

    /// The text exactly as it will be serialized.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Self::from_std(d)
    }
}

impl FromStr for Duration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": patterns::DURATION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as Std;

    #[test]
    fn parses_go_syntax() {
        assert_eq!(parse_go_duration("0").unwrap(), Std::ZERO);
        assert_eq!(parse_go_duration("0s").unwrap(), Std::ZERO);
        assert_eq!(
            parse_go_duration("720h").unwrap(),
            Std::from_secs(720 * 3600)
        );
        assert_eq!(parse_go_duration("1h30m").unwrap(), Std::from_secs(5400));
        assert_eq!(parse_go_duration("1.5s").unwrap(), Std::from_millis(1500));
        assert_eq!(parse_go_duration("300ms").unwrap(), Std::from_millis(300));
        assert_eq!(parse_go_duration("2us").unwrap(), Std::from_micros(2));
        assert_eq!(parse_go_duration("+5m").unwrap(), Std::from_secs(300));
        assert_eq!(parse_go_duration(".5h").unwrap(), Std::from_secs(1800));
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("-5s").is_err());
        assert!(parse_go_duration("h").is_err());
        assert!(parse_go_duration("Never").is_err());
        assert!(parse_go_duration("99999999999h").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Std::ZERO), "0s");
        assert_eq!(format_go_duration(Std::from_secs(720 * 3600)), "720h0m0s");
        assert_eq!(format_go_duration(Std::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Std::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Std::from_millis(300)), "300ms");
        assert_eq!(format_go_duration(Std::from_nanos(1500)), "1.5µs");
        assert_eq!(format_go_duration(Std::from_nanos(7)), "7ns");
    }

    #[test]
    fn nillable_keeps_raw_text() {
        let d: NillableDuration = serde_json::from_str("\"720h\"").unwrap();
        assert_eq!(d.duration(), Some(Std::from_secs(720 * 3600)));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"720h\"");
        let never: NillableDuration = serde_json::from_str("\"Never\"").unwrap();
        assert!(never.is_never());
        assert_eq!(serde_json::to_string(&never).unwrap(), "\"Never\"");
        assert!(serde_json::from_str::<NillableDuration>("\"soon\"").is_err());
        assert_eq!(NillableDuration::from(None).as_str(), "Never");
        assert_eq!(
            NillableDuration::from_std(Std::from_secs(30)).as_str(),
            "30s"
        );
    }

    #[test]
    fn plain_duration_rejects_never() {
        assert!(serde_json::from_str::<Duration>("\"Never\"").is_err());
        let d: Duration = serde_json::from_str("\"1h0m0s\"").unwrap();
        assert_eq!(d.as_str(), "1h0m0s");
        assert_eq!(d.duration(), Std::from_secs(3600));
    }
}
