//! A git configuration file the agent changed: kept when everything it
//! added is allowed, else rewritten without the rest.
//!
//! Git itself reads the file (`git config --file F --list -z
//! --no-includes`): whatever it would obey is what is judged, with no
//! second parser to disagree with it. A file git cannot read makes git
//! stop with an error, but is set aside all the same (someone might mend
//! it by hand). The rewrite is written from the list, one setting per line
//! in one spelling, and read back through git before it replaces anything:
//! what git reads from it is exactly the list that was judged.
//!
//! The agent's settings that stay are those a normal session of an agent
//! sets ([`allowed`]): who it commits as, branches and remotes (a remote's
//! URL only over a transport that runs no command), the repository's
//! format and line-ending settings. Every setting that was there before
//! the run stays, whatever it is: it is the operator's.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One setting as git lists it: `section[.subsection].name` (section and
/// name in lower case) and its value (`None`: the name alone, "true").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Setting {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// What to do with a changed git configuration file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Review {
    /// Only allowed settings were added: keep it as it is.
    Keep,
    /// Replace it with these bytes, which lack the settings named.
    Rewrite {
        bytes: Vec<u8>,
        removed: Vec<String>,
    },
    /// Git cannot read it (or there is no git to ask): set it aside whole.
    Unreadable(String),
}

/// Where git is looked for, in the order a usual `PATH` has them (so that
/// the git judging is the one the operator runs); never `PATH` itself,
/// which may name a directory the agent could write.
const GIT_PATHS: &[&str] = &["/usr/local/bin/git", "/usr/bin/git", "/bin/git"];

/// The host's git, if one is installed where only root (or this user)
/// could have put it.
pub(crate) fn find_git() -> Option<PathBuf> {
    let me = nix::unistd::geteuid().as_raw();
    let trusted = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0)
    };
    GIT_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file() && trusted(p) && p.parent().is_some_and(trusted))
}

/// Judges `after`, the file as the agent left it, against `before`, as it
/// was (if it was there).
pub(crate) fn review(git: Option<&Path>, before: Option<&[u8]>, after: &[u8]) -> Review {
    let Some(git) = git else {
        return Review::Unreadable("git is not installed here, so constle cannot read it".into());
    };
    let read = |bytes: &[u8]| list(git, bytes);
    let after = match read(after) {
        Ok(settings) => settings,
        Err(why) => return Review::Unreadable(why),
    };
    let mut kept: BTreeMap<Setting, usize> = BTreeMap::new();
    for setting in before.and_then(|b| read(b).ok()).unwrap_or_default() {
        *kept.entry(setting).or_default() += 1;
    }
    let mut stays = Vec::with_capacity(after.len());
    let mut removed = Vec::new();
    for setting in after {
        let was_there = kept.get_mut(&setting).filter(|n| **n > 0);
        match was_there {
            Some(n) => {
                *n -= 1;
                stays.push(setting);
            }
            None if allowed(&setting) => stays.push(setting),
            None => removed.push(setting.key),
        }
    }
    if removed.is_empty() {
        return Review::Keep;
    }
    let bytes = render(&stays);
    match read(&bytes) {
        Ok(back) if back == stays => Review::Rewrite { bytes, removed },
        _ => Review::Unreadable("its settings could not be written back exactly".into()),
    }
}

/// The values of `core.hooksPath` in the configuration `bytes`, as git
/// reads them (none when git cannot).
pub(crate) fn hooks_path(git: Option<&Path>, bytes: &[u8]) -> Vec<Vec<u8>> {
    let settings = git
        .and_then(|git| list(git, bytes).ok())
        .unwrap_or_default();
    settings
        .into_iter()
        .filter(|s| s.key == "core.hookspath")
        .filter_map(|s| s.value)
        .collect()
}

/// What git lists from `bytes` as a configuration file, includes not
/// followed; an error says why git could not read it.
fn list(git: &Path, bytes: &[u8]) -> Result<Vec<Setting>, String> {
    let scratch =
        tempfile::tempdir().map_err(|e| format!("cannot make a scratch directory: {e}"))?;
    let file = scratch.path().join("config");
    std::fs::write(&file, bytes).map_err(|e| format!("cannot copy it to read it: {e}"))?;
    let out = Command::new(git)
        .args(["config", "--no-includes", "--list", "-z", "--file"])
        .arg(&file)
        .env_clear()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", "/nonexistent")
        .env("LC_ALL", "C")
        .current_dir(scratch.path())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", git.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let first = said.lines().next().unwrap_or("").trim();
        return Err(format!(
            "git cannot read it ({})",
            constle_escape::escape(first)
        ));
    }
    Ok(parse_list(&out.stdout))
}

/// `git config --list -z` output: each setting is its key, then a newline
/// and its value if it has one, then a NUL.
fn parse_list(out: &[u8]) -> Vec<Setting> {
    out.split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.iter().position(|&b| b == b'\n') {
            Some(i) => Setting {
                key: String::from_utf8_lossy(&entry[..i]).into_owned(),
                value: Some(entry[i + 1..].to_vec()),
            },
            None => Setting {
                key: String::from_utf8_lossy(entry).into_owned(),
                value: None,
            },
        })
        .collect()
}

/// A configuration file holding exactly `settings`, in order.
fn render(settings: &[Setting]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut section: Option<(&str, Option<&str>)> = None;
    for setting in settings {
        let (head, sub, name) = split_key(&setting.key);
        if section != Some((head, sub)) {
            out.push(b'[');
            out.extend_from_slice(head.as_bytes());
            if let Some(sub) = sub {
                out.extend_from_slice(b" \"");
                escape_into(&mut out, sub.as_bytes());
                out.push(b'"');
            }
            out.extend_from_slice(b"]\n");
            section = Some((head, sub));
        }
        out.push(b'\t');
        out.extend_from_slice(name.as_bytes());
        if let Some(value) = &setting.value {
            out.extend_from_slice(b" = \"");
            escape_into(&mut out, value);
            out.push(b'"');
        }
        out.push(b'\n');
    }
    out
}

/// `section.sub.section.name` → (`section`, `Some("sub.section")`, `name`):
/// the section ends at the first dot and the name starts after the last.
fn split_key(key: &str) -> (&str, Option<&str>, &str) {
    let (head, rest) = key.split_once('.').unwrap_or((key, ""));
    match rest.rsplit_once('.') {
        Some((sub, name)) => (head, Some(sub), name),
        None => (head, None, rest),
    }
}

/// Inside double quotes: backslash and quote escaped, and the control
/// characters git has escapes for.
fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            _ => out.push(b),
        }
    }
}

/// Settings an agent may add: none of them names a program, a script, a
/// file to include or a command-running transport.
fn allowed(setting: &Setting) -> bool {
    let (section, sub, name) = split_key(&setting.key);
    let value = setting.value.as_deref().unwrap_or_default();
    match (section, sub.is_some(), name) {
        ("core", false, name) => CORE.contains(&name),
        ("user" | "author" | "committer", false, "name" | "email") => true,
        ("init", false, "defaultbranch") => true,
        ("extensions", false, "worktreeconfig" | "objectformat" | "refstorage") => true,
        ("remote", true, "url" | "pushurl") | ("submodule", true, "url") => safe_url(value),
        ("remote", true, "fetch" | "push" | "tagopt" | "prune" | "mirror") => true,
        ("branch", true, "remote" | "merge" | "rebase" | "pushremote" | "description") => true,
        ("submodule", true, "active" | "branch") => true,
        ("submodule", true, "update") => {
            matches!(value, b"checkout" | b"rebase" | b"merge" | b"none")
        }
        ("pull", false, "rebase" | "ff")
        | ("push", false, "default" | "autosetupremote")
        | ("merge", false, "ff" | "conflictstyle")
        | ("rebase", false, "autosquash" | "autostash")
        | ("fetch", false, "prune")
        | ("status", false, "showuntrackedfiles")
        | ("color", false, "ui")
        | ("gc", false, "auto") => true,
        ("advice", false, _) => true,
        _ => false,
    }
}

/// `core` settings an agent may add: the repository's format and how files
/// are read and written (`core.worktree` only says where the files are).
const CORE: &[&str] = &[
    "repositoryformatversion",
    "filemode",
    "bare",
    "logallrefupdates",
    "ignorecase",
    "precomposeunicode",
    "symlinks",
    "autocrlf",
    "safecrlf",
    "eol",
    "quotepath",
    "sparsecheckout",
    "sparsecheckoutcone",
    "worktree",
];

/// A remote's URL that names no program: not `<transport>::<address>`
/// (a remote helper, `ext::` runs a command line), and not an option
/// smuggled in as an argument.
fn safe_url(url: &[u8]) -> bool {
    let helper = url
        .windows(2)
        .position(|w| w == b"::")
        .is_some_and(|at| !url[..at].iter().any(|&b| b == b'/' || b == b':'));
    !helper && !url.starts_with(b"-")
}

#[cfg(test)]
mod tests;
