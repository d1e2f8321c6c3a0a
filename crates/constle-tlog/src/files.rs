//! Building an agent's tree from its day files alone.
//!
//! The agent's chain runs through its day files in date order
//! (`<agent>-<YYYY-MM-DD>.jsonl`, see `docs/audit-log.md`); each line is a
//! leaf, its bytes exactly as on disk without the newline. Files are read
//! with `constle-audit`'s bounded reader (regular files only, at most
//! 1 GiB each, one at a time).
//!
//! This does not verify the chain (that is `constle audit verify`'s job),
//! but it does make sure the leaf index is the entry's `seq`, so proofs name
//! entries by their sequence number: a day's first line that is an entry
//! must have the `seq` of the number of lines before it. That fails when
//! the oldest days were deleted (retention) or lines are missing between
//! days. A first line that is not an entry at all (a rewritten log) is a
//! leaf at its place like any other: the tree takes any bytes, so what the
//! witnesses cosigned can still be held against it, and the verifier
//! reports the line.
//!
//! Each leaf is also scanned for the cosignatures the log records
//! ([`Recorded`]), so whoever checks what witnesses cosigned reads the files
//! once.
//!
//! A last line without a newline in the latest file is a torn tail (a
//! crashed or still-running writer) and is not a leaf; its length is
//! reported. Lines after the head anchor are leaves: a caller that wants
//! only acknowledged entries uses [`LogTree::head_at`] with the head's
//! `seq + 1`.

use std::path::{Path, PathBuf};

use constle_audit::{DayFile, parse_line, read_log_file};
use constle_identity::Name;

use crate::error::LogFilesError;
use crate::recorded::Recorded;
use crate::tree::LogTree;

/// An agent's tree as read from its day files.
#[derive(Debug)]
pub struct LogFiles {
    /// The tree of every complete line.
    pub tree: LogTree,
    /// The day files read, oldest first.
    pub files: Vec<PathBuf>,
    /// Bytes after the latest file's last newline, not in the tree.
    pub torn_tail: usize,
    /// The `checkpoint_cosigned` entries among the leaves.
    pub recorded: Recorded,
}

/// The day files of `agent` in `dir`, oldest first.
///
/// # Errors
///
/// [`LogFilesError::ListDir`] if `dir` cannot be listed.
pub fn day_files(dir: &Path, agent: &Name) -> Result<Vec<DayFile>, LogFilesError> {
    let list_error = |source| LogFilesError::ListDir {
        dir: dir.to_owned(),
        source,
    };
    let mut days = Vec::new();
    for item in std::fs::read_dir(dir).map_err(list_error)? {
        if let Some(day) = DayFile::from_path(&item.map_err(list_error)?.path())
            && &day.agent == agent
        {
            days.push(day);
        }
    }
    days.sort_by_key(|d| d.date);
    Ok(days)
}

impl LogTree {
    /// Builds the tree of `agent`'s chain from its day files in `dir`.
    ///
    /// # Errors
    ///
    /// [`LogFilesError`]: a file that cannot be read, an empty or torn line
    /// before the end, or a day whose first `seq` does not continue the lines
    /// before it.
    pub fn from_log_dir(dir: &Path, agent: &Name) -> Result<LogFiles, LogFilesError> {
        LogTree::from_log_dir_with(dir, agent, |_, _| {})
    }

    /// [`LogTree::from_log_dir`], handing `visit` each leaf's index (the
    /// entry's `seq`) and line as it is added: for a reader that needs
    /// lines besides the tree, and then reads each file once, so the lines
    /// it keeps are the leaves of the tree it gets.
    ///
    /// # Errors
    ///
    /// As [`LogTree::from_log_dir`].
    pub fn from_log_dir_with(
        dir: &Path,
        agent: &Name,
        mut visit: impl FnMut(u64, &[u8]),
    ) -> Result<LogFiles, LogFilesError> {
        let days = day_files(dir, agent)?;
        let mut tree = LogTree::new();
        let mut files = Vec::with_capacity(days.len());
        let mut torn_tail = 0;
        let mut recorded = Recorded::default();
        let count = days.len();
        for (i, day) in days.into_iter().enumerate() {
            let path = day.path();
            let bytes = read_log_file(&path)?;
            let (complete, torn) = match bytes.iter().rposition(|&b| b == b'\n') {
                Some(end) => bytes.split_at(end + 1),
                None => (&bytes[..0], &bytes[..]),
            };
            if !torn.is_empty() {
                if i + 1 < count {
                    return Err(LogFilesError::TornLine { file: path });
                }
                torn_tail = torn.len();
            }
            push_lines(&path, complete, true, &mut tree, |seq, line| {
                visit(seq, line);
                recorded.scan(seq, line);
            })?;
            files.push(path);
        }
        Ok(LogFiles {
            tree,
            files,
            torn_tail,
            recorded,
        })
    }
}

/// Pushes the lines of `complete` (whole lines, each ending in a newline)
/// of the day file `path` onto `tree`, handing each to `each` first. When
/// `complete` starts the file and its first line is an entry, that entry's
/// `seq` must continue the tree.
pub(crate) fn push_lines(
    path: &Path,
    complete: &[u8],
    starts_file: bool,
    tree: &mut LogTree,
    mut each: impl FnMut(u64, &[u8]),
) -> Result<(), LogFilesError> {
    let mut lines = complete.split(|&b| b == b'\n');
    // `complete` ends in a newline, so the last piece is empty.
    let n_lines = complete.iter().filter(|&&b| b == b'\n').count();
    for number in 1..=n_lines {
        let Some(line) = lines.next() else { break };
        if line.is_empty() {
            return Err(LogFilesError::EmptyLine {
                file: path.to_owned(),
                line: number,
            });
        }
        if number == 1 && starts_file {
            check_first_seq(path, line, tree.len())?;
        }
        each(tree.len(), line);
        tree.push(line);
    }
    Ok(())
}

fn check_first_seq(path: &Path, line: &[u8], expected: u64) -> Result<(), LogFilesError> {
    match parse_line(line) {
        Ok(entry) if entry.seq != expected => Err(LogFilesError::SeqGap {
            file: path.to_owned(),
            expected,
            found: entry.seq,
        }),
        // Not an entry: it says no `seq`, and is the leaf at its place.
        _ => Ok(()),
    }
}
