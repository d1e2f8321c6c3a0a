//! The receipt file: read as the log's files are read (a regular file, of
//! bounded size, opened without blocking), written atomically with mode
//! 0644 (a receipt is for handing out).

use std::path::Path;

use constle_store::replace::replace;

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
    // Whatever the umask: a receipt is for handing out.
    replace(path, &receipt.to_bytes(), 0o644).map_err(|err| {
        let (op, path, source) = err.into_parts();
        FileError::Write { op, path, source }
    })?;
    Ok(())
}
