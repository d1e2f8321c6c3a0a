//! The audit log: what happened during a run, in a form that shows whether it
//! was changed afterwards.
//!
//! Each agent has one JSONL file per UTC day (`<agent>-<YYYY-MM-DD>.jsonl`).
//! Every line is one event in RFC 8785 canonical JSON with the characters a
//! terminal must not be shown escaped ([`LINE_SPELLING`]), carrying its
//! sequence number in the agent's chain and the SHA-256 of the line before
//! it. When
//! the agent has an identity (`identity.did`), every line is also signed with
//! the agent's Ed25519 key. A signed head anchor beside the logs records where
//! the chain ends, so entries cut off the end are caught too.
//!
//! - [`Appender`] and [`AuditLog`] write: sealed, fsynced, anchored, with
//!   group commit for concurrent producers.
//! - [`verify_file`] checks a day file and yields a [`VerifiedLog`] or the
//!   [`Finding`]s that show what was changed.
//! - [`catalogue`] declares every event Constle writes, with its fields;
//!   each of its structs becomes an [`Event`] without fail.
//! - [`parse_line`] reads one line, for display; [`verify_signed_line`]
//!   checks one line's signature on its own (for a line shown out of its
//!   log, as a run receipt shows it); [`read_log_file`] reads a day file,
//!   only if it is a regular file of bounded size.
//!
//! What the log cannot show is that its account is true: the host wrote it.
//! And whoever holds the agent's key can rewrite the whole chain and head.
//! See `docs/audit-log.md`.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod batch;
pub mod catalogue;
mod entry;
mod finding;
mod head;
mod layout;
mod read;
mod snapshot;
mod trust;
mod verify;
mod votes;
mod writer;

pub use entry::{
    Entry, Event, EventError, LINE_SPELLING, LineError, LineHash, SignedLineError,
    format_timestamp, parse_line, verify_signed_line,
};
pub use finding::{Finding, FindingCode};
pub use head::{Head, HeadError, SignedHead};
pub use layout::{DayFile, day_file_name, head_path};
pub use read::{MAX_LOG_FILE_BYTES, ReadError, read_bounded, read_log_file};
pub use trust::{Approvers, SetVersion, TrustAnchors};
pub use verify::{Verdict, VerifiedLog, verify_contents, verify_file};
pub use writer::{Appender, AuditError, AuditLog, Pending, Written};
