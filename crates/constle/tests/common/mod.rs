//! What the end-to-end tests of `constle` share: a scratch directory with
//! its own `CONSTLE_HOME`, the binary run in it, and its audit log read back.
#![allow(dead_code)]

pub mod http;
pub mod log;
pub mod mcp;
pub mod server;
pub mod witnesses;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use constle_testkit::Agentfile;

pub struct Case {
    pub dir: tempfile::TempDir,
}

impl Case {
    pub fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("work")).unwrap();
        Case { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn home(&self) -> PathBuf {
        self.path("home")
    }

    pub fn agentfile(&self, body: &str) -> PathBuf {
        let path = self.path("agent.yaml");
        fs::write(&path, format!("name: test-agent\n{body}")).unwrap();
        path
    }

    /// Writes `agentfile` as `agent.yaml`.
    pub fn write_agentfile(&self, agentfile: &Agentfile) -> PathBuf {
        let path = self.path("agent.yaml");
        fs::write(&path, agentfile.to_yaml()).unwrap();
        path
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(constle_bin());
        command
            .args(args)
            .env("CONSTLE_HOME", self.home())
            .current_dir(self.dir.path());
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs `keygen` or `webhook-keygen` (`args`), which must succeed: the
    /// new key's DID.
    pub fn keygen(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    }

    /// Today's audit log file.
    pub fn log_file(&self) -> PathBuf {
        fs::read_dir(self.home().join("logs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .unwrap()
    }

    /// The audit log's lines for today, as JSON.
    pub fn log(&self) -> Vec<serde_json::Value> {
        fs::read_to_string(self.log_file())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `constle audit verify --agentfile=<agentfile> <log>`: its status
    /// and a report of its output.
    pub fn audit_verify(&self, agentfile: &Path, log: &Path) -> (Option<i32>, String) {
        let agentfile = format!("--agentfile={}", agentfile.display());
        let out = self.run(&["audit", "verify", &agentfile, log.to_str().unwrap()]);
        (out.status.code(), report(&out))
    }

    pub fn events(&self, name: &str) -> Vec<serde_json::Value> {
        self.log()
            .into_iter()
            .filter(|e| e["event"] == name)
            .collect()
    }
}

/// The `constle` binary under test: the one this package built, or
/// `CONSTLE_TEST_BIN` when set (to run the suite against another build, such
/// as the code before a fix, and see the tests fail).
pub fn constle_bin() -> PathBuf {
    std::env::var_os("CONSTLE_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_constle")),
            PathBuf::from,
        )
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A finished command's status, stdout and stderr, for a failure message.
pub fn report(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// A harness-less test named `name` that runs `test` when `ready(name)`
/// says it can here (root, tools): otherwise it is skipped with a printed
/// reason, or fails under `CONSTLE_E2E=require` (see
/// [`constle_testkit::require_tools`]).
pub fn e2e_when(
    name: &str,
    ready: impl Fn(&str) -> bool + Send + 'static,
    test: impl FnOnce() + Send + 'static,
) -> libtest_mimic::Trial {
    let name = name.to_owned();
    libtest_mimic::Trial::test(name.clone(), move || {
        if ready(&name) {
            test();
        }
        Ok(())
    })
}

/// [`e2e_when`] root and bubblewrap are there: a test of `constle run`.
pub fn e2e(name: &str, test: impl FnOnce() + Send + 'static) -> libtest_mimic::Trial {
    e2e_when(
        name,
        |name| constle_testkit::require_root(name, &["bwrap"]),
        test,
    )
}

/// Whether `check` (a shell command) succeeds with what the sandbox runs:
/// its `PATH` over the host's system directories, and no other
/// environment.
pub fn in_the_sandbox(check: &str) -> bool {
    Command::new("/bin/sh")
        .args(["-c", check])
        .env_clear()
        .env("PATH", constle_sandbox::DEFAULT_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The field names of `object`, sorted.
pub fn fields(object: &serde_json::Value) -> Vec<&str> {
    let mut names: Vec<&str> = object
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names
}
