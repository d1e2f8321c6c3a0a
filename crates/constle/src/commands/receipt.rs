//! `constle audit receipt` and `constle audit verify-receipt`: thin over
//! `constle-receipt`. `verify-receipt --format json` prints one object (in
//! `verify_json`), with the exit status the text would have.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use constle_audit::DayFile;
use constle_identity::Name;
use constle_receipt::{
    BuildError, FileError, LogError, Pins, Run, VerifiedReceipt, read_receipt, write_receipt,
};
use constle_tlog::LogFilesError;

use crate::Outcome;
use crate::cli::{Format, ReceiptArgs, VerifyReceiptArgs};
use crate::commands::verify_json;
use crate::home::constle_home;
use crate::terminal::{self, Paint, escape, paint};

pub fn write(args: &ReceiptArgs) -> anyhow::Result<Outcome> {
    let pins = pins(&args.agentfile)?;
    let agent = pins.log_key().origin().agent().clone();
    let dir = match &args.log {
        Some(path) => log_dir(path, &agent)?,
        None => constle_home()?.join("logs"),
    };
    let run = args.run.map_or(Run::Latest, Run::StartedAt);
    let receipt = match constle_receipt::build(&dir, &pins, run) {
        Ok(receipt) => receipt,
        Err(err @ (BuildError::Rewritten { .. } | BuildError::Unverifiable(_))) => {
            let dir = escape(&dir.display().to_string());
            terminal::out(&format!(
                "{} TAMPERING DETECTED in {dir}: {}",
                paint(Paint::Red, "error:"),
                escape(&err.to_string())
            ));
            return Ok(Outcome::PolicyFailure);
        }
        Err(err) => {
            return Err(err)
                .with_context(|| format!("no receipt from the log in {}", dir.display()));
        }
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "{agent}-run-{}.receipt.json",
            receipt.started().seq
        ))
    });
    write_receipt(&out, receipt.receipt())?;
    let shown = escape(&out.display().to_string());
    terminal::out(&paint(Paint::Green, &format!("✓ receipt written: {shown}")));
    terminal::out("");
    print_run(&receipt);
    Ok(Outcome::Success)
}

pub fn verify(args: &VerifyReceiptArgs) -> anyhow::Result<Outcome> {
    let file = escape(&args.file.display().to_string());
    // What failed: as the text shows it (escaped), and as it is.
    let invalid = |shown: &str, what: &str| {
        match args.format {
            Format::Human => {
                terminal::out(&format!(
                    "{} RECEIPT INVALID: {file}",
                    paint(Paint::Red, "error:")
                ));
                terminal::out(&format!("  {}", escape(shown)));
            }
            Format::Json => terminal::out(&serde_json::to_string(&verify_json::receipt_invalid(
                &args.file, what,
            ))?),
        }
        Ok(Outcome::PolicyFailure)
    };
    let receipt = match read_receipt(&args.file) {
        Ok(receipt) => receipt,
        Err(FileError::Format { source, .. }) => {
            let why = source.to_string();
            return invalid(&why, &why);
        }
        Err(err) => return Err(err).context("cannot verify the receipt"),
    };
    let pins = args.agentfile.as_deref().map(pins).transpose()?;
    let verified = match receipt.verify(pins.as_ref()) {
        Ok(verified) => verified,
        Err(err) => {
            let why = err.to_string();
            return invalid(&why, &why);
        }
    };
    let checked = match &args.log {
        None => None,
        Some(path) => {
            let dir = log_dir(path, verified.agent())?;
            match verified.check_log(&dir) {
                Ok(matched) => Some((dir, matched)),
                Err(LogError::Files(
                    err @ (LogFilesError::Read(_) | LogFilesError::ListDir { .. }),
                )) => {
                    return Err(err).context("cannot check the receipt against the log");
                }
                Err(err) => {
                    let against = |dir: &str| format!("against the log in {dir}: {err}");
                    let raw = dir.display().to_string();
                    return invalid(&against(&escape(&raw)), &against(&raw));
                }
            }
        }
    };
    if args.format == Format::Json {
        let checked = checked
            .as_ref()
            .map(|(dir, matched)| (dir.as_path(), *matched));
        let json = verify_json::receipt_verified(&args.file, &verified, checked);
        terminal::out(&serde_json::to_string(&json)?);
        return Ok(Outcome::Success);
    }
    terminal::out(&paint(Paint::Green, &format!("✓ receipt verified: {file}")));
    terminal::out("");
    print_run(&verified);
    print_proofs(&verified);
    if let Some((dir, matched)) = checked {
        terminal::out(&format!(
            "  log:        {}: its first {} entries are the cosigned ones (the log has {}); the run's {} entries hold no other tool list and no other run",
            escape(&dir.display().to_string()),
            verified.head().size,
            matched.log_entries,
            matched.run_entries
        ));
    }
    if !verified.pinned() {
        terminal::out(&paint(
            Paint::Yellow,
            "  note:       the agent's DID, the origin, the witnesses and the quorum were taken from the receipt itself; pass --agentfile to pin them",
        ));
    }
    Ok(Outcome::Success)
}

/// What the Agentfile at `path` pins for a receipt.
fn pins(path: &Path) -> anyhow::Result<Pins> {
    let witnessing = super::audit::witnessing(path)?;
    let witnesses = witnessing.witnesses.into_iter().map(|w| w.key).collect();
    Pins::new(witnessing.log_key, witnesses, witnessing.quorum)
        .with_context(|| format!("the Agentfile {}", path.display()))
}

/// The log directory `path` names: itself, or the directory of a day file
/// of `agent`'s.
fn log_dir(path: &Path, agent: &Name) -> anyhow::Result<PathBuf> {
    if path.is_dir() {
        return Ok(path.to_owned());
    }
    match DayFile::from_path(path) {
        Some(day) if &day.agent == agent => Ok(day.dir),
        Some(day) => bail!(
            "{} is a day file of agent {}, not of {agent}",
            path.display(),
            day.agent
        ),
        None => bail!(
            "{} is neither a log directory nor a day file <agent>-<YYYY-MM-DD>.jsonl",
            path.display()
        ),
    }
}

/// The run a receipt shows.
fn print_run(receipt: &VerifiedReceipt) {
    let time = |ts: jiff::Timestamp| ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string();
    let (started, finished) = (receipt.started(), receipt.finished());
    let status = receipt.exit_status().map_or_else(
        || "no exit status".to_owned(),
        |s| format!("exit status {s}"),
    );
    terminal::out(&format!(
        "  agent:      {} ({})",
        receipt.agent(),
        receipt.did()
    ));
    terminal::out(&format!("  origin:     {}", receipt.origin()));
    terminal::out(&format!(
        "  run:        entries {} to {}, {} to {}, {status}",
        started.seq,
        finished.seq,
        time(started.ts),
        time(finished.ts)
    ));
    terminal::out(&format!(
        "  policy:     {}",
        escape(receipt.policy_digest())
    ));
    if receipt.tools().is_empty() {
        terminal::out("  tools:      none offered");
    }
    for (index, list) in receipt.tools().iter().enumerate() {
        terminal::out(&format!(
            "  {:<11} {} (entry {}): {} ({})",
            if index == 0 { "tools:" } else { "" },
            escape(&list.server),
            list.seq,
            escape(&list.tools.join(", ")),
            escape(&list.digest)
        ));
    }
    let head = receipt.head();
    terminal::out(&format!(
        "  checkpoint: size {}, root {}, signed by the agent's key",
        head.size, head.root
    ));
    for (index, cosignature) in receipt.cosignatures().iter().enumerate() {
        let at = i64::try_from(cosignature.timestamp())
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .map_or_else(|| cosignature.timestamp().to_string(), time);
        terminal::out(&format!(
            "  {:<11} {} at {at}",
            if index == 0 { "cosigned:" } else { "" },
            escape(cosignature.witness())
        ));
    }
}

/// What was checked of the entries.
fn print_proofs(receipt: &VerifiedReceipt) {
    terminal::out(&format!(
        "  witnesses:  {} cosignature(s), all valid; quorum {}",
        receipt.cosignatures().len(),
        receipt.quorum()
    ));
    terminal::out(&format!(
        "  entries:    {} (run_started, run_finished, {} tool list(s)), each in the checkpoint's tree at its seq and signed by the agent's key",
        receipt.tools().len() + 2,
        receipt.tools().len()
    ));
}
