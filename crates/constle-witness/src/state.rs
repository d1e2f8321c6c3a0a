//! The witness's state: per origin, the checkpoint it last cosigned, one
//! file each under the state directory.
//!
//! The file `<dir>/<origin, each "/" written "%2F">.head` holds exactly
//!
//! ```text
//! constle-witness-head/v2
//! <origin>
//! <size, decimal>
//! <root, base64>
//!
//! — <origin> <the log key's signature>
//! — <witness name> <the witness's cosignature>
//! ```
//!
//! that is, the format line and the cosigned checkpoint as one signed note:
//! the head it names is the one the witness checks the next submission
//! against, and the note is what it serves monitors. A file written before
//! checkpoints were kept reads too:
//!
//! ```text
//! constle-witness-head/v1
//! <origin>
//! <size, decimal>
//! <root, base64>
//! ```
//!
//! the head alone, until the witness cosigns again and writes `v2`.
//!
//! Every line ends in a newline. It is written to `.<file>.tmp` (0600),
//! fsynced, renamed over the old one and the directory fsynced, before the
//! witness answers; so after a crash the file is the old head or the new
//! one, never a mix, and never older than a cosignature given out.
//!
//! Damage is refused, never repaired: a file that does not read back
//! exactly in that form (or names another origin, or is reachable by other
//! users), and a file that vanished after this process saw it (at start or
//! by writing it), make [`StateDir::load`] fail with the path. A file
//! missing since start is read as "never cosigned": a witness cannot tell
//! a deleted file from a new log after a restart, so deleting one is the
//! operator's (deliberate) reset of that log.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use constle_store::replace::replace_via;
use constle_tlog::{Hash, SignedCheckpoint, TreeHead};

use crate::error::{StateError, WitnessError};

/// The first line of a state file holding the head alone.
const MAGIC_V1: &str = "constle-witness-head/v1";
/// The first line of a state file holding the cosigned checkpoint.
const MAGIC: &str = "constle-witness-head/v2";
/// A state file is under 1 300 bytes (an origin and a witness name of at
/// most 255 bytes, each twice at most); anything larger is damage.
const MAX_STATE_BYTES: u64 = 4096;
/// The longest file name most file systems take.
const MAX_FILE_NAME: usize = 255;
/// Held by the witness using the directory, so that two cannot share it.
const LOCK: &str = "lock";

/// What the witness keeps of one log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The tree head last cosigned.
    pub head: TreeHead,
    /// That checkpoint, signed by the log and cosigned by the witness;
    /// `None` in a file written before checkpoints were kept (`v1`).
    pub checkpoint: Option<SignedCheckpoint>,
}

/// The state directory, locked for this process.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
    /// Origins whose file this process has seen or written: its absence
    /// afterwards is damage, not a fresh start.
    seen: Mutex<HashSet<String>>,
    /// Held (exclusive `flock`) while the witness runs.
    _lock: File,
}

/// The file name of `origin`'s state.
pub fn file_name(origin: &str) -> String {
    format!("{}.head", origin.replace('%', "%25").replace('/', "%2F"))
}

impl StateDir {
    /// Opens (creating, mode 0700) `dir` and takes its lock.
    ///
    /// # Errors
    ///
    /// [`WitnessError::StateDir`] if it cannot be created, is reachable by
    /// other users, or another witness holds its lock.
    pub fn open(dir: &Path) -> Result<StateDir, WitnessError> {
        let fail = |why: String| WitnessError::StateDir {
            path: dir.to_owned(),
            why,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(format!("cannot create it: {e}")))?;
        let meta = fs::symlink_metadata(dir).map_err(|e| fail(e.to_string()))?;
        if !meta.is_dir() {
            return Err(fail("it is not a directory".to_owned()));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(fail(format!(
                "its mode is {mode:04o}, so other users may change it; it must be 0700 (chmod 700 {})",
                dir.display()
            )));
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(LOCK))
            .map_err(|e| fail(format!("cannot open its lock file: {e}")))?;
        lock.try_lock()
            .map_err(|_| fail("another witness is using it".to_owned()))?;
        sync_dir(dir).map_err(|e| fail(format!("cannot fsync it: {e}")))?;
        Ok(StateDir {
            dir: dir.to_owned(),
            seen: Mutex::new(HashSet::new()),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where `origin`'s state is kept.
    pub fn file(&self, origin: &str) -> PathBuf {
        self.dir.join(file_name(origin))
    }

    /// Whether `origin`'s file name fits a file system's limit.
    pub(crate) fn fits(origin: &str) -> bool {
        file_name(origin).len() + ".tmp".len() < MAX_FILE_NAME
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // The set stays consistent even if a holder panicked.
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What was last cosigned for `origin`, `None` if never.
    ///
    /// # Errors
    ///
    /// [`StateError`] with the path, for a file that cannot be read, does
    /// not parse strictly, or vanished after this process saw it.
    pub fn load(&self, origin: &str) -> Result<Option<Stored>, StateError> {
        let path = self.file(origin);
        let damaged = |why: String| StateError {
            path: path.clone(),
            why,
        };
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match self.seen().contains(origin) {
                    true => Err(damaged(
                        "it vanished after the witness read or wrote it; restore it from a backup"
                            .to_owned(),
                    )),
                    false => Ok(None),
                };
            }
            Err(e) => return Err(damaged(format!("cannot read it: {e}"))),
        };
        if !meta.is_file() {
            return Err(damaged("it is not a regular file".to_owned()));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(damaged(format!("its mode is {mode:04o}; it must be 0600")));
        }
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| f.take(MAX_STATE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| damaged(format!("cannot read it: {e}")))?;
        let stored = parse(&bytes, origin).map_err(|why| damaged(why.to_owned()))?;
        self.seen().insert(origin.to_owned());
        Ok(Some(stored))
    }

    /// Stores `cosigned` (the checkpoint with the log's signature and the
    /// witness's cosignature) as `origin`'s, durably, before returning.
    ///
    /// # Errors
    ///
    /// [`StateError`] with the path of what could not be written or
    /// synced; the old file is then still in place, or the new one is.
    pub fn store(&self, origin: &str, cosigned: &SignedCheckpoint) -> Result<(), StateError> {
        let path = self.file(origin);
        // Only this process writes here (the lock), one origin at a time
        // (the caller's lock), so one temporary name is enough; what a
        // crash left there is taken over.
        let temp = format!(".{}.tmp", file_name(origin));
        replace_via(&path, &temp, &encode(cosigned), 0o600).map_err(|err| {
            if err.in_place() {
                self.seen().insert(origin.to_owned());
            }
            let (step, at, e) = err.into_parts();
            StateError {
                path: at,
                why: format!("cannot {step}: {e}"),
            }
        })?;
        self.seen().insert(origin.to_owned());
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The bytes of a state file keeping `cosigned`.
pub fn encode(cosigned: &SignedCheckpoint) -> Vec<u8> {
    let mut bytes = format!("{MAGIC}\n").into_bytes();
    bytes.extend_from_slice(cosigned.as_bytes());
    bytes
}

/// Reads a state file of either format strictly.
fn parse(bytes: &[u8], origin: &str) -> Result<Stored, &'static str> {
    let checked = |head: TreeHead| match head.size == 0 && head.root != Hash::EMPTY {
        true => Err("size 0 with another root than the empty tree's"),
        false => Ok(head),
    };
    if let Some(note) = bytes.strip_prefix(format!("{MAGIC}\n").as_bytes()) {
        let checkpoint = SignedCheckpoint::parse(note)
            .map_err(|_| "it is not a signed checkpoint after its first line")?;
        if checkpoint.claimed_origin() != origin {
            return Err("it names another origin than its file name");
        }
        if checkpoint.signature_lines().count() != 2 {
            return Err("it does not hold exactly the log's signature and the witness's");
        }
        let head = checked(checkpoint.claimed_head())?;
        return Ok(Stored {
            head,
            checkpoint: Some(checkpoint),
        });
    }
    let head = checked(parse_v1(bytes, origin)?)?;
    Ok(Stored {
        head,
        checkpoint: None,
    })
}

/// The bytes of a `v1` state file, the head alone.
fn encode_v1(origin: &str, head: TreeHead) -> Vec<u8> {
    format!("{MAGIC_V1}\n{origin}\n{}\n{}\n", head.size, head.root).into_bytes()
}

/// Reads a `v1` state file strictly: what parses re-encodes to the same bytes.
fn parse_v1(bytes: &[u8], origin: &str) -> Result<TreeHead, &'static str> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text")?;
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .ok_or("it does not end in a newline (cut short?)")?
        .split('\n')
        .collect();
    let [magic, found, size, root] = lines[..] else {
        return Err("it is not four lines: format, origin, size, root");
    };
    if magic != MAGIC_V1 {
        return Err("its first line is not `constle-witness-head/v2` or `/v1`");
    }
    if found != origin {
        return Err("it names another origin than its file name");
    }
    let size: u64 = size
        .parse()
        .ok()
        .filter(|n: &u64| n.to_string() == size)
        .ok_or("its size is not a decimal number")?;
    let root = Hash::from_base64(root).ok_or("its root is not a base64 hash")?;
    let head = TreeHead { size, root };
    if encode_v1(origin, head) != bytes {
        return Err("it is not written the one way the witness writes it");
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use constle_identity::{Name, SigningIdentity};
    use constle_tlog::{Deployment, LogKey, Origin, WitnessSigner, cosign, sign_checkpoint};

    use super::*;

    const ORIGIN: &str = "ci.example.com/constle/bot";

    fn head(size: u64) -> TreeHead {
        TreeHead {
            size,
            root: Hash([size as u8; 32]),
        }
    }

    /// The checkpoint of `head(size)`, signed by the log and cosigned.
    fn cosigned(size: u64) -> SignedCheckpoint {
        let agent = SigningIdentity::from_bytes(&[1; 32]);
        let origin = Origin::new(
            &Deployment::new("ci.example.com").unwrap(),
            &Name::new("bot").unwrap(),
        );
        let key = LogKey::new(origin, agent.did());
        let witness = WitnessSigner::new("w.example/1", SigningIdentity::from_bytes(&[2; 32]));
        let signed = match size {
            0 => TreeHead::EMPTY,
            _ => head(size),
        };
        let checkpoint = sign_checkpoint(&agent, &key, signed)
            .unwrap()
            .verify(&key)
            .unwrap();
        let cosignature = cosign(&checkpoint, &witness.unwrap(), 1).unwrap();
        checkpoint.with_cosignatures(&[cosignature.line()]).unwrap()
    }

    #[test]
    fn round_trips_and_refuses_any_other_spelling() {
        let good = encode(&cosigned(7));
        let stored = parse(&good, ORIGIN).unwrap();
        assert_eq!(stored.head, head(7));
        assert_eq!(stored.checkpoint, Some(cosigned(7)));
        let text = String::from_utf8(good.clone()).unwrap();
        let first_line = text.find('\n').unwrap();
        let log_line_only = text[..text.trim_end().rfind('\n').unwrap() + 1].to_owned();
        for bad in [
            String::new(),
            text.trim_end().to_owned(),
            text.replace("head/v2", "head/v3"),
            text.replace("\n7\n", "\n07\n"),
            text.replace("bot", "other"),
            format!("{text}\n"),
            text[first_line + 1..].to_owned(),
            log_line_only,
            format!(
                "{text}{}",
                &text[text.trim_end().rfind('\n').unwrap() + 1..]
            ),
        ] {
            assert!(parse(bad.as_bytes(), ORIGIN).is_err(), "{bad:?}");
        }
        assert!(parse(&encode(&cosigned(0)), ORIGIN).is_ok());
    }

    #[test]
    fn a_head_written_before_checkpoints_were_kept_still_reads() {
        let good = encode_v1(ORIGIN, head(7));
        let stored = parse(&good, ORIGIN).unwrap();
        assert_eq!(stored.head, head(7));
        assert_eq!(stored.checkpoint, None);
        let text = String::from_utf8(good.clone()).unwrap();
        for bad in [
            text.trim_end().to_owned(),
            text.replace("\n7\n", "\n07\n"),
            text.replace("\n7\n", "\n+7\n"),
            text.replace("bot", "other"),
            format!("{text}\n"),
            text.replace('=', ""),
        ] {
            assert!(parse(bad.as_bytes(), ORIGIN).is_err(), "{bad:?}");
        }
        assert!(parse(&encode_v1(ORIGIN, head(0)), ORIGIN).is_err());
    }

    #[test]
    fn stores_durably_and_refuses_damage_and_disappearance() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let state = StateDir::open(&dir).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(state.load(ORIGIN).unwrap(), None);
        state.store(ORIGIN, &cosigned(3)).unwrap();
        let file = state.file(ORIGIN);
        assert_eq!(
            file.file_name().unwrap(),
            "ci.example.com%2Fconstle%2Fbot.head"
        );
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let stored = state.load(ORIGIN).unwrap().unwrap();
        assert_eq!(stored.head, head(3));
        assert_eq!(stored.checkpoint, Some(cosigned(3)));
        // A second witness cannot use the same directory.
        assert!(StateDir::open(&dir).is_err());
        fs::write(&file, b"garbage\n").unwrap();
        let err = state.load(ORIGIN).unwrap_err();
        assert_eq!(err.path, file);
        assert_eq!(fs::read(&file).unwrap(), b"garbage\n");
        fs::remove_file(&file).unwrap();
        assert!(state.load(ORIGIN).unwrap_err().why.contains("vanished"));
    }
}
