//! The egress proxy: the only way out of the sandbox.
//!
//! The agent's only next hop is a Squid child of the run, listening on host
//! loopback, that checks each CONNECT against the Agentfile's
//! `sandbox.network`. Every request, allowed or refused, comes back as a
//! [`NetworkEvent`] for the audit log (`network_allowed` /
//! `network_blocked`).
//!
//! - [`EgressPolicy`] — what is allowed, from the manifest's [`Network`](constle_manifest::Network)
//!   (`egress: none` has no policy: start no proxy).
//! - [`render`] — the `squid.conf` for a policy (pure).
//! - [`check_config`] — a configuration through the real `squid -k parse`,
//!   where any line beyond start-up chatter is a complaint.
//! - [`Squid`] — the running child: [`Squid::start`], [`Squid::take_events`],
//!   [`Squid::exited`] (fail closed when it dies), [`Squid::stop`].
//! - [`parse_access_line`] — one access-log line into a [`NetworkEvent`].
//! - [`client_env`] — the environment that points a sandbox's clients at
//!   the proxy.
//!
//! # What is refused, and by which rule
//!
//! Rules run in this order; the first that matches decides, and its
//! [`reason`] is logged with the request.
//!
//! | request | result | reason |
//! |---|---|---|
//! | anything but CONNECT (`GET http://…`) | 403 | `not_connect` |
//! | CONNECT to a port other than 443 | 403 | `port` |
//! | an IP literal, any spelling: `203.0.113.7`, `[2001:db8::7]`, `[::ffff:203.0.113.7]`, `3405803783`, `0313.0161.0161.07`, `0xcb.0x71.0x71.7`, `0`, `0.0.0.0`, `[::]`, `[fe80::1%25lo]` | 403 | `ip_literal` |
//! | restricted: a name not in `allowed_hosts` (never resolved) | 403 | `not_allowed` |
//! | a name with any A or AAAA answer in an internal range ([`internal_ranges`]: loopback, private, CGNAT, link-local and metadata, unique-local, …), or an IPv6 answer that carries an internal IPv4 address (NAT64, 6to4, IPv4-compatible, IPv4-translated; Teredo and the NAT64 local-use prefix whole) | 403 | `internal_destination` |
//! | a name without any address (NXDOMAIN, no answer, lookup failed) | 403 | `unresolved` |
//! | restricted: an allowed name on 443 whose answers are all public; open: any such name | 200, tunnel | (allowed) |
//!
//! Names are matched by name only, with reverse lookups off (`dstdomain
//! -n`): an address whose PTR record names an allowed host is still an IP
//! literal, and refused. Squid normalises a name before matching: it
//! lower-cases it and strips a trailing dot, so `API.EXAMPLE.COM` and
//! `api.example.com.` are the declared `api.example.com` (the same DNS
//! name) and are allowed as it is, and logged in that form.
//!
//! The DNS trust boundary: for public addresses the proxy trusts DNS; what
//! DNS cannot do is aim a declared name back inside, because internal
//! destinations are refused on the resolved address, and Squid connects to
//! the very answer it checked. An IPv6 answer that carries an IPv4 address
//! (a NAT64 gateway, a 6to4 relay delivers it there) is judged by that
//! address: see the `ranges` items ([`internal_range_groups`]).
//!
//! # Files
//!
//! [`Squid::start`] writes into the run directory: `squid.conf` (from
//! [`render`]), `allowed_hosts` (validated names, one per line: names are
//! never spliced into `squid.conf`), a copy of the hosts file, the access
//! log (a FIFO read by this crate, in [`LOGFORMAT`]), and Squid's
//! `cache.log`.
//!
//! Measured facts about Squid 5.7 that shaped this crate are in
//! `shared/notes/squid.md` of the project; the ones that matter are
//! repeated where they apply.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod access_log;
mod check;
mod client;
mod config;
mod error;
mod policy;
mod ranges;
mod squid;
mod version;

pub use access_log::{AccessLogError, NetworkEvent, parse_access_line};
pub use check::{ParseComplaints, check_config};
pub use client::{PROXY_OPT_INS, client_env};
pub use config::{
    ACCESS_LOG_FILE, ALLOWED_HOSTS_FILE, CACHE_LOG_FILE, CONF_FILE, HOSTS_FILE, HTTPS_PORT,
    IP_LITERAL_NAME_PATTERNS, LOGFORMAT, LOGFORMAT_TAG, Rendered, render,
};
pub use error::EgressError;
pub use policy::{EgressPolicy, Mode};
pub use ranges::{
    Cidr, EMBEDDINGS, Embedding, INTERNAL_IPV4_RANGES, INTERNAL_IPV6_RANGES, REFUSED_WHOLE,
    RangeGroup, RefusedWhole, internal_range_groups, internal_ranges,
};
pub use squid::{SQUID_USER, Squid};
pub use version::squid_version;

/// The values of [`NetworkEvent::reason`]: which rule refused a request.
pub mod reason {
    /// Not a CONNECT request.
    pub const NOT_CONNECT: &str = "not_connect";
    /// CONNECT to a port other than 443.
    pub const PORT: &str = "port";
    /// The destination is an IP address, in any spelling.
    pub const IP_LITERAL: &str = "ip_literal";
    /// Restricted mode: the name is not in `allowed_hosts`.
    pub const NOT_ALLOWED: &str = "not_allowed";
    /// The name resolves to an internal address.
    pub const INTERNAL_DESTINATION: &str = "internal_destination";
    /// The name does not resolve (no address, or the lookup failed).
    pub const UNRESOLVED: &str = "unresolved";
    /// Squid could not parse the request, so no rule judged it (HTTP 400).
    pub const MALFORMED_REQUEST: &str = "malformed_request";
    /// The connection ended before a whole request arrived.
    pub const NO_REQUEST: &str = "no_request";
    /// The final `deny all` (no earlier rule matched; not expected).
    pub const DEFAULT_DENY: &str = "default_deny";
    /// Constle could not decode Squid's line; counted as refused, the line
    /// is in [`NetworkEvent::detail`](crate::NetworkEvent::detail).
    pub const UNPARSED_LOG_LINE: &str = "unparsed_log_line";
    /// The note of the allow rule (never a [`NetworkEvent::reason`](crate::NetworkEvent::reason)).
    pub(crate) const ALLOWED: &str = "allowed";
}
