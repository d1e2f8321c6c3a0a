//! Checking a day file: every line, the chain through it, its links to the
//! neighbouring days, and the head anchor.
//!
//! The result is either a [`VerifiedLog`], which only this module can make,
//! or the list of [`Finding`]s that show the file was changed.

use std::path::{Path, PathBuf};
use std::thread;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::DidKey;
use ed25519_dalek::Signature;
use serde_json::Value;

use crate::batch;
use crate::entry::{DidCache, Entry, LineError, LineHash, parse_line, parse_line_cached, utc_date};
use crate::finding::{Finding, FindingCode};
use crate::head::{Head, SignedHead};
use crate::layout::DayFile;
use crate::read::{ReadError, read_log_file};
use crate::snapshot::{LoadedHead, Snapshot};
use crate::trust::TrustAnchors;
use crate::votes::Votes;

/// A log that passed every check. Only [`verify_file`] and
/// [`verify_contents`] construct one.
#[derive(Debug)]
pub struct VerifiedLog {
    /// The file.
    pub path: PathBuf,
    /// Complete entries in it.
    pub entries: usize,
    /// Who signed them; `None` for an unsigned log.
    pub signer: Option<DidKey>,
    /// Whether the signer and approver were pinned by an Agentfile.
    pub pinned: bool,
    /// Things worth knowing that are not tampering (a torn last line, a
    /// chain that starts in a file not present).
    pub notes: Vec<String>,
}

/// The verdict on one file.
#[derive(Debug)]
pub enum Verdict {
    /// Every check passed.
    Verified(Box<VerifiedLog>),
    /// At least one check failed.
    Tampered {
        /// The file.
        path: PathBuf,
        /// Every problem found, in line order where they have lines.
        findings: Vec<Finding>,
        /// Notes, as for a verified log.
        notes: Vec<String>,
    },
}

/// Verifies one day file, including its links to the neighbouring day files
/// in the same directory and to the head anchor. A writer may be appending
/// meanwhile: the files are read so that they agree, and entries appended
/// while they were read are reported in a note, not as a finding.
///
/// # Errors
///
/// [`ReadError`] if a file that must be read (this one, a neighbouring day,
/// the head anchor) is not a regular file of bounded size, or cannot be
/// read, or if a writer held the log's lock for seconds while the files
/// were between two states of its append: the check could not be made.
pub fn verify_file(path: &Path, anchors: &TrustAnchors) -> Result<Verdict, ReadError> {
    let Some(day) = DayFile::from_path(path) else {
        return Ok(verify_contents(path, None, &read_log_file(path)?, anchors));
    };
    let snapshot = Snapshot::read(&day)?;
    let mut check = Check::run(path, Some(&day), &snapshot.bytes, anchors);
    check.link_neighbours(&day, &snapshot)?;
    Ok(check.verdict())
}

/// Verifies the contents of one day file without looking at any other file.
/// `day` is what the file name says, if it follows the naming scheme.
pub fn verify_contents(
    path: &Path,
    day: Option<&DayFile>,
    bytes: &[u8],
    anchors: &TrustAnchors,
) -> Verdict {
    Check::run(path, day, bytes, anchors).verdict()
}

/// One complete line and what could be read from it.
struct Line<'a> {
    number: usize,
    bytes: &'a [u8],
    hash: LineHash,
    entry: Result<Entry, LineError>,
    signature_valid: bool,
}

struct Check<'a> {
    path: PathBuf,
    lines: Vec<Line<'a>>,
    complete_len: u64,
    signer: Option<DidKey>,
    anchors: &'a TrustAnchors,
    findings: Vec<Finding>,
    notes: Vec<String>,
}

impl<'a> Check<'a> {
    fn run(
        path: &Path,
        day: Option<&DayFile>,
        bytes: &'a [u8],
        anchors: &'a TrustAnchors,
    ) -> Check<'a> {
        let complete_len = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let lines = read_lines(&bytes[..complete_len]);
        let signer = match anchors.pinned {
            true => anchors.agent_did.clone(),
            false => lines
                .iter()
                .find_map(|l| l.entry.as_ref().ok())
                .and_then(|e| e.did.clone()),
        };
        let mut check = Check {
            path: path.to_owned(),
            lines,
            complete_len: complete_len as u64,
            signer,
            anchors,
            findings: Vec::new(),
            notes: Vec::new(),
        };
        if complete_len < bytes.len() {
            check.notes.push(format!(
                "line {}: torn_tail — the last line is incomplete ({} bytes): it is being written, or the writer was interrupted mid-append; the entries before it are checked",
                check.lines.len() + 1,
                bytes.len() - complete_len
            ));
        }
        check.check_name(day);
        check.check_lines(day);
        check
    }

    fn find(&mut self, line: Option<usize>, code: FindingCode, detail: String) {
        self.findings.push(Finding { line, code, detail });
    }

    fn check_name(&mut self, day: Option<&DayFile>) {
        match day {
            None => self.find(
                None,
                FindingCode::UnrecognizedFileName,
                format!(
                    "{} is not named <agent>-<YYYY-MM-DD>.jsonl",
                    self.path.display()
                ),
            ),
            Some(day) => {
                if let Some(agent) = self.anchors.agent.as_ref().filter(|a| **a != day.agent) {
                    let detail = format!(
                        "the file is named for agent `{}`, the Agentfile declares `{agent}`",
                        day.agent
                    );
                    self.find(None, FindingCode::WrongAgent, detail);
                }
            }
        }
    }

    fn check_lines(&mut self, day: Option<&DayFile>) {
        let expected_agent = self
            .anchors
            .agent
            .as_ref()
            .or(day.map(|d| &d.agent))
            .map(|a| a.to_string());
        let mut problems = Vec::new();
        let mut seen = std::collections::HashMap::new();
        let terminal_approves = self
            .anchors
            .pinned
            .then_some(self.anchors.terminal_approves);
        let mut votes = Votes::new(self.anchors.approvers.as_ref(), terminal_approves);
        for (index, line) in self.lines.iter().enumerate() {
            let number = Some(line.number);
            let entry = match &line.entry {
                Ok(entry) => entry,
                Err(err) => {
                    problems.push(Finding {
                        line: number,
                        code: line_error_code(err),
                        detail: err.to_string(),
                    });
                    continue;
                }
            };
            let mut find = |code, detail: String| {
                problems.push(Finding {
                    line: number,
                    code,
                    detail,
                })
            };
            if let Some(agent) = expected_agent.as_ref().filter(|a| **a != entry.agent) {
                find(
                    FindingCode::WrongAgent,
                    format!("entry is for agent `{}`, expected `{agent}`", entry.agent),
                );
            }
            let date = utc_date(entry.ts);
            if let Some(day) = day.filter(|d| d.date != date) {
                find(
                    FindingCode::WrongDay,
                    format!("entry is dated {date}, the file is for {}", day.date),
                );
            }
            match (&self.signer, &entry.did) {
                (Some(expected), Some(did)) if did != expected => find(
                    FindingCode::WrongSigner,
                    format!("signed by {did}, expected {expected}"),
                ),
                (Some(expected), Some(_)) if !line.signature_valid => find(
                    FindingCode::InvalidSignature,
                    format!("signature does not verify against {expected}"),
                ),
                (Some(expected), None) => find(
                    FindingCode::UnsignedEntry,
                    format!("no signature; the log is signed by {expected}"),
                ),
                (None, Some(did)) => find(
                    FindingCode::WrongSigner,
                    format!("signed by {did}, but the log is not expected to be signed"),
                ),
                _ => {}
            }
            if let Some(earlier) = seen.insert(line.hash, line.number) {
                find(
                    FindingCode::DuplicateEntry,
                    format!("identical to line {earlier}"),
                );
            } else if let Some(previous) = index.checked_sub(1).map(|i| &self.lines[i])
                && let Some(detail) = link_problem(
                    entry,
                    previous.hash,
                    previous.entry.as_ref().ok().map(|e| e.seq),
                )
            {
                find(
                    FindingCode::ChainBroken,
                    format!("{detail} (line {})", previous.number),
                );
            }
            if let Some(detail) = self.approval_problem(entry) {
                find(FindingCode::ApprovalSignatureInvalid, detail);
            }
            if let Some((code, detail)) = votes.check(entry) {
                find(code, detail);
            }
        }
        self.findings.extend(problems);
    }

    /// Re-verifies a webhook decision recorded in the log against the pinned
    /// approver key (or, unpinned, the key the entry names).
    fn approval_problem(&self, entry: &Entry) -> Option<String> {
        let expected = recorded_decision(&entry.event)?;
        // A decision of several approvers (protocol v2) is in its votes,
        // which `Votes` checks.
        let v2 = entry.fields.get("version").and_then(Value::as_u64) == Some(2);
        if v2 || entry.fields.get("decided_by").and_then(Value::as_str) != Some("webhook") {
            return None;
        }
        let text = |key: &str| entry.fields.get(key).and_then(Value::as_str);
        let recorded_approver = text("approver").and_then(|d| DidKey::parse(d).ok());
        let key = self
            .anchors
            .approver
            .clone()
            .or(recorded_approver.filter(|_| !self.anchors.pinned));
        let Some(key) = key else {
            return Some("no approver key to check the decision against".into());
        };
        let (Some(request_id), Some(decision), Some(digest)) =
            (text("request_id"), text("decision"), text("subject_digest"))
        else {
            return Some("the decision lacks request_id, decision or subject_digest".into());
        };
        if decision != expected {
            return Some(format!(
                "`{}` records the decision `{decision}`",
                entry.event
            ));
        }
        let signature = text("signature")
            .and_then(|s| BASE64.decode(s).ok())
            .and_then(|b| <[u8; 64]>::try_from(b).ok());
        let message = format!("{request_id}.{decision}.{digest}");
        match signature.map(|s| key.verify(message.as_bytes(), &Signature::from_bytes(&s))) {
            Some(Ok(())) => None,
            _ => Some(format!("decision signature does not verify against {key}")),
        }
    }

    /// Checks that the first entry continues the previous day's file (or is
    /// the start of the chain the head names) and that the last entry is the
    /// end the next day's file or the head records.
    fn link_neighbours(&mut self, day: &DayFile, snapshot: &Snapshot) -> Result<(), ReadError> {
        let starts_here = snapshot.anchor().map(|h| h.start == day.file_name());
        self.link_start(snapshot.before.as_ref(), starts_here)?;
        match &snapshot.after {
            Some(after) => self.link_to_next_day(after),
            None => {
                self.check_head(day, &snapshot.head, snapshot.moved);
                Ok(())
            }
        }
    }

    fn link_start(
        &mut self,
        before: Option<&DayFile>,
        starts_here: Option<bool>,
    ) -> Result<(), ReadError> {
        let Some(first) = self.lines.first().and_then(|l| l.entry.as_ref().ok()) else {
            return Ok(());
        };
        let previous = match before {
            Some(before) => {
                last_line(&read_log_file(&before.path())?).map(|l| (before.file_name(), l))
            }
            None => None,
        };
        let detail = match (first.prev, previous) {
            (None, None) if first.seq != 0 => Some(format!(
                "the chain starts at sequence {} instead of 0",
                first.seq
            )),
            (None, None) if starts_here == Some(false) => Some(
                "the chain restarts here; the head anchor says it began in another file".into(),
            ),
            (None, None) => None,
            (None, Some((name, _))) => Some(format!(
                "the chain restarts here although {name} comes before it"
            )),
            (Some(_), None) if starts_here == Some(true) => {
                Some("the chain began in this file, but its first entry is missing".into())
            }
            (Some(_), None) => {
                self.notes.push("the chain continues from an earlier day file that is not present; its start was not checked".into());
                None
            }
            (Some(_), Some((name, line))) => {
                let seq = parse_line(&line).ok().map(|e| e.seq);
                link_problem(first, LineHash::of(&line), seq).map(|d| {
                    format!("{d} (the last line of {name}): a day was removed or its end cut off")
                })
            }
        };
        if let Some(detail) = detail {
            self.find(Some(1), FindingCode::ChainBroken, detail);
        }
        Ok(())
    }

    fn link_to_next_day(&mut self, after: &DayFile) -> Result<(), ReadError> {
        let bytes = read_log_file(&after.path())?;
        let next = bytes
            .split(|&b| b == b'\n')
            .next()
            .and_then(|l| parse_line(l).ok());
        let last = self.lines.last().map(|l| l.hash);
        if let Some(next) = next.filter(|n| n.prev.is_some() && n.prev != last) {
            let detail = format!(
                "{} does not continue from this file's last line (sequence {})",
                after.file_name(),
                next.seq
            );
            self.find(None, FindingCode::TailRemoved, detail);
        }
        Ok(())
    }

    fn check_head(&mut self, day: &DayFile, loaded: &LoadedHead, moved: bool) {
        let head_path = crate::layout::head_path(&day.dir, &day.agent);
        let (head, signature) = match loaded {
            Ok(Some(SignedHead { head, signature })) => (head, signature),
            Ok(None) => {
                return self.find(
                    None,
                    FindingCode::AnchorMissing,
                    format!("{} does not exist", head_path.display()),
                );
            }
            Err(err) => return self.find(None, FindingCode::AnchorInvalid, err.to_string()),
        };
        if let Some(problem) = self.head_signature_problem(head, signature.as_ref()) {
            return self.find(None, FindingCode::AnchorInvalid, problem);
        }
        if head.file != day.file_name() {
            let later =
                DayFile::from_path(Path::new(&head.file)).is_some_and(|h| h.date > day.date);
            let (code, detail) = match later {
                true => (
                    FindingCode::TailRemoved,
                    format!("the head anchor names {}, which is missing", head.file),
                ),
                false => (
                    FindingCode::AnchorInvalid,
                    format!("the head anchor names {}, an earlier file", head.file),
                ),
            };
            return self.find(None, code, detail);
        }
        self.match_head(head, moved);
    }

    fn head_signature_problem(
        &self,
        head: &Head,
        signature: Option<&(Signature, Vec<u8>)>,
    ) -> Option<String> {
        match (&self.signer, signature) {
            (None, None) => None,
            (None, Some(_)) => Some("the head anchor is signed but the log is not".into()),
            (Some(signer), None) => Some(format!(
                "the head anchor is unsigned; the log is signed by {signer}"
            )),
            (Some(signer), Some((sig, signed))) => {
                match head.did.as_ref() == Some(signer) && signer.verify(signed, sig).is_ok() {
                    true => None,
                    false => Some(format!(
                        "the head anchor's signature does not verify against {signer}"
                    )),
                }
            }
        }
    }

    /// Checks the file holds the entry the head names at the length it
    /// names; `moved` says the head changed while the file was read.
    fn match_head(&mut self, head: &Head, moved: bool) {
        if head.len > self.complete_len {
            let detail = format!(
                "the head anchor records {} bytes ending at entry {}, the file has {}",
                head.len, head.seq, self.complete_len
            );
            self.find(None, FindingCode::TailRemoved, detail);
            return;
        }
        let mut end = 0u64;
        for (index, line) in self.lines.iter().enumerate() {
            end += line.bytes.len() as u64 + 1;
            if end == head.len {
                let seq = line.entry.as_ref().ok().map(|e| e.seq);
                if line.hash != head.hash || seq != Some(head.seq) {
                    let detail = format!(
                        "line {} is not the entry the head anchor records (sequence {})",
                        line.number, head.seq
                    );
                    self.find(Some(line.number), FindingCode::TailRemoved, detail);
                }
                let unanchored = self.lines.len() - index - 1;
                if unanchored > 0 {
                    self.notes.push(unanchored_note(unanchored, moved));
                }
                return;
            }
        }
        let detail = format!(
            "no line ends at byte {} where the head anchor says entry {} ends",
            head.len, head.seq
        );
        self.find(None, FindingCode::TailRemoved, detail);
    }

    fn verdict(mut self) -> Verdict {
        if self.findings.is_empty() {
            return Verdict::Verified(Box::new(VerifiedLog {
                path: self.path,
                entries: self.lines.len(),
                signer: self.signer,
                pinned: self.anchors.pinned,
                notes: self.notes,
            }));
        }
        self.findings.sort_by_key(|f| f.line.unwrap_or(usize::MAX));
        Verdict::Tampered {
            path: self.path,
            findings: self.findings,
            notes: self.notes,
        }
    }
}

/// What to say of `count` entries past the head anchor.
fn unanchored_note(count: usize, moved: bool) -> String {
    match moved {
        true => format!(
            "{count} entries after the head anchor were appended while this ran (a writer is appending); they are chained and signed like the rest, and verifying again anchors them"
        ),
        false => format!(
            "{count} entries after the head anchor are not anchored yet: a writer is appending them now, or stopped before anchoring them (the next writer discards those)"
        ),
    }
}

/// Why `entry` does not follow a line hashing to `hash` with sequence
/// number `seq`, if it does not.
fn link_problem(entry: &Entry, hash: LineHash, seq: Option<u64>) -> Option<String> {
    if entry.prev != Some(hash) {
        return Some("`prev` is not the hash of the previous line".into());
    }
    match seq {
        Some(seq) if seq.checked_add(1) != Some(entry.seq) => {
            Some(format!("sequence {} does not follow {seq}", entry.seq))
        }
        _ => None,
    }
}

/// The decision an event records, for the events whose fields the check
/// re-verifies.
fn recorded_decision(event: &str) -> Option<&'static str> {
    match event {
        "gate_approved" => Some("approved"),
        "gate_denied" => Some("denied"),
        _ => None,
    }
}

fn line_error_code(err: &LineError) -> FindingCode {
    match err {
        LineError::DuplicateKey(_) => FindingCode::DuplicateKey,
        LineError::NotCanonical | LineError::Unescaped(_) => FindingCode::NotCanonical,
        _ => FindingCode::Malformed,
    }
}

fn last_line(bytes: &[u8]) -> Option<Vec<u8>> {
    let complete = &bytes[..bytes.iter().rposition(|&b| b == b'\n')?];
    let start = complete
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    Some(complete[start..].to_vec())
}

/// Splits complete lines and does the per-line work (parse, hash, signature)
/// on every core; what depends on neighbouring lines is checked afterwards.
fn read_lines(bytes: &[u8]) -> Vec<Line<'_>> {
    let raw: Vec<&[u8]> = match bytes.is_empty() {
        true => Vec::new(),
        false => bytes[..bytes.len() - 1].split(|&b| b == b'\n').collect(),
    };
    let workers = thread::available_parallelism().map_or(1, usize::from);
    let chunk = raw.len().div_ceil(workers).max(256);
    thread::scope(|scope| {
        let handles: Vec<_> = raw
            .chunks(chunk)
            .enumerate()
            .map(|(i, lines)| scope.spawn(move || read_chunk(i * chunk + 1, lines)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

fn read_chunk<'a>(first_number: usize, raw: &[&'a [u8]]) -> Vec<Line<'a>> {
    let mut dids = DidCache::default();
    let mut lines: Vec<Line> = raw
        .iter()
        .enumerate()
        .map(|(i, bytes)| Line {
            number: first_number + i,
            bytes,
            hash: LineHash::of(bytes),
            entry: parse_line_cached(bytes, &mut dids, |event| {
                recorded_decision(event).is_some() || Votes::reads(event)
            }),
            signature_valid: false,
        })
        .collect();
    let signed: Vec<(usize, batch::Item)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| match &line.entry {
            Ok(Entry {
                did: Some(key),
                signature: Some((signature, message)),
                ..
            }) => Some((
                i,
                batch::Item {
                    key,
                    message,
                    signature,
                },
            )),
            _ => None,
        })
        .collect();
    let (indices, items): (Vec<usize>, Vec<batch::Item>) = signed.into_iter().unzip();
    let valid = batch::verify(&items);
    drop(items);
    for (index, valid) in indices.into_iter().zip(valid) {
        lines[index].signature_valid = valid;
    }
    // Free the signed bytes here, on this worker's core, rather than on one
    // thread at the end: the sequential check never reads them.
    for entry in lines.iter_mut().filter_map(|l| l.entry.as_mut().ok()) {
        entry.signature = None;
    }
    lines
}
