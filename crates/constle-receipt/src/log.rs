//! What a receipt reads of a log: its tree, the entries of the few events
//! a receipt is made of, and the cosignatures it records, read in one pass
//! over the day files.

use std::path::Path;

use constle_audit::{Entry, LineError, parse_line};
use constle_identity::Name;
use constle_tlog::{LogFilesError, LogTree, Recorded};

/// The events a receipt reads.
pub(crate) const RUN_STARTED: &str = "run_started";
pub(crate) const RUN_FINISHED: &str = "run_finished";
pub(crate) const TOOLS_OFFERED: &str = "mcp_tools_offered";
pub(crate) const CHECKPOINT: &str = "checkpoint";
pub(crate) const COSIGNED: &str = "checkpoint_cosigned";
const EVENTS: [&str; 5] = [
    RUN_STARTED,
    RUN_FINISHED,
    TOOLS_OFFERED,
    CHECKPOINT,
    COSIGNED,
];

/// One entry kept: its line and what it says.
pub(crate) struct Kept {
    pub(crate) line: Vec<u8>,
    pub(crate) entry: Entry,
}

/// The log's tree, its entries of [`EVENTS`] in `seq` order, and its
/// `checkpoint_cosigned` entries (not yet verified).
pub(crate) struct LogLines {
    pub(crate) tree: LogTree,
    pub(crate) kept: Vec<Kept>,
    pub(crate) recorded: Recorded,
}

/// Why a log could not be read for a receipt.
pub(crate) enum ReadFailure {
    Files(LogFilesError),
    Line { seq: u64, source: LineError },
}

impl LogLines {
    /// Reads `agent`'s log in `dir`, keeping the entries of [`EVENTS`]
    /// whose `seq` `wanted` says.
    pub(crate) fn read(
        dir: &Path,
        agent: &Name,
        wanted: impl Fn(u64) -> bool,
    ) -> Result<LogLines, ReadFailure> {
        let needles: Vec<String> = EVENTS
            .iter()
            .map(|e| format!("\"event\":\"{e}\""))
            .collect();
        let mut candidates = Vec::new();
        let files = LogTree::from_log_dir_with(dir, agent, |seq, line| {
            if wanted(seq) && names_an_event(line, &needles) {
                candidates.push((seq, line.to_vec()));
            }
        })
        .map_err(ReadFailure::Files)?;
        let mut kept = Vec::with_capacity(candidates.len());
        for (seq, line) in candidates {
            let entry = parse_line(&line).map_err(|source| ReadFailure::Line { seq, source })?;
            if EVENTS.contains(&entry.event.as_str()) {
                kept.push(Kept { line, entry });
            }
        }
        Ok(LogLines {
            tree: files.tree,
            kept,
            recorded: files.recorded,
        })
    }

    /// The entries of `event`, in order.
    pub(crate) fn of<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Kept> + 'a {
        self.kept.iter().filter(move |k| k.entry.event == event)
    }
}

/// Whether `line` may be an entry of one of [`EVENTS`], each `needles`'
/// `"event":"<name>"`: a canonical line writes its member so, names need no
/// escaping, so no such entry is passed over. What else matches is parsed
/// and sorted out. Parsing only these keeps a long log quick to read.
fn names_an_event(line: &[u8], needles: &[String]) -> bool {
    needles
        .iter()
        .any(|needle| line.windows(needle.len()).any(|w| w == needle.as_bytes()))
}
