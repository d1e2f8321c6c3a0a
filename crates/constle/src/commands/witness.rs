//! `constle witness serve`: a C2SP tlog-witness (the `constle-witness`
//! crate), cosigning with a witness key from the key store.

use std::sync::Arc;

use anyhow::Context as _;
use constle_identity::{KeyKind, KeyStore, Name};
use constle_tlog::WitnessSigner;
use constle_witness::{Logs, StateDir, Witness, origin_hash};

use crate::Outcome;
use crate::cli::WitnessServeArgs;
use crate::home::constle_home;
use crate::terminal::err_line;

pub fn serve(args: &WitnessServeArgs) -> anyhow::Result<Outcome> {
    let key = Name::new(&args.key).with_context(|| format!("invalid key name {:?}", args.key))?;
    let home = constle_home()?;
    let identity = KeyStore::open(&home)?.load(KeyKind::Witness, &key)?;
    let signer = WitnessSigner::new(&args.name, identity)
        .with_context(|| format!("invalid witness name {:?}", args.name))?;
    let logs = Logs::read(&args.logs)?;
    let dir = match &args.state {
        Some(dir) => dir.clone(),
        None => home.join("witness").join(key.as_str()),
    };
    let state = StateDir::open(&dir)?;
    let witness = Arc::new(Witness::new(signer, logs, state));
    err_line(&format!(
        "constle witness: verifier key {}",
        witness.public().vkey()
    ));
    err_line(&format!("constle witness: state {}", dir.display()));
    let mut origins = Vec::new();
    for (origin, state) in witness.check_state() {
        origins.push(origin.to_owned());
        match state {
            Ok(Some(head)) => err_line(&format!(
                "constle witness: {origin}: last cosigned size {}",
                head.size
            )),
            Ok(None) => err_line(&format!("constle witness: {origin}: never cosigned")),
            Err(err) => err_line(&format!(
                "constle witness: warning: {origin}: refused (answers 500) until repaired: {err}"
            )),
        }
    }
    super::serve_until_interrupted(args.listen, |listener, addr, interrupted| async move {
        if !addr.ip().is_loopback() {
            err_line(
                "constle witness: warning: not on loopback; put a TLS proxy in front so clients can authenticate the witness",
            );
        }
        for origin in &origins {
            err_line(&format!(
                "constle witness: {origin}: latest checkpoint for monitors at http://{addr}/{}/checkpoint",
                origin_hash(origin)
            ));
        }
        // Last: tests and scripts wait for this line.
        err_line(&format!(
            "constle witness: add-checkpoint at http://{addr}/add-checkpoint"
        ));
        constle_witness::serve(listener, witness, interrupted)
            .await
            .context("the witness server failed")
    })?;
    Ok(Outcome::Success)
}
