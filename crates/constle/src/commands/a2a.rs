//! `constle a2a send` and `constle a2a listen`: agent-to-agent messages
//! from the command line, signed and checked exactly as in a run, and
//! recorded in the agent's audit log.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use constle_a2a::{A2aClient, DeliverError, Inbox, PeerUrl, sign_envelope};
use constle_audit::catalogue::A2aSent;
use constle_audit::{Appender, AuditLog};
use constle_identity::{DidKey, KeyKind, KeyStore, SigningIdentity};
use constle_manifest::{A2a, Manifest};

use crate::Outcome;
use crate::cli::{A2aListenArgs, A2aSendArgs};
use crate::commands::validate::print_diagnostics;
use crate::home::constle_home;
use crate::terminal::{Stream, err_line, escape, out};

/// An Agentfile with an identity and an `a2a` section, its key and its log.
struct Agent {
    manifest: Manifest,
    key: SigningIdentity,
    log: AuditLog,
}

fn load(agentfile: &std::path::Path) -> anyhow::Result<Result<Agent, Outcome>> {
    let manifest = match constle_manifest::load_file(agentfile, &super::host_env) {
        Ok(validated) => validated.manifest,
        Err(rejected) => {
            print_diagnostics(rejected.errors.iter(), Stream::Err);
            return Ok(Err(Outcome::PolicyFailure));
        }
    };
    let (Some(identity), Some(_)) = (&manifest.identity, &manifest.a2a) else {
        bail!(
            "{} has no identity.did or no a2a section: envelopes are signed with the agent's key",
            agentfile.display()
        );
    };
    let home = constle_home()?;
    let store = KeyStore::open(&home)?;
    let key = store.find(KeyKind::Agent, &identity.did)?;
    let log_key = store.find(KeyKind::Agent, &identity.did)?;
    let log = AuditLog::start(Appender::new(
        &home.join("logs"),
        manifest.name.clone(),
        Some(log_key),
    )?);
    Ok(Ok(Agent { manifest, key, log }))
}

fn a2a(manifest: &Manifest) -> &A2a {
    // `load` checked it is there.
    manifest
        .a2a
        .as_ref()
        .unwrap_or_else(|| unreachable!("load refuses an Agentfile without a2a"))
}

pub fn send(args: &A2aSendArgs) -> anyhow::Result<Outcome> {
    let agent = match load(&args.agentfile)? {
        Ok(agent) => agent,
        Err(outcome) => return Ok(outcome),
    };
    let to = DidKey::parse(&args.to).context("--to is not a valid did:key")?;
    let Some(url) = a2a(&agent.manifest)
        .peer(&to)
        .and_then(|peer| peer.url.as_ref())
    else {
        bail!(
            "{to} is not a peer with a url in a2a.peers of {}",
            args.agentfile.display()
        );
    };
    let url = PeerUrl::parse(url.as_str())?;
    let body = constle_json::parse(args.body.as_bytes())
        .map_err(|err| anyhow::anyhow!("the body is not strict JSON: {err}"))?;
    let envelope = sign_envelope(&agent.key, &to, body, jiff::Timestamp::now())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let delivered = runtime.block_on(async { A2aClient::new()?.deliver(&url, &envelope).await });
    let (status, reason) = match &delivered {
        Ok(delivery) => (Some(delivery.status), None),
        Err(DeliverError::Refused { status, reason, .. }) => (Some(*status), reason.clone()),
        Err(other) => (None, Some(other.to_string())),
    };
    let sent = A2aSent {
        to: to.to_string(),
        msg_id: envelope.msg_id().as_str().to_owned(),
        delivered: delivered.is_ok(),
        status,
        reason: reason.clone(),
    };
    agent.log.record(sent.into())?;
    agent.log.close();
    match delivered {
        Ok(_) => {
            out(&format!("delivered {} to {to}", envelope.msg_id().as_str()));
            Ok(Outcome::Success)
        }
        Err(DeliverError::Refused { status, .. }) => {
            err_line(&format!(
                "constle a2a send: {to} refused {} ({status} {})",
                envelope.msg_id().as_str(),
                escape(reason.as_deref().unwrap_or("no reason given"))
            ));
            Ok(Outcome::PolicyFailure)
        }
        Err(err) => bail!("cannot deliver to {to}: {err}"),
    }
}

pub fn listen(args: &A2aListenArgs) -> anyhow::Result<Outcome> {
    let agent = match load(&args.agentfile)? {
        Ok(agent) => agent,
        Err(outcome) => return Ok(outcome),
    };
    let a2a = a2a(&agent.manifest);
    let Some(address) = a2a.listen else {
        bail!("{} has no a2a.listen address", args.agentfile.display());
    };
    let home = constle_home()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let log = Arc::new(agent.log);
    let inbox = Inbox::default();
    runtime.block_on(async {
        let listener =
            constle_run::a2a_listener(a2a, agent.key.did(), &home, inbox.clone(), &log).await?;
        let tcp = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        err_line(&format!("constle a2a listen: listening on {address}"));
        let serving = tokio::spawn(listener.serve(tcp));
        let printing = async {
            loop {
                out(&inbox.wait().await.to_json().to_string());
            }
        };
        tokio::select! {
            () = printing => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        serving.abort();
        anyhow::Ok(())
    })?;
    if let Ok(log) = Arc::try_unwrap(log) {
        log.close();
    }
    Ok(Outcome::Success)
}
