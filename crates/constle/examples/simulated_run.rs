//! Writes the audit log of a simulated run of an Agentfile's agent, as
//! `constle run` will: `run_started`, the decisions, `run_finished`, each
//! signed with the agent's key from `$CONSTLE_HOME/keys/agent/`.
//!
//! It exists so the quickstart can show `constle audit verify` on a real,
//! signed log before `constle run` is built. Nothing is executed; every
//! entry says `simulated: true`.
//!
//! ```text
//! CONSTLE_HOME=/abs/path cargo run -p constle --example simulated_run -- agent.yaml
//! ```

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use constle_audit::{Appender, AuditLog, Event};
use constle_identity::{KeyKind, KeyStore};

fn main() -> anyhow::Result<()> {
    let agentfile = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: simulated_run AGENTFILE")?;
    let home = std::env::var_os("CONSTLE_HOME")
        .map(PathBuf::from)
        .context("set CONSTLE_HOME to an absolute path")?;
    let manifest = match constle_manifest::load_file(&agentfile, &|name| std::env::var(name).ok()) {
        Ok(valid) => valid.manifest,
        Err(rejected) => bail!("{rejected}"),
    };
    let signer = match &manifest.identity {
        Some(identity) => Some(KeyStore::open(&home)?.find(KeyKind::Agent, &identity.did)?),
        None => None,
    };
    let log = AuditLog::start(Appender::new(
        &home.join("logs"),
        manifest.name.clone(),
        signer,
    )?);
    let event = |name: &str| Event::new(name).and_then(|e| e.with("simulated", true));
    log.record(event("run_started")?.with("command", manifest.sandbox.command.clone())?)?;
    for host in &manifest.sandbox.network.allowed_hosts {
        let allowed = event("network_allowed")?
            .with("host", host.to_string())?
            .with("port", 443)?;
        log.record(allowed.with("squid", "TCP_TUNNEL/200")?)?;
    }
    let blocked = event("network_blocked")?
        .with("host", "evil.example.com")?
        .with("port", 443)?;
    log.record(blocked.with("squid", "TCP_DENIED/403")?)?;
    let written = log.record(
        event("run_finished")?
            .with("exit_status", 0)?
            .with("duration_ms", 0)?,
    )?;
    println!("{}", written.path.display());
    Ok(())
}
