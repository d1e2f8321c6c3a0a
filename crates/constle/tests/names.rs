//! Clients that ignore the proxy variables, through `constle run` (issue
//! 26): `curl --noproxy '*'` and curl without the variables, `openssl
//! s_client`, Python's `socket.create_connection` and `ssl` (over IPv4 and
//! over IPv6), Node's `dns.lookup` and `tls.connect`, and Java's
//! `HttpClient`, each run inside the sandbox, reach a simulated HTTPS site
//! ([`HttpsSite`], in a network namespace the test creates) through the
//! sandbox's resolver and captured connections, and are refused at once
//! (`NXDOMAIN`, no timeout) a name the Agentfile does not allow, with
//! `dns_resolved`, `network_allowed` and `dns_refused` in the log. Beside
//! them, curl through `HTTPS_PROXY` works as it did.
//!
//! Then the attacks: DNS tunnelling (63-byte labels, 250-byte names, TXT,
//! NULL and ANY, many names) answered `NXDOMAIN` fast, each recorded with
//! a bounded name, and nothing reaching a DNS server the test listens with
//! on the host's loopback and in the site's namespace; a placeholder's
//! other ports, a placeholder never given out, and one from an earlier run;
//! allowed names Squid resolves to internal addresses; `egress: none`; and
//! the agent trying to take the name service's ports, a placeholder's
//! privileged port, the namespace's settings, routes or raw sockets.
//!
//! The site's names resolve for Squid through `--hosts-file`, as in
//! `clients.rs`; the test CA is named by `TEST_CA` (and `CURL_CA_BUNDLE`).
//! What a client needs is looked for as the sandbox sees it: missing, it
//! fails the test under `CONSTLE_E2E=require` (CI) and skips it otherwise,
//! except Java, which `scripts/setup.sh` does not install: without `java`
//! its test is skipped even under `CONSTLE_E2E=require`.
//! Nothing here sends traffic anywhere but loopback and the test's
//! namespaces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use constle_testkit::{
    Agentfile, DnsServer, HostsFile, HttpsSite, require_e2e, require_nothing_missing, require_root,
};
use serde_json::Value;

use common::{Case, in_the_sandbox, text};

/// The test's helpers, copied into the sandbox's work directory.
const HELPERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/names");
/// Builds what the site serves, on the host.
const SITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/site.py");
/// What `/hello.txt` holds.
const GREETING: &str = "hello from the simulated site";

/// The name the Agentfile allows.
const ALLOWED: &str = "files.example.test";
/// A name of the same site, which Squid could resolve, that the Agentfile
/// does not allow.
const UNDECLARED: &str = "other.example.test";

/// A query or connection refused slower than this waited for something:
/// a resolver's timeout is 5 s.
const FAST_MS: u64 = 1000;
/// The same for a whole client's refused run, its start included (a JVM
/// compiling `Client.java` takes about a second before it asks).
const CLIENT_FAST_MS: u64 = 4000;

/// One client, and how it is tried.
struct Client {
    /// The test's name, in messages.
    name: &'static str,
    /// What the sandbox must have: a description, and a shell check.
    needs: (&'static str, &'static str),
    /// Whether a missing need skips the test even under
    /// `CONSTLE_E2E=require`.
    optional: bool,
    /// A shell function's body that fetches `https://$1/hello.txt` and
    /// prints the body (and `via ADDR` when it knows the address reached).
    fetch: &'static str,
    /// What its error output says when `$1` does not resolve.
    unresolved: &'static str,
    /// Whether the run also fetches through `HTTPS_PROXY` first.
    proxied_too: bool,
}

const CURL_NOPROXY: Client = Client {
    name: "curl --noproxy, beside curl through HTTPS_PROXY",
    needs: ("`curl`", "command -v curl"),
    optional: false,
    fetch: "curl -sS --fail --noproxy '*' -w '\\nvia %{remote_ip}\\n' \"https://$1/hello.txt\"",
    unresolved: "Could not resolve host",
    proxied_too: true,
};

const CURL_WITHOUT_PROXY_ENV: Client = Client {
    name: "curl without the proxy variables",
    needs: ("`curl`", "command -v curl"),
    optional: false,
    fetch: "env -u HTTPS_PROXY -u https_proxy curl -sS --fail -w '\\nvia %{remote_ip}\\n' \
            \"https://$1/hello.txt\"",
    unresolved: "Could not resolve host",
    proxied_too: false,
};

const OPENSSL: Client = Client {
    name: "openssl s_client",
    needs: ("`openssl`", "command -v openssl"),
    optional: false,
    fetch: "printf 'GET /hello.txt HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' \"$1\" | \
            openssl s_client -quiet -ignore_unexpected_eof -verify_return_error -verify_hostname \"$1\" \
            -CAfile \"$TEST_CA\" -connect \"$1:443\" -servername \"$1\"",
    unresolved: "Name or service not known",
    proxied_too: false,
};

const PYTHON: Client = Client {
    name: "python socket.create_connection + ssl",
    needs: ("`python3`", "command -v python3"),
    optional: false,
    fetch: "python3 probe.py fetch \"$1\"",
    unresolved: "Name or service not known",
    proxied_too: false,
};

const PYTHON_IPV6: Client = Client {
    name: "python over IPv6 (AF_INET6)",
    needs: ("`python3`", "command -v python3"),
    optional: false,
    fetch: "python3 probe.py fetch \"$1\" 6",
    unresolved: "Name or service not known",
    proxied_too: false,
};

const NODE: Client = Client {
    name: "node dns.lookup + tls.connect",
    needs: ("`node`", "command -v node"),
    optional: false,
    fetch: "node client.js \"$1\"",
    unresolved: "ENOTFOUND",
    proxied_too: false,
};

const JAVA: Client = Client {
    name: "java HttpClient",
    needs: ("`java`", "command -v java"),
    optional: true,
    fetch: "java Client.java \"$1\"",
    unresolved: "UnresolvedAddressException",
    proxied_too: false,
};

#[test]
fn curl_noproxy() {
    captured(&CURL_NOPROXY);
}

#[test]
fn curl_without_proxy_variables() {
    captured(&CURL_WITHOUT_PROXY_ENV);
}

#[test]
fn openssl_s_client() {
    captured(&OPENSSL);
}

#[test]
fn python_socket() {
    captured(&PYTHON);
}

#[test]
fn python_socket_over_ipv6() {
    captured(&PYTHON_IPV6);
}

#[test]
fn node_dns_lookup_and_tls_connect() {
    captured(&NODE);
}

#[test]
fn java_http_client() {
    captured(&JAVA);
}

/// A run with the site up, its hosts file for Squid, the helpers and the
/// CA in the work directory.
struct Setup {
    case: Case,
    site: HttpsSite,
    hosts: PathBuf,
    ca: PathBuf,
}

impl Setup {
    /// The site serves `hello.txt` under `names`.
    fn new(names: &[&str]) -> Setup {
        let case = Case::new();
        let root = case.path("site");
        let out = Command::new("python3")
            .args([SITE.as_ref(), "files".as_ref(), root.as_os_str()])
            .args([names[0], GREETING])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "site.py: {}", text(&out.stderr));
        let site = HttpsSite::start(&root, names).unwrap();
        let work = case.path("work").canonicalize().unwrap();
        for helper in ["probe.py", "client.js", "Client.java"] {
            fs::copy(Path::new(HELPERS).join(helper), work.join(helper)).unwrap();
        }
        let ca = work.join("ca.pem");
        fs::copy(site.ca_certificate(), &ca).unwrap();
        let hosts = case.path("hosts");
        site.hosts_file().write(&hosts).unwrap();
        Setup {
            case,
            site,
            hosts,
            ca,
        }
    }

    /// An Agentfile that runs `script`, allowed `hosts`.
    fn agentfile(&self, script: &str, hosts: &[&str]) -> Agentfile {
        let ca = self.ca.to_str().unwrap();
        Agentfile::new("test-agent")
            .sh(script)
            .workdir("./work")
            .env("TEST_CA", ca)
            .env("CURL_CA_BUNDLE", ca)
            .allowed_hosts(hosts)
    }

    /// `constle run --hosts-file` of `agentfile`, which must exit 0: its
    /// stdout, and a report for messages.
    fn run(&self, agentfile: &Agentfile) -> (String, String) {
        self.run_as(None, agentfile)
    }

    /// [`Setup::run`] under `prlimit` with `limits` (its options).
    fn run_as(&self, limits: Option<&str>, agentfile: &Agentfile) -> (String, String) {
        let file = self.case.write_agentfile(agentfile);
        let args = [
            "run",
            "--hosts-file",
            self.hosts.to_str().unwrap(),
            file.to_str().unwrap(),
        ];
        let mut command = self.case.command(&args);
        if let Some(limits) = limits {
            let constle = command.get_program().to_owned();
            command = Command::new("prlimit");
            command
                .args([limits, "--"])
                .arg(constle)
                .args(args)
                .env("CONSTLE_HOME", self.case.home())
                .current_dir(self.case.path(""));
        }
        let out = command.stdin(Stdio::null()).output().unwrap();
        let (said, err) = (text(&out.stdout), text(&out.stderr));
        let report = format!(
            "stdout:\n{said}\nstderr:\n{err}\nsite: {:?}\n{}",
            self.site.requests(),
            self.site.server_log()
        );
        assert_eq!(out.status.code(), Some(0), "{report}");
        (said, report)
    }
}

/// Runs `client` for the allowed name, then for the undeclared one, and
/// checks what each got and what the log holds.
fn captured(client: &Client) {
    if !ready(client) {
        return;
    }
    let setup = Setup::new(&[ALLOWED, UNDECLARED]);
    let (said, report) = setup.run(&setup.agentfile(&agent(client), &[ALLOWED]));
    let context = format!("{}: {report}", client.name);
    assert!(said.lines().any(|l| l == GREETING), "{context}");
    assert!(!said.contains("undeclared reached"), "{context}");
    assert!(quick(&said, "refused in ", CLIENT_FAST_MS), "{context}");
    let refusal = fs::read_to_string(setup.case.path("work/refusal")).unwrap();
    assert!(refusal.contains(client.unresolved), "{refusal}\n{context}");

    let placeholders = resolved_once(&setup.case, ALLOWED, &context);
    check_vias(&said, &placeholders, client.proxied_too, &context);
    check_tunnels(&setup, 1 + usize::from(client.proxied_too), &context);
    let blocked = setup.case.events("network_blocked");
    assert!(blocked.is_empty(), "{blocked:?}\n{context}");
    let refused = setup.case.events("dns_refused");
    assert!(!refused.is_empty(), "{context}");
    for event in &refused {
        assert_eq!(event["name"], UNDECLARED, "{context}");
        assert_eq!(event["reason"], "dns_not_allowed", "{context}");
    }
}

/// The agent's script for `client`: the allowed name (after a fetch
/// through the proxy, if asked for), then the undeclared one, timed, its
/// errors in `refusal`.
fn agent(client: &Client) -> String {
    let proxied = if client.proxied_too {
        format!(
            "curl -sS --fail -w '\\nvia %{{remote_ip}}\\n' https://{ALLOWED}/hello.txt || exit 3; "
        )
    } else {
        String::new()
    };
    format!(
        "fetch() {{ {}; }}; {proxied}fetch {ALLOWED} || exit 4; s=$(date +%s%N); \
         if fetch {UNDECLARED} >/dev/null 2>refusal; then echo undeclared reached; fi; \
         echo refused in $(( ($(date +%s%N) - s) / 1000000 )) ms",
        client.fetch
    )
}

/// Each `via ADDR` line: the proxy's address once if `proxied`, every
/// other one a placeholder of the allowed name.
fn check_vias(said: &str, placeholders: &[IpAddr], proxied: bool, context: &str) {
    let vias: Vec<&str> = said
        .lines()
        .filter_map(|l| l.strip_prefix("via "))
        .collect();
    let through_proxy = vias.iter().filter(|v| **v == "127.0.0.1").count();
    assert_eq!(through_proxy, usize::from(proxied), "{context}");
    for via in vias.iter().filter(|v| **v != "127.0.0.1") {
        let via: IpAddr = via.parse().unwrap();
        assert!(placeholders.contains(&via), "{via}: {context}");
    }
}

/// Whether this machine can run `client`'s test.
fn ready(client: &Client) -> bool {
    if !e2e_ready(client.name) {
        return false;
    }
    let (what, check) = client.needs;
    if in_the_sandbox(check) {
        return true;
    }
    if client.optional {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: {}: needs {what}", client.name);
        }
        return false;
    }
    require_nothing_missing(client.name, &[what.to_owned()])
}

/// Root, bubblewrap, Squid, namespaces, and the site's tools.
fn e2e_ready(test: &str) -> bool {
    require_root(test, &["bwrap", "openssl", "python3"]) && require_e2e(test)
}

/// Whether `said` has a line `<prefix>N ms…` with N under `bound`.
fn quick(said: &str, prefix: &str, bound: u64) -> bool {
    said.lines()
        .filter_map(|l| l.strip_prefix(prefix)?.split_once(" ms"))
        .any(|(n, _)| n.parse::<u64>().is_ok_and(|n| n < bound))
}

/// The one `dns_resolved` of the run, for `name`: its placeholders, which
/// must be in the pool, the IPv6 one holding the IPv4 one.
fn resolved_once(case: &Case, name: &str, context: &str) -> [IpAddr; 2] {
    let resolved = case.events("dns_resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}\n{context}");
    assert_eq!(resolved[0]["name"], name, "{context}");
    placeholders(&resolved[0])
}

/// A `dns_resolved` event's placeholders, checked.
fn placeholders(event: &Value) -> [IpAddr; 2] {
    let v4: Ipv4Addr = event["ipv4"].as_str().unwrap().parse().unwrap();
    let v6: Ipv6Addr = event["ipv6"].as_str().unwrap().parse().unwrap();
    assert_eq!(v4.octets()[0], 198, "{event}");
    assert!(matches!(v4.octets()[1], 18 | 19), "{event}");
    let embedded = Ipv6Addr::from(
        u128::from(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0)) | u128::from(u32::from(v4)),
    );
    assert_eq!(v6, embedded, "{event}");
    [v4.into(), v6.into()]
}

/// Squid let `count` tunnels through to the allowed name (at the site's
/// address), and the site served each.
fn check_tunnels(setup: &Setup, count: usize, context: &str) {
    let allowed = setup.case.events("network_allowed");
    assert_eq!(allowed.len(), count, "{allowed:?}\n{context}");
    let address = setup.site.host().ipv4().to_string();
    for event in &allowed {
        assert_eq!(event["host"], ALLOWED, "{context}");
        assert_eq!(event["squid"], "TCP_TUNNEL/200", "{context}");
        assert_eq!(event["address"], address.as_str(), "{context}");
    }
    let served = setup.site.requests();
    assert_eq!(served.len(), count, "{served:?}\n{context}");
    assert!(
        served
            .iter()
            .all(|r| r.host == ALLOWED && r.path == "/hello.txt" && r.status == 200),
        "{context}"
    );
}

/// DNS tunnelling from inside the sandbox: long labels and names, TXT,
/// NULL and ANY, over UDP and TCP, and 120 random names under an
/// undeclared domain (140 refusals: the pace's burst of 100, then 20 a
/// second, about 2 s in all). Each is answered `NXDOMAIN` at once and
/// recorded with a bounded name; none reaches a DNS server listening on the
/// host's loopback or in the site's namespace, and direct DNS there has no
/// route.
#[test]
fn dns_tunnelling_is_refused_fast_recorded_and_goes_nowhere() {
    if !e2e_ready("dns tunnelling") {
        return;
    }
    let setup = Setup::new(&[ALLOWED]);
    let host = setup.site.host();
    let (v4, v6) = (host.ipv4().to_string(), host.ipv6().to_string());
    let outside = DnsServer::start(&[]).unwrap();
    let on_host = Trap::start(Command::new("python3"), &["127.0.0.53", "127.0.0.2", "::1"]);
    let in_site = Trap::start(host.command("python3").unwrap(), &["0.0.0.0", "::"]);
    let script = format!("python3 probe.py dns tunnel.example.test {v4} {v6} 8.8.8.8");
    let (said, report) = setup.run(&setup.agentfile(&script, &[ALLOWED]));
    let got: Value = serde_json::from_str(said.lines().last().unwrap()).unwrap();
    let context = format!("{got:#}\n{report}");
    assert_eq!(got["asked"], 140, "{context}");
    assert_eq!(
        got["answers"],
        serde_json::json!({"NXDOMAIN": 140}),
        "{context}"
    );
    assert!(got["slowest_ms"].as_u64().unwrap() < FAST_MS, "{context}");
    assert!(got["total_ms"].as_u64().unwrap() < 10_000, "{context}");
    for (addr, answers) in got["direct"].as_object().unwrap() {
        for answer in answers.as_array().unwrap() {
            let answer = answer.as_str().unwrap_or("an rcode");
            assert!(answer.starts_with('E'), "{addr}: {answer}\n{context}");
        }
    }

    let refused = setup.case.events("dns_refused");
    assert_eq!(refused.len(), 140, "every refusal recorded\n{context}");
    let names: Vec<&str> = refused
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.trim_end_matches('…').len() <= 256),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.ends_with('…')), "{names:?}");
    for name in got["names"].as_array().unwrap() {
        assert!(names.contains(&name.as_str().unwrap()), "{name}\n{context}");
    }
    for field in ["qtype", "reason"] {
        let mut seen: Vec<&str> = refused.iter().map(|e| e[field].as_str().unwrap()).collect();
        seen.sort_unstable();
        seen.dedup();
        let expected: &[&str] = match field {
            "qtype" => &["A", "AAAA", "ANY", "NULL", "TXT"],
            _ => &["dns_not_a_host_name", "dns_not_allowed"],
        };
        assert_eq!(seen, expected, "{context}");
    }
    for event in ["dns_resolved", "network_allowed", "network_blocked"] {
        assert!(setup.case.events(event).is_empty(), "{event}\n{context}");
    }
    // Squid asks it too (for 127.0.0.1's name): none of the probe's names.
    let queries = outside.queries();
    assert!(
        queries.iter().all(|(n, _)| !n.contains("tunnel")),
        "{queries:?}"
    );
    assert_eq!(on_host.finish(), "", "{context}");
    assert_eq!(in_site.finish(), "", "{context}");
}

/// A placeholder's other ports are refused at once and recorded, over
/// IPv4 and IPv6; a placeholder never given out is closed on 443 and
/// refused elsewhere; and a later run that uses an earlier run's
/// placeholders without looking the name up gets nowhere.
#[test]
fn other_ports_and_placeholders_not_given_out_go_nowhere() {
    if !e2e_ready("placeholder misuse") {
        return;
    }
    // The pool's last addresses: it gives them out from its start.
    let unassigned: [IpAddr; 2] = [
        "198.19.255.254".parse().unwrap(),
        "2001:2::c613:fffe".parse().unwrap(),
    ];
    let setup = Setup::new(&[ALLOWED]);
    let [u4, u6] = unassigned;
    let script = format!("python3 probe.py ports {ALLOWED} {u4} {u6}");
    let (said, report) = setup.run(&setup.agentfile(&script, &[ALLOWED]));
    let [v4, v6] = resolved_once(&setup.case, ALLOWED, &report);
    let line = said.lines().find_map(|l| l.strip_prefix("placeholders "));
    assert_eq!(line, Some(format!("{v4} {v6}").as_str()), "{report}");
    let refused = [
        (v4, 80, Some(ALLOWED)),
        (v4, 8443, Some(ALLOWED)),
        (v6, 8443, Some(ALLOWED)),
    ]
    .into_iter()
    .chain(unassigned.iter().map(|a| (*a, 80, None)));
    let mut expected: Vec<String> = Vec::new();
    for (addr, port, name) in refused {
        assert!(
            quick(&said, &format!("{addr} {port} ECONNREFUSED "), FAST_MS),
            "{addr} {port}\n{report}"
        );
        expected.push(format!("{addr} {port} {name:?}"));
    }
    for addr in unassigned {
        assert!(went_nowhere(&said, addr), "{addr}\n{report}");
    }
    expected.sort();
    assert_eq!(capture_refusals(&setup.case), expected, "{report}");

    let script = format!("python3 probe.py stale {v4} {v6}");
    let (said, report) = setup.run(&setup.agentfile(&script, &[ALLOWED]));
    for addr in [v4, v6] {
        assert!(went_nowhere(&said, addr), "{addr}\n{report}");
    }
    assert_eq!(setup.case.events("dns_resolved").len(), 1, "{report}");
    for event in ["network_allowed", "network_blocked"] {
        assert!(setup.case.events(event).is_empty(), "{event}\n{report}");
    }
    assert!(setup.site.requests().is_empty(), "{report}");
}

/// The run's `capture_refused` events as `ADDRESS PORT NAME`, sorted.
fn capture_refusals(case: &Case) -> Vec<String> {
    let mut events: Vec<String> = case
        .events("capture_refused")
        .iter()
        .map(|e| {
            let addr: IpAddr = e["address"].as_str().unwrap().parse().unwrap();
            format!("{addr} {} {:?}", e["port"], e["name"].as_str())
        })
        .collect();
    events.sort();
    events
}

/// Whether `said` shows the connection to `addr`'s port 443 closed or
/// reset at once.
fn went_nowhere(said: &str, addr: IpAddr) -> bool {
    let prefix = format!("{addr} 443 ");
    said.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .any(|r| r.starts_with("closed ") || r.starts_with("ECONNRESET "))
}

/// Allowed names that Squid's hosts file maps to internal addresses get
/// placeholders, but the proxy refuses the resolved address
/// (`internal_destination`), as it does for `HTTPS_PROXY` clients. The
/// addresses are trapped into the site's namespace, whose certificate
/// holds the names: a connection let through would be served and show.
#[test]
fn names_resolving_to_internal_addresses_are_still_refused() {
    if !e2e_ready("internal addresses") {
        return;
    }
    let internal: [(&str, IpAddr); 3] = [
        ("loop.example.test", "127.0.0.1".parse().unwrap()),
        ("metadata.example.test", "169.254.169.254".parse().unwrap()),
        ("ten.example.test", "10.1.2.3".parse().unwrap()),
    ];
    let names: Vec<&str> = [ALLOWED]
        .into_iter()
        .chain(internal.iter().map(|(n, _)| *n))
        .collect();
    let setup = Setup::new(&names);
    let mut hosts = HostsFile::new().with(setup.site.host().ipv4(), ALLOWED);
    for (name, addr) in internal {
        hosts.add(addr, name);
        if !addr.is_loopback() {
            setup.site.host().trap(addr).unwrap();
        }
    }
    hosts.write(&setup.hosts).unwrap();
    let script = names
        .iter()
        .map(|n| format!("python3 probe.py fetch {n}; "))
        .collect::<String>()
        + "true";
    let (said, report) = setup.run(&setup.agentfile(&script, &names));
    assert!(said.lines().any(|l| l == GREETING), "{report}");
    assert_eq!(
        setup.case.events("dns_resolved").len(),
        names.len(),
        "{report}"
    );
    // Python's create_connection tries the name's other placeholder when
    // the refusal's reset overtakes its check of the first connect (a
    // loaded machine), so a name is refused once or once per family.
    let blocked = setup.case.events("network_blocked");
    for event in &blocked {
        assert_eq!(event["squid"], "TCP_DENIED/403", "{report}");
        assert_eq!(event["reason"], "internal_destination", "{report}");
    }
    for (name, _) in internal {
        let tries = blocked.iter().filter(|e| e["host"] == name).count();
        assert!((1..=2).contains(&tries), "{name}: {blocked:?}\n{report}");
    }
    assert!(
        blocked
            .iter()
            .all(|e| internal.iter().any(|(n, _)| e["host"] == *n)),
        "{blocked:?}\n{report}"
    );
    check_tunnels(&setup, 1, &report);
}

/// The agent cannot take `constle run`'s descriptors through its doors:
/// with a limit of 1024 that `constle run` cannot raise, the agent holds
/// 900 connections to the proxy's door for two seconds. `constle run`
/// accepts only its share of them (the rest wait in the kernel's queue),
/// its log goes on, and once they are closed the allowed name is fetched
/// through the proxy.
#[test]
fn the_agent_cannot_take_constle_runs_descriptors() {
    if !e2e_ready("descriptors") {
        return;
    }
    let setup = Setup::new(&[ALLOWED]);
    let script = format!(
        "python3 probe.py flood 3128 900 2 && curl -sS --max-time 20 https://{ALLOWED}/hello.txt"
    );
    let agentfile = setup.agentfile(&script, &[ALLOWED]);
    let (said, report) = setup.run_as(Some("--nofile=1024:1024"), &agentfile);
    assert!(said.contains("flood held 900"), "{report}");
    assert!(said.lines().any(|l| l == GREETING), "{report}");
    assert!(setup.case.events("egress_failed").is_empty(), "{report}");
    check_tunnels(&setup, 1, &report);
}

/// `egress: none`: nothing listens on the sandbox's port 53, so every
/// lookup fails at once, and nothing is recorded about names.
#[test]
fn with_egress_none_nothing_resolves() {
    if !e2e_ready("egress none") {
        return;
    }
    let setup = Setup::new(&[ALLOWED]);
    let names = [ALLOWED, "example.com", "localhost.example.test"];
    let script = format!(
        "python3 probe.py lookup {0}; getent hosts {1} || echo getent found nothing",
        names.join(" "),
        ALLOWED
    );
    let agentfile = Agentfile::new("test-agent")
        .sh(&script)
        .workdir("./work")
        .egress("none");
    let (said, report) = setup.run(&agentfile);
    for name in names {
        assert!(
            quick(&said, &format!("{name} unresolved "), FAST_MS),
            "{name}\n{report}"
        );
    }
    assert!(said.contains("getent found nothing"), "{report}");
    for event in [
        "dns_resolved",
        "dns_refused",
        "capture_refused",
        "network_allowed",
    ] {
        assert!(setup.case.events(event).is_empty(), "{event}\n{report}");
    }
}

/// The agent cannot take the name service's place or change its
/// namespace: its ports are the host's, a placeholder's privileged ports
/// are not the agent's to bind, nor the proxy's door (held by the host,
/// without `SO_REUSEPORT`, so sharing it is refused too), the namespace's
/// settings are read-only, and netlink and raw sockets are refused;
/// afterwards the allowed name still resolves and reaches the site.
#[test]
fn the_agent_cannot_take_the_name_service_over() {
    if !e2e_ready("take over") {
        return;
    }
    let setup = Setup::new(&[ALLOWED]);
    let script = format!("python3 probe.py takeover; python3 probe.py fetch {ALLOWED}");
    let (said, report) = setup.run(&setup.agentfile(&script, &[ALLOWED]));
    // EACCES, not EADDRINUSE: the kernel checks the capability first, so
    // the agent is refused for lacking it, whatever holds the port.
    for (attempt, refused) in [
        ("bind udp 127.0.0.1:53", "EACCES"),
        ("bind tcp 0.0.0.0:443", "EACCES"),
        ("bind tcp [::]:443", "EACCES"),
        ("bind tcp 198.18.0.9:80", "EACCES"),
        ("bind the proxy's door", "EADDRINUSE"),
        ("bind beside the door", "EADDRINUSE"),
        ("lower the privileged ports", "EROFS"),
        ("netlink route socket", "EAFNOSUPPORT"),
        ("raw tcp socket", "EPERM"),
        ("raw tcp6 socket", "EPERM"),
    ] {
        let got = said
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{attempt}: ")))
            .unwrap_or("(not tried)");
        assert_eq!(got, refused, "{attempt}\n{report}");
    }
    assert!(said.contains(GREETING), "{report}");
    check_tunnels(&setup, 1, &report);
}

/// A DNS listener the sandbox must never reach: `trap.py`, run by
/// `command`, on `addresses`.
struct Trap {
    child: Child,
}

impl Trap {
    fn start(mut command: Command, addresses: &[&str]) -> Trap {
        let mut child = command
            .arg(Path::new(HELPERS).join("trap.py"))
            .args(addresses)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.as_mut().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line, "ready\n");
        Trap { child }
    }

    /// What reached it.
    fn finish(mut self) -> String {
        self.child.kill().unwrap();
        let mut got = String::new();
        let stdout = self.child.stdout.as_mut().unwrap();
        std::io::Read::read_to_string(stdout, &mut got).unwrap();
        got
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
