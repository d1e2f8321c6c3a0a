//! `constle audit verify` and `constle audit show`.
//!
//! `audit verify --format json` prints one object per result and a summary
//! last (the objects are in `verify_json`); the exit status is the same
//! either way.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use constle_approver_set::{SetPin, read_versions, verify_files};
use constle_audit::{
    Approvers, Finding, SetVersion, TrustAnchors, Verdict, VerifiedLog, parse_line, read_bounded,
    read_log_file, verify_file,
};
use constle_identity::Name;
use constle_manifest::{ApproverSetRef, Manifest, QuorumSource};
use constle_tlog::{
    Cosigned, Coverage, CoverageVerdict, Deployment, LogKey, LogTree, MAX_CHECKPOINT_BYTES, Origin,
    SignedCheckpoint, Source, WitnessKey, check_coverage,
};
use serde_json::Value;

use crate::Outcome;
use crate::cli::{Format, LogKeyArgs, ShowArgs, VerifyArgs};
use crate::commands::verify_json::{self, VerifyLine, WitnessCheck};
use crate::terminal::{self, Paint, escape, paint};

pub fn verify(args: &VerifyArgs) -> anyhow::Result<Outcome> {
    let manifest = args.agentfile.as_deref().map(load_manifest).transpose()?;
    let witnessing = manifest.as_ref().map(Witnessing::of).transpose()?.flatten();
    // Read before the log, so that none holds a tree written after it.
    let held = match &witnessing {
        Some(w) => w.held_cosignatures(&args.checkpoints)?,
        None if args.checkpoints.is_empty() => Vec::new(),
        None => bail!(
            "--checkpoint needs witnesses to check it against: the Agentfile declares no audit.witnesses"
        ),
    };
    let mut report = Report::new(args.format);
    let anchors = match &manifest {
        Some(manifest) => match pinned_anchors(manifest) {
            Ok(anchors) => anchors,
            Err(set_problem) => {
                report.approver_set(&set_problem)?;
                return report.finish(Outcome::PolicyFailure);
            }
        },
        None => TrustAnchors::default(),
    };
    let mut outcome = Outcome::Success;
    for (index, file) in args.files.iter().enumerate() {
        if index > 0 {
            report.blank();
        }
        let verdict = verify_file(file, &anchors)
            .with_context(|| format!("cannot verify {}", file.display()))?;
        match verdict {
            Verdict::Verified(log) => report.verified(&log)?,
            Verdict::Tampered {
                path,
                findings,
                notes,
            } => {
                report.tampered(&path, &findings, &notes, anchors.pinned)?;
                outcome = Outcome::PolicyFailure;
            }
        }
    }
    if let Some(witnessing) = &witnessing {
        for dir in log_dirs(&args.files) {
            report.blank();
            match witnessing.check(&dir, &held, &mut report) {
                Ok(true) => {}
                Ok(false) => outcome = Outcome::PolicyFailure,
                // Tampering found already stays tampering (exit 1), though
                // the witnesses could not be checked as well.
                Err(err) if outcome == Outcome::PolicyFailure => {
                    terminal::error(&escape(&format!("{err:#}")));
                }
                Err(err) => return Err(err),
            }
        }
    }
    report.finish(outcome)
}

/// Where `audit verify` says what it found: the terminal, as text or as
/// JSON lines (counting results for the summary line).
struct Report {
    format: Format,
    logs: usize,
    failed: usize,
}

impl Report {
    fn new(format: Format) -> Report {
        Report {
            format,
            logs: 0,
            failed: 0,
        }
    }

    /// The blank line between two results of the human output.
    fn blank(&self) {
        if self.format == Format::Human {
            terminal::out("");
        }
    }

    /// A JSON line, counted in the summary.
    fn json(&mut self, line: &VerifyLine<'_>) -> anyhow::Result<()> {
        if let VerifyLine::Log { .. } = line {
            self.logs += 1;
        }
        let ok = match line {
            VerifyLine::Log { ok, .. }
            | VerifyLine::Witnesses { ok, .. }
            | VerifyLine::ApproverSet { ok, .. }
            | VerifyLine::Summary { ok, .. } => *ok,
        };
        if !ok {
            self.failed += 1;
        }
        terminal::out(&serde_json::to_string(line)?);
        Ok(())
    }

    fn approver_set(&mut self, problem: &str) -> anyhow::Result<()> {
        match self.format {
            Format::Human => {
                terminal::out(&format!(
                    "{} TAMPERING DETECTED in the approver set: {}",
                    paint(Paint::Red, "error:"),
                    escape(problem)
                ));
                Ok(())
            }
            Format::Json => self.json(&VerifyLine::ApproverSet {
                ok: false,
                error: format!("TAMPERING DETECTED in the approver set: {problem}"),
            }),
        }
    }

    fn verified(&mut self, log: &VerifiedLog) -> anyhow::Result<()> {
        match self.format {
            Format::Human => {
                print_verified(log);
                Ok(())
            }
            Format::Json => self.json(&verify_json::log_verified(log)),
        }
    }

    fn tampered(
        &mut self,
        path: &Path,
        findings: &[Finding],
        notes: &[String],
        pinned: bool,
    ) -> anyhow::Result<()> {
        match self.format {
            Format::Human => {
                print_tampered(path, findings, notes);
                Ok(())
            }
            Format::Json => self.json(&verify_json::log_tampered(path, findings, notes, pinned)),
        }
    }

    /// What a check of the witnesses found; `heading` names the log for
    /// the human output (escaped already).
    fn witnesses(&mut self, heading: &str, check: &WitnessCheck<'_>) -> anyhow::Result<()> {
        match (self.format, check.coverage) {
            (Format::Json, _) => return self.json(&verify_json::witnesses(check)),
            (Format::Human, Some(coverage)) if check.findings.is_empty() => {
                print_witnessed(heading, coverage);
            }
            (Format::Human, _) => print_findings(heading, "log", check.findings, check.notes),
        }
        Ok(())
    }

    /// Ends the output (the JSON summary line) with `outcome`.
    fn finish(mut self, outcome: Outcome) -> anyhow::Result<Outcome> {
        if self.format == Format::Json {
            let (logs, failed) = (self.logs, self.failed);
            self.json(&VerifyLine::Summary {
                ok: outcome == Outcome::Success,
                logs,
                failed,
            })?;
        }
        Ok(outcome)
    }
}

fn load_manifest(path: &Path) -> anyhow::Result<Manifest> {
    match constle_manifest::load_file(path, &super::host_env) {
        Ok(valid) => Ok(valid.manifest),
        Err(rejected) => bail!(
            "the Agentfile {} is invalid, so it cannot pin anything:\n{rejected}",
            path.display()
        ),
    }
}

/// What `manifest` pins, or what is wrong with its approver set
/// (tampering, for `audit verify`).
fn pinned_anchors(manifest: &Manifest) -> Result<TrustAnchors, String> {
    let quorum = manifest.human_gates.quorum.as_ref();
    let approvers = match quorum.map(|q| &q.source) {
        None => None,
        Some(QuorumSource::Listed {
            approvers,
            threshold,
        }) => Some(Approvers::Listed {
            keys: approvers.iter().map(|a| a.did.clone()).collect(),
            threshold: *threshold,
        }),
        Some(QuorumSource::Set(set)) => match set_versions(set) {
            Ok(versions) => Some(Approvers::Versions(versions)),
            Err(problem) => return Err(problem),
        },
    };
    Ok(TrustAnchors {
        agent_did: manifest.identity.as_ref().map(|i| i.did.clone()),
        approver: manifest.human_gates.approver_pubkey.clone(),
        approvers,
        terminal_approves: quorum.is_some_and(|q| q.terminal_approves),
        agent: Some(manifest.name.clone()),
        pinned: true,
    })
}

/// The directories of `files`, each once, in the order given: each holds
/// one log whose witnesses are checked.
fn log_dirs(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for file in files {
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The log's witnesses, as the Agentfile declares them (`audit`).
struct Witnessing {
    agent: Name,
    key: LogKey,
    witnesses: Vec<WitnessKey>,
    quorum: NonZeroUsize,
}

impl Witnessing {
    /// `None` when the Agentfile declares no witness.
    fn of(manifest: &Manifest) -> anyhow::Result<Option<Witnessing>> {
        let audit = &manifest.audit;
        if audit.witnesses.is_empty() {
            return Ok(None);
        }
        // The Agentfile was validated: witnesses come with an identity,
        // a deployment and a quorum from 1 to their number.
        let identity = manifest
            .identity
            .as_ref()
            .context("audit.witnesses without identity.did")?;
        let quorum =
            NonZeroUsize::new(audit.witness_quorum).context("audit.witness_quorum is 0")?;
        let origin = Origin::new(&Deployment::new(&audit.deployment)?, &manifest.name);
        let witnesses = audit.witnesses.iter().map(|w| w.key.clone()).collect();
        Ok(Some(Witnessing {
            agent: manifest.name.clone(),
            key: LogKey::new(origin, &identity.did),
            witnesses,
            quorum,
        }))
    }

    /// The cosignatures on the checkpoints in `files`, each of which must be
    /// a checkpoint of this log signed by the agent's key.
    fn held_cosignatures(&self, files: &[PathBuf]) -> anyhow::Result<Vec<Cosigned>> {
        let mut found = Vec::new();
        for path in files {
            let context = || format!("cannot use the checkpoint file {}", path.display());
            let bytes = read_bounded(path, MAX_CHECKPOINT_BYTES as u64).with_context(context)?;
            let checkpoint = SignedCheckpoint::parse(&bytes)
                .and_then(|c| c.verify(&self.key))
                .with_context(context)?;
            found.extend(Cosigned::from_checkpoint(
                &checkpoint,
                &Source::File(path.clone()),
            ));
        }
        Ok(found)
    }

    /// Checks every cosignature of the agent's log in `dir` (those it
    /// records and `held`) and reports what they show; false for tampering.
    fn check(&self, dir: &Path, held: &[Cosigned], report: &mut Report) -> anyhow::Result<bool> {
        let log = LogTree::from_log_dir(dir, &self.agent).with_context(|| {
            format!(
                "cannot check what the witnesses cosigned of {}'s log in {}",
                self.agent,
                dir.display()
            )
        })?;
        let mut found = log.recorded.cosigned;
        found.extend_from_slice(held);
        let origin = self.key.origin();
        let verdict = check_coverage(&log.tree, origin, &self.witnesses, self.quorum, &found);
        let heading = format!(
            "{}'s log in {}",
            self.agent,
            escape(&dir.display().to_string())
        );
        let mut findings = log.recorded.malformed;
        let (coverage, notes) = match verdict {
            CoverageVerdict::Covered(coverage) => {
                let notes = coverage.notes().to_vec();
                (Some(coverage), notes)
            }
            CoverageVerdict::Tampered {
                findings: contradictions,
                notes,
            } => {
                findings.extend(contradictions);
                (None, notes)
            }
        };
        let agent = self.agent.to_string();
        let check = WitnessCheck {
            agent: &agent,
            dir,
            quorum: self.quorum.get(),
            coverage: coverage.as_ref(),
            findings: &findings,
            notes: &notes,
        };
        report.witnesses(&heading, &check)?;
        Ok(coverage.is_some() && findings.is_empty())
    }
}

/// Every version of the approver set `set` names, verified as a chain from
/// its pin; what is wrong with it, if it does not verify.
fn set_versions(set: &ApproverSetRef) -> anyhow::Result<Vec<SetVersion>, String> {
    let pin = SetPin::parse(&set.pin).map_err(|e| e.to_string())?;
    let files = read_versions(&set.dir).map_err(|e| e.to_string())?;
    let chain = verify_files(&pin, &files).map_err(|e| e.to_string())?;
    let version = |v: &constle_approver_set::VerifiedVersion| SetVersion {
        version: v.version(),
        digest: v.digest().to_string(),
        keys: v.approvers().iter().map(|a| a.did.clone()).collect(),
        threshold: v.threshold(),
    };
    Ok(chain.iter().map(version).collect())
}

fn print_verified(log: &VerifiedLog) {
    let path = escape(&log.path.display().to_string());
    terminal::out(&paint(
        Paint::Green,
        &format!("✓ audit log verified: {path}"),
    ));
    terminal::out("");
    let chain = match log.signer {
        Some(_) => "all signatures valid, hash chain intact",
        None => "unsigned, hash chain intact",
    };
    terminal::out(&format!("  entries:   {} ({chain})", log.entries));
    match &log.signer {
        Some(did) => terminal::out(&format!("  signed by: {did}")),
        None => terminal::out(
            "  signed by: nobody: the Agentfile declares no identity.did, so anyone who can write the file could have rewritten it consistently",
        ),
    }
    if !log.pinned {
        terminal::out(&paint(
            Paint::Yellow,
            "  note:      checked internal consistency only; pass --agentfile to pin the agent's DID and the approver key",
        ));
    }
    for note in &log.notes {
        terminal::out(&format!("  note:      {}", escape(note)));
    }
}

fn print_witnessed(heading: &str, coverage: &Coverage) {
    terminal::out(&paint(
        Paint::Green,
        &format!("✓ witness cosignatures checked: {heading}"),
    ));
    terminal::out("");
    let line = format!("  witnessed: {}", escape(&coverage.to_string()));
    match coverage.witnessed() {
        0 => terminal::out(&paint(Paint::Yellow, &line)),
        _ => terminal::out(&line),
    }
    for note in coverage.notes() {
        terminal::out(&format!("  note:      {}", escape(note)));
    }
}

fn print_tampered(path: &Path, findings: &[Finding], notes: &[String]) {
    print_findings(
        &escape(&path.display().to_string()),
        "file",
        findings,
        notes,
    );
}

/// The findings in what `heading` names (escaped already), those of no
/// line placed in `whole`.
fn print_findings(heading: &str, whole: &str, findings: &[Finding], notes: &[String]) {
    terminal::out(&format!(
        "{} TAMPERING DETECTED in {heading}",
        paint(Paint::Red, "error:")
    ));
    for finding in findings {
        let place = finding
            .line
            .map_or_else(|| whole.to_owned(), |line| format!("line {line}"));
        terminal::out(&format!(
            "  {place}: {} — {}",
            paint(Paint::Bold, finding.code.as_str()),
            escape(&finding.detail)
        ));
        terminal::out(&paint(
            Paint::Dim,
            &format!("  — {}", finding.code.meaning()),
        ));
    }
    for note in notes {
        terminal::out(&format!("  note: {}", escape(note)));
    }
}

pub fn show(args: &ShowArgs) -> anyhow::Result<Outcome> {
    let bytes = read_log_file(&args.file).context("cannot show the log")?;
    terminal::out(&paint(
        Paint::Dim,
        &format!(
            "{} (not verified here; run `constle audit verify`)",
            escape(&args.file.display().to_string())
        ),
    ));
    for (index, line) in bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
    {
        terminal::out(&timeline_row(index + 1, line));
    }
    Ok(Outcome::Success)
}

/// One entry as the timeline shows it: a row, and under it the lines of a
/// checkpoint's note.
fn timeline_row(number: usize, line: &[u8]) -> String {
    let mut entry = match parse_line(line) {
        Ok(entry) => entry,
        Err(err) => {
            return paint(
                Paint::Red,
                &format!(
                    "line {number}: unreadable entry: {}",
                    escape(&err.to_string())
                ),
            );
        }
    };
    let note = match entry.event.as_str() {
        "checkpoint" => entry.fields.remove("note"),
        _ => None,
    };
    let time = entry.ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string();
    let event = escape(&entry.event);
    let fields: Vec<String> = entry
        .fields
        .iter()
        .map(|(key, value)| format!("{}={}", escape(key), escape(&compact(value))))
        .collect();
    let row = format!(
        "{}  {:>5}  {}  {}",
        paint(Paint::Dim, &time),
        format!("#{}", entry.seq),
        paint(event_paint(&entry.event), &format!("{event:<20}")),
        fields.join(" ")
    );
    match note {
        Some(note) => format!("{row}{}", note_lines(&compact(&note))),
        None => row,
    }
}

/// A checkpoint's note, a signed text of several lines, as a person reads
/// it: each line on a line of its own, indented under the row, each escaped
/// as a one-line field is (the log is not verified here).
fn note_lines(note: &str) -> String {
    let mut shown = String::new();
    for (index, line) in note
        .strip_suffix('\n')
        .unwrap_or(note)
        .split('\n')
        .enumerate()
    {
        let label = if index == 0 {
            "    note: "
        } else {
            "          "
        };
        shown.push('\n');
        shown.push_str(label);
        shown.push_str(&escape(line));
    }
    shown
}

fn compact(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn event_paint(event: &str) -> Paint {
    match event {
        e if e.ends_with("_blocked")
            || e.ends_with("_denied")
            || e.ends_with("_refused")
            || e.ends_with("_timeout") =>
        {
            Paint::Red
        }
        e if e.ends_with("_allowed") || e.ends_with("_approved") => Paint::Green,
        e if e.starts_with("gate_") => Paint::Yellow,
        _ => Paint::Cyan,
    }
}

/// The log's verifier key (`<origin>+<key ID>+<base64>`) on standard output.
pub fn log_key(args: &LogKeyArgs) -> anyhow::Result<Outcome> {
    terminal::out(&witnessing(&args.agentfile)?.log_key.vkey());
    Ok(Outcome::Success)
}

/// The log key, witnesses and quorum the Agentfile at `path` declares; an
/// error if it is invalid or its log is not signed.
pub(super) fn witnessing(path: &Path) -> anyhow::Result<constle_checkpoints::Witnessing> {
    let manifest = match constle_manifest::load_file(path, &super::host_env) {
        Ok(valid) => valid.manifest,
        Err(rejected) => bail!("the Agentfile {} is invalid:\n{rejected}", path.display()),
    };
    match constle_checkpoints::Witnessing::from_manifest(&manifest)? {
        Some(witnessing) => Ok(witnessing),
        None => bail!(
            "the Agentfile {} declares no identity.did, so its log is not signed and has no checkpoints",
            path.display()
        ),
    }
}
