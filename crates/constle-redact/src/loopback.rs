//! Which hosts a URL may reach over plain `http`: loopback only, the one
//! rule for the Agentfile's URLs and for those other crates parse
//! themselves (a webhook URL from the environment, a peer URL).

use std::net::IpAddr;

/// Whether a URL's host is loopback: `localhost` (in any case),
/// `127.0.0.0/8` or `::1` (with or without its brackets).
///
/// ```
/// use constle_redact::is_loopback_host;
/// assert!(is_loopback_host("LocalHost") && is_loopback_host("[::1]"));
/// assert!(!is_loopback_host("localhost.") && !is_loopback_host("0x7f.1"));
/// ```
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
