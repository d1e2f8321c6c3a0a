//! Agents' ordinary tools through `constle run`, unchanged: curl, Python's
//! `urllib` and `requests`, pip, npm, Node's own `fetch` and Git, each run
//! inside the sandbox with no proxy setting of its own, reaching a simulated
//! HTTPS site ([`HttpsSite`], in a network namespace the test creates)
//! through the egress proxy, the sandbox's only way out.
//!
//! The site's certificate comes from a CA made for the test. Constle
//! declares no CA: each test names it in `sandbox.env` under the variable
//! its client reads, as an Agentfile would for a site with a private CA.
//! Each test checks what the client got, what it left in its home, what the
//! site served, and that the proxy let the client's host through and
//! refused nothing. Nothing here sends traffic anywhere but loopback and
//! that namespace.
//!
//! What a client needs is looked for as the sandbox sees it (its `PATH`,
//! the host's `/usr`): missing, it fails the test under
//! `CONSTLE_E2E=require` (CI) and skips it otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::process::{Command, Stdio};

use constle_testkit::{Agentfile, HttpsSite, require_e2e, require_nothing_missing, require_root};

use common::{Case, in_the_sandbox, text};

/// Builds what the site serves, on the host.
const SITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/site.py");

/// What every client fetches, in one form or another, and prints.
const GREETING: &str = "hello from the simulated site";

/// One client, and how it is tried.
struct Client {
    /// The test's name, in messages.
    name: &'static str,
    /// What the sandbox must have: a description, and a shell check that
    /// succeeds when it is there.
    needs: &'static [(&'static str, &'static str)],
    /// What the site serves (`site.py`'s KIND), under the name `host`.
    site: &'static str,
    host: &'static str,
    /// The variable that tells the client to trust the test CA.
    ca_variable: &'static str,
    /// The agent: a shell script, `{host}` standing for the host, that
    /// prints [`GREETING`] from what it fetched.
    script: &'static str,
    /// A path the site must have answered with 200.
    fetched: &'static str,
    /// What the client must have left in `$HOME` (a cache, showing that
    /// it found a home), if anything.
    home: Option<&'static str>,
}

const CURL: Client = Client {
    name: "curl",
    needs: &[("`curl`", "command -v curl")],
    site: "files",
    host: "files.example.test",
    ca_variable: "CURL_CA_BUNDLE",
    script: "curl -sS --fail https://{host}/hello.txt",
    fetched: "/hello.txt",
    home: None,
};

const URLLIB: Client = Client {
    name: "python urllib",
    needs: &[("`python3`", "command -v python3")],
    site: "files",
    host: "files.example.test",
    ca_variable: "SSL_CERT_FILE",
    script: "python3 -c 'import sys, urllib.request; \
             sys.stdout.write(urllib.request.urlopen(\"https://{host}/hello.txt\").read().decode())'",
    fetched: "/hello.txt",
    home: None,
};

const REQUESTS: Client = Client {
    name: "python requests",
    needs: &[(
        "Python's `requests` (python3-requests)",
        "python3 -c 'import requests'",
    )],
    site: "files",
    host: "files.example.test",
    ca_variable: "REQUESTS_CA_BUNDLE",
    script: "python3 -c 'import sys, requests; r = requests.get(\"https://{host}/hello.txt\"); \
             r.raise_for_status(); sys.stdout.write(r.text)'",
    fetched: "/hello.txt",
    home: None,
};

const PIP: Client = Client {
    name: "pip",
    needs: &[("pip (python3-pip)", "python3 -m pip --version")],
    site: "pypi",
    host: "pypi.example.test",
    ca_variable: "PIP_CERT",
    script: "python3 -m pip install -q --disable-pip-version-check --no-deps --target pylib \
             --index-url https://{host}/simple/ constle-probe && \
             PYTHONPATH=pylib python3 -c 'import constle_probe; print(constle_probe.GREETING)'",
    fetched: "/packages/constle_probe-1.0-py3-none-any.whl",
    home: None,
};

const NPM: Client = Client {
    name: "npm",
    needs: &[("`npm`", "npm --version")],
    site: "npm",
    host: "registry.example.test",
    ca_variable: "NODE_EXTRA_CA_CERTS",
    script: "npm install --silent --no-audit --no-fund --no-update-notifier \
             --registry https://{host}/ constle-probe && \
             node -e 'console.log(require(\"constle-probe\").greeting)'",
    fetched: "/tarballs/constle-probe-1.0.0.tgz",
    home: Some(".npm"),
};

/// Node's `fetch` honours `NODE_USE_ENV_PROXY` from 22.21 and 24.0 on.
const NODE_FETCH: Client = Client {
    name: "node fetch",
    needs: &[(
        "Node 22.21, or 24.0 or newer (NODE_USE_ENV_PROXY)",
        "node -e 'const [a, b] = process.versions.node.split(\".\").map(Number); \
         process.exit(a >= 24 || (a === 22 && b >= 21) ? 0 : 1)'",
    )],
    site: "files",
    host: "files.example.test",
    ca_variable: "NODE_EXTRA_CA_CERTS",
    script: "node -e 'fetch(\"https://{host}/hello.txt\")\
             .then(r => { if (!r.ok) throw new Error(r.status); return r.text() })\
             .then(t => process.stdout.write(t), e => { console.error(e); process.exit(1) })'",
    fetched: "/hello.txt",
    home: None,
};

const GIT: Client = Client {
    name: "git",
    needs: &[(
        "`git` with HTTPS (git-remote-https)",
        "test -x \"$(git --exec-path)/git-remote-https\"",
    )],
    site: "git",
    host: "git.example.test",
    ca_variable: "GIT_SSL_CAINFO",
    script: "git clone -q https://{host}/probe.git probe && cat probe/README",
    fetched: "/probe.git/info/refs?service=git-upload-pack",
    home: None,
};

#[test]
fn curl() {
    through_the_proxy(&CURL);
}

#[test]
fn python_urllib() {
    through_the_proxy(&URLLIB);
}

#[test]
fn python_requests() {
    through_the_proxy(&REQUESTS);
}

#[test]
fn pip_installs_from_an_index() {
    through_the_proxy(&PIP);
}

#[test]
fn npm_installs_from_a_registry() {
    through_the_proxy(&NPM);
}

#[test]
fn node_fetch() {
    through_the_proxy(&NODE_FETCH);
}

#[test]
fn git_clones_over_https() {
    through_the_proxy(&GIT);
}

/// Runs `client`'s script as the agent, allowed its host alone, and checks
/// that it got there through the proxy.
fn through_the_proxy(client: &Client) {
    if !ready(client) {
        return;
    }
    let case = Case::new();
    let root = case.path("site");
    build_site(client, &root);
    let site = HttpsSite::start(&root, &[client.host]).unwrap();
    let ca = case.path("work").canonicalize().unwrap().join("ca.pem");
    fs::copy(site.ca_certificate(), &ca).unwrap();
    let hosts = case.path("hosts");
    site.hosts_file().write(&hosts).unwrap();

    let script = format!(
        "set -e; {}; echo home: $(ls -A \"$HOME\")",
        client.script.replace("{host}", client.host)
    );
    let file = case.write_agentfile(
        &Agentfile::new("test-agent")
            .sh(&script)
            .workdir("./work")
            .env(client.ca_variable, ca.to_str().unwrap())
            .allowed_hosts([client.host]),
    );
    let out = case.run(&[
        "run",
        "--hosts-file",
        hosts.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    let context = format!(
        "{}: stdout:\n{said}\nstderr:\n{err}\nsite: {:?}\n{}",
        client.name,
        site.requests(),
        site.server_log()
    );
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert!(said.lines().any(|l| l == GREETING), "{context}");
    if let Some(entry) = client.home {
        let home = said.lines().find_map(|l| l.strip_prefix("home: "));
        let home = home.unwrap_or_default();
        assert!(home.split(' ').any(|e| e == entry), "{context}");
    }
    check_site(client, &site, &context);
    check_proxy(client, &case, &site, &context);
}

/// Whether this machine can run `client`'s test: root, bubblewrap, Squid
/// and namespaces, the site's tools, and what the client needs in the
/// sandbox.
fn ready(client: &Client) -> bool {
    let test = client.name;
    if !(require_root(test, &["bwrap", "openssl", "python3", "git"]) && require_e2e(test)) {
        return false;
    }
    let missing: Vec<String> = client
        .needs
        .iter()
        .filter(|(_, check)| !in_the_sandbox(check))
        .map(|(what, _)| (*what).to_owned())
        .collect();
    require_nothing_missing(test, &missing)
}

fn build_site(client: &Client, root: &std::path::Path) {
    let out = Command::new("python3")
        .arg(SITE)
        .arg(client.site)
        .arg(root)
        .args([client.host, GREETING])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "site.py: {}", text(&out.stderr));
}

/// The site answered every request for the client's host, `fetched` with
/// 200 among them.
fn check_site(client: &Client, site: &HttpsSite, context: &str) {
    let served = site.requests();
    assert!(
        served
            .iter()
            .any(|r| r.path == client.fetched && r.status == 200),
        "{context}"
    );
    assert!(served.iter().all(|r| r.host == client.host), "{context}");
}

/// The run's log: the proxy let the client's host through (to the site's
/// address), and refused nothing.
fn check_proxy(client: &Client, case: &Case, site: &HttpsSite, context: &str) {
    let allowed = case.events("network_allowed");
    assert!(!allowed.is_empty(), "{context}");
    let address = site.host().ipv4().to_string();
    for event in &allowed {
        assert_eq!(event["host"], client.host, "{context}");
        assert_eq!(event["squid"], "TCP_TUNNEL/200", "{context}");
        assert_eq!(event["address"], address.as_str(), "{context}");
    }
    let blocked = case.events("network_blocked");
    assert!(blocked.is_empty(), "{blocked:?}\n{context}");
}
