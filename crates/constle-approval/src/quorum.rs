//! Version 2 of the webhook protocol (`docs/spec/human-gates-webhook-v2.md`):
//! several approvers and a threshold, each decision bound to the whole call
//! (agent, server, tool, the policy in force, the expiry) under a domain
//! separator, and a subject digest salted per request.
//!
//! A [`BallotRequest`] goes to every endpoint at once. Each signed answer is
//! checked by [`verify_vote`] into a [`Ballot`]: a [`VerifiedVote`] only if
//! every check passed, else a [`RejectedVote`] with its audit reason. A
//! [`Tally`] counts verified votes by distinct key, and only it makes the
//! [`QuorumApproval`] that lets a call through.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::DidKey;
use constle_identity::ed25519_dalek::Signature;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use crate::decision::{DenialReason, MAX_DECISION_BYTES, MalformedDecision, describe};
use crate::request::{RequestError, RequestId, rfc3339};
use crate::subject::{SubjectDigest, SubjectError, check_numbers};

/// What the signed bytes of a version 2 decision start with, so that no
/// signature made for another purpose (a v1 decision, an audit entry) can
/// pass for one.
pub const DOMAIN: &str = "constle-human-gate-v2\n";

/// The protocol version, as the `version` member carries it.
pub const VERSION: u64 = 2;

/// What an approval binds besides its request and subject: whose call,
/// to what, under which policy, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The agent's name.
    pub agent: String,
    /// The agent's `did:key`, if it has an identity.
    pub agent_did: Option<String>,
    /// The declared MCP server id.
    pub server: String,
    /// The exact tool name.
    pub tool: String,
    /// `sha256:<hex>` of the Agentfile in force.
    pub policy_digest: String,
    /// When the gate stops waiting (whole seconds are signed).
    pub expires_at: Timestamp,
}

/// An approver as the request names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Approver {
    /// Its key.
    pub did: String,
    /// Who holds it.
    pub label: String,
}

/// One gated call put to every approver: a fresh id, a fresh salt, the
/// salted subject digest and the POST body. The salt is never written to
/// the audit log, so the log alone cannot test guesses of the arguments.
pub struct BallotRequest {
    request_id: RequestId,
    binding: Binding,
    expires_at: String,
    arguments: Value,
    digest: SubjectDigest,
    body: Vec<u8>,
}

/// The POST body of a version 2 request.
#[derive(Serialize)]
struct PostBody<'a> {
    version: u64,
    request_id: &'a str,
    agent: &'a str,
    agent_did: Option<&'a str>,
    server: &'a str,
    tool: &'a str,
    arguments: &'a Value,
    salt: String,
    subject_digest: String,
    policy_digest: &'a str,
    expires_at: &'a str,
    threshold: usize,
    approvers: &'a [Approver],
}

impl BallotRequest {
    /// Mints an id and a salt for a gated call, and digests it.
    ///
    /// # Errors
    ///
    /// [`RequestError`] if the arguments have no exact digest or the random
    /// source fails; the gate must then refuse the call.
    pub fn new(
        binding: Binding,
        arguments: Value,
        approvers: &[Approver],
        threshold: usize,
    ) -> Result<BallotRequest, RequestError> {
        let mut salt = [0u8; 32];
        getrandom::fill(&mut salt).map_err(|_| RequestError::Random)?;
        let id = RequestId::mint()?;
        BallotRequest::with(id, salt, binding, arguments, approvers, threshold)
    }

    /// With a given id and salt: for the specification's test vectors.
    pub(crate) fn with(
        request_id: RequestId,
        salt: [u8; 32],
        mut binding: Binding,
        arguments: Value,
        approvers: &[Approver],
        threshold: usize,
    ) -> Result<BallotRequest, RequestError> {
        // Whole seconds are what is signed, so whole seconds are what counts.
        let second = binding.expires_at.as_second();
        binding.expires_at = Timestamp::from_second(second).unwrap_or(binding.expires_at);
        let salt = hex::encode(salt);
        let digest = salted_digest(&binding.server, &binding.tool, &arguments, &salt)?;
        let expires_at = rfc3339(binding.expires_at);
        let body = serde_json::to_vec(&PostBody {
            version: VERSION,
            request_id: request_id.as_str(),
            agent: &binding.agent,
            agent_did: binding.agent_did.as_deref(),
            server: &binding.server,
            tool: &binding.tool,
            arguments: &arguments,
            salt,
            subject_digest: digest.to_string(),
            policy_digest: &binding.policy_digest,
            expires_at: &expires_at,
            threshold,
            approvers,
        })
        .map_err(|_| RequestError::Json)?;
        Ok(BallotRequest {
            request_id,
            binding,
            expires_at,
            arguments,
            digest,
            body,
        })
    }

    /// The id minted for this call.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// What the call is bound to.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// The arguments that were digested: exactly what the gate may forward.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The salted subject digest.
    pub fn subject_digest(&self) -> &SubjectDigest {
        &self.digest
    }

    /// `expires_at` as signed: RFC 3339, UTC, whole seconds.
    pub fn expires_at(&self) -> &str {
        &self.expires_at
    }

    /// The POST body sent to every endpoint (UTF-8 JSON).
    pub fn post_body(&self) -> &[u8] {
        &self.body
    }

    /// The "votes so far" report (spec §14) listing `votes` in the order
    /// counted, each labelled as in `approvers`: unsigned, for endpoints to
    /// show and never to trust.
    pub fn votes_report(&self, votes: &[VerifiedVote], approvers: &[Approver]) -> Vec<u8> {
        let listed: Vec<ReportedVote<'_>> = votes
            .iter()
            .map(|vote| {
                let did = vote.approver().as_str();
                let label = approvers.iter().find(|a| a.did == did);
                ReportedVote {
                    approver: did,
                    label: label.map_or("", |a| a.label.as_str()),
                    decision: if vote.approves() {
                        "approved"
                    } else {
                        "denied"
                    },
                }
            })
            .collect();
        let report = json!({
            "version": VERSION,
            "request_id": self.request_id.as_str(),
            "votes": listed,
        });
        report.to_string().into_bytes()
    }

    /// The fields an approval of this request must sign.
    fn expected(&self, decision: &str) -> SignedFields {
        SignedFields {
            request_id: self.request_id.as_str().to_owned(),
            decision: decision.to_owned(),
            subject_digest: self.digest.to_string(),
            agent: self.binding.agent.clone(),
            agent_did: self.binding.agent_did.clone(),
            server: self.binding.server.clone(),
            tool: self.binding.tool.clone(),
            policy_digest: self.binding.policy_digest.clone(),
            expires_at: self.expires_at.clone(),
        }
    }
}

/// One vote in a "votes so far" report.
#[derive(Serialize)]
struct ReportedVote<'a> {
    approver: &'a str,
    label: &'a str,
    decision: &'static str,
}

/// The salted subject digest: SHA-256 over the RFC 8785 canonical form of
/// `{"arguments", "salt", "server", "tool"}`, `salt` being 64 lowercase hex
/// digits.
///
/// # Errors
///
/// As [`crate::subject_digest`].
pub fn salted_digest(
    server: &str,
    tool: &str,
    arguments: &Value,
    salt: &str,
) -> Result<SubjectDigest, SubjectError> {
    check_numbers(arguments)?;
    let subject = json!({"server": server, "tool": tool, "arguments": arguments, "salt": salt});
    let canonical =
        serde_json_canonicalizer::to_vec(&subject).map_err(|_| SubjectError::Canonical)?;
    Ok(SubjectDigest(Sha256::digest(&canonical).into()))
}

/// What an approver signs, member for member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedFields {
    /// The request's id.
    pub request_id: String,
    /// `approved`, or anything else to deny.
    pub decision: String,
    /// The salted subject digest.
    pub subject_digest: String,
    /// The agent's name.
    pub agent: String,
    /// The agent's `did:key`, or `null`.
    pub agent_did: Option<String>,
    /// The MCP server id.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// `sha256:<hex>` of the Agentfile in force.
    pub policy_digest: String,
    /// The request's expiry, as sent.
    pub expires_at: String,
}

impl SignedFields {
    /// The bytes signed: [`DOMAIN`], then the RFC 8785 canonical form of
    /// these members.
    pub fn message(&self) -> Vec<u8> {
        let mut message = DOMAIN.as_bytes().to_vec();
        // Strings and a null only: the canonicaliser cannot fail on them.
        if let Ok(canonical) = serde_json_canonicalizer::to_vec(self) {
            message.extend_from_slice(&canonical);
        }
        message
    }

    /// The version 2 decision body an endpoint serves for these members:
    /// `version`, `approver` (the signing key's `did:key`), the nine signed
    /// members and `signature` (standard base64 of the 64 bytes), as
    /// compact UTF-8 JSON.
    pub fn decision_body(&self, approver: &str, signature: &str) -> Vec<u8> {
        let fields = self.clone();
        let body = DecisionBody {
            version: VERSION,
            approver: approver.to_owned(),
            request_id: fields.request_id,
            decision: fields.decision,
            subject_digest: fields.subject_digest,
            agent: fields.agent,
            agent_did: fields.agent_did,
            server: fields.server,
            tool: fields.tool,
            policy_digest: fields.policy_digest,
            expires_at: fields.expires_at,
            signature: signature.to_owned(),
        };
        // Strings, a null and a number only: serialising cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// A version 2 decision body: `version`, the signing key, the signed
/// members and the signature; parsed strictly, written in this order.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    version: u64,
    approver: String,
    request_id: String,
    decision: String,
    subject_digest: String,
    agent: String,
    agent_did: Option<String>,
    server: String,
    tool: String,
    policy_digest: String,
    expires_at: String,
    signature: String,
}

impl DecisionBody {
    fn split(self) -> (String, String, SignedFields) {
        let fields = SignedFields {
            request_id: self.request_id,
            decision: self.decision,
            subject_digest: self.subject_digest,
            agent: self.agent,
            agent_did: self.agent_did,
            server: self.server,
            tool: self.tool,
            policy_digest: self.policy_digest,
            expires_at: self.expires_at,
        };
        (self.approver, self.signature, fields)
    }
}

/// A decision whose every check passed: its key is an approver's, its
/// signature verifies, and it is for exactly this call. Only
/// [`verify_vote`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedVote(Box<Vote>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Vote {
    approver: DidKey,
    signature: String,
    fields: SignedFields,
}

impl VerifiedVote {
    /// The key that signed.
    pub fn approver(&self) -> &DidKey {
        &self.0.approver
    }

    /// Whether it approves: the exact word `approved`. Any other word a
    /// valid key signed denies.
    pub fn approves(&self) -> bool {
        self.0.fields.decision == "approved"
    }

    /// What was signed.
    pub fn fields(&self) -> &SignedFields {
        &self.0.fields
    }

    /// The audit fields, from which [`verify_recorded_vote`] re-verifies
    /// it: `version`, `approver`, `signature` and every signed member (the
    /// agent's name as `agent_name`).
    pub fn audit_fields(&self) -> Map<String, Value> {
        let vote = &self.0;
        let mut fields = match serde_json::to_value(&vote.fields) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        // `agent` names the entry's agent in an audit log line; the signed
        // member goes as `agent_name`.
        if let Some(agent) = fields.remove("agent") {
            fields.insert("agent_name".into(), agent);
        }
        fields.insert("version".into(), Value::from(VERSION));
        fields.insert("approver".into(), Value::from(vote.approver.as_str()));
        fields.insert("signature".into(), Value::from(vote.signature.as_str()));
        fields
    }
}

/// A decision that failed a check; it counts for nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedVote {
    /// The key it named, if that is a valid `did:key` (not believed: the
    /// check that failed may be the signature).
    pub approver: Option<String>,
    /// Why.
    pub reason: DenialReason,
}

/// One decision that arrived, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ballot {
    /// Every check passed.
    Counted(VerifiedVote),
    /// A check failed.
    Rejected(RejectedVote),
}

/// Checks a version 2 decision body for `request`, in the specification's
/// order: the key is one of `approvers`; the signature verifies over the
/// message rebuilt from the body's own members; `now` is before the expiry
/// it signed and the request's; then request id, subject digest, agent,
/// server, tool, policy and expiry each equal the request's.
///
/// # Errors
///
/// [`MalformedDecision`] if `body` is no version 2 decision at all (too
/// large, not JSON, a member missing, extra, repeated or of the wrong
/// type, another `version`): no decision, the gate keeps waiting.
pub fn verify_vote(
    request: &BallotRequest,
    approvers: &[DidKey],
    now: Timestamp,
    body: &[u8],
) -> Result<Ballot, MalformedDecision> {
    if body.len() > MAX_DECISION_BYTES {
        return Err(MalformedDecision::TooLarge);
    }
    let body: DecisionBody =
        serde_json::from_slice(body).map_err(|e| MalformedDecision::NotADecision(describe(&e)))?;
    if body.version != VERSION {
        let why = format!("version {} is not {VERSION}", body.version);
        return Err(MalformedDecision::NotADecision(why));
    }
    let (approver, signature, fields) = body.split();
    let named = DidKey::parse(&approver).ok();
    let reject = |reason| {
        Ok(Ballot::Rejected(RejectedVote {
            approver: named.as_ref().map(|key| key.as_str().to_owned()),
            reason,
        }))
    };
    let Some(key) = named.as_ref().filter(|key| approvers.contains(key)) else {
        return reject(DenialReason::ApproverUnknown);
    };
    if !signature_verifies(key, &fields, &signature) {
        return reject(DenialReason::SignatureInvalid);
    }
    // A decision for a request that is over, whichever: it may not count.
    match fields.expires_at.parse::<Timestamp>() {
        Ok(expiry) if now < expiry && now < request.binding.expires_at => {}
        Ok(_) => return reject(DenialReason::Expired),
        Err(_) => return reject(DenialReason::ExpiryMismatch),
    }
    if let Some(reason) = mismatch(&request.expected(&fields.decision), &fields) {
        return reject(reason);
    }
    Ok(Ballot::Counted(VerifiedVote(Box::new(Vote {
        approver: key.clone(),
        signature,
        fields,
    }))))
}

/// The first member that differs from what the request expects, in the
/// specification's order.
fn mismatch(expected: &SignedFields, got: &SignedFields) -> Option<DenialReason> {
    let checks = [
        (
            expected.request_id == got.request_id,
            DenialReason::RequestIdMismatch,
        ),
        (
            expected.subject_digest == got.subject_digest,
            DenialReason::DigestMismatch,
        ),
        (
            expected.agent == got.agent && expected.agent_did == got.agent_did,
            DenialReason::AgentMismatch,
        ),
        (expected.server == got.server, DenialReason::ServerMismatch),
        (expected.tool == got.tool, DenialReason::ToolMismatch),
        (
            expected.policy_digest == got.policy_digest,
            DenialReason::PolicyMismatch,
        ),
        (
            expected.expires_at == got.expires_at,
            DenialReason::ExpiryMismatch,
        ),
    ];
    checks
        .into_iter()
        .find(|(same, _)| !same)
        .map(|(_, reason)| reason)
}

fn signature_verifies(key: &DidKey, fields: &SignedFields, signature: &str) -> bool {
    let signature = BASE64
        .decode(signature)
        .ok()
        .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| Signature::from_bytes(&bytes));
    signature.is_some_and(|s| key.verify(&fields.message(), &s).is_ok())
}

/// Re-verifies a vote the audit log recorded ([`VerifiedVote::audit_fields`]
/// members, among others): its signature, by the key it names, over the
/// message rebuilt from its own members. Whether that key was an approver,
/// and whether the members are the call's, is for the caller to check
/// against the log.
///
/// # Errors
///
/// [`DenialReason::SignatureInvalid`] if the members are missing, not a
/// version 2 vote, or do not verify.
pub fn verify_recorded_vote(
    entry: &Map<String, Value>,
) -> Result<(DidKey, SignedFields), DenialReason> {
    let invalid = DenialReason::SignatureInvalid;
    let member = |name: &str| entry.get(name).cloned().ok_or(invalid);
    let body = DecisionBody {
        version: member("version")?.as_u64().ok_or(invalid)?,
        approver: string(member("approver")?)?,
        signature: string(member("signature")?)?,
        request_id: string(member("request_id")?)?,
        decision: string(member("decision")?)?,
        subject_digest: string(member("subject_digest")?)?,
        agent: string(member("agent_name")?)?,
        agent_did: match member("agent_did")? {
            Value::Null => None,
            other => Some(string(other)?),
        },
        server: string(member("server")?)?,
        tool: string(member("tool")?)?,
        policy_digest: string(member("policy_digest")?)?,
        expires_at: string(member("expires_at")?)?,
    };
    if body.version != VERSION {
        return Err(invalid);
    }
    let (approver, signature, fields) = body.split();
    let key = DidKey::parse(&approver).map_err(|_| invalid)?;
    match signature_verifies(&key, &fields, &signature) {
        true => Ok((key, fields)),
        false => Err(invalid),
    }
}

fn string(value: Value) -> Result<String, DenialReason> {
    match value {
        Value::String(s) => Ok(s),
        _ => Err(DenialReason::SignatureInvalid),
    }
}

/// Counts verified votes for one request: `threshold` approvals by
/// distinct keys approve; any verified denial denies at once.
#[derive(Debug)]
pub struct Tally {
    threshold: usize,
    approvals: Vec<VerifiedVote>,
    /// Whether the terminal's approval was counted (as one vote, when the
    /// Agentfile lets it count).
    terminal: bool,
    /// Whether an outcome was reached: nothing counts after it.
    settled: bool,
}

/// Where a [`Tally`] stands after a vote.
#[derive(Debug)]
pub enum Progress {
    /// Not enough approvals yet: how many votes approve.
    Waiting(usize),
    /// This key's approval was counted already; nothing changes.
    AlreadyCounted,
    /// The threshold is reached.
    Approved(QuorumApproval),
    /// A verified denial.
    Denied(VerifiedVote),
    /// The outcome was reached before: nothing counts any more.
    Settled,
}

/// Proof that `threshold` distinct approvers approved exactly this call.
/// Only a [`Tally`] makes one.
#[derive(Debug)]
pub struct QuorumApproval {
    votes: Vec<VerifiedVote>,
    terminal: bool,
}

impl QuorumApproval {
    /// The signed approvals that made the quorum, in the order they
    /// arrived.
    pub fn votes(&self) -> &[VerifiedVote] {
        &self.votes
    }

    /// Whether the terminal's approval was one of the votes.
    pub fn terminal(&self) -> bool {
        self.terminal
    }
}

impl Tally {
    /// A tally needing `threshold` approvals (at least one).
    pub fn new(threshold: usize) -> Tally {
        Tally {
            threshold: threshold.max(1),
            approvals: Vec::new(),
            terminal: false,
            settled: false,
        }
    }

    /// Counts `vote`.
    pub fn add(&mut self, vote: VerifiedVote) -> Progress {
        if self.settled {
            return Progress::Settled;
        }
        if !vote.approves() {
            self.settled = true;
            return Progress::Denied(vote);
        }
        if self
            .approvals
            .iter()
            .any(|v| v.approver() == vote.approver())
        {
            return Progress::AlreadyCounted;
        }
        self.approvals.push(vote);
        self.progress()
    }

    /// Counts the terminal's approval, once, as one vote: for an Agentfile
    /// that lets it count.
    pub fn add_terminal(&mut self) -> Progress {
        if self.settled {
            return Progress::Settled;
        }
        if std::mem::replace(&mut self.terminal, true) {
            return Progress::AlreadyCounted;
        }
        self.progress()
    }

    /// How many votes approve so far.
    pub fn approvals(&self) -> usize {
        self.approvals.len() + usize::from(self.terminal)
    }

    fn progress(&mut self) -> Progress {
        if self.approvals() < self.threshold {
            return Progress::Waiting(self.approvals());
        }
        self.settled = true;
        Progress::Approved(QuorumApproval {
            votes: std::mem::take(&mut self.approvals),
            terminal: self.terminal,
        })
    }
}

#[cfg(test)]
mod tests {
    use constle_identity::SigningIdentity;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn binding() -> Binding {
        Binding {
            agent: "invoice-processor".into(),
            agent_did: None,
            server: "accounting".into(),
            tool: "pay_invoice".into(),
            policy_digest: format!("sha256:{}", "ab".repeat(32)),
            expires_at: Timestamp::now() + jiff::SignedDuration::from_secs(300),
        }
    }

    fn request() -> Result<BallotRequest, RequestError> {
        BallotRequest::new(binding(), json!({"invoice_id": "INV-0042"}), &[], 2)
    }

    /// A decision body signing `fields` with `key` (as `approver`).
    fn body(key: &SigningIdentity, approver: &str, fields: &SignedFields) -> Vec<u8> {
        let signature = BASE64.encode(key.sign(&fields.message()).to_bytes());
        fields.decision_body(approver, &signature)
    }

    fn vote(request: &BallotRequest, key: &SigningIdentity, keys: &[DidKey]) -> Ballot {
        let fields = request.expected("approved");
        let body = body(key, key.did().as_str(), &fields);
        verify_vote(request, keys, Timestamp::now(), &body).unwrap_or_else(|e| panic!("{e}"))
    }

    fn rejected(ballot: Ballot) -> DenialReason {
        match ballot {
            Ballot::Rejected(r) => r.reason,
            Ballot::Counted(v) => panic!("counted: {v:?}"),
        }
    }

    fn counted(ballot: Ballot) -> VerifiedVote {
        match ballot {
            Ballot::Counted(v) => v,
            Ballot::Rejected(r) => panic!("rejected: {r:?}"),
        }
    }

    #[test]
    fn two_distinct_approvers_make_the_quorum_and_one_counts_once() -> TestResult {
        let request = request()?;
        let (a, b) = (SigningIdentity::generate(), SigningIdentity::generate());
        let keys = [a.did().clone(), b.did().clone()];
        let mut tally = Tally::new(2);
        assert!(matches!(
            tally.add(counted(vote(&request, &a, &keys))),
            Progress::Waiting(1)
        ));
        // The same approver's signature again (through another endpoint).
        assert!(matches!(
            tally.add(counted(vote(&request, &a, &keys))),
            Progress::AlreadyCounted
        ));
        let Progress::Approved(quorum) = tally.add(counted(vote(&request, &b, &keys))) else {
            panic!("two distinct approvals make the quorum");
        };
        assert_eq!(quorum.votes().len(), 2);
        // Settled: nothing counts any more, not even a fresh approval.
        let again = counted(vote(&request, &b, &keys));
        assert!(matches!(tally.add(again), Progress::Settled));
        assert!(matches!(tally.add_terminal(), Progress::Settled));
        Ok(())
    }

    #[test]
    fn a_verified_denial_denies_at_once() -> TestResult {
        let request = request()?;
        let a = SigningIdentity::generate();
        let keys = [a.did().clone()];
        let fields = request.expected("denied");
        let body = body(&a, a.did().as_str(), &fields);
        let vote = counted(verify_vote(&request, &keys, Timestamp::now(), &body)?);
        assert!(matches!(Tally::new(2).add(vote), Progress::Denied(_)));
        Ok(())
    }

    #[test]
    fn the_terminal_counts_once_when_allowed() -> TestResult {
        let request = request()?;
        let a = SigningIdentity::generate();
        let mut tally = Tally::new(2);
        assert!(matches!(tally.add_terminal(), Progress::Waiting(1)));
        assert!(matches!(tally.add_terminal(), Progress::AlreadyCounted));
        let vote = counted(vote(&request, &a, &[a.did().clone()]));
        let Progress::Approved(quorum) = tally.add(vote) else {
            panic!("terminal and one key make two");
        };
        assert!(quorum.terminal());
        Ok(())
    }

    #[test]
    fn each_binding_has_its_own_reason() -> TestResult {
        let request = request()?;
        let a = SigningIdentity::generate();
        let keys = [a.did().clone()];
        type Edit = fn(&mut SignedFields);
        let edits: [(Edit, DenialReason); 7] = [
            (
                |f| f.request_id = "hgr_00".into(),
                DenialReason::RequestIdMismatch,
            ),
            (
                |f| f.subject_digest = "sha256:00".into(),
                DenialReason::DigestMismatch,
            ),
            (
                |f| f.agent_did = Some("did:key:x".into()),
                DenialReason::AgentMismatch,
            ),
            (|f| f.server = "crm".into(), DenialReason::ServerMismatch),
            (|f| f.tool = "refund".into(), DenialReason::ToolMismatch),
            (
                |f| f.policy_digest = "sha256:00".into(),
                DenialReason::PolicyMismatch,
            ),
            (
                |f| f.expires_at = "2099-01-01T00:00:00Z".into(),
                DenialReason::ExpiryMismatch,
            ),
        ];
        for (edit, reason) in edits {
            let mut fields = request.expected("approved");
            edit(&mut fields);
            let body = body(&a, a.did().as_str(), &fields);
            assert_eq!(
                rejected(verify_vote(&request, &keys, Timestamp::now(), &body)?),
                reason
            );
        }
        // A valid approval arriving after the expiry.
        let late = Timestamp::now() + jiff::SignedDuration::from_secs(301);
        let fields = request.expected("approved");
        let body = body(&a, a.did().as_str(), &fields);
        assert_eq!(
            rejected(verify_vote(&request, &keys, late, &body)?),
            DenialReason::Expired
        );
        Ok(())
    }

    #[test]
    fn keys_outside_the_set_and_other_signatures_count_for_nothing() -> TestResult {
        let request = request()?;
        let (a, outsider) = (SigningIdentity::generate(), SigningIdentity::generate());
        let keys = [a.did().clone()];
        assert_eq!(
            rejected(vote(&request, &outsider, &keys)),
            DenialReason::ApproverUnknown
        );
        // An outsider's signature presented under an approver's name.
        let fields = request.expected("approved");
        let forged = body(&outsider, a.did().as_str(), &fields);
        let ballot = verify_vote(&request, &keys, Timestamp::now(), &forged)?;
        assert_eq!(rejected(ballot), DenialReason::SignatureInvalid);
        // A v1 signature of the same request and digest, replayed in a v2 body.
        let v1 = crate::signed_message(&fields.request_id, "approved", &fields.subject_digest);
        let v1_signature = BASE64.encode(a.sign(v1.as_bytes()).to_bytes());
        let mut replayed: Map<String, Value> =
            serde_json::from_slice(&body(&a, a.did().as_str(), &fields))?;
        replayed.insert("signature".into(), Value::from(v1_signature));
        let replayed = Value::Object(replayed).to_string();
        let ballot = verify_vote(&request, &keys, Timestamp::now(), replayed.as_bytes())?;
        assert_eq!(rejected(ballot), DenialReason::SignatureInvalid);
        Ok(())
    }

    #[test]
    fn a_v1_body_or_another_version_is_no_decision() -> TestResult {
        let request = request()?;
        let keys = [];
        let v1 = br#"{"request_id":"hgr_0","decision":"approved","subject_digest":"sha256:0","signature":"AA=="}"#;
        assert!(verify_vote(&request, &keys, Timestamp::now(), v1).is_err());
        let a = SigningIdentity::generate();
        let mut three: Map<String, Value> =
            serde_json::from_slice(&body(&a, a.did().as_str(), &request.expected("approved")))?;
        three.insert("version".into(), Value::from(3));
        let three = Value::Object(three).to_string();
        assert!(verify_vote(&request, &keys, Timestamp::now(), three.as_bytes()).is_err());
        Ok(())
    }

    #[test]
    fn a_recorded_vote_reverifies_and_an_edit_does_not() -> TestResult {
        let request = request()?;
        let a = SigningIdentity::generate();
        let vote = counted(vote(&request, &a, &[a.did().clone()]));
        let recorded = vote.audit_fields();
        let (key, fields) = verify_recorded_vote(&recorded).map_err(|r| r.audit_reason())?;
        assert_eq!((&key, &fields), (a.did(), vote.fields()));
        for member in ["tool", "server", "policy_digest", "decision", "expires_at"] {
            let mut edited = recorded.clone();
            edited.insert(member.into(), Value::from("edited"));
            assert!(verify_recorded_vote(&edited).is_err(), "{member}");
        }
        Ok(())
    }

    #[test]
    fn the_votes_report_lists_counted_votes_with_their_labels() -> TestResult {
        let request = request()?;
        let (a, b) = (SigningIdentity::generate(), SigningIdentity::generate());
        let keys = [a.did().clone(), b.did().clone()];
        let approvers = keys.clone().map(|did| Approver {
            label: format!("holder of {}", &did.as_str()[8..14]),
            did: did.as_str().to_owned(),
        });
        let yes = counted(vote(&request, &a, &keys));
        let fields = request.expected("nope");
        let no = verify_vote(
            &request,
            &keys,
            Timestamp::now(),
            &body(&b, b.did().as_str(), &fields),
        )?;
        let report: Value =
            serde_json::from_slice(&request.votes_report(&[yes, counted(no)], &approvers))?;
        let expected = json!({"version": 2, "request_id": request.request_id().as_str(), "votes": [
            {"approver": keys[0].as_str(), "label": approvers[0].label, "decision": "approved"},
            {"approver": keys[1].as_str(), "label": approvers[1].label, "decision": "denied"},
        ]});
        assert_eq!(report, expected);
        Ok(())
    }

    #[test]
    fn the_salt_changes_the_digest_and_stays_out_of_it_otherwise() -> TestResult {
        let (a, b) = (request()?, request()?);
        assert_ne!(a.subject_digest(), b.subject_digest());
        let post: Map<String, Value> = serde_json::from_slice(a.post_body())?;
        let salt = post["salt"].as_str().ok_or("no salt")?;
        assert_eq!(salt.len(), 64);
        let again = salted_digest("accounting", "pay_invoice", a.arguments(), salt)?;
        assert_eq!(&again, a.subject_digest());
        Ok(())
    }
}
