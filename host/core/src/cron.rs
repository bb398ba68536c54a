//! Cron schedules of NodePool disruption budgets, and when a scheduled budget is active.
//!
//! A budget with `schedule` and `duration` constrains disruption only while it is active: the
//! schedule (standard five-field cron, always UTC) fired at some time `t` with
//! `now − duration < t ≤ now`. The grammar and matching follow the cron library upstream
//! Karpenter uses:
//!
//! - fields: minute (0–59), hour (0–23), day of month (1–31), month (1–12 or `JAN`–`DEC`),
//!   day of week (0–6 or `SUN`–`SAT`);
//! - each field is a comma-separated list of `*` (or `?`), `N`, `A-B`, each optionally with
//!   `/STEP`; `N/STEP` means `N-max/STEP`;
//! - descriptors: `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`;
//! - when both day of month and day of week are restricted, a day matches if **either** does;
//!   when one of them is `*` (or `?`, but not `*/2`), both must match.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why a schedule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron schedule {schedule:?}: {reason}")]
pub struct CronError {
    /// The schedule as written.
    pub schedule: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A parsed schedule: the allowed values of each field as bit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Day of month or day of week was `*`/`?`: both day fields must then match.
    any_day: bool,
}

struct Field {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field { min: 0, max: 59, names: &[] };
const HOUR: Field = Field { min: 0, max: 23, names: &[] };
const DAY_OF_MONTH: Field = Field { min: 1, max: 31, names: &[] };
const MONTH: Field =
    Field { min: 1, max: 12, names: &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"] };
const DAY_OF_WEEK: Field = Field { min: 0, max: 6, names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"] };

impl Schedule {
    /// Parses a five-field schedule or a descriptor.
    pub fn parse(schedule: &str) -> Result<Schedule, CronError> {
        let error = |reason: String| CronError { schedule: schedule.to_string(), reason };
        let expanded = match schedule.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => return Err(error(format!("unknown descriptor {other}"))),
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(error(format!("expected 5 fields (minute hour day-of-month month day-of-week), found {}", fields.len())));
        };
        let (days_of_month, dom_star) = parse_field(dom, &DAY_OF_MONTH).map_err(|r| error(format!("day of month: {r}")))?;
        let (days_of_week, dow_star) = parse_field(dow, &DAY_OF_WEEK).map_err(|r| error(format!("day of week: {r}")))?;
        Ok(Schedule {
            minutes: parse_field(minute, &MINUTE).map_err(|r| error(format!("minute: {r}")))?.0,
            hours: parse_field(hour, &HOUR).map_err(|r| error(format!("hour: {r}")))?.0,
            days_of_month,
            months: parse_field(month, &MONTH).map_err(|r| error(format!("month: {r}")))?.0,
            days_of_week,
            any_day: dom_star || dow_star,
        })
    }

    /// Whether the schedule fires at the minute starting at `at` (seconds ignored).
    pub fn fires_at(&self, at: SystemTime) -> bool {
        let civil = Civil::of(at);
        let bit = |set: u64, value: u32| set & (1 << value) != 0;
        let dom = bit(self.days_of_month, civil.day);
        let dow = bit(self.days_of_week, civil.weekday);
        let day = if self.any_day { dom && dow } else { dom || dow };
        bit(self.minutes, civil.minute) && bit(self.hours, civil.hour) && bit(self.months, civil.month) && day
    }

    /// The first time after `after` (strictly) the schedule fires, looking no further than
    /// `until`.
    pub fn next_after(&self, after: SystemTime, until: SystemTime) -> Option<SystemTime> {
        let since = after.duration_since(UNIX_EPOCH).ok()?.as_secs();
        // The next whole minute after `after` (a hit exactly at `after` does not count).
        let mut minute = (since / 60 + 1) * 60;
        let last = until.duration_since(UNIX_EPOCH).ok()?.as_secs();
        while minute <= last {
            let at = UNIX_EPOCH + Duration::from_secs(minute);
            if self.fires_at(at) {
                return Some(at);
            }
            minute += 60;
        }
        None
    }

    /// Whether a budget with this schedule and `duration` is active at `now`: the schedule
    /// fired in `(now − duration, now]`.
    pub fn active(&self, duration: Duration, now: SystemTime) -> bool {
        let from = now.checked_sub(duration).unwrap_or(UNIX_EPOCH);
        self.next_after(from, now).is_some()
    }
}

/// Parses one field into a bit set; the flag says it was `*` or `?` (a step over 1 clears it).
fn parse_field(text: &str, field: &Field) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| format!("step {step:?} is not a number"))?;
                if step == 0 {
                    return Err("a step of 0 never fires".into());
                }
                (range, Some(step))
            }
            None => (part, None),
        };
        let (start, end, part_star) = if range == "*" || range == "?" {
            (field.min, field.max, true)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, field)?, value(b, field)?, false)
        } else {
            let single = value(range, field)?;
            // `N/STEP` runs from N to the field's maximum.
            (single, if step.is_some() { field.max } else { single }, false)
        };
        if start > end {
            return Err(format!("range {range:?} runs backwards"));
        }
        let step = step.unwrap_or(1);
        star |= part_star && step == 1;
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    let parsed = match field.names.iter().position(|n| *n == lower) {
        Some(index) => field.min + index as u32,
        None => text.parse().map_err(|_| format!("{text:?} is not a number or a name"))?,
    };
    if parsed < field.min || parsed > field.max {
        return Err(format!("{parsed} is outside {}-{}", field.min, field.max));
    }
    Ok(parsed)
}

/// A UTC calendar reading of a point in time.
struct Civil {
    month: u32,
    day: u32,
    weekday: u32,
    hour: u32,
    minute: u32,
}

impl Civil {
    fn of(at: SystemTime) -> Civil {
        let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let days = (seconds / 86_400) as i64;
        let of_day = seconds % 86_400;
        let (_, month, day) = crate::clock::civil_from_days(days);
        Civil {
            month: month as u32,
            day: day as u32,
            // 1970-01-01 was a Thursday (4).
            weekday: ((days + 4).rem_euclid(7)) as u32,
            hour: (of_day / 3_600) as u32,
            minute: (of_day % 3_600 / 60) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UTC date and time.
    fn utc(year: i64, month: u32, day: u32, hour: u32, minute: u32) -> SystemTime {
        let days = crate::clock::days_from_civil(year, i64::from(month), i64::from(day));
        UNIX_EPOCH + Duration::from_secs((days * 86_400) as u64 + u64::from(hour) * 3_600 + u64::from(minute) * 60)
    }

    #[test]
    fn civil_dates_and_weekdays_are_right() {
        let c = Civil::of(utc(2024, 2, 29, 13, 45));
        assert_eq!((c.month, c.day, c.hour, c.minute, c.weekday), (2, 29, 13, 45, 4), "2024-02-29 was a Thursday");
        let c = Civil::of(utc(2026, 12, 1, 0, 0));
        assert_eq!((c.month, c.day, c.weekday), (12, 1, 2), "2026-12-01 is a Tuesday");
        let c = Civil::of(UNIX_EPOCH);
        assert_eq!((c.month, c.day, c.weekday), (1, 1, 4));
    }

    #[test]
    fn fields_lists_ranges_steps_and_names() {
        let s = Schedule::parse("*/15 9-17 * * MON-FRI").unwrap();
        assert!(s.fires_at(utc(2026, 12, 1, 9, 0)));
        assert!(s.fires_at(utc(2026, 12, 1, 17, 45)));
        assert!(!s.fires_at(utc(2026, 12, 1, 17, 50)));
        assert!(!s.fires_at(utc(2026, 12, 1, 18, 0)));
        assert!(!s.fires_at(utc(2026, 12, 6, 10, 0)), "a Sunday");
        let s = Schedule::parse("5,35 0 1 jan,jul ?").unwrap();
        assert!(s.fires_at(utc(2027, 7, 1, 0, 35)));
        assert!(!s.fires_at(utc(2027, 8, 1, 0, 35)));
        let s = Schedule::parse("10/20 * * * *").unwrap();
        assert!(s.fires_at(utc(2026, 1, 1, 3, 10)) && s.fires_at(utc(2026, 1, 1, 3, 50)) && !s.fires_at(utc(2026, 1, 1, 3, 0)));
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_like_cron() {
        // Both restricted: either matches (the 13th, or any Friday).
        let either = Schedule::parse("0 0 13 * 5").unwrap();
        assert!(either.fires_at(utc(2026, 12, 13, 0, 0)), "the 13th, a Sunday");
        assert!(either.fires_at(utc(2026, 12, 4, 0, 0)), "a Friday");
        assert!(!either.fires_at(utc(2026, 12, 5, 0, 0)));
        // One is `*`: both must match.
        let fridays = Schedule::parse("0 0 * * 5").unwrap();
        assert!(!fridays.fires_at(utc(2026, 12, 13, 0, 0)));
        // A stepped star is a restriction.
        let odd_days_or_sunday = Schedule::parse("0 0 */2 * 0").unwrap();
        assert!(odd_days_or_sunday.fires_at(utc(2026, 12, 6, 0, 0)), "Sunday the 6th");
        assert!(odd_days_or_sunday.fires_at(utc(2026, 12, 3, 0, 0)), "the 3rd");
    }

    #[test]
    fn descriptors_and_errors() {
        assert_eq!(Schedule::parse("@daily").unwrap(), Schedule::parse("0 0 * * *").unwrap());
        assert_eq!(Schedule::parse("@annually").unwrap(), Schedule::parse("@yearly").unwrap());
        for bad in ["@fortnightly", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 7", "*/0 * * * *", "5-1 * * * *", "x * * * *"] {
            let e = Schedule::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn a_budget_is_active_for_its_duration_after_each_hit() {
        // Weekdays 09:00 UTC, for 8 hours.
        let s = Schedule::parse("0 9 * * 1-5").unwrap();
        let eight_hours = Duration::from_secs(8 * 3_600);
        assert!(!s.active(eight_hours, utc(2026, 12, 1, 8, 59)), "before the hit");
        assert!(s.active(eight_hours, utc(2026, 12, 1, 9, 0)), "the hit itself counts");
        assert!(s.active(eight_hours, utc(2026, 12, 1, 16, 59)));
        assert!(!s.active(eight_hours, utc(2026, 12, 1, 17, 0)), "exactly duration after: over");
        assert!(!s.active(eight_hours, utc(2026, 12, 5, 10, 0)), "Saturday");
        assert!(s.active(Duration::from_secs(30 * 86_400), utc(2026, 12, 31, 0, 0)), "a long window still finds the hit");
    }
}
