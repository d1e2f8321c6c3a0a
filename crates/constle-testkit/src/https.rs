//! [`HttpsSite`]: a simulated outside web site, over HTTPS with a test CA.

use std::io::{self, BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use tempfile::TempDir;

use crate::find_tool;
use crate::{HostsFile, TestHost};

/// The server, run with the namespace host's Python.
const SERVER: &str = include_str!("https_site.py");

/// A simulated web site: the files under a directory, served over HTTPS on
/// port 443 of a fresh [`TestHost`] namespace, under a certificate for the
/// site's names signed by a CA made for this site alone.
///
/// Nothing trusts that CA but a client told to
/// ([`HttpsSite::ca_certificate`]), so a client that reaches the site has
/// verified it as it would a real one. The server (Python's `http.server`,
/// HTTP/1.1 with keep-alive, `GET` and `HEAD`) serves files as they are and
/// a directory's `index.html`, which is all a package index, an npm
/// registry or a Git repository over "dumb" HTTP needs; every request it
/// answers is recorded ([`HttpsSite::requests`]).
///
/// Needs root (the namespace), `ip`, `openssl` and `python3`. The server
/// dies with the test thread that started the site, and on drop; the
/// namespace goes with the site.
pub struct HttpsSite {
    server: Child,
    host: TestHost,
    names: Vec<String>,
    dir: TempDir,
}

/// One request the site answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedRequest {
    /// The request's `Host` header (empty when it had none).
    pub host: String,
    /// `GET` or `HEAD`.
    pub method: String,
    /// The request target, query included.
    pub path: String,
    /// The status the site answered with.
    pub status: u16,
}

impl HttpsSite {
    /// Serves `root` as `https://<name>/` for each of `names` (the first is
    /// also the certificate's common name).
    pub fn start(root: &Path, names: &[&str]) -> io::Result<HttpsSite> {
        let dir = tempfile::Builder::new()
            .prefix("constle-https-site-")
            .tempdir()?;
        issue_certificates(dir.path(), names)?;
        let script = dir.path().join("https_site.py");
        std::fs::write(&script, SERVER)?;
        let host = TestHost::builder().without_listener().start()?;
        let python = tool("python3")?;
        let mut server = host
            .command(python)?
            .arg(&script)
            .arg(root)
            .args(["site.pem", "site.key", "requests.jsonl"].map(|f| dir.path().join(f)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("server.log"))?)
            .spawn()?;
        let ready = wait_ready(&mut server);
        let site = HttpsSite {
            server,
            host,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            dir,
        };
        ready.map_err(|e| io::Error::other(format!("{e}: {}", site.server_log())))?;
        Ok(site)
    }

    /// The test CA's certificate (PEM): what a client must trust to reach
    /// the site.
    pub fn ca_certificate(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The namespace host the site runs on.
    pub fn host(&self) -> &TestHost {
        &self.host
    }

    /// A hosts file mapping each of the site's names to its address.
    pub fn hosts_file(&self) -> HostsFile {
        let mut hosts = HostsFile::new();
        for name in &self.names {
            hosts.add(self.host.ipv4(), name);
        }
        hosts
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<ServedRequest> {
        let log = std::fs::read_to_string(self.dir.path().join("requests.jsonl"));
        log.unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|entry| ServedRequest {
                host: text(&entry["host"]),
                method: text(&entry["method"]),
                path: text(&entry["path"]),
                status: entry["status"]
                    .as_u64()
                    .and_then(|s| u16::try_from(s).ok())
                    .unwrap_or(0),
            })
            .collect()
    }

    /// What the server wrote to its standard error (tracebacks, for a
    /// failing test's message).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for HttpsSite {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl std::fmt::Debug for HttpsSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsSite")
            .field("names", &self.names)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn tool(name: &str) -> io::Result<PathBuf> {
    find_tool(name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("`{name}` is not installed"),
        )
    })
}

/// Waits for the server's `ready` line (it prints it once listening); it
/// exiting first ends its output, so this cannot wait forever.
fn wait_ready(server: &mut Child) -> io::Result<()> {
    let stdout = server
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.trim() == "ready" {
        Ok(())
    } else {
        Err(io::Error::other("the HTTPS site's server did not start"))
    }
}

/// Makes `ca.pem` (a fresh CA, its key beside it) and `site.pem` and
/// `site.key` (a server certificate for `names` that CA signed) in `dir`.
fn issue_certificates(dir: &Path, names: &[&str]) -> io::Result<()> {
    let first = names
        .first()
        .ok_or_else(|| io::Error::other("an HTTPS site needs a name"))?;
    let sans: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    // What a strict verifier (Python 3.13's, Node's) expects of a server
    // certificate, named outright rather than left to openssl.cnf.
    let extensions = format!(
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName={}\n\
         subjectKeyIdentifier=hash\n\
         authorityKeyIdentifier=keyid\n",
        sans.join(",")
    );
    std::fs::write(dir.join("site.ext"), extensions)?;
    let new_key = [
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ];
    let ca = [
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "7",
        "-subj",
        "/CN=constle-testkit CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ];
    openssl(
        dir,
        &[&["req", "-x509", "-new"][..], &new_key, &ca].concat(),
    )?;
    let subject = format!("/CN={first}");
    let request = ["-keyout", "site.key", "-out", "site.csr", "-subj", &subject];
    openssl(dir, &[&["req", "-new"][..], &new_key, &request].concat())?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "site.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "1",
            "-days",
            "7",
            "-extfile",
            "site.ext",
            "-out",
            "site.pem",
        ],
    )
}

/// Runs `openssl ARGS` in `dir`; a failure carries its stderr.
fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new(tool("openssl")?)
        .current_dir(dir)
        .args(args)
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "`openssl {}` failed ({}): {}",
        args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}
