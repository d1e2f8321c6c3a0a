//! Keeping an agent's tree up to date while its log grows: each call reads
//! only the bytes added since the last, up to the head anchor, so a long
//! run's checkpoints cost what was appended, not the whole log.
//!
//! Only acknowledged entries are read (up to the head's file and length):
//! a writer may cut lines after the head, never before it, so the lines
//! read are never taken back. A log that no longer holds what was read (it
//! shrank, or was moved aside and started again) is an error, never a
//! reason to start over.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use constle_audit::{DayFile, MAX_LOG_FILE_BYTES};
use constle_identity::Name;
use jiff::civil::Date;

use crate::error::LogFilesError;
use crate::files::{day_files, push_lines};
use crate::tree::LogTree;

/// An agent's tree as far as its head anchor, read incrementally.
#[derive(Debug)]
pub struct LogFollower {
    dir: PathBuf,
    agent: Name,
    tree: LogTree,
    /// The day file read last, and how many of its bytes.
    at: Option<(Date, u64)>,
}

impl LogFollower {
    /// Follows `agent`'s log in `dir`, from nothing read.
    pub fn new(dir: &Path, agent: Name) -> LogFollower {
        LogFollower {
            dir: dir.to_owned(),
            agent,
            tree: LogTree::new(),
            at: None,
        }
    }

    /// The tree of the entries read so far.
    pub fn tree(&self) -> &LogTree {
        &self.tree
    }

    /// Reads on to a head anchor naming `size` entries, the last ending at
    /// byte `len` of the day file named `file`.
    ///
    /// # Errors
    ///
    /// [`LogFilesError`]: a file that cannot be read, a torn or empty line,
    /// a day whose first `seq` does not continue, or files that do not hold
    /// the head's entries ([`LogFilesError::NotFollowing`]).
    pub fn follow(&mut self, file: &str, len: u64, size: u64) -> Result<&LogTree, LogFilesError> {
        if size < self.tree.len() {
            return Err(self.not_following(format!(
                "the head names {size} entries, but {} were read before",
                self.tree.len()
            )));
        }
        if size == self.tree.len() {
            return Ok(&self.tree);
        }
        let head_day = DayFile::from_path(Path::new(file))
            .filter(|d| d.agent == self.agent)
            .ok_or_else(|| {
                self.not_following(format!(
                    "the head names {file}, not a day file of {}",
                    self.agent
                ))
            })?;
        for day in day_files(&self.dir, &self.agent)? {
            let from = match self.at {
                Some((date, _)) if day.date < date => continue,
                Some((date, read)) if day.date == date => read,
                _ => 0,
            };
            if day.date > head_day.date {
                break;
            }
            let until = (day.date == head_day.date).then_some(len);
            self.read_day(&day.path(), day.date, from, until)?;
        }
        match self.tree.len() == size {
            true => Ok(&self.tree),
            false => Err(self.not_following(format!(
                "the head names {size} entries, the files hold {} up to it",
                self.tree.len()
            ))),
        }
    }

    /// Reads `path` from byte `from` to `until` (the head's length) or its
    /// end, whole lines only.
    fn read_day(
        &mut self,
        path: &Path,
        date: Date,
        from: u64,
        until: Option<u64>,
    ) -> Result<(), LogFilesError> {
        let bytes = read_range(path, from, until)?;
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => &bytes[..=end],
            None => &bytes[..0],
        };
        // Up to the head, or in a day before it, nothing may be torn.
        if complete.len() != bytes.len() {
            return Err(LogFilesError::TornLine {
                file: path.to_owned(),
            });
        }
        if let Some(until) = until
            && from + bytes.len() as u64 != until
        {
            return Err(self.not_following(format!(
                "{} is shorter than its head anchor says",
                path.display()
            )));
        }
        push_lines(path, complete, from == 0, &mut self.tree, |_, _| {})?;
        self.at = Some((date, from + complete.len() as u64));
        Ok(())
    }

    fn not_following(&self, what: String) -> LogFilesError {
        LogFilesError::NotFollowing {
            dir: self.dir.clone(),
            what,
        }
    }
}

/// The bytes of the regular file `path` from `from` to `until` or its end.
fn read_range(path: &Path, from: u64, until: Option<u64>) -> Result<Vec<u8>, LogFilesError> {
    let failed = |err: std::io::Error| LogFilesError::NotFollowing {
        dir: path.to_owned(),
        what: format!("cannot read it: {err}"),
    };
    let mut file = File::open(path).map_err(failed)?;
    if !file.metadata().map_err(failed)?.is_file() {
        return Err(failed(std::io::Error::other("not a regular file")));
    }
    let end = until.unwrap_or(MAX_LOG_FILE_BYTES).min(MAX_LOG_FILE_BYTES);
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(from))
        .and_then(|_| file.take(end.saturating_sub(from)).read_to_end(&mut bytes))
        .map_err(failed)?;
    Ok(bytes)
}
