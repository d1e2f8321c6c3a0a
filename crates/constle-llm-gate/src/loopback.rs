//! The gate answers only requests addressed to loopback, so a web page a
//! browser in the sandbox loads cannot spend through it (DNS rebinding: a
//! name the attacker controls made to resolve to 127.0.0.1 gets the
//! page's requests there, same-origin). Such a request names the page's
//! host in `Host`, and its origin in `Origin`; so `Host` must be sent
//! once and be `localhost`, `127.0.0.0/8` or `[::1]` (any port), and
//! `Origin`, when sent, an `http(s)://` origin on one of those.

use std::net::Ipv4Addr;

use hyper::HeaderMap;
use hyper::header::{self, HeaderName};

/// Whether `headers` address the gate on loopback.
pub(crate) fn addressed_to_loopback(headers: &HeaderMap) -> bool {
    let host = single(headers, &header::HOST).is_some_and(is_loopback_authority);
    let origin = !headers.contains_key(header::ORIGIN)
        || single(headers, &header::ORIGIN).is_some_and(|origin| {
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            authority.is_some_and(is_loopback_authority)
        });
    host && origin
}

fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values
        .next()
        .is_none()
        .then(|| first.to_str().ok())
        .flatten()
}

/// `host[:port]` with a loopback host.
fn is_loopback_authority(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some(("::1", "")) => return true,
            Some(("::1", port)) => ("::1", port.strip_prefix(':')),
            _ => return false,
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    let host_ok = host == "::1"
        || host.eq_ignore_ascii_case("localhost")
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
    port_ok && host_ok
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn check(host: &[&str], origin: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        for value in host {
            headers.append(header::HOST, HeaderValue::from_str(value).unwrap());
        }
        for value in origin {
            headers.append(header::ORIGIN, HeaderValue::from_str(value).unwrap());
        }
        addressed_to_loopback(&headers)
    }

    #[test]
    fn loopback_only() {
        for host in [
            "127.0.0.1:4000",
            "localhost",
            "LOCALHOST:4001",
            "[::1]:4000",
            "[::1]",
            "127.9.9.9",
        ] {
            assert!(check(&[host], &[]), "{host}");
            assert!(check(&[host], &["http://127.0.0.1:4000"]), "{host}");
        }
        for host in [
            "evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:4000",
            "localhost:",
            "localhost:99999",
            "[::2]",
            "a@localhost",
        ] {
            assert!(!check(&[host], &[]), "{host}");
        }
        assert!(!check(&[], &[]));
        assert!(!check(&["localhost", "localhost"], &[]));
        for origin in [
            "http://evil.example",
            "null",
            "file://",
            "http://localhost/x",
        ] {
            assert!(!check(&["localhost"], &[origin]), "{origin}");
        }
    }
}
