//! The simulated HTTPS site itself: verified with its CA and only with it,
//! serving files, recording requests, gone after drop.

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

use std::process::{Command, Output};

use constle_testkit::{HttpsSite, ServedRequest, require_root};

const NAME: &str = "files.example.test";

/// `curl` from this host straight to the site (the namespace is routed
/// from here), trusting `ca` (or the system's CAs).
fn curl(site: &HttpsSite, ca: Option<&std::path::Path>, path: &str) -> Output {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--max-time", "10", "--resolve"])
        .arg(format!("{NAME}:443:{}", site.host().ipv4()))
        .arg(format!("https://{NAME}{path}"));
    if let Some(ca) = ca {
        command.arg("--cacert").arg(ca);
    }
    command.output().expect("curl")
}

#[test]
fn serves_files_to_clients_that_trust_its_ca() {
    if !require_root("https site", &["ip", "openssl", "python3", "curl"]) {
        return;
    }
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("hello.txt"), "hello\n").expect("write");
    let site = HttpsSite::start(root.path(), &[NAME]).expect("site");
    assert!(
        site.hosts_file()
            .contents()
            .contains(&format!("{} {NAME}", site.host().ipv4()))
    );

    let out = curl(&site, Some(&site.ca_certificate()), "/hello.txt");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n", "{out:?}");
    // The system's CAs do not vouch for it.
    let out = curl(&site, None, "/hello.txt");
    assert!(!out.status.success(), "{out:?}");
    let out = curl(&site, Some(&site.ca_certificate()), "/missing?x=1");
    assert!(out.status.success(), "{out:?}");

    let served = |path: &str, status| ServedRequest {
        host: NAME.to_owned(),
        method: "GET".to_owned(),
        path: path.to_owned(),
        status,
    };
    assert_eq!(
        site.requests(),
        [served("/hello.txt", 200), served("/missing?x=1", 404)],
        "{}",
        site.server_log()
    );

    let ns = site.host().namespace().to_owned();
    drop(site);
    assert!(!std::path::Path::new(&format!("/run/netns/{ns}")).exists());
}
