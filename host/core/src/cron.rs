//! Cron schedules of NodePool disruption budgets, and when a scheduled budget is active.
//!
//! A budget with `schedule` and `duration` constrains disruption only while it is active: the
//! schedule (standard five-field cron, always UTC) fired at some time `t` with
//! `now − duration < t ≤ now`. The grammar and matching follow the cron library upstream
//! Karpenter uses (robfig/cron's standard parser):
//!
//! - fields: minute (0–59), hour (0–23), day of month (1–31), month (1–12 or `JAN`–`DEC`),
//!   day of week (0–6 or `SUN`–`SAT`), names in any case and only in their own field;
//! - each field is a comma-separated list of `*` (or `?`), `N`, `A-B`, each optionally with
//!   `/STEP`; `N/STEP` means `N-max/STEP`;
//! - descriptors: `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`;
//! - when both day of month and day of week are restricted, a day matches if **either** does;
//!   when one of them contains `*` or `?` (without a step over 1, so not `*/2`), both must match.
//!
//! The cron engine is [croner]: it parses the fields into value sets, applies the day rule and
//! finds the hits. Its own grammar is wider than upstream's — seconds and year fields, `L`,
//! `W`, `#`, `7` for Sunday, names replaced anywhere in the pattern, empty list items skipped —
//! and a few readings differ (`?` outside the day fields, `*/1` or `*,5` counting as a
//! restriction of a day field, no `@midnight`). So [`Schedule::parse`] first holds a schedule to
//! upstream's grammar, token by token, and hands croner the same schedule in the numeric subset
//! both read alike; whatever upstream rejects is an error here too, naming the schedule.
//!
//! One deliberate difference: a schedule that never fires (`0 0 30 2 *`) is never active here,
//! while upstream's library gives up after five years and returns a zero time, which upstream
//! reads as active.

use std::time::{Duration, SystemTime};

use jiff::Timestamp;

use crate::time::{system_time, timestamp};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;

/// Why a schedule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron schedule {schedule:?}: {reason}")]
pub struct CronError {
    /// The schedule as written.
    pub schedule: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A parsed schedule. Two schedules are equal when croner parsed the same value sets from
/// them (`@daily` and `0 0 * * *`, but not `*/60 * * * *` and `0 * * * *`).
#[derive(Clone, PartialEq, Eq)]
pub struct Schedule {
    cron: Cron,
}

impl std::fmt::Debug for Schedule {
    // Croner's own `Debug` lists every year up to 5000.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Schedule")
            .field(&self.cron.as_str())
            .finish()
    }
}

/// One of the five fields, as upstream's parser bounds and names it.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
    },
    Field {
        name: "day of week",
        min: 0,
        max: 6,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    },
];

/// Upstream's descriptors (case-sensitive, as upstream matches them). `@every` is left out: the
/// NodePool schema does not admit it.
fn descriptor(spec: &str) -> Option<&'static str> {
    Some(match spec {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

impl Schedule {
    /// Parses a five-field schedule or a descriptor.
    pub fn parse(schedule: &str) -> Result<Schedule, CronError> {
        let error = |reason: String| CronError {
            schedule: schedule.to_string(),
            reason,
        };
        let spec = schedule.trim();
        let expanded = if spec.starts_with('@') {
            descriptor(spec).ok_or_else(|| error(format!("unknown descriptor {spec}")))?
        } else {
            spec
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != FIELDS.len() {
            let seconds = if fields.len() == 6 {
                "; a seconds field is not supported"
            } else {
                ""
            };
            return Err(error(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}{seconds}",
                fields.len()
            )));
        }
        let standard = FIELDS
            .iter()
            .zip(fields)
            .map(|(field, text)| {
                field
                    .standard(text)
                    .map_err(|reason| error(format!("{}: {reason}", field.name)))
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(" ");
        // Five fields only, and a day matches if either day field does when both are restricted
        // (croner's `dom_and_dow` would require both).
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(false)
            .build();
        let cron = parser.parse(&standard).map_err(|e| error(e.to_string()))?;
        Ok(Schedule { cron })
    }

    /// Whether the schedule fires at the minute starting at `at` (seconds ignored).
    pub fn fires_at(&self, at: SystemTime) -> bool {
        let Some(at) = timestamp(at) else {
            return false;
        };
        let Ok(minute) = Timestamp::from_second(at.as_second().div_euclid(60) * 60) else {
            return false;
        };
        self.cron
            .is_time_matching(&minute.to_zoned(TimeZone::UTC))
            .unwrap_or(false)
    }

    /// The first time after `after` (strictly) the schedule fires, looking no further than
    /// `until`.
    pub fn next_after(&self, after: SystemTime, until: SystemTime) -> Option<SystemTime> {
        let after = timestamp(after)?.to_zoned(TimeZone::UTC);
        let next = system_time(
            self.cron
                .find_next_occurrence(&after, false)
                .ok()?
                .timestamp(),
        );
        (next <= until).then_some(next)
    }

    /// The last time at or before `at` the schedule fired.
    pub fn last_at_or_before(&self, at: SystemTime) -> Option<SystemTime> {
        let at = timestamp(at)?.to_zoned(TimeZone::UTC);
        Some(system_time(
            self.cron
                .find_previous_occurrence(&at, true)
                .ok()?
                .timestamp(),
        ))
    }

    /// Whether a budget with this schedule and `duration` is active at `now`: the schedule
    /// fired in `(now − duration, now]`.
    pub fn active(&self, duration: Duration, now: SystemTime) -> bool {
        self.last_at_or_before(now)
            .is_some_and(|hit| now.checked_sub(duration).is_none_or(|from| hit > from))
    }
}

impl Field {
    /// Checks one field against upstream's grammar and writes it in the numeric form croner
    /// reads the same way: names as numbers, `N/STEP` as `N-max/STEP`, and the whole field as
    /// `*` when upstream marks it unrestricted (a `*` or `?` item without a step over 1).
    fn standard(&self, text: &str) -> Result<String, String> {
        let mut items = Vec::new();
        let mut star = false;
        for item in text.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => {
                    let step: u64 = step
                        .parse()
                        .map_err(|_| format!("step {step:?} is not a number"))?;
                    if step == 0 {
                        return Err("a step of 0 never fires".into());
                    }
                    // A step past the field's span selects only its start, as upstream's does.
                    (range, Some(step.min(u64::from(self.max - self.min + 1))))
                }
                None => (item, None),
            };
            // Upstream reads anything after `*-` or `?-` as `*` too.
            if range == "*" || range == "?" || range.starts_with("*-") || range.starts_with("?-") {
                match step {
                    None | Some(1) => star = true,
                    Some(step) => items.push(format!("*/{step}")),
                }
                continue;
            }
            let (start, end) = match range.split_once('-') {
                Some((start, end)) => (self.value(start)?, self.value(end)?),
                None => {
                    let single = self.value(range)?;
                    (single, if step.is_some() { self.max } else { single })
                }
            };
            if start > end {
                return Err(format!("range {range:?} runs backwards"));
            }
            items.push(match step {
                None if start == end => start.to_string(),
                None => format!("{start}-{end}"),
                Some(step) => format!("{start}-{end}/{step}"),
            });
        }
        Ok(if star {
            "*".to_string()
        } else {
            items.join(",")
        })
    }

    fn value(&self, text: &str) -> Result<u32, String> {
        let lower = text.to_ascii_lowercase();
        let parsed = match self.names.iter().position(|n| *n == lower) {
            Some(index) => self.min + index as u32,
            None => text
                .parse()
                .map_err(|_| format!("{text:?} is not a number or a name"))?,
        };
        if parsed < self.min || parsed > self.max {
            return Err(format!("{parsed} is outside {}-{}", self.min, self.max));
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// A UTC date and time.
    fn utc(year: i64, month: u32, day: u32, hour: u32, minute: u32) -> SystemTime {
        let days = crate::time::days_from_civil(year, i64::from(month), i64::from(day)).unwrap();
        UNIX_EPOCH
            + Duration::from_secs(
                (days * 86_400) as u64 + u64::from(hour) * 3_600 + u64::from(minute) * 60,
            )
    }

    #[test]
    fn civil_dates_and_weekdays_are_right() {
        let at = utc(2024, 2, 29, 13, 45);
        assert!(Schedule::parse("45 13 29 2 *").unwrap().fires_at(at));
        assert!(
            Schedule::parse("* * * * THU").unwrap().fires_at(at),
            "2024-02-29 was a Thursday"
        );
        assert!(!Schedule::parse("* * * * WED,FRI").unwrap().fires_at(at));
        assert!(
            Schedule::parse("0 0 1 12 tue")
                .unwrap()
                .fires_at(utc(2026, 12, 1, 0, 0)),
            "2026-12-01 is a Tuesday"
        );
        assert!(
            Schedule::parse("0 0 1 1 4").unwrap().fires_at(UNIX_EPOCH),
            "1970-01-01 was a Thursday"
        );
        assert!(
            Schedule::parse("45 13 * * *")
                .unwrap()
                .fires_at(at + Duration::from_secs(59)),
            "seconds are ignored"
        );
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
        assert!(
            s.fires_at(utc(2026, 1, 1, 3, 10))
                && s.fires_at(utc(2026, 1, 1, 3, 50))
                && !s.fires_at(utc(2026, 1, 1, 3, 0))
        );
    }

    #[test]
    fn upstream_grammar_beyond_the_basics() {
        // A name with a step runs to the field's end: Monday, Wednesday, Friday.
        let s = Schedule::parse("0 0 * * Mon/2").unwrap();
        let fired: Vec<u32> = (6..13)
            .filter(|day| s.fires_at(utc(2026, 12, *day, 0, 0)))
            .collect();
        assert_eq!(fired, [7, 9, 11]);
        // `?` is `*` in every field.
        assert_eq!(
            Schedule::parse("? ? ? ? ?").unwrap(),
            Schedule::parse("* * * * *").unwrap()
        );
        // A step past the field's span keeps only its start.
        let s = Schedule::parse("*/70000 * * * *").unwrap();
        let fired: Vec<u64> = (0..60)
            .filter(|m| s.fires_at(utc(2026, 12, 1, 3, 0) + Duration::from_secs(m * 60)))
            .collect();
        assert_eq!(fired, [0]);
        // Upstream reads `*-anything` as `*`.
        assert_eq!(
            Schedule::parse("*-5 * * * *").unwrap(),
            Schedule::parse("* * * * *").unwrap()
        );
        // Numbers read as upstream's (Go's `Atoi`) do: a leading `+` or zeros are fine.
        assert_eq!(
            Schedule::parse("+05 * * * +1").unwrap(),
            Schedule::parse("5 * * * 1").unwrap()
        );
        // Surrounding and repeated whitespace is fine.
        assert_eq!(
            Schedule::parse("  0   9 * *\t1-5 ").unwrap(),
            Schedule::parse("0 9 * * 1-5").unwrap()
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_like_cron() {
        // Both restricted: either matches (the 13th, or any Friday).
        let either = Schedule::parse("0 0 13 * 5").unwrap();
        assert!(
            either.fires_at(utc(2026, 12, 13, 0, 0)),
            "the 13th, a Sunday"
        );
        assert!(either.fires_at(utc(2026, 12, 4, 0, 0)), "a Friday");
        assert!(!either.fires_at(utc(2026, 12, 5, 0, 0)));
        // One is `*`: both must match.
        let fridays = Schedule::parse("0 0 * * 5").unwrap();
        assert!(!fridays.fires_at(utc(2026, 12, 13, 0, 0)));
        // A stepped star is a restriction.
        let odd_days_or_sunday = Schedule::parse("0 0 */2 * 0").unwrap();
        assert!(
            odd_days_or_sunday.fires_at(utc(2026, 12, 6, 0, 0)),
            "Sunday the 6th"
        );
        assert!(
            odd_days_or_sunday.fires_at(utc(2026, 12, 3, 0, 0)),
            "the 3rd"
        );
        // `?`, `*/1` and a list with `*` are not restrictions: the 13th only, whatever its weekday.
        for unrestricted in ["?", "*/1", "*,5", "?,1-3"] {
            let s = Schedule::parse(&format!("0 0 13 * {unrestricted}")).unwrap();
            assert!(s.fires_at(utc(2026, 12, 13, 0, 0)), "{unrestricted}");
            assert!(
                !s.fires_at(utc(2026, 12, 4, 0, 0)),
                "{unrestricted}: a Friday, not the 13th"
            );
            let s = Schedule::parse(&format!("0 0 {unrestricted} * 5")).unwrap();
            assert!(
                s.fires_at(utc(2026, 12, 4, 0, 0)) && !s.fires_at(utc(2026, 12, 13, 0, 0)),
                "{unrestricted}"
            );
        }
    }

    #[test]
    fn descriptors_and_errors() {
        assert_eq!(
            Schedule::parse("@daily").unwrap(),
            Schedule::parse("0 0 * * *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@midnight").unwrap(),
            Schedule::parse("0 0 * * *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@annually").unwrap(),
            Schedule::parse("@yearly").unwrap()
        );
        assert_eq!(
            Schedule::parse("@yearly").unwrap(),
            Schedule::parse("0 0 1 1 *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@monthly").unwrap(),
            Schedule::parse("0 0 1 * *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@weekly").unwrap(),
            Schedule::parse("0 0 * * SUN").unwrap()
        );
        assert_eq!(
            Schedule::parse(" @hourly ").unwrap(),
            Schedule::parse("0 * * * *").unwrap()
        );
        for bad in [
            "@fortnightly",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "*/0 * * * *",
            "5-1 * * * *",
            "x * * * *",
        ] {
            let e = Schedule::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn what_upstream_rejects_is_rejected() {
        for bad in [
            // croner extensions upstream's standard parser does not know
            "0 0 0 * * *",
            "0 0 * * * 2027",
            "0 0 0 1 1 * 2027",
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 LW * *",
            "0 0 * * 5L",
            "0 0 * * 5#2",
            "0 0 * * MON-SUN",
            "/5 * * * *",
            // names out of their field, upper-case descriptors, `@every`
            "0 0 * MON *",
            "0 0 * * JAN",
            "0 0 JAN * *",
            "0 0 * * monday",
            "@DAILY",
            "@every 1h",
            // malformed lists, ranges and steps
            "1,,2 * * * *",
            "1, * * * *",
            "1-2-3 * * * *",
            "-5 * * * *",
            "*/2/3 * * * *",
            "*/x * * * *",
            "TZ=UTC 0 * * * *",
            "",
            "   ",
        ] {
            let e = Schedule::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        let e = Schedule::parse("0 0 9 * * *").unwrap_err();
        assert!(
            e.reason.contains("found 6") && e.reason.contains("seconds"),
            "{e}"
        );
        let e = Schedule::parse("0 0 * * 7").unwrap_err();
        assert_eq!(e.reason, "day of week: 7 is outside 0-6");
    }

    #[test]
    fn a_budget_is_active_for_its_duration_after_each_hit() {
        // Weekdays 09:00 UTC, for 8 hours.
        let s = Schedule::parse("0 9 * * 1-5").unwrap();
        let eight_hours = Duration::from_secs(8 * 3_600);
        assert!(
            !s.active(eight_hours, utc(2026, 12, 1, 8, 59)),
            "before the hit"
        );
        assert!(
            s.active(eight_hours, utc(2026, 12, 1, 9, 0)),
            "the hit itself counts"
        );
        assert!(s.active(eight_hours, utc(2026, 12, 1, 16, 59)));
        assert!(
            !s.active(eight_hours, utc(2026, 12, 1, 17, 0)),
            "exactly duration after: over"
        );
        assert!(!s.active(eight_hours, utc(2026, 12, 5, 10, 0)), "Saturday");
        assert!(
            s.active(Duration::from_secs(30 * 86_400), utc(2026, 12, 31, 0, 0)),
            "a long window still finds the hit"
        );
        let half_second = Duration::from_millis(500);
        assert!(
            s.active(eight_hours, utc(2026, 12, 1, 9, 0) + half_second),
            "between whole seconds"
        );
        assert!(s.active(eight_hours, utc(2026, 12, 1, 17, 0) - half_second));
        assert!(!s.active(eight_hours, utc(2026, 12, 1, 17, 0) + half_second));
        assert!(
            !s.active(Duration::ZERO, utc(2026, 12, 1, 9, 0)),
            "a zero duration is never active"
        );
    }

    #[test]
    fn next_and_last_hits() {
        let s = Schedule::parse("30 9 * * *").unwrap();
        let day = Duration::from_secs(86_400);
        assert_eq!(
            s.next_after(utc(2026, 12, 1, 9, 30), utc(2026, 12, 3, 0, 0)),
            Some(utc(2026, 12, 2, 9, 30)),
            "strictly after"
        );
        assert_eq!(
            s.next_after(utc(2026, 12, 1, 9, 29), utc(2026, 12, 3, 0, 0)),
            Some(utc(2026, 12, 1, 9, 30))
        );
        assert_eq!(
            s.next_after(utc(2026, 12, 1, 9, 30), utc(2026, 12, 2, 9, 29)),
            None,
            "not past `until`"
        );
        assert_eq!(
            s.last_at_or_before(utc(2026, 12, 1, 9, 30)),
            Some(utc(2026, 12, 1, 9, 30))
        );
        assert_eq!(
            s.last_at_or_before(utc(2026, 12, 1, 9, 29)),
            Some(utc(2026, 12, 1, 9, 30) - day)
        );
        // Leap days only.
        let s = Schedule::parse("0 0 29 2 *").unwrap();
        assert_eq!(
            s.next_after(utc(2025, 1, 1, 0, 0), utc(2030, 1, 1, 0, 0)),
            Some(utc(2028, 2, 29, 0, 0))
        );
        assert!(s.active(Duration::from_secs(366 * 86_400), utc(2025, 2, 28, 0, 0)));
    }

    #[test]
    fn a_schedule_that_never_fires_is_never_active() {
        for never in ["0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            let s = Schedule::parse(never).unwrap();
            assert!(
                !s.active(Duration::from_secs(365 * 86_400), utc(2026, 12, 1, 0, 0)),
                "{never}"
            );
            assert_eq!(
                s.next_after(utc(2026, 12, 1, 0, 0), utc(2036, 12, 1, 0, 0)),
                None,
                "{never}"
            );
        }
        // With a day of week as well, the day rule's "either" makes it fire.
        assert!(
            Schedule::parse("0 0 30 2 MON")
                .unwrap()
                .active(Duration::from_secs(7 * 86_400), utc(2027, 2, 3, 0, 0)),
            "Monday 1 February 2027"
        );
    }
}
