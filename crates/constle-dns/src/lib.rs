//! The sandbox's resolver: answers the names the egress policy allows with
//! placeholder addresses, and refuses every other name at once.
//!
//! Inside the sandbox there is no route and, without this, no DNS: a
//! client that does not use `HTTPS_PROXY` fails before it starts, even for
//! an allowed host. This crate is the core of the fix (issue 26): a pure
//! function from one DNS query to one reply and one [`Decision`], with no
//! socket and no upstream. A listener inside the sandbox serves it; a
//! capture listener turns a connection to a placeholder into a `CONNECT`
//! for its name ([`Resolver::name_for`]) through the same proxy.
//!
//! # What it answers
//!
//! A name the proxy would let through, by the proxy's own rule
//! ([`constle_egress::EgressPolicy`]): in `restricted` egress, a name in
//! `allowed_hosts`, matched whole (no subdomains), in any case, with or
//! without the trailing dot; in `open` egress, any valid host name
//! ([`constle_manifest::Hostname`]'s rules) not under a special-use
//! top-level name ([`SPECIAL_USE_NAMES`]), and the proxy still judges the
//! addresses it resolves for the connection. Such a name gets, for `A`,
//! one IPv4 placeholder and, for `AAAA`, one IPv6 placeholder that stand
//! for it; for any other type, `NOERROR` with no record (`NODATA`), so
//! clients stop asking.
//!
//! # What it refuses
//!
//! Everything else, at once, with `NXDOMAIN`: never silence, which would
//! leave a client waiting for its timeout. That includes names not
//! allowed, names that are not host names (a byte other than a letter,
//! digit or `-`), any type (`TXT`, `ANY`, …) for such a name, several questions in one query, a class other than `IN`, and an
//! allowed name once the pool is full. With `egress: none`, every name.
//! A message that cannot be read gets `FORMERR` if its id can be read and
//! nothing otherwise; another operation than a query gets `NOTIMP`; a
//! response gets nothing. Labels over 63 bytes and names over 253 bytes
//! (255 on the wire) cannot be written in a DNS message at all:
//! `hickory-proto` refuses to read them, and they get `FORMERR`, as fast.
//!
//! No query ever leaves the resolver: it has no upstream, so a name cannot
//! carry data out of the sandbox through DNS. Only what it records does,
//! and that is bounded: every [`Refused`] holds the name escaped (no
//! control byte) and cut to [`MAX_RECORDED_BYTES`]. How fast refusals
//! reach the log is the caller's to pace, with the pace the gates' refusals
//! already share (`constle_mcp_gate::Pace`, used by `constle-run`), so a
//! flood of lookups cannot choose how fast the log grows and none is
//! dropped. A caller cannot send a reply without taking its decision:
//! [`Answer::reply_after`] hands the decision over before it gives the
//! bytes.
//!
//! # The placeholder pool
//!
//! - IPv4: `198.18.0.0/15`, set aside for benchmarking (RFC 2544, IANA:
//!   not globally reachable). The sandbox uses only loopback (`127.0.0.1`
//!   for the relays, and `::1`), so nothing in it collides; no real network
//!   routes it to the agent; and the proxy already refuses it as a
//!   destination (`constle_egress::INTERNAL_IPV4_RANGES`), so a public name
//!   that resolves to a placeholder on the host never reaches one.
//! - IPv6: `2001:2::/48`, the IPv6 benchmarking range (RFC 5180, IANA: not
//!   globally reachable), the IPv4 range's counterpart. Each IPv6
//!   placeholder carries its name's IPv4 placeholder in its last 32 bits
//!   (`2001:2::c612:1` and `198.18.0.1`), so both families agree and can
//!   be told apart at a glance from anything real.
//!
//! A name gets its slot on its first `A` or `AAAA` query and keeps it for
//! the resolver's life; distinct names never share one. At most
//! [`DEFAULT_MAX_NAMES`] names get one (or the cap given to
//! [`Resolver::with_max_names`]); past it, a new name is refused with
//! [`Reason::PoolFull`], while names that have a slot still resolve.
//!
//! # Why this mechanism
//!
//! Answering from the policy, without resolving, means the names the agent
//! can learn are exactly those it may reach, the only exit stays the proxy
//! (which resolves on the host and refuses internal addresses there), and
//! DNS carries nothing out. Placeholders rather than real addresses keep
//! the host's view of the network out of the sandbox and let one address
//! stand for one name, so a captured connection knows which name to ask
//! the proxy for.
//!
//! Messages are read and written with `hickory-proto` (pinned exactly):
//! only the header and the first question are read, so a message that
//! declares thousands of records costs nothing.

#![forbid(unsafe_code)]

mod decision;
mod name;
mod policy;
mod pool;
mod resolver;

pub use decision::{Answer, Answered, Decision, QueryType, Reason, Refused};
pub use name::MAX_RECORDED_BYTES;
pub use policy::SPECIAL_USE_NAMES;
pub use pool::{
    DEFAULT_MAX_NAMES, PLACEHOLDER_IPV4, PLACEHOLDER_IPV6, POOL_ADDRESSES, placeholders,
};
pub use resolver::{Resolver, TTL_SECONDS, Transport};
