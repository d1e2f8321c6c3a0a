//! `constle audit verify` and `constle audit show`.

use std::path::Path;

use anyhow::{Context as _, bail};
use constle_approvers::{SetPin, read_versions, verify_files};
use constle_audit::{
    Approvers, Finding, SetVersion, TrustAnchors, Verdict, VerifiedLog, parse_line, read_log_file,
    verify_file,
};
use constle_manifest::{ApproverSetRef, QuorumSource};
use serde_json::Value;

use crate::Outcome;
use crate::cli::{LogKeyArgs, ShowArgs, VerifyArgs};
use crate::terminal::{self, Paint, escape, paint};

pub fn verify(args: &VerifyArgs) -> anyhow::Result<Outcome> {
    let anchors = match &args.agentfile {
        Some(path) => match pinned_anchors(path)? {
            Ok(anchors) => anchors,
            Err(set_problem) => {
                terminal::out(&format!(
                    "{} TAMPERING DETECTED in the approver set: {}",
                    paint(Paint::Red, "error:"),
                    escape(&set_problem)
                ));
                return Ok(Outcome::PolicyFailure);
            }
        },
        None => TrustAnchors::default(),
    };
    let mut outcome = Outcome::Success;
    for (index, file) in args.files.iter().enumerate() {
        if index > 0 {
            terminal::out("");
        }
        let verdict = verify_file(file, &anchors)
            .with_context(|| format!("cannot verify {}", file.display()))?;
        match verdict {
            Verdict::Verified(log) => print_verified(&log),
            Verdict::Tampered {
                path,
                findings,
                notes,
            } => {
                print_tampered(&path, &findings, &notes);
                outcome = Outcome::PolicyFailure;
            }
        }
    }
    Ok(outcome)
}

/// What the Agentfile at `path` pins, or what is wrong with its approver
/// set (tampering, for `audit verify`); an error if it cannot be read.
fn pinned_anchors(path: &Path) -> anyhow::Result<Result<TrustAnchors, String>> {
    let manifest = match constle_manifest::load_file(path, &super::host_env) {
        Ok(valid) => valid.manifest,
        Err(rejected) => bail!(
            "the Agentfile {} is invalid, so it cannot pin anything:\n{rejected}",
            path.display()
        ),
    };
    let approvers = match manifest.human_gates.quorum.as_ref().map(|q| &q.source) {
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
            Err(problem) => return Ok(Err(problem)),
        },
    };
    Ok(Ok(TrustAnchors {
        agent_did: manifest.identity.as_ref().map(|i| i.did.clone()),
        approver: manifest.human_gates.approver_pubkey.clone(),
        approvers,
        agent: Some(manifest.name),
        pinned: true,
    }))
}

/// Every version of the approver set `set` names, verified as a chain from
/// its pin; what is wrong with it, if it does not verify.
fn set_versions(set: &ApproverSetRef) -> anyhow::Result<Vec<SetVersion>, String> {
    let pin = SetPin::parse(&set.pin).map_err(|e| e.to_string())?;
    let files = read_versions(&set.dir).map_err(|e| e.to_string())?;
    let chain = verify_files(&pin, &files).map_err(|e| e.to_string())?;
    let version = |v: &constle_approvers::VerifiedVersion| SetVersion {
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

fn print_tampered(path: &Path, findings: &[Finding], notes: &[String]) {
    let path = escape(&path.display().to_string());
    terminal::out(&format!(
        "{} TAMPERING DETECTED in {path}",
        paint(Paint::Red, "error:")
    ));
    for finding in findings {
        let place = finding
            .line
            .map_or_else(|| "file".to_owned(), |line| format!("line {line}"));
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

fn timeline_row(number: usize, line: &[u8]) -> String {
    let entry = match parse_line(line) {
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
    let time = entry.ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string();
    let event = escape(&entry.event);
    let fields: Vec<String> = entry
        .fields
        .iter()
        .map(|(key, value)| format!("{}={}", escape(key), escape(&compact(value))))
        .collect();
    format!(
        "{}  {:>5}  {}  {}",
        paint(Paint::Dim, &time),
        format!("#{}", entry.seq),
        paint(event_paint(&entry.event), &format!("{event:<20}")),
        fields.join(" ")
    )
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
