//! Access-log lines ([`LOGFORMAT`](crate::LOGFORMAT)) into [`NetworkEvent`]s.

use std::net::{IpAddr, SocketAddr};

use crate::config::LOGFORMAT_TAG;
use crate::reason;

/// One request the agent made through the proxy, allowed or refused, as
/// Squid logged it.
///
/// Every text field holds only printable characters: a client-controlled
/// value that does not decode to printable UTF-8 is kept in its logged,
/// URL-encoded form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkEvent {
    /// Whether the policy let the request through (the allow rule matched).
    /// The connection itself may still have failed: see `squid_result`.
    pub allowed: bool,
    /// The destination as the agent named it, normalised by Squid: lower
    /// case, no trailing dot, IP literals in canonical form and without
    /// brackets. Empty when the request named none (a malformed request).
    pub host: String,
    /// The destination port; 0 when the request named none.
    pub port: u16,
    /// Squid's result and the HTTP status it answered: `TCP_TUNNEL/200`
    /// (tunnel made), `TCP_DENIED/403` (refused by a rule),
    /// `NONE_NONE/400` (malformed request), `TCP_TUNNEL/503` and similar
    /// (allowed, but the destination could not be reached).
    pub squid_result: String,
    /// The address Squid connected to, when it connected. Squid does not log
    /// the addresses a refused name resolved to.
    pub resolved: Option<IpAddr>,
    /// When Squid received the request (the line is written when the
    /// transaction ends: for a tunnel, when it closes).
    pub started: jiff::Timestamp,
    /// Why the request was refused, one of [`reason`]'s values;
    /// `None` when allowed, and when Squid refused the request before any
    /// rule ran (a malformed request).
    pub reason: Option<String>,
    /// The request method (`CONNECT`, or what the agent sent).
    pub method: String,
    /// Where the request came from (the sandbox's relay); `None` if not
    /// logged.
    pub client: Option<SocketAddr>,
    /// For [`reason::UNPARSED_LOG_LINE`] events only: the line and why it
    /// could not be read.
    pub detail: Option<String>,
}

impl NetworkEvent {
    /// The audit-log event this becomes: `network_allowed` or
    /// `network_blocked`.
    pub fn audit_event_name(&self) -> &'static str {
        if self.allowed {
            "network_allowed"
        } else {
            "network_blocked"
        }
    }
}

/// Why a line is not an access-log line in [`LOGFORMAT`](crate::LOGFORMAT).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessLogError {
    /// The line does not start with the format tag.
    #[error("not a constle access-log line (expected it to start with `{LOGFORMAT_TAG} `)")]
    NotConstleFormat,
    /// Wrong number of fields.
    #[error("expected {expected} space-separated fields, found {found}")]
    FieldCount {
        /// How many the format has.
        expected: usize,
        /// How many the line has.
        found: usize,
    },
    /// A field that must be a number or an address is not.
    #[error("field `{field}` is not valid: {value}")]
    BadField {
        /// The field's name.
        field: &'static str,
        /// Its value, escaped and shortened for display.
        value: String,
    },
}

const FIELDS: usize = 13;

/// Parses one access-log line (with or without its newline).
///
/// Pure and total: any input gives an event or an error, never a panic.
pub fn parse_access_line(line: &str) -> Result<NetworkEvent, AccessLogError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    let rest = line
        .strip_prefix(LOGFORMAT_TAG)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or(AccessLogError::NotConstleFormat)?;
    let f: Vec<&str> = std::iter::once(LOGFORMAT_TAG)
        .chain(rest.split(' '))
        .collect();
    if f.len() != FIELDS {
        return Err(AccessLogError::FieldCount {
            expected: FIELDS,
            found: f.len(),
        });
    }
    let started = parse_time(f[1])?;
    let client = match (opt(f[2]), opt(f[3])) {
        (Some(ip), Some(port)) => Some(SocketAddr::new(
            parse_ip("client address", ip)?,
            parse_port("client port", port)?,
        )),
        _ => None,
    };
    let method = decode(f[4]);
    let url = decode(f[5]);
    let result = format!("{}/{}", printable(f[8]), printable(f[9]));
    let resolved = opt(f[10])
        .map(|ip| parse_ip("server address", ip))
        .transpose()?;

    let (mut host, mut port) = (
        opt(f[6]).map(|h| strip_brackets(&decode(h)).to_owned()),
        opt(f[7]).map(|p| parse_port("port", p)).transpose()?,
    );
    // A request Squid rejected before parsing it fully has no host or port
    // field; a CONNECT still names `host:port` in its URL.
    if host.is_none() && method == "CONNECT" && url != "-" && !url.starts_with("error:") {
        let (h, p) = split_authority(&url);
        host = Some(h.to_owned());
        port = port.or(p);
    }

    let notes: Vec<String> = opt(f[12])
        .map(|n| decode(n).split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    // Allowed only when the allow rule's note, and nothing else, is there.
    let allowed = notes.len() == 1 && notes[0] == reason::ALLOWED;
    let reason = notes
        .into_iter()
        .find(|n| n != reason::ALLOWED)
        .or_else(|| (!allowed).then(|| unruled(f[9]).to_owned()));

    Ok(NetworkEvent {
        allowed,
        host: host.unwrap_or_default(),
        port: port.unwrap_or(0),
        squid_result: result,
        resolved,
        started,
        reason,
        method,
        client,
        detail: None,
    })
}

/// Why Squid refused a request that no rule judged, from its HTTP status
/// (`000`: the connection ended before a request arrived).
fn unruled(status: &str) -> &'static str {
    match status {
        "000" => reason::NO_REQUEST,
        _ => reason::MALFORMED_REQUEST,
    }
}

/// The event reported for a line [`parse_access_line`] refused: never
/// silently dropped, counted as refused.
pub(crate) fn unparsed_event(line: &str, error: &AccessLogError) -> NetworkEvent {
    let mut shown: String = line.chars().take(1024).collect();
    if shown.len() < line.len() {
        shown.push('…');
    }
    NetworkEvent {
        allowed: false,
        host: String::new(),
        port: 0,
        squid_result: "-".into(),
        resolved: None,
        started: jiff::Timestamp::now(),
        reason: Some(reason::UNPARSED_LOG_LINE.into()),
        method: "-".into(),
        client: None,
        detail: Some(format!("{error}: {}", printable(&shown))),
    }
}

/// `-` is Squid's "no value".
fn opt(field: &str) -> Option<&str> {
    (!field.is_empty() && field != "-").then_some(field)
}

fn parse_time(field: &str) -> Result<jiff::Timestamp, AccessLogError> {
    let bad = || AccessLogError::BadField {
        field: "start time",
        value: shorten(field),
    };
    let (secs, frac) = field.split_once('.').unwrap_or((field, ""));
    if secs.is_empty()
        || secs.len() > 12
        || frac.len() > 9
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let secs: i64 = secs.parse().map_err(|_| bad())?;
    let nanos: i32 = if frac.is_empty() {
        0
    } else {
        let digits: i32 = frac.parse().map_err(|_| bad())?;
        digits * 10i32.pow(9 - u32::try_from(frac.len()).map_err(|_| bad())?)
    };
    jiff::Timestamp::new(secs, nanos).map_err(|_| bad())
}

fn parse_ip(field: &'static str, value: &str) -> Result<IpAddr, AccessLogError> {
    strip_brackets(value)
        .parse::<IpAddr>()
        .map(|ip| ip.to_canonical())
        .map_err(|_| AccessLogError::BadField {
            field,
            value: shorten(value),
        })
}

fn parse_port(field: &'static str, value: &str) -> Result<u16, AccessLogError> {
    let bad = || AccessLogError::BadField {
        field,
        value: shorten(value),
    };
    if value.is_empty() || value.len() > 5 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value.parse::<u16>().map_err(|_| bad())
}

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s)
}

/// `host:port`, `[v6]:port` or `host` → host (without brackets) and port.
fn split_authority(s: &str) -> (&str, Option<u16>) {
    if let Some(inner) = s.strip_prefix('[')
        && let Some((host, rest)) = inner.split_once(']')
    {
        let port = rest
            .strip_prefix(':')
            .and_then(|p| parse_port("port", p).ok());
        return (host, port);
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, parse_port("port", port).ok()),
        _ => (s, None),
    }
}

/// Undoes Squid's URL encoding (`%XX`). The decoded form is used only when
/// it is printable UTF-8; otherwise the field stays as logged.
fn decode(field: &str) -> String {
    if !field.contains('%') {
        return printable(field);
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(s) if !s.chars().any(char::is_control) => s,
        _ => printable(field),
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Control characters escaped (`\u{1b}`), everything else as is.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    printable(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> NetworkEvent {
        parse_access_line(line).unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    #[test]
    fn allowed_tunnel() {
        let e = parse(
            "constle1 1795986391.067 127.0.0.1 34962 CONNECT api.example.test:443 api.example.test 443 TCP_TUNNEL 200 203.0.113.200 443 allowed\n",
        );
        assert!(e.allowed);
        assert_eq!(e.audit_event_name(), "network_allowed");
        assert_eq!(e.host, "api.example.test");
        assert_eq!(e.port, 443);
        assert_eq!(e.squid_result, "TCP_TUNNEL/200");
        assert_eq!(e.resolved, Some("203.0.113.200".parse().expect("ip")));
        assert_eq!(e.reason, None);
        assert_eq!(e.method, "CONNECT");
        assert_eq!(e.client, Some("127.0.0.1:34962".parse().expect("addr")));
        assert_eq!(
            e.started,
            jiff::Timestamp::new(1_795_986_391, 67_000_000).expect("ts")
        );
    }

    #[test]
    fn refusals_carry_their_reason() {
        for (why, result) in [
            ("port", "TCP_DENIED/403"),
            ("not_allowed", "TCP_DENIED/403"),
            ("ip_literal", "TCP_DENIED/403"),
            ("internal_destination", "TCP_DENIED/403"),
            ("not_connect", "TCP_DENIED/403"),
        ] {
            let e = parse(&format!(
                "constle1 1795986391.072 127.0.0.1 34970 CONNECT a.example.test:22 a.example.test 22 TCP_DENIED 403 - - {why}"
            ));
            assert!(!e.allowed);
            assert_eq!(e.reason.as_deref(), Some(why));
            assert_eq!(e.squid_result, result);
            assert_eq!(e.resolved, None);
            assert_eq!(e.port, 22);
        }
    }

    #[test]
    fn ipv6_literals_lose_brackets_and_encoding() {
        let e = parse(
            "constle1 1795986406.110 127.0.0.1 33228 CONNECT %5B2001:db8::200%5D:443 %5B2001:db8::200%5D 443 TCP_DENIED 403 - - ip_literal",
        );
        assert_eq!(e.host, "2001:db8::200");
        let e = parse(
            "constle1 1795986356.866 127.0.0.1 45572 CONNECT fe80::1%2525lo:443 fe80::1%2525lo 443 TCP_DENIED 403 - - ip_literal",
        );
        assert_eq!(e.host, "fe80::1%25lo");
    }

    #[test]
    fn malformed_requests_have_their_reason() {
        let e = parse(
            "constle1 1795986391.366 127.0.0.1 35058 garbage error:invalid-request - - NONE_NONE 400 - - -",
        );
        assert!(!e.allowed);
        assert_eq!(e.host, "");
        assert_eq!(e.port, 0);
        assert_eq!(e.method, "garbage");
        assert_eq!(e.squid_result, "NONE_NONE/400");
        assert_eq!(e.reason.as_deref(), Some("malformed_request"));
        // A CONNECT Squid could not parse still names its target in the URL.
        let e = parse(
            "constle1 1795986406.112 127.0.0.1 33272 CONNECT .api.example.test:443 - - NONE_NONE 400 - - -",
        );
        assert_eq!((e.host.as_str(), e.port), (".api.example.test", 443));
        let e = parse(
            "constle1 1795986406.113 127.0.0.1 33294 CONNECT api.example.test:65979 - - NONE_NONE 400 - - -",
        );
        assert_eq!((e.host.as_str(), e.port), ("api.example.test", 0));
    }

    #[test]
    fn probe_line_parses() {
        let e = parse(
            "constle1 1795986391.617 127.0.0.1 35072 - error:transaction-end-before-headers - - NONE_NONE 000 - - -",
        );
        assert_eq!(e.method, "-");
        assert_eq!(e.squid_result, "NONE_NONE/000");
        assert!(!e.allowed);
        assert_eq!(e.reason.as_deref(), Some("no_request"));
    }

    #[test]
    fn allowed_needs_exactly_the_allow_note() {
        let e = parse(
            "constle1 1.5 127.0.0.1 1 CONNECT a:443 a 443 TCP_TUNNEL 200 203.0.113.2 443 allowed%2Cport",
        );
        assert!(!e.allowed);
        assert_eq!(e.reason.as_deref(), Some("port"));
        assert_eq!(e.started, jiff::Timestamp::new(1, 500_000_000).expect("ts"));
    }

    #[test]
    fn encoded_control_characters_stay_encoded() {
        let e = parse(
            "constle1 1.000 127.0.0.1 1 G%1BET http://x%0A/ x%0A 80 TCP_DENIED 403 - - not_connect",
        );
        assert_eq!(e.method, "G%1BET");
        assert_eq!(e.host, "x%0A");
    }

    #[test]
    fn rejects_what_is_not_ours() {
        for (line, want) in [
            ("", AccessLogError::NotConstleFormat),
            (
                "1795986391.067 127.0.0.1 TCP_TUNNEL/200",
                AccessLogError::NotConstleFormat,
            ),
            ("constle1", AccessLogError::NotConstleFormat),
            (
                "constle1 1.0 a b",
                AccessLogError::FieldCount {
                    expected: 13,
                    found: 4,
                },
            ),
        ] {
            assert_eq!(parse_access_line(line), Err(want), "{line:?}");
        }
        for line in [
            "constle1 x 127.0.0.1 1 CONNECT a:443 a 443 TCP_TUNNEL 200 - - allowed",
            "constle1 1.0000000001 127.0.0.1 1 CONNECT a:443 a 443 TCP_TUNNEL 200 - - allowed",
            "constle1 99999999999999 127.0.0.1 1 CONNECT a:443 a 443 TCP_TUNNEL 200 - - allowed",
            "constle1 1.0 127.0.0.1 1 CONNECT a:443 a 99999 TCP_TUNNEL 200 - - allowed",
            "constle1 1.0 127.0.0.1 1 CONNECT a:443 a 443 TCP_TUNNEL 200 nope - allowed",
            "constle1 1.0 127.0.0.1 1 CONNECT a:443 a +443 TCP_TUNNEL 200 - - allowed",
        ] {
            assert!(
                matches!(
                    parse_access_line(line),
                    Err(AccessLogError::BadField { .. })
                ),
                "{line}"
            );
        }
    }

    #[test]
    fn unparsed_lines_become_refusals_with_detail() {
        let line = "garbage\u{1b}[2J";
        let err = parse_access_line(line).expect_err("garbage");
        let e = unparsed_event(line, &err);
        assert!(!e.allowed);
        assert_eq!(e.reason.as_deref(), Some(reason::UNPARSED_LOG_LINE));
        let detail = e.detail.expect("detail");
        assert!(!detail.contains('\u{1b}'), "{detail}");
    }
}
