//! The HTTP side: the gate's protocol (`POST /gate`,
//! `GET /gate/<request_id>/decision`, and version 2's optional
//! `POST /gate/<request_id>/votes`) and the person's page (`/`, `/login`,
//! `/decide`, `/logout`).
//!
//! Only [`decide`] ever signs, and only after it has found a live session
//! and the session's CSRF token in the form: the key signs what a logged-in
//! person clicked, nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Form;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use constle_escape::escape as escape_line;
use constle_identity::SigningIdentity;
use serde::Deserialize;

use crate::auth::{hash_token, new_token, same_token, verify_password};
use crate::html;
use crate::protocol;
use crate::request::{
    GateRequest, MAX_POST_BYTES, MAX_VOTES_BYTES, RequestError, parse_gate_request,
    parse_votes_report,
};
use crate::store::{Decided, Decision, Inserted, ReportOutcome, Session, Store, StoreError};
use crate::throttle::{Throttle, counted_as};

/// The session cookie. `__Host-` makes the browser insist on `Secure`,
/// `Path=/` and no `Domain`, so no other site or subdomain can plant it.
pub const SESSION_COOKIE: &str = "__Host-constle-approver";

/// How long a login lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// What every response carries: no script, no external anything, no
/// framing, forms only to this origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'";

/// The largest form accepted (login, decide, logout).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// How many past requests the page lists.
const HISTORY_LEN: u32 = 100;

const STYLE: &str = include_str!("style.css");

/// How long a decision poll for an undecided request is held open waiting
/// for a person (well inside the gate's 30 s per exchange).
pub const DECISION_HOLD: std::time::Duration = std::time::Duration::from_secs(20);

/// The endpoint's state: the store and the key it signs with.
pub struct Approver {
    store: Store,
    signer: SigningIdentity,
    /// A hash to check passwords of unknown users against, so that a wrong
    /// user name takes as long as a wrong password.
    dummy_phc: String,
    /// Failed sign-ins, by user name and by address.
    throttle: Throttle,
    /// Woken whenever a decision is recorded, for the decision polls
    /// waiting on one.
    decided: tokio::sync::Notify,
}

impl Approver {
    /// An endpoint signing with `signer`.
    ///
    /// # Errors
    ///
    /// [`crate::AuthError`] if hashing the timing-equaliser fails.
    pub fn new(store: Store, signer: SigningIdentity) -> Result<Approver, crate::AuthError> {
        let dummy = new_token()?;
        Ok(Approver {
            store,
            signer,
            dummy_phc: crate::auth::hash_password(&dummy)?,
            throttle: Throttle::default(),
            decided: tokio::sync::Notify::new(),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The routes. `/login` needs the client's address: serve them with
/// `into_make_service_with_connect_info::<SocketAddr>()`, as [`serve`] does.
pub fn router(approver: Arc<Approver>) -> Router {
    Router::new()
        .route(
            "/gate",
            post(receive).layer(DefaultBodyLimit::max(MAX_POST_BYTES)),
        )
        .route("/gate/{id}/decision", get(decision))
        .route(
            "/gate/{id}/votes",
            post(votes).layer(DefaultBodyLimit::max(MAX_VOTES_BYTES)),
        )
        .route("/", get(index))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/decide", post(decide))
        .route("/style.css", get(style))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(approver)
}

/// Serves until `shutdown` completes.
///
/// # Errors
///
/// An I/O error from the listener.
pub async fn serve(
    listener: tokio::net::TcpListener,
    approver: Arc<Approver>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(approver).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        // Pending arguments and CSRF tokens must not sit in caches.
        (header::CACHE_CONTROL, "no-store"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// One line of the operator's log, on standard error.
fn log(line: &str) {
    eprintln!("approver: {line}");
}

fn internal(err: impl std::fmt::Display) -> Response {
    // The person sees that something failed; the operator sees what.
    log(&err.to_string());
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Html(html::message("Error", "The approver failed; see its log.")),
    )
        .into_response()
}

// ---------------------------------------------------------------------------
// The gate's side

/// A refused body: 413 if too large, else 400 saying what is wrong.
fn bad_body(err: &RequestError) -> Response {
    match err {
        RequestError::TooLarge => {
            (StatusCode::PAYLOAD_TOO_LARGE, "request too large\n").into_response()
        }
        err => (StatusCode::BAD_REQUEST, format!("{err}\n")).into_response(),
    }
}

/// Why this endpoint cannot take `request`, if it cannot: a version 2
/// request that does not list this endpoint's key, whose decision the gate
/// could never count.
fn not_for_this_key(approver: &Approver, request: &GateRequest) -> Option<Response> {
    let v2 = request.v2.as_ref()?;
    let own = approver.signer.did().as_str();
    if v2.approvers.iter().any(|listed| listed.did == own) {
        return None;
    }
    let text = format!(
        "this endpoint signs as {own}, which is not one of the request's approvers: its decision could not count\n"
    );
    Some((StatusCode::UNPROCESSABLE_ENTITY, text).into_response())
}

async fn receive(State(approver): State<Arc<Approver>>, body: Bytes) -> Response {
    let request = match parse_gate_request(&body) {
        Ok(request) => request,
        Err(err) => return bad_body(&err),
    };
    if let Some(refusal) = not_for_this_key(&approver, &request) {
        return refusal;
    }
    match approver.store.insert_request(&request, now()) {
        Ok(Inserted::New | Inserted::Same) => StatusCode::ACCEPTED.into_response(),
        Ok(Inserted::Conflict) => (
            StatusCode::CONFLICT,
            "another request already has this request_id\n",
        )
            .into_response(),
        Err(err) => internal(err),
    }
}

/// The decision on request `id`. A poll asking to wait (`Prefer: wait=N`,
/// RFC 7240, as the v2 gate sends) for a request that is known but not
/// yet decided is held up to N seconds (at most [`DECISION_HOLD`]) until a
/// person decides, so the gate hears of a decision at once, not at its
/// next poll; then 404, "not yet", as the protocol has it.
async fn decision(
    State(approver): State<Arc<Approver>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let held_until = tokio::time::Instant::now() + preferred_wait(&headers);
    loop {
        // Armed before the store is read, so a decision recorded between
        // the read and the wait still wakes it.
        let decided = approver.decided.notified();
        tokio::pin!(decided);
        decided.as_mut().enable();
        let stored = match approver.store.request(&id) {
            Ok(stored) => stored,
            Err(err) => return internal(err),
        };
        let Some(stored) = stored else {
            return StatusCode::NOT_FOUND.into_response();
        };
        if let Some(body) = protocol::decision_body(&stored) {
            return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
        }
        if tokio::time::timeout_at(held_until, decided).await.is_err() {
            return StatusCode::NOT_FOUND.into_response();
        }
    }
}

/// How long the poll asks to be held: `Prefer: wait=<seconds>`, capped at
/// [`DECISION_HOLD`]; none without it.
fn preferred_wait(headers: &HeaderMap) -> std::time::Duration {
    let seconds = headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix("wait=")?.trim().parse::<u64>().ok());
    std::time::Duration::from_secs(seconds.unwrap_or(0)).min(DECISION_HOLD)
}

/// The gate's "votes so far" (v2 §14): kept to be shown, marked as the
/// gate's unverified word; it changes nothing else.
async fn votes(
    State(approver): State<Arc<Approver>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let votes = match parse_votes_report(&body, &id) {
        Ok(votes) => votes,
        Err(err) => return bad_body(&err),
    };
    match approver.store.report_votes(&id, &votes, now()) {
        Ok(ReportOutcome::Kept) => StatusCode::ACCEPTED.into_response(),
        Ok(ReportOutcome::NotFound) => (StatusCode::NOT_FOUND, "no such request\n").into_response(),
        Ok(ReportOutcome::NotVersion2) => (
            StatusCode::CONFLICT,
            "a version 1 request has no votes to report\n",
        )
            .into_response(),
        Err(err) => internal(err),
    }
}

// ---------------------------------------------------------------------------
// The person's side

fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned())
}

fn session(approver: &Approver, headers: &HeaderMap) -> Result<Option<Session>, StoreError> {
    let Some(token) = session_token(headers) else {
        return Ok(None);
    };
    approver.store.session(&hash_token(&token), now())
}

/// Browsers say where a request came from; a form posted from another site
/// is refused even before the cookie (SameSite) and the CSRF token are.
fn cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v != "same-origin" && v != "none")
}

fn refused(status: StatusCode, title: &str, text: &str) -> Response {
    (status, Html(html::message(title, text))).into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

async fn index(State(approver): State<Arc<Approver>>, headers: HeaderMap) -> Response {
    let session = match session(&approver, &headers) {
        Ok(Some(session)) => session,
        Ok(None) => return Redirect::to("/login").into_response(),
        Err(err) => return internal(err),
    };
    let now = now();
    let lists = approver
        .store
        .pending(now)
        .and_then(|pending| Ok((pending, approver.store.history(now, HISTORY_LEN)?)));
    match lists {
        Ok((pending, history)) => Html(html::requests(
            &html::Viewer {
                user: &session.user,
                csrf: &session.csrf,
                key: approver.signer.did().as_str(),
            },
            &pending,
            &history,
            now,
        ))
        .into_response(),
        Err(err) => internal(err),
    }
}

async fn login_page() -> Response {
    Html(html::login(None)).into_response()
}

/// The fields of a form the browser sent. A body that is not a form, or
/// lacks a field, reads as those fields empty, so it meets the same checks
/// as any other (a missing `csrf` is a wrong token: 403) instead of axum's
/// 4xx for an unreadable form, which would answer before them.
fn fields<T: Default>(form: Result<Form<T>, FormRejection>) -> T {
    form.map(|Form(fields)| fields).unwrap_or_default()
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LoginForm {
    user: String,
    password: String,
}

async fn login(
    State(approver): State<Arc<Approver>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let form = fields(form);
    if cross_site(&headers) {
        return refused(StatusCode::FORBIDDEN, "Refused", "Cross-site form.");
    }
    let address = peer.ip();
    let who = format!(
        "user `{}` from {address}",
        escape_line(counted_as(&form.user))
    );
    let counted = match approver
        .throttle
        .attempt(&form.user, address, Instant::now())
    {
        Ok(counted) => counted,
        Err(wait) => return throttled(&who, wait),
    };
    let phc = match approver.store.password_hash(&form.user) {
        Ok(phc) => phc,
        Err(err) => return internal(err),
    };
    let known = phc.is_some();
    let phc = phc.unwrap_or_else(|| approver.dummy_phc.clone());
    let password = zeroize::Zeroizing::new(form.password);
    // Argon2 takes tens of milliseconds of CPU: not on the async workers.
    let matches = tokio::task::spawn_blocking(move || verify_password(&password, &phc))
        .await
        .unwrap_or(false);
    if !(known && matches) {
        log(&format!(
            "sign-in failed: {who} (failures so far: {} for this user name, {} from this address)",
            counted.user, counted.address
        ));
        return (
            StatusCode::UNAUTHORIZED,
            Html(html::login(Some("Wrong user name or password."))),
        )
            .into_response();
    }
    approver.throttle.succeeded(&form.user, address);
    log(&format!("signed in: {who}"));
    let (token, csrf) = match (new_token(), new_token()) {
        (Ok(token), Ok(csrf)) => (token, csrf),
        (Err(err), _) | (_, Err(err)) => return internal(err),
    };
    let now = now();
    if let Err(err) = approver.store.create_session(
        &hash_token(&token),
        &form.user,
        &csrf,
        now + SESSION_SECONDS,
        now,
    ) {
        return internal(err);
    }
    let cookie = format!(
        "{SESSION_COOKIE}={token}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age={SESSION_SECONDS}"
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

/// A sign-in refused before its password is checked: too many failures.
fn throttled(who: &str, wait: Duration) -> Response {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    log(&format!(
        "sign-in refused: {who} must wait {seconds} s after too many failures"
    ));
    let text = format!("Too many failed sign-ins: wait {seconds} s and try again.");
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, seconds.to_string())],
        Html(html::login(Some(&text))),
    )
        .into_response()
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LogoutForm {
    csrf: String,
}

async fn logout(
    State(approver): State<Arc<Approver>>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Response {
    let form = fields(form);
    let session = match session(&approver, &headers) {
        Ok(Some(session)) => session,
        Ok(None) => return Redirect::to("/login").into_response(),
        Err(err) => return internal(err),
    };
    if cross_site(&headers) || !same_token(&form.csrf, &session.csrf) {
        return refused(StatusCode::FORBIDDEN, "Refused", "Bad form token.");
    }
    if let Some(token) = session_token(&headers)
        && let Err(err) = approver.store.delete_session(&hash_token(&token))
    {
        return internal(err);
    }
    let cookie = format!("{SESSION_COOKIE}=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct DecideForm {
    csrf: String,
    request_id: String,
    decision: String,
}

async fn decide(
    State(approver): State<Arc<Approver>>,
    headers: HeaderMap,
    form: Result<Form<DecideForm>, FormRejection>,
) -> Response {
    let form = fields(form);
    let session = match session(&approver, &headers) {
        Ok(Some(session)) => session,
        Ok(None) => {
            return refused(
                StatusCode::FORBIDDEN,
                "Sign in first",
                "Only a signed-in approver can decide.",
            );
        }
        Err(err) => return internal(err),
    };
    if cross_site(&headers) || !same_token(&form.csrf, &session.csrf) {
        return refused(
            StatusCode::FORBIDDEN,
            "Refused",
            "The form's token does not match this session; reload the page and try again.",
        );
    }
    let decision = match form.decision.as_str() {
        "approved" => Decision::Approved,
        "denied" => Decision::Denied,
        _ => return refused(StatusCode::BAD_REQUEST, "Refused", "Unknown decision."),
    };
    let signer = &approver.signer;
    let outcome = approver.store.decide(
        &form.request_id,
        decision,
        &session.user,
        now(),
        signer.did().as_str(),
        |request| {
            let message = protocol::message(request, decision.as_str());
            base64::engine::general_purpose::STANDARD.encode(signer.sign(&message).to_bytes())
        },
    );
    match outcome {
        Ok(Decided::Recorded) => {
            approver.decided.notify_waiters();
            Redirect::to("/").into_response()
        }
        Ok(Decided::NotFound) => refused(StatusCode::NOT_FOUND, "Not found", "No such request."),
        Ok(Decided::AlreadyDecided) => refused(
            StatusCode::CONFLICT,
            "Already decided",
            "This request already has a decision; it stands.",
        ),
        Ok(Decided::Expired) => refused(
            StatusCode::CONFLICT,
            "Expired",
            "The gate has stopped waiting for this request; it can no longer be decided.",
        ),
        Err(err) => internal(err),
    }
}
