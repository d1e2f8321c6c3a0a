//! The client: HTTP/1.1 (hyper) on a kept-alive connection, to the
//! provider over TCP on 127.0.0.1 or to a gate over its Unix socket, as
//! an agent's SDK reaches it from the sandbox's relay. Each call is timed
//! from just before its request is sent: to the first token (the first
//! chunk holding a token's event) and to the last byte, and its answer
//! checked (status 200, every token, the final event).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::scenario::Scenario;

/// Where a path's calls go.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

/// One call, timed.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// To the first token (a non-streamed answer: its last byte).
    pub first_token: Duration,
    /// To the last byte.
    pub total: Duration,
}

/// An open connection to a target.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    pub async fn open(target: &Target) -> Connection {
        match target {
            Target::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await.expect("the provider");
                stream.set_nodelay(true).expect("nodelay");
                Connection::over(stream).await
            }
            Target::Unix(path) => {
                Connection::over(UnixStream::connect(path).await.expect("the gate")).await
            }
        }
    }

    async fn over<S>(stream: S) -> Connection
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("an HTTP/1.1 connection");
        tokio::spawn(connection);
        Connection { sender }
    }

    /// Sends one call of `scenario` with `body` and times it; `tokens`
    /// is how many token events the answer must hold.
    pub async fn call(&mut self, scenario: Scenario, body: &Bytes, tokens: u64) -> Timing {
        let request = Request::post(scenario.path())
            .header(HOST, HeaderValue::from_static("127.0.0.1"))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("x-api-key", "constle-gate-holds-the-key")
            .body(Full::new(body.clone()))
            .expect("a request");
        self.sender.ready().await.expect("a ready connection");
        let sent = Instant::now();
        let response = self.sender.send_request(request).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::OK, "{scenario:?}");
        let mut body = response.into_body();
        let mut seen = Vec::new();
        let mut first_token = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("a body");
            if let Some(chunk) = frame.data_ref() {
                let from = seen.len().saturating_sub(scenario.token_marker().len());
                seen.extend_from_slice(chunk);
                if first_token.is_none() && contains(&seen[from..], scenario.token_marker()) {
                    first_token = Some(sent.elapsed());
                }
            }
        }
        let total = sent.elapsed();
        check(scenario, &seen, tokens);
        Timing {
            first_token: if scenario.stream {
                first_token.expect("a token")
            } else {
                total
            },
            total,
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The answer was whole: every token's event, and the final one.
fn check(scenario: Scenario, body: &[u8], tokens: u64) {
    assert!(contains(body, scenario.end_marker()), "{scenario:?}: cut");
    if scenario.stream {
        let marker = scenario.token_marker();
        let count = body.windows(marker.len()).filter(|w| w == &marker).count();
        assert_eq!(count as u64, tokens, "{scenario:?}: tokens lost");
    }
}
