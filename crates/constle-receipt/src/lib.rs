//! A run's receipt: one small file that shows, to someone without the log,
//! what a run of an agent was — who ran it under which policy, which tools
//! each MCP server offered it, where in the log it began and ended — bound
//! by a checkpoint of the log that independent witnesses cosigned.
//!
//! A witness cosigns a checkpoint (c2sp.org/tlog-cosignature) only as an
//! extension of every checkpoint of the log it cosigned before, so once it
//! has, not even the agent's key can make a second history of those
//! entries that the witness would also cosign. A receipt carries the run's
//! entries with inclusion proofs into such a checkpoint:
//!
//! - [`build`] reads the agent's day files and makes the receipt of a run
//!   ([`Run`]): its `run_started` and `run_finished` entries and its
//!   `mcp_tools_offered` entries, each with its inclusion proof, and the
//!   checkpoint the run wrote after it ended with the cosignatures the log
//!   recorded for it. What it builds it verifies against the Agentfile
//!   ([`Pins`]) before returning it.
//! - [`Receipt::parse`] reads one strictly (one spelling of each receipt:
//!   its canonical JSON), [`Receipt::verify`] checks it offline and is the
//!   only maker of a [`VerifiedReceipt`]; [`VerifiedReceipt::check_log`]
//!   also holds it against a log.
//! - [`read_receipt`] and [`write_receipt`] read and write the file.
//!
//! The format and every check are specified in
//! `docs/spec/log-checkpoints.md` ("Run receipts"); the commands are
//! `constle audit receipt` and `constle audit verify-receipt`
//! (`docs/audit-log.md`).
//!
//! What a receipt does not show on its own: that it holds every tool list
//! of the run (one left out is caught against the log, `check_log`), that
//! no other run overlapped it (likewise), or that the log says what
//! happened: the host wrote it.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod build;
mod check;
mod error;
mod file;
mod format;
mod log;
mod verify;

#[cfg(test)]
mod tests;

pub use build::{Run, build};
pub use check::LogMatch;
pub use error::{BuildError, FileError, FormatError, LogError, PinsError, VerifyError};
pub use file::{read_receipt, write_receipt};
pub use format::{Included, MAX_RECEIPT_BYTES, RECEIPT_TYPE, RECEIPT_VERSION, Receipt};
pub use verify::{Pins, RunEntry, ToolsOffered, VerifiedReceipt};
