//! How a gated call is settled: the rules of both protocol versions as one
//! step function, with no I/O.
//!
//! The gate asks every channel at once (the terminal, one webhook in
//! version 1, every webhook in version 2) and feeds what each says into a
//! [`Settlement`], one [`Input`] at a time. Each [`Settlement::step`] says
//! what to record now ([`Record`]), what to report to the endpoints, and,
//! exactly once, how the call is [`Settled`]; after that every input is
//! ignored. The caller writes the records and the outcome to the audit log
//! before it acts ([`Settled::action`]).
//!
//! - **Version 1** ([`Approvers::One`]): the first answer settles the call.
//!   An approval at the terminal or a signed approval from the webhook
//!   forwards it; a denial at the terminal, or a webhook decision that
//!   denies or fails any check, refuses it.
//! - **Version 2** ([`Approvers::Quorum`]): every vote is recorded as it
//!   arrives. `threshold` approvals by distinct keys forward the call (the
//!   terminal's approval counts as one when `terminal_approves`, and is
//!   recorded as not counted otherwise); one verified denial, or a denial
//!   at the terminal, refuses it; a vote that fails a check counts for
//!   nothing; a key that approves twice counts once.
//! - **Both**: when the deadline passes first, [`OnTimeout`] decides:
//!   `proceed` forwards the call, `abort` refuses it and ends the run.
//!
//! An answer of the other version (a version 1 decision fed to a quorum,
//! a version 2 vote fed to a single approver's gate) is no answer to this
//! request, as the specifications say of each other's bodies: it changes
//! nothing and is not recorded.

use crate::decision::{Denial, Verdict, VerifiedApproval};
use crate::quorum::{Ballot, Progress, QuorumApproval, RejectedVote, Tally, VerifiedVote};

/// What happens when nobody decides before the deadline: the Agentfile's
/// `human_gates.on_timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    /// Refuse the call and stop the run.
    Abort,
    /// Forward the call without approval: the gate becomes a delay.
    Proceed,
}

impl OnTimeout {
    /// The word the Agentfile, the prompt and the audit log use.
    pub fn word(self) -> &'static str {
        match self {
            OnTimeout::Abort => "abort",
            OnTimeout::Proceed => "proceed",
        }
    }
}

/// Who must decide a gated call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approvers {
    /// One approver key (protocol version 1): the first answer settles.
    One,
    /// Several keys and a threshold (protocol version 2).
    Quorum {
        /// Approvals by distinct keys needed (at least one counts).
        threshold: usize,
        /// Whether an approval at the terminal counts as one of them.
        terminal_approves: bool,
    },
}

/// The rules a [`Settlement`] follows: the Agentfile's `human_gates`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Who decides.
    pub approvers: Approvers,
    /// What the deadline does.
    pub on_timeout: OnTimeout,
}

/// What the person at the terminal answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalAnswer {
    /// An unsigned local approval.
    Approved,
    /// A denial.
    Denied,
}

/// Something a channel said, or the clock.
#[derive(Debug)]
pub enum Input {
    /// (Version 1) the webhook's decision, checked by
    /// [`crate::verify_decision`].
    Decision(Verdict),
    /// (Version 2) one webhook's vote, checked by
    /// [`crate::quorum::verify_vote`].
    Vote(Ballot),
    /// The terminal's answer.
    Terminal(TerminalAnswer),
    /// A webhook ended without a decision: what it last saw, for the
    /// record. Only the deadline settles the call then.
    NoDecision(String),
    /// The deadline passed, or no channel is left that could answer.
    Deadline,
}

/// An audit entry to write now, before the call moves on: one vote
/// (version 2 only).
#[derive(Debug)]
pub enum Record {
    /// A vote whose every check passed.
    Vote(VerifiedVote),
    /// A vote that failed a check: it counts for nothing.
    Rejected(RejectedVote),
    /// The terminal's answer.
    Terminal(TerminalVote),
}

/// The terminal's answer as a version 2 vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalVote {
    /// An approval that counts as one vote.
    Approved,
    /// An approval that does not count (`terminal_approves: false`).
    ApprovedNotCounted,
    /// A denial: it refuses the call.
    Denied,
}

/// How the call was settled.
#[derive(Debug)]
pub enum Settled {
    /// Approved: forward the call.
    Approved(Approved),
    /// Denied: refuse it.
    Denied(Denied),
    /// Nobody decided in time: [`OnTimeout`] decides.
    TimedOut(TimedOut),
}

/// Who approved.
#[derive(Debug)]
pub enum Approved {
    /// The person at the terminal (version 1).
    Terminal,
    /// The approver's signed decision (version 1).
    Webhook(VerifiedApproval),
    /// `threshold` distinct approvers (version 2).
    Quorum(QuorumApproval),
}

/// Who denied.
#[derive(Debug)]
pub enum Denied {
    /// The person at the terminal.
    Terminal,
    /// The webhook's decision (version 1): a signed denial, or a decision
    /// that failed a check.
    Webhook(Denial),
    /// An approver's verified denial (version 2).
    Vote(VerifiedVote),
}

/// The deadline passed first.
#[derive(Debug, PartialEq, Eq)]
pub struct TimedOut {
    /// What the deadline does.
    pub on_timeout: OnTimeout,
    /// How many votes approved by then (version 2; 0 in version 1).
    pub approvals: usize,
    /// What each webhook that ended without a decision last saw, in the
    /// order they ended.
    pub no_decision: Vec<String>,
}

/// What the gate does once the outcome is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Forward the call.
    Forward,
    /// Refuse it, telling the agent why.
    Refuse(&'static str),
    /// Refuse it and end the run.
    Abort,
}

impl Settled {
    /// What the gate does: the one place `on_timeout` is applied.
    pub fn action(&self) -> Action {
        match self {
            Settled::Approved(_) => Action::Forward,
            Settled::Denied(Denied::Terminal) => Action::Refuse("denied at the terminal"),
            Settled::Denied(Denied::Webhook(_)) => Action::Refuse("denied through the webhook"),
            Settled::Denied(Denied::Vote(_)) => Action::Refuse("an approver denied it"),
            Settled::TimedOut(timeout) => match timeout.on_timeout {
                OnTimeout::Proceed => Action::Forward,
                OnTimeout::Abort => Action::Abort,
            },
        }
    }
}

/// What one [`Settlement::step`] asks of the caller, in this order: write
/// `record`, send `report`, then, if `settled`, write the outcome and act.
#[derive(Debug, Default)]
#[must_use]
pub struct Step {
    /// The entry to write now.
    pub record: Option<Record>,
    /// (Version 2) the approvals counted so far, in arrival order, to
    /// report to every endpoint (spec §14); never sent once the call is
    /// settled.
    pub report: Option<Vec<VerifiedVote>>,
    /// The outcome, given once.
    pub settled: Option<Settled>,
}

impl Step {
    fn settled(settled: Settled) -> Step {
        Step {
            settled: Some(settled),
            ..Step::default()
        }
    }

    fn record(record: Record) -> Step {
        Step {
            record: Some(record),
            ..Step::default()
        }
    }
}

/// One gated call being settled.
#[derive(Debug)]
pub struct Settlement {
    on_timeout: OnTimeout,
    count: Count,
    no_decision: Vec<String>,
    settled: bool,
}

/// How answers count.
#[derive(Debug)]
enum Count {
    /// Version 1: the first answer settles.
    First,
    /// Version 2: votes are tallied.
    Quorum {
        tally: Tally,
        terminal_approves: bool,
        /// Every verified approval, repeats included, for the report.
        approved: Vec<VerifiedVote>,
    },
}

impl Settlement {
    /// A call waiting under `rule`.
    pub fn new(rule: Rule) -> Settlement {
        let count = match rule.approvers {
            Approvers::One => Count::First,
            Approvers::Quorum {
                threshold,
                terminal_approves,
            } => Count::Quorum {
                tally: Tally::new(threshold),
                terminal_approves,
                approved: Vec::new(),
            },
        };
        Settlement {
            on_timeout: rule.on_timeout,
            count,
            no_decision: Vec::new(),
            settled: false,
        }
    }

    /// Takes one input. Once a step has been `settled`, every later input
    /// is ignored: nothing is recorded, reported or settled again.
    pub fn step(&mut self, input: Input) -> Step {
        if self.settled {
            return Step::default();
        }
        let step = match input {
            Input::Decision(verdict) => self.decision(verdict),
            Input::Vote(ballot) => self.vote(ballot),
            Input::Terminal(answer) => self.terminal(answer),
            Input::NoDecision(last) => {
                self.no_decision.push(last);
                Step::default()
            }
            Input::Deadline => Step::settled(self.timed_out()),
        };
        self.settled = step.settled.is_some();
        step
    }

    fn decision(&self, verdict: Verdict) -> Step {
        match (&self.count, verdict) {
            (Count::First, Verdict::Approved(approval)) => {
                Step::settled(Settled::Approved(Approved::Webhook(approval)))
            }
            (Count::First, Verdict::Denied(denial)) => {
                Step::settled(Settled::Denied(Denied::Webhook(denial)))
            }
            (Count::Quorum { .. }, _) => Step::default(),
        }
    }

    fn vote(&mut self, ballot: Ballot) -> Step {
        let Count::Quorum {
            tally, approved, ..
        } = &mut self.count
        else {
            return Step::default();
        };
        let vote = match ballot {
            Ballot::Rejected(rejected) => return Step::record(Record::Rejected(rejected)),
            Ballot::Counted(vote) => vote,
        };
        let report = vote.approves().then(|| {
            approved.push(vote.clone());
            approved.clone()
        });
        let settled = settled_by(tally.add(vote.clone()));
        Step {
            record: Some(Record::Vote(vote)),
            report: report.filter(|_| settled.is_none()),
            settled,
        }
    }

    fn terminal(&mut self, answer: TerminalAnswer) -> Step {
        let (tally, terminal_approves) = match &mut self.count {
            Count::First => {
                return Step::settled(match answer {
                    TerminalAnswer::Approved => Settled::Approved(Approved::Terminal),
                    TerminalAnswer::Denied => Settled::Denied(Denied::Terminal),
                });
            }
            Count::Quorum {
                tally,
                terminal_approves,
                ..
            } => (tally, *terminal_approves),
        };
        match (answer, terminal_approves) {
            (TerminalAnswer::Denied, _) => Step {
                record: Some(Record::Terminal(TerminalVote::Denied)),
                settled: Some(Settled::Denied(Denied::Terminal)),
                ..Step::default()
            },
            (TerminalAnswer::Approved, false) => {
                Step::record(Record::Terminal(TerminalVote::ApprovedNotCounted))
            }
            (TerminalAnswer::Approved, true) => Step {
                record: Some(Record::Terminal(TerminalVote::Approved)),
                settled: settled_by(tally.add_terminal()),
                ..Step::default()
            },
        }
    }

    fn timed_out(&mut self) -> Settled {
        let approvals = match &self.count {
            Count::First => 0,
            Count::Quorum { tally, .. } => tally.approvals(),
        };
        Settled::TimedOut(TimedOut {
            on_timeout: self.on_timeout,
            approvals,
            no_decision: std::mem::take(&mut self.no_decision),
        })
    }
}

/// The outcome a tally reached, if it reached one.
fn settled_by(progress: Progress) -> Option<Settled> {
    match progress {
        Progress::Approved(quorum) => Some(Settled::Approved(Approved::Quorum(quorum))),
        Progress::Denied(vote) => Some(Settled::Denied(Denied::Vote(vote))),
        Progress::Waiting(_) | Progress::AlreadyCounted | Progress::Settled => None,
    }
}

#[cfg(test)]
mod tests;
