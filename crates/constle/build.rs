//! Records the commit this binary is built from, for `constle --version`.
//!
//! In a git checkout that is `git rev-parse HEAD`; elsewhere (a source
//! archive, a packager's build) `CONSTLE_BUILD_COMMIT` if set, else
//! `unknown`. The build script reruns when HEAD moves or the branch it
//! names gets a new commit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CONSTLE_BUILD_COMMIT");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = git_head(&manifest_dir)
        .or_else(|| {
            std::env::var("CONSTLE_BUILD_COMMIT")
                .ok()
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CONSTLE_BUILD_COMMIT={commit}");
}

/// `git rev-parse HEAD` run in `dir`, with rerun triggers on the files that
/// change when HEAD does; `None` without git or outside a checkout.
fn git_head(dir: &Path) -> Option<String> {
    let head = git(dir, &["rev-parse", "--verify", "HEAD"])?;
    if head.len() < 40 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // HEAD lives in the worktree's own git directory; branches and
    // packed-refs in the common one (the same directory unless this is a
    // linked worktree).
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        rerun_if_exists(&git_dir.join("HEAD"));
        let common = git(dir, &["rev-parse", "--git-common-dir"])
            .map(|c| dir.join(c))
            .unwrap_or_else(|| git_dir.clone());
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            rerun_if_exists(&common.join(branch));
        }
        rerun_if_exists(&common.join("packed-refs"));
    }
    Some(head)
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A trigger on a path that does not exist would rerun the script on every
/// build, so only existing files get one.
fn rerun_if_exists(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
