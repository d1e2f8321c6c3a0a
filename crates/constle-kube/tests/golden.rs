//! The golden test: the whole stream rendered from `tests/data/agent.yaml`
//! is `tests/data/expected.yaml`, byte for byte, and reads back.
//!
//! After a deliberate change, regenerate with
//! `CONSTLE_BLESS=1 cargo test -p constle-kube --test golden` and review
//! the diff.

use std::path::Path;

use constle_kube::{Label, MAX_NAME_LEN, Options, from_yaml, parse_cidr, render};

#[test]
fn the_example_renders_as_checked_in() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let text = std::fs::read_to_string(dir.join("agent.yaml")).expect("agent.yaml");
    let manifest =
        constle_manifest::parse_str(&text, Path::new("/srv/agents/agent.yaml"), &|_| None)
            .expect("valid")
            .manifest;
    let mut options = Options::new(Label::new("--name", "invoices", MAX_NAME_LEN).expect("name"));
    options.namespace = Some(Label::new("--namespace", "agents", 63).expect("namespace"));
    options.cluster_cidrs = vec![parse_cidr("--cluster-cidr", "10.244.0.0/16").expect("cidr")];
    options.service_cidrs = vec![parse_cidr("--service-cidr", "10.96.0.0/12").expect("cidr")];
    let yaml = render(&manifest, &text, &options).expect("render").yaml;
    let expected = dir.join("expected.yaml");
    if std::env::var_os("CONSTLE_BLESS").is_some() {
        std::fs::write(&expected, &yaml).expect("write");
    }
    let want = std::fs::read_to_string(&expected).expect("expected.yaml");
    assert_eq!(yaml, want, "the rendered stream changed");
    assert_eq!(from_yaml(&want).expect("reads back").len(), 6);
}
