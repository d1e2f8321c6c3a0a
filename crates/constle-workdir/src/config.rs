//! What in a work directory an operator's tools execute, or obey to
//! execute something, without being asked to: *executable configuration*.
//!
//! The line is drawn at what runs when the operator does no more than look:
//! opens the directory in an editor, `cd`s into it, types `git status` or
//! `git diff`, commits, or runs a tool whose own configuration the directory
//! holds. A program the operator runs on purpose (`make`, `npm test`,
//! `python agent.py`, a build script) is the project's code, and reviewing
//! code before running it is the operator's part; it is not listed. Each
//! entry of [`RULES`] says why it is listed.
//!
//! Git is the one tool whose configuration an agent legitimately writes
//! (`git config user.name`, a branch's upstream): a git configuration file
//! is kept when everything the agent added is on an allowlist, and
//! rewritten without the rest otherwise (`git.rs`).

/// How a rule finds its paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// An entry with this name at any depth; a directory's whole content.
    Name(&'static str),
    /// A file named `.1` in a directory named `.0`, at any depth.
    InDir(&'static str, &'static str),
}

/// One kind of executable configuration.
#[derive(Debug)]
pub struct Rule {
    /// How it is found.
    pub(crate) pattern: Pattern,
    /// What it is, as the operator is told: "VS Code workspace settings".
    pub what: &'static str,
    /// Why it is listed: what it makes run.
    pub why: &'static str,
}

const fn rule(pattern: Pattern, what: &'static str, why: &'static str) -> Rule {
    Rule { pattern, what, why }
}

use Pattern::{InDir, Name};

/// Every kind of executable configuration but git's (see [`GIT_RULES`]).
/// Kept in this order in `docs/sandbox.md`.
pub const RULES: &[Rule] = &[
    // Editors and IDEs: run on opening the folder.
    rule(
        Name(".vscode"),
        "VS Code workspace settings",
        "tasks run on folder open (`runOn: folderOpen`), settings name programs to run (formatters, linters, the git and terminal binaries), and `mcp.json` starts MCP servers",
    ),
    rule(
        Name(".idea"),
        "JetBrains project settings",
        "run configurations, external tools and startup tasks, and the Gradle or Maven build the IDE imports on open",
    ),
    rule(
        Name(".zed"),
        "Zed project settings",
        "tasks and language-server binaries",
    ),
    rule(
        Name(".devcontainer"),
        "dev container definition",
        "`initializeCommand` runs on the host when the folder is opened in a container, and the rest builds and starts the container",
    ),
    rule(
        Name(".devcontainer.json"),
        "dev container definition",
        "as `.devcontainer/`",
    ),
    rule(
        Name(".exrc"),
        "vi/Vim/Neovim local configuration",
        "commands run when the editor starts in the directory (`exrc`)",
    ),
    rule(
        Name(".vimrc"),
        "Vim local configuration",
        "read with `exrc` set",
    ),
    rule(
        Name(".nvimrc"),
        "Neovim local configuration",
        "read with `exrc` set",
    ),
    rule(
        Name(".nvim.lua"),
        "Neovim local configuration",
        "Lua run with `exrc` set",
    ),
    rule(
        Name(".dir-locals.el"),
        "Emacs directory variables",
        "`eval` forms and hooks run when a file in the directory is visited",
    ),
    rule(
        Name(".dir-locals-2.el"),
        "Emacs directory variables",
        "as `.dir-locals.el`",
    ),
    // Coding agents the operator may run in the directory next.
    rule(
        Name(".claude"),
        "Claude Code project settings",
        "hooks run shell commands, and commands, agents and MCP servers act in the operator's next session",
    ),
    rule(
        Name(".mcp.json"),
        "project MCP servers",
        "Claude Code and other clients start the servers it names",
    ),
    rule(
        Name(".cursor"),
        "Cursor project settings",
        "MCP servers and rules",
    ),
    rule(
        Name(".codex"),
        "Codex project settings",
        "configuration, MCP servers and commands",
    ),
    rule(
        Name(".gemini"),
        "Gemini CLI project settings",
        "MCP servers and tool commands",
    ),
    // Shells and environment managers: run on `cd`.
    rule(
        Name(".envrc"),
        "direnv environment",
        "a shell script run on entering the directory (once allowed)",
    ),
    rule(
        Name(".mise.toml"),
        "mise configuration",
        "environment, tasks and hooks run on entering the directory",
    ),
    rule(Name("mise.toml"), "mise configuration", "as `.mise.toml`"),
    rule(
        Name(".bashrc"),
        "shell startup file",
        "run by every interactive shell when the directory is a home",
    ),
    rule(Name(".bash_profile"), "shell startup file", "as `.bashrc`"),
    rule(Name(".bash_login"), "shell startup file", "as `.bashrc`"),
    rule(Name(".profile"), "shell startup file", "as `.bashrc`"),
    rule(Name(".zshrc"), "shell startup file", "as `.bashrc`"),
    rule(
        Name(".zshenv"),
        "shell startup file",
        "run by every zsh, scripts included, when the directory is a home",
    ),
    rule(Name(".zprofile"), "shell startup file", "as `.bashrc`"),
    rule(Name(".zlogin"), "shell startup file", "as `.bashrc`"),
    // Package managers and toolchains: obeyed by any command of the tool
    // in the directory, or run by an editor on open.
    rule(
        Name(".npmrc"),
        "npm configuration",
        "`script-shell`, `node-options` (`--require`) and `git` name programs every npm command runs",
    ),
    rule(
        Name(".yarnrc"),
        "Yarn 1 configuration",
        "`yarn-path` is a script every `yarn` command runs",
    ),
    rule(
        Name(".yarnrc.yml"),
        "Yarn configuration",
        "`yarnPath` is a script every `yarn` command runs, and plugins are loaded from the directory",
    ),
    rule(
        Name(".pnpmfile.cjs"),
        "pnpm hooks",
        "JavaScript run by every `pnpm install`",
    ),
    rule(
        Name("bunfig.toml"),
        "Bun configuration",
        "`preload` scripts run by every `bun` command",
    ),
    rule(
        InDir(".cargo", "config.toml"),
        "Cargo configuration",
        "`rustc-wrapper`, runners and aliases, obeyed by the `cargo check` an editor runs on open",
    ),
    rule(
        InDir(".cargo", "config"),
        "Cargo configuration",
        "as `.cargo/config.toml`",
    ),
    rule(
        Name("rust-toolchain.toml"),
        "Rust toolchain file",
        "a `path` toolchain's binaries run by every `cargo` and `rustc`, an editor's included",
    ),
    rule(
        Name("rust-toolchain"),
        "Rust toolchain file",
        "as `rust-toolchain.toml`",
    ),
    rule(
        InDir("wrapper", "gradle-wrapper.properties"),
        "Gradle wrapper",
        "the distribution an IDE downloads and runs when it imports the project",
    ),
    rule(
        Name(".mvn"),
        "Maven configuration",
        "extensions and JVM options every `mvn` in the directory loads",
    ),
    // Hook managers: what git hooks installed by the operator run.
    rule(
        Name(".pre-commit-config.yaml"),
        "pre-commit hooks",
        "the commands the pre-commit hook runs on `git commit`",
    ),
    rule(
        Name(".husky"),
        "husky hooks",
        "git hooks (`core.hooksPath`)",
    ),
    rule(
        Name(".githooks"),
        "git hooks directory",
        "the customary `core.hooksPath`",
    ),
    rule(
        Name("lefthook.yml"),
        "lefthook hooks",
        "the commands its git hooks run",
    ),
    rule(Name("lefthook.yaml"), "lefthook hooks", "as `lefthook.yml`"),
    rule(Name(".lefthook.yml"), "lefthook hooks", "as `lefthook.yml`"),
    // Git's own files outside a repository's directory, for a directory that
    // is a home.
    rule(
        Name(".gitconfig"),
        "git user configuration",
        "as a repository's configuration, when the directory is a home",
    ),
];

/// The directories at the top of a kept home (`sandbox.home`) that are
/// coding agents' own homes rather than a project's settings: what they
/// hold is mostly the agent's sessions and history, which must last for
/// continue and resume to work, so they are read entry by entry under
/// [`HOME_RULES`] instead of set aside whole as [`RULES`] would.
pub(crate) const AGENT_HOMES: &[&str] = &[".claude", ".codex"];

/// What in an agent's own home ([`AGENT_HOMES`]) makes something run or
/// obeys a program: set aside when the agent added or changed it, like
/// [`RULES`] in a work directory. Everything else there (sessions,
/// history, caches, instructions such as `CLAUDE.md`) is kept.
/// Kept in this order in `docs/sandbox.md`.
pub const HOME_RULES: &[Rule] = &[
    rule(
        InDir(".claude", "settings.json"),
        "Claude Code user settings",
        "hooks, `apiKeyHelper`, status line and environment name programs every session runs",
    ),
    rule(
        InDir(".claude", "settings.local.json"),
        "Claude Code user settings",
        "as `.claude/settings.json`",
    ),
    rule(
        InDir(".claude", "hooks"),
        "Claude Code hook scripts",
        "the programs hooks run",
    ),
    rule(
        InDir(".claude", "commands"),
        "Claude Code commands",
        "slash commands, which can run shell commands",
    ),
    rule(
        InDir(".claude", "agents"),
        "Claude Code subagents",
        "subagents with their own tools and prompts",
    ),
    rule(
        InDir(".claude", "skills"),
        "Claude Code skills",
        "instructions and scripts a session loads",
    ),
    rule(
        InDir(".claude", "plugins"),
        "Claude Code plugins",
        "hooks, commands, agents and MCP servers",
    ),
    rule(
        InDir(".codex", "config.toml"),
        "Codex configuration",
        "`notify` and MCP servers name programs Codex runs, and model providers where it sends requests",
    ),
    rule(
        InDir(".codex", "prompts"),
        "Codex custom prompts",
        "commands a session runs",
    ),
    rule(
        InDir(".codex", "rules"),
        "Codex command rules",
        "which commands Codex runs without asking",
    ),
];

/// The rule of [`HOME_RULES`] for the entry `name` of the agent's home
/// `dir` (one of [`AGENT_HOMES`]), if any.
pub(crate) fn home_rule(dir: &[u8], name: &[u8]) -> Option<&'static Rule> {
    HOME_RULES.iter().find(|rule| match rule.pattern {
        InDir(d, n) => d.as_bytes() == dir && n.as_bytes() == name,
        Name(_) => false,
    })
}

/// What git reads in a repository's directory (`.git`, a bare repository,
/// a linked worktree's or a submodule's directory).
pub const GIT_RULES: &[(&str, &str)] = &[
    (
        "config, config.worktree",
        "`core.fsmonitor`, `core.pager`, `core.editor`, `core.sshCommand`, `diff.external`, diff, merge and filter drivers, `core.hooksPath`, aliases, credential helpers and includes name programs that `git status`, `git diff`, `git log` and `git commit` run; kept when the agent only added allowed settings (`user.name`, a branch's upstream, …), else rewritten without the rest",
    ),
    (
        "hooks/",
        "run by `git commit`, `git checkout`, `git merge`, `git push`, …",
    ),
];

/// The rule `path` (relative to the work directory, as components) falls
/// under, if any: its own name or that of a directory above it.
pub(crate) fn matching<'a, I>(components: I) -> Option<&'static Rule>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut parent: Option<&[u8]> = None;
    for name in components {
        let found = RULES.iter().find(|rule| match rule.pattern {
            Name(n) => n.as_bytes() == name,
            InDir(dir, n) => n.as_bytes() == name && parent == Some(dir.as_bytes()),
        });
        if found.is_some() {
            return found;
        }
        parent = Some(name);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(path: &str) -> Option<&'static str> {
        matching(path.split('/').map(str::as_bytes)).map(|r| r.what)
    }

    #[test]
    fn names_at_any_depth_and_everything_below_a_directory() {
        assert_eq!(
            find(".vscode/tasks.json"),
            Some("VS Code workspace settings")
        );
        assert_eq!(find("sub/project/.envrc"), Some("direnv environment"));
        assert_eq!(find(".vscode"), Some("VS Code workspace settings"));
        assert_eq!(find("a/.cargo/config.toml"), Some("Cargo configuration"));
        assert_eq!(
            find("gradle/wrapper/gradle-wrapper.properties"),
            Some("Gradle wrapper")
        );
        assert_eq!(find("config.toml"), None);
        assert_eq!(find("src/main.rs"), None);
        assert_eq!(find("vscode/tasks.json"), None);
        assert_eq!(find("notes/.envrc.txt"), None);
    }

    #[test]
    fn docs_list_every_rule_as_it_is() {
        let docs = include_str!("../../../docs/sandbox.md");
        for rule in RULES.iter().chain(HOME_RULES) {
            let path = match rule.pattern {
                Name(n) => n.to_owned(),
                InDir(dir, n) => format!("{dir}/{n}"),
            };
            let row = format!("| `{path}` | {} | {} |", rule.what, rule.why);
            assert!(docs.contains(&row), "docs/sandbox.md lacks the row {row}");
        }
    }

    #[test]
    fn a_home_rule_names_an_entry_of_an_agents_home() {
        for rule in HOME_RULES {
            let InDir(dir, name) = rule.pattern else {
                panic!("{rule:?}");
            };
            assert!(AGENT_HOMES.contains(&dir), "{rule:?}");
            assert!(home_rule(dir.as_bytes(), name.as_bytes()).is_some());
        }
        assert!(home_rule(b".claude", b"projects").is_none());
        assert!(home_rule(b".codex", b"sessions").is_none());
        assert!(home_rule(b".codex", b"settings.json").is_none());
    }

    #[test]
    fn every_rule_says_what_and_why() {
        for rule in RULES.iter().chain(HOME_RULES) {
            assert!(!rule.what.is_empty() && !rule.why.is_empty(), "{rule:?}");
        }
    }
}
