//! Human gates for Constle: the channels a gated call is put to, the signed
//! webhook and the terminal prompt.
//!
//! A gated MCP `tools/call` waits at the gate until a person decides. What
//! a decision pins and how it is checked (the subject digest, the request,
//! [`verify_decision`](constle_approval::verify_decision) and version 2's
//! votes) is `constle-approval`'s, which does no I/O; this crate does the
//! asking, as specified in `docs/spec/human-gates-webhook.md` and
//! `docs/spec/human-gates-webhook-v2.md`:
//!
//! - [`WebhookClient::ask`] (and [`ask`]): POST, then poll
//!   `GET <url>/<request_id>/decision` until a decision or the deadline.
//!   Unreachable endpoints, unexpected statuses and malformed or oversized
//!   bodies are [`WebhookOutcome::NoDecision`]; `on_timeout` decides then.
//!   [`WebhookClient::ballot`] and [`WebhookClient::report_votes`] are
//!   version 2's: one endpoint's vote, and the votes so far.
//! - [`render_prompt`] and [`ask_terminal`]: the terminal channel. The prompt
//!   escapes everything the agent controls; an answer there is an unsigned
//!   local action ([`TerminalOutcome::Approved`] is recorded with
//!   `decided_by: terminal`), and arguments too large to show can be denied
//!   there but never approved. [`open_host_tty`] opens the host's
//!   `/dev/tty`, never the agent's standard input.
//!
//! What this crate does not do: match tool names, decide how the answers
//! settle a call (`constle_approval::rules`) or write the audit log. It
//! prints nothing except the prompt on the terminal it is handed, and it
//! never puts the webhook URL (which often carries a secret) in a message.

#![forbid(unsafe_code)]

mod client;
mod terminal;

pub use client::{
    ClientError, NoDecisionReason, WebhookClient, WebhookOutcome, WebhookUrl, WebhookUrlError, ask,
};
#[cfg(unix)]
pub use terminal::{HostTty, open_host_tty};
pub use terminal::{
    MAX_ATTEMPTS, MAX_SHOWN_BYTES, MAX_SHOWN_LINES, NO_TERMINAL_MESSAGE, PromptRequest,
    TerminalOutcome, ask_terminal, escape, render_prompt,
};
