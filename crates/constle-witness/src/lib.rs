//! A witness for Constle's logs, per c2sp.org/tlog-witness: it knows the
//! logs it witnesses (origin and verifier key), and for each submitted
//! checkpoint that extends what it cosigned before, stores the new tree
//! head durably and answers a `cosignature/v1` (c2sp.org/tlog-cosignature).
//! `constle witness serve` runs it (docs/witness.md).
//!
//! The decisions are `constle_tlog`'s ([`check_submission`]); this crate
//! adds what a server needs around them:
//!
//! - [`Logs::read`]: the logs file, one log verifier key per line.
//! - [`Witness::add_checkpoint`]: one `POST /add-checkpoint`, from body to
//!   [`Answer`]. Per origin, loading the stored head, checking, storing the
//!   new head and cosigning run under one lock, so two submissions against
//!   the same old head cannot both pass (the spec's race); and the stored
//!   head is the only source of the old state, so no size is ever cosigned
//!   with two roots.
//! - [`StateDir`]: one file per origin, written atomically and durably
//!   before the 200 (kill -9 at any point loses nothing answered), read
//!   strictly at start and at each use; damage is answered 500 with the
//!   path in the operator's log, never reset.
//! - [`serve`]: the HTTP server (axum).
//!
//! | answer | when |
//! |---|---|
//! | 200, the cosignature line | cosigned, after the new head is on disk |
//! | 400 | a malformed body, or an old size above the checkpoint's |
//! | 403 | no valid signature by the log's key |
//! | 404 | an origin the witness does not witness |
//! | 409, `<latest size>\n` (`text/x.tlog.size`) | the old size is not the size last cosigned |
//! | 422 | a consistency proof that does not verify, or another root for the size last cosigned |
//! | 500 | this log's state file is damaged or cannot be written |
//!
//! ```
//! use constle_identity::{Name, SigningIdentity};
//! use constle_tlog::{AddCheckpoint, Deployment, LogKey, LogTree, Origin, WitnessSigner, sign_checkpoint};
//! use constle_witness::{Logs, StateDir, Witness};
//!
//! let agent = SigningIdentity::from_bytes(&[1; 32]);
//! let origin = Origin::new(&Deployment::new("ci.example.com")?, &Name::new("bot")?);
//! let log_key = LogKey::new(origin, agent.did());
//! let logs = Logs::parse(&format!("{}\n", log_key.vkey()), "logs".as_ref())?;
//! let signer = WitnessSigner::new("witness.example.org/w1", SigningIdentity::from_bytes(&[2; 32]))?;
//! let dir = tempfile::tempdir()?;
//! let witness = Witness::new(signer, logs, StateDir::open(&dir.path().join("state"))?);
//!
//! let mut tree = LogTree::new();
//! tree.push(b"{\"seq\":0}");
//! let checkpoint = sign_checkpoint(&agent, &log_key, tree.head())?;
//! let body = AddCheckpoint { old_size: 0, proof: vec![], checkpoint }.to_bytes();
//! let answer = witness.add_checkpoint(&body, 1_767_225_600);
//! assert_eq!(answer.status, 200);
//! assert!(answer.body.starts_with("— witness.example.org/w1 ".as_bytes()));
//! // The same old size again is stale now.
//! assert_eq!(witness.add_checkpoint(&body, 1_767_225_601).status, 409);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

mod error;
mod state;

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use constle_tlog::{
    AddCheckpoint, LogKey, MAX_CHECKPOINT_BYTES, MAX_PROOF_HASHES, Refusal, WitnessKey,
    WitnessSigner, check_submission, cosign,
};

pub use error::{StateError, WitnessError};
pub use state::StateDir;

/// The largest request body read: the old size line, 63 proof lines and
/// the largest checkpoint read.
pub const MAX_BODY_BYTES: usize = 32 + MAX_PROOF_HASHES * 45 + 1 + MAX_CHECKPOINT_BYTES;

/// The logs a witness witnesses, by origin.
#[derive(Debug, Clone)]
pub struct Logs {
    keys: HashMap<String, LogKey>,
}

impl Logs {
    /// Reads the logs file at `path`.
    ///
    /// # Errors
    ///
    /// [`WitnessError`]: unreadable, or as [`Logs::parse`].
    pub fn read(path: &Path) -> Result<Logs, WitnessError> {
        let text = std::fs::read_to_string(path).map_err(|source| WitnessError::ReadLogs {
            path: path.to_owned(),
            source,
        })?;
        Logs::parse(&text, path)
    }

    /// Reads a logs file's text: one log verifier key
    /// (`<origin>+<key ID>+<base64>`, [`LogKey::from_vkey`]) per line;
    /// blank lines and lines starting with `#` are skipped. `path` names
    /// the file in errors.
    ///
    /// # Errors
    ///
    /// [`WitnessError`] for a line that is not a log key, an origin listed
    /// twice or too long for a file name, or no log at all.
    pub fn parse(text: &str, path: &Path) -> Result<Logs, WitnessError> {
        let mut keys = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = LogKey::from_vkey(line).map_err(|source| WitnessError::LogKey {
                path: path.to_owned(),
                line: i + 1,
                source,
            })?;
            let origin = key.origin().as_str().to_owned();
            if !StateDir::fits(&origin) {
                return Err(WitnessError::OriginTooLong {
                    path: path.to_owned(),
                    line: i + 1,
                    origin,
                });
            }
            if keys.insert(origin.clone(), key).is_some() {
                return Err(WitnessError::DuplicateOrigin {
                    path: path.to_owned(),
                    line: i + 1,
                    origin,
                });
            }
        }
        if keys.is_empty() {
            return Err(WitnessError::NoLogs {
                path: path.to_owned(),
            });
        }
        Ok(Logs { keys })
    }

    /// The origins, sorted.
    pub fn origins(&self) -> Vec<&str> {
        let mut origins: Vec<&str> = self.keys.keys().map(String::as_str).collect();
        origins.sort_unstable();
        origins
    }
}

/// An answer to `add-checkpoint`: status, content type, body, and a line
/// for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// What happened, for the operator (never sent).
    pub log: String,
}

impl Answer {
    fn text(status: u16, body: String, log: String) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n").into_bytes(),
            log,
        }
    }
}

/// One log the witness witnesses: its key, and the lock that makes
/// load-check-store-cosign one step.
#[derive(Debug)]
struct Log {
    key: LogKey,
    lock: Mutex<()>,
}

/// A witness: its key, the logs it knows, their state.
pub struct Witness {
    signer: WitnessSigner,
    logs: HashMap<String, Log>,
    state: StateDir,
}

impl Witness {
    /// The witness signing as `signer`, for `logs`, keeping state in `state`.
    pub fn new(signer: WitnessSigner, logs: Logs, state: StateDir) -> Witness {
        let logs = logs
            .keys
            .into_iter()
            .map(|(origin, key)| {
                let lock = Mutex::new(());
                (origin, Log { key, lock })
            })
            .collect();
        Witness {
            signer,
            logs,
            state,
        }
    }

    /// The witness's public key, whose vkey logs are configured with.
    pub fn public(&self) -> &WitnessKey {
        self.signer.public()
    }

    /// The state directory.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Reads every log's state, as at start: each origin with its stored
    /// head (`None`: never cosigned) or why its state is refused.
    pub fn check_state(&self) -> Vec<(&str, Result<Option<constle_tlog::TreeHead>, StateError>)> {
        let mut origins: Vec<&str> = self.logs.keys().map(String::as_str).collect();
        origins.sort_unstable();
        origins
            .into_iter()
            .map(|origin| (origin, self.state.load(origin)))
            .collect()
    }

    /// Answers one `add-checkpoint` request `body`, cosigning at `now`
    /// (POSIX seconds) if it passes.
    pub fn add_checkpoint(&self, body: &[u8], now: u64) -> Answer {
        let request = match AddCheckpoint::parse(body) {
            Ok(request) => request,
            Err(err) => return Answer::text(400, err.to_string(), format!("400 {err}")),
        };
        let origin = request.checkpoint.claimed_origin();
        let Some(log) = self.logs.get(origin) else {
            return Answer::text(
                404,
                "this witness does not witness that origin".to_owned(),
                format!("404 unknown origin {origin:?}"),
            );
        };
        let checkpoint = match request.checkpoint.verify(&log.key) {
            Ok(checkpoint) => checkpoint,
            Err(err) => return Answer::text(403, err.to_string(), format!("403 {origin}: {err}")),
        };
        // Load, check, store and cosign as one step for this origin.
        let _held = log.lock.lock().unwrap_or_else(|p| p.into_inner());
        let refused = |err: StateError| {
            Answer::text(
                500,
                "this witness's state for that log is damaged; its operator must repair it"
                    .to_owned(),
                format!("500 {origin}: {err}"),
            )
        };
        let last = match self.state.load(origin) {
            Ok(last) => last,
            Err(err) => return refused(err),
        };
        let new = match check_submission(last, request.old_size, &request.proof, &checkpoint) {
            Ok(new) => new,
            Err(Refusal::StaleOldSize { old, latest }) => {
                return Answer {
                    status: 409,
                    content_type: "text/x.tlog.size",
                    body: format!("{latest}\n").into_bytes(),
                    log: format!("409 {origin}: old size {old}, last cosigned {latest}"),
                };
            }
            Err(refusal) => {
                let status = refusal.status();
                return Answer::text(
                    status,
                    refusal.to_string(),
                    format!("{status} {origin}: {refusal}"),
                );
            }
        };
        if last != Some(new)
            && let Err(err) = self.state.store(origin, new)
        {
            return refused(err);
        }
        match cosign(&checkpoint, &self.signer, now) {
            Ok(cosignature) => Answer {
                status: 200,
                content_type: "text/plain; charset=utf-8",
                body: cosignature.line().as_bytes().to_vec(),
                log: format!("200 {origin}: cosigned size {}", new.size),
            },
            Err(err) => Answer::text(
                500,
                "the witness could not cosign".to_owned(),
                format!("500 {origin}: {err}"),
            ),
        }
    }
}

/// The seconds since the Unix epoch, now.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One line of the operator's log, on standard error.
#[allow(clippy::print_stderr)]
fn log(line: &str) {
    eprintln!("witness: {line}");
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: Bytes) -> Response {
    // File system work: off the async threads.
    let answer = tokio::task::spawn_blocking(move || witness.add_checkpoint(&body, now())).await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => Answer::text(
            500,
            "the witness failed".to_owned(),
            format!("500 the request's task failed: {err}"),
        ),
    };
    log(&answer.log);
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, answer.content_type)],
        answer.body,
    )
        .into_response()
}

/// The witness's routes: `POST /add-checkpoint` only.
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(witness)
}

/// Serves `witness` on `listener` until `shutdown` completes.
///
/// # Errors
///
/// What the server's socket fails with.
pub async fn serve(
    listener: tokio::net::TcpListener,
    witness: Arc<Witness>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(witness))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests;
