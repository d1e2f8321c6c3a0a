//! What `constle audit verify --format json` and `constle audit
//! verify-receipt --format json` print: one JSON object per result, on a
//! line of its own, with the field names docs/audit-log.md documents.
//!
//! Every field of an object is always there (`null` when it does not
//! apply), so a reader never has to guess between "absent" and "empty".
//! Strings hold the text as it is; JSON's own escaping, not the terminal's,
//! keeps control bytes harmless. `error` holds the line the human output
//! prints after `error:`, or the reason it prints under `RECEIPT INVALID`.

use std::path::Path;

use constle_audit::{Finding, VerifiedLog};
use constle_receipt::{LogMatch, RunEntry, VerifiedReceipt};
use constle_tlog::Coverage;
use serde::Serialize;

/// One line of `audit verify --format json`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum VerifyLine<'a> {
    /// One day file.
    Log {
        ok: bool,
        path: String,
        error: Option<String>,
        /// Complete entries, when it verified.
        entries: Option<usize>,
        /// The DID that signed every entry; `null` for an unsigned log or
        /// one that did not verify.
        signed_by: Option<String>,
        /// Whether an Agentfile pinned the signer and the approver keys.
        pinned: bool,
        findings: Vec<FindingJson<'a>>,
        notes: &'a [String],
    },
    /// What the witnesses cosigned of one agent's log, in one directory.
    Witnesses {
        ok: bool,
        agent: &'a str,
        dir: String,
        error: Option<String>,
        /// The log's entries, and how many from the first a quorum
        /// witnessed; `null` when the cosignatures contradict the log.
        entries: Option<u64>,
        witnessed: Option<u64>,
        quorum: usize,
        /// Each declared witness and the largest size it cosigned.
        cosigned: Vec<ReachJson<'a>>,
        /// The human output's `witnessed:` line.
        coverage: Option<String>,
        findings: Vec<FindingJson<'a>>,
        notes: &'a [String],
    },
    /// The Agentfile's approver set, when it does not verify (the only
    /// line before the summary then).
    ApproverSet { ok: bool, error: String },
    /// The last line: the verdict of the whole command (exit 0 when `ok`,
    /// 1 when not). No summary means exit 2: the reason is on stderr.
    Summary {
        ok: bool,
        /// Day files checked.
        logs: usize,
        /// Lines above with `ok: false`.
        failed: usize,
    },
}

/// One problem found: its line (`null` for the whole file or log), its
/// stable code, the specifics and what the code means.
#[derive(Serialize)]
pub struct FindingJson<'a> {
    line: Option<usize>,
    code: &'static str,
    detail: &'a str,
    meaning: &'static str,
}

/// A witness and the largest size of the log it cosigned (0 for none).
#[derive(Serialize)]
pub struct ReachJson<'a> {
    witness: &'a str,
    size: u64,
}

fn findings(findings: &[Finding]) -> Vec<FindingJson<'_>> {
    findings
        .iter()
        .map(|f| FindingJson {
            line: f.line,
            code: f.code.as_str(),
            detail: &f.detail,
            meaning: f.code.meaning(),
        })
        .collect()
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// The line of a day file that verified.
pub fn log_verified(log: &VerifiedLog) -> VerifyLine<'_> {
    VerifyLine::Log {
        ok: true,
        path: shown(&log.path),
        error: None,
        entries: Some(log.entries),
        signed_by: log.signer.as_ref().map(ToString::to_string),
        pinned: log.pinned,
        findings: Vec::new(),
        notes: &log.notes,
    }
}

/// The line of a day file that did not verify.
pub fn log_tampered<'a>(
    path: &Path,
    found: &'a [Finding],
    notes: &'a [String],
    pinned: bool,
) -> VerifyLine<'a> {
    VerifyLine::Log {
        ok: false,
        path: shown(path),
        error: Some(format!("TAMPERING DETECTED in {}", path.display())),
        entries: None,
        signed_by: None,
        pinned,
        findings: findings(found),
        notes,
    }
}

/// What one check of a log's witnesses found.
pub struct WitnessCheck<'a> {
    pub agent: &'a str,
    pub dir: &'a Path,
    pub quorum: usize,
    /// `None` when the cosignatures contradict the log.
    pub coverage: Option<&'a Coverage>,
    pub findings: &'a [Finding],
    pub notes: &'a [String],
}

/// The line of a witness check; `ok` when nothing was found.
pub fn witnesses<'a>(check: &WitnessCheck<'a>) -> VerifyLine<'a> {
    let ok = check.coverage.is_some() && check.findings.is_empty();
    let dir = shown(check.dir);
    let reach = check.coverage.map_or(&[][..], Coverage::reach);
    VerifyLine::Witnesses {
        ok,
        agent: check.agent,
        error: (!ok).then(|| format!("TAMPERING DETECTED in {}'s log in {dir}", check.agent)),
        dir,
        entries: check.coverage.map(Coverage::size),
        witnessed: check.coverage.map(Coverage::witnessed),
        quorum: check.quorum,
        cosigned: reach
            .iter()
            .map(|(witness, size)| ReachJson {
                witness,
                size: *size,
            })
            .collect(),
        coverage: check.coverage.map(ToString::to_string),
        findings: findings(check.findings),
        notes: check.notes,
    }
}

/// `audit verify-receipt --format json`: the one object.
#[derive(Serialize)]
pub struct ReceiptJson<'a> {
    ok: bool,
    file: String,
    /// Why the receipt is invalid; `null` when it verified.
    error: Option<String>,
    /// What it shows, when it verified.
    receipt: Option<ReceiptFields<'a>>,
}

/// A verified receipt: the run, the checkpoint covering it, the witnesses'
/// cosignatures and, with `--log`, the log it was held against.
#[derive(Serialize)]
pub struct ReceiptFields<'a> {
    agent: String,
    did: String,
    origin: String,
    /// Whether an Agentfile pinned the DID, origin, witnesses and quorum.
    pinned: bool,
    run: RunJson,
    policy_digest: &'a str,
    tools: Vec<ToolsJson<'a>>,
    checkpoint: CheckpointJson,
    cosignatures: Vec<CosignatureJson<'a>>,
    quorum: usize,
    /// The entries with an inclusion proof in the receipt.
    entries: usize,
    log: Option<LogJson>,
}

#[derive(Serialize)]
struct RunJson {
    started_seq: u64,
    finished_seq: u64,
    started_at: String,
    finished_at: String,
    exit_status: Option<i64>,
}

#[derive(Serialize)]
struct ToolsJson<'a> {
    server: &'a str,
    seq: u64,
    tools: &'a [String],
    digest: &'a str,
}

#[derive(Serialize)]
struct CheckpointJson {
    size: u64,
    root: String,
}

#[derive(Serialize)]
struct CosignatureJson<'a> {
    witness: &'a str,
    /// Seconds since the Unix epoch, as the cosignature carries it.
    timestamp: u64,
}

#[derive(Serialize)]
struct LogJson {
    dir: String,
    log_entries: u64,
    run_entries: u64,
}

/// The object for a receipt that did not verify, and why.
pub fn receipt_invalid(file: &Path, error: &str) -> ReceiptJson<'static> {
    ReceiptJson {
        ok: false,
        file: shown(file),
        error: Some(error.to_owned()),
        receipt: None,
    }
}

/// The object for a receipt that verified (and, with `log`, matched it).
pub fn receipt_verified<'a>(
    file: &Path,
    receipt: &'a VerifiedReceipt,
    log: Option<(&Path, LogMatch)>,
) -> ReceiptJson<'a> {
    let run = |entry: &RunEntry| (entry.seq, entry.ts.to_string());
    let (started_seq, started_at) = run(receipt.started());
    let (finished_seq, finished_at) = run(receipt.finished());
    let head = receipt.head();
    let fields = ReceiptFields {
        agent: receipt.agent().to_string(),
        did: receipt.did().to_string(),
        origin: receipt.origin().to_string(),
        pinned: receipt.pinned(),
        run: RunJson {
            started_seq,
            finished_seq,
            started_at,
            finished_at,
            exit_status: receipt.exit_status(),
        },
        policy_digest: receipt.policy_digest(),
        tools: receipt
            .tools()
            .iter()
            .map(|list| ToolsJson {
                server: &list.server,
                seq: list.seq,
                tools: &list.tools,
                digest: &list.digest,
            })
            .collect(),
        checkpoint: CheckpointJson {
            size: head.size,
            root: head.root.to_string(),
        },
        cosignatures: receipt
            .cosignatures()
            .iter()
            .map(|c| CosignatureJson {
                witness: c.witness(),
                timestamp: c.timestamp(),
            })
            .collect(),
        quorum: receipt.quorum(),
        entries: receipt.tools().len() + 2,
        log: log.map(|(dir, matched)| LogJson {
            dir: shown(dir),
            log_entries: matched.log_entries,
            run_entries: matched.run_entries,
        }),
    };
    ReceiptJson {
        ok: true,
        file: shown(file),
        error: None,
        receipt: Some(fields),
    }
}
