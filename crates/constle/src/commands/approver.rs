//! `constle approver serve`: the decision endpoint for webhook human gates
//! and its approval page (the `constle-approval-page` crate), signing with an
//! approver key from the key store.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use constle_approval_page::auth::{
    MAX_USER_BYTES, hash_password, prompt_new_password, read_password_line,
};
use constle_approval_page::{Approver, Store};
use constle_identity::{KeyKind, KeyStore, Name};

use crate::Outcome;
use crate::cli::ApproverServeArgs;
use crate::home::constle_home;
use crate::terminal::err_line;

pub fn serve(args: &ApproverServeArgs) -> anyhow::Result<Outcome> {
    let name = Name::new(&args.key).with_context(|| format!("invalid key name {:?}", args.key))?;
    let home = constle_home()?;
    let signer = KeyStore::open(&home)?.load(KeyKind::Approver, &name)?;
    let did = signer.did().clone();
    let db = match &args.db {
        Some(db) => db.clone(),
        None => default_db(&home, &name)?,
    };
    let store = Store::open(&db).with_context(|| format!("cannot open {}", db.display()))?;
    if args.user.is_empty() || args.user.len() > MAX_USER_BYTES {
        bail!("--user must be 1 to {MAX_USER_BYTES} bytes");
    }
    if args.set_password {
        let password = read_password_line(&mut std::io::stdin().lock())?;
        store.set_password(&args.user, &hash_password(&password)?)?;
        err_line(&format!(
            "constle approver: password set for `{}`",
            args.user
        ));
    } else if !store.has_users()? {
        // First start: nobody could ever sign in, so ask now, or say how.
        if !std::io::stdin().is_terminal() {
            bail!(
                "no approver password is set yet: run again with --set-password and give the password on standard input"
            );
        }
        let password = prompt_new_password()?;
        store.set_password(&args.user, &hash_password(&password)?)?;
    }
    let approver = Arc::new(Approver::new(store, signer)?);
    super::serve_until_interrupted(args.listen, |listener, addr, interrupted| async move {
        err_line(&format!("constle approver: signing as {did}"));
        err_line(&format!("constle approver: database {}", db.display()));
        err_line(&format!(
            "constle approver: page http://{addr}/ ; gate URL (url_secret_ref) http://{addr}/gate"
        ));
        if !addr.ip().is_loopback() {
            err_line(
                "constle approver: warning: not on loopback; browsers send the Secure login cookie only over HTTPS, so put a TLS proxy in front",
            );
        }
        constle_approval_page::serve(listener, approver, interrupted)
            .await
            .context("the approver server failed")
    })?;
    Ok(Outcome::Success)
}

/// `$CONSTLE_HOME/approver/NAME.sqlite`, the directory private to the user:
/// it holds the password hashes and the record of every decision.
fn default_db(home: &std::path::Path, name: &Name) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir = home.join("approver");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join(format!("{}.sqlite", name.as_str())))
}
