//! Probes that passed, remembered so that the runs after the first in the
//! same place skip them: an empty file per passing probe, named by a
//! digest of everything the probe's outcome depended on.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::needs::Needs;
use crate::seen::Seen;

/// The marker of a passing probe for `needs` on a machine that shows
/// `seen`, in `dir`; `None` when what it depends on cannot be read (then
/// nothing is remembered), this process's capabilities among it.
pub(crate) fn marker(dir: &Path, needs: &Needs, seen: &Seen) -> Option<PathBuf> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let exe = std::fs::metadata(&needs.constle_exe).ok()?;
    seen.effective_caps.as_ref()?;
    let depends = format!(
        "{boot}|{}|{}|{}:{}:{}:{}|{seen:?}",
        nix::unistd::geteuid(),
        needs.as_root,
        exe.dev(),
        exe.ino(),
        exe.mtime(),
        exe.mtime_nsec(),
    );
    Some(dir.join(hex::encode(Sha256::digest(depends.as_bytes()))))
}

/// Remembers that the probe behind `marker` passed; a marker that cannot
/// be written only means the next run probes again.
pub(crate) fn remember(marker: &Path) {
    if let Some(dir) = marker.parent() {
        let made = DirBuilder::new().recursive(true).mode(0o700).create(dir);
        if made.is_ok() {
            let _ = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(marker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_follows_what_the_probe_depended_on() {
        let dir = Path::new("/nowhere");
        let exe = std::env::current_exe().unwrap();
        let needs = Needs::any_run(exe, None);
        let seen = Seen {
            effective_caps: Some("00000000a80425fb".to_owned()),
            ..Seen::default()
        };
        let first = marker(dir, &needs, &seen).unwrap();
        assert_eq!(marker(dir, &needs, &seen).unwrap(), first, "stable");
        let masked = Seen {
            proc_overmounts: vec!["/proc/kcore".to_owned()],
            ..seen.clone()
        };
        assert_ne!(marker(dir, &needs, &masked).unwrap(), first);
        let fewer_caps = Seen {
            effective_caps: Some("0000000000000000".to_owned()),
            ..seen.clone()
        };
        assert_ne!(marker(dir, &needs, &fewer_caps).unwrap(), first);
        let as_root = Needs {
            as_root: !needs.as_root,
            ..Needs::any_run(needs.constle_exe.clone(), None)
        };
        assert_ne!(marker(dir, &as_root, &seen).unwrap(), first);
        assert!(first.starts_with(dir));
        let unread = Seen {
            effective_caps: None,
            ..seen.clone()
        };
        assert_eq!(marker(dir, &needs, &unread), None, "nothing remembered");
    }
}
