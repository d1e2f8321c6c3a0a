//! The webhook channel against a real local endpoint on 127.0.0.1 that holds
//! a real approver key: one test per row of the specification's tables.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_approval::{
    DenialReason, MalformedDecision, PendingRequest, Verdict, signed_message, verify_decision,
};
use constle_human_gate::{
    NoDecisionReason, WebhookClient, WebhookOutcome, WebhookUrl, WebhookUrlError,
};
use constle_identity::SigningIdentity;
use serde_json::{Value, json};
use tokio::time::Instant;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

const POLL: Duration = Duration::from_millis(20);

/// What the endpoint answers to the `n`th poll for a posted request.
trait Respond:
    Fn(usize, &Posted, &SigningIdentity) -> (StatusCode, Vec<u8>) + Send + Sync + 'static
{
}

impl<F> Respond for F where
    F: Fn(usize, &Posted, &SigningIdentity) -> (StatusCode, Vec<u8>) + Send + Sync + 'static
{
}

struct Posted {
    request_id: String,
    subject_digest: String,
}

struct Endpoint {
    signer: SigningIdentity,
    posts: Mutex<Vec<Posted>>,
    polls: AtomicUsize,
    respond: Box<dyn Respond>,
}

async fn receive(State(ep): State<Arc<Endpoint>>, body: Bytes) -> StatusCode {
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let text = |k: &str| value[k].as_str().unwrap_or_default().to_owned();
    if let Ok(mut posts) = ep.posts.lock() {
        posts.push(Posted {
            request_id: text("request_id"),
            subject_digest: text("subject_digest"),
        });
    }
    StatusCode::ACCEPTED
}

async fn decision(
    State(ep): State<Arc<Endpoint>>,
    Path(id): Path<String>,
) -> (StatusCode, Vec<u8>) {
    let n = ep.polls.fetch_add(1, Ordering::SeqCst);
    let Ok(posts) = ep.posts.lock() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, Vec::new());
    };
    match posts.iter().find(|p| p.request_id == id) {
        Some(posted) => (ep.respond)(n, posted, &ep.signer),
        None => (StatusCode::NOT_FOUND, Vec::new()),
    }
}

/// Start an endpoint at `http://127.0.0.1:<port>/gates`.
async fn endpoint(
    signer: SigningIdentity,
    respond: impl Respond,
) -> TestResult<(WebhookUrl, Arc<Endpoint>)> {
    let ep = Arc::new(Endpoint {
        signer,
        posts: Mutex::new(Vec::new()),
        polls: AtomicUsize::new(0),
        respond: Box::new(respond),
    });
    let app = Router::new()
        .route("/gates", post(receive))
        .route("/gates/{id}/decision", get(decision))
        .with_state(ep.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((
        WebhookUrl::parse(&format!("http://127.0.0.1:{port}/gates"))?,
        ep,
    ))
}

fn signed(signer: &SigningIdentity, id: &str, word: &str, digest: &str) -> Vec<u8> {
    let signature = signer.sign(signed_message(id, word, digest).as_bytes());
    json!({
        "request_id": id,
        "decision": word,
        "subject_digest": digest,
        "signature": BASE64.encode(signature.to_bytes()),
    })
    .to_string()
    .into_bytes()
}

fn gated(args: Value) -> TestResult<PendingRequest> {
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300);
    Ok(PendingRequest::new(
        "invoice-processor",
        "accounting",
        "pay_invoice",
        args,
        expires,
    )?)
}

fn invoice() -> TestResult<PendingRequest> {
    gated(json!({"invoice_id": "INV-0042"}))
}

/// Run one gate against an endpoint signing with `signer` and answering
/// with `respond`; the approver pinned is `signer`'s key.
async fn run(
    signer: SigningIdentity,
    wait: Duration,
    respond: impl Respond,
) -> TestResult<(WebhookOutcome, Arc<Endpoint>)> {
    let approver = signer.did().clone();
    let (url, ep) = endpoint(signer, respond).await?;
    let client = WebhookClient::new()?;
    let deadline = Instant::now() + wait;
    let outcome = client
        .ask(&url, invoice()?, &approver, deadline, POLL)
        .await;
    Ok((outcome, ep))
}

/// A gate against a fresh approver with ten seconds to decide: far longer
/// than any answer here takes, so a test that waits it out has failed.
async fn decide(respond: impl Respond) -> TestResult<(WebhookOutcome, Arc<Endpoint>)> {
    run(
        SigningIdentity::generate(),
        Duration::from_secs(10),
        respond,
    )
    .await
}

/// Why the gate denied, if it did: for the answers that must be refused.
async fn denial(respond: impl Respond) -> TestResult<Option<DenialReason>> {
    Ok(denial_reason(&decide(respond).await?.0))
}

/// The same answer to every poll.
fn always(status: StatusCode, body: Vec<u8>) -> impl Respond {
    move |_, _, _| (status, body.clone())
}

/// 404 for the first two polls, then `body` signed by the endpoint.
fn after_two_polls(
    make: impl Fn(&Posted, &SigningIdentity) -> Vec<u8> + Send + Sync + 'static,
) -> impl Respond {
    move |n, posted, signer| {
        if n < 2 {
            (StatusCode::NOT_FOUND, Vec::new())
        } else {
            (StatusCode::OK, make(posted, signer))
        }
    }
}

fn denial_reason(outcome: &WebhookOutcome) -> Option<DenialReason> {
    match outcome {
        WebhookOutcome::Decided(Verdict::Denied(d)) => Some(d.reason()),
        _ => None,
    }
}

#[tokio::test]
async fn a_valid_approval_approves() -> TestResult {
    let respond = after_two_polls(|p, s| signed(s, &p.request_id, "approved", &p.subject_digest));
    let (outcome, ep) = decide(respond).await?;
    let WebhookOutcome::Decided(Verdict::Approved(approval)) = outcome else {
        return Err(format!("expected an approval, got {outcome:?}").into());
    };
    assert_eq!(ep.polls.load(Ordering::SeqCst), 3);
    let fields = approval.record().audit_fields();
    assert_eq!(fields["decided_by"], "webhook");
    assert_eq!(fields["decision"], "approved");
    assert_eq!(fields["approver"], ep.signer.did().as_str());
    Ok(())
}

#[tokio::test]
async fn a_signature_that_does_not_verify_is_gate_signature_invalid() -> TestResult {
    // Signed as a denial, presented as an approval.
    let respond = after_two_polls(|p, s| {
        let mut body: Value =
            serde_json::from_slice(&signed(s, &p.request_id, "denied", &p.subject_digest))
                .unwrap_or_default();
        body["decision"] = json!("approved");
        body.to_string().into_bytes()
    });
    assert_eq!(denial(respond).await?, Some(DenialReason::SignatureInvalid));
    Ok(())
}

#[tokio::test]
async fn a_signature_that_is_not_64_bytes_of_base64_is_gate_signature_invalid() -> TestResult {
    for bad in ["", "not base64!", "AAAA", &BASE64.encode([0u8; 64])] {
        let owned = bad.to_owned();
        let respond = after_two_polls(move |p, _| {
            json!({"request_id": p.request_id, "decision": "approved",
                   "subject_digest": p.subject_digest, "signature": owned})
            .to_string()
            .into_bytes()
        });
        assert_eq!(
            denial(respond).await?,
            Some(DenialReason::SignatureInvalid),
            "{bad:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_decision_signed_by_another_key_is_gate_signature_invalid() -> TestResult {
    let impostor = Arc::new(SigningIdentity::generate());
    let respond = after_two_polls(move |p, _| {
        signed(&impostor, &p.request_id, "approved", &p.subject_digest)
    });
    assert_eq!(denial(respond).await?, Some(DenialReason::SignatureInvalid));
    Ok(())
}

#[tokio::test]
async fn a_request_id_mismatch_is_gate_request_id_mismatch() -> TestResult {
    let respond = after_two_polls(|p, s| {
        signed(
            s,
            "hgr_00000000000000000000000000000000",
            "approved",
            &p.subject_digest,
        )
    });
    assert_eq!(
        denial(respond).await?,
        Some(DenialReason::RequestIdMismatch)
    );
    Ok(())
}

#[tokio::test]
async fn a_digest_mismatch_is_gate_digest_mismatch() -> TestResult {
    let respond = after_two_polls(|p, s| {
        let other = format!("sha256:{}", "0".repeat(64));
        signed(s, &p.request_id, "approved", &other)
    });
    assert_eq!(denial(respond).await?, Some(DenialReason::DigestMismatch));
    Ok(())
}

#[tokio::test]
async fn anything_but_the_exact_word_approved_denies() -> TestResult {
    for word in [
        "denied",
        "APPROVED",
        "Approved",
        "yes",
        "approved ",
        " approved",
        "",
        "approved\n",
    ] {
        let owned = word.to_owned();
        let respond =
            after_two_polls(move |p, s| signed(s, &p.request_id, &owned, &p.subject_digest));
        let (outcome, _) = decide(respond).await?;
        let WebhookOutcome::Decided(Verdict::Denied(denial)) = &outcome else {
            return Err(format!("{word:?}: expected a denial, got {outcome:?}").into());
        };
        assert_eq!(denial.reason(), DenialReason::Denied, "{word:?}");
        assert_eq!(denial.reason().audit_reason(), "denied");
        // Only a signed `denied` is recorded as a re-verifiable webhook decision.
        assert_eq!(denial.record().is_some(), word == "denied", "{word:?}");
    }
    Ok(())
}

#[tokio::test]
async fn an_approval_replayed_for_another_request_is_refused() -> TestResult {
    // A genuine approval of one call, presented for an identical second call.
    let signer = SigningIdentity::generate();
    let first = invoice()?;
    let replay = signed(
        &signer,
        first.request_id().as_str(),
        "approved",
        &first.subject_digest().to_string(),
    );
    let second = invoice()?;
    assert_eq!(first.subject_digest(), second.subject_digest());
    assert_ne!(first.request_id(), second.request_id());
    match verify_decision(first, signer.did(), &replay) {
        Ok(Verdict::Approved(_)) => {}
        other => return Err(format!("the original should approve, got {other:?}").into()),
    }
    let approver = signer.did().clone();
    let (url, _ep) = endpoint(signer, always(StatusCode::OK, replay)).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let outcome = WebhookClient::new()?
        .ask(&url, second, &approver, deadline, POLL)
        .await;
    assert_eq!(
        denial_reason(&outcome),
        Some(DenialReason::RequestIdMismatch)
    );
    Ok(())
}

#[tokio::test]
async fn the_first_decision_wins_and_later_ones_are_never_read() -> TestResult {
    let respond = |n: usize, p: &Posted, s: &SigningIdentity| {
        let word = if n == 0 { "approved" } else { "denied" };
        (
            StatusCode::OK,
            signed(s, &p.request_id, word, &p.subject_digest),
        )
    };
    let (outcome, ep) = decide(respond).await?;
    assert!(matches!(
        outcome,
        WebhookOutcome::Decided(Verdict::Approved(_))
    ));
    tokio::time::sleep(POLL * 10).await;
    assert_eq!(ep.polls.load(Ordering::SeqCst), 1);
    Ok(())
}

/// A gate given 300 ms that must end in no decision, and not before then.
async fn undecided(respond: impl Respond) -> TestResult<(NoDecisionReason, Arc<Endpoint>)> {
    let wait = Duration::from_millis(300);
    let deadline = Instant::now() + wait;
    let (outcome, ep) = run(SigningIdentity::generate(), wait, respond).await?;
    Ok((no_decision(outcome, deadline)?, ep))
}

/// Assert that `outcome` is no decision, reached no earlier than `deadline`.
fn no_decision(outcome: WebhookOutcome, deadline: Instant) -> Result<NoDecisionReason, String> {
    if Instant::now() < deadline {
        return Err("returned before the deadline".into());
    }
    match outcome {
        WebhookOutcome::NoDecision(reason) => Ok(reason),
        other => Err(format!("expected no decision, got {other:?}")),
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_no_decision_until_the_deadline() -> TestResult {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let url = WebhookUrl::parse(&format!("http://127.0.0.1:{port}/gates"))?;
    let approver = SigningIdentity::generate();
    let deadline = Instant::now() + Duration::from_millis(400);
    let outcome = WebhookClient::new()?
        .ask(&url, invoice()?, approver.did(), deadline, POLL)
        .await;
    assert_eq!(
        no_decision(outcome, deadline)?,
        NoDecisionReason::Unreachable
    );
    Ok(())
}

#[tokio::test]
async fn only_404s_are_no_decision_at_the_deadline() -> TestResult {
    let (reason, ep) = undecided(always(StatusCode::NOT_FOUND, Vec::new())).await?;
    assert_eq!(reason, NoDecisionReason::Timeout);
    assert!(ep.polls.load(Ordering::SeqCst) >= 2);
    Ok(())
}

#[tokio::test]
async fn a_500_is_no_decision() -> TestResult {
    let (reason, _) = undecided(always(StatusCode::INTERNAL_SERVER_ERROR, Vec::new())).await?;
    assert_eq!(reason, NoDecisionReason::UnexpectedStatus(500));
    Ok(())
}

#[tokio::test]
async fn an_oversized_200_is_no_decision() -> TestResult {
    let respond = |_: usize, p: &Posted, s: &SigningIdentity| {
        let mut body: Value =
            serde_json::from_slice(&signed(s, &p.request_id, "approved", &p.subject_digest))
                .unwrap_or_default();
        body["signature"] = json!(format!("{}{}", " ".repeat(1 << 20), "x"));
        (StatusCode::OK, body.to_string().into_bytes())
    };
    let (reason, _) = undecided(respond).await?;
    assert_eq!(
        reason,
        NoDecisionReason::Malformed(MalformedDecision::TooLarge)
    );
    Ok(())
}

/// Bodies that are not decisions, built from a valid signed approval.
fn malformed_bodies(id: &str, digest: &str, signature: &str) -> Vec<String> {
    vec![
        String::new(),
        "not json".into(),
        "[]".into(),
        format!(r#"{{"request_id":"{id}","decision":"approved","subject_digest":"{digest}"}}"#),
        format!(
            r#"{{"request_id":"{id}","decision":"approved","subject_digest":"{digest}","signature":"{signature}","extra":1}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","decision":"denied","decision":"approved","subject_digest":"{digest}","signature":"{signature}"}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","decision":true,"subject_digest":"{digest}","signature":"{signature}"}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","decision":"approved","subject_digest":"{digest}","signature":"{signature}"}} trailing"#
        ),
        format!(
            r#"{{"request_id":"{id}","decision":"approved\ud800","subject_digest":"{digest}","signature":"{signature}"}}"#
        ),
    ]
}

#[tokio::test]
async fn a_malformed_200_is_no_decision_and_polling_goes_on() -> TestResult {
    let signer = SigningIdentity::generate();
    let approver = signer.did().clone();
    let probe = invoice()?;
    let (id, digest) = (
        probe.request_id().to_string(),
        probe.subject_digest().to_string(),
    );
    let valid: Value = serde_json::from_slice(&signed(&signer, &id, "approved", &digest))?;
    let signature = valid["signature"].as_str().unwrap_or_default().to_owned();
    let bodies = malformed_bodies(&id, &digest, &signature);

    // Each body alone leaves the request pending.
    let mut pending = probe;
    for body in &bodies {
        match verify_decision(pending, &approver, body.as_bytes()) {
            Err(undecided) => pending = undecided.pending,
            Ok(verdict) => return Err(format!("{body:?} decided: {verdict:?}").into()),
        }
    }
    // And the pending request still takes the real decision afterwards.
    assert!(matches!(
        verify_decision(pending, &approver, valid.to_string().as_bytes()),
        Ok(Verdict::Approved(_))
    ));

    // Over the wire: every malformed body in turn, then the real approval.
    let count = bodies.len();
    let respond = move |n: usize, p: &Posted, s: &SigningIdentity| {
        let bodies = malformed_bodies(&p.request_id, &p.subject_digest, "AAAA");
        match bodies.get(n) {
            Some(body) => (StatusCode::OK, body.clone().into_bytes()),
            None => (
                StatusCode::OK,
                signed(s, &p.request_id, "approved", &p.subject_digest),
            ),
        }
    };
    let (outcome, ep) = run(signer, Duration::from_secs(10), respond).await?;
    assert!(matches!(
        outcome,
        WebhookOutcome::Decided(Verdict::Approved(_))
    ));
    assert_eq!(ep.polls.load(Ordering::SeqCst), count + 1);

    // Malformed until the deadline: no decision.
    let (reason, _) = undecided(always(StatusCode::OK, b"{".to_vec())).await?;
    assert!(matches!(
        reason,
        NoDecisionReason::Malformed(MalformedDecision::NotADecision(_))
    ));
    Ok(())
}

#[tokio::test]
async fn the_post_carries_the_request() -> TestResult {
    let respond = after_two_polls(|p, s| signed(s, &p.request_id, "approved", &p.subject_digest));
    let (_, ep) = decide(respond).await?;
    let posts = ep.posts.lock().map_err(|_| "poisoned")?;
    assert_eq!(posts.len(), 1);
    assert!(posts[0].request_id.starts_with("hgr_"));
    assert!(posts[0].subject_digest.starts_with("sha256:"));
    Ok(())
}

#[test]
fn webhook_urls_are_checked_and_never_shown() -> TestResult {
    let secret = "https://approvals.example/gates?token=s3cret";
    let url = WebhookUrl::parse(secret)?;
    assert!(!format!("{url:?}").contains("s3cret"));
    WebhookUrl::parse("http://localhost:8080/x")?;
    WebhookUrl::parse("http://[::1]:8080/x")?;
    assert!(matches!(
        WebhookUrl::parse("http://approvals.example/gates?token=s3cret"),
        Err(WebhookUrlError::Insecure)
    ));
    assert!(matches!(
        WebhookUrl::parse("ftp://x/"),
        Err(WebhookUrlError::Scheme)
    ));
    for bad in ["", "not a url", "mailto:a@b"] {
        let err = WebhookUrl::parse(bad).err().ok_or("accepted")?;
        assert!(!err.to_string().contains("s3cret"));
    }
    assert!(matches!(
        WebhookUrl::from_env("CONSTLE_HUMAN_GATE_TEST_SURELY_UNSET_VARIABLE"),
        Err(WebhookUrlError::NotSet(_))
    ));
    Ok(())
}

#[test]
fn oversized_and_unparseable_integers_are_refused_before_gating() {
    assert!(gated(json!({"amount": u64::MAX})).is_err());
}
