//! What the rounds' tests and benchmark share: an agent `bot` with a fixed
//! key, its log written with the real writer, and real witnesses
//! (constle-witness) served on loopback in this process.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use constle_audit::{Appender, Event};
use constle_checkpoints::{Checkpointer, Witness, Witnessing};
use constle_identity::{Name, SigningIdentity};
use constle_tlog::{Deployment, LogKey, Origin, WitnessSigner};
use constle_witness::{Logs, StateDir};

const AGENT_SEED: [u8; 32] = [7; 32];

pub fn agent() -> Name {
    Name::new("bot").unwrap()
}

pub fn agent_key() -> SigningIdentity {
    SigningIdentity::from_bytes(&AGENT_SEED)
}

pub fn log_key() -> LogKey {
    let origin = Origin::new(&Deployment::new("ci.example.com").unwrap(), &agent());
    LogKey::new(origin, agent_key().did())
}

/// Appends `events` to the agent's log in `dir`, as a run's writer does.
pub fn record(dir: &Path, events: Vec<Event>) {
    Appender::new(dir, agent(), Some(agent_key()))
        .and_then(|a| a.append(events))
        .unwrap();
}

/// Appends `n` entries, in batches the writer takes.
pub fn append(dir: &Path, n: usize) {
    for start in (0..n).step_by(4096) {
        let events = (start..n.min(start + 4096))
            .map(|i| Event::new("tick").unwrap().with("i", i as i64).unwrap())
            .collect();
        record(dir, events);
    }
}

/// Starts a witness named `w<n>.example.org` on loopback; its state lives
/// in `state`.
pub async fn witness(n: u8, state: &Path) -> Witness {
    let signer = WitnessSigner::new(
        &format!("w{n}.example.org"),
        SigningIdentity::from_bytes(&[n; 32]),
    )
    .unwrap();
    let key = signer.public().clone();
    let logs = Logs::parse(&format!("{}\n", log_key().vkey()), "logs".as_ref()).unwrap();
    let served = Arc::new(constle_witness::Witness::new(
        signer,
        logs,
        StateDir::open(state).unwrap(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(constle_witness::serve(
        listener,
        served,
        std::future::pending(),
    ));
    Witness {
        endpoint: format!("{url}/add-checkpoint"),
        shown_url: url,
        key,
    }
}

pub fn config(witnesses: Vec<Witness>, quorum: usize, required: bool) -> Witnessing {
    Witnessing {
        log_key: log_key(),
        witnesses,
        quorum,
        required,
        every_entries: 256,
        every: Duration::from_secs(60),
    }
}

pub fn checkpointer(dir: &Path, config: Witnessing) -> Checkpointer {
    Checkpointer::new(config, agent_key(), dir, agent()).unwrap()
}
