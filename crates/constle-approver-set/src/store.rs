//! The set directory, the store of versions accepted, and
//! [`ApproverSets::load`], which checks one against the other and yields
//! the version [`InForce`].
//!
//! The store (`$CONSTLE_HOME/approvers/<pin hex>/`, 0700) keeps a copy of
//! every version ever accepted for a pin, `<N>.approvers.json` (0600), each
//! written to a temporary file, fsynced, renamed into place and the
//! directory fsynced, in order, so it never has a gap. It is read again
//! in full at every load and verified from the pin like the set directory.
//!
//! A rollback (the store holds a version the set directory no longer
//! offers) is refused, even though the store's copies would continue the
//! chain: a set directory that lost its newest versions has been put back,
//! by an attacker or a stale checkout, and someone should look before a
//! run goes on. The error says where the copies are.
//!
//! A load holds an exclusive `flock` on `<store>/lock` from reading the
//! store to writing it, so two runs that offer two different versions N
//! cannot both have theirs accepted.
//!
//! Any damage to the store is refused with its path, never repaired or
//! reset: a version file that does not parse or chain, a version missing
//! below a higher one, a copy that differs from the set directory's
//! version of the same number (a fork: two different versions N, both
//! signed), a directory that other users can reach.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::io::{self, Read as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use constle_identity::DidKey;
use constle_store::ReplaceError;
use constle_store::replace::{create_new, replace};
use jiff::Timestamp;

use crate::MAX_FILE_BYTES;
use crate::body::Approver;
use crate::digest::{SetDigest, SetPin};
use crate::error::{ApproverSetError, Location};
use crate::file::VersionFile;
use crate::verify::{VerifiedVersion, verify_next};

const SUFFIX: &str = ".approvers.json";
/// The mode of every version file written.
const FILE_MODE: u32 = 0o600;
const LOCK: &str = "lock";

/// The file name of version `n`: `<n>.approvers.json`.
pub fn version_file_name(n: u64) -> String {
    format!("{n}{SUFFIX}")
}

/// Where constle keeps the versions accepted for `pin`:
/// `<home>/approvers/<pin hex>/`, `home` being `$CONSTLE_HOME`.
pub fn store_dir(home: &Path, pin: &SetPin) -> PathBuf {
    home.join("approvers").join(pin.hex())
}

/// The version of the approver set in force: the newest one the set
/// directory offers, verified along the whole chain from the pin, not
/// expired, and no older than any version accepted before. Only
/// [`ApproverSets::load`] makes one.
#[derive(Clone, Debug)]
pub struct InForce {
    pin: SetPin,
    version: VerifiedVersion,
    path: PathBuf,
}

impl InForce {
    /// The pin the chain starts from.
    pub fn pin(&self) -> SetPin {
        self.pin
    }

    /// The version number.
    pub fn version(&self) -> u64 {
        self.version.version()
    }

    /// Its digest.
    pub fn digest(&self) -> SetDigest {
        self.version.digest()
    }

    /// How many distinct approvers must agree.
    pub fn threshold(&self) -> usize {
        self.version.threshold()
    }

    /// The approvers.
    pub fn approvers(&self) -> &[Approver] {
        self.version.approvers()
    }

    /// When it expires.
    pub fn expires(&self) -> Timestamp {
        self.version.expires()
    }

    /// Whether `did` is one of its approvers: a key revoked by this
    /// version is not.
    pub fn contains(&self, did: &DidKey) -> bool {
        self.version.contains(did)
    }

    /// The label of approver `did`, if it is one.
    pub fn label_of(&self, did: &DidKey) -> Option<&str> {
        self.version.label_of(did)
    }

    /// The verified version itself.
    pub fn verified(&self) -> &VerifiedVersion {
        &self.version
    }

    /// The set directory's file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Loading an approver set: see [`ApproverSets::load`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ApproverSets;

impl ApproverSets {
    /// The version in force of the set in `set_dir` that `pin` names,
    /// checked against and recorded in `store_dir` (constle passes
    /// `$CONSTLE_HOME/approvers/<pin hex>/`).
    ///
    /// Verifies version 1 against the pin and each later version against
    /// the one before; refuses a rollback, a fork, a damaged store and an
    /// expired newest version; copies every version not yet in the store
    /// into it (before the expiry check, so an expired version still
    /// blocks a rollback below it).
    ///
    /// # Errors
    ///
    /// An [`ApproverSetError`] naming the file or directory at fault.
    pub fn load(
        set_dir: &Path,
        pin: &SetPin,
        store_dir: &Path,
        now: Timestamp,
    ) -> Result<InForce, ApproverSetError> {
        let offered = read_versions(set_dir)?;
        if offered.is_empty() {
            return Err(ApproverSetError::NoFirstVersion {
                dir: set_dir.to_owned(),
            });
        }
        let chain = verify_files(pin, &offered)?;
        // Under the store's lock, so two runs offering two different
        // versions N cannot both be accepted.
        create_store_dir(store_dir)?;
        let _lock = lock_store(store_dir)?;
        let seen = read_store(store_dir, pin)?;
        for (n, (stored, path)) in seen.iter().enumerate() {
            let Some(here) = chain.get(n) else { break };
            if here.digest() != stored.digest() {
                return Err(ApproverSetError::Fork {
                    version: here.version(),
                    offered: Location::File(offered[n].0.clone()),
                    offered_digest: here.digest(),
                    seen: path.clone(),
                    seen_digest: stored.digest(),
                });
            }
        }
        if seen.len() > chain.len() {
            return Err(ApproverSetError::Rollback {
                seen: seen.len() as u64,
                offered: chain.len() as u64,
                set_dir: set_dir.to_owned(),
                store: store_dir.to_owned(),
            });
        }
        if chain.len() > seen.len() {
            for version in &chain[seen.len()..] {
                let path = store_dir.join(version_file_name(version.version()));
                replace(&path, version.file_bytes(), FILE_MODE).map_err(not_written)?;
            }
        }
        let path = offered
            .last()
            .map(|(path, _)| path.clone())
            .unwrap_or_default();
        let Some(newest) = chain.into_iter().next_back() else {
            return Err(ApproverSetError::NoFirstVersion {
                dir: set_dir.to_owned(),
            });
        };
        if newest.is_expired(now) {
            return Err(ApproverSetError::Expired {
                location: Location::File(path),
                version: newest.version(),
                expires: newest.expires(),
            });
        }
        Ok(InForce {
            pin: *pin,
            version: newest,
            path,
        })
    }
}

/// Verify the versions of a set directory (as [`read_versions`] returns
/// them) as a chain from `pin`, naming files in errors.
///
/// # Errors
///
/// As [`verify_chain`](crate::verify_chain).
pub fn verify_files(
    pin: &SetPin,
    files: &[(PathBuf, Vec<u8>)],
) -> Result<Vec<VerifiedVersion>, ApproverSetError> {
    let mut chain: Vec<VerifiedVersion> = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let next = verify_next(pin, chain.last(), bytes, &Location::File(path.clone()))?;
        chain.push(next);
    }
    Ok(chain)
}

/// The version files of `dir`, `1.approvers.json` up, with their bytes.
/// Other files are ignored; names that look like versions but are not
/// spelled as one, and gaps, are refused. Empty if there is no version 1.
///
/// # Errors
///
/// [`ApproverSetError::Gap`], [`ApproverSetError::BadName`],
/// [`ApproverSetError::TooLarge`], or [`ApproverSetError::Io`].
pub fn read_versions(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, ApproverSetError> {
    let numbers = list_versions(dir)?;
    let mut expected = 1;
    for &n in numbers.keys() {
        if n != expected {
            break;
        }
        expected += 1;
    }
    if let Some(found) = numbers.keys().copied().find(|&k| k > expected) {
        let missing = expected;
        if missing == 1 {
            return Err(ApproverSetError::NoFirstVersion {
                dir: dir.to_owned(),
            });
        }
        return Err(ApproverSetError::Gap {
            dir: dir.to_owned(),
            missing,
            found,
        });
    }
    numbers
        .into_values()
        .map(|path| {
            let bytes = read_limited(&path)?;
            Ok((path, bytes))
        })
        .collect()
}

/// The newest version number in `dir`, if any.
///
/// # Errors
///
/// As [`read_versions`], without reading the files.
pub fn newest_version(dir: &Path) -> Result<Option<(u64, PathBuf)>, ApproverSetError> {
    Ok(list_versions(dir)?.into_iter().next_back())
}

/// `<N>.approvers.json` files in `dir`, by number.
fn list_versions(dir: &Path) -> Result<BTreeMap<u64, PathBuf>, ApproverSetError> {
    let mut numbers = BTreeMap::new();
    let entries = fs::read_dir(dir).map_err(ApproverSetError::io("read directory", dir))?;
    for entry in entries {
        let entry = entry.map_err(ApproverSetError::io("read directory", dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
            // `.1.approvers.json.tmp-…` and the like do not end in the
            // suffix; these do but are not versions: ignore `x.approvers.json`.
            continue;
        }
        let path = entry.path();
        match stem.parse::<u64>() {
            Ok(n) if n >= 1 && version_file_name(n) == name => {
                numbers.insert(n, path);
            }
            _ => return Err(ApproverSetError::BadName { path }),
        }
    }
    Ok(numbers)
}

/// Read a file of at most [`MAX_FILE_BYTES`].
fn read_limited(path: &Path) -> Result<Vec<u8>, ApproverSetError> {
    let file = File::open(path).map_err(ApproverSetError::io("open", path))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(ApproverSetError::io("read", path))?;
    if bytes.len() > MAX_FILE_BYTES {
        let len = fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(ApproverSetError::TooLarge {
            location: Location::File(path.to_owned()),
            len,
            max: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

/// The store's versions, verified from the pin, with their paths. Empty if
/// the store directory does not exist (a set never loaded here).
fn read_store(
    dir: &Path,
    pin: &SetPin,
) -> Result<Vec<(VerifiedVersion, PathBuf)>, ApproverSetError> {
    let damaged = |path: &Path, why: String| ApproverSetError::StoreDamaged {
        path: path.to_owned(),
        why,
    };
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(ApproverSetError::io("read", dir)(err)),
    };
    if !meta.is_dir() {
        return Err(damaged(dir, "it is not a directory".to_owned()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(damaged(
            dir,
            format!(
                "its mode is {mode:04o}, so other users may change it; it must be 0700 (chmod 700 {})",
                dir.display()
            ),
        ));
    }
    let files = match read_versions(dir) {
        Ok(files) => files,
        Err(ApproverSetError::NoFirstVersion { .. }) if list_versions(dir)?.is_empty() => {
            Vec::new()
        }
        Err(ApproverSetError::NoFirstVersion { .. }) => {
            return Err(damaged(
                &dir.join(version_file_name(1)),
                "version 1 is missing while later versions are there".to_owned(),
            ));
        }
        Err(ApproverSetError::Gap { missing, found, .. }) => {
            return Err(damaged(
                &dir.join(version_file_name(missing)),
                format!("version {missing} is missing while version {found} is there"),
            ));
        }
        Err(err) => return Err(damaged(dir, err.to_string())),
    };
    let mut chain: Vec<(VerifiedVersion, PathBuf)> = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let location = Location::File(path.clone());
        let version = verify_next(pin, chain.last().map(|(v, _)| v), &bytes, &location)
            .map_err(|err| damaged(&path, err.to_string()))?;
        chain.push((version, path));
    }
    Ok(chain)
}

/// How long a load waits for another process's lock on the store. A load
/// holds it for a few small reads and writes.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// An exclusive `flock` on `<store>/lock`, released on drop.
fn lock_store(dir: &Path) -> Result<File, ApproverSetError> {
    let path = dir.join(LOCK);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(ApproverSetError::io("open lock file", &path))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(ApproverSetError::Io {
                    op: "lock",
                    path,
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("another process held it for {} s", LOCK_WAIT.as_secs()),
                    ),
                });
            }
            Err(TryLockError::Error(err)) => return Err(ApproverSetError::io("lock", &path)(err)),
        }
    }
}

fn create_store_dir(dir: &Path) -> Result<(), ApproverSetError> {
    let existed = dir.is_dir();
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(ApproverSetError::io("create directory", dir))?;
    if !existed {
        // The new entries must survive a crash like the files in them.
        for ancestor in dir
            .ancestors()
            .take(3)
            .filter(|a| !a.as_os_str().is_empty())
        {
            sync_dir(ancestor)?;
        }
    }
    Ok(())
}

/// An error of [`constle_store::replace`] as the store reports it.
fn not_written(err: ReplaceError) -> ApproverSetError {
    match err {
        ReplaceError::Exists { path } => ApproverSetError::Exists { path },
        other => {
            let (op, path, source) = other.into_parts();
            ApproverSetError::Io { op, path, source }
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), ApproverSetError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ApproverSetError::io("fsync directory", dir))
}

/// Write a new, unsigned (or signed) version into the set directory `dir`
/// as `<N>.approvers.json`, never replacing a file. Version 1 only into a
/// directory without versions; version N+1 only after version N.
///
/// # Errors
///
/// [`ApproverSetError::Exists`] or [`ApproverSetError::Gap`] if the
/// number does not come next, or a write error.
pub fn write_new_version(dir: &Path, file: &VersionFile) -> Result<PathBuf, ApproverSetError> {
    let n = file.body().version();
    let newest = newest_version(dir)?.map_or(0, |(n, _)| n);
    if newest >= n {
        return Err(ApproverSetError::Exists {
            path: dir.join(version_file_name(n)),
        });
    }
    if newest + 1 != n {
        return Err(ApproverSetError::Gap {
            dir: dir.to_owned(),
            missing: newest + 1,
            found: n,
        });
    }
    let path = dir.join(version_file_name(n));
    // Never overwrite a version.
    create_new(&path, &file.to_bytes(), FILE_MODE).map_err(not_written)?;
    Ok(path)
}

/// Replace the version file at `path` with `file` (after signing),
/// atomically, keeping its number.
///
/// # Errors
///
/// A write error, or [`ApproverSetError::Malformed`] if `path` is not
/// named for the file's version.
pub fn rewrite_version(path: &Path, file: &VersionFile) -> Result<(), ApproverSetError> {
    let name = version_file_name(file.body().version());
    if path.file_name().and_then(|n| n.to_str()) != Some(name.as_str()) {
        return Err(ApproverSetError::Malformed {
            location: Location::File(path.to_owned()),
            what: format!(
                "it holds version {} and must be named {name}",
                file.body().version()
            ),
        });
    }
    replace(path, &file.to_bytes(), FILE_MODE).map_err(not_written)?;
    Ok(())
}

/// Read and parse one version file (at most [`MAX_FILE_BYTES`]).
///
/// # Errors
///
/// A read error or a parse error naming the file.
pub fn read_version_file(path: &Path) -> Result<VersionFile, ApproverSetError> {
    let bytes = read_limited(path)?;
    VersionFile::parse(&bytes, &Location::File(path.to_owned()))
}
