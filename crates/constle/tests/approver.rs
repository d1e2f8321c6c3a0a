//! `constle approver serve` over HTTP, without a browser: the gate's side of
//! the protocol against the real binary (decisions checked with
//! `constle_approval::verify_decision`, exactly as the gate checks them),
//! and every way to get a signature without a logged-in person's click
//! refused. The browser test is `approver_browser.rs`.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use constle_approval::{PendingRequest, Verdict, verify_decision};
use constle_identity::DidKey;
use serde_json::{Value, json};

mod common;

use common::{Case, http, server};
use server::{Approver, PASSWORD, Person};

const KEY: &str = "desk";

fn did(case: &Case) -> DidKey {
    server::key_did(case, KEY)
}

fn pending(arguments: Value, expires_in: i64) -> PendingRequest {
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(expires_in);
    PendingRequest::new(
        "invoice-processor",
        "accounting",
        "pay_invoice",
        arguments,
        expires,
    )
    .unwrap()
}

fn invoice() -> PendingRequest {
    pending(json!({"invoice_id": "INV-0042"}), 300)
}

fn id(request: &PendingRequest) -> String {
    request.request_id().to_string()
}

/// An approver serving with `KEY`, and the home it runs in (dropped after it).
fn serve() -> (Case, Approver) {
    let case = Case::new();
    let approver = Approver::start(&case, KEY, None);
    (case, approver)
}

/// An invoice the gate has posted and the approver has taken.
#[track_caller]
fn posted(approver: &Approver) -> PendingRequest {
    let request = invoice();
    let response = approver.post_gate(request.post_body());
    assert_eq!(response.status, 202, "{}", response.text());
    request
}

fn login(approver: &Approver) -> Person<'_> {
    Person::login(approver, PASSWORD).0
}

/// The page `person` sees, which must say each of `says`.
#[track_caller]
fn page_says(person: &Person, says: &[&str]) -> String {
    let page = person.get("/").text();
    for said in says {
        assert!(page.contains(said), "{said:?} not on the page:\n{page}");
    }
    page
}

#[test]
fn an_approval_is_signed_only_after_a_person_clicks_and_the_gate_accepts_it() {
    let (case, approver) = serve();
    let request = posted(&approver);
    assert_eq!(approver.decision(&id(&request)).status, 404);
    // The page needs a login.
    let anonymous = Person::anonymous(&approver).get("/");
    assert_eq!(anonymous.status, 303);
    assert_eq!(anonymous.header("location"), Some("/login"));
    let person = login(&approver);
    let digest = request.subject_digest().to_string();
    page_says(&person, &[&id(&request), &digest, "INV-0042"]);
    let decided = person.click(&id(&request), "approved");
    assert_eq!(decided.status, 303, "{}", decided.text());
    let answer = approver.decision(&id(&request));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["request_id"], id(&request));
    assert_eq!(body["subject_digest"], request.subject_digest().to_string());
    let verdict = verify_decision(request, &did(&case), &answer.body);
    assert!(matches!(verdict, Ok(Verdict::Approved(_))), "{verdict:?}");
    page_says(&person, &["approved</span>", "by admin"]);
}

#[test]
fn a_denial_is_signed_and_denies() {
    let (case, approver) = serve();
    let request = posted(&approver);
    let person = login(&approver);
    assert_eq!(person.click(&id(&request), "denied").status, 303);
    let answer = approver.decision(&id(&request));
    let verdict = verify_decision(request, &did(&case), &answer.body);
    assert!(matches!(verdict, Ok(Verdict::Denied(_))), "{verdict:?}");
}

#[test]
fn no_signature_without_a_session_a_matching_csrf_token_or_a_same_site_form() {
    let (_case, approver) = serve();
    let rid = id(&posted(&approver));
    let person = login(&approver);
    let other = login(&approver);
    let csrf = person.csrf();

    let no_session = Person::anonymous(&approver).decide(&csrf, &rid, "approved");
    assert_eq!(no_session.status, 403);
    let forged_cookie = Person {
        approver: &approver,
        cookie: Some(format!(
            "{}={}",
            constle_approval_page::SESSION_COOKIE,
            "0".repeat(64)
        )),
    };
    assert_eq!(forged_cookie.decide(&csrf, &rid, "approved").status, 403);
    assert_eq!(person.decide(&"0".repeat(64), &rid, "approved").status, 403);
    assert_eq!(person.decide("", &rid, "approved").status, 403);
    // A token is bound to its own session.
    assert_eq!(other.decide(&csrf, &rid, "approved").status, 403);
    let cross = person.post(
        "/decide",
        &[
            ("csrf", &csrf),
            ("request_id", &rid),
            ("decision", "approved"),
        ],
        &[("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(cross.status, 403);
    assert_eq!(person.decide(&csrf, &rid, "APPROVED").status, 400);
    assert_eq!(person.decide(&csrf, "hgr_nope", "approved").status, 404);
    assert_eq!(approver.decision(&rid).status, 404, "nothing was signed");
    page_says(&person, &["Waiting for a decision (1)"]);
}

#[test]
fn a_form_without_its_token_is_refused_as_403() {
    let (_case, approver) = serve();
    let rid = id(&posted(&approver));
    let person = login(&approver);
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let json = [("Content-Type", "application/json")];
    let no_csrf = format!("request_id={rid}&decision=approved");
    for (path, headers, body) in [
        ("/decide", &form, no_csrf.as_str()),
        ("/decide", &form, ""),
        ("/decide", &json, r#"{"csrf":"x","decision":"approved"}"#),
        ("/logout", &form, ""),
        ("/logout", &json, "{}"),
    ] {
        let cookie = person.cookie.clone().unwrap();
        let headers = [headers[0], ("Cookie", cookie.as_str())];
        let response = http::request(&approver.addr, "POST", path, &headers, body.as_bytes());
        let response = response.unwrap();
        assert_eq!(response.status, 403, "{path} {body:?}: {}", response.text());
    }
    assert_eq!(approver.decision(&rid).status, 404, "nothing was signed");
    assert_eq!(person.get("/").status, 200, "the session did not end");
}

#[test]
fn listen_on_a_bare_port_means_loopback_and_0_picks_one() {
    let case = Case::new();
    let approver = Approver::start_on(&case, KEY, None, ":0");
    let (host, port) = approver.addr.rsplit_once(':').unwrap();
    assert_eq!(host, "127.0.0.1", "{}", approver.addr);
    assert_ne!(port.parse::<u16>().unwrap(), 0);
    assert_eq!(approver.post_gate(invoice().post_body()).status, 202);
    let says = approver.stderr.lock().unwrap().clone();
    assert!(
        says.contains(&format!("page http://{}/", approver.addr)),
        "{says}"
    );
}

#[test]
fn an_expired_request_cannot_be_decided() {
    let (_case, approver) = serve();
    let request = pending(json!({"invoice_id": "INV-0042"}), -5);
    assert_eq!(approver.post_gate(request.post_body()).status, 202);
    let person = login(&approver);
    page_says(&person, &["Waiting for a decision (0)", "expired</span>"]);
    let refused = person.click(&id(&request), "approved");
    assert_eq!(refused.status, 409);
    assert!(refused.text().contains("Expired"));
    assert_eq!(approver.decision(&id(&request)).status, 404);
}

#[test]
fn a_replayed_form_changes_nothing() {
    let (_case, approver) = serve();
    let rid = id(&posted(&approver));
    let person = login(&approver);
    let csrf = person.csrf();
    assert_eq!(person.decide(&csrf, &rid, "approved").status, 303);
    let first = approver.decision(&rid).body;
    for word in ["approved", "denied", "approved"] {
        let again = person.decide(&csrf, &rid, word);
        assert_eq!(again.status, 409, "{}", again.text());
    }
    assert_eq!(login(&approver).click(&rid, "denied").status, 409);
    assert_eq!(approver.decision(&rid).body, first);
}

#[test]
fn oversized_and_malformed_gate_posts_are_refused() {
    let (_case, approver) = serve();
    let big = pending(json!({"blob": "x".repeat(300 * 1024)}), 300);
    assert_eq!(approver.post_gate(big.post_body()).status, 413);

    let good: Value = serde_json::from_slice(invoice().post_body()).unwrap();
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        body.to_string().into_bytes()
    };
    let without = |key: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(key);
        body.to_string().into_bytes()
    };
    let text = good.to_string();
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"hello".to_vec()),
        ("empty", Vec::new()),
        ("an array", b"[]".to_vec()),
        ("trailing data", format!("{text} {{}}").into_bytes()),
        (
            "a repeated member",
            text.replacen('{', r#"{"tool":"get_invoice","#, 1)
                .into_bytes(),
        ),
        (
            "invalid UTF-8",
            [&text.as_bytes()[..10], b"\xff", &text.as_bytes()[10..]].concat(),
        ),
        ("a missing member", without("expires_at")),
        ("another member", with("note", json!("hi"))),
        ("a short request id", with("request_id", json!("hgr_1234"))),
        (
            "an upper-case request id",
            with("request_id", json!(format!("hgr_{}", "A".repeat(32)))),
        ),
        ("a numeric request id", with("request_id", json!(7))),
        (
            "a digest of another call",
            with(
                "subject_digest",
                json!(format!("sha256:{}", "0".repeat(64))),
            ),
        ),
        (
            "a digest without prefix",
            with("subject_digest", json!("0".repeat(64))),
        ),
        (
            "arguments of another call",
            with("arguments", json!({"invoice_id": "INV-9999"})),
        ),
        (
            "a fractional expiry",
            with("expires_at", json!("2026-08-08T12:05:00.5Z")),
        ),
        (
            "a local expiry",
            with("expires_at", json!("2026-08-08T14:05:00+02:00")),
        ),
        ("a huge tool name", with("tool", json!("t".repeat(300)))),
        ("an empty agent", with("agent", json!(""))),
    ];
    for (what, body) in malformed {
        let response = approver.post_gate(&body);
        assert_eq!(response.status, 400, "{what}: {}", response.text());
    }
    let says = ["Waiting for a decision (0)", "No decisions yet."];
    page_says(&login(&approver), &says);
}

#[test]
fn a_reposted_request_is_idempotent_and_a_different_one_under_its_id_conflicts() {
    let (_case, approver) = serve();
    let request = posted(&approver);
    for _ in 0..2 {
        assert_eq!(approver.post_gate(request.post_body()).status, 202);
    }
    // The same id with another (self-consistent) call.
    let other = pending(json!({"invoice_id": "INV-0666"}), 300);
    let mut swapped: Value = serde_json::from_slice(other.post_body()).unwrap();
    swapped["request_id"] = json!(id(&request));
    let response = approver.post_gate(swapped.to_string().as_bytes());
    assert_eq!(response.status, 409, "{}", response.text());
    let person = login(&approver);
    let page = page_says(&person, &["Waiting for a decision (1)", "INV-0042"]);
    assert!(!page.contains("INV-0666"), "{page}");
    // Once decided, the same POST is still just the same request.
    assert_eq!(person.click(&id(&request), "denied").status, 303);
    assert_eq!(approver.post_gate(request.post_body()).status, 202);
    let body: Value = serde_json::from_slice(&approver.decision(&id(&request)).body).unwrap();
    assert_eq!(body["decision"], "denied");
}

#[test]
fn script_in_arguments_is_shown_as_text() {
    let (_case, approver) = serve();
    let script = "<script>alert(1)</script>";
    let request = PendingRequest::new(
        "agent\"><img src=x>",
        "accounting",
        "pay_invoice",
        json!({"invoice_id": script, "memo": "'\"&</pre>"}),
        jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300),
    )
    .unwrap();
    assert_eq!(approver.post_gate(request.post_body()).status, 202);
    let page = login(&approver).get("/");
    let html = page.text();
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.to_lowercase().contains("<script"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(html.contains("agent&quot;&gt;&lt;img src=x&gt;"), "{html}");
    assert!(html.contains("&#39;\\&quot;&amp;&lt;/pre&gt;"), "{html}");
    assert_eq!(
        page.header("content-security-policy"),
        Some(constle_approval_page::CONTENT_SECURITY_POLICY)
    );
}

#[test]
fn logins_sessions_and_headers() {
    let (case, approver) = serve();
    let (nobody, refused) = Person::login(&approver, "not the password");
    assert_eq!(refused.status, 401);
    assert!(nobody.cookie.is_none());
    assert!(refused.text().contains("Wrong user name or password."));

    let (person, response) = Person::login(&approver, PASSWORD);
    assert_eq!(response.status, 303);
    let cookie = response.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.split("; ").any(|a| a == attribute), "{cookie}");
    }
    assert!(cookie.starts_with("__Host-constle-approver="), "{cookie}");
    let token = person.cookie.clone().unwrap();
    assert_eq!(token.split('=').nth(1).unwrap().len(), 64, "256 bits");
    let page = person.get("/");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-security-policy"),
        Some(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'"
        )
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert!(page.text().contains("<meta name=\"viewport\""));
    let style = person.get("/style.css");
    assert_eq!(style.status, 200);
    assert!(style.text().contains("@media"));

    // The database keeps only a hash of the session id.
    let db = case.home().join(format!("approver/{KEY}.sqlite"));
    let raw = std::fs::read(&db).unwrap();
    let wal = std::fs::read(db.with_extension("sqlite-wal")).unwrap_or_default();
    let id = token.split('=').nth(1).unwrap().as_bytes();
    for bytes in [&raw, &wal] {
        assert!(
            !bytes.windows(id.len()).any(|w| w == id),
            "session id stored in clear"
        );
        assert!(
            !bytes
                .windows(PASSWORD.len())
                .any(|w| w == PASSWORD.as_bytes())
        );
    }

    let csrf = person.csrf();
    let out = person.post("/logout", &[("csrf", &csrf)], &[]);
    assert_eq!(out.status, 303);
    assert_eq!(person.get("/").status, 303, "the session ended");
}

#[test]
fn a_database_others_can_read_is_created_private_and_refused_once_shared() {
    use std::os::unix::fs::PermissionsExt as _;
    let case = Case::new();
    let db = case.path("approver.sqlite");
    let approver = Approver::start(&case, KEY, Some(&db));
    assert_eq!(approver.post_gate(invoice().post_body()).status, 202);
    let mode = std::fs::metadata(&db).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    approver.stop();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let db_arg = db.display().to_string();
    let out = case.run(&[
        "approver", "serve", "--key", KEY, "--db", &db_arg, "--listen", ":0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let said = common::text(&out.stderr);
    for says in ["has mode 0644", &format!("chmod 600 {db_arg}")] {
        assert!(said.contains(says), "{says:?} not in: {said}");
    }
}

/// Waits (a little) until the approver's log says `says`.
#[track_caller]
fn logged(approver: &Approver, says: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let log = approver.stderr.lock().unwrap().clone();
        if log.contains(says) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{says:?} not in the log:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn failed_sign_ins_make_the_next_wait_and_a_right_password_clears_them() {
    let (_case, approver) = serve();
    let wrong = "not the password";
    for _ in 0..5 {
        assert_eq!(Person::login(&approver, wrong).1.status, 401);
    }
    // Even the right password waits now, and is not even checked.
    let (nobody, refused) = Person::login(&approver, PASSWORD);
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(nobody.cookie.is_none());
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused
            .text()
            .contains("Too many failed sign-ins: wait 1 s")
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (person, signed_in) = Person::login(&approver, PASSWORD);
    assert_eq!(signed_in.status, 303);
    assert_eq!(person.get("/").status, 200);
    // The user's failures are cleared: a typo is just a typo again.
    assert_eq!(Person::login(&approver, wrong).1.status, 401);
    logged(
        &approver,
        "sign-in failed: user `admin` from 127.0.0.1 (failures so far: 5 for this user name, 5 from this address)",
    );
    logged(
        &approver,
        "sign-in refused: user `admin` from 127.0.0.1 must wait 1 s",
    );
    logged(&approver, "signed in: user `admin` from 127.0.0.1");
    logged(
        &approver,
        "sign-in failed: user `admin` from 127.0.0.1 (failures so far: 1 for",
    );
}

#[test]
fn a_restart_loses_nothing() {
    let case = Case::new();
    let db = case.path("approver.sqlite");
    let approver = Approver::start(&case, KEY, Some(&db));
    let (approved, waiting) = (posted(&approver), posted(&approver));
    let person = login(&approver);
    assert_eq!(person.click(&id(&approved), "approved").status, 303);
    let before = approver.decision(&id(&approved)).body;
    approver.stop();

    let approver = Approver::start(&case, KEY, Some(&db));
    assert_eq!(approver.decision(&id(&approved)).body, before);
    assert_eq!(approver.decision(&id(&waiting)).status, 404);
    // The same POST again, as a gate retrying across the restart would.
    assert_eq!(approver.post_gate(waiting.post_body()).status, 202);
    let person = login(&approver);
    let says = ["Waiting for a decision (1)", &id(&waiting), "by admin"];
    page_says(&person, &says);
    assert_eq!(person.click(&id(&approved), "denied").status, 409);
    let verdict = verify_decision(approved, &did(&case), &before);
    assert!(matches!(verdict, Ok(Verdict::Approved(_))), "{verdict:?}");
}

// ---------------------------------------------------------------------------
// Protocol version 2 (`docs/spec/human-gates-webhook-v2.md`): this endpoint
// is one approver of several; its decisions are checked with the gate's own
// `quorum::verify_vote` and counted by its `Tally`.

mod v2 {
    use std::time::{Duration, Instant};

    use constle_approval::quorum::{
        Approver as Listed, Ballot, BallotRequest, Binding, Progress, Tally, verify_vote,
    };
    use constle_human_gate::{WebhookClient, WebhookUrl};
    use constle_identity::{DidKey, SigningIdentity};
    use serde_json::{Value, json};

    use super::{did, http, id_of, login, page_says, serve, server};

    const LABEL: &str = "alice (desk)";

    /// This endpoint's key and `other`, labelled.
    fn listed(own: &DidKey, other: &DidKey) -> [Listed; 2] {
        [
            Listed {
                did: own.as_str().into(),
                label: LABEL.into(),
            },
            Listed {
                did: other.as_str().into(),
                label: "bob <i>(finance)</i>".into(),
            },
        ]
    }

    /// A 2-of-2 request naming this endpoint's key and `other`.
    fn ballot(own: &DidKey, other: &DidKey) -> BallotRequest {
        let binding = Binding {
            agent: "invoice-processor".into(),
            agent_did: Some(SigningIdentity::generate().did().as_str().into()),
            server: "accounting".into(),
            tool: "pay_invoice".into(),
            policy_digest: format!("sha256:{}", "5e".repeat(32)),
            expires_at: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300),
        };
        let args = json!({"invoice_id": "INV-0042", "memo": "<script>x</script>"});
        BallotRequest::new(binding, args, &listed(own, other), 2).unwrap()
    }

    fn posted(approver: &server::Approver, request: &BallotRequest) {
        let response = approver.post_gate(request.post_body());
        assert_eq!(response.status, 202, "{}", response.text());
    }

    fn report_votes(approver: &server::Approver, id: &str, body: &Value) -> http::Response {
        let path = format!("/gate/{id}/votes");
        let json = [("Content-Type", "application/json")];
        http::request(
            &approver.addr,
            "POST",
            &path,
            &json,
            body.to_string().as_bytes(),
        )
        .unwrap()
    }

    /// The decision the endpoint serves, checked as the gate checks it.
    fn ballot_of(approver: &server::Approver, request: &BallotRequest, keys: &[DidKey]) -> Ballot {
        let answer = approver.decision(request.request_id().as_str());
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.header("content-type"), Some("application/json"));
        verify_vote(request, keys, jiff::Timestamp::now(), &answer.body).unwrap()
    }

    #[test]
    fn an_approval_on_the_page_is_a_vote_the_gate_counts() {
        let (case, approver) = serve();
        let (own, other) = (did(&case), SigningIdentity::generate().did().clone());
        let request = ballot(&own, &other);
        posted(&approver, &request);
        let rid = id_of(&request);
        assert_eq!(approver.decision(&rid).status, 404);
        let person = login(&approver);
        let binding = request.binding();
        let agent_did = binding.agent_did.clone().unwrap();
        page_says(
            &person,
            &[
                &rid,
                "invoice-processor",
                &agent_did,
                "accounting",
                "pay_invoice",
                "INV-0042",
                "&lt;script&gt;x&lt;/script&gt;",
                &binding.policy_digest,
                request.expires_at(),
                &request.subject_digest().to_string(),
                "2 of 2",
                LABEL,
                own.as_str(),
                "(this endpoint's key)",
                "bob &lt;i&gt;(finance)&lt;/i&gt;",
                other.as_str(),
                "Votes so far",
                "None reported.",
            ],
        );
        assert_eq!(person.click(&rid, "approved").status, 303);
        let keys = [own.clone(), other];
        let Ballot::Counted(vote) = ballot_of(&approver, &request, &keys) else {
            panic!("the endpoint's approval was not counted");
        };
        assert!(vote.approves());
        assert_eq!(vote.approver(), &own);
        assert!(matches!(Tally::new(2).add(vote), Progress::Waiting(1)));
        // The same body every time.
        assert_eq!(approver.decision(&rid).body, approver.decision(&rid).body);
        // The salt is the approver's to keep: it is not on the page.
        let post: Value = serde_json::from_slice(request.post_body()).unwrap();
        let page = person.get("/").text();
        assert!(!page.contains(post["salt"].as_str().unwrap()), "{page}");
        page_says(&person, &["approved</span>", "by admin", "2 of 2"]);
    }

    #[test]
    fn a_denial_on_the_page_is_a_signed_denial() {
        let (case, approver) = serve();
        let own = did(&case);
        let request = ballot(&own, SigningIdentity::generate().did());
        posted(&approver, &request);
        assert_eq!(
            login(&approver).click(&id_of(&request), "denied").status,
            303
        );
        let Ballot::Counted(vote) = ballot_of(&approver, &request, &[own]) else {
            panic!("the endpoint's denial was not counted");
        };
        assert!(!vote.approves());
        assert!(matches!(Tally::new(2).add(vote), Progress::Denied(_)));
    }

    #[test]
    fn a_salt_that_is_not_the_digests_and_a_request_for_other_keys_are_refused() {
        let (case, approver) = serve();
        let own = did(&case);
        let request = ballot(&own, SigningIdentity::generate().did());
        let mut body: Value = serde_json::from_slice(request.post_body()).unwrap();
        body["salt"] = json!("0f".repeat(32));
        let refused = approver.post_gate(body.to_string().as_bytes());
        assert_eq!(refused.status, 400, "{}", refused.text());
        assert!(
            refused.text().contains("not the salted digest"),
            "{}",
            refused.text()
        );
        // Signed for keys that are not this endpoint's: its vote could not count.
        let (a, b) = (SigningIdentity::generate(), SigningIdentity::generate());
        let elsewhere = ballot(a.did(), b.did());
        let refused = approver.post_gate(elsewhere.post_body());
        assert_eq!(refused.status, 422, "{}", refused.text());
        assert!(refused.text().contains(own.as_str()), "{}", refused.text());
        page_says(&login(&approver), &["Waiting for a decision (0)"]);
    }

    /// Waits until `person`'s page lists request `rid`, then clicks `word`.
    fn click_once_shown(person: &super::Person<'_>, rid: &str, word: &str) {
        person.wait_for(rid, |shown| shown.id == rid);
        assert_eq!(person.click(rid, word).status, 303);
    }

    /// The gate's own client end to end: `WebhookClient::ballot` POSTs and
    /// polls while a person approves, then `report_votes` reports the count.
    #[test]
    fn the_gates_client_gets_the_vote_and_its_report_is_shown() {
        let (case, approver) = serve();
        let (own, other) = (did(&case), SigningIdentity::generate().did().clone());
        let request = ballot(&own, &other);
        let url = WebhookUrl::parse(&approver.gate_url()).unwrap();
        let (client, keys) = (WebhookClient::new().unwrap(), [own.clone(), other.clone()]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let person = login(&approver);
        let ballot = std::thread::scope(|scope| {
            scope.spawn(|| click_once_shown(&person, &id_of(&request), "approved"));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let poll = Duration::from_millis(20);
            runtime.block_on(client.ballot(&url, &request, &keys, deadline, poll))
        });
        let Ok(Ballot::Counted(vote)) = ballot else {
            panic!("no counted vote: {ballot:?}");
        };
        assert_eq!(vote.approver(), &own);
        let report = request.votes_report(&[vote], &listed(&own, &other));
        assert!(runtime.block_on(client.report_votes(&url, &request, &report)));
        page_says(
            &person,
            &[
                "(reported by the gate, not verified)",
                "<ul class=\"votes\"><li class=\"approved\"><span class=\"badge\">approved</span> alice (desk)",
            ],
        );
    }

    /// A decision poll that asks to wait (`Prefer: wait=20`, as
    /// `WebhookClient::ballot` sends it) for an undecided request is held
    /// until the person decides, and answered with the decision then; one
    /// without `Prefer` is told "not yet" (404) at once, one with a short
    /// wait when it has passed, and one for an unknown request at once.
    #[test]
    fn a_poll_that_asks_to_wait_is_answered_when_the_person_decides() {
        let (case, approver) = serve();
        let (own, other) = (did(&case), SigningIdentity::generate().did().clone());
        let request = ballot(&own, &other);
        posted(&approver, &request);
        let poll = |id: &str, prefer: Option<&str>| {
            let path = format!("/gate/{id}/decision");
            let headers: Vec<(&str, &str)> = prefer.map(|p| ("Prefer", p)).into_iter().collect();
            let start = Instant::now();
            let response = http::request(&approver.addr, "GET", &path, &headers, b"").unwrap();
            (response.status, response.body, start.elapsed())
        };
        let rid = id_of(&request);
        let (status, _, took) = poll(&rid, None);
        assert_eq!(
            (status, took < Duration::from_millis(500)),
            (404, true),
            "{took:?}"
        );
        let unknown = format!("hgr_{}", "0".repeat(32));
        let (status, _, took) = poll(&unknown, Some("wait=20"));
        assert_eq!(
            (status, took < Duration::from_millis(500)),
            (404, true),
            "{took:?}"
        );
        let (status, _, took) = poll(&rid, Some("wait=1"));
        let waited = took >= Duration::from_millis(950) && took < Duration::from_secs(5);
        assert_eq!((status, waited), (404, true), "{took:?}");

        let person = login(&approver);
        let csrf = person.csrf();
        let (status, body, took) = std::thread::scope(|scope| {
            let held = scope.spawn(|| poll(&rid, Some("wait=20")));
            std::thread::sleep(Duration::from_millis(500));
            assert!(!held.is_finished(), "answered before anyone decided");
            assert_eq!(person.decide(&csrf, &rid, "approved").status, 303);
            held.join().unwrap()
        });
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        // Held about as long as the person took (half a second), not 20 s.
        assert!(took < Duration::from_secs(3), "{took:?}");
        let keys = [own, other];
        let counted = verify_vote(&request, &keys, jiff::Timestamp::now(), &body).unwrap();
        let Ballot::Counted(vote) = counted else {
            panic!("the held poll's decision was not counted: {counted:?}");
        };
        assert!(vote.approves());
    }

    #[test]
    fn the_gates_votes_so_far_are_shown_as_unverified() {
        let (case, approver) = serve();
        let (own, other) = (did(&case), SigningIdentity::generate().did().clone());
        let request = ballot(&own, &other);
        posted(&approver, &request);
        let rid = id_of(&request);
        let report = |label: &str, decision: &str| {
            json!({"version": 2, "request_id": rid, "votes": [
                {"approver": other.as_str(), "label": label, "decision": decision}]})
        };
        let kept = report_votes(&approver, &rid, &report("bob <b>", "approved"));
        assert_eq!(kept.status, 202, "{}", kept.text());
        page_says(
            &login(&approver),
            &[
                "Votes so far",
                "(reported by the gate, not verified)",
                "bob &lt;b&gt;",
                "approved</span>",
            ],
        );
        let bad = report_votes(&approver, &rid, &report("bob", "maybe"));
        assert_eq!(bad.status, 400, "{}", bad.text());
        let other_id = format!("hgr_{}", "0".repeat(32));
        let unknown = report_votes(&approver, &other_id, &report("bob", "approved"));
        assert_eq!(unknown.status, 400, "its request_id is not the URL's");
        let mut for_unknown = report("bob", "approved");
        for_unknown["request_id"] = json!(other_id);
        assert_eq!(report_votes(&approver, &other_id, &for_unknown).status, 404);
        let v1 = super::posted(&approver);
        let mut for_v1 = report("bob", "approved");
        for_v1["request_id"] = json!(super::id(&v1));
        assert_eq!(
            report_votes(&approver, &super::id(&v1), &for_v1).status,
            409
        );
        // A report decides nothing.
        assert_eq!(approver.decision(&rid).status, 404);
    }
}

fn id_of(request: &constle_approval::quorum::BallotRequest) -> String {
    request.request_id().to_string()
}
