//! The generated `squid.conf`: [`render`].
//!
//! Rule order (measured on Squid 5.7, see the crate docs for why each rule
//! is where it is):
//!
//! 1. deny anything but CONNECT (`not_connect`);
//! 2. deny any port but 443 (`port`);
//! 3. deny IP-literal destinations, in any spelling (`ip_literal`);
//! 4. restricted mode: deny names not in `allowed_hosts`, matched by name
//!    only, before anything is resolved (`not_allowed`);
//! 5. deny names that resolve to any internal address, or to an IPv6
//!    address that carries an internal IPv4 address (`internal_destination`,
//!    [`crate::internal_range_groups`]);
//! 6. deny names that do not resolve at all (`unresolved`), so that nothing
//!    is allowed on a lookup that failed, to be retried when connecting;
//! 7. allow CONNECT to 443 (restricted: of an allowed host); deny the rest.
//!
//! Every deny rule ends in an `annotate_transaction` ACL that always
//! matches, so the access-log line carries the reason as a note.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use crate::error::EgressError;
use crate::policy::{EgressPolicy, Mode};
use crate::ranges::internal_range_groups;
use crate::reason;

/// The configuration file, in the run directory.
pub const CONF_FILE: &str = "squid.conf";
/// The allowlist Squid reads (one validated host name per line).
pub const ALLOWED_HOSTS_FILE: &str = "allowed_hosts";
/// Squid's access log: a FIFO that [`Squid`](crate::Squid) reads.
pub const ACCESS_LOG_FILE: &str = "access.log";
/// Squid's own diagnostics.
pub const CACHE_LOG_FILE: &str = "cache.log";
/// Where [`Squid::start`](crate::Squid::start) copies a given hosts file.
pub const HOSTS_FILE: &str = "hosts";

/// The only port a CONNECT may name.
pub const HTTPS_PORT: u16 = 443;

/// Host names that are IP literals Squid's `dst -n` does not recognise:
/// every label a decimal number or `0x` hex (`0`, `0.0.0.0`, `0x7f.1`), and
/// any host with a `:` (IPv6 forms such as `::` and zone ids).
pub const IP_LITERAL_NAME_PATTERNS: &[&str] =
    &[r"^((0x[0-9a-f]*|[0-9]+)\.)*(0x[0-9a-f]*|[0-9]+)\.?$", ":"];

/// The access-log format: one line per transaction, space-separated, every
/// client-controlled field URL-encoded (`%#`) so it holds no space or
/// newline. Fields, in order:
///
/// | # | code | meaning |
/// |---|---|---|
/// | 0 | `constle1` | format tag |
/// | 1 | `%tS` | transaction start, `seconds.millis` since the epoch |
/// | 2 | `%>a` | client address |
/// | 3 | `%>p` | client port |
/// | 4 | `%#rm` | method |
/// | 5 | `%#ru` | request URL (`host:port` for CONNECT) |
/// | 6 | `%#>rd` | destination host as the client named it |
/// | 7 | `%>rP` | destination port |
/// | 8 | `%Ss` | Squid result code (`TCP_TUNNEL`, `TCP_DENIED`, …) |
/// | 9 | `%03>Hs` | HTTP status sent to the client |
/// | 10 | `%<a` | address Squid connected to, `-` if none |
/// | 11 | `%<p` | port Squid connected to, `-` if none |
/// | 12 | `%#{constle}note` | the decision note (see [`reason`]) |
pub const LOGFORMAT: &str =
    "constle1 %tS %>a %>p %#rm %#ru %#>rd %>rP %Ss %03>Hs %<a %<p %#{constle}note";

/// The first field of every line in [`LOGFORMAT`].
pub const LOGFORMAT_TAG: &str = "constle1";

/// A rendered configuration: the text of `squid.conf` and of the
/// allowed-hosts file it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The text of `squid.conf`.
    pub squid_conf: String,
    /// The text of [`ALLOWED_HOSTS_FILE`]: one name per line, sorted,
    /// without duplicates. Empty (and not referenced by `squid_conf`) in open
    /// mode and for an empty allowlist.
    pub allowed_hosts: String,
}

/// Renders the configuration for `policy`, with every file in `run_dir`,
/// listening on `listen`, resolving names from `hosts_file` when given.
///
/// Pure: writes nothing. Host names never appear in `squid_conf` itself;
/// they go to the allowed-hosts file, one validated
/// [`Hostname`](constle_manifest::Hostname) per line.
///
/// With `hosts_file`, `dns_nameservers` is 127.0.0.1: a name not in the
/// file is looked up on loopback only, so no DNS query leaves the machine.
/// Without it, Squid uses `/etc/hosts` and the system's resolvers.
///
/// Fails when `listen` is not a loopback address, or a path is relative or
/// holds a character that `squid.conf` would misread (whitespace, quotes,
/// `$`, `#`, `%`, non-ASCII…).
pub fn render(
    policy: &EgressPolicy,
    run_dir: &Path,
    listen: SocketAddr,
    hosts_file: Option<&Path>,
) -> Result<Rendered, EgressError> {
    if !listen.ip().is_loopback() {
        return Err(EgressError::NotLoopback(listen));
    }
    let run = config_path(run_dir)?;
    let hosts = hosts_file.map(config_path).transpose()?;

    let names: BTreeSet<&str> = policy.allowed_hosts.iter().map(|h| h.as_str()).collect();
    let allowlist = match policy.mode {
        Mode::Restricted if names.is_empty() => Allowlist::Empty,
        Mode::Restricted => Allowlist::File,
        Mode::Open => Allowlist::None,
    };
    let allowed_hosts = match allowlist {
        Allowlist::File => names.iter().fold(String::new(), |mut s, n| {
            s.push_str(n);
            s.push('\n');
            s
        }),
        Allowlist::Empty | Allowlist::None => String::new(),
    };

    let mut c = String::new();
    let mode_line = match allowlist {
        Allowlist::File => format!(
            "restricted: CONNECT to port 443 of the {} name(s) in {run}/{ALLOWED_HOSTS_FILE}",
            names.len()
        ),
        Allowlist::Empty => "restricted, with no allowed host: every request is refused".into(),
        Allowlist::None => {
            "open: CONNECT to port 443 of any name that resolves to public addresses only".into()
        }
    };
    let _ = writeln!(
        c,
        "# Generated by constle-egress for one run; written anew for every run.\n\
         # Mode: {mode_line}.\n"
    );

    c.push_str("# Where Squid listens, runs and writes: loopback and the run directory only.\n");
    let _ = writeln!(c, "http_port {listen}");
    c.push_str("visible_hostname constle-egress\n");
    c.push_str("httpd_suppress_version_string on\n");
    c.push_str("pid_filename none\n");
    let _ = writeln!(c, "coredump_dir {run}");
    let _ = writeln!(c, "cache_log {run}/{CACHE_LOG_FILE}");
    let _ = writeln!(c, "logformat constle {LOGFORMAT}");
    let _ = writeln!(
        c,
        "access_log stdio:{run}/{ACCESS_LOG_FILE} logformat=constle"
    );
    c.push_str("buffered_logs off\n");
    c.push_str("logfile_rotate 0\n");
    c.push_str("netdb_filename none\n");
    c.push('\n');

    c.push_str("# Nothing cached, no side protocols, no helpers.\n");
    c.push_str("cache deny all\n");
    c.push_str("cache_mem 0 MB\n");
    c.push_str("digest_generation off\n");
    c.push_str("pinger_enable off\n");
    c.push_str("icp_port 0\n");
    c.push_str("htcp_port 0\n");
    c.push_str("snmp_port 0\n");
    c.push_str("client_db off\n");
    c.push_str("shutdown_lifetime 0 seconds\n");
    c.push('\n');

    c.push_str("# Say nothing about the client or the proxy to the destination.\n");
    c.push_str("forwarded_for delete\n");
    c.push_str("request_header_access Via deny all\n");
    c.push_str("reply_header_access Via deny all\n");
    c.push('\n');

    if let Some(hosts) = &hosts {
        c.push_str("# Names resolve from this file; anything else asks loopback only,\n");
        c.push_str("# and gives up soon when nothing answers there.\n");
        let _ = writeln!(c, "hosts_file {hosts}");
        c.push_str("dns_nameservers 127.0.0.1\n");
        c.push_str("dns_timeout 3 seconds\n");
        c.push('\n');
    }

    c.push_str("# ACLs.\n");
    c.push_str("acl constle_connect method CONNECT\n");
    let _ = writeln!(c, "acl constle_https port {HTTPS_PORT}");
    c.push_str("# An IP literal in any spelling Squid parses; no lookup (-n).\n");
    c.push_str("acl constle_ip_literal dst -n all\n");
    c.push_str("# Literals dst -n misses: 0, 0.0.0.0, ::, zone ids, numeric or hex labels.\n");
    let _ = writeln!(
        c,
        "acl constle_ip_literal_name dstdom_regex -n -i {}",
        IP_LITERAL_NAME_PATTERNS.join(" ")
    );
    if let Allowlist::File = allowlist {
        c.push_str("# By name only (-n): a PTR record never admits an address.\n");
        let _ = writeln!(
            c,
            "acl constle_allowed_hosts dstdomain -n \"{run}/{ALLOWED_HOSTS_FILE}\""
        );
    }
    c.push_str("# Resolved (A and AAAA); matches when any answer is internal, or is an\n");
    c.push_str("# IPv6 address that carries an internal IPv4 address. One line a group.\n");
    for group in internal_range_groups() {
        let ranges: Vec<String> = group.ranges.iter().map(ToString::to_string).collect();
        let _ = writeln!(c, "# {}", group.what);
        let _ = writeln!(c, "acl constle_internal dst {}", ranges.join(" "));
    }
    c.push_str("# Resolved; matches when there is any answer at all.\n");
    c.push_str("acl constle_resolved dst all\n");
    for (acl, why) in [
        ("constle_why_not_connect", reason::NOT_CONNECT),
        ("constle_why_port", reason::PORT),
        ("constle_why_ip_literal", reason::IP_LITERAL),
        ("constle_why_not_allowed", reason::NOT_ALLOWED),
        ("constle_why_internal", reason::INTERNAL_DESTINATION),
        ("constle_why_unresolved", reason::UNRESOLVED),
        ("constle_why_default", reason::DEFAULT_DENY),
        ("constle_allowed", reason::ALLOWED),
    ] {
        let _ = writeln!(c, "acl {acl} annotate_transaction constle={why}");
    }
    c.push('\n');

    c.push_str("# Rules, first match wins.\n");
    c.push_str("http_access deny !constle_connect constle_why_not_connect\n");
    c.push_str("http_access deny !constle_https constle_why_port\n");
    c.push_str("http_access deny constle_ip_literal constle_why_ip_literal\n");
    c.push_str("http_access deny constle_ip_literal_name constle_why_ip_literal\n");
    match allowlist {
        Allowlist::File => {
            c.push_str("http_access deny !constle_allowed_hosts constle_why_not_allowed\n");
            c.push_str("http_access deny constle_internal constle_why_internal\n");
            c.push_str("http_access deny !constle_resolved constle_why_unresolved\n");
            c.push_str(
                "http_access allow constle_connect constle_https constle_allowed_hosts constle_allowed\n",
            );
        }
        Allowlist::Empty => {
            c.push_str("http_access deny all constle_why_not_allowed\n");
        }
        Allowlist::None => {
            c.push_str("http_access deny constle_internal constle_why_internal\n");
            c.push_str("http_access deny !constle_resolved constle_why_unresolved\n");
            c.push_str("http_access allow constle_connect constle_https constle_allowed\n");
        }
    }
    c.push_str("http_access deny all constle_why_default\n");

    Ok(Rendered {
        squid_conf: c,
        allowed_hosts,
    })
}

enum Allowlist {
    /// Restricted, with names: a `dstdomain -n` file.
    File,
    /// Restricted, no names: an empty file would make Squid warn, so there
    /// is no ACL and everything past the literal checks is refused.
    Empty,
    /// Open mode.
    None,
}

/// `path` as it can appear in `squid.conf`: absolute, and only characters
/// the configuration parser takes literally.
pub(crate) fn config_path(path: &Path) -> Result<String, EgressError> {
    let unsafe_path = |why: &str| EgressError::UnsafePath {
        path: path.to_path_buf(),
        why: why.to_owned(),
    };
    if !path.is_absolute() {
        return Err(unsafe_path("it is relative"));
    }
    let text = path
        .to_str()
        .ok_or_else(|| unsafe_path("it is not UTF-8"))?;
    if let Some(bad) = text.chars().find(|c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | '@' | '='))
    }) {
        return Err(unsafe_path(&format!(
            "it holds {bad:?}, which squid.conf would not take literally; use a directory whose path has only letters, digits and / . _ - + , @ ="
        )));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use constle_manifest::Hostname;

    fn host(s: &str) -> Hostname {
        Hostname::new(s).expect("valid host")
    }

    fn listen() -> SocketAddr {
        "127.0.0.1:3128".parse().expect("addr")
    }

    #[test]
    fn names_go_to_the_file_sorted_once() {
        let policy = EgressPolicy::restricted([
            host("b.example.com"),
            host("a.example.com"),
            host("b.example.com"),
        ]);
        let r = render(&policy, Path::new("/run/x"), listen(), None).expect("render");
        assert_eq!(r.allowed_hosts, "a.example.com\nb.example.com\n");
        assert!(!r.squid_conf.contains("a.example.com"));
        assert!(
            r.squid_conf
                .contains("acl constle_allowed_hosts dstdomain -n \"/run/x/allowed_hosts\"\n")
        );
    }

    #[test]
    fn empty_restricted_has_no_allowlist_acl_and_no_allow() {
        let r = render(
            &EgressPolicy::restricted([]),
            Path::new("/run/x"),
            listen(),
            None,
        )
        .expect("render");
        assert_eq!(r.allowed_hosts, "");
        assert!(!r.squid_conf.contains("dstdomain"));
        assert!(!r.squid_conf.contains("http_access allow"));
    }

    #[test]
    fn open_mode_allows_without_allowlist_but_keeps_internal() {
        let policy = EgressPolicy {
            mode: Mode::Open,
            allowed_hosts: vec![host("a.example.com")],
        };
        let r = render(&policy, Path::new("/run/x"), listen(), None).expect("render");
        assert_eq!(r.allowed_hosts, "");
        assert!(!r.squid_conf.contains("dstdomain"));
        assert!(r.squid_conf.contains("http_access deny constle_internal"));
        assert!(
            r.squid_conf
                .contains("http_access allow constle_connect constle_https constle_allowed\n")
        );
    }

    #[test]
    fn hosts_file_brings_loopback_dns() {
        let r = render(
            &EgressPolicy::open(),
            Path::new("/run/x"),
            listen(),
            Some(Path::new("/run/x/hosts")),
        )
        .expect("render");
        assert!(
            r.squid_conf
                .contains("hosts_file /run/x/hosts\ndns_nameservers 127.0.0.1\n")
        );
        let r = render(&EgressPolicy::open(), Path::new("/run/x"), listen(), None).expect("render");
        assert!(!r.squid_conf.contains("hosts_file"));
        assert!(!r.squid_conf.contains("dns_nameservers"));
    }

    #[test]
    fn never_the_mapped_range() {
        for mode in [Mode::Open, Mode::Restricted] {
            let policy = EgressPolicy {
                mode,
                allowed_hosts: vec![host("a.example.com")],
            };
            let r = render(&policy, Path::new("/run/x"), listen(), None).expect("render");
            // The IPv4-translated form (::ffff:0:a.b.c.d) is listed; the
            // mapped one (::ffff:a.b.c.d) never is.
            assert!(!r.squid_conf.contains("::ffff:0:0/96"), "{}", r.squid_conf);
            let mapped = |t: &str| t.starts_with("::ffff:") && t.contains('.');
            assert!(
                !r.squid_conf.split_whitespace().any(mapped),
                "{}",
                r.squid_conf
            );
            assert!(!r.squid_conf.contains("via off"));
            assert!(!r.squid_conf.contains("dns_v4_first"));
        }
    }

    #[test]
    fn refuses_paths_squid_would_misread_and_public_listen() {
        let policy = EgressPolicy::open();
        for bad in [
            "/tmp/a b",
            "/tmp/a\"b",
            "/tmp/${x}",
            "/tmp/a#b",
            "relative",
            "/tmp/é",
        ] {
            let err = render(&policy, Path::new(bad), listen(), None).expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
        let err = render(
            &policy,
            Path::new("/run/x"),
            "0.0.0.0:3128".parse().expect("addr"),
            None,
        )
        .expect_err("public listen");
        assert!(err.to_string().contains("0.0.0.0:3128"));
    }
}
