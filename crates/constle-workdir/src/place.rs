//! Where in the work directory an entry is: what each entry of a directory
//! listing is to the operator's tools, and how its subdirectories are read.

use std::collections::BTreeSet;
use std::path::PathBuf;

use nix::sys::stat::SFlag;

use crate::config::{self, Rule};
use crate::walk::{Entry, Listing};

/// How a directory's entries are to be read.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place {
    /// Ordinary files of the project.
    Plain,
    /// The top of a kept home: read as [`Place::Plain`], but for the
    /// coding agents' own homes in it ([`config::AGENT_HOMES`]).
    Home,
    /// A coding agent's own home at the top of a kept home (`.claude`):
    /// only the entries [`config::HOME_RULES`] names are configuration.
    AgentHome(&'static [u8]),
    /// Below executable configuration (`.vscode/`, …).
    Config(&'static Rule),
    /// A repository's directory (`.git`, a bare repository, a linked
    /// worktree's or submodule's).
    GitDir,
    /// Git hooks.
    Hooks,
}

/// What one entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Plain,
    /// Executable configuration; what it is.
    Config(&'static str),
    /// A git configuration file, kept when only allowed settings changed.
    GitConfig,
}

/// What each entry of `listing` is, and the subdirectories to read with
/// the place each is read as. `hooks` are the directories (relative to the
/// work directory) that a repository's `core.hooksPath` names.
pub(crate) fn classify(
    listing: &Listing<'_, Place>,
    hooks: &BTreeSet<PathBuf>,
) -> (Vec<Class>, Vec<(usize, Place)>) {
    let place = match listing.context {
        Place::Plain | Place::Home if is_git_dir(listing.entries) => &Place::GitDir,
        place => place,
    };
    let parent = listing.path.file_name().map(|n| n.as_encoded_bytes());
    let mut classes = Vec::with_capacity(listing.entries.len());
    let mut subdirs = Vec::new();
    for (i, entry) in listing.entries.iter().enumerate() {
        let in_hooks = !hooks.is_empty() && hooks.contains(&listing.path_of(entry));
        let (class, sub) = one(place, parent, entry, in_hooks);
        classes.push(class);
        if entry.kind() == SFlag::S_IFDIR {
            subdirs.push((i, sub));
        }
    }
    (classes, subdirs)
}

/// One entry, and how it is read if it is a directory.
fn one(place: &Place, parent: Option<&[u8]>, entry: &Entry, in_hooks: bool) -> (Class, Place) {
    let name = entry.name_bytes();
    match place {
        Place::Home => match config::AGENT_HOMES.iter().find(|d| d.as_bytes() == name) {
            Some(dir) => (Class::Plain, Place::AgentHome(dir.as_bytes())),
            None => one(&Place::Plain, parent, entry, in_hooks),
        },
        Place::AgentHome(dir) => match config::home_rule(dir, name) {
            Some(rule) => (Class::Config(rule.what), Place::Config(rule)),
            None => (Class::Plain, Place::Plain),
        },
        Place::Config(rule) => (Class::Config(rule.what), Place::Config(rule)),
        // Git runs a hook by its exact name; the `*.sample` files `git
        // init` writes are never run.
        Place::Hooks if name.ends_with(b".sample") => (Class::Plain, Place::Hooks),
        Place::Hooks => (Class::Config(HOOK), Place::Hooks),
        Place::GitDir => match name {
            b"config" | b"config.worktree" => (Class::GitConfig, Place::Plain),
            b"hooks" => (Class::Config(HOOK), Place::Hooks),
            _ => (Class::Plain, Place::Plain),
        },
        Place::Plain if in_hooks => (Class::Config(HOOK), Place::Hooks),
        Place::Plain if name == b".git" => (Class::Plain, Place::GitDir),
        Place::Plain => match config::matching(parent.into_iter().chain([name])) {
            // A rule found through the parent's name alone (InDir) would
            // have matched the parent itself: only this entry's counts.
            Some(rule) if rule_names(rule, name) => (Class::Config(rule.what), Place::Config(rule)),
            _ => (Class::Plain, Place::Plain),
        },
    }
}

const HOOK: &str = "git hook";

/// Whether `rule` is about an entry named `name` (not its parent).
fn rule_names(rule: &Rule, name: &[u8]) -> bool {
    match rule.pattern {
        config::Pattern::Name(n) | config::Pattern::InDir(_, n) => n.as_bytes() == name,
    }
}

/// Whether a directory holding `entries` is a repository's directory as
/// git recognises one: `HEAD` with objects, refs or a common directory
/// (a repository, a bare one, a linked worktree's), or objects and refs
/// (a common directory another's `commondir` names).
fn is_git_dir(entries: &[Entry]) -> bool {
    let has = |name: &[u8]| entries.iter().any(|e| e.name_bytes() == name);
    let head = has(b"HEAD");
    let (objects, refs) = (has(b"objects"), has(b"refs"));
    (head && (objects || refs || has(b"commondir"))) || (objects && refs)
}
