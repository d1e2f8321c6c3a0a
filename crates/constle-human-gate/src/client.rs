//! The gate's side of the webhook: POST the request, poll for a decision.

use std::fmt;
use std::time::Duration;

use constle_approval::quorum::{Ballot, BallotRequest, verify_vote};
use constle_approval::{
    MAX_DECISION_BYTES, MalformedDecision, PendingRequest, RequestId, Verdict, verify_decision,
};
use constle_identity::DidKey;
use constle_redact::is_loopback_host;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Client, Response, StatusCode, Url, redirect};
use tokio::time::{Instant, sleep_until, timeout_at};

/// The longest any one HTTP exchange may take, within the deadline.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a v2 poll lets the endpoint hold it open until a person
/// decides (`Prefer: wait`), inside [`EXCHANGE_TIMEOUT`].
const HELD_POLL: Duration = Duration::from_secs(20);
/// Polls are never closer together than this.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The decision endpoint's URL. It usually carries a secret, so it has no
/// `Display`, its `Debug` is redacted, and no error of this crate contains it.
#[derive(Clone)]
pub struct WebhookUrl(Url);

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookUrl(<redacted>)")
    }
}

/// Why there is no usable webhook URL. Messages never contain the URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookUrlError {
    /// The host variable named by `url_secret_ref` is not set (or empty).
    #[error("the host variable {0} is not set; gated calls can only be decided at the terminal")]
    NotSet(String),
    /// The variable is set but not valid Unicode.
    #[error("the host variable {0} is not valid UTF-8")]
    NotUnicode(String),
    /// Not an absolute URL.
    #[error("the webhook URL is not an absolute URL")]
    Invalid,
    /// Neither `https` nor `http`.
    #[error("the webhook URL must use https")]
    Scheme,
    /// Plain `http` to a host other than loopback.
    #[error("the webhook URL uses plain http to a non-loopback host; use https")]
    Insecure,
}

impl WebhookUrl {
    /// Read the URL from the host environment variable named `var` (the
    /// Agentfile's `url_secret_ref`).
    ///
    /// # Errors
    ///
    /// [`WebhookUrlError`] if it is unset, empty or unusable; the gate then
    /// decides at the terminal only.
    pub fn from_env(var: &str) -> Result<WebhookUrl, WebhookUrlError> {
        match std::env::var(var) {
            Ok(value) if !value.is_empty() => WebhookUrl::parse(&value),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(WebhookUrlError::NotSet(var.into())),
            Err(std::env::VarError::NotUnicode(_)) => Err(WebhookUrlError::NotUnicode(var.into())),
        }
    }

    /// Parse a URL: `https`, or plain `http` to a loopback address only.
    ///
    /// # Errors
    ///
    /// [`WebhookUrlError`] if the URL is unusable.
    pub fn parse(text: &str) -> Result<WebhookUrl, WebhookUrlError> {
        let url = Url::parse(text).map_err(|_| WebhookUrlError::Invalid)?;
        if url.cannot_be_a_base() || url.host().is_none() {
            return Err(WebhookUrlError::Invalid);
        }
        match url.scheme() {
            "https" => {}
            "http" if url.host_str().is_some_and(is_loopback_host) => {}
            "http" => return Err(WebhookUrlError::Insecure),
            _ => return Err(WebhookUrlError::Scheme),
        }
        Ok(WebhookUrl(url))
    }

    /// `<url>/<request_id>/decision`.
    fn decision_url(&self, request_id: &RequestId) -> Url {
        self.request_url(request_id, "decision")
    }

    /// `<url>/<request_id>/<leaf>`, the query string kept.
    fn request_url(&self, request_id: &RequestId, leaf: &str) -> Url {
        let mut url = self.0.clone();
        url.set_fragment(None);
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().push(request_id.as_str()).push(leaf);
        }
        url
    }
}

/// Why the webhook gave no decision by the deadline: the last thing seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoDecisionReason {
    /// The endpoint answered, but only "not yet decided" (404).
    Timeout,
    /// The endpoint could not be reached, or an exchange failed midway.
    Unreachable,
    /// The endpoint answered with a status that is neither a decision (200)
    /// nor "not yet" (404), or refused the POST.
    UnexpectedStatus(u16),
    /// The endpoint answered 200 with something that is not a decision.
    Malformed(MalformedDecision),
    /// No HTTP client could be built on this host.
    ClientUnavailable,
}

impl fmt::Display for NoDecisionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoDecisionReason::Timeout => f.write_str("no decision before the deadline"),
            NoDecisionReason::Unreachable => f.write_str("the decision endpoint was unreachable"),
            NoDecisionReason::UnexpectedStatus(s) => {
                write!(f, "the decision endpoint answered with status {s}")
            }
            NoDecisionReason::Malformed(m) => write!(f, "{m}"),
            NoDecisionReason::ClientUnavailable => f.write_str("no HTTP client could be built"),
        }
    }
}

/// What the webhook channel concluded.
#[derive(Debug)]
pub enum WebhookOutcome {
    /// A decision arrived and was checked: approved or denied.
    Decided(Verdict),
    /// The deadline passed without a decision; `on_timeout` decides.
    NoDecision(NoDecisionReason),
}

/// An HTTP client for decision endpoints: rustls, no redirects, no proxy,
/// bounded time per exchange. Build one per run and reuse it.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    http: Client,
}

/// The HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the webhook HTTP client could not be built (TLS setup failed)")]
#[non_exhaustive]
pub struct ClientError;

impl WebhookClient {
    /// Build the client.
    ///
    /// # Errors
    ///
    /// [`ClientError`] if TLS cannot be set up on this host.
    pub fn new() -> Result<WebhookClient, ClientError> {
        let http = Client::builder()
            .redirect(redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(EXCHANGE_TIMEOUT)
            .user_agent(concat!("constle-human-gate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|_| ClientError)?;
        Ok(WebhookClient { http })
    }

    /// POST `request` to `url`, then poll `GET <url>/<request_id>/decision`
    /// every `poll_interval` until a decision arrives or `deadline` passes.
    ///
    /// A failed POST is retried at each interval. 404 means not yet; 200 is
    /// checked with [`verify_decision`], and the first decision ends the
    /// wait (later ones are never fetched). Anything else — an unreachable
    /// endpoint, another status, a malformed or oversized 200 — counts as
    /// no decision and polling goes on. Dropping the future stops it, for
    /// example when the terminal decides first.
    ///
    /// `NoDecision` is only returned once the deadline has passed.
    pub async fn ask(
        &self,
        url: &WebhookUrl,
        request: PendingRequest,
        approver: &DidKey,
        deadline: Instant,
        poll_interval: Duration,
    ) -> WebhookOutcome {
        let exchange = Exchange {
            url,
            body: request.post_body().to_vec(),
            decision_url: url.decision_url(request.request_id()),
            wait: None,
        };
        let mut pending = Some(request);
        let decided = self
            .exchange(&exchange, deadline, poll_interval, |body| {
                let request = pending.take()?;
                match verify_decision(request, approver, &body) {
                    Ok(verdict) => Some(Ok(verdict)),
                    Err(undecided) => {
                        pending = Some(undecided.pending);
                        Some(Err(undecided.problem))
                    }
                }
            })
            .await;
        match decided {
            Ok(verdict) => WebhookOutcome::Decided(verdict),
            Err(reason) => WebhookOutcome::NoDecision(reason),
        }
    }

    /// Version 2: POST `request` to `url`, then poll for this endpoint's
    /// one decision until `deadline`, checked by [`verify_vote`] against
    /// the keys in force (`approvers`). The first decision that is one,
    /// counted or rejected, ends this endpoint's part; a body that is no
    /// decision keeps the polling going. `NoDecision` only once the
    /// deadline has passed.
    pub async fn ballot(
        &self,
        url: &WebhookUrl,
        request: &BallotRequest,
        approvers: &[DidKey],
        deadline: Instant,
        poll_interval: Duration,
    ) -> Result<Ballot, NoDecisionReason> {
        let exchange = Exchange {
            url,
            body: request.post_body().to_vec(),
            decision_url: url.decision_url(request.request_id()),
            wait: Some(HELD_POLL),
        };
        self.exchange(&exchange, deadline, poll_interval, |body| {
            Some(verify_vote(
                request,
                approvers,
                jiff::Timestamp::now(),
                &body,
            ))
        })
        .await
    }

    /// Version 2's "votes so far" (spec §14): POSTs `report` (made by
    /// [`BallotRequest::votes_report`]) to `<url>/<request_id>/votes` once,
    /// best effort. Says whether the endpoint took it (a 2xx), which
    /// changes nothing else.
    pub async fn report_votes(
        &self,
        url: &WebhookUrl,
        request: &BallotRequest,
        report: &[u8],
    ) -> bool {
        let sent = self
            .http
            .post(url.request_url(request.request_id(), "votes"))
            .header(CONTENT_TYPE, "application/json")
            .body(report.to_vec())
            .send()
            .await;
        // Never keep the error: its text would contain the URL.
        sent.is_ok_and(|response| response.status().is_success())
    }

    /// POSTs once (retried at each interval until it succeeds), then polls
    /// until `check` makes a decision of a 200 body (`Ok`) or the deadline
    /// passes. `check` says `Err` for a body that is no decision, `None`
    /// when it can check no more.
    async fn exchange<T>(
        &self,
        exchange: &Exchange<'_>,
        deadline: Instant,
        poll_interval: Duration,
        mut check: impl FnMut(Vec<u8>) -> Option<Result<T, MalformedDecision>>,
    ) -> Result<T, NoDecisionReason> {
        let poll_interval = poll_interval.max(MIN_POLL_INTERVAL);
        let mut posted = false;
        let mut last = NoDecisionReason::Timeout;
        while Instant::now() < deadline {
            let next = Instant::now() + poll_interval;
            if !posted {
                match timeout_at(deadline, self.post(exchange)).await {
                    Ok(Ok(())) => posted = true,
                    Ok(Err(reason)) => last = reason,
                    Err(_) => break,
                }
            }
            if posted {
                match timeout_at(deadline, self.poll(exchange)).await {
                    Ok(Poll::NotYet) => last = NoDecisionReason::Timeout,
                    Ok(Poll::Problem(reason)) => last = reason,
                    Ok(Poll::Body(body)) => match check(body) {
                        Some(Ok(decided)) => return Ok(decided),
                        Some(Err(problem)) => last = NoDecisionReason::Malformed(problem),
                        None => break,
                    },
                    Err(_) => break,
                }
            }
            sleep_until(next.min(deadline)).await;
        }
        sleep_until(deadline).await;
        Err(last)
    }

    async fn post(&self, exchange: &Exchange<'_>) -> Result<(), NoDecisionReason> {
        let response = self
            .http
            .post(exchange.url.0.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(exchange.body.clone())
            .send()
            .await
            .map_err(|_| NoDecisionReason::Unreachable)?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(NoDecisionReason::UnexpectedStatus(status.as_u16()))
        }
    }

    async fn poll(&self, exchange: &Exchange<'_>) -> Poll {
        let mut get = self
            .http
            .get(exchange.decision_url.clone())
            .header(ACCEPT, "application/json");
        if let Some(wait) = exchange.wait {
            get = get.header("prefer", format!("wait={}", wait.as_secs()));
        }
        let response = match get.send().await {
            Ok(response) => response,
            // Never keep the error: its text would contain the URL.
            Err(_) => return Poll::Problem(NoDecisionReason::Unreachable),
        };
        match response.status() {
            StatusCode::NOT_FOUND => Poll::NotYet,
            StatusCode::OK => read_bounded(response).await,
            other => Poll::Problem(NoDecisionReason::UnexpectedStatus(other.as_u16())),
        }
    }
}

/// Where one request goes: its POST and its decision URL.
struct Exchange<'a> {
    url: &'a WebhookUrl,
    body: Vec<u8>,
    decision_url: Url,
    /// How long an endpoint may hold a poll for an undecided request
    /// (`Prefer: wait=N`); v1 polls ask for none.
    wait: Option<Duration>,
}

enum Poll {
    NotYet,
    Body(Vec<u8>),
    Problem(NoDecisionReason),
}

/// Read at most [`MAX_DECISION_BYTES`]; a longer body is malformed.
async fn read_bounded(mut response: Response) -> Poll {
    let too_large = || Poll::Problem(NoDecisionReason::Malformed(MalformedDecision::TooLarge));
    if response
        .content_length()
        .is_some_and(|len| len > MAX_DECISION_BYTES as u64)
    {
        return too_large();
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_DECISION_BYTES {
                    return too_large();
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Poll::Body(body),
            Err(_) => return Poll::Problem(NoDecisionReason::Unreachable),
        }
    }
}

/// [`WebhookClient::ask`] with a client built for this one call. If no
/// client can be built, waits until `deadline` and reports no decision.
pub async fn ask(
    url: &WebhookUrl,
    request: PendingRequest,
    approver: &DidKey,
    deadline: Instant,
    poll_interval: Duration,
) -> WebhookOutcome {
    match WebhookClient::new() {
        Ok(client) => {
            client
                .ask(url, request, approver, deadline, poll_interval)
                .await
        }
        Err(_) => {
            sleep_until(deadline).await;
            WebhookOutcome::NoDecision(NoDecisionReason::ClientUnavailable)
        }
    }
}
