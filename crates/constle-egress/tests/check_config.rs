//! Every configuration Constle generates passes the real `squid -k parse`
//! with no complaint at all, and the check does catch the mistakes Squid
//! only mentions (exit 0 with ERROR/WARNING lines).

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use constle_egress::{ALLOWED_HOSTS_FILE, CONF_FILE, EgressPolicy, Mode, check_config, render};
use constle_manifest::Hostname;
use constle_testkit::require_tools;

fn host(s: &str) -> Hostname {
    Hostname::new(s).expect("host")
}

/// Renders `policy` into `dir` and writes every file the config names.
fn write_config(dir: &Path, policy: &EgressPolicy, with_hosts: bool) -> PathBuf {
    let hosts = with_hosts.then(|| {
        let path = dir.join("hosts");
        std::fs::write(&path, "203.0.113.9 api.example.test\n").expect("hosts");
        path
    });
    let listen: SocketAddr = "127.0.0.1:3128".parse().expect("addr");
    let rendered = render(policy, dir, listen, hosts.as_deref()).expect("render");
    if !rendered.allowed_hosts.is_empty() {
        std::fs::write(dir.join(ALLOWED_HOSTS_FILE), &rendered.allowed_hosts).expect("allowlist");
    }
    let conf = dir.join(CONF_FILE);
    std::fs::write(&conf, &rendered.squid_conf).expect("conf");
    conf
}

fn policies() -> Vec<(&'static str, EgressPolicy)> {
    vec![
        (
            "restricted",
            EgressPolicy::restricted([
                host("api.example.test"),
                host("api.groq.com"),
                host("xn--bcher-kva.example"),
            ]),
        ),
        (
            "restricted, one host",
            EgressPolicy::restricted([host("api.example.test")]),
        ),
        ("restricted, empty", EgressPolicy::restricted([])),
        ("open", EgressPolicy::open()),
        (
            "open, hosts listed (ignored)",
            EgressPolicy {
                mode: Mode::Open,
                allowed_hosts: vec![host("api.example.test")],
            },
        ),
    ]
}

#[test]
fn every_generated_configuration_parses_without_a_complaint() {
    if !require_tools("squid -k parse of generated configs", &["squid"]) {
        return;
    }
    for (name, policy) in policies() {
        for with_hosts in [true, false] {
            let dir = tempfile::tempdir().expect("dir");
            let conf = write_config(dir.path(), &policy, with_hosts);
            if let Err(complaints) = check_config(&conf) {
                panic!("{name}, hosts file {with_hosts}: {complaints}");
            }
        }
    }
}

#[test]
fn the_check_catches_what_squid_only_mentions() {
    if !require_tools("squid -k parse of broken configs", &["squid"]) {
        return;
    }
    let base = EgressPolicy::restricted([host("api.example.test")]);
    let cases: &[(&str, &str, &str)] = &[
        // Squid skips an invalid regex with an ERROR and exits 0.
        (
            "invalid regex",
            "acl broken dstdom_regex -n ^(unclosed\n",
            "unclosed",
        ),
        ("obsolete directive", "dns_v4_first on\n", "dns_v4_first"),
        ("via off", "via off\n", ""),
        (
            "unknown directive",
            "frobnicate_requests yes\n",
            "frobnicate",
        ),
        (
            "unknown ACL",
            "http_access deny no_such_acl\n",
            "no_such_acl",
        ),
        (
            "empty ACL file",
            "acl nothing dstdomain -n \"{dir}/empty\"\n",
            "empty",
        ),
        (
            "missing ACL file",
            "acl gone dstdomain -n \"{dir}/gone\"\n",
            "gone",
        ),
    ];
    for (name, extra, mention) in cases {
        let dir = tempfile::tempdir().expect("dir");
        let conf = write_config(dir.path(), &base, true);
        std::fs::write(dir.path().join("empty"), "").expect("empty");
        let extra = extra.replace("{dir}", &dir.path().display().to_string());
        let text = std::fs::read_to_string(&conf).expect("read") + &extra;
        std::fs::write(&conf, text).expect("write");
        match check_config(&conf) {
            Ok(()) => panic!("{name}: no complaint about {extra:?}"),
            Err(complaints) => {
                assert!(!complaints.complaints.is_empty(), "{name}");
                assert_eq!(complaints.config, conf);
                let all = complaints.to_string();
                assert!(all.contains(mention), "{name}: {all}");
                assert!(all.contains(&conf.display().to_string()), "{name}: {all}");
            }
        }
    }
}

#[test]
fn a_missing_file_is_a_complaint() {
    if !require_tools("squid -k parse of a missing file", &["squid"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let err = check_config(&dir.path().join("nope.conf")).expect_err("missing");
    assert!(!err.complaints.is_empty());
}
