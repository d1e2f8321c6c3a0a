//! Why a charge was refused, in the words the agent is told and the word
//! the audit log records; and how money is written for people.

use rust_decimal::Decimal;

use crate::{Cap, Scope, SpendError, Totals};

/// An amount as people read money: at least two decimal places, and every
/// digit the amount has beyond them (`0.2` → `0.20`, `0.125` stays).
pub fn usd(amount: Decimal) -> String {
    let mut shown = amount.normalize();
    if shown.scale() < 2 {
        shown.rescale(2);
    }
    shown.to_string()
}

/// Why a charge was refused.
pub enum Refusal {
    /// The charge would pass `cap`.
    Cap {
        /// The first cap that would be passed.
        cap: Cap,
        /// Its limit.
        limit: Decimal,
        /// The amount refused.
        amount: Decimal,
        /// The totals before the call.
        totals: Totals,
    },
    /// The charge could not be made.
    Failed {
        /// Why, in a word.
        why: Failure,
        /// The error in full, for the audit log only.
        error: String,
        /// The totals before the call, when the ledger gave them.
        stored: Option<Totals>,
    },
}

/// A charge that could not be made, for a reason other than a cap.
#[derive(Clone, Copy)]
pub enum Failure {
    /// The ledger cannot be read or written: fail closed.
    LedgerUnavailable,
    /// An amount or total the ledger cannot hold.
    ChargeInvalid,
}

impl Failure {
    /// The `reason` of the `spend_refused` entry.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::LedgerUnavailable => "ledger_unavailable",
            Failure::ChargeInvalid => "charge_invalid",
        }
    }

    /// What the agent is told. Not the error: it names the ledger's path
    /// or Redis URL, and goes to the audit log (`spend_refused`) instead.
    pub fn explain(self) -> &'static str {
        match self {
            Failure::LedgerUnavailable => {
                "the spend ledger cannot be read or written, so priced calls are refused"
            }
            Failure::ChargeInvalid => "this call cannot be charged",
        }
    }
}

impl From<SpendError> for Refusal {
    fn from(err: SpendError) -> Refusal {
        let (why, stored) = match err {
            SpendError::Refused {
                cap,
                limit,
                amount,
                totals,
            } => {
                return Refusal::Cap {
                    cap,
                    limit,
                    amount,
                    totals,
                };
            }
            SpendError::TotalTooLarge { totals, .. } => (Failure::ChargeInvalid, Some(totals)),
            SpendError::Ledger(_) => (Failure::LedgerUnavailable, None),
            // An amount refused before the ledger was asked.
            _ => (Failure::ChargeInvalid, None),
        };
        Refusal::Failed {
            why,
            error: err.to_string(),
            stored,
        }
    }
}

impl Refusal {
    /// A ledger that never opened: every priced call is refused.
    pub fn ledger_unavailable(error: String) -> Refusal {
        Refusal::Failed {
            why: Failure::LedgerUnavailable,
            error,
            stored: None,
        }
    }

    /// What the agent is told: the cap and the amounts, or what failed in
    /// a word (never the error, which names the ledger's path or Redis URL).
    pub fn message(&self) -> String {
        self.message_in(None)
    }

    /// [`Refusal::message`] for a charge to the totals kept apart for
    /// `scope` ([`crate::LedgerKey::scoped`]): a cap is named by its field
    /// in that scope's section (`llm.spending.max_per_run_usd`).
    pub fn message_in(&self, scope: Option<Scope>) -> String {
        match self {
            Refusal::Cap {
                cap,
                limit,
                amount,
                totals,
            } => format!(
                "spend cap {}{} ({} USD) would be passed: {} spent + {} for this call; the Constle gate did not forward it",
                scope.map_or("", Scope::section),
                cap.field(),
                usd(*limit),
                usd(cap.total(totals)),
                usd(*amount)
            ),
            Refusal::Failed { why, .. } => {
                format!("{}; the Constle gate did not forward it", why.explain())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_never_told_where_the_ledger_is() {
        let refusal = Refusal::ledger_unavailable("redis://:s3cret@ledger.internal:6379".into());
        let told = refusal.message();
        assert_eq!(
            told,
            "the spend ledger cannot be read or written, so priced calls are refused; \
             the Constle gate did not forward it"
        );
    }

    #[test]
    fn money_has_two_decimals_at_least_and_every_digit_it_has() {
        for (amount, shown) in [
            ("0.2", "0.20"),
            ("0.125", "0.125"),
            ("3", "3.00"),
            ("1.500", "1.50"),
        ] {
            assert_eq!(usd(amount.parse().unwrap()), shown);
        }
    }
}
