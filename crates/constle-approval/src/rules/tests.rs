//! The step function, case by case: each case feeds a sequence of inputs
//! to a fresh [`Settlement`] and compares what every step asked for,
//! written as short words so that the table reads as the rules do.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::{DidKey, SigningIdentity};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::*;
use crate::quorum::{BallotRequest, Binding, SignedFields, verify_vote};
use crate::{PendingRequest, signed_message, verify_decision};

type Fallible<T> = Result<T, Box<dyn std::error::Error>>;

/// An input, named by who says what.
#[derive(Clone, Copy, Debug)]
enum In {
    /// (v2) approver `n` signs `approved`.
    Approve(usize),
    /// (v2) approver `n` signs `denied`.
    Deny(usize),
    /// (v2) approver `n` signs another word, which denies.
    Word(usize, &'static str),
    /// (v2) a key outside the set signs `approved`.
    Outsider,
    /// (v1) the approver signs `approved`.
    V1Approve,
    /// (v1) the approver signs `denied`.
    V1Deny,
    /// (v1) another key signs `approved`: the signature check fails.
    V1Forged,
    TerminalApproves,
    TerminalDenies,
    NoDecision(&'static str),
    Deadline,
}

/// Two approvers, and requests of both versions for one call.
struct World {
    keys: [SigningIdentity; 2],
    outsider: SigningIdentity,
    ballot: BallotRequest,
}

impl World {
    fn new() -> Fallible<World> {
        let binding = Binding {
            agent: "invoice-processor".into(),
            agent_did: None,
            server: "accounting".into(),
            tool: "pay_invoice".into(),
            policy_digest: format!("sha256:{}", "ab".repeat(32)),
            expires_at: Timestamp::now() + SignedDuration::from_secs(300),
        };
        let ballot = BallotRequest::new(binding, json!({"invoice_id": "INV-0042"}), &[], 2)?;
        Ok(World {
            keys: [SigningIdentity::generate(), SigningIdentity::generate()],
            outsider: SigningIdentity::generate(),
            ballot,
        })
    }

    fn dids(&self) -> Vec<DidKey> {
        self.keys.iter().map(|k| k.did().clone()).collect()
    }

    /// A version 2 vote `word` signed by `key`, checked.
    fn vote(&self, key: &SigningIdentity, word: &str) -> Fallible<Input> {
        let request = &self.ballot;
        let binding = request.binding();
        let fields = SignedFields {
            request_id: request.request_id().as_str().to_owned(),
            decision: word.to_owned(),
            subject_digest: request.subject_digest().to_string(),
            agent: binding.agent.clone(),
            agent_did: binding.agent_did.clone(),
            server: binding.server.clone(),
            tool: binding.tool.clone(),
            policy_digest: binding.policy_digest.clone(),
            expires_at: request.expires_at().to_owned(),
        };
        let signature = BASE64.encode(key.sign(&fields.message()).to_bytes());
        let body = fields.decision_body(key.did().as_str(), &signature);
        let ballot = verify_vote(request, &self.dids(), Timestamp::now(), &body)?;
        Ok(Input::Vote(ballot))
    }

    /// A version 1 decision `word` signed by `key`, checked against the
    /// first approver's key.
    fn decision(&self, key: &SigningIdentity, word: &str) -> Fallible<Input> {
        let expires = Timestamp::now() + SignedDuration::from_secs(300);
        let args = json!({"invoice_id": "INV-0042"});
        let request = PendingRequest::new("a", "accounting", "pay_invoice", args, expires)?;
        let (id, digest) = (
            request.request_id().to_string(),
            request.subject_digest().to_string(),
        );
        let signature = key.sign(signed_message(&id, word, &digest).as_bytes());
        let body = json!({
            "request_id": id, "decision": word, "subject_digest": digest,
            "signature": BASE64.encode(signature.to_bytes()),
        });
        let verdict = verify_decision(request, self.keys[0].did(), body.to_string().as_bytes())
            .map_err(|undecided| undecided.problem)?;
        Ok(Input::Decision(verdict))
    }

    fn input(&self, said: In) -> Fallible<Input> {
        Ok(match said {
            In::Approve(n) => self.vote(&self.keys[n], "approved")?,
            In::Deny(n) => self.vote(&self.keys[n], "denied")?,
            In::Word(n, word) => self.vote(&self.keys[n], word)?,
            In::Outsider => self.vote(&self.outsider, "approved")?,
            In::V1Approve => self.decision(&self.keys[0], "approved")?,
            In::V1Deny => self.decision(&self.keys[0], "denied")?,
            In::V1Forged => self.decision(&self.outsider, "approved")?,
            In::TerminalApproves => Input::Terminal(TerminalAnswer::Approved),
            In::TerminalDenies => Input::Terminal(TerminalAnswer::Denied),
            In::NoDecision(last) => Input::NoDecision(last.to_owned()),
            In::Deadline => Input::Deadline,
        })
    }

    /// Which approver a key is: `a`, `b`, or `?`.
    fn name(&self, key: &DidKey) -> &'static str {
        match self.keys.iter().position(|k| k.did() == key) {
            Some(0) => "a",
            Some(1) => "b",
            _ => "?",
        }
    }

    /// What a step asked for, in words; `-` for nothing.
    fn words(&self, step: &Step) -> String {
        let mut words = Vec::new();
        match &step.record {
            Some(Record::Vote(v)) => words.push(format!(
                "record {} {}",
                self.name(v.approver()),
                v.fields().decision
            )),
            Some(Record::Rejected(r)) => {
                words.push(format!("record rejected {}", r.reason.audit_reason()))
            }
            Some(Record::Terminal(t)) => words.push(format!("record terminal {t:?}")),
            None => {}
        }
        if let Some(report) = &step.report {
            let names: Vec<_> = report.iter().map(|v| self.name(v.approver())).collect();
            words.push(format!("report {}", names.join(",")));
        }
        if let Some(settled) = &step.settled {
            words.push(format!(
                "{} => {:?}",
                self.outcome(settled),
                settled.action()
            ));
        }
        match words.is_empty() {
            true => "-".to_owned(),
            false => words.join("; "),
        }
    }

    fn outcome(&self, settled: &Settled) -> String {
        match settled {
            Settled::Approved(Approved::Terminal) => "approved terminal".into(),
            Settled::Approved(Approved::Webhook(a)) => {
                format!("approved webhook {}", self.name(a.record().approver()))
            }
            Settled::Approved(Approved::Quorum(q)) => {
                let names: Vec<_> = q.votes().iter().map(|v| self.name(v.approver())).collect();
                format!(
                    "approved quorum {} terminal={}",
                    names.join(","),
                    q.terminal()
                )
            }
            Settled::Denied(Denied::Terminal) => "denied terminal".into(),
            Settled::Denied(Denied::Webhook(d)) => format!(
                "denied webhook {} signed={}",
                d.reason().audit_reason(),
                d.record().is_some()
            ),
            Settled::Denied(Denied::Vote(v)) => format!(
                "denied vote {} {}",
                self.name(v.approver()),
                v.fields().decision
            ),
            Settled::TimedOut(t) => format!(
                "timeout {} approvals={} silent=[{}]",
                t.on_timeout.word(),
                t.approvals,
                t.no_decision.join(",")
            ),
        }
    }
}

const ONE_ABORT: Rule = Rule {
    approvers: Approvers::One,
    on_timeout: OnTimeout::Abort,
};
const ONE_PROCEED: Rule = Rule {
    approvers: Approvers::One,
    on_timeout: OnTimeout::Proceed,
};

const fn quorum(threshold: usize, terminal_approves: bool, on_timeout: OnTimeout) -> Rule {
    Rule {
        approvers: Approvers::Quorum {
            threshold,
            terminal_approves,
        },
        on_timeout,
    }
}

const TWO: Rule = quorum(2, false, OnTimeout::Abort);
const TWO_WITH_TERMINAL: Rule = quorum(2, true, OnTimeout::Abort);

use In::*;

/// `(case, rule, inputs, what each step asks for)`.
type Case = (&'static str, Rule, &'static [In], &'static [&'static str]);

const CASES: &[Case] = &[
    // Version 1: the first answer settles, whatever comes after.
    (
        "v1 terminal approval forwards",
        ONE_ABORT,
        &[TerminalApproves, V1Deny, Deadline],
        &["approved terminal => Forward", "-", "-"],
    ),
    (
        "v1 terminal denial refuses",
        ONE_ABORT,
        &[TerminalDenies, TerminalApproves],
        &["denied terminal => Refuse(\"denied at the terminal\")", "-"],
    ),
    (
        "v1 webhook approval forwards",
        ONE_ABORT,
        &[V1Approve, TerminalDenies],
        &["approved webhook a => Forward", "-"],
    ),
    (
        "v1 signed webhook denial refuses, with its record",
        ONE_ABORT,
        &[V1Deny],
        &["denied webhook denied signed=true => Refuse(\"denied through the webhook\")"],
    ),
    (
        "v1 a decision failing a check denies, without a record",
        ONE_PROCEED,
        &[V1Forged, V1Approve],
        &[
            "denied webhook gate_signature_invalid signed=false => \
             Refuse(\"denied through the webhook\")",
            "-",
        ],
    ),
    (
        "v1 timeout under abort ends the run",
        ONE_ABORT,
        &[Deadline, TerminalApproves],
        &["timeout abort approvals=0 silent=[] => Abort", "-"],
    ),
    (
        "v1 timeout under proceed forwards, with what the webhook saw",
        ONE_PROCEED,
        &[NoDecision("unreachable"), Deadline],
        &[
            "-",
            "timeout proceed approvals=0 silent=[unreachable] => Forward",
        ],
    ),
    (
        "v1 a version 2 vote is no answer",
        ONE_ABORT,
        &[Approve(0), Deny(0), Deadline],
        &["-", "-", "timeout abort approvals=0 silent=[] => Abort"],
    ),
    // Version 2: votes are recorded as they come and tallied.
    (
        "v2 two distinct approvals forward, and a repeat counts once",
        TWO,
        &[Approve(0), Approve(0), Approve(1), Approve(1), Deny(0)],
        &[
            "record a approved; report a",
            "record a approved; report a,a",
            "record b approved; approved quorum a,b terminal=false => Forward",
            "-",
            "-",
        ],
    ),
    (
        "v2 one verified denial refuses at once",
        TWO,
        &[Approve(0), Deny(1), Approve(0)],
        &[
            "record a approved; report a",
            "record b denied; denied vote b denied => Refuse(\"an approver denied it\")",
            "-",
        ],
    ),
    (
        "v2 any other signed word denies",
        TWO,
        &[Word(0, "nope")],
        &["record a nope; denied vote a nope => Refuse(\"an approver denied it\")"],
    ),
    (
        "v2 a denial after the threshold was reached changes nothing",
        quorum(1, false, OnTimeout::Abort),
        &[Approve(1), Deny(0), TerminalDenies],
        &[
            "record b approved; approved quorum b terminal=false => Forward",
            "-",
            "-",
        ],
    ),
    (
        "v2 a rejected vote is recorded and counts for nothing",
        TWO,
        &[Outsider, Approve(0), Deadline],
        &[
            "record rejected gate_approver_unknown",
            "record a approved; report a",
            "timeout abort approvals=1 silent=[] => Abort",
        ],
    ),
    (
        "v2 the terminal's approval counts when terminal_approves",
        TWO_WITH_TERMINAL,
        &[TerminalApproves, Approve(1)],
        &[
            "record terminal Approved",
            "record b approved; approved quorum b terminal=true => Forward",
        ],
    ),
    (
        "v2 the terminal alone makes a threshold of one",
        quorum(1, true, OnTimeout::Abort),
        &[TerminalApproves, Approve(0)],
        &[
            "record terminal Approved; approved quorum  terminal=true => Forward",
            "-",
        ],
    ),
    (
        "v2 the terminal's approval does not count otherwise",
        TWO,
        &[TerminalApproves, Approve(0), Deadline],
        &[
            "record terminal ApprovedNotCounted",
            "record a approved; report a",
            "timeout abort approvals=1 silent=[] => Abort",
        ],
    ),
    (
        "v2 a denial at the terminal refuses",
        TWO_WITH_TERMINAL,
        &[Approve(0), TerminalDenies, Approve(1)],
        &[
            "record a approved; report a",
            "record terminal Denied; denied terminal => Refuse(\"denied at the terminal\")",
            "-",
        ],
    ),
    (
        "v2 timeout under abort ends the run, with the approvals so far",
        TWO_WITH_TERMINAL,
        &[
            TerminalApproves,
            NoDecision("no decision before the deadline"),
            NoDecision("unreachable"),
            Deadline,
            Approve(0),
        ],
        &[
            "record terminal Approved",
            "-",
            "-",
            "timeout abort approvals=1 silent=[no decision before the deadline,unreachable] \
             => Abort",
            "-",
        ],
    ),
    (
        "v2 timeout under proceed forwards",
        quorum(2, false, OnTimeout::Proceed),
        &[Deadline],
        &["timeout proceed approvals=0 silent=[] => Forward"],
    ),
    (
        "v2 a version 1 decision is no vote",
        TWO,
        &[V1Approve, V1Deny, Deadline],
        &["-", "-", "timeout abort approvals=0 silent=[] => Abort"],
    ),
];

#[test]
fn every_case_steps_as_the_rules_say() -> Fallible<()> {
    let world = World::new()?;
    for (case, rule, inputs, expected) in CASES {
        assert_eq!(inputs.len(), expected.len(), "{case}: the table is uneven");
        let mut settlement = Settlement::new(*rule);
        for (n, (said, expected)) in inputs.iter().zip(*expected).enumerate() {
            let step = settlement.step(world.input(*said)?);
            assert_eq!(
                world.words(&step),
                *expected,
                "{case}, input {n} ({said:?})"
            );
        }
    }
    Ok(())
}

#[test]
fn only_a_timeout_applies_on_timeout() {
    for on_timeout in [OnTimeout::Abort, OnTimeout::Proceed] {
        let timed_out = Settled::TimedOut(TimedOut {
            on_timeout,
            approvals: 3,
            no_decision: Vec::new(),
        });
        let expected = match on_timeout {
            OnTimeout::Abort => Action::Abort,
            OnTimeout::Proceed => Action::Forward,
        };
        assert_eq!(timed_out.action(), expected);
        assert_eq!(
            Settled::Denied(Denied::Terminal).action(),
            Action::Refuse("denied at the terminal")
        );
    }
    assert_eq!(OnTimeout::Abort.word(), "abort");
    assert_eq!(OnTimeout::Proceed.word(), "proceed");
}
