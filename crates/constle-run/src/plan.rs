//! What a run will enforce and what it will not, worked out from the
//! Agentfile before anything starts, so the run summary can say it.

use constle_manifest::{
    Egress, Hostname, Manifest, McpServer, McpTransport, OnTimeout, Quorum, QuorumSource,
};
use constle_sandbox::{AGENT_HOME, AGENT_ID};

/// One line of the run summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A protection this run applies.
    Enforced {
        /// Which part of Constle.
        part: &'static str,
        /// What exactly it does in this run.
        detail: String,
    },
    /// Something the Agentfile asks for, or a user may assume, that this run
    /// does not enforce, and why.
    NotEnforced {
        /// Which part of Constle.
        part: &'static str,
        /// Why not, and what that means.
        why: String,
    },
}

/// The run summary's contents, in order.
pub fn plan(manifest: &Manifest) -> Vec<Item> {
    let mut items = vec![sandbox(manifest), workdir(manifest)];
    items.extend(home(manifest));
    items.extend([limits(manifest), egress(manifest), audit(manifest)]);
    items.extend(witnesses(manifest));
    items.extend(mcp(manifest));
    items.extend(llm(manifest));
    items.extend(spending(manifest));
    items.extend(a2a(manifest));
    items
}

fn enforced(part: &'static str, detail: String) -> Item {
    Item::Enforced { part, detail }
}

fn not_enforced(part: &'static str, why: String) -> Item {
    Item::NotEnforced { part, why }
}

fn sandbox(manifest: &Manifest) -> Item {
    let root = match &manifest.sandbox.rootfs {
        Some(rootfs) => format!("root {} (read-only)", rootfs.display()),
        None => "system directories read-only".to_owned(),
    };
    let home = match &manifest.sandbox.home {
        Some(home) => format!(", {} as {AGENT_HOME}", home.display()),
        None => String::new(),
    };
    enforced(
        "sandbox",
        format!(
            "bubblewrap: own network, pid, ipc, uts and mount namespaces; uid {AGENT_ID}, {}, no capabilities, seccomp filter; {root}; writable: {}{home} and a private /tmp; output escaped",
            outside(constle_hostids::starter()),
            manifest.sandbox.workdir.display()
        ),
    )
}

/// Who the agent is outside its sandbox, when `starter` starts it.
fn outside(starter: constle_hostids::Starter) -> &'static str {
    match starter {
        constle_hostids::Starter::RootWithoutSysAdmin => {
            "which is root (uid 0) outside it, as constle is (root without CAP_SYS_ADMIN starts the sandbox as any user would; run constle as a non-root user, or give it CAP_SYS_ADMIN, for an agent that is nobody on the host)"
        }
        _ => "never the host's root",
    }
}

/// The kept home, when `sandbox.home` names one.
fn home(manifest: &Manifest) -> Option<Item> {
    let home = manifest.sandbox.home.as_ref()?;
    let sizes = match manifest.sandbox.tmpfs.home {
        Some(_) => "; sandbox.tmpfs.home sizes only the stdio servers' homes",
        None => "",
    };
    Some(enforced(
        "home",
        format!(
            "{}: HOME ({AGENT_HOME}), kept from run to run, on disk; checked like the workdir: this run's alone, after the run what the agent left there to run (shell startup files, git config, agent-CLI settings; its sessions stay) is set aside, and nothing stays writable by group or others or set-id that was not{sizes}",
            home.display()
        ),
    ))
}

fn workdir(manifest: &Manifest) -> Item {
    enforced(
        "workdir",
        format!(
            "{}: this run's alone; files with other names outside it refused; after the run, what the agent left there for your tools to run (git config and hooks, editor, shell and agent-CLI settings) is set aside, and nothing stays writable by group or others or set-id that was not",
            manifest.sandbox.workdir.display()
        ),
    )
}

fn limits(manifest: &Manifest) -> Item {
    let limits = &manifest.sandbox.limits;
    let mut parts = Vec::new();
    if let Some(bytes) = limits.memory_bytes {
        parts.push(format!("memory {}", constle_limits::bytes(bytes)));
    }
    if let Some(pids) = limits.pids {
        parts.push(format!("{pids} processes and threads"));
    }
    if let Some(millis) = limits.cpu_millis {
        parts.push(format!("{} CPUs", millis_as_decimal(millis)));
    }
    let wall_clock = limits
        .wall_clock_seconds
        .map(|seconds| format!("the run is stopped after {seconds} s (wall clock)"));
    match (parts.is_empty(), wall_clock) {
        (true, None) => not_enforced(
            "limits",
            "none declared (sandbox.limits): the agent may use all the memory, processes and CPU this machine gives it, for as long as it runs".into(),
        ),
        (true, Some(wall_clock)) => enforced(
            "limits",
            format!("{wall_clock}; no memory, process or CPU limit"),
        ),
        (false, wall_clock) => enforced(
            "limits",
            format!(
                "{} for the agent's whole process tree (cgroups){}",
                parts.join(", "),
                wall_clock.map_or_else(String::new, |w| format!("; {w}"))
            ),
        ),
    }
}

/// `1500` as `1.5`.
fn millis_as_decimal(millis: u32) -> String {
    let (whole, frac) = (millis / 1000, millis % 1000);
    match frac {
        0 => whole.to_string(),
        _ => format!("{whole}.{frac:03}")
            .trim_end_matches('0')
            .to_owned(),
    }
}

fn egress(manifest: &Manifest) -> Item {
    let hosts: Vec<String> = manifest
        .sandbox
        .network
        .allowed_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    match manifest.sandbox.network.egress {
        Egress::None => enforced("egress", "none: no proxy is started, the agent has no network at all".into()),
        Egress::Restricted if hosts.is_empty() => {
            enforced("egress", "restricted, with no allowed hosts: every connection is refused".into())
        }
        Egress::Restricted => enforced(
            "egress",
            format!(
                "restricted: HTTPS (CONNECT to port 443) only to {}; raw IPs, other ports and names resolving to internal addresses refused",
                hosts.join(", ")
            ),
        ),
        Egress::Open => enforced(
            "egress",
            "OPEN: any public host on port 443; only raw IPs, other ports and internal addresses are refused".into(),
        ),
    }
}

fn audit(manifest: &Manifest) -> Item {
    match &manifest.identity {
        Some(identity) => enforced("audit log", format!("every entry signed by {} and hash-chained", identity.did)),
        None => not_enforced(
            "audit log",
            "unsigned: no identity.did, so entries are hash-chained but anyone who can write the log could rewrite it".into(),
        ),
    }
}

/// Only for a signed log: an unsigned one has no checkpoints to witness.
fn witnesses(manifest: &Manifest) -> Option<Item> {
    manifest.identity.as_ref()?;
    let audit = &manifest.audit;
    let when = format!(
        "checkpoints every {} entries or {} s, at each UTC day's close and at run end",
        audit.checkpoint_every_entries, audit.checkpoint_every_seconds
    );
    if audit.witnesses.is_empty() {
        return Some(not_enforced(
            "witnesses",
            format!(
                "none declared (audit.witnesses): {when} are signed by the agent key alone, so whoever holds it could re-sign another past"
            ),
        ));
    }
    let names: Vec<&str> = audit.witnesses.iter().map(|w| w.name()).collect();
    let failing = match audit.witness_quorum_required {
        true => "required: the run stops rather than go on without them",
        false => "a witness that fails is warned about and asked again at the next checkpoint",
    };
    Some(enforced(
        "witnesses",
        format!(
            "{when}, cosigned by {} of {} ({}); {failing}",
            audit.witness_quorum,
            names.len(),
            names.join(", ")
        ),
    ))
}

fn mcp(manifest: &Manifest) -> Vec<Item> {
    let mut items: Vec<Item> = manifest
        .mcp
        .servers
        .iter()
        .map(|server| {
            let tools: Vec<&str> = server.tools.iter().map(|t| t.as_str()).collect();
            let run_here = match &server.transport {
                McpTransport::Url { .. } => String::new(),
                McpTransport::Stdio(stdio) => format!(
                    " (run by constle over stdio, in a sandbox of its own with {})",
                    server_network(&stdio.allowed_hosts)
                ),
            };
            enforced(
                "mcp gate",
                format!(
                    "server {}{run_here} at {}: only {} callable, tools/list filtered to them; other tools and methods refused{}",
                    server.id,
                    server.env_var(),
                    tools.join(", "),
                    added_headers(server),
                ),
            )
        })
        .collect();
    items.extend(human_gates(manifest));
    items
}

/// A stdio server's network, for the summary.
fn server_network(hosts: &[Hostname]) -> String {
    match hosts {
        [] => "no network".into(),
        hosts => {
            let hosts: Vec<&str> = hosts.iter().map(Hostname::as_str).collect();
            format!(
                "HTTPS only to {}, through a proxy of its own",
                hosts.join(", ")
            )
        }
    }
}

/// The headers the gate adds for `server`, by name and the variable their
/// value comes from: this runs before the values are read, and never shows
/// one.
fn added_headers(server: &McpServer) -> String {
    if server.headers().is_empty() {
        return String::new();
    }
    let headers: Vec<String> = server
        .headers()
        .iter()
        .map(|h| match &h.scheme {
            Some(scheme) => format!("{}: {scheme} ${}", h.name, h.value_secret_ref),
            None => format!("{}: ${}", h.name, h.value_secret_ref),
        })
        .collect();
    format!(
        "; the gate sends {} with every request, read from the host, never in the sandbox",
        headers.join(", ")
    )
}

fn human_gates(manifest: &Manifest) -> Option<Item> {
    let gates = &manifest.human_gates;
    let names: Vec<&str> = gates
        .require_approval_for
        .iter()
        .map(|t| t.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    if !gates.enabled {
        return Some(not_enforced(
            "human gates",
            format!(
                "enabled is not true, so calls to {} are forwarded without asking anyone",
                names.join(", ")
            ),
        ));
    }
    let on_timeout = match gates.on_timeout {
        OnTimeout::Abort => "refused and the run stopped",
        OnTimeout::Proceed => "FORWARDED WITHOUT APPROVAL (on_timeout: proceed)",
    };
    let who = match gates.quorum.as_ref() {
        None => "a decision at this terminal or the signed webhook".to_owned(),
        Some(quorum) => quorum_words(quorum),
    };
    Some(enforced(
        "human gates",
        format!(
            "calls to {} wait for {who}; without one after {}s: {on_timeout}",
            names.join(", "),
            gates.approval_timeout_seconds
        ),
    ))
}

/// Who must approve, for the summary: `2 of 3 approvers (alice, bob,
/// carol) …`.
fn quorum_words(quorum: &Quorum) -> String {
    let approvers = match &quorum.source {
        QuorumSource::Listed {
            approvers,
            threshold,
        } => {
            let labels: Vec<&str> = approvers.iter().map(|a| a.label.as_str()).collect();
            format!(
                "{threshold} of {} approvers ({})",
                approvers.len(),
                labels.join(", ")
            )
        }
        QuorumSource::Set(set) => format!(
            "the threshold of approvers the approver set in {} names (read again for every call)",
            set.dir.display()
        ),
    };
    let terminal = match quorum.terminal_approves {
        true => "this terminal counting as one",
        false => "this terminal may only deny",
    };
    format!("{approvers} to approve, each decision signed and bound to the call; {terminal}")
}

/// One line per model provider: where the agent reaches it, what it may
/// call, and that the key stays here.
fn llm(manifest: &Manifest) -> impl Iterator<Item = Item> + '_ {
    manifest.llm.providers.iter().map(|provider| {
        let models: Vec<&str> = provider.models.iter().map(|m| m.name.as_str()).collect();
        enforced(
            "llm",
            format!(
                "{} ({}) through the model gate at {}: models {} only; the key from {} is added on the host (the agent gets a placeholder); each call's worst case (output at most {} tokens) is reserved against the spend caps before it is forwarded, and settled to the usage reported",
                provider.id,
                provider.api.as_str(),
                provider.env_var(),
                models.join(", "),
                provider.key_secret_ref.as_str(),
                provider.max_output_tokens,
            ),
        )
    })
}

fn spending(manifest: &Manifest) -> Option<Item> {
    let network = &manifest.sandbox.network;
    let reaches_hosts = network.egress == Egress::Open || !network.allowed_hosts.is_empty();
    reaches_hosts.then(|| {
        not_enforced(
            "spend",
            "traffic to allowed hosts (a model API reached directly, not through llm.providers, included) is never metered: Constle does not intercept TLS, so spend over allowed_hosts has no cap".into(),
        )
    })
}

fn a2a(manifest: &Manifest) -> Option<Item> {
    let a2a = manifest.a2a.as_ref()?;
    let replay = match &a2a.replay {
        Some(url) => format!("seen ids in Redis {}", url.redacted()),
        None => "seen ids in the embedded store (this machine only)".to_owned(),
    };
    let listening = match a2a.listen {
        Some(listen) => format!(
            "listening on {listen} for envelopes from {} declared peer(s), signed, addressed to this agent, within ±5 min, never seen before ({replay}); ",
            a2a.peers.len()
        ),
        None => "not listening; ".to_owned(),
    };
    let senders = a2a.peers.iter().filter(|p| p.url.is_some()).count();
    Some(enforced(
        "a2a",
        format!(
            "{listening}the agent sends to {senders} peer(s) through CONSTLE_A2A_URL, signed on the host"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(limits: &str) -> Manifest {
        let src = format!("name: a\nsandbox:\n  command: [x]\n{limits}");
        constle_manifest::parse_str(&src, std::path::Path::new("/srv/a/agent.yaml"), &|_| None)
            .unwrap()
            .manifest
    }

    #[test]
    fn root_without_cap_sys_admin_is_said_to_be_root_outside() {
        use constle_hostids::Starter;
        assert_eq!(outside(Starter::User), "never the host's root");
        assert_eq!(outside(Starter::PrivilegedRoot), "never the host's root");
        let said = outside(Starter::RootWithoutSysAdmin);
        assert!(
            said.starts_with("which is root (uid 0) outside it"),
            "{said}"
        );
        assert!(!said.contains("never the host's root"), "{said}");
    }

    #[test]
    fn limits_are_summarised_or_said_to_be_missing() {
        match limits(&manifest("")) {
            Item::NotEnforced {
                part: "limits",
                why,
            } => assert!(why.contains("none declared")),
            other => panic!("{other:?}"),
        }
        let declared = manifest("  limits:\n    memory: 2g\n    pids: 256\n    cpus: 1.25\n");
        match limits(&declared) {
            Item::Enforced {
                part: "limits",
                detail,
            } => assert_eq!(
                detail,
                "memory 2 GiB, 256 processes and threads, 1.25 CPUs for the agent's whole process tree (cgroups)"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(millis_as_decimal(2000), "2");
        assert_eq!(millis_as_decimal(10), "0.01");
        assert_eq!(millis_as_decimal(1500), "1.5");
    }

    #[test]
    fn a_kept_home_is_told_and_where_it_is() {
        assert!(home(&manifest("")).is_none());
        let kept = manifest("  home: ./agent-home\n");
        match home(&kept) {
            Some(Item::Enforced {
                part: "home",
                detail,
            }) => assert!(
                detail.starts_with("/srv/a/agent-home: HOME (/home/agent), kept from run to run")
                    && !detail.contains("tmpfs"),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
        match sandbox(&kept) {
            Item::Enforced { detail, .. } => assert!(
                detail.contains(
                    "writable: /srv/a/work, /srv/a/agent-home as /home/agent and a private /tmp"
                ),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
        let sized = manifest("  home: ./agent-home\n  tmpfs:\n    home: 2g\n");
        match home(&sized) {
            Some(Item::Enforced { detail, .. }) => assert!(
                detail.ends_with("sandbox.tmpfs.home sizes only the stdio servers' homes"),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn headers_are_shown_by_name_and_variable() {
        let server = "mcp:\n  servers:\n    - id: s\n      url: https://mcp.example.com/mcp\n      tools: [t]\n      headers:\n        - {name: Authorization, scheme: Bearer, value_secret_ref: S_TOKEN}\n        - {name: X-Api-Key, value_secret_ref: S_KEY}\n";
        match &mcp(&manifest(server))[..] {
            [Item::Enforced { detail, .. }] => assert!(
                detail.ends_with("; the gate sends Authorization: Bearer $S_TOKEN, X-Api-Key: $S_KEY with every request, read from the host, never in the sandbox"),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn several_approvers_are_named_with_their_threshold() {
        let src = "mcp:\n  servers:\n    - id: s\n      url: https://mcp.example.com/mcp\n      tools: [pay]\nhuman_gates:\n  enabled: true\n  require_approval_for: [pay]\n  approvers:\n    - {did: did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw, label: alice}\n    - {did: did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp, label: bob}\n  threshold: 2\n";
        match human_gates(&manifest(src)) {
            Some(Item::Enforced { detail, .. }) => assert!(
                detail.starts_with("calls to pay wait for 2 of 2 approvers (alice, bob) to approve, each decision signed and bound to the call; this terminal may only deny;"),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replay_store_password_is_never_shown() {
        let src = "name: a\nidentity:\n  did: did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\nsandbox:\n  command: [x]\na2a:\n  listen: 127.0.0.1:7400\n  replay: \"redis+unix:///run/r.sock?pass=M4RK3R\"\n";
        let manifest =
            constle_manifest::parse_str(src, std::path::Path::new("/srv/a/agent.yaml"), &|_| None)
                .unwrap()
                .manifest;
        let summary = format!("{:?}", plan(&manifest));
        assert!(
            summary.contains("seen ids in Redis redis+unix:///run/r.sock?pass=***"),
            "{summary}"
        );
        assert!(!summary.contains("M4RK3R"), "{summary}");
    }
}
