//! Checking a verified receipt against a log (`--log`): the log's tree at
//! the checkpoint's size has the checkpoint's root, so every entry up to
//! it, the run's included, is the one the cosigned checkpoint binds; and
//! the run in the log is the receipt's: no other run started or finished
//! during it, and its tool lists are exactly the receipt's.

use std::path::Path;

use crate::error::LogError;
use crate::log::{LogLines, RUN_FINISHED, RUN_STARTED, ReadFailure, TOOLS_OFFERED};
use crate::verify::VerifiedReceipt;

/// What a log that matched a receipt holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogMatch {
    /// The entries of the run, `run_started` to `run_finished`.
    pub run_entries: u64,
    /// The entries of the log.
    pub log_entries: u64,
}

impl VerifiedReceipt {
    /// Checks the receipt against the agent's log in `dir` (see the
    /// module docs).
    ///
    /// # Errors
    ///
    /// [`LogError`] saying how the log differs: shorter, rewritten, the run
    /// overlapping another, tool lists left out of the receipt.
    pub fn check_log(&self, dir: &Path) -> Result<LogMatch, LogError> {
        let (start, end) = (self.started().seq, self.finished().seq);
        let log = LogLines::read(dir, self.agent(), |seq| (start..=end).contains(&seq)).map_err(
            |failure| match failure {
                ReadFailure::Files(err) => LogError::Files(err),
                ReadFailure::Line { seq, source } => LogError::Line { seq, source },
            },
        )?;
        let head = self.head();
        let entries = log.tree.len();
        let root = log.tree.root_at(head.size).map_err(|_| LogError::Shorter {
            entries,
            size: head.size,
        })?;
        if root != head.root {
            return Err(LogError::Rewritten {
                size: head.size,
                found: root,
                cosigned: head.root,
            });
        }
        let during = |seq: u64| start < seq && seq < end;
        if let Some(other) = log
            .of(RUN_STARTED)
            .chain(log.of(RUN_FINISHED))
            .find(|k| during(k.entry.seq))
        {
            return Err(LogError::Overlap {
                seq: other.entry.seq,
                event: other.entry.event.clone(),
            });
        }
        let in_log: Vec<u64> = log
            .of(TOOLS_OFFERED)
            .map(|k| k.entry.seq)
            .filter(|&seq| during(seq))
            .collect();
        let in_receipt: Vec<u64> = self.tools().iter().map(|t| t.seq).collect();
        if in_log != in_receipt {
            return Err(LogError::ToolsLeftOut { in_log, in_receipt });
        }
        Ok(LogMatch {
            run_entries: end - start + 1,
            log_entries: entries,
        })
    }
}
