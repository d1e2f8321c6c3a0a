//! The `CONNECT` a captured connection becomes: the request, and reading
//! the proxy's answer head (bounded).

use std::io;

use constle_manifest::Hostname;
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The longest answer head read from the proxy; a longer one is refused.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

/// The port every captured connection is for: the capture listeners'.
pub(crate) const PORT: u16 = 443;

/// The request for a tunnel to `name`, as a client using `HTTPS_PROXY`
/// sends it. `name` passed the egress policy's host-name rules, so it
/// holds nothing that could end the line.
pub(crate) fn request(name: &Hostname) -> String {
    let name = name.as_str();
    format!("CONNECT {name}:{PORT} HTTP/1.1\r\nHost: {name}:{PORT}\r\n\r\n")
}

/// Reads the proxy's answer head: `Some(bytes after the head)` when it
/// opened the tunnel (`200`), `None` for any other answer, a head longer
/// than [`MAX_HEAD`], or a proxy that closed first.
pub(crate) async fn read_answer(
    proxy: &mut (impl AsyncRead + Unpin),
) -> io::Result<Option<Vec<u8>>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0; 1024];
    loop {
        let read = proxy.read(&mut chunk).await?;
        let Some(bytes) = chunk.get(..read).filter(|bytes| !bytes.is_empty()) else {
            return Ok(None);
        };
        buffer.extend_from_slice(bytes);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok(opened(&buffer).then_some(rest));
        }
        if buffer.len() >= MAX_HEAD {
            return Ok(None);
        }
    }
}

/// Whether `head`'s status line says the tunnel is open: `HTTP/1.x 200`.
fn opened(head: &[u8]) -> bool {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    (version == b"HTTP/1.1" || version == b"HTTP/1.0") && parts.next() == Some(b"200")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    async fn answer(bytes: &[u8]) -> Option<Vec<u8>> {
        read_answer(&mut &bytes[..]).await.unwrap()
    }

    #[test]
    fn the_request_names_the_host_and_port_twice() {
        let name = Hostname::new("api.example.com").unwrap();
        assert_eq!(
            request(&name),
            "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn only_200_opens_and_bytes_after_the_head_are_kept() {
        let open = answer(b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03").await;
        assert_eq!(open, Some(b"\x16\x03".to_vec()));
        assert_eq!(
            answer(b"HTTP/1.0 200\r\nVia: x\r\n\r\n").await,
            Some(Vec::new())
        );
        for refused in [
            &b"HTTP/1.1 403 Forbidden\r\n\r\n"[..],
            b"HTTP/1.1 2000 x\r\n\r\n",
            b"HTTP/1.1 201 Created\r\n\r\n",
            b"HTTP/2 200\r\n\r\n",
            b"ICY 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"",
        ] {
            assert_eq!(answer(refused).await, None, "{}", refused.escape_ascii());
        }
    }

    #[tokio::test]
    async fn a_head_past_the_bound_is_refused() {
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.resize(MAX_HEAD, b'a');
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(answer(&long).await, None);
        let mut fits = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        fits.resize(MAX_HEAD - 5, b'a');
        fits.extend_from_slice(b"\r\n\r\n");
        assert_eq!(answer(&fits).await, Some(Vec::new()));
    }
}
