//! Paths judged by the object they name: a directory is opened first and its
//! real path read back from the descriptor, so the path that is checked is
//! the path of what will be mounted, whatever symbolic links or `..` the
//! caller's path held and whatever is swapped in afterwards.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat};

use crate::SandboxError;

/// A directory held open: what the sandbox mounts is this descriptor, and
/// every check was made against `path`, read back from it.
#[derive(Debug)]
pub(crate) struct OpenDir {
    pub fd: OwnedFd,
    /// The directory's real path: absolute, no symbolic links, no `..`.
    pub path: PathBuf,
    /// The directory's owner and group.
    pub uid: u32,
    pub gid: u32,
    /// Its device and inode.
    pub inode: (u64, u64),
}

/// Opens `path` (following symbolic links) as a directory.
pub(crate) fn open_dir(path: &Path) -> io::Result<OpenDir> {
    let fd = open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let path = fd_path(&fd)?;
    let stat = fstat(&fd)?;
    Ok(OpenDir {
        fd,
        path,
        uid: stat.st_uid,
        gid: stat.st_gid,
        inode: (stat.st_dev, stat.st_ino),
    })
}

/// What `/proc/self/fd` says the descriptor is: the kernel's own path of
/// the object, which no later rename of a link can change.
pub(crate) fn fd_path(fd: &OwnedFd) -> io::Result<PathBuf> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    // A directory that was removed reads back as "… (deleted)", not absolute
    // in a way that names it: refuse rather than trust the text.
    if !path.is_absolute() || path.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "it was removed while being opened",
        ));
    }
    Ok(path)
}

/// `path` (absolute) with `.` dropped and each `..` taking off the
/// component before it: the directory it names when no component is a
/// symbolic link.
pub(crate) fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Refuses a directory the sandbox would mount whose path, as given,
/// crosses a symbolic link: its real path differs from the path read
/// literally. A link on the way is how an earlier run (or anyone who can
/// write beside it) would point the next run's sandbox somewhere else.
pub(crate) fn check_no_link(
    role: &'static str,
    given: &Path,
    dir: &OpenDir,
) -> Result<(), SandboxError> {
    match lexical(given) == dir.path {
        true => Ok(()),
        false => Err(SandboxError::ThroughLink {
            role,
            path: given.to_path_buf(),
            real: dir.path.clone(),
        }),
    }
}

/// `path` made absolute with links resolved as far as it exists; the part
/// that does not exist yet is appended as written (`.` dropped). A `..` in
/// that part cannot be resolved without the directories it climbs, so it
/// is an error.
pub(crate) fn real_path(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut missing: Vec<OsString> = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                return Ok(missing.iter().rev().fold(real, |p, part| p.join(part)));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        missing.push(name.to_os_string());
                        existing = parent.to_path_buf();
                    }
                    _ => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private::{Private, check_private, check_single_link};

    #[test]
    fn real_path_of_what_does_not_exist_yet() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(
            real_path(&dir.path().join("a/./b")).unwrap(),
            real.join("a/b")
        );
        std::os::unix::fs::symlink(dir.path(), dir.path().join("link")).unwrap();
        assert_eq!(
            real_path(&dir.path().join("link/x")).unwrap(),
            real.join("x")
        );
        assert!(real_path(&dir.path().join("none/../x")).is_err());
    }

    #[test]
    fn open_dir_reads_back_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::os::unix::fs::symlink(&work, dir.path().join("link")).unwrap();
        let opened = open_dir(&dir.path().join("link/../link")).unwrap();
        assert_eq!(opened.path, work.canonicalize().unwrap());
        assert!(open_dir(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn private_paths_may_be_neither_above_nor_below() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = Private {
            what: "CONSTLE_HOME".into(),
            path: root.join("home"),
        };
        let judge = |d: &str| check_private("workdir", &root.join(d), std::slice::from_ref(&home));
        assert!(judge("work").is_ok());
        assert!(judge("homework").is_ok());
        for inside in ["home", "home/keys", ""] {
            assert!(
                matches!(judge(inside), Err(SandboxError::Exposes { .. })),
                "{inside:?}"
            );
        }
    }

    #[test]
    fn a_hard_linked_private_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.yaml");
        std::fs::write(&file, "name: a\n").unwrap();
        let private = [Private {
            what: "the Agentfile".into(),
            path: file.clone(),
        }];
        assert!(check_single_link(&private).is_ok());
        std::fs::hard_link(&file, dir.path().join("copy.yaml")).unwrap();
        assert!(matches!(
            check_single_link(&private),
            Err(SandboxError::HardLinked { links: 2, .. })
        ));
    }
}
