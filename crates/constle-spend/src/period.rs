//! UTC days and months, the periods the day and month caps count over.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

/// The UTC calendar date `now` falls on.
pub(crate) fn utc_day(now: Timestamp) -> Date {
    now.to_zoned_datetime(TimeZone::UTC).date()
}

/// A UTC calendar month, written `YYYY-MM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Month(Date);

impl Month {
    pub(crate) fn of(day: Date) -> Month {
        Month(day.first_of_month())
    }

    /// The month `n` months before this one, or the earliest one there is.
    pub(crate) fn months_before(self, n: i32) -> Month {
        self.0
            .checked_sub(jiff::Span::new().months(n))
            .map_or(Month(Date::MIN.first_of_month()), Month)
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.0.year(), self.0.month())
    }
}

impl FromStr for Month {
    type Err = String;

    fn from_str(s: &str) -> Result<Month, String> {
        let date: Date = format!("{s}-01")
            .parse()
            .map_err(|err| format!("month {s:?}: {err}"))?;
        let month = Month(date);
        // Only the canonical spelling, so one month is one map key.
        (month.to_string() == s)
            .then_some(month)
            .ok_or_else(|| format!("month {s:?} is not written YYYY-MM"))
    }
}

impl serde::Serialize for Month {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Month {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Month, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_months_are_utc() {
        // 2026-03-31T23:30:00-02:00 is already April in UTC.
        let ts: Timestamp = "2026-04-01T01:30:00Z".parse().unwrap();
        assert_eq!(utc_day(ts), jiff::civil::date(2026, 4, 1));
        let before: Timestamp = "2026-03-31T23:59:59.999999999Z".parse().unwrap();
        assert_eq!(Month::of(utc_day(before)).to_string(), "2026-03");
        assert_eq!(Month::of(utc_day(ts)).to_string(), "2026-04");
    }

    #[test]
    fn months_parse_only_canonically() {
        let m: Month = "2026-11".parse().unwrap();
        assert_eq!(m.to_string(), "2026-11");
        assert_eq!(m.months_before(11).to_string(), "2025-12");
        for bad in ["2026-13", "2026-1", "2026-11-01", "x", ""] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
    }
}
