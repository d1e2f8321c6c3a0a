//! Exact money arithmetic for the ledger, and the one rule every store
//! applies: a charge is refused if any total would pass its cap.
//!
//! Both stores count in integer [`Units`] of 10⁻¹⁰ USD, so they accept and
//! refuse exactly the same amounts: the Agentfile allows at most 10 decimal
//! places, and an `i64` of those units holds up to about 922 million USD.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive as _;

use crate::{Cap, Caps, Totals};

/// Decimal places of a [`Units`] amount.
pub(crate) const SCALE: u32 = 10;

/// Why an amount cannot be charged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// The amount is below zero. Agentfile validation refuses negative
    /// prices, so this is a caller's bug; it is refused rather than credited.
    #[error("amount {amount} USD is negative; a charge is zero or more")]
    Negative {
        /// The amount.
        amount: Decimal,
    },
    /// The amount has more than 10 decimal places, which the ledger cannot
    /// hold exactly (the Agentfile allows at most 10).
    #[error(
        "amount {amount} USD has more than {SCALE} decimal places; the ledger counts in 1e-10 USD"
    )]
    TooPrecise {
        /// The amount.
        amount: Decimal,
    },
    /// The amount is larger than the ledger can hold (about 922 million USD).
    #[error(
        "amount {amount} USD is larger than the ledger can hold ({} USD)",
        Units::MAX.to_decimal()
    )]
    TooLarge {
        /// The amount.
        amount: Decimal,
    },
}

/// A non-negative amount in units of 10⁻¹⁰ USD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Units(i64);

impl Units {
    pub(crate) const ZERO: Units = Units(0);
    pub(crate) const MAX: Units = Units(i64::MAX);

    /// The exact units of `amount`.
    pub(crate) fn from_decimal(amount: Decimal) -> Result<Units, AmountError> {
        if amount.is_sign_negative() && !amount.is_zero() {
            return Err(AmountError::Negative { amount });
        }
        let scaled = amount
            .checked_mul(Decimal::from(10_i64.pow(SCALE)))
            .ok_or(AmountError::TooLarge { amount })?;
        if !scaled.fract().is_zero() {
            return Err(AmountError::TooPrecise { amount });
        }
        scaled
            .to_i64()
            .map(Units)
            .ok_or(AmountError::TooLarge { amount })
    }

    /// The units a total read back from a store holds.
    pub(crate) fn from_raw(units: i64) -> Option<Units> {
        (units >= 0).then_some(Units(units))
    }

    pub(crate) fn raw(self) -> i64 {
        self.0
    }

    pub(crate) fn to_decimal(self) -> Decimal {
        Decimal::new(self.0, SCALE).normalize()
    }

    pub(crate) fn checked_add(self, other: Units) -> Option<Units> {
        self.0.checked_add(other.0).map(Units)
    }

    /// `self + other`, at most [`Units::MAX`].
    pub(crate) fn saturating_add(self, other: Units) -> Units {
        Units(self.0.saturating_add(other.0))
    }

    /// `self - other`, at least zero (both are non-negative: no overflow).
    pub(crate) fn saturating_sub(self, other: Units) -> Units {
        Units((self.0 - other.0).max(0))
    }

    /// An actual cost as the ledger can hold it: rounded up to the next
    /// unit (a cost is never counted low), at most [`Units::MAX`]. `None`
    /// for a negative amount.
    pub(crate) fn rounded_up(amount: Decimal) -> Option<Units> {
        if amount.is_sign_negative() && !amount.is_zero() {
            return None;
        }
        let scaled = amount
            .checked_mul(Decimal::from(10_i64.pow(SCALE)))
            .map(|d| d.ceil());
        Some(Units(scaled.and_then(|d| d.to_i64()).unwrap_or(i64::MAX)))
    }
}

/// How a settlement moves a total: down by what the hold reserved beyond
/// the actual cost, or up by what the actual cost passed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delta {
    /// The actual cost was this much below the hold.
    Release(Units),
    /// The actual cost was this much above the hold.
    Excess(Units),
}

impl Delta {
    pub(crate) fn between(held: Units, actual: Units) -> Delta {
        if actual <= held {
            Delta::Release(held.saturating_sub(actual))
        } else {
            Delta::Excess(actual.saturating_sub(held))
        }
    }

    /// `total` moved by this delta: never below zero (a total that lost
    /// its period, or was written by hand, is not released into debt),
    /// never past [`Units::MAX`] (the excess was billed: the ledger holds
    /// as much of it as it can, and every cap is passed).
    pub(crate) fn apply(self, total: Units) -> Units {
        match self {
            Delta::Release(units) => total.saturating_sub(units),
            Delta::Excess(units) => total.saturating_add(units),
        }
    }
}

impl fmt::Display for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_decimal(), f)
    }
}

/// Parses the decimal USD form written by [`Display`](fmt::Display).
impl FromStr for Units {
    type Err = String;

    fn from_str(s: &str) -> Result<Units, String> {
        let amount = Decimal::from_str_exact(s).map_err(|err| format!("{s:?}: {err}"))?;
        Units::from_decimal(amount).map_err(|err| err.to_string())
    }
}

/// One cap, as written and in units. A cap is compared, never charged, so
/// its units need not be exact: a cap finer than 10⁻¹⁰ is rounded down
/// (refusing a hair early, never late), one larger than any total can be is
/// no limit in practice, and a negative one (which the Agentfile refuses)
/// is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) usd: Decimal,
    pub(crate) units: Units,
}

impl Limit {
    fn new(usd: Decimal) -> Limit {
        let units = if usd.is_sign_negative() {
            Units::ZERO
        } else {
            let scaled = usd
                .checked_mul(Decimal::from(10_i64.pow(SCALE)))
                .map(|d| d.floor());
            Units(scaled.and_then(|d| d.to_i64()).unwrap_or(i64::MAX))
        };
        Limit { usd, units }
    }
}

/// Stored as the decimal USD string, which a person can read.
impl serde::Serialize for Units {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Units {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Units, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The caps of a run, ready to compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    run: Option<Limit>,
    day: Option<Limit>,
    month: Option<Limit>,
}

impl Limits {
    pub(crate) fn new(caps: &Caps) -> Limits {
        Limits {
            run: caps.per_run.map(Limit::new),
            day: caps.per_day.map(Limit::new),
            month: caps.per_month.map(Limit::new),
        }
    }

    pub(crate) fn get(&self, cap: Cap) -> Option<Limit> {
        match cap {
            Cap::PerRun => self.run,
            Cap::PerDay => self.day,
            Cap::PerMonth => self.month,
        }
    }
}

/// The run, day and month totals, in units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) run: Units,
    pub(crate) day: Units,
    pub(crate) month: Units,
}

/// What a store decided about one charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Charged; the totals after.
    Charged(Tally),
    /// `cap` would be passed; nothing was charged. The totals before.
    Refused {
        cap: Cap,
        limit: Decimal,
        before: Tally,
    },
    /// The `total` would pass [`Units::MAX`]; nothing was charged.
    Overflow { total: Cap, before: Tally },
}

impl Tally {
    pub(crate) fn get(&self, cap: Cap) -> Units {
        match cap {
            Cap::PerRun => self.run,
            Cap::PerDay => self.day,
            Cap::PerMonth => self.month,
        }
    }

    fn get_mut(&mut self, cap: Cap) -> &mut Units {
        match cap {
            Cap::PerRun => &mut self.run,
            Cap::PerDay => &mut self.day,
            Cap::PerMonth => &mut self.month,
        }
    }

    /// The rule: each total plus `amount` must stay at or under its cap
    /// (equal is allowed), checked run, day, month; the first cap that would
    /// be passed is the one reported. The Redis script applies the same rule.
    pub(crate) fn charge(self, amount: Units, limits: &Limits) -> Outcome {
        let mut after = self;
        for cap in Cap::ALL {
            let Some(total) = self.get(cap).checked_add(amount) else {
                // A cap is at most Units::MAX, so a set cap was passed too.
                return match limits.get(cap) {
                    Some(limit) => Outcome::Refused {
                        cap,
                        limit: limit.usd,
                        before: self,
                    },
                    None => Outcome::Overflow {
                        total: cap,
                        before: self,
                    },
                };
            };
            if let Some(limit) = limits.get(cap)
                && total > limit.units
            {
                return Outcome::Refused {
                    cap,
                    limit: limit.usd,
                    before: self,
                };
            }
            *after.get_mut(cap) = total;
        }
        Outcome::Charged(after)
    }

    pub(crate) fn totals(self) -> Totals {
        Totals {
            run: self.run.to_decimal(),
            day: self.day.to_decimal(),
            month: self.month.to_decimal(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str_exact(s).unwrap()
    }

    #[test]
    fn amounts_convert_exactly_or_not_at_all() {
        assert_eq!(Units::from_decimal(d("0")), Ok(Units(0)));
        assert_eq!(Units::from_decimal(d("-0")), Ok(Units(0)));
        assert_eq!(Units::from_decimal(d("0.0000000001")), Ok(Units(1)));
        assert_eq!(Units::from_decimal(d("1.50")), Ok(Units(15_000_000_000)));
        assert!(matches!(
            Units::from_decimal(d("0.00000000001")),
            Err(AmountError::TooPrecise { .. })
        ));
        assert!(matches!(
            Units::from_decimal(d("-0.01")),
            Err(AmountError::Negative { .. })
        ));
        assert_eq!(
            Units::from_decimal(d("922337203.6854775807")),
            Ok(Units::MAX)
        );
        assert!(matches!(
            Units::from_decimal(d("922337203.6854775808")),
            Err(AmountError::TooLarge { .. })
        ));
        assert!(matches!(
            Units::from_decimal(Decimal::MAX),
            Err(AmountError::TooLarge { .. })
        ));
    }

    #[test]
    fn display_round_trips() {
        for units in [0, 1, 15_000_000_000, i64::MAX] {
            let shown = Units(units).to_string();
            assert_eq!(shown.parse::<Units>(), Ok(Units(units)), "{shown}");
        }
        assert_eq!(Units(15_000_000_000).to_string(), "1.5");
        assert!("-1".parse::<Units>().is_err());
        assert!("1e3".parse::<Units>().is_err());
        assert!("".parse::<Units>().is_err());
    }

    #[test]
    fn actual_costs_round_up_and_settle_within_bounds() {
        assert_eq!(Units::rounded_up(d("0.00000000001")), Some(Units(1)));
        assert_eq!(Units::rounded_up(d("0.0000000001")), Some(Units(1)));
        assert_eq!(Units::rounded_up(d("0")), Some(Units(0)));
        assert_eq!(Units::rounded_up(Decimal::MAX), Some(Units::MAX));
        assert_eq!(Units::rounded_up(d("-0.01")), None);
        assert_eq!(Delta::between(Units(5), Units(3)), Delta::Release(Units(2)));
        assert_eq!(Delta::between(Units(3), Units(5)), Delta::Excess(Units(2)));
        assert_eq!(Delta::Release(Units(7)).apply(Units(5)), Units::ZERO);
        assert_eq!(Delta::Excess(Units(7)).apply(Units::MAX), Units::MAX);
        assert_eq!(Delta::Excess(Units(7)).apply(Units(5)), Units(12));
    }

    #[test]
    fn caps_round_down_and_saturate() {
        let caps = Caps {
            per_run: Some(d("0.00000000019")),
            per_day: Some(d("100000000000000000000")),
            per_month: Some(d("-1")),
        };
        let limits = Limits::new(&caps);
        let units = |cap| limits.get(cap).map(|l| l.units);
        assert_eq!(units(Cap::PerRun), Some(Units(1)));
        assert_eq!(units(Cap::PerDay), Some(Units::MAX));
        assert_eq!(units(Cap::PerMonth), Some(Units::ZERO));
    }

    #[test]
    fn equal_to_the_cap_is_allowed_one_unit_over_is_not() {
        let limits = Limits::new(&Caps {
            per_run: Some(d("1")),
            per_day: None,
            per_month: None,
        });
        let start = Tally {
            run: Units(9_000_000_000),
            ..Tally::default()
        };
        assert!(matches!(
            start.charge(Units(1_000_000_000), &limits),
            Outcome::Charged(t) if t.run == Units(10_000_000_000)
        ));
        assert_eq!(
            start.charge(Units(1_000_000_001), &limits),
            Outcome::Refused {
                cap: Cap::PerRun,
                limit: d("1"),
                before: start
            }
        );
    }

    #[test]
    fn overflow_without_a_cap_is_reported_not_wrapped() {
        let full = Tally {
            day: Units::MAX,
            ..Tally::default()
        };
        assert_eq!(
            full.charge(Units(1), &Limits::default()),
            Outcome::Overflow {
                total: Cap::PerDay,
                before: full
            }
        );
        assert!(matches!(
            full.charge(Units(0), &Limits::default()),
            Outcome::Charged(_)
        ));
    }
}
