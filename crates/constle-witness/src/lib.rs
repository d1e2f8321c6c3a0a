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
//!   [`Answer`]. Per origin, loading the stored head, checking, cosigning
//!   and storing the cosigned checkpoint run under one lock, so two
//!   submissions against the same old head cannot both pass (the spec's
//!   race); and the stored head is the only source of the old state, so no
//!   size is ever cosigned with two roots.
//! - [`Witness::latest_checkpoint`]: the spec's monitoring
//!   `GET /<origin hash>/checkpoint`, the checkpoint last cosigned for a
//!   log with the log's signature and the witness's cosignature, as stored.
//! - [`StateDir`]: one file per origin, written atomically and durably
//!   before the 200 (kill -9 at any point loses nothing answered), read
//!   strictly at start and at each use; damage is answered 500 with the
//!   path in the operator's log, never reset.
//! - [`serve`]: the HTTP server (axum).
//!
//! `add-checkpoint`, checked in this order:
//!
//! | answer | when |
//! |---|---|
//! | 400 | a malformed body |
//! | 404 | an origin the witness does not witness |
//! | 403 | no valid signature by the log's key, or a line by its key that does not verify |
//! | 400 | an old size above the checkpoint's |
//! | 409, `<latest size>\n` (`text/x.tlog.size`) | the old size is not the size last cosigned |
//! | 422 | a size-0 checkpoint without the empty tree's root, another root for the size last cosigned, or a consistency proof that does not verify (or is not empty from 0) |
//! | 500 | this log's state file is damaged or cannot be written |
//! | 200, the cosignature line | cosigned, after the cosigned checkpoint is on disk |
//!
//! `GET /<origin hash>/checkpoint` (the origin's SHA-256, lowercase hex):
//! 200 with the checkpoint; 404 for a log it does not witness, one it never
//! cosigned, or one whose state was written before checkpoints were kept
//! (until its next cosignature); 500 for a damaged state.
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
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use constle_tlog::{
    AddCheckpoint, LogKey, MAX_CHECKPOINT_BYTES, MAX_PROOF_HASHES, Refusal, TreeHead, WitnessKey,
    WitnessSigner, check_submission, cosign,
};
use sha2::{Digest as _, Sha256};

pub use error::{StateError, WitnessError};
pub use state::{StateDir, Stored};

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

    /// The 500 for a log whose state cannot be used.
    fn damaged(origin: &str, err: &StateError) -> Answer {
        Answer::text(
            500,
            "this witness's state for that log is damaged; its operator must repair it".to_owned(),
            format!("500 {origin}: {err}"),
        )
    }
}

/// The monitoring path's name for `origin`: its SHA-256, lowercase hex.
pub fn origin_hash(origin: &str) -> String {
    hex::encode(Sha256::digest(origin.as_bytes()))
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
    /// Each origin by its [`origin_hash`], for the monitoring path.
    by_hash: HashMap<String, String>,
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
            .collect::<HashMap<_, _>>();
        let by_hash = logs
            .keys()
            .map(|origin| (origin_hash(origin), origin.clone()))
            .collect();
        Witness {
            signer,
            logs,
            by_hash,
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
    pub fn check_state(&self) -> Vec<(&str, Result<Option<TreeHead>, StateError>)> {
        let mut origins: Vec<&str> = self.logs.keys().map(String::as_str).collect();
        origins.sort_unstable();
        origins
            .into_iter()
            .map(|origin| (origin, self.state.load(origin).map(|s| s.map(|s| s.head))))
            .collect()
    }

    /// Answers `GET /<origin hash>/checkpoint`: the checkpoint last cosigned
    /// for that log, as the witness stored it before answering its 200.
    pub fn latest_checkpoint(&self, hash: &str) -> Answer {
        let Some(origin) = self.by_hash.get(hash) else {
            return Answer::text(
                404,
                "this witness does not witness that log".to_owned(),
                format!("404 GET unknown origin hash {hash:?}"),
            );
        };
        let never =
            |why: &str| Answer::text(404, why.to_owned(), format!("404 GET {origin}: {why}"));
        match self.state.load(origin) {
            Err(err) => Answer::damaged(origin, &err),
            Ok(None) => never("this witness never cosigned a checkpoint of that log"),
            Ok(Some(Stored {
                checkpoint: None, ..
            })) => never(
                "this witness keeps no checkpoint of that log yet (its state predates them); it will from its next cosignature",
            ),
            Ok(Some(Stored {
                head,
                checkpoint: Some(checkpoint),
            })) => Answer {
                status: 200,
                content_type: "text/plain; charset=utf-8",
                body: checkpoint.as_bytes().to_vec(),
                log: format!("200 GET {origin}: checkpoint of size {}", head.size),
            },
        }
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
        // Load, check, cosign and store as one step for this origin.
        let _held = log.lock.lock().unwrap_or_else(|p| p.into_inner());
        let stored = match self.state.load(origin) {
            Ok(stored) => stored,
            Err(err) => return Answer::damaged(origin, &err),
        };
        let last = stored.as_ref().map(|s| s.head);
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
        let failed = |err: &dyn std::fmt::Display| {
            Answer::text(
                500,
                "the witness could not cosign".to_owned(),
                format!("500 {origin}: {err}"),
            )
        };
        let cosignature = match cosign(&checkpoint, &self.signer, now) {
            Ok(cosignature) => cosignature,
            Err(err) => return failed(&err),
        };
        // The same head again, once kept with a cosignature, is not
        // written again: what monitors get keeps the first cosignature.
        let kept = stored.is_some_and(|s| s.head == new && s.checkpoint.is_some());
        if !kept {
            let cosigned = match checkpoint.with_cosignatures(&[cosignature.line()]) {
                Ok(cosigned) => cosigned,
                Err(err) => return failed(&err),
            };
            if let Err(err) = self.state.store(origin, &cosigned) {
                return Answer::damaged(origin, &err);
            }
        }
        Answer {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body: cosignature.line().as_bytes().to_vec(),
            log: format!("200 {origin}: cosigned size {}", new.size),
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
    respond(move || witness.add_checkpoint(&body, now())).await
}

async fn latest_checkpoint(
    State(witness): State<Arc<Witness>>,
    UrlPath(hash): UrlPath<String>,
) -> Response {
    respond(move || witness.latest_checkpoint(&hash)).await
}

/// Runs `answer` (file system work) off the async threads, logs its line
/// and sends it.
async fn respond(answer: impl FnOnce() -> Answer + Send + 'static) -> Response {
    let answer = match tokio::task::spawn_blocking(answer).await {
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

/// The witness's routes: `POST /add-checkpoint` and, for monitors,
/// `GET /<origin hash>/checkpoint`; the submission and monitoring
/// prefixes are both the server's root.
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(latest_checkpoint))
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
