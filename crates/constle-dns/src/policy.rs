//! Which names the resolver answers: the proxy's own rule, applied to a
//! name before anything is resolved.
//!
//! Squid matches `allowed_hosts` with `dstdomain -n` and no leading dot
//! (`constle_egress`'s `config.rs`): the exact name, any case, no
//! subdomains. A query name is put in that form ([`crate::name`]: lower
//! case, no trailing dot) and compared whole. In open mode the proxy takes
//! any name and decides on the addresses it resolves to; here any name
//! that is a valid [`Hostname`] and not under a special-use top-level name
//! (which no public host has) gets a placeholder, and the proxy still
//! decides when the connection comes.

use std::collections::HashSet;

use constle_egress::{EgressPolicy, Mode};
use constle_manifest::Hostname;

use crate::decision::Reason;

/// Top-level names reserved for uses that never reach a public host
/// (RFC 6761 `localhost` and `invalid`, RFC 6762 `local`, RFC 7686
/// `onion`, RFC 9476 `alt`, ICANN's `internal`, and `arpa`, whose reverse
/// names would otherwise get placeholders): refused in open mode.
pub const SPECIAL_USE_NAMES: [&str; 7] = [
    "localhost",
    "invalid",
    "local",
    "onion",
    "alt",
    "internal",
    "arpa",
];

/// What may resolve.
#[derive(Debug)]
pub(crate) enum NamePolicy {
    /// `egress: none`: nothing.
    None,
    /// `egress: open`: any public-looking host name.
    Open,
    /// `egress: restricted`: exactly these names.
    Restricted(HashSet<Hostname>),
}

impl NamePolicy {
    /// The names `policy` lets the proxy reach; `None` is `egress: none`.
    pub(crate) fn from_egress(policy: Option<&EgressPolicy>) -> NamePolicy {
        match policy {
            None => NamePolicy::None,
            Some(policy) => match policy.mode {
                Mode::Open => NamePolicy::Open,
                Mode::Restricted => {
                    NamePolicy::Restricted(policy.allowed_hosts.iter().cloned().collect())
                }
            },
        }
    }

    /// The host `text` (lower case, no trailing dot) names, if it may
    /// resolve; else why not.
    pub(crate) fn judge(&self, text: &str) -> Result<Hostname, Reason> {
        match self {
            NamePolicy::None => Err(Reason::NoNetwork),
            NamePolicy::Restricted(hosts) => hosts.get(text).cloned().ok_or(Reason::NotAllowed),
            NamePolicy::Open => {
                let host = Hostname::new(text).map_err(|_| Reason::NotAHostName)?;
                let top = text.rsplit('.').next().unwrap_or(text);
                if SPECIAL_USE_NAMES.contains(&top) {
                    return Err(Reason::NotPublic);
                }
                Ok(host)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Hostname {
        Hostname::new(s).unwrap()
    }

    #[test]
    fn restricted_is_exact_names_only() {
        let policy = EgressPolicy::restricted([host("api.example.com")]);
        let names = NamePolicy::from_egress(Some(&policy));
        assert_eq!(names.judge("api.example.com"), Ok(host("api.example.com")));
        for refused in [
            "example.com",
            "x.api.example.com",
            "api.example.co",
            "api.example.com.evil.test",
            "",
        ] {
            assert_eq!(names.judge(refused), Err(Reason::NotAllowed), "{refused}");
        }
    }

    #[test]
    fn restricted_and_empty_allows_nothing() {
        let names = NamePolicy::from_egress(Some(&EgressPolicy::restricted([])));
        assert_eq!(names.judge("api.example.com"), Err(Reason::NotAllowed));
    }

    #[test]
    fn none_allows_nothing_at_all() {
        let names = NamePolicy::from_egress(None);
        assert_eq!(names.judge("api.example.com"), Err(Reason::NoNetwork));
    }

    #[test]
    fn open_takes_public_looking_host_names() {
        let names = NamePolicy::from_egress(Some(&EgressPolicy::open()));
        assert_eq!(
            names.judge("registry.npmjs.org"),
            Ok(host("registry.npmjs.org"))
        );
        for bad in ["localhost", "com", "1.2.3.4", "a.0x7f", "-a.com", "a-.com"] {
            assert_eq!(names.judge(bad), Err(Reason::NotAHostName), "{bad}");
        }
        for special in [
            "a.localhost",
            "printer.local",
            "db.internal",
            "1.0.0.127.in-addr.arpa",
            "x.onion",
            "x.invalid",
            "x.alt",
        ] {
            assert_eq!(names.judge(special), Err(Reason::NotPublic), "{special}");
        }
    }
}
