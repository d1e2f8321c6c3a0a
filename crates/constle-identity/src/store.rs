//! [`KeyStore`]: the private-key directory `$CONSTLE_HOME/keys`.
//!
//! Layout: `keys/agent/<name>.pem`, `keys/approver/<name>.pem` and
//! `keys/witness/<name>.pem`, PKCS#8 v1
//! PEM, mode 0600, in directories of mode 0700. The store fails closed: it
//! refuses directories or key files that group or others can access instead
//! of quietly fixing them, and it never overwrites a key.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use constle_store::ReplaceError;
use constle_store::replace::create_new;

use crate::did::DidKey;
use crate::name::Name;
use crate::signing::{KeyError, SigningIdentity};

/// Mode of the store's directories.
const DIR_MODE: u32 = 0o700;

/// Mode of key files.
const FILE_MODE: u32 = 0o600;

/// Key files larger than this are refused unread: a PEM Ed25519 key is ~120 bytes.
const MAX_KEY_FILE_LEN: u64 = 16 * 1024;

/// Key file extension.
const EXTENSION: &str = "pem";

/// Which kind of key, and so which subdirectory of `keys/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// An agent's identity key (`keys/agent/`): signs its audit log and A2A messages.
    Agent,
    /// A human approver's key (`keys/approver/`): signs webhook gate decisions.
    Approver,
    /// A witness's key (`keys/witness/`): signs cosignatures of other logs'
    /// checkpoints (`constle witness serve`).
    Witness,
}

impl KeyKind {
    /// The subdirectory name under `keys/`: `agent`, `approver` or `witness`.
    pub fn dir_name(self) -> &'static str {
        match self {
            KeyKind::Agent => "agent",
            KeyKind::Approver => "approver",
            KeyKind::Witness => "witness",
        }
    }

    /// The CLI command that makes a key of this kind.
    pub fn keygen_command(self) -> &'static str {
        match self {
            KeyKind::Agent => "constle keygen",
            KeyKind::Approver => "constle webhook-keygen",
            KeyKind::Witness => "constle witness-keygen",
        }
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// What went wrong in the key store. Every message names the path involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyStoreError {
    /// An I/O operation failed.
    #[error("could not {action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A path that must be a directory is something else.
    #[error(
        "{path} is not a directory; move it away so Constle can create its key directory there"
    )]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },

    /// A store directory is accessible to group or others.
    #[error(
        "{path} has mode {mode:04o}, which lets other users reach private keys; run `chmod 700 {path}` and check nobody copied the keys"
    )]
    InsecureDirectory {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },

    /// A key file is accessible to group or others.
    #[error(
        "key file {path} has mode {mode:04o}, readable by other users; run `chmod 600 {path}`, and if others could read it, replace the key"
    )]
    InsecureKeyFile {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },

    /// A key file is a symlink, directory or other non-regular file.
    #[error(
        "key file {path} is not a regular file (a symlink, directory or device); replace it with the key file itself"
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
    },

    /// A key file is implausibly large.
    #[error(
        "key file {path} is {len} bytes, too large for an Ed25519 key (at most {max}); it is not a Constle key file, move it out of the key directory"
    )]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
        /// The limit.
        max: u64,
    },

    /// A key with this name already exists; keys are never overwritten.
    #[error(
        "key file {path} already exists; Constle never overwrites a key: choose another name, or move the old file away yourself if you really mean to replace it"
    )]
    Exists {
        /// The existing key file.
        path: PathBuf,
    },

    /// No key file of that kind and name.
    #[error("no {kind} key file at {path}; create one with `{command} {name}`")]
    MissingKeyFile {
        /// The kind looked for.
        kind: KeyKind,
        /// The name looked for.
        name: Name,
        /// The path looked at.
        path: PathBuf,
        /// The command that creates such a key.
        command: &'static str,
    },

    /// No key file of that kind holds the private key for the DID.
    #[error(
        "no {kind} key in {dir} belongs to {did}; if the key lives elsewhere, copy its file into {dir} (mode 0600); otherwise create a new key with `{command} NAME` and use its DID instead"
    )]
    NotFound {
        /// The kind looked for.
        kind: KeyKind,
        /// The DID looked for (boxed: a `DidKey` is large).
        did: Box<DidKey>,
        /// The directory searched.
        dir: PathBuf,
        /// The command that creates such a key.
        command: &'static str,
    },

    /// A key file could not be read as a key.
    #[error("key file {path} is not usable: {source}")]
    BadKeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong with its content.
        #[source]
        source: KeyError,
    },
}

/// The private-key directory, `$CONSTLE_HOME/keys`.
#[derive(Debug, Clone)]
pub struct KeyStore {
    dir: PathBuf,
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> KeyStoreError {
    let path = path.to_path_buf();
    move |source| KeyStoreError::Io {
        action,
        path,
        source,
    }
}

/// Create `path` as a 0700 directory if missing; then insist it is a
/// directory without group or other permissions.
fn ensure_private_dir(path: &Path, recursive: bool) -> Result<(), KeyStoreError> {
    let created = match fs::DirBuilder::new()
        .recursive(false)
        .mode(DIR_MODE)
        .create(path)
    {
        Ok(()) => true,
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => false,
        Err(err) if err.kind() == io::ErrorKind::NotFound && recursive => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(path)
                .map_err(io_err("create directory", path))?;
            true
        }
        Err(err) => return Err(io_err("create directory", path)(err)),
    };
    if created {
        // The umask may have taken bits away; make it exactly 0700.
        fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
            .map_err(io_err("set permissions of", path))?;
    }
    check_private_dir(path)
}

/// Insist `path` is a directory without group or other permissions.
fn check_private_dir(path: &Path) -> Result<(), KeyStoreError> {
    let meta = fs::metadata(path).map_err(io_err("read metadata of", path))?;
    if !meta.is_dir() {
        return Err(KeyStoreError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyStoreError::InsecureDirectory {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

impl KeyStore {
    /// Open the key store under `home` (`$CONSTLE_HOME`), creating `home`,
    /// `home/keys` and `home/keys/agent`, `approver` and `witness` with mode
    /// 0700 where missing.
    ///
    /// # Errors
    ///
    /// [`KeyStoreError::InsecureDirectory`] if any of them exists with group
    /// or other permission bits (the message says which `chmod 700` to run);
    /// [`KeyStoreError::NotADirectory`] or [`KeyStoreError::Io`] otherwise.
    pub fn open(home: &Path) -> Result<KeyStore, KeyStoreError> {
        ensure_private_dir(home, true)?;
        let dir = home.join("keys");
        ensure_private_dir(&dir, false)?;
        let store = KeyStore { dir };
        for kind in [KeyKind::Agent, KeyKind::Approver, KeyKind::Witness] {
            ensure_private_dir(&store.kind_dir(kind), false)?;
        }
        Ok(store)
    }

    /// The store's directory, `$CONSTLE_HOME/keys`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding keys of `kind`.
    pub fn kind_dir(&self, kind: KeyKind) -> PathBuf {
        self.dir.join(kind.dir_name())
    }

    /// The path of the key file of `kind` called `name`.
    pub fn key_path(&self, kind: KeyKind, name: &Name) -> PathBuf {
        self.kind_dir(kind).join(format!("{name}.{EXTENSION}"))
    }

    /// Generate a new key of `kind` called `name`; return its DID and file.
    ///
    /// The key is written to a temporary file (mode 0600), fsynced, then
    /// renamed to its final name by a rename that fails if that name exists;
    /// the directory is then fsynced ([`create_new`]). A crash never leaves
    /// a half-written file under the final name, and an existing key is
    /// never replaced.
    ///
    /// # Errors
    ///
    /// [`KeyStoreError::Exists`] if the key file already exists; I/O and
    /// permission errors naming the path.
    pub fn generate(&self, kind: KeyKind, name: &Name) -> Result<(DidKey, PathBuf), KeyStoreError> {
        let dir = self.kind_dir(kind);
        check_private_dir(&dir)?;
        let path = self.key_path(kind, name);
        if fs::symlink_metadata(&path).is_ok() {
            return Err(KeyStoreError::Exists { path });
        }
        let identity = SigningIdentity::generate();
        let pem = identity.to_pkcs8_pem();

        create_new(&path, pem.as_bytes(), FILE_MODE).map_err(|err| match err {
            ReplaceError::Exists { path } => KeyStoreError::Exists { path },
            other => {
                let (action, path, source) = other.into_parts();
                KeyStoreError::Io {
                    action,
                    path,
                    source,
                }
            }
        })?;
        Ok((identity.did().clone(), path))
    }

    /// Load the key of `kind` called `name`.
    ///
    /// # Errors
    ///
    /// [`KeyStoreError::MissingKeyFile`] if there is no such file;
    /// [`KeyStoreError::InsecureKeyFile`] if group or others can access it;
    /// [`KeyStoreError::BadKeyFile`] if it is not an Ed25519 PKCS#8 key.
    pub fn load(&self, kind: KeyKind, name: &Name) -> Result<SigningIdentity, KeyStoreError> {
        check_private_dir(&self.kind_dir(kind))?;
        let path = self.key_path(kind, name);
        match fs::symlink_metadata(&path) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                Err(KeyStoreError::MissingKeyFile {
                    kind,
                    name: name.clone(),
                    path,
                    command: kind.keygen_command(),
                })
            }
            Err(err) => Err(io_err("read metadata of", &path)(err)),
            Ok(_) => load_key_file(&path),
        }
    }

    /// Find the key of `kind` whose DID is `did`, by reading every key file
    /// of that kind.
    ///
    /// # Errors
    ///
    /// [`KeyStoreError::NotFound`] if no key file matches. A key file that
    /// others can read, or that is not a key, is an error too (it is not
    /// skipped): the message names it.
    pub fn find(&self, kind: KeyKind, did: &DidKey) -> Result<SigningIdentity, KeyStoreError> {
        let dir = self.kind_dir(kind);
        check_private_dir(&dir)?;
        let mut paths = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err("list directory", &dir))? {
            let entry = entry.map_err(io_err("list directory", &dir))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            // Only `<Name>.pem`: this skips temporary files (they start with '.').
            let is_key_file = file_name
                .strip_suffix(".pem")
                .is_some_and(|stem| Name::new(stem).is_ok());
            if is_key_file {
                paths.push(entry.path());
            }
        }
        paths.sort();
        for path in paths {
            let identity = load_key_file(&path)?;
            if identity.did() == did {
                return Ok(identity);
            }
        }
        Err(KeyStoreError::NotFound {
            kind,
            did: Box::new(did.clone()),
            dir,
            command: kind.keygen_command(),
        })
    }
}

/// Read and parse one key file, refusing anything but a private regular file.
fn load_key_file(path: &Path) -> Result<SigningIdentity, KeyStoreError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("read metadata of", path))?;
    if !meta.file_type().is_file() {
        return Err(KeyStoreError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut file = File::open(path).map_err(io_err("open", path))?;
    // Check the file actually opened, not the name looked at before.
    let meta = file.metadata().map_err(io_err("read metadata of", path))?;
    if !meta.is_file() {
        return Err(KeyStoreError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyStoreError::InsecureKeyFile {
            path: path.to_path_buf(),
            mode,
        });
    }
    if meta.len() > MAX_KEY_FILE_LEN {
        return Err(KeyStoreError::TooLarge {
            path: path.to_path_buf(),
            len: meta.len(),
            max: MAX_KEY_FILE_LEN,
        });
    }
    // Capacity for the whole file up front so the secret is never left
    // behind in a reallocated buffer.
    let mut text = zeroize::Zeroizing::new(String::with_capacity(
        usize::try_from(MAX_KEY_FILE_LEN + 1).unwrap_or(16 * 1024 + 1),
    ));
    let read = (&mut file)
        .take(MAX_KEY_FILE_LEN + 1)
        .read_to_string(&mut text);
    match read {
        Ok(len) if len as u64 > MAX_KEY_FILE_LEN => Err(KeyStoreError::TooLarge {
            path: path.to_path_buf(),
            len: len as u64,
            max: MAX_KEY_FILE_LEN,
        }),
        Ok(_) => {
            SigningIdentity::from_pkcs8_pem(&text).map_err(|source| KeyStoreError::BadKeyFile {
                path: path.to_path_buf(),
                source,
            })
        }
        Err(err) if err.kind() == io::ErrorKind::InvalidData => Err(KeyStoreError::BadKeyFile {
            path: path.to_path_buf(),
            source: KeyError::NotPem {
                reason: "the file is not UTF-8 text".to_owned(),
            },
        }),
        Err(err) => Err(io_err("read", path)(err)),
    }
}
