//! Where an agent's log lives: one file per UTC day, plus the head anchor and
//! the lock beside them.
//!
//! ```text
//! logs/<agent>-<YYYY-MM-DD>.jsonl   the entries of one UTC day
//! logs/<agent>.head                 the signed position of the last entry
//! logs/<agent>.lock                 serialises writers of one agent
//! ```

use std::path::{Path, PathBuf};

use constle_identity::Name;
use jiff::civil::Date;

/// One day's log file of one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DayFile {
    /// The directory holding the agent's logs.
    pub dir: PathBuf,
    /// The agent the file belongs to.
    pub agent: Name,
    /// The UTC day its entries were recorded on.
    pub date: Date,
}

impl DayFile {
    /// Reads agent and day from a path named `<agent>-<YYYY-MM-DD>.jsonl`.
    pub fn from_path(path: &Path) -> Option<DayFile> {
        let name = path.file_name()?.to_str()?.strip_suffix(".jsonl")?;
        let split = name.len().checked_sub(11)?;
        let (agent, date) = (name.get(..split)?, name.get(split + 1..)?);
        if name.as_bytes()[split] != b'-' {
            return None;
        }
        let date: Date = date.parse().ok()?;
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let file = DayFile {
            dir,
            agent: Name::new(agent).ok()?,
            date,
        };
        (file.file_name() == path.file_name()?.to_str()?).then_some(file)
    }

    /// The file name, `<agent>-<YYYY-MM-DD>.jsonl`.
    pub fn file_name(&self) -> String {
        day_file_name(&self.agent, self.date)
    }

    /// The full path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(self.file_name())
    }

    /// The nearest earlier and later day files of the same agent in the same
    /// directory, if any: the neighbours this file's chain must link to.
    pub fn neighbours(&self) -> std::io::Result<(Option<DayFile>, Option<DayFile>)> {
        let (mut before, mut after): (Option<DayFile>, Option<DayFile>) = (None, None);
        for item in std::fs::read_dir(&self.dir)? {
            let Some(other) = DayFile::from_path(&item?.path()) else {
                continue;
            };
            if other.agent != self.agent {
                continue;
            }
            if other.date < self.date && before.as_ref().is_none_or(|b| other.date > b.date) {
                before = Some(other);
            } else if other.date > self.date && after.as_ref().is_none_or(|a| other.date < a.date) {
                after = Some(other);
            }
        }
        Ok((before, after))
    }
}

/// `<agent>-<YYYY-MM-DD>.jsonl`.
pub fn day_file_name(agent: &Name, date: Date) -> String {
    format!("{agent}-{date}.jsonl")
}

/// The head anchor of an agent's log in `dir`.
pub fn head_path(dir: &Path, agent: &Name) -> PathBuf {
    dir.join(format!("{agent}.head"))
}

/// The writers' lock of an agent's log in `dir`.
pub fn lock_path(dir: &Path, agent: &Name) -> PathBuf {
    dir.join(format!("{agent}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_agent_and_day_from_the_name() {
        let file = DayFile::from_path(Path::new("/l/my-agent-2026-08-08.jsonl")).unwrap();
        assert_eq!(file.agent.as_str(), "my-agent");
        assert_eq!(file.date.to_string(), "2026-08-08");
        assert_eq!(file.path(), Path::new("/l/my-agent-2026-08-08.jsonl"));
        assert_eq!(
            DayFile::from_path(Path::new("a-2026-08-08.jsonl"))
                .unwrap()
                .dir,
            Path::new(".")
        );
    }

    #[test]
    fn refuses_other_names() {
        for bad in [
            "log.jsonl",
            "a-2026-8-8.jsonl",
            "a-2026-02-30.jsonl",
            "a_2026-08-08.jsonl",
            "-2026-08-08.jsonl",
            "a-2026-08-08.json",
        ] {
            assert_eq!(DayFile::from_path(Path::new(bad)), None, "{bad}");
        }
    }
}
