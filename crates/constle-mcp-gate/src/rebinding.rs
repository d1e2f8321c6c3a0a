//! The gate as a server in its own right: it answers only requests
//! addressed to loopback, so a web page cannot drive it (DNS rebinding).
//!
//! The gate listens on loopback: the sandbox's relay at the address of
//! `CONSTLE_MCP_<ID>_URL` (`127.0.0.1:4100`, …). A page that a browser
//! inside the sandbox loads from a name the attacker controls, and that
//! name then made to resolve to 127.0.0.1, can send requests there that
//! the browser counts as the page's own: same origin, no CORS check. Such
//! a request names the page's host in `Host`, and, for anything but a
//! `GET` or `HEAD`, its origin in `Origin`. So, before anything else, and
//! as MCP's Streamable HTTP transport requires of servers (validate
//! `Origin` on every request, 403 when present and invalid):
//!
//! | Request | Status | [`Reason`] |
//! |---|---|---|
//! | `Host` missing, sent twice, or not `host[:port]` (RFC 9112 §3.2 asks for 400) | 400 | `mcp_host_refused` |
//! | `Host`, or the authority of an absolute-form target, not loopback | 403 | `mcp_host_refused` |
//! | `Origin` sent twice, `null`, or not `http(s)://host[:port]` with a loopback host | 403 | `mcp_origin_refused` |
//!
//! Loopback is [`is_loopback_host`], the rule the Agentfile's URLs follow:
//! `localhost` in any case, `127.0.0.0/8` and `[::1]`, with any port. A
//! request without `Origin` passes: MCP clients other than browsers send
//! none, and a browser's same-origin `GET` (the SSE stream) sends none
//! either, which is why `Host` is checked too.

use constle_manifest::is_loopback_host;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{StatusCode, Uri};

use crate::rpc::Reason;

/// Why a request is not one the gate answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Misaddressed {
    /// `Host` missing, sent twice, or not `host[:port]`.
    MalformedHost,
    /// `Host` (or the target's authority) names a host that is not loopback.
    ForeignHost,
    /// `Origin` is not a loopback origin.
    ForeignOrigin,
}

impl Misaddressed {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Misaddressed::MalformedHost => StatusCode::BAD_REQUEST,
            Misaddressed::ForeignHost | Misaddressed::ForeignOrigin => StatusCode::FORBIDDEN,
        }
    }

    pub(crate) fn reason(self) -> Reason {
        match self {
            Misaddressed::MalformedHost | Misaddressed::ForeignHost => Reason::HostRefused,
            Misaddressed::ForeignOrigin => Reason::OriginRefused,
        }
    }

    /// What the client is told: the rule, never the value it sent.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Misaddressed::MalformedHost => {
                "the Constle gate needs exactly one Host header, of the form host[:port]"
            }
            Misaddressed::ForeignHost => {
                "the Constle gate answers only requests addressed to loopback: Host must be localhost, 127.0.0.0/8 or [::1], with any port"
            }
            Misaddressed::ForeignOrigin => {
                "the Constle gate answers no web page but one on loopback: Origin, when sent, must be http:// or https:// localhost, 127.0.0.0/8 or [::1], with any port"
            }
        }
    }
}

/// Checks a request's `Host`, its target's authority (absolute form only)
/// and its `Origin`.
pub(crate) fn check(headers: &HeaderMap, target: &Uri) -> Result<(), Misaddressed> {
    let host = single(headers, header::HOST)
        .and_then(|value| value.to_str().ok())
        .and_then(host_of)
        .ok_or(Misaddressed::MalformedHost)?;
    let target_host = target.authority().map(|a| host_of(a.as_str()));
    if !is_loopback_host(host) || target_host.is_some_and(|h| !h.is_some_and(is_loopback_host)) {
        return Err(Misaddressed::ForeignHost);
    }
    if headers.contains_key(header::ORIGIN) {
        let origin = single(headers, header::ORIGIN).and_then(|value| value.to_str().ok());
        if !origin.is_some_and(is_loopback_origin) {
            return Err(Misaddressed::ForeignOrigin);
        }
    }
    Ok(())
}

/// The header's value if it was sent exactly once.
fn single(headers: &HeaderMap, name: header::HeaderName) -> Option<&HeaderValue> {
    let mut values = headers.get_all(name).into_iter();
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

/// `http://` or `https://` (in any case), then a loopback `host[:port]`,
/// nothing after: an origin as browsers serialise it. `null`, the opaque
/// origin of a sandboxed frame or a `file:` page, is not one.
fn is_loopback_origin(origin: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let web = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    web && host_of(authority).is_some_and(is_loopback_host)
}

/// The host of `host[:port]` (an IPv6 address bracketed, and returned
/// without its brackets); `None` if `authority` is not of that form. The
/// host is not checked here: [`is_loopback_host`] accepts only its own few
/// spellings, so a user part (`a@localhost`), a path or anything else left
/// in it fails there.
fn host_of(authority: &str) -> Option<&str> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']')? {
            (host, "") => (host, None),
            (host, after) => (host, Some(after.strip_prefix(':')?)),
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port_ok =
        port.is_none_or(|p| p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok());
    (port_ok && !host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: &[&str], origin: &[&str], target: &str) -> Result<(), Misaddressed> {
        let mut headers = HeaderMap::new();
        for value in host {
            headers.append(header::HOST, HeaderValue::from_str(value).unwrap());
        }
        for value in origin {
            headers.append(header::ORIGIN, HeaderValue::from_str(value).unwrap());
        }
        check(&headers, &target.parse().unwrap())
    }

    #[test]
    fn loopback_clients_pass_with_any_port_and_without_origin() {
        for host in [
            "127.0.0.1:4100",
            "127.0.0.1",
            "localhost:4100",
            "LocalHost",
            "[::1]:4100",
            "[::1]",
            "127.1.2.3:80",
        ] {
            assert_eq!(request(&[host], &[], "/mcp"), Ok(()), "{host}");
            let origin = format!("http://{host}");
            assert_eq!(request(&[host], &[&origin], "/mcp"), Ok(()), "{origin}");
        }
        for origin in [
            "https://localhost:8443",
            "HTTP://127.0.0.1",
            "http://[::1]:3000",
        ] {
            assert_eq!(
                request(&["127.0.0.1:4100"], &[origin], "/mcp"),
                Ok(()),
                "{origin}"
            );
        }
        let absolute = "http://127.0.0.1:4100/mcp";
        assert_eq!(request(&["127.0.0.1:4100"], &[], absolute), Ok(()));
    }

    #[test]
    fn a_foreign_or_malformed_host_is_refused() {
        for host in [
            "evil.example.com",
            "evil.example.com:4100",
            "localhost.evil.example.com",
            "127.0.0.1.nip.io",
            "2130706433",
            "0x7f.0.0.1",
            "[::ffff:127.0.0.1]",
            "10.0.0.1:4100",
            "user@localhost",
        ] {
            assert_eq!(
                request(&[host], &[], "/mcp"),
                Err(Misaddressed::ForeignHost),
                "{host}"
            );
        }
        for host in [
            "",
            "localhost:",
            "localhost:99999",
            "localhost:4100:1",
            "::1",
            "[::1",
            "[::1]x",
        ] {
            assert_eq!(
                request(&[host], &[], "/mcp"),
                Err(Misaddressed::MalformedHost),
                "{host:?}"
            );
        }
        assert_eq!(request(&[], &[], "/mcp"), Err(Misaddressed::MalformedHost));
        let twice = request(&["127.0.0.1", "127.0.0.1"], &[], "/mcp");
        assert_eq!(twice, Err(Misaddressed::MalformedHost));
        // An absolute-form target names the host HTTP goes by.
        let absolute = request(&["127.0.0.1"], &[], "http://evil.example.com/mcp");
        assert_eq!(absolute, Err(Misaddressed::ForeignHost));
    }

    #[test]
    fn a_foreign_null_or_malformed_origin_is_refused() {
        for origin in [
            "http://evil.example.com",
            "http://evil.example.com:4100",
            "https://localhost.evil.example.com",
            "null",
            "file://",
            "ws://localhost",
            "http://localhost/",
            "http://localhost/mcp",
            "http://user@localhost",
            "localhost",
            "",
        ] {
            let refused = request(&["127.0.0.1:4100"], &[origin], "/mcp");
            assert_eq!(refused, Err(Misaddressed::ForeignOrigin), "{origin:?}");
        }
        let twice = request(
            &["127.0.0.1"],
            &["http://localhost", "http://localhost"],
            "/mcp",
        );
        assert_eq!(twice, Err(Misaddressed::ForeignOrigin));
    }

    #[test]
    fn refusals_say_the_rule_with_their_status_and_reason() {
        let rows = [
            (Misaddressed::MalformedHost, 400, "mcp_host_refused"),
            (Misaddressed::ForeignHost, 403, "mcp_host_refused"),
            (Misaddressed::ForeignOrigin, 403, "mcp_origin_refused"),
        ];
        for (refused, status, reason) in rows {
            assert_eq!(refused.status().as_u16(), status);
            assert_eq!(refused.reason().as_str(), reason);
            assert!(refused.message().starts_with("the Constle gate"));
        }
    }
}
