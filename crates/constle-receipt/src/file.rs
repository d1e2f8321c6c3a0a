//! The receipt file: read as the log's files are read (a regular file, of
//! bounded size, opened without blocking), written atomically with mode
//! 0644 (a receipt is for handing out).

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::error::FileError;
use crate::format::{MAX_RECEIPT_BYTES, Receipt};

/// Reads and parses the receipt at `path`.
///
/// # Errors
///
/// [`FileError::Read`] if it is not a regular file of at most
/// [`MAX_RECEIPT_BYTES`] or cannot be read, [`FileError::Format`] if it
/// is not a receipt.
pub fn read_receipt(path: &Path) -> Result<Receipt, FileError> {
    let bytes =
        constle_audit::read_bounded(path, MAX_RECEIPT_BYTES as u64).map_err(FileError::Read)?;
    Receipt::parse(&bytes).map_err(|source| FileError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Writes `receipt` to `path`, replacing what is there: to a new file
/// beside it (mode 0644), synced, renamed into place, the directory synced.
/// A reader sees the old file or the whole new one.
///
/// # Errors
///
/// [`FileError::Write`] naming the step and the path that failed; the old
/// file is then still in place.
pub fn write_receipt(path: &Path, receipt: &Receipt) -> Result<(), FileError> {
    let failed = |op, at: &Path| {
        let at = at.to_owned();
        move |source| FileError::Write {
            op,
            path: at,
            source,
        }
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        failed("name", path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no file",
        ))
    })?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    // A leftover of a crashed writer of this pid; never followed if a link.
    let _ = fs::remove_file(&temp);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
            .map_err(failed("create", &temp))?;
        // Whatever the umask: a receipt is for handing out.
        file.set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(failed("chmod", &temp))?;
        file.write_all(&receipt.to_bytes())
            .map_err(failed("write", &temp))?;
        file.sync_all().map_err(failed("fsync", &temp))?;
        fs::rename(&temp, path).map_err(failed("rename into place", path))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(failed("fsync the directory", &dir))
}
