//! Unit tests: each property of the pod's security, the Secret references,
//! the fence, the resources and the output's determinism.

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::*;

/// An Agentfile naming every kind of host variable, limits and a Redis.
pub(crate) const FULL: &str = include_str!("../tests/data/agent.yaml");

fn manifest(text: &str) -> Manifest {
    constle_manifest::parse_str(text, Path::new("/srv/agents/agent.yaml"), &|_| None)
        .expect("valid")
        .manifest
}

fn options() -> Options {
    let mut options = Options::new(Label::new("--name", "invoices", MAX_NAME_LEN).expect("label"));
    options.namespace = Some(Label::new("--namespace", "agents", 63).expect("label"));
    options.cluster_cidrs = vec![parse_cidr("--cluster-cidr", "10.244.0.0/16").expect("cidr")];
    options.service_cidrs = vec![
        parse_cidr("--service-cidr", "10.96.0.0/12").expect("cidr"),
        parse_cidr("--service-cidr", "fd00:10:96::/108").expect("cidr"),
    ];
    options
}

fn objects_of(text: &str, options: &Options) -> Vec<Object> {
    from_yaml(&render(&manifest(text), text, options).expect("render").yaml).expect("reads back")
}

fn the_job(objects: &[Object]) -> Job {
    objects
        .iter()
        .find_map(|o| match o {
            Object::Job(job) => Some(job.clone()),
            _ => None,
        })
        .expect("a job")
}

fn pod_spec(objects: &[Object]) -> PodSpec {
    the_job(objects)
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
}

fn constle_container(spec: &PodSpec) -> Container {
    spec.containers
        .iter()
        .find(|c| c.name == CONTAINER_NAME)
        .expect("constle's container")
        .clone()
}

fn policy(objects: &[Object], name: &str) -> NetworkPolicy {
    objects
        .iter()
        .find_map(|o| match o {
            Object::NetworkPolicy(p) if p.metadata.name.as_deref() == Some(name) => Some(p.clone()),
            _ => None,
        })
        .expect("the policy")
}

#[test]
fn the_pod_has_its_own_user_namespace_and_no_token() {
    let spec = pod_spec(&objects_of(FULL, &options()));
    assert_eq!(spec.host_users, Some(false));
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
}

#[test]
fn the_pod_runs_as_a_non_root_uid_under_the_localhost_profile() {
    let spec = pod_spec(&objects_of(FULL, &options()));
    let pod = spec.security_context.expect("pod security context");
    assert_eq!(pod.run_as_non_root, Some(true));
    assert_eq!(pod.run_as_user, Some(DEFAULT_UID));
    assert_eq!(pod.run_as_group, Some(DEFAULT_UID));
    assert_ne!(pod.run_as_user, Some(0));
    let seccomp = pod.seccomp_profile.expect("seccomp");
    assert_eq!(seccomp.type_, "Localhost");
    assert_eq!(
        seccomp.localhost_profile.as_deref(),
        Some(DEFAULT_SECCOMP_PROFILE)
    );
}

#[test]
fn the_seccomp_profile_is_the_one_asked_for() {
    let mut options = options();
    options.seccomp_profile = "profiles/constle-v2.json".to_owned();
    let spec = pod_spec(&objects_of(FULL, &options));
    let seccomp = spec
        .security_context
        .and_then(|s| s.seccomp_profile)
        .expect("seccomp");
    assert_eq!(
        seccomp.localhost_profile.as_deref(),
        Some("profiles/constle-v2.json")
    );
}

#[test]
fn the_container_drops_everything_and_unmasks_proc() {
    let container = constle_container(&pod_spec(&objects_of(FULL, &options())));
    let sc = container
        .security_context
        .expect("container security context");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.proc_mount.as_deref(), Some("Unmasked"));
    let caps = sc.capabilities.expect("capabilities");
    assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(caps.add, None);
    assert_eq!(
        container.command,
        Some(vec!["constle".into(), "run".into(), AGENTFILE_PATH.into()])
    );
    let spec = pod_spec(&objects_of(FULL, &options()));
    let init = spec.init_containers.expect("init containers");
    let sc = init[0]
        .security_context
        .clone()
        .expect("init security context");
    assert_eq!(sc.proc_mount, None, "only constle needs an unmasked /proc");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned()])
    );
}

#[test]
fn what_constle_writes_is_on_empty_dirs() {
    let spec = pod_spec(&objects_of(FULL, &options()));
    let mounts = constle_container(&spec).volume_mounts.expect("mounts");
    let at = |path: &str| {
        let mount = mounts.iter().find(|m| m.mount_path == path).expect(path);
        let volume = spec
            .volumes
            .as_ref()
            .and_then(|v| v.iter().find(|v| v.name == mount.name))
            .expect("volume");
        (mount.clone(), volume.clone())
    };
    for path in [
        "/etc/constle",
        "/tmp",
        "/var/lib/constle",
        "/etc/constle/work",
    ] {
        assert!(at(path).1.empty_dir.is_some(), "{path} is not an emptyDir");
    }
    // The ConfigMap reaches only the init container, read-only, which
    // copies the Agentfile into the Agentfile's own directory.
    let init = &spec.init_containers.as_ref().expect("init containers")[0];
    let init_mounts = init.volume_mounts.as_ref().expect("init mounts");
    let config_map = spec
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.config_map.is_some()))
        .expect("the ConfigMap's volume");
    let source = init_mounts
        .iter()
        .find(|m| m.name == config_map.name)
        .expect("the init container mounts the ConfigMap");
    assert_eq!(source.read_only, Some(true));
    assert!(!mounts.iter().any(|m| m.name == config_map.name));
    assert_eq!(
        init.command,
        Some(vec![
            "cp".into(),
            format!("{}/agent.yaml", source.mount_path),
            AGENTFILE_PATH.into()
        ])
    );
    let (config, _) = at(AGENTFILE_DIR);
    assert!(
        init_mounts.contains(&config),
        "the init container writes where constle reads"
    );
}

#[test]
fn every_host_variable_is_a_secret_ref_on_constles_container_only() {
    let m = manifest(FULL);
    let vars = host_variables(&m);
    let expected = [
        "ACCOUNTING_TOKEN",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "HUMAN_GATE_WEBHOOK_URL",
    ];
    assert_eq!(
        vars.iter().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
    let spec = pod_spec(&objects_of(FULL, &options()));
    assert_eq!(
        spec.containers.len(),
        1,
        "a second container would need checking too"
    );
    for init in spec.init_containers.as_ref().expect("init containers") {
        assert_eq!(init.env, None, "{} gets no variable", init.name);
    }
    let env = constle_container(&spec).env.expect("env");
    for var in expected {
        let entry = env.iter().find(|e| e.name == var).expect(var);
        assert_eq!(entry.value, None, "{var} must not be written in the YAML");
        let key = entry
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .expect("secretKeyRef");
        assert_eq!(key.name, "invoices-secrets");
        assert_eq!(key.key, var);
        assert_eq!(key.optional, Some(false));
    }
    assert_eq!(
        env.len(),
        expected.len() + 1,
        "only CONSTLE_HOME besides them"
    );
    // Nowhere else in the stream: not the Redis, not the init container.
    for workload in [Workload::Job, Workload::Pod, Workload::SandboxTemplate] {
        let mut o = options();
        o.workload = workload;
        let yaml = render(&m, FULL, &o).expect("render").yaml;
        assert_eq!(
            yaml.matches("secretKeyRef").count(),
            expected.len(),
            "{workload:?}"
        );
    }
}

#[test]
fn the_fence_denies_internal_ranges_and_the_clusters_own() {
    let objects = objects_of(FULL, &options());
    let spec = policy(&objects, "invoices-egress").spec.expect("spec");
    assert_eq!(spec.ingress, Some(Vec::new()));
    assert_eq!(
        spec.policy_types,
        Some(vec!["Ingress".to_owned(), "Egress".to_owned()])
    );
    let egress = spec.egress.expect("egress");
    let public = &egress[0];
    let ports = public.ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0].port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(443))
    );
    let blocks: Vec<_> = public
        .to
        .as_ref()
        .expect("to")
        .iter()
        .map(|peer| peer.ip_block.clone().expect("ip block"))
        .collect();
    let v4 = blocks.iter().find(|b| b.cidr == "0.0.0.0/0").expect("v4");
    let v6 = blocks.iter().find(|b| b.cidr == "::/0").expect("v6");
    let v4_except = v4.except.clone().expect("except");
    let v6_except = v6.except.clone().expect("except");
    for cidr in [
        "169.254.0.0/16",
        "169.254.169.254/32",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "10.244.0.0/16",
        "10.96.0.0/12",
    ] {
        assert!(v4_except.contains(&cidr.to_owned()), "{cidr} not excepted");
    }
    for cidr in [
        "fe80::/10",
        "fd00:ec2::254/128",
        "fc00::/7",
        "fd00:10:96::/108",
    ] {
        assert!(v6_except.contains(&cidr.to_owned()), "{cidr} not excepted");
    }
    assert!(
        !v4_except.iter().any(|c| c.contains(':')),
        "a v6 range under the v4 block"
    );
    assert!(
        !v6_except.iter().any(|c| c.contains('.')),
        "a v4 range under the v6 block"
    );
    // DNS only to the cluster's resolver; Redis only to this agent's.
    let dns = &egress[1];
    assert!(
        dns.to
            .as_ref()
            .expect("to")
            .iter()
            .all(|p| p.ip_block.is_none())
    );
    let redis = &egress[2];
    let selector = redis.to.as_ref().expect("to")[0]
        .pod_selector
        .clone()
        .expect("pods");
    assert_eq!(
        selector
            .match_labels
            .expect("labels")
            .get("app.kubernetes.io/component")
            .map(String::as_str),
        Some("redis")
    );
    assert_eq!(egress.len(), 3);
}

#[test]
fn the_fence_selects_the_jobs_pods() {
    let objects = objects_of(FULL, &options());
    let selector = policy(&objects, "invoices-egress")
        .spec
        .and_then(|s| s.pod_selector)
        .and_then(|s| s.match_labels)
        .expect("selector");
    let labels = the_job(&objects)
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.labels)
        .expect("pod labels");
    assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
}

#[test]
fn resources_follow_the_limits_with_headroom() {
    let spec = pod_spec(&objects_of(FULL, &options()));
    let resources = constle_container(&spec).resources.expect("resources");
    let limits = resources.limits.expect("limits");
    // memory: 512Mi + 256Mi; cpus: 1.5 + 0.5.
    assert_eq!(limits["memory"].0, "768Mi");
    assert_eq!(limits["cpu"].0, "2000m");
    assert_eq!(resources.requests.expect("requests"), limits);
    let job = the_job(&objects_of(FULL, &options()));
    let spec = job.spec.expect("job spec");
    assert_eq!(spec.active_deadline_seconds, Some(600 + 60));
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.ttl_seconds_after_finished, Some(DEFAULT_TTL_SECONDS));
}

#[test]
fn no_limits_no_limit_and_no_deadline() {
    let text = "name: bare\nsandbox:\n  command: [true]\n";
    let objects = objects_of(text, &options());
    let resources = constle_container(&pod_spec(&objects))
        .resources
        .expect("resources");
    assert_eq!(resources.limits, None);
    let requests = resources.requests.expect("requests");
    assert_eq!(requests["memory"].0, "256Mi");
    assert_eq!(requests["cpu"].0, "500m");
    assert_eq!(
        the_job(&objects)
            .spec
            .expect("spec")
            .active_deadline_seconds,
        None
    );
}

#[test]
fn memory_that_is_not_whole_mebibytes_stays_exact() {
    let limits = constle_manifest::Limits {
        memory_bytes: Some(100_000_001),
        ..Default::default()
    };
    let r = resources::container_resources(&limits);
    assert_eq!(
        r.limits.expect("limits")["memory"].0,
        (100_000_001 + MEMORY_HEADROOM_BYTES).to_string()
    );
}

#[test]
fn the_agentfile_is_shipped_byte_for_byte() {
    let objects = objects_of(FULL, &options());
    let Some(Object::ConfigMap(cm)) = objects.first() else {
        panic!("the ConfigMap comes first");
    };
    assert_eq!(cm.data.as_ref().expect("data")["agent.yaml"], FULL);
}

#[test]
fn same_input_same_bytes() {
    let m = manifest(FULL);
    let a = render(&m, FULL, &options()).expect("render");
    let b = render(&m, FULL, &options()).expect("render");
    assert_eq!(a, b);
}

#[test]
fn a_redis_the_agentfile_does_not_name_is_a_note() {
    let text = "name: bare\nsandbox:\n  command: [true]\n";
    let notes = render(&manifest(text), text, &options())
        .expect("render")
        .notes;
    assert!(
        !notes.iter().any(|n| n.contains("spending.ledger")),
        "no cap across runs: {notes:?}"
    );
    let text = "name: bare\nsandbox:\n  command: [true]\nspending:\n  max_per_day_usd: 1\n";
    let notes = render(&manifest(text), text, &options())
        .expect("render")
        .notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("set spending.ledger: redis://invoices-redis.agents.svc:6379/0"))
    );
    let notes = render(&manifest(FULL), FULL, &options())
        .expect("render")
        .notes;
    assert!(
        !notes.iter().any(|n| n.contains("spending.ledger")),
        "{notes:?}"
    );
    let elsewhere = FULL.replace("invoices-redis.agents.svc", "ledger.example");
    let notes = render(&manifest(&elsewhere), &elsewhere, &options())
        .expect("render")
        .notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("names redis://ledger.example:6379/0, kept as it is")),
        "{notes:?}"
    );
}

#[test]
fn names_and_cidrs_are_checked() {
    for bad in [
        "",
        "Invoices",
        "-a",
        "a-",
        "a_b",
        "a.b",
        &"a".repeat(MAX_NAME_LEN + 1),
    ] {
        assert!(Label::new("--name", bad, MAX_NAME_LEN).is_err(), "{bad:?}");
    }
    assert!(Label::new("--name", &"a".repeat(MAX_NAME_LEN), MAX_NAME_LEN).is_ok());
    for bad in [
        "10.0.0.0",
        "10.0.0.1/8",
        "10.0.0.0/33",
        "0.0.0.0/0",
        "::/0",
        "fd00::1/64",
        "x",
    ] {
        assert!(parse_cidr("--cluster-cidr", bad).is_err(), "{bad:?}");
    }
    let mut o = options();
    o.seccomp_profile = "/abs.json".to_owned();
    assert!(o.check().is_err());
    o.seccomp_profile = "a/../b.json".to_owned();
    assert!(o.check().is_err());
    let mut o = options();
    o.uid = 0;
    assert!(o.check().is_err(), "root");
}

#[test]
fn the_pod_workload_is_a_bare_pod_with_the_same_spec() {
    let mut o = options();
    let job_spec = pod_spec(&objects_of(FULL, &o));
    o.workload = Workload::Pod;
    let objects = objects_of(FULL, &o);
    let pod = objects
        .iter()
        .find_map(|ob| match ob {
            Object::Pod(p) => Some(p.clone()),
            _ => None,
        })
        .expect("a pod");
    assert_eq!(pod.spec, Some(job_spec));
    assert!(!objects.iter().any(|ob| matches!(ob, Object::Job(_))));
}

#[test]
fn the_sandbox_template_carries_the_pod_and_the_fence() {
    let mut o = options();
    let job_spec = pod_spec(&objects_of(FULL, &o));
    o.workload = Workload::SandboxTemplate;
    let objects = objects_of(FULL, &o);
    let template = objects
        .iter()
        .find_map(|ob| match ob {
            Object::SandboxTemplate(t) => Some(t.clone()),
            _ => None,
        })
        .expect("a template");
    assert_eq!(template.spec.pod_template.spec, job_spec);
    assert_eq!(template.spec.network_policy.egress, fence::agent_egress(&o));
    assert!(template.spec.network_policy.ingress.is_empty());
    let yaml = render(&manifest(FULL), FULL, &o).expect("render").yaml;
    assert!(
        yaml.contains("apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxTemplate\n")
    );
}

#[test]
fn the_agents_key_is_installed_by_an_init_container_only_when_asked() {
    let signed = "name: signed\nidentity:\n  did: did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\nsandbox:\n  command: [true]\n";
    let m = manifest(signed);
    let notes = render(&m, signed, &options()).expect("render").notes;
    assert!(
        notes.iter().any(|n| n.contains("give --key-secret NAME")),
        "{notes:?}"
    );
    let spec = pod_spec(&objects_of(signed, &options()));
    assert_eq!(spec.init_containers.expect("init").len(), 1);
    assert!(
        !spec
            .volumes
            .expect("volumes")
            .iter()
            .any(|v| v.secret.is_some())
    );

    let mut o = options();
    o.key_secret = Some("signed-key".to_owned());
    let notes = render(&m, signed, &o).expect("render").notes;
    assert!(!notes.iter().any(|n| n.contains("key-secret")), "{notes:?}");
    let spec = pod_spec(&objects_of(signed, &o));
    let volumes = spec.volumes.clone().expect("volumes");
    let key = volumes
        .iter()
        .find(|v| v.secret.is_some())
        .expect("the key's volume");
    let source = key.secret.clone().expect("secret");
    assert_eq!(source.secret_name.as_deref(), Some("signed-key"));
    assert_eq!(source.default_mode, Some(0o400));
    let init = spec.init_containers.clone().expect("init");
    let installer = init
        .iter()
        .find(|c| c.name == "agent-key")
        .expect("installer");
    let command = installer.command.clone().expect("command");
    assert_eq!(&command[..2], ["sh", "-c"]);
    assert!(command[2].starts_with("umask 077 && "), "{command:?}");
    assert_eq!(command[4], format!("{CONSTLE_HOME}/keys/agent"));
    assert_eq!(command[5], format!("/run/constle/agent-key/{KEY_FILE}"));
    let mounts = installer.volume_mounts.clone().expect("mounts");
    let secret_mount = mounts
        .iter()
        .find(|m| m.name == key.name)
        .expect("key mount");
    assert_eq!(secret_mount.read_only, Some(true));
    assert!(mounts.iter().any(|m| m.mount_path == "/var/lib/constle"));
    // Constle's container never mounts the Secret; nothing gets it as a variable.
    let constle = constle_container(&spec);
    assert!(
        !constle
            .volume_mounts
            .expect("mounts")
            .iter()
            .any(|m| m.name == key.name)
    );
    assert!(installer.env.is_none());
    o.key_secret = Some("Bad_Name".to_owned());
    assert!(render(&m, signed, &o).is_err());
}
