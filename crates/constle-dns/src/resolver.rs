//! [`Resolver`]: one query in, one [`Answer`] out. Only the header and the
//! first question are read (by `hickory-proto`); the other sections,
//! whatever their counts, are never parsed.

use std::net::IpAddr;

use constle_egress::EgressPolicy;
use constle_manifest::Hostname;
use hickory_proto::op::{Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::decision::{Answer, Answered, Decision, Reason, Refused};
use crate::name::{host_text, recorded};
use crate::policy::NamePolicy;
use crate::pool::{self, DEFAULT_MAX_NAMES, Pool};

/// How long a client may keep an answer, in seconds. A name keeps its
/// placeholders for the resolver's life, so any value is correct; a short
/// one keeps nothing cached past a run that reuses a process's cache.
pub const TTL_SECONDS: u32 = 60;

/// How a query arrived, and so how its reply is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// One datagram: the message as it is.
    Udp,
    /// One message from a TCP stream, with its two-byte length in front
    /// (RFC 1035 §4.2.2); the reply is framed the same way.
    Tcp,
}

/// The sandbox's resolver: the egress policy's names and the placeholders
/// given so far.
#[derive(Debug)]
pub struct Resolver {
    policy: NamePolicy,
    pool: Pool,
}

/// The header and question a reply echoes.
struct Asked<'a> {
    header: &'a Header,
    query: &'a Query,
}

impl Resolver {
    /// A resolver for `policy` (`None`: `egress: none`, so nothing
    /// resolves), giving addresses to at most [`DEFAULT_MAX_NAMES`] names.
    pub fn new(policy: Option<&EgressPolicy>) -> Resolver {
        Resolver::with_max_names(policy, DEFAULT_MAX_NAMES)
    }

    /// A resolver that gives addresses to at most `max_names` names (and
    /// never more than [`crate::POOL_ADDRESSES`]); past that, an allowed
    /// name not seen before is refused ([`Reason::PoolFull`]).
    pub fn with_max_names(policy: Option<&EgressPolicy>, max_names: usize) -> Resolver {
        Resolver {
            policy: NamePolicy::from_egress(policy),
            pool: Pool::new(max_names),
        }
    }

    /// The name whose placeholder `ip` is (IPv4, IPv6, or IPv4 mapped into
    /// IPv6), if one was given.
    pub fn name_for(&self, ip: IpAddr) -> Option<&Hostname> {
        self.pool.name_for(ip)
    }

    /// Answers `query`, one message framed as `transport` has it. Never
    /// panics; every input gets a [`Decision`].
    pub fn answer(&mut self, query: &[u8], transport: Transport) -> Answer {
        let (reply, decision) = match transport {
            Transport::Udp => self.answer_message(query),
            Transport::Tcp => match unframe(query) {
                Some(message) => {
                    let (reply, decision) = self.answer_message(message);
                    (reply.and_then(|reply| frame(&reply)), decision)
                }
                None => (None, unread(Reason::Unreadable)),
            },
        };
        Answer::new(reply, decision)
    }

    fn answer_message(&mut self, message: &[u8]) -> (Option<Vec<u8>>, Decision) {
        let mut decoder = BinDecoder::new(message);
        let Ok(header) = Header::read(&mut decoder) else {
            // Too short for a header: a client that sent an id still hears
            // at once that it was not understood.
            let reply = message.get(..2).and_then(|id| {
                error_reply(u16::from_be_bytes([id[0], id[1]]), ResponseCode::FormErr)
            });
            return (reply, unread(Reason::Unreadable));
        };
        let id = header.metadata.id;
        if header.metadata.message_type == MessageType::Response {
            // Never answer an answer: two resolvers could bounce it forever.
            return (None, unread(Reason::NotAQuery));
        }
        if header.metadata.op_code != OpCode::Query {
            return (
                error_reply(id, ResponseCode::NotImp),
                unread(Reason::NotAQuery),
            );
        }
        let query = match header.counts.queries {
            0 => None,
            _ => Query::read(&mut decoder).ok(),
        };
        let Some(query) = query else {
            return (
                error_reply(id, ResponseCode::FormErr),
                unread(Reason::Unreadable),
            );
        };
        let asked = Asked {
            header: &header,
            query: &query,
        };
        match self.judge(&asked) {
            Ok(answered) => (
                reply(&asked, ResponseCode::NoError, answered.address),
                Decision::Answered(answered),
            ),
            Err(reason) => (
                reply(&asked, ResponseCode::NXDomain, None),
                Decision::Refused(Refused {
                    name: Some(recorded(query.name())),
                    qtype: Some(query.query_type().into()),
                    reason,
                }),
            ),
        }
    }

    /// The policy's decision on a readable question.
    fn judge(&mut self, asked: &Asked<'_>) -> Result<Answered, Reason> {
        if asked.header.counts.queries > 1 {
            return Err(Reason::MultipleQuestions);
        }
        if asked.query.query_class() != DNSClass::IN {
            return Err(Reason::NotInternetClass);
        }
        let text = host_text(asked.query.name()).ok_or(Reason::NotAHostName)?;
        let name = self.policy.judge(&text)?;
        let qtype = asked.query.query_type();
        let (address, assigned) = match qtype {
            RecordType::A | RecordType::AAAA => {
                let (slot, assigned) = self.pool.slot(&name).map_err(|_| Reason::PoolFull)?;
                let address = match qtype {
                    RecordType::A => IpAddr::V4(pool::ipv4(slot)),
                    _ => IpAddr::V6(pool::ipv6(slot)),
                };
                (Some(address), assigned)
            }
            _ => (None, false),
        };
        Ok(Answered {
            name,
            qtype: qtype.into(),
            address,
            assigned,
        })
    }
}

fn unread(reason: Reason) -> Decision {
    Decision::Refused(Refused {
        name: None,
        qtype: None,
        reason,
    })
}

/// A reply with no question: for what could not be read as one.
fn error_reply(id: u16, code: ResponseCode) -> Option<Vec<u8>> {
    Message::error_msg(id, OpCode::Query, code).to_vec().ok()
}

/// The reply to a readable question: the question echoed as it was asked
/// (case included, which resolvers that randomise case check), and the
/// placeholder when there is one.
fn reply(asked: &Asked<'_>, code: ResponseCode, address: Option<IpAddr>) -> Option<Vec<u8>> {
    let mut message = Message::error_msg(asked.header.metadata.id, OpCode::Query, code);
    message.metadata.authoritative = true;
    message.metadata.recursion_desired = asked.header.metadata.recursion_desired;
    message.metadata.recursion_available = true;
    message.add_query(asked.query.clone());
    if let Some(address) = address {
        let rdata = match address {
            IpAddr::V4(v4) => RData::A(A(v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
        };
        message.add_answer(Record::from_rdata(
            asked.query.name().clone(),
            TTL_SECONDS,
            rdata,
        ));
    }
    message.to_vec().ok()
}

/// The message of one TCP frame, if its length is the frame's.
fn unframe(frame: &[u8]) -> Option<&[u8]> {
    let (length, message) = frame.split_first_chunk::<2>()?;
    (usize::from(u16::from_be_bytes(*length)) == message.len()).then_some(message)
}

fn frame(message: &[u8]) -> Option<Vec<u8>> {
    let length = u16::try_from(message.len()).ok()?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(message);
    Some(framed)
}
