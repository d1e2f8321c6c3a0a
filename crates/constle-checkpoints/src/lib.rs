//! The log's side of witnessing: checkpoints of an agent's audit log,
//! written during its runs and submitted to the witnesses the Agentfile
//! names (docs/spec/log-checkpoints.md §6).
//!
//! - [`Witnessing::from_manifest`]: the Agentfile's `audit` section with the
//!   keys parsed strictly, or nothing for an unsigned log.
//! - [`Schedule`]: when a round is due ([`Trigger`]).
//! - [`Checkpointer::round`]: one round. It reads the head anchor, reads
//!   the log's files on to it (only what was appended since the last round,
//!   [`constle_tlog::LogFollower`]), signs the checkpoint with the
//!   agent's key, asks every witness at once, checks each cosignature
//!   against the witness's key, and writes the latest cosigned checkpoint
//!   beside the log. It returns the [`Round`]: the entries to record, the
//!   warnings to show, and whether the run must stop.
//!
//! It holds no log writer: the caller records [`Round::events`], so the
//! entries of a round go through the run's one writer like every other.
//! And it decides nothing about a witness's honesty: a witness that answers
//! wrongly only fails to count.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod config;
mod error;
mod round;
mod schedule;
mod submit;

pub use config::{Witness, Witnessing};
pub use error::{CheckpointError, ConfigError};
pub use round::{Checkpointer, Round, latest_checkpoint_path};
pub use schedule::{Schedule, Trigger};
