//! `audit`: checkpoints of the agent's log and the witnesses that cosign
//! them (docs/spec/log-checkpoints.md §6).

use std::collections::HashSet;

use constle_vkey::{Deployment, WitnessKey};

use super::context::V;
use crate::de::{Field, Located};
use crate::model::{
    Audit, DEFAULT_CHECKPOINT_ENTRIES, DEFAULT_CHECKPOINT_SECONDS, DEFAULT_DEPLOYMENT,
    MAX_WITNESSES, WitnessRef,
};
use crate::raw::{RawAudit, RawWitness};
use crate::values::{HttpUrl, InvalidValue};

/// Most entries between two checkpoints.
const MAX_CHECKPOINT_ENTRIES: u32 = 1_000_000;
/// Most seconds between two checkpoints (a day).
const MAX_CHECKPOINT_SECONDS: u32 = 86_400;

impl V<'_, '_> {
    /// The `audit` section; `identity` tells whether the log is signed.
    pub(super) fn audit(&mut self, raw: &Located<RawAudit>, identity: bool) -> Option<Audit> {
        let a = &raw.value;
        let deployment = match &a.deployment.0 {
            None => Some(DEFAULT_DEPLOYMENT.to_owned()),
            Some(d) => self.check(d, "invalid_deployment", check_deployment),
        };
        let every = |v: &mut Self, field: &Field<u64>, name: &str, default: u64, max: u32| {
            let Some(value) = &field.0 else {
                return Some(default);
            };
            let help = format!("the default is {default}");
            v.bounded(
                value,
                &format!("audit.{name}"),
                (1, max),
                "out_of_range",
                help,
            )
            .map(u64::from)
        };
        let entries = every(
            self,
            &a.checkpoint_every_entries,
            "checkpoint_every_entries",
            DEFAULT_CHECKPOINT_ENTRIES,
            MAX_CHECKPOINT_ENTRIES,
        );
        let seconds = every(
            self,
            &a.checkpoint_every_seconds,
            "checkpoint_every_seconds",
            DEFAULT_CHECKPOINT_SECONDS,
            MAX_CHECKPOINT_SECONDS,
        );
        let witnesses = match &a.witnesses.0 {
            None => Some(Vec::new()),
            Some(list) => self.witnesses(list),
        };
        let (quorum, required) = self.witness_quorum(a, witnesses.as_deref()?.len())?;
        if let Some(list) = a.witnesses.0.as_ref().filter(|l| !l.value.is_empty()) {
            self.witness_prerequisites(list, a, identity)?;
        }
        Some(Audit {
            deployment: deployment?,
            checkpoint_every_entries: entries?,
            checkpoint_every_seconds: seconds?,
            witnesses: witnesses?,
            witness_quorum: quorum,
            witness_quorum_required: required,
        })
    }

    fn witnesses(&mut self, list: &Located<Vec<Located<RawWitness>>>) -> Option<Vec<WitnessRef>> {
        if list.value.len() > MAX_WITNESSES {
            let message = format!(
                "audit.witnesses lists {} witnesses; at most {MAX_WITNESSES} are allowed",
                list.value.len()
            );
            self.sink.error("out_of_range", list.pos, message, None);
            return None;
        }
        let mut names = HashSet::new();
        let mut ok = true;
        let mut witnesses = Vec::new();
        for raw in &list.value {
            let Some(witness) = self.witness(raw) else {
                ok = false;
                continue;
            };
            if !names.insert(witness.name().to_owned()) {
                let message = format!("witness {} is listed twice", witness.name());
                let help = "each witness counts once towards the quorum; remove the repeat";
                self.sink
                    .error("duplicate_witness", raw.pos, message, Some(help.into()));
                ok = false;
            }
            witnesses.push(witness);
        }
        ok.then_some(witnesses)
    }

    fn witness(&mut self, raw: &Located<RawWitness>) -> Option<WitnessRef> {
        let help = "write {url: http://witness.example.org:7710, key: <its verifier key>}, the key as `constle witness serve` prints it";
        let url = self
            .required(&raw.value.url, "audit.witnesses[].url", raw.pos, help)
            .and_then(|u| self.witness_url(u));
        let key = self
            .required(&raw.value.key, "audit.witnesses[].key", raw.pos, help)
            .and_then(|k| self.check(k, "invalid_witness_key", check_witness_key));
        Some(WitnessRef {
            url: url?,
            key: key?,
        })
    }

    /// A witness URL may be plain http to any host: what goes there is a
    /// signed checkpoint (sizes and hashes, no entry), and what comes back
    /// is checked against the witness's key, so TLS adds no integrity.
    fn witness_url(&mut self, value: &Located<String>) -> Option<HttpUrl> {
        match HttpUrl::parse_inner(&value.value) {
            Ok(url) => {
                self.secret_url_warning(value, &url, "audit.witnesses[].url");
                Some(url)
            }
            Err(e) => {
                self.sink.error("invalid_url", value.pos, e.message, e.help);
                None
            }
        }
    }

    fn witness_quorum(&mut self, a: &RawAudit, n: usize) -> Option<(usize, bool)> {
        let required = a
            .witness_quorum_required
            .0
            .as_ref()
            .is_some_and(|r| r.value);
        let quorum = match &a.witness_quorum.0 {
            None => n,
            Some(q) => match usize::try_from(q.value) {
                Ok(k) if (1..=n).contains(&k) => k,
                _ => {
                    let message = match n {
                        0 => "audit.witness_quorum is set but no witness is listed".to_owned(),
                        _ => format!(
                            "audit.witness_quorum is {}; with {n} witnesses it must be from 1 to {n}",
                            q.value
                        ),
                    };
                    let help = "write how many of audit.witnesses must cosign each checkpoint";
                    self.sink
                        .error("out_of_range", q.pos, message, Some(help.into()));
                    return None;
                }
            },
        };
        if let Some(r) = a.witness_quorum_required.0.as_ref().filter(|_| n == 0) {
            let message = "audit.witness_quorum_required is set but no witness is listed";
            let help = "list the witnesses under audit.witnesses, or remove it";
            self.sink.error(
                "quorum_without_witnesses",
                r.pos,
                message,
                Some(help.into()),
            );
            return None;
        }
        Some((quorum, required))
    }

    /// Witnesses cosign signed checkpoints of a named origin: the log must
    /// be signed, and the deployment the Agentfile's own.
    fn witness_prerequisites(
        &mut self,
        list: &Located<Vec<Located<RawWitness>>>,
        a: &RawAudit,
        identity: bool,
    ) -> Option<()> {
        if !identity {
            self.sink.error(
                "witnesses_require_identity",
                list.key_pos(),
                "audit.witnesses needs the agent's identity: checkpoints are signed with its DID key",
                Some("add `identity: {did: did:key:…}` (see `constle keygen`)".to_string()),
            );
            return None;
        }
        if a.deployment.0.is_none() {
            self.sink.error(
                "witnesses_require_deployment",
                list.key_pos(),
                "audit.witnesses needs audit.deployment: witnesses keep one state per origin, so it must be unique to this installation",
                Some("add `deployment: ci.example.com` under audit, a name under a domain you control".to_string()),
            );
            return None;
        }
        Some(())
    }
}

/// `audit.deployment`: the rule is [`Deployment::new`]'s, the one the run
/// and the witnesses name the log's origin by.
fn check_deployment(s: &str) -> Result<String, InvalidValue> {
    Deployment::new(s)
        .map(|d| d.as_str().to_owned())
        .map_err(|e| InvalidValue {
            message: format!("audit.deployment: {e}"),
            help: Some(
                "write lowercase labels of a-z, 0-9 and - joined by dots, e.g. ci.example.com"
                    .to_string(),
            ),
        })
}

/// `audit.witnesses[].key`, read by [`WitnessKey::from_vkey`]: as strictly
/// as the run that submits checkpoints to the witness reads it.
fn check_witness_key(s: &str) -> Result<WitnessKey, InvalidValue> {
    WitnessKey::from_vkey(s).map_err(|e| InvalidValue {
        message: format!("audit.witnesses[].key is not a witness verifier key: {e}"),
        help: Some(
            "write the key `constle witness serve` prints: <name>+<key ID>+<base64>".to_string(),
        ),
    })
}
