//! `constle keygen NAME` and `constle webhook-keygen NAME`: make a key in
//! `$CONSTLE_HOME/keys/` and print the did:key to paste into the Agentfile.

use anyhow::Context as _;
use constle_identity::{KeyKind, KeyStore, Name};

use crate::Outcome;
use crate::cli::KeygenArgs;
use crate::home::constle_home;
use crate::terminal;

pub fn run(kind: KeyKind, args: &KeygenArgs) -> anyhow::Result<Outcome> {
    let name =
        Name::new(&args.name).with_context(|| format!("invalid key name {:?}", args.name))?;
    let store = KeyStore::open(&constle_home()?)?;
    let (did, path) = store.generate(kind, &name)?;
    let (what, field) = match kind {
        KeyKind::Agent => ("agent identity", "identity.did"),
        KeyKind::Approver => (
            "approver key (not an agent identity: give it only to whoever runs your decision endpoint)",
            "human_gates.approver_pubkey",
        ),
    };
    terminal::err_line(&format!("created {what} `{name}`: {}", path.display()));
    terminal::err_line(&format!("paste this into {field}:"));
    terminal::out(did.as_str());
    Ok(Outcome::Success)
}
