//! One checkpoint round: sign the log's head, ask every witness, keep what
//! they cosigned.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use constle_audit::catalogue::{
    Checkpoint, CheckpointCosigned, CheckpointQuorumMissed, CheckpointWitnessFailed,
};
use constle_audit::{Event, Head};
use constle_identity::{Name, SigningIdentity};
use constle_store::replace::replace;
use constle_tlog::{LogFollower, LogTree, VerifiedCheckpoint, sign_checkpoint};
use futures_util::future::join_all;

use crate::config::{Witness, Witnessing};
use crate::error::CheckpointError;
use crate::schedule::Trigger;
use crate::submit::{Answer, add_checkpoint, client};

/// Where the latest checkpoint of `agent`'s log, with the cosignatures it
/// got, is kept: `<dir>/<agent>.checkpoint`.
pub fn latest_checkpoint_path(dir: &Path, agent: &Name) -> PathBuf {
    dir.join(format!("{agent}.checkpoint"))
}

/// Makes checkpoints of one agent's log and has them cosigned.
pub struct Checkpointer {
    config: Witnessing,
    signer: SigningIdentity,
    dir: PathBuf,
    agent: Name,
    client: reqwest::Client,
    /// The log's tree, read on from where the last round stopped.
    follower: LogFollower,
    /// What each witness is believed to have cosigned last, by name.
    cosigned: HashMap<String, u64>,
}

/// What a round did.
#[derive(Debug)]
pub struct Round {
    /// The checkpoint's size.
    pub size: u64,
    /// The entries to record, in order: `checkpoint`, then one per witness,
    /// then `checkpoint_quorum_missed` when the quorum is required and
    /// missed.
    pub events: Vec<Event>,
    /// One line per witness that did not cosign, for the terminal.
    pub warnings: Vec<String>,
    /// How many witnesses cosigned.
    pub cosigned: usize,
    /// Why the run must stop, when its required quorum was missed.
    pub stop: Option<String>,
}

impl Checkpointer {
    /// For the log of `agent` in `dir`, signed by `signer` (the key
    /// `config.log_key` names).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Client`] if no HTTP client can be made.
    pub fn new(
        config: Witnessing,
        signer: SigningIdentity,
        dir: &Path,
        agent: Name,
    ) -> Result<Checkpointer, CheckpointError> {
        let client = client().map_err(|err| CheckpointError::Client(err.to_string()))?;
        Ok(Checkpointer {
            config,
            signer,
            dir: dir.to_owned(),
            follower: LogFollower::new(dir, agent.clone()),
            agent,
            client,
            cosigned: HashMap::new(),
        })
    }

    /// What the rounds are configured with.
    pub fn config(&self) -> &Witnessing {
        &self.config
    }

    /// The number of entries the head anchor names.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Head`] if it cannot be read.
    pub fn log_size(&self) -> Result<u64, CheckpointError> {
        Ok(self.head()?.map_or(0, |h| h.seq + 1))
    }

    fn head(&self) -> Result<Option<Head>, CheckpointError> {
        let head = Head::load(&self.dir, &self.agent).map_err(|err| CheckpointError::Head {
            dir: self.dir.clone(),
            reason: err.to_string(),
        })?;
        Ok(head.map(|signed| signed.head))
    }

    /// Checkpoints the log at its head and asks every witness to cosign.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] when the log cannot be read or the checkpoint
    /// signed or written; a witness failing is in the [`Round`] instead.
    pub async fn round(&mut self, trigger: Trigger) -> Result<Round, CheckpointError> {
        let head = self.head()?;
        let size = head.as_ref().map_or(0, |h| h.seq + 1);
        if let Some(head) = &head {
            self.follower.follow(&head.file, head.len, size)?;
        }
        let tree = self.follower.tree();
        let head = tree.head();
        let signed = sign_checkpoint(&self.signer, &self.config.log_key, head)?;
        let checkpoint = signed.verify(&self.config.log_key)?;
        let answers = join_all(
            self.config
                .witnesses
                .iter()
                .map(|w| self.ask(w, &checkpoint, tree)),
        )
        .await;
        let mut round = Round {
            size,
            events: vec![checkpoint_event(&checkpoint, trigger)],
            warnings: Vec::new(),
            cosigned: 0,
            stop: None,
        };
        let mut lines = Vec::new();
        for (witness, (answer, elapsed)) in self.config.witnesses.iter().zip(answers) {
            match answer {
                Answer::Cosigned(line) => {
                    self.cosigned.insert(witness.key.name().to_owned(), size);
                    round.cosigned += 1;
                    round
                        .events
                        .push(cosigned_event(&checkpoint, witness, &line, elapsed));
                    lines.push(line);
                }
                Answer::Stale(latest) => {
                    let reason =
                        format!("it last cosigned size {latest}, which this log cannot extend");
                    round.failed(witness, size, &reason, Some(409));
                }
                Answer::Failed(reason, status) => round.failed(witness, size, &reason, status),
            }
        }
        self.store_latest(&checkpoint, &lines)?;
        round.judge(&self.config);
        Ok(round)
    }

    /// One witness's answer, resubmitting once from the size it says it
    /// last cosigned (how a client learns it, per tlog-witness).
    async fn ask(
        &self,
        witness: &Witness,
        checkpoint: &VerifiedCheckpoint,
        tree: &LogTree,
    ) -> (Answer, u128) {
        let started = Instant::now();
        let old = self.cosigned.get(witness.key.name()).copied().unwrap_or(0);
        let size = checkpoint.head().size;
        let answer = match add_checkpoint(&self.client, witness, checkpoint, tree, old).await {
            Answer::Stale(latest) if latest != old && latest <= size => {
                add_checkpoint(&self.client, witness, checkpoint, tree, latest).await
            }
            answer => answer,
        };
        (answer, started.elapsed().as_millis())
    }

    /// Replaces `<agent>.checkpoint` with the signed note and `lines`,
    /// atomically and durably, readable by the owner only.
    fn store_latest(
        &self,
        checkpoint: &VerifiedCheckpoint,
        lines: &[String],
    ) -> Result<(), CheckpointError> {
        let path = latest_checkpoint_path(&self.dir, &self.agent);
        let mut note = checkpoint.signed().as_bytes().to_vec();
        for line in lines {
            note.extend_from_slice(line.as_bytes());
            note.push(b'\n');
        }
        replace(&path, &note, 0o600).map_err(|err| CheckpointError::Write {
            path: path.clone(),
            reason: err.into_io().to_string(),
        })?;
        Ok(())
    }
}

impl Round {
    fn failed(&mut self, witness: &Witness, size: u64, reason: &str, status: Option<u16>) {
        let name = witness.key.name();
        self.warnings.push(format!(
            "witness {name} ({}) did not cosign checkpoint {size}: {reason}; it is asked again at the next checkpoint",
            witness.shown_url
        ));
        let failed = CheckpointWitnessFailed {
            size,
            witness: name.to_owned(),
            url: witness.shown_url.clone(),
            reason: reason.to_owned(),
            status: status.into(),
        };
        self.events.push(failed.into());
    }

    /// Adds `checkpoint_quorum_missed` and the reason to stop, when the
    /// quorum is required and was not met.
    fn judge(&mut self, config: &Witnessing) {
        if !config.required || self.cosigned >= config.quorum {
            return;
        }
        let missed = CheckpointQuorumMissed {
            size: self.size,
            cosigned: self.cosigned,
            quorum: config.quorum,
        };
        self.events.push(missed.into());
        self.stop = Some(format!(
            "checkpoint {} was cosigned by {} of {} witnesses, and the Agentfile requires {}: the run stops rather than go on unwitnessed",
            self.size,
            self.cosigned,
            config.witnesses.len(),
            config.quorum
        ));
    }
}

fn checkpoint_event(checkpoint: &VerifiedCheckpoint, trigger: Trigger) -> Event {
    let head = checkpoint.head();
    let note = String::from_utf8_lossy(checkpoint.signed().as_bytes()).into_owned();
    Checkpoint {
        size: head.size,
        root: head.root.to_string(),
        trigger: trigger.as_str().to_owned(),
        note,
    }
    .into()
}

fn cosigned_event(
    checkpoint: &VerifiedCheckpoint,
    witness: &Witness,
    line: &str,
    elapsed: u128,
) -> Event {
    let head = checkpoint.head();
    CheckpointCosigned {
        size: head.size,
        root: head.root.to_string(),
        witness: witness.key.name().to_owned(),
        cosignature: line.to_owned(),
        round_trip_ms: elapsed,
    }
    .into()
}
