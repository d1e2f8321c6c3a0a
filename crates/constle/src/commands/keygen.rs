//! `constle keygen NAME`, `constle webhook-keygen NAME` and `constle
//! witness-keygen NAME`: make a key in `$CONSTLE_HOME/keys/` and print its
//! did:key (for the Agentfile; a witness's verifier key, which also needs
//! the witness's name, is printed by `constle witness serve`).

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
    let (what, next) = match kind {
        KeyKind::Agent => ("agent identity", "paste this into identity.did:"),
        KeyKind::Approver => (
            "approver key (not an agent identity: give it only to whoever runs your decision endpoint)",
            "paste this into human_gates.approver_pubkey:",
        ),
        KeyKind::Witness => (
            "witness key (for `constle witness serve --key`; not an agent identity)",
            "its did:key (`constle witness serve` prints the verifier key logs need):",
        ),
    };
    terminal::err_line(&format!("created {what} `{name}`: {}", path.display()));
    terminal::err_line(next);
    terminal::out(did.as_str());
    Ok(Outcome::Success)
}
