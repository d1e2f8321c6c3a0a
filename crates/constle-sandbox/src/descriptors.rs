//! The descriptors the launcher opens for bwrap: what the sandbox mounts,
//! each by number, so that what was checked is what is mounted.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// Descriptors the launcher opened for bwrap, each mounted by number.
#[derive(Debug)]
pub(crate) struct Descriptors {
    pub workdir: OwnedFd,
    /// The host directory mounted as the agent's home, if any.
    pub home: Option<OwnedFd>,
    pub exe: OwnedFd,
    /// One per host socket, in [`CheckedSpec::sockets`]'s order.
    pub sockets: Vec<OwnedFd>,
    pub rootfs: Vec<RootfsEntry>,
    /// The sandbox's own `/etc/passwd` and `/etc/group` (without a rootfs).
    pub passwd: Option<OwnedFd>,
    pub group: Option<OwnedFd>,
    /// The files written into the sandbox's `/etc`, with their paths there.
    pub etc: Vec<(OwnedFd, PathBuf)>,
    pub seccomp: Vec<OwnedFd>,
    /// Where bwrap writes its status (`--json-status-fd`): the file
    /// [`sandbox_end`](crate::sandbox_end) reads.
    pub status: OwnedFd,
}

/// A top-level entry of the rootfs.
#[derive(Debug)]
pub(crate) enum RootfsEntry {
    /// A directory (`dir`) or file, mounted read-only at `inside`.
    Mount {
        fd: OwnedFd,
        inside: PathBuf,
        dir: bool,
    },
    /// A symbolic link, recreated at `inside`.
    Link { target: PathBuf, inside: PathBuf },
}

impl Descriptors {
    /// Every descriptor bwrap inherits.
    pub(crate) fn all(&self) -> impl Iterator<Item = &OwnedFd> {
        let rootfs = self.rootfs.iter().filter_map(|e| match e {
            RootfsEntry::Mount { fd, .. } => Some(fd),
            RootfsEntry::Link { .. } => None,
        });
        [&self.workdir, &self.exe]
            .into_iter()
            .chain(self.home.iter())
            .chain(&self.sockets)
            .chain(rootfs)
            .chain(self.passwd.iter())
            .chain(self.group.iter())
            .chain(self.etc.iter().map(|(fd, _)| fd))
            .chain(&self.seccomp)
            .chain([&self.status])
    }
}
