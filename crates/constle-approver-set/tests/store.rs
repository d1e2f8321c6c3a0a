//! `ApproverSets::load`: the set directory against the store of versions
//! accepted before. Rollbacks, forks and damage are refused, never reset.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use common::*;
use constle_approver_set::{
    ApproverSetError, ApproverSets, InForce, SetPin, VersionFile, read_versions, rewrite_version,
    write_new_version,
};
use jiff::Timestamp;

struct Dirs {
    _temp: tempfile::TempDir,
    set: PathBuf,
    store: PathBuf,
}

fn dirs() -> Dirs {
    let temp = tempfile::tempdir().unwrap();
    let set = temp.path().join("set");
    fs::create_dir(&set).unwrap();
    let store = temp.path().join("home/approvers/pin");
    Dirs {
        set,
        store,
        _temp: temp,
    }
}

impl Dirs {
    fn put(&self, n: u64, bytes: &[u8]) {
        fs::write(self.set.join(format!("{n}.approvers.json")), bytes).unwrap();
    }

    fn load(&self, pin: &SetPin) -> Result<InForce, ApproverSetError> {
        ApproverSets::load(&self.set, pin, &self.store, Timestamp::now())
    }

    fn stored(&self, n: u64) -> PathBuf {
        self.store.join(format!("{n}.approvers.json"))
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn loads_the_newest_version_and_keeps_copies() {
    let d = dirs();
    let (pin, files) = rotation();
    for (i, f) in files.iter().enumerate() {
        d.put(i as u64 + 1, f);
    }
    let in_force = d.load(&pin).unwrap();
    assert_eq!(in_force.version(), 3);
    assert_eq!(in_force.threshold(), 2);
    assert!(in_force.contains(key(5).did()));
    assert!(!in_force.contains(key(1).did()));
    assert_eq!(in_force.pin(), pin);
    assert_eq!(mode(&d.store), 0o700);
    for n in 1..=3 {
        assert_eq!(fs::read(d.stored(n)).unwrap(), files[n as usize - 1]);
        assert_eq!(mode(&d.stored(n)), 0o600);
    }
    // Again: nothing changes.
    assert_eq!(d.load(&pin).unwrap().digest(), in_force.digest());
    let mut names: Vec<_> = fs::read_dir(&d.store)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "1.approvers.json",
            "2.approvers.json",
            "3.approvers.json",
            "lock"
        ],
        "no temporary file is left"
    );
}

#[test]
fn a_rollback_to_older_files_is_refused() {
    let d = dirs();
    let (pin, files) = rotation();
    d.put(1, &files[0]);
    d.put(2, &files[1]);
    assert_eq!(d.load(&pin).unwrap().version(), 2);
    d.put(3, &files[2]);
    assert_eq!(d.load(&pin).unwrap().version(), 3);
    // The attacker puts back the directory as it was at version 2, where
    // key 2 (revoked by version 3) still counts.
    fs::remove_file(d.set.join("3.approvers.json")).unwrap();
    let e = d.load(&pin).unwrap_err();
    assert!(
        matches!(
            e,
            ApproverSetError::Rollback {
                seen: 3,
                offered: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("version 3 of this approver set was seen before; the set directory")
            && e.to_string()
                .contains("offers only version 2: an old set cannot be put back"),
        "{e}"
    );
    // And down to version 1 alone.
    fs::remove_file(d.set.join("2.approvers.json")).unwrap();
    assert!(matches!(
        d.load(&pin).unwrap_err(),
        ApproverSetError::Rollback {
            seen: 3,
            offered: 1,
            ..
        }
    ));
    // Putting the newer versions back is the fix.
    d.put(2, &files[1]);
    d.put(3, &files[2]);
    assert_eq!(d.load(&pin).unwrap().version(), 3);
}

#[test]
fn a_second_version_two_is_a_fork() {
    let d = dirs();
    let (pin, files) = rotation();
    d.put(1, &files[0]);
    d.put(2, &files[1]);
    d.load(&pin).unwrap();
    // Another version 2, also signed by enough old and new keys.
    let other = body(2, &[1, 2], 2, FAR);
    d.put(2, &signed(&other, &[1, 2]));
    let e = d.load(&pin).unwrap_err();
    assert!(
        matches!(e, ApproverSetError::Fork { version: 2, .. }),
        "{e}"
    );
    // More signatures on the same version are no fork.
    let mut same =
        VersionFile::parse(&files[1], &constle_approver_set::Location::Given(0)).unwrap();
    same.sign(&key(9));
    d.put(2, &same.to_bytes());
    assert_eq!(d.load(&pin).unwrap().version(), 2);
}

fn damaged_after(damage: impl FnOnce(&Dirs)) -> String {
    let d = dirs();
    let (pin, files) = rotation();
    for (i, f) in files.iter().enumerate() {
        d.put(i as u64 + 1, f);
    }
    d.load(&pin).unwrap();
    damage(&d);
    match d.load(&pin) {
        Err(e @ ApproverSetError::StoreDamaged { .. }) => {
            let text = e.to_string();
            assert!(text.contains("never reset"), "{text}");
            text
        }
        other => panic!("expected a damaged store, got {other:?}"),
    }
}

#[test]
fn a_store_file_deleted_below_a_higher_one_is_refused() {
    let text = damaged_after(|d| fs::remove_file(d.stored(2)).unwrap());
    assert!(
        text.contains("2.approvers.json") && text.contains("version 2 is missing"),
        "{text}"
    );
    let text = damaged_after(|d| fs::remove_file(d.stored(1)).unwrap());
    assert!(text.contains("version 1 is missing"), "{text}");
}

#[test]
fn a_truncated_or_corrupted_store_file_is_refused() {
    let text = damaged_after(|d| {
        let bytes = fs::read(d.stored(2)).unwrap();
        fs::write(d.stored(2), &bytes[..bytes.len() / 2]).unwrap();
    });
    assert!(
        text.contains("2.approvers.json") && text.contains("strict JSON"),
        "{text}"
    );
    damaged_after(|d| fs::write(d.stored(3), b"").unwrap());
    let text = damaged_after(|d| {
        let text = fs::read_to_string(d.stored(2)).unwrap();
        fs::write(d.stored(2), text.replacen("\"k4\"", "\"k9\"", 1)).unwrap();
    });
    assert!(text.contains("signed by 0"), "{text}");
    let text = damaged_after(|d| {
        fs::set_permissions(&d.store, fs::Permissions::from_mode(0o755)).unwrap();
    });
    assert!(text.contains("chmod 700"), "{text}");
}

#[test]
fn an_expired_newest_version_is_refused_but_still_blocks_a_rollback() {
    let d = dirs();
    let v1 = body(1, &[1, 2], 1, FAR);
    let v2 = body(2, &[2, 3], 1, "2020-01-01T00:00:00Z");
    d.put(1, &signed(&v1, &[1]));
    d.put(2, &signed(&v2, &[2]));
    let pin = pin_of(&v1);
    let e = d.load(&pin).unwrap_err();
    assert!(
        matches!(e, ApproverSetError::Expired { version: 2, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("expired at 2020-01-01T00:00:00Z"),
        "{e}"
    );
    fs::remove_file(d.set.join("2.approvers.json")).unwrap();
    assert!(matches!(
        d.load(&pin).unwrap_err(),
        ApproverSetError::Rollback { .. }
    ));
    // Expiry is `expires <= now`.
    let at = "2020-01-01T00:00:00Z".parse::<Timestamp>().unwrap();
    d.put(2, &signed(&v2, &[2]));
    assert!(ApproverSets::load(&d.set, &pin, &d.store, at).is_err());
    let before = at.checked_sub(jiff::SignedDuration::from_secs(1)).unwrap();
    assert_eq!(
        ApproverSets::load(&d.set, &pin, &d.store, before)
            .unwrap()
            .version(),
        2
    );
}

#[test]
fn the_set_directory_must_be_whole_and_pinned() {
    let d = dirs();
    let (pin, files) = rotation();
    assert!(matches!(
        d.load(&pin).unwrap_err(),
        ApproverSetError::NoFirstVersion { .. }
    ));
    d.put(1, &files[0]);
    d.put(3, &files[2]);
    let e = d.load(&pin).unwrap_err();
    assert!(
        matches!(
            e,
            ApproverSetError::Gap {
                missing: 2,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
    fs::rename(
        d.set.join("3.approvers.json"),
        d.set.join("2.approvers.json"),
    )
    .unwrap();
    let e = d.load(&pin).unwrap_err();
    assert!(
        matches!(
            e,
            ApproverSetError::WrongVersion {
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("2.approvers.json"), "{e}");
    fs::remove_file(d.set.join("2.approvers.json")).unwrap();
    fs::write(d.set.join("02.approvers.json"), &files[1]).unwrap();
    assert!(matches!(
        d.load(&pin).unwrap_err(),
        ApproverSetError::BadName { .. }
    ));
    fs::remove_file(d.set.join("02.approvers.json")).unwrap();
    fs::write(d.set.join("README.md"), "not a version").unwrap();
    let other = SetPin::new(body(1, &[7], 1, FAR).digest());
    let e = d.load(&other).unwrap_err();
    assert!(matches!(e, ApproverSetError::PinMismatch { .. }), "{e}");
    assert!(
        !d.store.exists(),
        "nothing is stored for a set that did not verify"
    );
    assert_eq!(d.load(&pin).unwrap().version(), 1);
}

#[test]
fn new_versions_are_never_overwritten() {
    let d = dirs();
    let v1 = VersionFile::unsigned(body(1, &[1, 2], 1, FAR));
    let path = write_new_version(&d.set, &v1).unwrap();
    assert_eq!(path, d.set.join("1.approvers.json"));
    assert!(matches!(
        write_new_version(&d.set, &v1).unwrap_err(),
        ApproverSetError::Exists { .. }
    ));
    let v3 = VersionFile::unsigned(body(3, &[1, 2], 1, FAR));
    assert!(matches!(
        write_new_version(&d.set, &v3).unwrap_err(),
        ApproverSetError::Gap { .. }
    ));
    let mut signed = v1.clone();
    signed.sign(&key(1));
    rewrite_version(&path, &signed).unwrap();
    assert_eq!(read_versions(&d.set).unwrap()[0].1, signed.to_bytes());
    assert!(rewrite_version(&d.set.join("2.approvers.json"), &signed).is_err());
    let names: Vec<_> = fs::read_dir(&d.set)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
}

#[test]
fn two_loads_offering_two_versions_two_cannot_both_succeed() {
    let (pin, files) = rotation();
    let other = signed(&body(2, &[1, 2], 2, FAR), &[1, 2]);
    for _ in 0..10 {
        let d = dirs();
        let second = d.set.with_file_name("set-b");
        fs::create_dir(&second).unwrap();
        d.put(1, &files[0]);
        d.put(2, &files[1]);
        fs::write(second.join("1.approvers.json"), &files[0]).unwrap();
        fs::write(second.join("2.approvers.json"), &other).unwrap();
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<bool> = std::thread::scope(|s| {
            let loads: Vec<_> = [d.set.clone(), second]
                .into_iter()
                .map(|set| {
                    let (barrier, store) = (&barrier, &d.store);
                    s.spawn(move || {
                        barrier.wait();
                        ApproverSets::load(&set, &pin, store, Timestamp::now()).is_ok()
                    })
                })
                .collect();
            loads.into_iter().map(|l| l.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|ok| **ok).count(), 1, "{results:?}");
    }
}
