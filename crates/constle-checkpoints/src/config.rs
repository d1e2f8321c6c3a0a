//! The Agentfile's `audit` section, ready for use.

use std::time::Duration;

use constle_manifest::Manifest;
use constle_tlog::{Deployment, LogKey, Origin, WitnessKey};

use crate::error::ConfigError;

/// One witness: where it is and the key its cosignatures must verify with.
#[derive(Clone, Debug)]
pub struct Witness {
    /// `<url>/add-checkpoint`.
    pub endpoint: String,
    /// The base URL with any secret shown as `***`, for messages and entries.
    pub shown_url: String,
    /// Its verifier key; its name is the witness's name.
    pub key: WitnessKey,
}

/// `<url>/add-checkpoint`, the path added before any query (which may
/// carry the witness's access token) and without any fragment.
fn endpoint(url: &str) -> String {
    let url = url.split('#').next().unwrap_or(url);
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    let path = path.trim_end_matches('/');
    match query {
        Some(query) => format!("{path}/add-checkpoint?{query}"),
        None => format!("{path}/add-checkpoint"),
    }
}

/// What the run needs to write checkpoints and have them cosigned.
#[derive(Clone, Debug)]
pub struct Witnessing {
    /// The log's origin and key.
    pub log_key: LogKey,
    /// Who is asked to cosign.
    pub witnesses: Vec<Witness>,
    /// How many distinct witnesses make a checkpoint witnessed.
    pub quorum: usize,
    /// Whether a checkpoint short of its quorum stops the run.
    pub required: bool,
    /// A round after this many new entries.
    pub every_entries: u64,
    /// A round after this long with new entries.
    pub every: Duration,
}

impl Witnessing {
    /// From the Agentfile: `Ok(None)` when the log is not signed (no
    /// `identity`), since a checkpoint is signed by the agent's key.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: a deployment the manifest let through but an
    /// origin cannot start with (it checks with the same rule, so this is
    /// for a manifest built by hand).
    pub fn from_manifest(manifest: &Manifest) -> Result<Option<Witnessing>, ConfigError> {
        let Some(identity) = &manifest.identity else {
            return Ok(None);
        };
        let audit = &manifest.audit;
        let deployment = Deployment::new(&audit.deployment).map_err(ConfigError::Deployment)?;
        let origin = Origin::new(&deployment, &manifest.name);
        let witnesses = audit
            .witnesses
            .iter()
            .map(|w| Witness {
                endpoint: endpoint(w.url.as_str()),
                shown_url: w.url.redacted(),
                key: w.key.clone(),
            })
            .collect();
        Ok(Some(Witnessing {
            log_key: LogKey::new(origin, &identity.did),
            witnesses,
            quorum: audit.witness_quorum,
            required: audit.witness_quorum_required,
            every_entries: audit.checkpoint_every_entries,
            every: Duration::from_secs(audit.checkpoint_every_seconds),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn the_path_goes_before_the_query() {
        for (url, want) in [
            (
                "http://192.0.2.1:7710",
                "http://192.0.2.1:7710/add-checkpoint",
            ),
            (
                "https://w.example/tlog/",
                "https://w.example/tlog/add-checkpoint",
            ),
            (
                "https://w.example/?token=x",
                "https://w.example/add-checkpoint?token=x",
            ),
            (
                "https://w.example/w1?token=x#f",
                "https://w.example/w1/add-checkpoint?token=x",
            ),
        ] {
            assert_eq!(endpoint(url), want);
        }
    }
}
