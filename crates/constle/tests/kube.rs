//! `constle kube` as a user runs it: the YAML alone on stdout, notes and
//! diagnostics on stderr, exit 2 for every refusal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use constle_kube::{Object, from_yaml};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../constle-kube/tests/data")
        .join(name)
}

fn kube(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_constle"))
        .arg("kube")
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn agentfile() -> String {
    data("agent.yaml").to_str().unwrap().to_owned()
}

#[test]
fn prints_the_golden_stream_and_notes_on_stderr() {
    let out = kube(&[
        &agentfile(),
        "--name",
        "invoices",
        "--namespace",
        "agents",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let want = std::fs::read_to_string(data("expected.yaml")).unwrap();
    assert_eq!(text(&out.stdout), want);
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("note: the Secret invoices-secrets must hold"),
        "{stderr}"
    );
    // The warnings about this machine's unset variables are not the pod's.
    assert!(!stderr.contains("is not set"), "{stderr}");
}

#[test]
fn the_name_defaults_to_the_agents() {
    let out = kube(&[&agentfile()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objects = from_yaml(&text(&out.stdout)).unwrap();
    let Some(Object::Job(job)) = objects.last() else {
        panic!("the Job comes last");
    };
    assert_eq!(job.metadata.name.as_deref(), Some("invoice-processor"));
    assert_eq!(job.metadata.namespace, None);
}

#[test]
fn pod_and_sandbox_template_replace_the_job() {
    let out = kube(&[&agentfile(), "--pod"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objects = from_yaml(&text(&out.stdout)).unwrap();
    assert!(matches!(objects.last(), Some(Object::Pod(_))));
    assert!(!objects.iter().any(|o| matches!(o, Object::Job(_))));
    let out = kube(&[&agentfile(), "--sandbox-template"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objects = from_yaml(&text(&out.stdout)).unwrap();
    assert!(matches!(objects.last(), Some(Object::SandboxTemplate(_))));
    let out = kube(&[&agentfile(), "--pod", "--sandbox-template"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn refusals_exit_2_with_nothing_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let invalid = dir.path().join("agent.yaml");
    std::fs::write(&invalid, "name: x\nsandbox:\n  commandd: [a]\n").unwrap();
    let invalid = invalid.to_str().unwrap();
    let missing = dir.path().join("missing.yaml");
    let cases: [(&[&str], &str); 9] = [
        (
            &[&agentfile(), "--uid", "0"],
            "--uid \"0\" must be a uid other than 0",
        ),
        (&[invalid], "error[unknown_field]: unknown field `commandd`"),
        (&[missing.to_str().unwrap()], "cannot read the Agentfile"),
        (
            &[&agentfile(), "--name", "Invoices"],
            "--name \"Invoices\" is not a DNS-1123 label",
        ),
        (
            &[&agentfile(), "--namespace", "a_b"],
            "--namespace \"a_b\" is not a DNS-1123 label",
        ),
        (
            &[&agentfile(), "--cluster-cidr", "10.0.0.1/8"],
            "the range it is in is 10.0.0.0/8",
        ),
        (
            &[&agentfile(), "--service-cidr", "fd00::/129"],
            "--service-cidr \"fd00::/129\" is not a CIDR",
        ),
        (
            &[&agentfile(), "--seccomp-profile", "/etc/x.json"],
            "relative to the kubelet's seccomp root",
        ),
        (
            &[&agentfile(), "--secret", "Bad_Secret"],
            "is not a Secret name",
        ),
    ];
    for (args, message) in cases {
        let out = kube(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed on stdout");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
