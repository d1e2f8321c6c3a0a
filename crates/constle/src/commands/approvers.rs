//! `constle approvers init | next | sign | show`: make, sign and check the
//! versions of an approver set (the `constle-approver-set` crate holds the
//! rules; this module reads arguments and prints).

use std::path::Path;

use anyhow::{Context as _, bail};
use constle_approver_set::{
    Approver, ApproverSetError, ApproverSets, Label, SetBody, SetPin, SignatureOutcome,
    VerifiedVersion, VersionFile, newest_version, parse_expiry, read_version_file, read_versions,
    rewrite_version, store_dir, verify_files, write_new_version,
};
use constle_identity::{DidKey, KeyKind, KeyStore, Name};
use jiff::Timestamp;
use serde_json::json;

use crate::Outcome;
use crate::cli::{
    ApproversInitArgs, ApproversNextArgs, ApproversShowArgs, ApproversSignArgs, ExpiryArgs, Format,
};
use crate::home::constle_home;
use crate::terminal::{err_line, error, escape, out};

pub fn init(args: &ApproversInitArgs) -> anyhow::Result<Outcome> {
    let approvers = args
        .approvers
        .iter()
        .map(|a| approver(a, "--approver"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let expires = expiry(&args.expiry)?;
    let body = SetBody::new(1, expires, args.threshold, approvers)
        .map_err(|what| ApproverSetError::Invalid { what })?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let file = VersionFile::unsigned(body);
    let path = write_new_version(&args.dir, &file)?;
    out(&path.display().to_string());
    err_line(&format!(
        "wrote version 1, unsigned; {} of its {} approvers must sign it: constle approvers sign {} --key NAME",
        file.body().threshold(),
        file.body().approvers().len(),
        path.display()
    ));
    err_line(&format!(
        "its pin for the Agentfile (signing does not change it): {}",
        SetPin::new(file.digest())
    ));
    Ok(Outcome::Success)
}

pub fn next(args: &ApproversNextArgs) -> anyhow::Result<Outcome> {
    let Some((_, newest)) = newest_version(&args.dir)? else {
        bail!(
            "{} holds no version; make version 1 with `constle approvers init`",
            args.dir.display()
        );
    };
    let previous = read_version_file(&newest)?;
    let add = args
        .add
        .iter()
        .map(|a| approver(a, "--add"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let remove = args
        .remove
        .iter()
        .map(|d| DidKey::parse(d).with_context(|| format!("--remove {}", escape(d))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let body = previous
        .body()
        .next(add, &remove, args.threshold, expiry(&args.expiry)?)
        .map_err(|what| ApproverSetError::Invalid { what })?;
    let file = VersionFile::unsigned(body);
    let path = write_new_version(&args.dir, &file)?;
    out(&path.display().to_string());
    err_line(&format!(
        "wrote version {}, unsigned; it needs {} signatures of version {}'s approvers and {} of its own: constle approvers sign {} --key NAME",
        file.body().version(),
        previous.body().threshold(),
        previous.body().version(),
        file.body().threshold(),
        path.display()
    ));
    Ok(Outcome::Success)
}

pub fn sign(args: &ApproversSignArgs) -> anyhow::Result<Outcome> {
    let name = Name::new(&args.key).with_context(|| format!("invalid key name {:?}", args.key))?;
    let signer = KeyStore::open(&constle_home()?)?.load(KeyKind::Approver, &name)?;
    let mut file = read_version_file(&args.file)?;
    let replaced = file.sign(&signer);
    rewrite_version(&args.file, &file)?;
    let body = file.body();
    let did = signer.did();
    let who = match body.label_of(did) {
        Some(label) => format!("{} ({did})", escape(label)),
        None => did.to_string(),
    };
    err_line(&format!(
        "signed version {} as {who}{}",
        body.version(),
        if replaced {
            ", replacing its old signature"
        } else {
            ""
        }
    ));
    if !body.contains(did) {
        err_line(&format!(
            "note: this key is not one of version {}'s approvers; its signature counts only if it is one of version {}'s",
            body.version(),
            body.version().saturating_sub(1)
        ));
    }
    out(&args.file.display().to_string());
    Ok(Outcome::Success)
}

pub fn show(args: &ApproversShowArgs) -> anyhow::Result<Outcome> {
    // A gap, a misnamed or oversized version file is a finding about the
    // set (exit 1), like a version that does not verify.
    let files = match read_versions(&args.dir) {
        Ok(files) => files,
        Err(err) => return finding(err),
    };
    let Some((first_path, first)) = files.first() else {
        return finding(ApproverSetError::NoFirstVersion {
            dir: args.dir.clone(),
        });
    };
    let pin = match &args.pin {
        Some(pin) => SetPin::parse(pin).context("--pin")?,
        None => {
            let parsed = match VersionFile::parse(
                first,
                &constle_approver_set::Location::File(first_path.clone()),
            ) {
                Ok(parsed) => parsed,
                Err(err) => return finding(err),
            };
            if args.format == Format::Human {
                err_line(
                    "no --pin given: version 1 is taken as it is; check that the pin printed below is the Agentfile's",
                );
            }
            SetPin::new(parsed.digest())
        }
    };
    // Verify ever longer prefixes, so what verifies is shown before the
    // first version that does not.
    let mut shown = 0;
    let mut chain = Vec::new();
    let mut failure = None;
    for end in 1..=files.len() {
        match verify_files(&pin, &files[..end]) {
            Ok(verified) => chain = verified,
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
        let version = &chain[end - 1];
        let previous = if end > 1 { chain.get(end - 2) } else { None };
        print_version(&files[end - 1].0, version, previous, args.format);
        shown = end;
    }
    let now = Timestamp::now();
    match args.format {
        Format::Human => out(&format!("pin for the Agentfile: {pin}")),
        Format::Json => out(&json!({"type": "pin", "pin": pin.to_string()}).to_string()),
    }
    if let Some(err) = failure {
        return finding(err);
    }
    let Some(newest) = chain.last() else {
        bail!("no version verified");
    };
    if args.pin.is_some() {
        // As a run would: against the versions this machine accepted
        // before (a rollback or fork is refused), recording new ones.
        let store = store_dir(&constle_home()?, &pin);
        if let Err(err) = ApproverSets::load(&args.dir, &pin, &store, now) {
            return finding(err);
        }
    }
    if newest.is_expired(now) {
        return finding(ApproverSetError::Expired {
            location: constle_approver_set::Location::File(files[shown - 1].0.clone()),
            version: newest.version(),
            expires: newest.expires(),
        });
    }
    match args.format {
        Format::Human => out(&format!(
            "in force: version {} ({} of {} approvers), expires {}",
            newest.version(),
            newest.threshold(),
            newest.approvers().len(),
            newest.body().expires_text()
        )),
        Format::Json => out(&json!({
            "type": "in_force",
            "version": newest.version(),
            "digest": newest.digest().to_string(),
        })
        .to_string()),
    }
    Ok(Outcome::Success)
}

/// Prints a finding about the set (not an operational failure) and exits 1.
fn finding(err: ApproverSetError) -> anyhow::Result<Outcome> {
    if err.is_io() {
        return Err(err.into());
    }
    error(&err.to_string());
    Ok(Outcome::PolicyFailure)
}

fn print_version(
    path: &Path,
    version: &VerifiedVersion,
    previous: Option<&VerifiedVersion>,
    format: Format,
) {
    let label = |did: &DidKey| {
        version
            .label_of(did)
            .or_else(|| previous.and_then(|p| p.label_of(did)))
            .map(str::to_owned)
    };
    let verdict = |outcome: SignatureOutcome| match outcome {
        SignatureOutcome::Counted { own, previous: old } => match (own, old) {
            (true, true) => "counts for this version and the one before",
            (true, false) => "counts for this version",
            (false, _) => "counts for the version before",
        },
        SignatureOutcome::Duplicate => "ignored: this key's signature counted already",
        SignatureOutcome::NotInSet => "ignored: not an approver of this version or the one before",
        SignatureOutcome::Invalid => "does not verify: made for other contents",
        _ => "ignored",
    };
    if format == Format::Json {
        let approvers: Vec<_> = version
            .approvers()
            .iter()
            .map(|a| json!({"did": a.did.to_string(), "label": a.label.as_str()}))
            .collect();
        let signatures: Vec<_> = version
            .signatures()
            .iter()
            .map(|s| {
                let (own, old) = match s.outcome() {
                    SignatureOutcome::Counted { own, previous } => (own, previous),
                    _ => (false, false),
                };
                json!({
                    "did": s.did().to_string(),
                    "label": label(s.did()),
                    "counts_for_this_version": own,
                    "counts_for_previous_version": old,
                    "verdict": verdict(s.outcome()),
                })
            })
            .collect();
        out(&json!({
            "type": "version",
            "file": path.display().to_string(),
            "version": version.version(),
            "digest": version.digest().to_string(),
            "expires": version.body().expires_text(),
            "threshold": version.threshold(),
            "approvers": approvers,
            "signatures": signatures,
        })
        .to_string());
        return;
    }
    out(&format!(
        "version {}  {}",
        version.version(),
        escape(&path.display().to_string())
    ));
    out(&format!("  digest     {}", version.digest()));
    out(&format!("  expires    {}", version.body().expires_text()));
    out(&format!(
        "  threshold  {} of {}",
        version.threshold(),
        version.approvers().len()
    ));
    for a in version.approvers() {
        out(&format!(
            "  approver   {}  {}",
            escape(a.label.as_str()),
            a.did
        ));
    }
    for s in version.signatures() {
        let who = label(s.did()).map_or_else(String::new, |l| format!("{}  ", escape(&l)));
        out(&format!(
            "  signature  {who}{}: {}",
            s.did(),
            verdict(s.outcome())
        ));
    }
}

/// `DID=LABEL`.
fn approver(text: &str, flag: &str) -> anyhow::Result<Approver> {
    let Some((did, label)) = text.split_once('=') else {
        bail!(
            "{flag} {}: write DID=LABEL, e.g. did:key:z6Mk…=alice",
            escape(text)
        );
    };
    let did = DidKey::parse(did).with_context(|| format!("{flag} {}", escape(text)))?;
    let label =
        Label::new(label).map_err(|what| anyhow::anyhow!("{flag} {}: {what}", escape(text)))?;
    Ok(Approver { did, label })
}

/// `--expires` or `--expires-in-days`, which must lie ahead.
fn expiry(args: &ExpiryArgs) -> anyhow::Result<Timestamp> {
    let now = Timestamp::now();
    let expires = match &args.expires {
        Some(text) => parse_expiry(text).map_err(|what| anyhow::anyhow!("--expires: {what}"))?,
        None => {
            let seconds = now.as_second() + i64::from(args.expires_in_days) * 86_400;
            Timestamp::from_second(seconds).context("--expires-in-days is too far ahead")?
        }
    };
    if expires <= now {
        bail!("the expiry {expires} has passed: a version that has expired approves nothing");
    }
    Ok(expires)
}
