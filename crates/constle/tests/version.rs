//! `constle --version`: the version and the commit the binary was built
//! from, which a user compares with the release they meant to install.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn version_names_the_version_and_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_constle"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let prefix = format!("constle {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = text
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("expected `{prefix}<commit>)`, got {text:?}"));
    assert!(
        commit == "unknown"
            || (commit.len() >= 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "the commit is neither a full hash nor `unknown`: {commit:?}"
    );

    // In a git checkout the binary names HEAD (the build script reruns when
    // HEAD moves).
    let head = Command::new("git")
        .args(["rev-parse", "--verify", "HEAD"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output();
    match head {
        Ok(head) if head.status.success() => {
            let head = String::from_utf8(head.stdout).unwrap();
            assert_eq!(
                commit,
                head.trim(),
                "constle --version names another commit"
            );
        }
        _ => eprintln!("not a git checkout (or no git): only the shape was checked"),
    }
}
