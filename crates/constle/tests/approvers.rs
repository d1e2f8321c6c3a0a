//! `constle approvers …` as a user runs it: keys from `webhook-keygen`, a
//! set made, signed, rotated and shown; rollbacks and under-signed versions
//! refused with their messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::process::Output;

use common::{Case, report, text};

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", report(out));
    text(&out.stdout)
}

fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", report(out));
    text(&out.stderr)
}

/// Approver keys `names`, made with `webhook-keygen`: their DIDs.
fn keys(case: &Case, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| case.keygen(&["webhook-keygen", n]))
        .collect()
}

fn sign(case: &Case, file: &str, key: &str) {
    ok(&case.run(&["approvers", "sign", file, "--key", key]));
}

/// The pin `show` prints.
fn pin_of(shown: &str) -> String {
    shown
        .lines()
        .find_map(|l| l.strip_prefix("pin for the Agentfile: "))
        .expect("show prints the pin")
        .to_owned()
}

/// Version 1 of alice, bob, carol (2 of 3), signed by alice and bob.
fn first_version(case: &Case) -> (Vec<String>, String) {
    let dids = keys(case, &["alice", "bob", "carol", "dave"]);
    let out = case.run(&[
        "approvers",
        "init",
        "set",
        "--threshold",
        "2",
        "--approver",
        &format!("{}=alice", dids[0]),
        "--approver",
        &format!("{}=bob", dids[1]),
        "--approver",
        &format!("{}=carol", dids[2]),
        "--expires",
        "2099-06-01T00:00:00Z",
    ]);
    assert_eq!(ok(&out).trim(), "set/1.approvers.json");
    let err = refused(&case.run(&["approvers", "show", "set"]));
    assert!(
        err.contains("version 1 is signed by 0 of its own keys (none), it needs 2"),
        "{err}"
    );
    sign(case, "set/1.approvers.json", "alice");
    let err = refused(&case.run(&["approvers", "show", "set"]));
    assert!(err.contains("signed by 1 of its own keys (alice)"), "{err}");
    sign(case, "set/1.approvers.json", "bob");
    let shown = ok(&case.run(&["approvers", "show", "set"]));
    assert!(
        shown.contains("in force: version 1 (2 of 3 approvers), expires 2099-06-01T00:00:00Z"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("approver   carol  {}", dids[2])),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "signature  alice  {}: counts for this version",
            dids[0]
        )),
        "{shown}"
    );
    // The pin `init` printed is the pin `show` prints: signing does not change it.
    let init_err = text(&case.run(&["approvers", "show", "set"]).stderr);
    assert!(init_err.contains("no --pin given"), "{init_err}");
    (dids, pin_of(&shown))
}

#[test]
fn a_set_is_made_signed_by_two_of_three_and_shown() {
    let case = Case::new();
    let (_, pin) = first_version(&case);
    let shown = ok(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(shown.contains("in force: version 1"), "{shown}");
    let file = fs::read_to_string(case.path("set/1.approvers.json")).unwrap();
    assert!(
        file.contains("\"type\": \"constle/approver-set\""),
        "{file}"
    );
    // Another pin: not the set the Agentfile names.
    let other = format!("sha256:{}", "0".repeat(64));
    let err = refused(&case.run(&["approvers", "show", "set", "--pin", &other]));
    assert!(err.contains("but the Agentfile pins"), "{err}");
    // Init never overwrites.
    let out = case.run(&[
        "approvers",
        "init",
        "set",
        "--threshold",
        "1",
        "--approver",
        &format!("{}=x", case.keygen(&["webhook-keygen", "x"])),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
    assert!(
        text(&out.stderr).contains("already exists"),
        "{}",
        report(&out)
    );
}

#[test]
fn a_rotation_signed_by_two_old_and_two_new_keys_is_in_force() {
    let case = Case::new();
    let (dids, pin) = first_version(&case);
    let out = case.run(&[
        "approvers",
        "next",
        "set",
        "--remove",
        &dids[0],
        "--add",
        &format!("{}=dave", dids[3]),
    ]);
    assert_eq!(ok(&out).trim(), "set/2.approvers.json");
    // alice (old only) and bob (old and new), then dave (new only).
    sign(&case, "set/2.approvers.json", "alice");
    let err = refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(
        err.contains("version 2 is signed by 1 of the keys of version 1 (alice), it needs 2"),
        "{err}"
    );
    sign(&case, "set/2.approvers.json", "bob");
    let err = refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(
        err.contains("version 2 is signed by 1 of its own keys (bob), it needs 2"),
        "{err}"
    );
    sign(&case, "set/2.approvers.json", "dave");
    let shown = ok(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(
        shown.contains("in force: version 2 (2 of 3 approvers)"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "signature  alice  {}: counts for the version before",
            dids[0]
        )),
        "{shown}"
    );
    assert_eq!(
        shown.matches("approver   alice").count(),
        1,
        "only in version 1: {shown}"
    );
    // The JSON form says the same.
    let json = ok(&case.run(&[
        "approvers",
        "show",
        "set",
        "--pin",
        &pin,
        "--format",
        "json",
    ]));
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["version", "version", "pin", "in_force"]
    );
    assert_eq!(lines[3]["version"], 2);
    assert_eq!(lines[2]["pin"], pin.as_str());
    let labels: Vec<_> = lines[1]["approvers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["bob", "carol", "dave"]);
    // The versions this machine accepted are kept under $CONSTLE_HOME.
    let store = case
        .home()
        .join("approvers")
        .join(pin.strip_prefix("sha256:").unwrap());
    assert!(store.join("2.approvers.json").is_file());
}

#[test]
fn a_rollback_and_an_under_signed_version_are_refused() {
    let case = Case::new();
    let (dids, pin) = first_version(&case);
    ok(&case.run(&[
        "approvers",
        "next",
        "set",
        "--remove",
        &dids[0],
        "--add",
        &format!("{}=dave", dids[3]),
    ]));
    for key in ["bob", "carol", "dave"] {
        sign(&case, "set/2.approvers.json", key);
    }
    ok(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    // Put back the directory as it was at version 1, where alice's key counts.
    fs::remove_file(case.path("set/2.approvers.json")).unwrap();
    let err = refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(
        err.contains("version 2 of this approver set was seen before; the set directory")
            && err.contains("offers only version 1: an old set cannot be put back"),
        "{err}"
    );
    // An under-signed version 2: only one of version 1's keys.
    ok(&case.run(&[
        "approvers",
        "next",
        "set",
        "--remove",
        &dids[0],
        "--add",
        &format!("{}=dave", dids[3]),
    ]));
    sign(&case, "set/2.approvers.json", "carol");
    sign(&case, "set/2.approvers.json", "dave");
    let err = refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    assert!(
        err.contains("version 2 is signed by 1 of the keys of version 1 (carol), it needs 2"),
        "{err}"
    );
    // Re-signing replaces a key's signature; it never counts twice.
    sign(&case, "set/2.approvers.json", "carol");
    let file = fs::read_to_string(case.path("set/2.approvers.json")).unwrap();
    assert_eq!(
        file.matches(&dids[2]).count(),
        2,
        "once as approver, once as signer: {file}"
    );
    refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
}

#[test]
fn bad_arguments_are_refused_with_their_reason() {
    let case = Case::new();
    let dids = keys(&case, &["alice"]);
    let alice = format!("{}=alice", dids[0]);
    let no_label = format!("{}=", dids[0]);
    let cases: [(&[&str], &str); 6] = [
        (
            &["--threshold", "2", "--approver", &alice],
            "threshold 2 with 1 approvers",
        ),
        (
            &["--threshold", "1", "--approver", &dids[0]],
            "write DID=LABEL",
        ),
        (
            &["--threshold", "1", "--approver", &no_label],
            "must not be empty",
        ),
        (
            &["--threshold", "1", "--approver", "did:key:z6Mk=alice"],
            "did:key",
        ),
        (
            &[
                "--threshold",
                "1",
                "--approver",
                &alice,
                "--expires",
                "2001-01-01T00:00:00Z",
            ],
            "has passed",
        ),
        (
            &[
                "--threshold",
                "1",
                "--approver",
                &alice,
                "--expires",
                "2099-01-01",
            ],
            "RFC 3339",
        ),
    ];
    for (args, says) in cases {
        let mut full = vec!["approvers", "init", "set"];
        full.extend_from_slice(args);
        let out = case.run(&full);
        assert_ne!(out.status.code(), Some(0), "{}", report(&out));
        assert!(text(&out.stderr).contains(says), "{says}: {}", report(&out));
    }
    assert!(!case.path("set/1.approvers.json").exists());
}

/// What `show` finds wrong with the set directory or the store is a finding
/// (exit 1, docs/approver.md), whatever part of the set it is in; only what
/// keeps it from looking (a directory it cannot read) is exit 2.
#[test]
fn every_finding_of_show_exits_1_and_only_a_failure_to_look_exits_2() {
    let case = Case::new();
    let (_, pin) = first_version(&case);
    let version_1 = case.path("set/1.approvers.json");
    let finds = |says: &str| {
        let err = refused(&case.run(&["approvers", "show", "set", "--pin", &pin]));
        assert!(err.contains(says), "{says}: {err}");
    };
    // A gap: version 3 without version 2.
    fs::copy(&version_1, case.path("set/3.approvers.json")).unwrap();
    finds("holds 3.approvers.json but not 2.approvers.json");
    fs::remove_file(case.path("set/3.approvers.json")).unwrap();
    // A misnamed version file.
    fs::copy(&version_1, case.path("set/02.approvers.json")).unwrap();
    finds("not a version file name");
    fs::remove_file(case.path("set/02.approvers.json")).unwrap();
    // A version file too large to be one.
    fs::write(case.path("set/2.approvers.json"), vec![b' '; 1 << 20]).unwrap();
    finds("this is not an approver-set file");
    fs::remove_file(case.path("set/2.approvers.json")).unwrap();
    // No version 1.
    fs::rename(&version_1, case.path("set/1.json")).unwrap();
    finds("no 1.approvers.json");
    fs::rename(case.path("set/1.json"), &version_1).unwrap();
    // A damaged store (what refuses an old set put back).
    ok(&case.run(&["approvers", "show", "set", "--pin", &pin]));
    let store = case
        .home()
        .join("approvers")
        .join(pin.strip_prefix("sha256:").unwrap());
    fs::write(store.join("1.approvers.json"), b"{}").unwrap();
    finds("is damaged");
    // A set directory that is not there: nothing could be looked at.
    let out = case.run(&["approvers", "show", "nowhere"]);
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
    assert!(text(&out.stderr).contains("nowhere"), "{}", report(&out));
}
