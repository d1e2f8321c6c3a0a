//! The gate's `POST <url>` body, checked strictly before anything is stored:
//! a version 1 request (`docs/spec/human-gates-webhook.md` §6.1, no
//! `version` member) or a version 2 one (`human-gates-webhook-v2.md` §7.1,
//! `"version": 2`). Also the gate's optional "votes so far" report (v2 §14).

use constle_identity::DidKey;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The largest POST body accepted from the gate. Arguments can be long
/// (the terminal prompt refuses to show more than a few KiB, but the
/// webhook has to carry them all); anything larger is refused unread.
pub const MAX_POST_BYTES: usize = 256 * 1024;

/// The largest "votes so far" report accepted.
pub const MAX_VOTES_BYTES: usize = 64 * 1024;

/// The longest agent name, server id, tool name or approver label accepted.
pub const MAX_NAME_BYTES: usize = 256;

/// The members of a version 1 body, exactly (v1 §6.1).
const MEMBERS: [&str; 7] = [
    "agent",
    "arguments",
    "expires_at",
    "request_id",
    "server",
    "subject_digest",
    "tool",
];

/// The members of a version 2 body, exactly (v2 §7.1).
const MEMBERS_V2: [&str; 13] = [
    "agent",
    "agent_did",
    "approvers",
    "arguments",
    "expires_at",
    "policy_digest",
    "request_id",
    "salt",
    "server",
    "subject_digest",
    "threshold",
    "tool",
    "version",
];

/// A request from the gate, as it will be stored and shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateRequest {
    /// `hgr_` and 32 lowercase hex digits, verbatim.
    pub request_id: String,
    /// The agent's name.
    pub agent: String,
    /// The MCP server id.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// The arguments, as compact JSON text.
    pub arguments: String,
    /// `sha256:` and 64 lowercase hex digits, verbatim.
    pub subject_digest: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`, verbatim.
    pub expires_at: String,
    /// The same instant, in seconds since the epoch.
    pub expires_at_unix: i64,
    /// What only a version 2 request has; `None` for version 1.
    pub v2: Option<Version2>,
}

/// The members a version 2 request adds, verbatim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version2 {
    /// The agent's `did:key`, if it has one.
    pub agent_did: Option<String>,
    /// 64 lowercase hex digits (never shown on the page).
    pub salt: String,
    /// `sha256:` and 64 lowercase hex digits: the Agentfile in force.
    pub policy_digest: String,
    /// How many distinct approvers must approve.
    pub threshold: u64,
    /// The approvers in force, in the gate's order.
    pub approvers: Vec<ListedApprover>,
}

/// An approver as the request names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedApprover {
    /// Its `did:key`.
    pub did: String,
    /// Who holds it, as the Agentfile says (not authenticated).
    pub label: String,
}

/// One vote in the gate's "votes so far" report: what the gate says it
/// counted. Unsigned, so shown and never trusted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedVote {
    /// The key the gate says voted.
    pub approver: String,
    /// Its label.
    pub label: String,
    /// `approved` or `denied`.
    pub decision: String,
}

/// Why a POST body was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Longer than the route's limit (HTTP 413).
    #[error("the request is too large")]
    TooLarge,
    /// Not strict JSON (HTTP 400).
    #[error("the request is not strict JSON: {0}")]
    Json(String),
    /// JSON, but not a request (HTTP 400).
    #[error("the request is malformed: {0}")]
    Shape(String),
}

/// Parses and checks a POST body, of either version.
///
/// Besides the shapes, the digest must be the digest of the server, tool
/// and arguments (and, in version 2, the salt) in the same body: otherwise
/// the page would show a person one call while the signature approved
/// another. What is stored, and later signed, is still the gate's strings,
/// verbatim.
///
/// # Errors
///
/// [`RequestError`] saying what is wrong.
pub fn parse_gate_request(body: &[u8]) -> Result<GateRequest, RequestError> {
    let object = parse_object(body, MAX_POST_BYTES)?;
    match object.get("version") {
        None => parse_v1(&object),
        Some(version) if version.as_u64() == Some(2) => parse_v2(&object),
        Some(_) => Err(shape(
            "`version` must be 2 (a version 1 request has no `version`)",
        )),
    }
}

fn parse_object(body: &[u8], limit: usize) -> Result<Map<String, Value>, RequestError> {
    let value = constle_json::parse_limited(body, limit).map_err(|err| match err {
        constle_json::LimitedError::TooLarge { .. } => RequestError::TooLarge,
        other => RequestError::Json(other.to_string()),
    })?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(shape("not a JSON object")),
    }
}

fn parse_v1(object: &Map<String, Value>) -> Result<GateRequest, RequestError> {
    let request = common(object, &MEMBERS)?;
    let arguments = arguments(object);
    let digest = constle_approval::subject_digest(&request.server, &request.tool, arguments)
        .map_err(no_exact_digest)?;
    if digest.to_string() != request.subject_digest {
        return Err(shape(
            "`subject_digest` is not the digest of this server, tool and arguments",
        ));
    }
    Ok(request)
}

fn parse_v2(object: &Map<String, Value>) -> Result<GateRequest, RequestError> {
    let mut request = common(object, &MEMBERS_V2)?;
    let salt = text(object, "salt")?;
    if !lower_hex(&salt, 64) {
        return Err(shape("`salt` must be 64 lowercase hex digits"));
    }
    let digest = constle_approval::quorum::salted_digest(
        &request.server,
        &request.tool,
        arguments(object),
        &salt,
    )
    .map_err(no_exact_digest)?;
    if digest.to_string() != request.subject_digest {
        return Err(shape(
            "`subject_digest` is not the salted digest of this server, tool, arguments and salt",
        ));
    }
    let policy_digest = text(object, "policy_digest")?;
    if !is_digest(&policy_digest) {
        return Err(shape(
            "`policy_digest` must be sha256: and 64 lowercase hex digits",
        ));
    }
    let approvers = approvers(object.get("approvers"))?;
    let threshold = object
        .get("threshold")
        .and_then(Value::as_u64)
        .filter(|k| (1..=approvers.len() as u64).contains(k))
        .ok_or_else(|| shape("`threshold` must be an integer from 1 to the number of approvers"))?;
    request.v2 = Some(Version2 {
        agent_did: agent_did(object.get("agent_did"))?,
        salt,
        policy_digest,
        threshold,
        approvers,
    });
    Ok(request)
}

/// What both versions share: exactly `members`, the id, the digest's form,
/// the names, the expiry and the arguments.
fn common(object: &Map<String, Value>, members: &[&str]) -> Result<GateRequest, RequestError> {
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != members {
        return Err(shape(&format!(
            "the members must be exactly {}",
            members.join(", ")
        )));
    }
    let request_id = text(object, "request_id")?;
    if !is_request_id(&request_id) {
        return Err(shape(
            "`request_id` must be hgr_ and 32 lowercase hex digits",
        ));
    }
    let subject_digest = text(object, "subject_digest")?;
    if !is_digest(&subject_digest) {
        return Err(shape(
            "`subject_digest` must be sha256: and 64 lowercase hex digits",
        ));
    }
    let [agent, server, tool] = [
        text(object, "agent")?,
        text(object, "server")?,
        text(object, "tool")?,
    ];
    for (name, value) in [("agent", &agent), ("server", &server), ("tool", &tool)] {
        check_name(name, value)?;
    }
    let expires_at = text(object, "expires_at")?;
    let expires_at_unix = parse_expiry(&expires_at).ok_or_else(|| {
        shape("`expires_at` must be RFC 3339 UTC in whole seconds, like 2026-08-08T12:05:00Z")
    })?;
    let arguments = serde_json::to_string(arguments(object))
        .map_err(|err| RequestError::Json(err.to_string()))?;
    Ok(GateRequest {
        request_id,
        agent,
        server,
        tool,
        arguments,
        subject_digest,
        expires_at,
        expires_at_unix,
        v2: None,
    })
}

fn arguments(object: &Map<String, Value>) -> &Value {
    object.get("arguments").unwrap_or(&Value::Null)
}

fn no_exact_digest(err: constle_approval::SubjectError) -> RequestError {
    shape(&format!("the subject has no exact digest: {err}"))
}

fn text(object: &Map<String, Value>, name: &str) -> Result<String, RequestError> {
    match object.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(shape(&format!("`{name}` must be a string"))),
    }
}

fn check_name(name: &str, value: &str) -> Result<(), RequestError> {
    if value.is_empty() || value.len() > MAX_NAME_BYTES {
        return Err(shape(&format!(
            "`{name}` must be 1 to {MAX_NAME_BYTES} bytes"
        )));
    }
    Ok(())
}

fn is_did_key(s: &str) -> bool {
    // A DID that parses prints back identically: the string is canonical.
    DidKey::parse(s).is_ok()
}

fn agent_did(value: Option<&Value>) -> Result<Option<String>, RequestError> {
    match value {
        Some(Value::Null) => Ok(None),
        Some(Value::String(did)) if is_did_key(did) => Ok(Some(did.clone())),
        _ => Err(shape("`agent_did` must be null or an Ed25519 did:key")),
    }
}

fn approvers(value: Option<&Value>) -> Result<Vec<ListedApprover>, RequestError> {
    let listed: Vec<ListedApprover> = value
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .filter(|listed: &Vec<ListedApprover>| !listed.is_empty())
        .ok_or_else(|| {
            shape("`approvers` must be a non-empty array of objects with exactly `did` and `label`, both strings")
        })?;
    for (i, approver) in listed.iter().enumerate() {
        if !is_did_key(&approver.did) {
            return Err(shape(&format!(
                "`approvers[{i}].did` must be an Ed25519 did:key"
            )));
        }
        check_name(&format!("approvers[{i}].label"), &approver.label)?;
        if listed[..i].iter().any(|a| a.did == approver.did) {
            return Err(shape(&format!("`approvers[{i}].did` is listed twice")));
        }
    }
    Ok(listed)
}

/// The gate's "votes so far" for request `id` (v2 §14): `{"version": 2,
/// "request_id": id, "votes": [{"approver", "label", "decision"}, …]}`,
/// checked for shape only, since nothing in it is believed.
///
/// # Errors
///
/// [`RequestError`] saying what is wrong.
pub fn parse_votes_report(body: &[u8], id: &str) -> Result<Vec<ReportedVote>, RequestError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Report {
        version: u64,
        request_id: String,
        votes: Vec<ReportedVote>,
    }
    let object = parse_object(body, MAX_VOTES_BYTES)?;
    let report: Report = serde_json::from_value(Value::Object(object)).map_err(|_| {
        shape("a votes report has exactly `version`, `request_id` and `votes`, a list of {`approver`, `label`, `decision`}")
    })?;
    if report.version != 2 {
        return Err(shape("`version` must be 2"));
    }
    if report.request_id != id {
        return Err(shape("`request_id` is not the request of this URL"));
    }
    for (i, vote) in report.votes.iter().enumerate() {
        check_name(&format!("votes[{i}].approver"), &vote.approver)?;
        check_name(&format!("votes[{i}].label"), &vote.label)?;
        if !matches!(vote.decision.as_str(), "approved" | "denied") {
            return Err(shape(&format!(
                "`votes[{i}].decision` must be approved or denied"
            )));
        }
    }
    Ok(report.votes)
}

fn shape(what: &str) -> RequestError {
    RequestError::Shape(what.to_owned())
}

fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `hgr_` and 32 lowercase hex digits.
pub fn is_request_id(s: &str) -> bool {
    s.strip_prefix("hgr_").is_some_and(|hex| lower_hex(hex, 32))
}

fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|hex| lower_hex(hex, 64))
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`, and only that form:
/// the string is shown and stored verbatim, so it must mean one instant.
fn parse_expiry(s: &str) -> Option<i64> {
    let t: jiff::Timestamp = s.parse().ok()?;
    (t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string() == s).then(|| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let expires = jiff::Timestamp::from_second(1_786_190_700)?;
        let request = constle_approval::PendingRequest::new(
            "agent",
            "accounting",
            "pay_invoice",
            serde_json::json!({"invoice_id": "INV-0042"}),
            expires,
        )?;
        Ok(request.post_body().to_vec())
    }

    #[test]
    fn the_gates_own_body_is_accepted_verbatim() -> Result<(), Box<dyn std::error::Error>> {
        let body = valid()?;
        let parsed = parse_gate_request(&body)?;
        let value: Value = serde_json::from_slice(&body)?;
        assert_eq!(parsed.request_id, value["request_id"]);
        assert_eq!(parsed.subject_digest, value["subject_digest"]);
        assert_eq!(parsed.expires_at, "2026-08-08T12:05:00Z");
        assert_eq!(parsed.expires_at_unix, 1_786_190_700);
        Ok(())
    }

    #[test]
    fn shapes_are_checked() -> Result<(), Box<dyn std::error::Error>> {
        let body: Value = serde_json::from_slice(&valid()?)?;
        let with = |key: &str, v: Value| {
            let mut b = body.clone();
            b[key] = v;
            serde_json::to_vec(&b).unwrap_or_default()
        };
        let bad = [
            with("request_id", "hgr_ABC".into()),
            with("request_id", format!("hgr_{}", "A".repeat(32)).into()),
            with(
                "subject_digest",
                format!("sha256:{}", "0".repeat(63)).into(),
            ),
            with(
                "subject_digest",
                format!("sha256:{}", "0".repeat(64)).into(),
            ),
            with("expires_at", "2026-08-08T12:05:00.5Z".into()),
            with("expires_at", "2026-08-08T12:05:00+00:00".into()),
            with("agent", 7.into()),
            with("tool", "x".repeat(MAX_NAME_BYTES + 1).into()),
            with("extra", "x".into()),
            b"[]".to_vec(),
            b"{} {}".to_vec(),
        ];
        for body in bad {
            assert!(
                parse_gate_request(&body).is_err(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }

    const ALICE: &str = "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw";
    const BOB: &str = "did:key:z6MkiaMbhXHNA4eJVCCj8dbzKzTgYDKf6crKgHVHid1F1WCT";

    fn valid_v2() -> Result<Value, Box<dyn std::error::Error>> {
        use constle_approval::quorum::{Approver, BallotRequest, Binding};
        let binding = Binding {
            agent: "agent".into(),
            agent_did: Some(BOB.into()),
            server: "accounting".into(),
            tool: "pay_invoice".into(),
            policy_digest: format!("sha256:{}", "ab".repeat(32)),
            expires_at: jiff::Timestamp::from_second(1_786_190_700)?,
        };
        let approvers = [ALICE, BOB].map(|did| Approver {
            did: did.into(),
            label: format!("holder of {}", &did[8..14]),
        });
        let args = serde_json::json!({"invoice_id": "INV-0042"});
        let request = BallotRequest::new(binding, args, &approvers, 2)?;
        Ok(serde_json::from_slice(request.post_body())?)
    }

    #[test]
    fn a_version_2_body_is_accepted_verbatim() -> Result<(), Box<dyn std::error::Error>> {
        let body = valid_v2()?;
        let parsed = parse_gate_request(&serde_json::to_vec(&body)?)?;
        let v2 = parsed.v2.ok_or("no version 2 members")?;
        assert_eq!(parsed.subject_digest, body["subject_digest"]);
        assert_eq!(v2.salt, body["salt"]);
        assert_eq!(v2.agent_did.as_deref(), Some(BOB));
        assert_eq!((v2.threshold, v2.approvers.len()), (2, 2));
        assert_eq!(v2.approvers[0].did, ALICE);
        Ok(())
    }

    #[test]
    fn version_2_shapes_and_the_salted_digest_are_checked() -> Result<(), Box<dyn std::error::Error>>
    {
        let body = valid_v2()?;
        let with = |key: &str, v: Value| {
            let mut b = body.clone();
            b[key] = v;
            serde_json::to_vec(&b).unwrap_or_default()
        };
        let listed = |dids: &[&str]| {
            let list: Vec<Value> = dids
                .iter()
                .map(|d| serde_json::json!({"did": d, "label": "x"}))
                .collect();
            Value::from(list)
        };
        let bad = [
            ("another salt", with("salt", "11".repeat(32).into())),
            ("an upper-case salt", with("salt", "AB".repeat(32).into())),
            ("a short salt", with("salt", "ab".into())),
            ("version 3", with("version", 3.into())),
            ("version 1", with("version", 1.into())),
            ("a string version", with("version", "2".into())),
            ("another policy form", with("policy_digest", "ab".into())),
            ("a bad agent DID", with("agent_did", "did:key:nope".into())),
            ("a numeric agent DID", with("agent_did", 7.into())),
            ("threshold 0", with("threshold", 0.into())),
            ("threshold above n", with("threshold", 3.into())),
            ("a fractional threshold", with("threshold", 1.5.into())),
            ("no approvers", with("approvers", listed(&[]))),
            (
                "an approver twice",
                with("approvers", listed(&[ALICE, ALICE])),
            ),
            (
                "an approver not a DID",
                with("approvers", listed(&["alice"])),
            ),
            (
                "an approver with another member",
                with(
                    "approvers",
                    serde_json::json!([{"did": ALICE, "label": "a", "x": 1}]),
                ),
            ),
            (
                "an empty label",
                with(
                    "approvers",
                    serde_json::json!([{"did": ALICE, "label": ""}]),
                ),
            ),
            ("another member", with("extra", 1.into())),
        ];
        for (what, body) in bad {
            assert!(parse_gate_request(&body).is_err(), "{what}");
        }
        let err = parse_gate_request(&with("salt", "11".repeat(32).into()))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not the salted digest"), "{err}");
        // A version 1 body with a `version` member is neither.
        let mut v1: Value = serde_json::from_slice(&valid()?)?;
        v1["version"] = 1.into();
        assert!(parse_gate_request(&serde_json::to_vec(&v1)?).is_err());
        Ok(())
    }

    #[test]
    fn a_votes_report_is_checked_for_shape_and_its_request() {
        let id = format!("hgr_{}", "0".repeat(32));
        let report = |request_id: &str, decision: &str| {
            serde_json::json!({"version": 2, "request_id": request_id, "votes": [
                {"approver": ALICE, "label": "alice", "decision": decision}]})
            .to_string()
        };
        let votes = parse_votes_report(report(&id, "approved").as_bytes(), &id);
        assert_eq!(votes.map(|v| v.len()).ok(), Some(1));
        for bad in [
            report(&id, "maybe"),
            report("hgr_other", "approved"),
            r#"{"version":2,"request_id":"x","votes":[],"extra":1}"#.replace('x', &id),
            r#"{"version":1,"request_id":"x","votes":[]}"#.replace('x', &id),
        ] {
            assert!(parse_votes_report(bad.as_bytes(), &id).is_err(), "{bad}");
        }
    }
}
