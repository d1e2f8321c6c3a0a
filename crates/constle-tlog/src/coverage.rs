//! What witnesses cosigned of an agent's log, checked against the log as it
//! is now: how far it is witnessed, or the findings that show it is not the
//! log they cosigned.
//!
//! A cosignature binds a witness to a tree head, a size and the root of the
//! log's first that many entries. Whoever holds the agent's key can rewrite
//! and re-sign the log, but not the tree heads witnesses cosigned before.
//! Pure: the files are read by [`LogTree::from_log_dir`], the checkpoint
//! files by the caller.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use constle_audit::{Finding, FindingCode};
use constle_vkey::{Origin, WitnessKey};

use crate::checkpoint::{VerifiedCheckpoint, checkpoint_text};
use crate::cosignature::{line_signer, verify_over_text};
use crate::hash::Hash;
use crate::tree::{LogTree, TreeHead};

/// Where a cosignature was found, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The log's `checkpoint_cosigned` entry with this `seq`.
    Entry(u64),
    /// A cosigned checkpoint read from this file.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Entry(seq) => write!(f, "the checkpoint_cosigned entry seq {seq}"),
            Source::File(path) => write!(f, "the checkpoint file {}", path.display()),
        }
    }
}

/// A cosignature as found, not yet verified: the tree head it is said to
/// be of, the witness said to have made it, the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cosigned {
    /// The size and root cosigned.
    pub head: TreeHead,
    /// The witness's name, as recorded.
    pub witness: String,
    /// The `cosignature/v1` note signature line, with or without its newline.
    pub line: String,
    /// Where it was found.
    pub source: Source,
}

impl Cosigned {
    /// The cosignatures on a checkpoint held outside the log (the
    /// `<agent>.checkpoint` file, a receipt's checkpoint): every signature
    /// line but those by the log's own key name.
    pub fn from_checkpoint(checkpoint: &VerifiedCheckpoint, source: &Source) -> Vec<Cosigned> {
        let origin = checkpoint.origin().as_str();
        checkpoint
            .signed()
            .signature_lines()
            .filter_map(|line| std::str::from_utf8(line).ok())
            .filter_map(|line| {
                let (witness, _) = line_signer(line)?;
                (witness != origin).then(|| Cosigned {
                    head: checkpoint.head(),
                    witness,
                    line: line.to_owned(),
                    source: source.clone(),
                })
            })
            .collect()
    }
}

/// How far a log is witnessed. Made only by [`check_coverage`], when no
/// cosignature contradicts the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    size: u64,
    witnessed: u64,
    quorum: usize,
    reach: Vec<(String, u64)>,
    notes: Vec<String>,
}

impl Coverage {
    /// The number of entries in the log.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `W`: entries `0..W-1` are witnessed by a quorum (0: none is).
    pub fn witnessed(&self) -> u64 {
        self.witnessed
    }

    /// Each declared witness, in the order given, with the largest size it
    /// cosigned of the log (0 if none).
    pub fn reach(&self) -> &[(String, u64)] {
        &self.reach
    }

    /// Cosignatures that count for nothing, and why.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

impl fmt::Display for Coverage {
    /// One line: `entries 0–4211 by 2 of 2 witnesses (quorum 2); 12
    /// entries after that not yet`, or what falls short of a quorum.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let declared = plural(self.reach.len() as u64, "witness", "witnesses");
        let quorum = self.quorum;
        if self.witnessed > 0 {
            let by = self
                .reach
                .iter()
                .filter(|(_, r)| *r >= self.witnessed)
                .count();
            let range = entries(self.witnessed);
            write!(f, "{range} by {by} of {declared} (quorum {quorum})")?;
            return match self.size - self.witnessed {
                0 => Ok(()),
                after => write!(
                    f,
                    "; {} after that not yet",
                    plural(after, "entry", "entries")
                ),
            };
        }
        let reached: Vec<String> = self
            .reach
            .iter()
            .filter(|(_, r)| *r > 0)
            .map(|(name, r)| format!("{name} cosigned {}", entries(*r)))
            .collect();
        match reached.is_empty() {
            true => write!(f, "no entry yet ({declared} declared, quorum {quorum})"),
            false => write!(
                f,
                "no entry yet by a quorum ({quorum} of {declared}): {}",
                reached.join(", ")
            ),
        }
    }
}

/// `entry 0` or `entries 0–N`, the first `size` entries.
fn entries(size: u64) -> String {
    match size {
        1 => "entry 0".to_owned(),
        n => format!("entries 0–{}", n - 1),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// What the cosignatures found say of the log.
#[derive(Debug)]
pub enum CoverageVerdict {
    /// None contradicts it; this far it is witnessed.
    Covered(Coverage),
    /// At least one does.
    Tampered {
        /// Every contradiction, each with its code.
        findings: Vec<Finding>,
        /// Cosignatures that count for nothing, and why.
        notes: Vec<String>,
    },
}

/// Checks every cosignature in `found` against `tree`, the log of `origin`
/// whose declared witnesses are `witnesses`, `quorum` of which make an
/// entry witnessed.
///
/// `found` is every cosignature found for the log: its `checkpoint_cosigned`
/// entries ([`Recorded`](crate::Recorded)) and those on cosigned
/// checkpoints held by others ([`Cosigned::from_checkpoint`]). Each is
/// checked:
///
/// 1. it is by a witness declared (name and key), else it is a note and
///    counts for nothing;
/// 2. it verifies over the checkpoint text of the log's origin, its size
///    and root, else `cosignature_invalid`;
/// 3. its size is within the log, else `witnessed_entries_missing`: the log
///    was cut;
/// 4. the log's tree at that size has that root, else
///    `witnessed_history_rewritten`, naming where the two histories part:
///    at an entry from the largest cosigned size whose root still matches
///    (0 if none) up to the size that does not.
///
/// With no finding, entries `0..W-1` are witnessed, `W` being the largest
/// size for which `quorum` declared witnesses each cosigned a tree of at
/// least that size. A tree holds every smaller one the log's tree has, so a
/// cosignature of a larger size covers the entries before it, through the
/// tree's root.
pub fn check_coverage(
    tree: &LogTree,
    origin: &Origin,
    witnesses: &[WitnessKey],
    quorum: NonZeroUsize,
    found: &[Cosigned],
) -> CoverageVerdict {
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    // Each tree head validly cosigned: by which declared witnesses, each
    // with where its cosignature was first found.
    let mut heads: BTreeMap<(u64, Hash), Vec<(usize, &Source)>> = BTreeMap::new();
    for cosigned in found {
        match declared_cosigner(origin, witnesses, cosigned) {
            Ok(Some(witness)) => {
                let head = &cosigned.head;
                let by = heads.entry((head.size, head.root)).or_default();
                if by.iter().all(|(w, _)| *w != witness) {
                    by.push((witness, &cosigned.source));
                }
            }
            Ok(None) => notes.push(undeclared(cosigned)),
            Err(detail) => findings.push(finding(FindingCode::CosignatureInvalid, detail)),
        }
    }
    let has = |size: u64, root: Hash| tree.root_at(size).is_ok_and(|r| r == root);
    // The sizes cosigned with the root the tree has at that size.
    let agreeing: BTreeSet<u64> = heads
        .keys()
        .filter(|&&(size, root)| has(size, root))
        .map(|&(size, _)| size)
        .collect();
    let mut reach = vec![0; witnesses.len()];
    for (&(size, root), by) in &heads {
        let who = Cosigners { witnesses, by };
        if size > tree.len() {
            findings.push(finding(
                FindingCode::WitnessedEntriesMissing,
                missing(tree.len(), size, root, &who),
            ));
        } else if !has(size, root) {
            let agreed = agreeing.range(..size).next_back().copied().unwrap_or(0);
            let ours = tree.root_at(size).unwrap_or(Hash::EMPTY);
            findings.push(finding(
                FindingCode::WitnessedHistoryRewritten,
                rewritten(agreed, size, ours, root, &who),
            ));
        } else {
            for &(w, _) in by {
                reach[w] = reach[w].max(size);
            }
        }
    }
    if !findings.is_empty() {
        return CoverageVerdict::Tampered { findings, notes };
    }
    let mut sizes = reach.clone();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    CoverageVerdict::Covered(Coverage {
        size: tree.len(),
        witnessed: sizes.get(quorum.get() - 1).copied().unwrap_or(0),
        quorum: quorum.get(),
        reach: witnesses
            .iter()
            .map(|w| w.name().to_owned())
            .zip(reach)
            .collect(),
        notes,
    })
}

/// Which declared witness made `cosigned`: `None` for one not declared, the
/// reason for a finding if it does not verify.
fn declared_cosigner(
    origin: &Origin,
    witnesses: &[WitnessKey],
    cosigned: &Cosigned,
) -> Result<Option<usize>, String> {
    let source = &cosigned.source;
    let line = cosigned.line.strip_suffix('\n').unwrap_or(&cosigned.line);
    let Some((name, id)) = line_signer(line) else {
        return Err(format!(
            "the cosignature in {source} is not a note signature line"
        ));
    };
    if name != cosigned.witness {
        return Err(format!(
            "{source} names the witness {}, but its cosignature is by {name}",
            cosigned.witness
        ));
    }
    let Some(index) = witnesses
        .iter()
        .position(|w| w.name() == name && w.key_id() == id)
    else {
        return Ok(None);
    };
    let TreeHead { size, root } = cosigned.head;
    if size == 0 && root != Hash::EMPTY {
        return Err(format!(
            "the cosignature in {source} is of size 0 with a root other than the empty tree's"
        ));
    }
    let text = checkpoint_text(origin, cosigned.head);
    match verify_over_text(&text, &witnesses[index], line) {
        Ok(_) => Ok(Some(index)),
        Err(err) => Err(format!(
            "{err} ({origin} size {size} root {root}; in {source})"
        )),
    }
}

fn undeclared(cosigned: &Cosigned) -> String {
    let line = cosigned.line.strip_suffix('\n').unwrap_or(&cosigned.line);
    let key = line_signer(line).map_or_else(String::new, |(n, id)| format!("{n}+{id:08x}"));
    format!(
        "the cosignature by {key} in {} is not by a witness the Agentfile declares: not counted",
        cosigned.source
    )
}

/// The witnesses that cosigned one tree head, and where.
struct Cosigners<'a> {
    witnesses: &'a [WitnessKey],
    by: &'a [(usize, &'a Source)],
}

impl Cosigners<'_> {
    /// `witness w1` or `witnesses w1, w2`.
    fn names(&self) -> String {
        let names: Vec<&str> = self
            .by
            .iter()
            .map(|&(w, _)| self.witnesses[w].name())
            .collect();
        match names.len() {
            1 => format!("witness {}", names[0]),
            _ => format!("witnesses {}", names.join(", ")),
        }
    }

    /// Where the cosignatures were found, each place once.
    fn sources(&self) -> String {
        let mut sources: Vec<String> = Vec::new();
        for (_, source) in self.by {
            let source = source.to_string();
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
        sources.join(", ")
    }
}

fn missing(len: u64, size: u64, root: Hash, who: &Cosigners<'_>) -> String {
    let cut = match size - len {
        1 => format!("entry seq {len} is missing"),
        _ => format!("entries seq {len}..{} are missing", size - 1),
    };
    format!(
        "the log has {}, but {} cosigned size {size} (root {root}; in {}): {cut}",
        plural(len, "entry", "entries"),
        who.names(),
        who.sources()
    )
}

fn rewritten(agreed: u64, size: u64, ours: Hash, theirs: Hash, who: &Cosigners<'_>) -> String {
    let part = match size - 1 - agreed {
        0 => format!("the histories part at entry seq {agreed}"),
        _ => format!(
            "the histories part at an entry in seq {agreed}..{}",
            size - 1
        ),
    };
    format!(
        "{part} (the log's root at size {size} is {ours}, {} cosigned {theirs}; in {})",
        who.names(),
        who.sources()
    )
}

fn finding(code: FindingCode, detail: String) -> Finding {
    Finding {
        line: None,
        code,
        detail,
    }
}
