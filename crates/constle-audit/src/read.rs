//! Reading the log's files: only regular files (links followed), opened
//! without blocking, and at most a bounded number of bytes. A FIFO named
//! like a day file would otherwise hang a reader forever, and a link to
//! `/dev/zero` fill its memory. The verifier opens the writers' lock file
//! the same way.

use std::fs::{self, File, FileType, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::OFlag;

/// The largest day file the verifier and `audit show` read: they hold a
/// file in memory, with a parsed entry per line.
pub const MAX_LOG_FILE_BYTES: u64 = 1 << 30;
/// The largest head anchor read; the writer's are a few hundred bytes.
pub(crate) const MAX_HEAD_BYTES: u64 = 64 * 1024;

/// Why one of the log's files was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Not a regular file, after following links: nothing the writer makes.
    #[error("{}: not a regular file ({kind}); only the log's own files are read", .path.display())]
    NotRegular {
        /// The path as given.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Longer than the bound for its kind of file.
    #[error("{}: larger than {max} bytes, the most this reads", .path.display())]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// The bound.
        max: u64,
    },
    /// A writer kept the log's lock while the files were between two
    /// states of its append, so no consistent reading could be had.
    #[error(
        "{}: a writer held this lock for {} s while the log was mid-append; verify again",
        .path.display(),
        .waited.as_secs()
    )]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// How long the reader waited.
        waited: Duration,
    },
    /// The operating system refused.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path as given.
        path: PathBuf,
        /// What it said.
        source: io::Error,
    },
}

impl ReadError {
    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Reads a day file whole, within [`MAX_LOG_FILE_BYTES`].
///
/// # Errors
///
/// [`ReadError`] if it is not a regular file, is too large, or cannot be
/// read.
pub fn read_log_file(path: &Path) -> Result<Vec<u8>, ReadError> {
    read_bounded(path, MAX_LOG_FILE_BYTES)
}

/// Reads the regular file at `path` (links followed) whole, if it holds at
/// most `max` bytes: for the files that come with a log (a cosigned
/// checkpoint, a run receipt), read as carefully as the log's own.
///
/// # Errors
///
/// As [`read_log_file`].
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_for_reading(path)?;
    let meta = file.metadata().map_err(|source| io_error(path, source))?;
    let too_large = || ReadError::TooLarge {
        path: path.to_owned(),
        max,
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte more than allowed shows a file that grew while being read.
    File::take(file, max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| io_error(path, source))?;
    match bytes.len() as u64 > max {
        true => Err(too_large()),
        false => Ok(bytes),
    }
}

/// Opens the regular file at `path` (links followed) for reading, without
/// blocking.
pub(crate) fn open_for_reading(path: &Path) -> Result<File, ReadError> {
    // Looked at before opening, since opening a device can act on it.
    let meta = fs::metadata(path).map_err(|source| io_error(path, source))?;
    regular(path, &meta.file_type())?;
    // Non-blocking, and never the controlling terminal: what was looked at
    // may have been swapped for a FIFO or a terminal since.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|source| io_error(path, source))?;
    let meta = file.metadata().map_err(|source| io_error(path, source))?;
    regular(path, &meta.file_type())?;
    Ok(file)
}

fn io_error(path: &Path, source: io::Error) -> ReadError {
    ReadError::Io {
        path: path.to_owned(),
        source,
    }
}

fn regular(path: &Path, kind: &FileType) -> Result<(), ReadError> {
    let kind = match kind {
        k if k.is_file() => return Ok(()),
        k if k.is_dir() => "a directory",
        k if k.is_fifo() => "a FIFO",
        k if k.is_char_device() => "a character device",
        k if k.is_block_device() => "a block device",
        k if k.is_socket() => "a socket",
        _ => "not a file",
    };
    Err(ReadError::NotRegular {
        path: path.to_owned(),
        kind,
    })
}
