//! What the resolver decided about one query, for the caller to record:
//! [`Answer`] holds the reply and its [`Decision`], and gives up the reply
//! only to a caller that takes the decision.

use std::fmt;
use std::net::IpAddr;

use constle_manifest::Hostname;
use hickory_proto::rr::RecordType;

/// The reply to one query and what was decided. The reply comes out only
/// through [`Answer::reply_after`], which first hands the decision over,
/// so a caller cannot send an answer and forget to count it.
#[derive(Debug)]
#[must_use = "the reply goes out only through reply_after, which hands over the decision"]
pub struct Answer {
    reply: Option<Vec<u8>>,
    decision: Decision,
}

impl Answer {
    pub(crate) fn new(reply: Option<Vec<u8>>, decision: Decision) -> Answer {
        Answer { reply, decision }
    }

    /// What was decided, to look at before [`Answer::reply_after`].
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Hands the decision to `record` (which queues it for the audit log),
    /// then gives the reply to send: the bytes in the query's own framing,
    /// or `None` when nothing may be sent (a query whose id could not be
    /// read, or a message that was itself a response).
    pub fn reply_after(self, record: impl FnOnce(Decision)) -> Option<Vec<u8>> {
        record(self.decision);
        self.reply
    }
}

/// What the resolver decided about one query.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// An allowed name, answered (`NOERROR`).
    Answered(Answered),
    /// Anything else: refused at once (`NXDOMAIN`, or `FORMERR` or
    /// `NOTIMP` for what is not a readable query), or not answered.
    Refused(Refused),
}

/// An allowed name the resolver answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answered {
    /// The name, as the egress policy spells it.
    pub name: Hostname,
    /// What was asked for.
    pub qtype: QueryType,
    /// The placeholder in the answer: for `A` and `AAAA`; `None` for any
    /// other type, answered with no record (`NODATA`).
    pub address: Option<IpAddr>,
    /// Whether this query gave the name its placeholders (its first
    /// `A` or `AAAA` query), so a caller may record each name once.
    pub assigned: bool,
}

/// A query the resolver refused, as a log may hold it: nothing in it is
/// longer than [`crate::MAX_RECORDED_BYTES`] (plus `…`) or holds a
/// control character, whatever the agent sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refused {
    /// The name asked for (the first, when there were several), escaped
    /// and bounded; `None` when no question could be read.
    pub name: Option<String>,
    /// What was asked for, when a question could be read.
    pub qtype: Option<QueryType>,
    /// Why.
    pub reason: Reason,
}

/// Why a query was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// `egress: none`: no name resolves.
    NoNetwork,
    /// Restricted egress, and the name is not in `allowed_hosts`.
    NotAllowed,
    /// Open egress, and the name is under a special-use top-level name
    /// ([`crate::SPECIAL_USE_NAMES`]).
    NotPublic,
    /// Not a valid host name: a byte other than a letter, digit or `-`,
    /// or (open egress) what [`Hostname`] refuses: one label, a numeric
    /// last label, a label starting or ending with `-`.
    NotAHostName,
    /// An allowed name asked for an address when the pool already holds
    /// as many names as it may.
    PoolFull,
    /// More than one question in one query.
    MultipleQuestions,
    /// A class other than `IN`.
    NotInternetClass,
    /// A response, or an operation other than a standard query.
    NotAQuery,
    /// Not a DNS message (or no question could be read from it).
    Unreadable,
}

impl Reason {
    /// The code a log records: `dns_not_allowed`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoNetwork => "dns_no_network",
            Reason::NotAllowed => "dns_not_allowed",
            Reason::NotPublic => "dns_not_public",
            Reason::NotAHostName => "dns_not_a_host_name",
            Reason::PoolFull => "dns_pool_full",
            Reason::MultipleQuestions => "dns_multiple_questions",
            Reason::NotInternetClass => "dns_not_internet_class",
            Reason::NotAQuery => "dns_not_a_query",
            Reason::Unreadable => "dns_unreadable",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A query type (`QTYPE`), by its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueryType(pub u16);

impl From<RecordType> for QueryType {
    fn from(rtype: RecordType) -> QueryType {
        QueryType(rtype.into())
    }
}

impl fmt::Display for QueryType {
    /// Its mnemonic (`A`, `TXT`), or `TYPE<n>` (RFC 3597) for one without.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match RecordType::from(self.0) {
            RecordType::Unknown(n) => write!(f, "TYPE{n}"),
            known => write!(f, "{known}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_types_print_as_a_zone_file_would() {
        assert_eq!(QueryType(1).to_string(), "A");
        assert_eq!(QueryType(16).to_string(), "TXT");
        assert_eq!(QueryType(255).to_string(), "ANY");
        assert_eq!(QueryType(65280).to_string(), "TYPE65280");
    }

    #[test]
    fn the_reply_comes_only_after_the_decision_is_handed_over() {
        let decision = Decision::Refused(Refused {
            name: None,
            qtype: None,
            reason: Reason::Unreadable,
        });
        let answer = Answer::new(Some(vec![1, 2]), decision.clone());
        let mut recorded = None;
        let reply = answer.reply_after(|d| recorded = Some(d));
        assert_eq!(recorded, Some(decision));
        assert_eq!(reply, Some(vec![1, 2]));
    }
}
