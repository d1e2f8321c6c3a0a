//! install.sh against releases served on loopback, and the release workflow
//! it trusts.
//!
//! Each case builds a release (archives holding a stand-in `constle`,
//! checksums.txt, and when asked a signature), serves it from a small HTTP
//! server on 127.0.0.1 laid out as GitHub lays out releases, and runs
//! install.sh with a PATH that holds only the tools it needs, the stand-in
//! `uname` from tests/install and, when the case says so, the stand-in
//! `cosign` from there too. Every refusal is checked for its message, for
//! leaving the install directory as it was, and for leaving no temporary
//! files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use constle_testkit::{find_tool, require_tools};

const VERSION: &str = "1.2.3";
const IDENTITY: &str =
    r"^https://github\.com/constle/constle/\.github/workflows/release\.yaml@refs/tags/v";
const ISSUER: &str = "https://token.actions.githubusercontent.com";
/// The longest one run of install.sh may take.
const RUN_DEADLINE: Duration = Duration::from_secs(60);
/// What the constle `Case::preinstall` puts in place prints.
const OLD: &str = "the old constle";
/// What install.sh runs: everything else is kept off its PATH.
const TOOLS: &[&str] = &[
    "sh",
    "curl",
    "tar",
    "gzip",
    "sha256sum",
    "cut",
    "awk",
    "grep",
    "sed",
    "cat",
    "mktemp",
    "rm",
    "mkdir",
    "cp",
    "chmod",
    "mv",
    "rmdir",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn install_sh() -> PathBuf {
    repo_root().join("install.sh")
}

/// A file in tests/install: the stand-ins for `cosign` and `uname`.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/install")
        .join(name)
}

fn stand_in_cosign() -> PathBuf {
    fixture("cosign")
}

fn have_tools(test: &str) -> bool {
    require_tools(test, TOOLS)
}

fn sha256(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blob");
    fs::write(&file, bytes).unwrap();
    let out = Command::new(find_tool("sha256sum").unwrap())
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// The archive a release holds for `arch`: `constle_<version>_linux_<arch>/constle`,
/// a script that prints `marker`.
fn archive(version: &str, arch: &str, marker: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("constle_{version}_linux_{arch}");
    fs::create_dir(dir.path().join(&name)).unwrap();
    let bin = dir.path().join(&name).join("constle");
    fs::write(&bin, format!("#!/bin/sh\necho '{marker}'\n")).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(find_tool("tar").unwrap())
        .arg("-czf")
        .arg(dir.path().join("a.tar.gz"))
        .arg("-C")
        .arg(dir.path())
        .arg(&name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::read(dir.path().join("a.tar.gz")).unwrap()
}

/// The files of one release, by name.
struct Release {
    version: String,
    files: BTreeMap<String, Vec<u8>>,
}

impl Release {
    /// Archives for amd64 and arm64 (each prints `constle <version> <arch>`)
    /// and their checksums.txt; no signature.
    fn new(version: &str) -> Release {
        let mut release = Release {
            version: version.to_owned(),
            files: BTreeMap::new(),
        };
        for arch in ["amd64", "arm64"] {
            let marker = format!("constle {version} {arch}");
            release
                .files
                .insert(release.archive_name(arch), archive(version, arch, &marker));
        }
        release.write_checksums();
        release
    }

    fn archive_name(&self, arch: &str) -> String {
        format!("constle_{}_linux_{arch}.tar.gz", self.version)
    }

    /// checksums.txt over the archives, as `sha256sum` writes it.
    fn write_checksums(&mut self) {
        let mut text = String::new();
        for (name, bytes) in &self.files {
            if name.ends_with(".tar.gz") {
                text.push_str(&format!("{}  {name}\n", sha256(bytes)));
            }
        }
        self.files.insert("checksums.txt".into(), text.into_bytes());
    }

    /// checksums.txt.sig and .pem that the stand-in cosign accepts for the
    /// current checksums.txt.
    fn sign(mut self) -> Release {
        let digest = sha256(&self.files["checksums.txt"]);
        self.files.insert(
            "checksums.txt.sig".into(),
            format!("stand-in signature over {digest}").into_bytes(),
        );
        self.files
            .insert("checksums.txt.pem".into(), b"stand-in certificate".to_vec());
        self
    }

    fn set(mut self, name: &str, bytes: Vec<u8>) -> Release {
        self.files.insert(name.to_owned(), bytes);
        self
    }

    /// Another amd64 archive in place of the built one; checksums.txt (and
    /// any signature) as they were.
    fn swap_amd64(self, bytes: Vec<u8>) -> Release {
        let name = self.archive_name("amd64");
        self.set(&name, bytes)
    }

    /// checksums.txt with each line as `edit` makes it (`None`: left out).
    fn edit_checksums(self, edit: impl FnMut(&str) -> Option<String>) -> Release {
        let text = String::from_utf8(self.files["checksums.txt"].clone()).unwrap();
        let edited: String = text.lines().filter_map(edit).map(|l| l + "\n").collect();
        self.set("checksums.txt", edited.into_bytes())
    }
}

/// A static file server on 127.0.0.1 for one directory; remembers every
/// path asked for.
struct Server {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(root: PathBuf) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(&root, stream, &seen);
            }
        });
        Server { url, requests }
    }

    fn requested(&self, suffix: &str) -> bool {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.ends_with(suffix))
    }
}

fn serve(root: &Path, stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => break,
            Ok(_) if header == "\r\n" || header == "\n" => break,
            Ok(_) => {}
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    seen.lock().unwrap().push(path.clone());
    let file = root.join(path.trim_start_matches('/'));
    let body = if path.contains("..") {
        None
    } else {
        fs::read(&file).ok()
    };
    let mut stream = &stream;
    let _ = match body {
        Some(body) => stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .and_then(|()| stream.write_all(&body)),
        None => stream.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n",
        ),
    };
}

/// Waits for install.sh, which must end within [`RUN_DEADLINE`]: a hang is
/// a failure, not a stuck test. Past it, its whole process group (curl
/// included) is killed.
fn finish(mut child: Child) -> Output {
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.unwrap().read_to_end(&mut bytes).unwrap();
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > RUN_DEADLINE {
            Command::new(find_tool("kill").unwrap())
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status()
                .unwrap();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
            panic!("install.sh did not finish within {RUN_DEADLINE:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// One run of install.sh: a served directory of releases, an install
/// directory, a temporary directory that must be left empty, and a PATH.
struct Case {
    dir: tempfile::TempDir,
    server: Server,
    cosign: bool,
    machine: String,
    env: Vec<(String, String)>,
}

impl Case {
    /// Serves `release` as version `release.version` and as the latest.
    fn new(release: &Release) -> Case {
        let case = Case::empty();
        case.publish(release, true);
        case
    }

    fn empty() -> Case {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["srv", "tmp", "home", "bin"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let server = Server::start(dir.path().join("srv"));
        Case {
            dir,
            server,
            cosign: false,
            machine: "x86_64".into(),
            env: Vec::new(),
        }
    }

    fn publish(&self, release: &Release, latest: bool) {
        let mut dirs = vec![format!("download/v{}", release.version)];
        if latest {
            dirs.push("latest/download".into());
        }
        for sub in dirs {
            let dir = self.path("srv").join(sub);
            fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in &release.files {
                fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn with_cosign(mut self) -> Case {
        self.cosign = true;
        self
    }

    fn machine(mut self, machine: &str) -> Case {
        self.machine = machine.to_owned();
        self
    }

    fn env(mut self, key: &str, value: &str) -> Case {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    fn install_dir(&self) -> PathBuf {
        self.path("home/bin")
    }

    fn installed(&self) -> PathBuf {
        self.install_dir().join("constle")
    }

    /// A constle already installed, which a refused install must leave alone.
    /// (Copied by `cp`: a file this multithreaded process had open for
    /// writing could still be open in a child another test is forking, and
    /// running it would then fail with ETXTBSY.)
    fn preinstall(&self) {
        fs::create_dir_all(self.install_dir()).unwrap();
        let out = Command::new(find_tool("cp").unwrap())
            .arg(fixture("old-constle"))
            .arg(self.installed())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn cosign_calls(&self) -> Vec<String> {
        fs::read_to_string(self.path("cosign.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Runs install.sh; checks that it left nothing in its temporary
    /// directory and no staged file in the install directory.
    fn run(&self) -> Run {
        self.run_with(|_| Vec::new())
    }

    /// [`run`](Case::run), calling `plant` with the process id install.sh
    /// will have (its `$$`) just before it starts; `plant` returns the names
    /// it put in the install directory, which install.sh must leave there.
    fn run_with(&self, plant: impl FnOnce(u32) -> Vec<String>) -> Run {
        let bin = self.path("bin");
        for tool in TOOLS {
            let link = bin.join(tool);
            if !link.exists() {
                std::os::unix::fs::symlink(find_tool(tool).unwrap(), link).unwrap();
            }
        }
        let uname = bin.join("uname");
        if !uname.exists() {
            std::os::unix::fs::symlink(fixture("uname"), uname).unwrap();
        }
        if self.cosign {
            let cosign = bin.join("cosign");
            if !cosign.exists() {
                std::os::unix::fs::symlink(stand_in_cosign(), cosign).unwrap();
            }
        }
        // A shell that waits for a line, then becomes install.sh: `exec`
        // keeps the process id, so `before` knows install.sh's `$$`.
        let mut command = Command::new(find_tool("sh").unwrap());
        command
            .args(["-c", r#"read -r go && exec sh "$0""#])
            .arg(install_sh())
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", self.path("home"))
            .env("TMPDIR", self.path("tmp"))
            .env("COSIGN_STANDIN_LOG", self.path("cosign.log"))
            .env("STANDIN_MACHINE", &self.machine)
            .env("CONSTLE_BASE_URL", &self.server.url)
            .env("CONSTLE_INSTALL_DIR", self.install_dir())
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let planted = plant(child.id());
        writeln!(child.stdin.take().unwrap(), "go").unwrap();
        let run = Run {
            output: finish(child),
        };
        let left: Vec<_> = fs::read_dir(self.path("tmp")).unwrap().collect();
        assert!(left.is_empty(), "install.sh left {left:?} in TMPDIR\n{run}");
        if let Ok(entries) = fs::read_dir(self.install_dir()) {
            let names: Vec<String> = entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(
                names.iter().all(|n| n == "constle" || planted.contains(n)),
                "install.sh left {names:?} in the install directory\n{run}"
            );
        }
        run
    }

    /// What the installed constle prints, or None when there is none.
    fn installed_says(&self) -> Option<String> {
        let out = Command::new(self.installed()).output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Runs install.sh, which must succeed and install what says `says`.
    #[track_caller]
    fn installs(&self, says: &str) -> Run {
        let run = self.run();
        run.assert_ok();
        assert_eq!(
            self.installed_says().as_deref(),
            Some(says),
            "installed\n{run}"
        );
        run
    }

    /// Runs install.sh, which must refuse with an error that says `what` and
    /// leave installed what says `left` (`None`: nothing).
    #[track_caller]
    fn refuses(&self, what: &str, left: Option<&str>) -> Run {
        let run = self.run();
        run.assert_refused(what);
        assert_eq!(self.installed_says().as_deref(), left, "installed\n{run}");
        run
    }
}

struct Run {
    output: Output,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    fn succeeded(&self) -> bool {
        self.output.status.success()
    }

    #[track_caller]
    fn assert_ok(&self) {
        assert!(self.succeeded(), "install.sh failed\n{self}");
    }

    /// Failed, with an error that says `what`.
    #[track_caller]
    fn assert_refused(&self, what: &str) {
        assert!(!self.succeeded(), "install.sh succeeded\n{self}");
        let stderr = self.stderr();
        assert!(
            stderr.contains("install.sh: error: ") && stderr.contains(what),
            "expected an error saying {what:?}\n{self}"
        );
    }

    #[track_caller]
    fn assert_says(&self, what: &str) {
        assert!(self.stderr().contains(what), "expected {what:?}\n{self}");
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {}\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            self.stderr()
        )
    }
}

#[test]
fn installs_the_latest_release_checking_its_checksum_when_there_is_no_cosign() {
    if !have_tools("installs_the_latest_release") {
        return;
    }
    let case = Case::new(&Release::new(VERSION).sign());
    let run = case.installs("constle 1.2.3 amd64");
    run.assert_says("cosign is not on PATH: the signature on checksums.txt is NOT checked");
    run.assert_says("checksum OK: constle_1.2.3_linux_amd64.tar.gz");
    assert!(case.server.requested("/latest/download/checksums.txt"));
    let mode = fs::metadata(case.installed()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[test]
fn installs_after_cosign_verifies_the_signature_with_both_pins() {
    if !have_tools("installs_after_cosign_verifies") {
        return;
    }
    let case = Case::new(&Release::new(VERSION).sign()).with_cosign();
    case.preinstall();
    let run = case.installs("constle 1.2.3 amd64");
    run.assert_says("signature verified");
    run.assert_says("(signature and checksum verified)");
    let calls = case.cosign_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].starts_with("verify-blob "), "{calls:?}");
    assert!(calls[0].contains(&format!("--certificate-identity-regexp {IDENTITY} ")));
    assert!(calls[0].contains(&format!("--certificate-oidc-issuer {ISSUER} ")));
}

#[test]
fn installs_the_arm64_archive_on_aarch64() {
    if !have_tools("installs_the_arm64_archive") {
        return;
    }
    let case = Case::new(&Release::new(VERSION)).machine("aarch64");
    case.installs("constle 1.2.3 arm64");
}

#[test]
fn refuses_when_cosign_rejects_the_signature() {
    if !have_tools("refuses_when_cosign_rejects_the_signature") {
        return;
    }
    let release = Release::new(VERSION)
        .sign()
        .set("checksums.txt.sig", b"someone else's signature".to_vec());
    let case = Case::new(&release).with_cosign();
    case.preinstall();
    let run = case.refuses("the signature on", Some(OLD));
    run.assert_says("did not verify");
    run.assert_says("cosign: Error: invalid signature");
    assert!(!case.server.requested(".tar.gz"), "fetched the archive");
}

#[test]
fn refuses_a_consistent_but_resigned_swap_of_checksums_and_archive() {
    if !have_tools("refuses_a_resigned_swap") {
        return;
    }
    // The mirror serves another archive and a checksums.txt that matches
    // it, next to the genuine signature: only the signature catches this.
    let genuine = Release::new(VERSION).sign();
    let mut forged = Release::new(VERSION).swap_amd64(archive(VERSION, "amd64", "evil"));
    forged.write_checksums();
    for name in ["checksums.txt.sig", "checksums.txt.pem"] {
        forged = forged.set(name, genuine.files[name].clone());
    }
    Case::new(&forged)
        .with_cosign()
        .refuses("did not verify", None);
}

#[test]
fn refuses_a_tampered_archive() {
    if !have_tools("refuses_a_tampered_archive") {
        return;
    }
    let release = Release::new(VERSION)
        .sign()
        .swap_amd64(archive(VERSION, "amd64", "evil"));
    for cosign in [false, true] {
        let mut case = Case::new(&release);
        case.cosign = cosign;
        case.preinstall();
        let run = case.refuses("SHA-256 mismatch for http://127.0.0.1:", Some(OLD));
        run.assert_says("constle_1.2.3_linux_amd64.tar.gz: checksums.txt says ");
    }
}

#[test]
fn refuses_when_checksums_txt_has_no_line_for_the_archive() {
    if !have_tools("refuses_when_checksums_txt_has_no_line") {
        return;
    }
    let release = Release::new(VERSION)
        .edit_checksums(|l| (!l.ends_with("_amd64.tar.gz")).then(|| l.to_owned()))
        .sign();
    // By version: the archive's name is known and its line is missing.
    let case = Case::new(&release)
        .with_cosign()
        .env("CONSTLE_VERSION", VERSION);
    case.refuses("has no line for constle_1.2.3_linux_amd64.tar.gz", None);
    assert!(!case.server.requested(".tar.gz"), "fetched the archive");
    // The latest: no line names an archive for this machine.
    Case::new(&release)
        .with_cosign()
        .refuses("has no line for a linux amd64 archive", None);
}

#[test]
fn refuses_a_malformed_checksum() {
    if !have_tools("refuses_a_malformed_checksum") {
        return;
    }
    let release = Release::new(VERSION).edit_checksums(|l| Some(l.replacen(&l[..64], &l[..63], 1)));
    Case::new(&release).refuses("malformed SHA-256", None);
}

#[test]
fn without_a_published_signature_warns_and_enforces_the_checksum() {
    if !have_tools("without_a_published_signature_warns") {
        return;
    }
    let case = Case::new(&Release::new(VERSION)).with_cosign();
    let run = case.run();
    run.assert_ok();
    run.assert_says("publishes no signature (checksums.txt.sig): only the SHA-256");
    run.assert_says("(checksum verified; signature NOT verified)");
    assert!(case.cosign_calls().is_empty());
}

#[test]
fn require_signature_refuses_a_release_without_one() {
    if !have_tools("require_signature_refuses_a_release_without_one") {
        return;
    }
    let case = Case::new(&Release::new(VERSION))
        .with_cosign()
        .env("CONSTLE_REQUIRE_SIGNATURE", "1");
    case.preinstall();
    case.refuses(
        "CONSTLE_REQUIRE_SIGNATURE=1, but http://127.0.0.1:",
        Some(OLD),
    );
    assert!(!case.server.requested(".tar.gz"), "fetched the archive");
}

#[test]
fn require_signature_refuses_when_cosign_is_missing() {
    if !have_tools("require_signature_refuses_when_cosign_is_missing") {
        return;
    }
    Case::new(&Release::new(VERSION).sign())
        .env("CONSTLE_REQUIRE_SIGNATURE", "1")
        .refuses(
            "CONSTLE_REQUIRE_SIGNATURE=1, but cosign is not on PATH",
            None,
        );
}

#[test]
fn require_signature_installs_once_cosign_verifies() {
    if !have_tools("require_signature_installs_once_cosign_verifies") {
        return;
    }
    let case = Case::new(&Release::new(VERSION).sign())
        .with_cosign()
        .env("CONSTLE_REQUIRE_SIGNATURE", "1");
    case.installs("constle 1.2.3 amd64");
    assert_eq!(case.cosign_calls().len(), 1);
}

#[test]
fn refuses_a_signature_without_its_certificate() {
    if !have_tools("refuses_a_signature_without_its_certificate") {
        return;
    }
    let mut release = Release::new(VERSION).sign();
    release.files.remove("checksums.txt.pem");
    Case::new(&release)
        .with_cosign()
        .refuses("no checksums.txt.pem", None);
}

#[test]
fn installs_the_version_asked_for() {
    if !have_tools("installs_the_version_asked_for") {
        return;
    }
    let case = Case::empty().env("CONSTLE_VERSION", "v0.9.0");
    case.publish(&Release::new("0.9.0").sign(), false);
    case.publish(&Release::new("1.0.0").sign(), true);
    case.installs("constle 0.9.0 amd64");
    assert!(
        case.server
            .requested("/download/v0.9.0/constle_0.9.0_linux_amd64.tar.gz")
    );
    assert!(!case.server.requested("/latest/download/checksums.txt"));

    let case = Case::empty().env("CONSTLE_VERSION", "2.0.0");
    case.publish(&Release::new("1.0.0").sign(), true);
    case.refuses("could not download http://127.0.0.1:", None)
        .assert_says("/download/v2.0.0/checksums.txt");
}

#[test]
fn refuses_a_version_that_is_not_a_version_number() {
    if !have_tools("refuses_a_version_that_is_not_a_version_number") {
        return;
    }
    for version in ["../1.0.0", "1.0.0/x", "1 0"] {
        let case = Case::new(&Release::new(VERSION)).env("CONSTLE_VERSION", version);
        case.refuses("CONSTLE_VERSION is not a version number", None);
        assert!(case.server.requests.lock().unwrap().is_empty());
    }
}

#[test]
fn refuses_a_machine_no_release_is_built_for() {
    if !have_tools("refuses_a_machine_no_release_is_built_for") {
        return;
    }
    for machine in ["riscv64", "armv7l", "i686"] {
        let case = Case::new(&Release::new(VERSION)).machine(machine);
        case.refuses(
            &format!("no release is built for this machine ({machine})"),
            None,
        );
        assert!(case.server.requests.lock().unwrap().is_empty());
    }
}

#[test]
fn refuses_base_urls_that_are_not_https_or_this_machine() {
    if !have_tools("refuses_base_urls_that_are_not_https") {
        return;
    }
    for url in [
        "http://example.com/releases",
        "http://127.0.0.1.example.com/releases",
        "ftp://127.0.0.1/releases",
        "file:///srv/releases",
    ] {
        Case::new(&Release::new(VERSION))
            .env("CONSTLE_BASE_URL", url)
            .refuses("CONSTLE_BASE_URL must be an https:// URL", None);
    }
    // User information makes the host whatever follows the '@'.
    let case = Case::new(&Release::new(VERSION));
    let sneaky = format!(
        "http://127.0.0.1:1@{}",
        case.server.url.trim_start_matches("http://")
    );
    let case = case.env("CONSTLE_BASE_URL", &sneaky);
    case.refuses("must not contain '@'", None);
    assert!(case.server.requests.lock().unwrap().is_empty());
}

#[test]
fn refuses_an_archive_without_the_binary_where_it_belongs() {
    if !have_tools("refuses_an_archive_without_the_binary") {
        return;
    }
    let mut release = Release::new(VERSION).swap_amd64(archive("9.9.9", "amd64", "x"));
    release.write_checksums();
    Case::new(&release).refuses("does not hold constle_1.2.3_linux_amd64/constle", None);
}

#[test]
fn refuses_when_the_binary_s_place_is_a_directory_or_a_link_to_one() {
    if !have_tools("refuses_when_the_binary_s_place_is_a_directory") {
        return;
    }
    // `mv` into a directory moves the file inside it, wherever it points:
    // the old "install" reported success and left no constle on PATH.
    type Plant = fn(&Case, &Path);
    let plant: [(&str, Plant); 2] = [
        ("a directory", |_, place| fs::create_dir(place).unwrap()),
        ("a link to a directory", |case, place| {
            let elsewhere = case.path("elsewhere");
            fs::create_dir(&elsewhere).unwrap();
            std::os::unix::fs::symlink(&elsewhere, place).unwrap();
        }),
    ];
    for (what, plant) in plant {
        let case = Case::new(&Release::new(VERSION));
        fs::create_dir_all(case.install_dir()).unwrap();
        plant(&case, &case.installed());
        let run = case.refuses("is a directory (or a link to one)", None);
        run.assert_says(&case.installed().display().to_string());
        let inside: Vec<_> = fs::read_dir(case.installed()).unwrap().collect();
        assert!(inside.is_empty(), "{what}: wrote {inside:?} into it\n{run}");
    }
}

#[test]
fn a_link_planted_where_the_binary_is_staged_is_never_written_through() {
    if !have_tools("a_link_planted_where_the_binary_is_staged") {
        return;
    }
    let case = Case::new(&Release::new(VERSION));
    fs::create_dir_all(case.install_dir()).unwrap();
    let victim = case.path("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    // The name the old install.sh staged under, planted as it starts.
    let run = case.run_with(|pid| {
        let staged = format!(".constle.install.{pid}");
        std::os::unix::fs::symlink(&victim, case.install_dir().join(&staged)).unwrap();
        vec![staged]
    });
    run.assert_ok();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "{run}");
    let mode = fs::metadata(&victim).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "chmod went through the link\n{run}");
    let installed = fs::symlink_metadata(case.installed()).unwrap();
    assert!(installed.file_type().is_file(), "{run}");
    assert_eq!(
        case.installed_says().as_deref(),
        Some("constle 1.2.3 amd64")
    );
}

/// A server that accepts connections and never answers.
fn stalled_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().flatten().collect();
        drop(held);
    });
    url
}

#[test]
fn a_stalled_release_server_times_out_with_a_clear_message() {
    if !have_tools("a_stalled_release_server_times_out") {
        return;
    }
    let case = Case::new(&Release::new(VERSION))
        .env("CONSTLE_BASE_URL", &stalled_server())
        .env("CONSTLE_DOWNLOAD_TIMEOUT", "2");
    case.preinstall();
    let started = Instant::now();
    let run = case.refuses("timed out after 2 s", Some(OLD));
    run.assert_says("/latest/download/checksums.txt");
    run.assert_says("CONSTLE_DOWNLOAD_TIMEOUT");
    assert!(started.elapsed() < Duration::from_secs(20), "{run}");
}

#[test]
fn refuses_a_download_timeout_that_is_not_a_number_of_seconds() {
    if !have_tools("refuses_a_download_timeout_that_is_not_a_number") {
        return;
    }
    for timeout in ["0", "-1", "1.5", "10s", "012"] {
        let case = Case::new(&Release::new(VERSION)).env("CONSTLE_DOWNLOAD_TIMEOUT", timeout);
        case.refuses("CONSTLE_DOWNLOAD_TIMEOUT must be", None);
        assert!(
            case.server.requests.lock().unwrap().is_empty(),
            "{timeout:?}"
        );
    }
}

#[test]
fn install_sh_passes_shellcheck() {
    if !require_tools("install_sh_passes_shellcheck", &["shellcheck"]) {
        return;
    }
    let out = Command::new(find_tool("shellcheck").unwrap())
        .args(["--shell=sh", "--severity=style"])
        .arg(install_sh())
        .args(["cosign", "uname", "old-constle"].map(fixture))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn workflow() -> String {
    fs::read_to_string(repo_root().join(".github/workflows/release.yaml")).unwrap()
}

#[test]
fn release_workflow_passes_actionlint() {
    if !require_tools("release_workflow_passes_actionlint", &["actionlint"]) {
        return;
    }
    let out = Command::new(find_tool("actionlint").unwrap())
        .arg("-no-color")
        .arg(".github/workflows/release.yaml")
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "actionlint .github/workflows/release.yaml:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every `uses:` names a full commit and says which release it is.
#[test]
fn release_workflow_pins_actions_by_commit() {
    let text = workflow();
    let mut seen = 0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim().trim_start_matches("- ");
        let Some(rest) = line.strip_prefix("uses:") else {
            continue;
        };
        seen += 1;
        let (target, comment) = rest.split_once('#').unwrap_or((rest, ""));
        let (action, rev) = target.trim().split_once('@').unwrap_or((target, ""));
        assert!(
            rev.len() == 40 && rev.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "release.yaml line {}: {action} is not pinned to a full commit SHA: {line}",
            n + 1
        );
        let tag = comment.trim();
        assert!(
            tag.starts_with('v') && tag[1..].split('.').count() == 3,
            "release.yaml line {}: {action}@{rev} needs a `# vX.Y.Z` comment: {line}",
            n + 1
        );
    }
    assert!(seen >= 5, "found only {seen} `uses:` lines");
}

#[test]
fn release_workflow_grants_write_permissions_only_to_the_release_job() {
    let text = workflow();
    assert!(
        text.contains("\npermissions: {}\n"),
        "no empty top-level permissions"
    );
    let (build, release) = text.split_once("\n  release:\n").unwrap();
    for grant in ["contents: write", "id-token: write", "attestations: write"] {
        assert!(!build.contains(grant), "the build job has {grant}");
        assert!(release.contains(grant), "the release job lacks {grant}");
    }
}

/// install.sh, the docs and the workflow's own check pin the same signer.
#[test]
fn the_signer_is_pinned_the_same_everywhere() {
    let install = fs::read_to_string(install_sh()).unwrap();
    assert!(install.contains(&format!("identity_regexp='{IDENTITY}'")));
    assert!(install.contains(&format!("oidc_issuer='{ISSUER}'")));
    let doc = fs::read_to_string(repo_root().join("docs/verify-a-release.md")).unwrap();
    assert!(doc.contains(&format!("--certificate-identity-regexp '{IDENTITY}'")));
    assert!(doc.contains(&format!("--certificate-oidc-issuer '{ISSUER}'")));
    let text = workflow();
    assert!(text.contains(&format!("IDENTITY: {IDENTITY}\n")));
    assert!(text.contains(&format!("ISSUER: {ISSUER}\n")));
    let stand_in = fs::read_to_string(stand_in_cosign()).unwrap();
    assert!(stand_in.contains(&format!("want_identity='{IDENTITY}'")));
    assert!(stand_in.contains(&format!("want_issuer='{ISSUER}'")));
}
