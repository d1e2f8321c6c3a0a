//! Queries as a client writes them and replies as a client reads them,
//! both with `hickory-proto`, for the tests of the resolver.

#![allow(dead_code, reason = "each test binary uses part of this")]
#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::net::IpAddr;

use constle_dns::{Answer, Decision, Resolver, Transport};
use constle_egress::EgressPolicy;
use constle_manifest::Hostname;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

/// A restricted policy allowing `hosts`.
pub fn restricted(hosts: &[&str]) -> EgressPolicy {
    EgressPolicy::restricted(hosts.iter().map(|h| Hostname::new(h).unwrap()))
}

/// One query for `name` of `qtype`, id 0x1234, recursion desired.
pub fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    message(name, qtype).to_vec().unwrap()
}

/// The message [`query`] encodes, to change before encoding.
pub fn message(name: &str, qtype: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.id = 0x1234;
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    message
}

/// What one query got: the decision and the decoded reply, if any.
pub struct Got {
    pub decision: Decision,
    pub reply: Option<Message>,
}

impl Got {
    pub fn code(&self) -> Option<ResponseCode> {
        self.reply.as_ref().map(|r| r.metadata.response_code)
    }

    /// The addresses in the answer section.
    pub fn addresses(&self) -> Vec<IpAddr> {
        let Some(reply) = &self.reply else {
            return Vec::new();
        };
        reply
            .answers
            .iter()
            .filter_map(|record| match &record.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
                _ => None,
            })
            .collect()
    }
}

/// Sends `bytes` over UDP to `resolver`.
pub fn ask(resolver: &mut Resolver, bytes: &[u8]) -> Got {
    take(resolver.answer(bytes, Transport::Udp))
}

/// An answer's decision and reply, decoded.
pub fn take(answer: Answer) -> Got {
    let mut decision = None;
    let reply = answer.reply_after(|d| decision = Some(d));
    Got {
        decision: decision.unwrap(),
        reply: reply.map(|bytes| Message::from_vec(&bytes).unwrap()),
    }
}
