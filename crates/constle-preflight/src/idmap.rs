//! The `idmapped_mounts` check: an idmapped copy of the work directory's
//! mount, made exactly as the sandbox launcher makes it (`constle_idmap`),
//! then dropped. The copy is detached and vanishes with its descriptor; the
//! user namespace holding the mapping, with its last reference.

use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::classify::{self, Verdict};
use crate::needs::Needs;
use crate::report::{Check, CheckId};

/// The id the directory's owner appears as in the trial copy (any id
/// will do: nothing is written through it).
const SHOWN_AS: u32 = 65533;

/// The check: tried only when the run takes the root path, the only one
/// that uses idmapped mounts.
pub(crate) fn check(needs: &Needs) -> Check {
    let verdict = match (&needs.workdir, needs.as_root) {
        (_, false) => Verdict::unknown(
            "idmapped mounts: not tried, as only a run as root (with CAP_SYS_ADMIN) uses them"
                .to_owned(),
        ),
        (None, true) => Verdict::unknown(
            "idmapped mounts: not tried, as no work directory was given".to_owned(),
        ),
        (Some(dir), true) => try_on(dir),
    };
    verdict.check(CheckId::IdmappedMounts, needs.as_root)
}

fn try_on(dir: &Path) -> Verdict {
    let real = match existing(dir).and_then(std::fs::canonicalize) {
        Ok(real) => real,
        Err(err) => {
            return Verdict::unknown(format!(
                "idmapped mounts: not tried, as the work directory {} cannot be opened ({err})",
                dir.display()
            ));
        }
    };
    let made = idmapped_copy(&real);
    classify::idmapped(&real, crate::seen::fs_type_here(&real).as_deref(), made)
}

/// `dir`, or, when it does not exist yet (a run makes its default work
/// directory), its nearest ancestor that does, on the file system the
/// directory will be made on.
fn existing(dir: &Path) -> io::Result<PathBuf> {
    dir.ancestors()
        .find(|a| a.exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

/// Makes, and drops, an idmapped copy of the mount at `dir`.
fn idmapped_copy(dir: &Path) -> io::Result<()> {
    let opened = std::fs::File::open(dir)?;
    let meta = opened.metadata()?;
    let userns = constle_idmap::user_namespace(
        &format!("{} {SHOWN_AS} 1\n", meta.uid()),
        &format!("{} {SHOWN_AS} 1\n", meta.gid()),
    )?;
    constle_idmap::idmapped_clone(opened.as_fd(), userns.as_fd()).map(drop)
}
