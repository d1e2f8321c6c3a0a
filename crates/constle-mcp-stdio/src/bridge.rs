//! [`StdioBridge`]: the Streamable HTTP side (what the gate sends) over a
//! [`Link`] to the current server process, and the one session a stdio
//! server has.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use constle_mcp_gate::{
    Reason, RequestId, Transport, TransportBody, TransportError, TransportFuture, error_body,
};
use http_body_util::{BodyExt as _, Empty, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::mpsc;

use crate::link::{Answer, Link, Refused, Stopper};
use crate::message::{self, Body};
use crate::process::{ExitCause, Launch, ServerEvent};

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

type Answered = Result<Response<TransportBody>, TransportError>;

/// A stdio MCP server behind the gate: a [`Transport`] that answers the
/// gate's Streamable HTTP requests by writing to the server's stdin and
/// reading its stdout. Cloning gives another handle on the same bridge.
#[derive(Clone)]
pub struct StdioBridge {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StdioBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioBridge")
            .field("server", &self.shared.server)
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// The server's id, for messages.
    server: Arc<str>,
    launch: Box<dyn Launch>,
    timeout: Duration,
    events: mpsc::UnboundedSender<ServerEvent>,
    current: tokio::sync::Mutex<Option<Running>>,
}

/// The current process and the session on it, if one was started.
struct Running {
    link: Arc<Link>,
    stopper: Stopper,
    /// The session's id; `None` while no `initialize` has used it.
    session: Option<String>,
}

impl StdioBridge {
    /// Starts the server (`launch`) for server id `server`, ready for the
    /// agent's first `initialize`. A request waits at most `timeout` for
    /// its response; past that the server counts as wedged and is stopped
    /// (use the gate's response timeout). What becomes of the processes
    /// goes to `events`.
    ///
    /// # Errors
    ///
    /// The first launch's error: a server that cannot even start fails
    /// the run before the agent starts.
    pub async fn start(
        server: &str,
        launch: impl Launch,
        timeout: Duration,
        events: mpsc::UnboundedSender<ServerEvent>,
    ) -> std::io::Result<StdioBridge> {
        let shared = Shared {
            server: server.into(),
            launch: Box::new(launch),
            timeout,
            events,
            current: tokio::sync::Mutex::new(None),
        };
        let first = shared.run().await?;
        *shared.current.lock().await = Some(first);
        Ok(StdioBridge {
            shared: Arc::new(shared),
        })
    }

    /// Stops the server, if it runs (the run's end), and waits until it is
    /// gone. Requests after this find no session.
    pub async fn stop(&self) {
        let running = self.shared.current.lock().await.take();
        if let Some(running) = running {
            running.stopper.stop(ExitCause::RunEnded).await;
        }
    }
}

impl Transport for StdioBridge {
    fn send(&self, request: Request<Bytes>) -> TransportFuture {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { shared.handle(request).await })
    }
}

impl Shared {
    /// A new process, watched.
    async fn run(&self) -> std::io::Result<Running> {
        let process = self.launch.launch().await?;
        let _ = self.events.send(ServerEvent::Started {
            pid: process.child.id(),
        });
        let (link, stopper) = Link::start(
            Arc::clone(&self.server),
            process,
            self.timeout,
            self.events.clone(),
        );
        Ok(Running {
            link,
            stopper,
            session: None,
        })
    }

    async fn handle(&self, request: Request<Bytes>) -> Answered {
        let (parts, body) = request.into_parts();
        match parts.method {
            Method::POST => self.post(&parts.headers, body).await,
            Method::GET => self.get(&parts.headers).await,
            Method::DELETE => self.delete(&parts.headers).await,
            _ => Err(refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                Reason::InvalidMessage,
                "only POST, GET and DELETE",
            )),
        }
    }

    async fn post(&self, headers: &HeaderMap, bytes: Bytes) -> Answered {
        let Some(body) = Body::parse(&bytes) else {
            let message = "the stdio bridge cannot route this body";
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                Reason::InvalidMessage,
                message,
            ));
        };
        let (link, session) = match body.is_initialize() {
            true => self.new_session().await?,
            false if body.initializes() => {
                let message = "initialize cannot be part of a batch";
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    Reason::InvalidMessage,
                    message,
                ));
            }
            false => match self.session(headers).await {
                Ok(link) => (link, None),
                Err(why) => return Err(self.no_session(why)),
            },
        };
        for id in body.cancelled() {
            link.cancel(id);
        }
        let ids: Vec<RequestId> = body.requests().cloned().collect();
        let waits = match link.expect(&ids, self.timeout) {
            Ok(waits) => waits,
            Err(Refused::Ended(why)) => return Err(TransportError::Exited { why }),
            Err(Refused::DuplicateId(id)) => return Err(self.duplicate(&body, &id)),
        };
        if let Err(why) = link.send(&message::to_line(&bytes)).await {
            link.forget(&ids);
            return Err(TransportError::Exited { why });
        }
        if ids.is_empty() {
            return Ok(empty(StatusCode::ACCEPTED));
        }
        let mut responses = Vec::with_capacity(waits.len());
        for (wait, id) in waits.into_iter().zip(&ids) {
            let answer = wait.await.unwrap_or(Answer::Ended("ended".into()));
            responses.push(match answer {
                Answer::Response(response) => response,
                Answer::Cancelled => cancelled(id),
                Answer::Ended(why) => return Err(TransportError::Exited { why }),
            });
        }
        let body = match body.batch {
            true => message::batch(&responses),
            false => responses.swap_remove(0),
        };
        let mut response = json(StatusCode::OK, body);
        if let Some(session) = session {
            response.headers_mut().insert(SESSION_ID, session);
        }
        Ok(response)
    }

    /// A session for an `initialize`: the process started for it if no
    /// session used it yet, else a fresh one (the old one stopped: a stdio
    /// server is initialized once in its life). Its link and id.
    async fn new_session(&self) -> Result<(Arc<Link>, Option<HeaderValue>), TransportError> {
        let mut current = self.current.lock().await;
        let fresh = current
            .as_ref()
            .is_some_and(|r| r.session.is_none() && r.link.ended().is_none());
        if !fresh {
            if let Some(old) = current.take() {
                old.stopper.stop(ExitCause::SessionReplaced).await;
            }
            match self.run().await {
                Ok(running) => *current = Some(running),
                Err(err) => {
                    let _ = self.events.send(ServerEvent::NotStarted {
                        error: err.to_string(),
                    });
                    let why = "could not be started".to_string();
                    return Err(TransportError::Exited { why });
                }
            }
        }
        let running = current.as_mut().ok_or(TransportError::Unreachable)?;
        let id = session_id().ok_or(TransportError::Unreachable)?;
        let header = HeaderValue::from_str(&id).map_err(|_| TransportError::Unreachable)?;
        running.session = Some(id);
        Ok((Arc::clone(&running.link), Some(header)))
    }

    /// The link of the session `headers` name.
    async fn session(&self, headers: &HeaderMap) -> Result<Arc<Link>, NoSession> {
        let current = self.current.lock().await;
        check_session(current.as_ref(), headers)?;
        current
            .as_ref()
            .map(|r| Arc::clone(&r.link))
            .ok_or(NoSession::Unknown)
    }

    /// The refusal of a request outside the current session: 400 without a
    /// session id, 404 for one that is not the current session's (MCP
    /// clients start a new session on a 404).
    fn no_session(&self, why: NoSession) -> TransportError {
        match why {
            NoSession::Missing => refusal(
                StatusCode::BAD_REQUEST,
                Reason::SessionRequired,
                &format!(
                    "MCP server {:?} has one session at a time: send initialize first, then \
                     its Mcp-Session-Id",
                    self.server
                ),
            ),
            NoSession::Unknown => refusal(
                StatusCode::NOT_FOUND,
                Reason::SessionUnknown,
                &format!(
                    "this is not the current session of MCP server {:?} (it ended, or a newer \
                     one started); send initialize to start a new one",
                    self.server
                ),
            ),
        }
    }

    /// The standalone stream of server-initiated messages.
    async fn get(&self, headers: &HeaderMap) -> Answered {
        let link = match self.session(headers).await {
            Ok(link) => link,
            Err(why) => return Err(self.no_session(why)),
        };
        let messages = link
            .open_stream()
            .map_err(|why| TransportError::Exited { why })?;
        let frames = futures_util::stream::unfold(messages, |mut messages| async move {
            let message = messages.recv().await?;
            let mut event = Vec::with_capacity(message.len() + 8);
            event.extend_from_slice(b"data: ");
            event.extend_from_slice(&message);
            event.extend_from_slice(b"\n\n");
            Some((Ok(Frame::data(Bytes::from(event))), messages))
        });
        let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        Ok(response)
    }

    /// Ends the session: its process is stopped, and the next `initialize`
    /// starts a fresh one.
    async fn delete(&self, headers: &HeaderMap) -> Answered {
        let running = {
            let mut current = self.current.lock().await;
            if let Err(why) = check_session(current.as_ref(), headers) {
                return Err(self.no_session(why));
            }
            current.take()
        };
        if let Some(running) = running {
            running.stopper.stop(ExitCause::SessionEnded).await;
        }
        Ok(empty(StatusCode::OK))
    }

    /// The refusal of a body with an id already in flight: in a batch 400,
    /// else 200 (the gate answers a single request's error with its id).
    fn duplicate(&self, body: &Body, id: &RequestId) -> TransportError {
        let message = format!(
            "request id {id} is already waiting for an answer from MCP server {:?}; \
             use an id that is not in flight",
            self.server
        );
        let status = match body.batch {
            false => StatusCode::OK,
            true => StatusCode::BAD_REQUEST,
        };
        refusal(status, Reason::DuplicateId, &message)
    }
}

/// Why a request is not one of the current session's.
enum NoSession {
    /// It names no session.
    Missing,
    /// It names another.
    Unknown,
}

/// Whether `headers` name `current`'s session.
fn check_session(current: Option<&Running>, headers: &HeaderMap) -> Result<(), NoSession> {
    let asked = headers.get(&SESSION_ID).ok_or(NoSession::Missing)?;
    let session = current.and_then(|r| r.session.as_deref());
    match session.is_some_and(|s| s.as_bytes() == asked.as_bytes()) {
        true => Ok(()),
        false => Err(NoSession::Unknown),
    }
}

/// A fresh session id: 128 random bits, in hex.
fn session_id() -> Option<String> {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).ok()?;
    Some(hex::encode(bits))
}

fn cancelled(id: &RequestId) -> Bytes {
    let message = "the request was cancelled; the stdio server is not waited for";
    error_body(Some(id), Reason::RequestCancelled, message).into()
}

/// A refusal of the bridge's own, which the gate answers and records.
fn refusal(status: StatusCode, reason: Reason, message: &str) -> TransportError {
    TransportError::Refused {
        status,
        reason,
        message: message.to_owned(),
    }
}

fn json(status: StatusCode, body: Bytes) -> Response<TransportBody> {
    let mut response = Response::new(
        Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<TransportBody> {
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    response
}
