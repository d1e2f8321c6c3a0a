//! What the operator must still do for the rendered objects to run this
//! Agentfile as it runs on a host: things `constle kube` cannot put in a
//! YAML stream (a key file, a Secret's values) or will not change (the
//! Agentfile's own text, whose digest is the policy).

use std::fmt::Write as _;

use constle_manifest::{Manifest, QuorumSource, RedisUrl};

use crate::agentfile;
use crate::init::KEY_FILE;
use crate::meta;
use crate::options::Options;
use crate::redis;
use crate::secrets::host_variables;

/// The notes for `manifest` rendered with `options`, each one sentence or
/// two, in a fixed order.
pub fn notes(manifest: &Manifest, options: &Options) -> Vec<String> {
    let mut notes = Vec::new();
    let variables = host_variables(manifest);
    if !variables.is_empty() {
        let keys: Vec<&str> = variables.iter().map(String::as_str).collect();
        notes.push(format!(
            "the Secret {} must hold one key per host variable, named as the variable: {}",
            options.secret,
            keys.join(", ")
        ));
    }
    let spending = &manifest.spending;
    let llm = &manifest.llm.spending;
    let across_runs = [
        spending.max_per_day_usd,
        spending.max_per_month_usd,
        llm.max_per_day_usd,
        llm.max_per_month_usd,
    ]
    .iter()
    .any(Option::is_some);
    if across_runs || spending.ledger.is_some() {
        let unset = "the day and month caps would count one run only, since the embedded ledger goes with the pod";
        redis_note(
            &mut notes,
            "spending.ledger",
            spending.ledger.as_ref(),
            unset,
            options,
        );
    }
    if let Some(a2a) = &manifest.a2a {
        let unset = "a message one run accepted could be accepted again by another, since the embedded store goes with the pod";
        redis_note(
            &mut notes,
            "a2a.replay",
            a2a.replay.as_ref(),
            unset,
            options,
        );
    }
    match (manifest.identity.is_some(), &options.key_secret) {
        (true, None) => notes.push(format!(
            "identity.did is set: the run signs its log with the agent's key, which the pod does not have; put the key file in a Secret under the key {KEY_FILE} and give --key-secret NAME"
        )),
        (false, Some(secret)) => notes.push(format!(
            "--key-secret {secret} installs a key, but the Agentfile sets no identity.did, so no run uses it"
        )),
        _ => {}
    }
    ports_note(&mut notes, manifest);
    paths_note(&mut notes, manifest);
    if manifest
        .a2a
        .as_ref()
        .is_some_and(|a2a| a2a.listen.is_some())
    {
        notes.push("a2a.listen is set, but the fence lets nothing into the pod: add an ingress rule for the peers that send to it".to_owned());
    }
    notes
}

/// A note when the Agentfile names no Redis for `field`, or one the fence
/// does not let the pod reach.
fn redis_note(
    notes: &mut Vec<String>,
    field: &str,
    url: Option<&RedisUrl>,
    unset: &str,
    options: &Options,
) {
    match url {
        None => notes.push(format!(
            "{field} is not set: {unset}; set {field}: {} (the rendered Redis)",
            redis::url(options)
        )),
        Some(url) if !names_rendered_redis(url, options) => notes.push(format!(
            "{field} names {}, kept as it is; the fence lets the pod reach only the rendered Redis and port 443: add an egress rule for it",
            url.redacted()
        )),
        Some(_) => {}
    }
}

/// Whether `url` is the rendered Service, by any name a pod resolves it by.
fn names_rendered_redis(url: &RedisUrl, options: &Options) -> bool {
    let text = url.as_str();
    let Some(rest) = text
        .strip_prefix("redis://")
        .or_else(|| text.strip_prefix("rediss://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = host_port.split(':').next().unwrap_or_default();
    let service = meta::redis_service(options);
    let mut names = vec![service.clone()];
    if let Some(ns) = &options.namespace {
        for suffix in ["", ".svc", ".svc.cluster.local"] {
            names.push(format!("{service}.{}{suffix}", ns.as_str()));
        }
    }
    names.iter().any(|name| name == host)
}

/// Servers the Agentfile names on a port other than 443, which the fence
/// does not let the pod reach.
fn ports_note(notes: &mut Vec<String>, manifest: &Manifest) {
    let mcp = manifest.mcp.servers.iter().filter_map(|s| s.url());
    let llm = manifest.llm.providers.iter().map(|p| &p.url);
    let peers = manifest
        .a2a
        .iter()
        .flat_map(|a2a| a2a.peers.iter().filter_map(|p| p.url.as_ref()));
    let witnesses = manifest.audit.witnesses.iter().map(|w| &w.url);
    let elsewhere: Vec<String> = mcp
        .chain(llm)
        .chain(peers)
        .chain(witnesses)
        .filter(|url| url.port_or_default() != 443)
        .map(ToString::to_string)
        .collect();
    if !elsewhere.is_empty() {
        notes.push(format!(
            "the fence lets the pod reach port 443 only: {} need an egress rule of yours",
            elsewhere.join(", ")
        ));
    }
}

/// Files the Agentfile refers to that the rendered pod does not hold.
fn paths_note(notes: &mut Vec<String>, manifest: &Manifest) {
    let mut paths = String::new();
    let mut add = |what: &str, path: &std::path::Path| {
        let pod = agentfile::pod_path(manifest, path);
        let _ = write!(
            paths,
            "{}{what} at {}",
            if paths.is_empty() { "" } else { "; " },
            pod.display()
        );
    };
    if let Some(rootfs) = &manifest.sandbox.rootfs {
        add("sandbox.rootfs", rootfs);
    }
    if let Some(QuorumSource::Set(set)) = manifest.human_gates.quorum.as_ref().map(|q| &q.source) {
        add("human_gates.approver_set", &set.dir);
    }
    if !paths.is_empty() {
        notes.push(format!(
            "only the Agentfile is shipped: the image (or a volume you add) must hold {paths}"
        ));
    }
    notes.push(format!(
        "the work directory {} starts empty in every run: the agent's own files must come from the image (or a volume you add)",
        agentfile::pod_path(manifest, &manifest.sandbox.workdir).display()
    ));
}
