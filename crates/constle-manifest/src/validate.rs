//! From the raw Agentfile ([`crate::raw`]) to the checked [`Manifest`],
//! collecting every error and warning on the way.
//!
//! Each section is checked even when an earlier one failed, so one run shows
//! every mistake. A value that fails its check is left out of the result and
//! the run ends in [`Rejected`](crate::Rejected).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use constle_identity::{DidKey, Name};
use rust_decimal::Decimal;

use crate::de::{Field, Located};
use crate::diagnostic::{Pos, Sink, did_you_mean, show, show_url, suggest};
use crate::model::{
    A2a, A2aPeer, DEFAULT_APPROVAL_TIMEOUT_SECONDS, Egress, HumanGates, Identity, Limits, Llm,
    MAX_APPROVAL_TIMEOUT_SECONDS, MAX_PIDS, MAX_WALL_CLOCK_SECONDS, MCP_BASE_NOTIFICATIONS,
    MCP_BASE_REQUESTS, MIN_PIDS, Manifest, Mcp, McpServer, Network, Notify, NotifyChannel,
    OnTimeout, PolicyDigest, Pricing, Sandbox, SecretHeader, Spending, Tmpfs,
};
use crate::raw::{
    RawA2a, RawHeader, RawHumanGates, RawLimits, RawManifest, RawMcp, RawNetwork, RawPricing,
    RawSandbox, RawServer, RawSpending, RawTmpfs, Strings,
};
use crate::secret::SecretHeaderError;
pub use context::RESERVED_ENV;
use context::{V, holds, is_reserved};
mod audit;
mod context;
mod home;
mod llm;
mod quorum;
mod stdio;

use crate::values::{
    AuthScheme, EnvVarName, HeaderName, Hostname, HttpUrl, InvalidValue, MethodName, RedisUrl,
    ServerId, ToolName, parse_amount, parse_cpus, parse_memory, parse_tmpfs,
};

/// `sandbox.workdir` when the Agentfile names none, relative to its
/// directory: never the Agentfile's own directory, which holds the policy.
pub const DEFAULT_WORKDIR: &str = "work";

/// Everything validation needs besides the raw document.
pub(crate) struct Input<'a> {
    pub root: Pos,
    pub base_dir: PathBuf,
    /// The Agentfile itself, which no directory the sandbox mounts may hold.
    pub agentfile: PathBuf,
    /// The digest of the text being validated.
    pub policy_digest: PolicyDigest,
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// Validates `raw`. Returns `None` if any error was recorded (here or earlier).
pub(crate) fn validate(raw: RawManifest, input: Input<'_>, sink: &mut Sink) -> Option<Manifest> {
    let mut v = V {
        sink,
        env: input.env,
        base_dir: input.base_dir,
        agentfile: input.agentfile,
        agent_workdir: None,
        agent_home: None,
    };
    let root = input.root;
    let input_digest = input.policy_digest;

    let name = v
        .required(
            &raw.name,
            "name",
            root,
            "name the agent, e.g. name: invoice-processor",
        )
        .and_then(|n| {
            v.check(n, "invalid_name", |s| {
                Name::new(s).map_err(|e| InvalidValue {
                    message: e.to_string(),
                    help: Some(
                        "agent names become file names; e.g. name: invoice-processor".to_string(),
                    ),
                })
            })
        });

    let identity = v.identity(&raw);
    let identity_declared = raw.identity.0.is_some();
    let sandbox = v
        .required(
            &raw.sandbox,
            "sandbox",
            root,
            "add a sandbox section with at least `command: [\"program\", \"arg\"]`",
        )
        .and_then(|s| v.sandbox(s));
    v.agent_workdir = sandbox.as_ref().map(|s| s.workdir.clone());
    v.agent_home = sandbox.as_ref().and_then(|s| s.home.clone());
    let mcp = match &raw.mcp.0 {
        Some(m) => v.mcp(m),
        None => Some(Mcp::default()),
    };
    let llm = match &raw.llm.0 {
        Some(l) => v.llm(l, sandbox.as_ref().map(|s| &s.network)),
        None => Some(Llm::default()),
    };
    if let (Some(llm), Some(sandbox)) = (&llm, &raw.sandbox.0)
        && let Some(env) = &sandbox.value.env.0
    {
        v.llm_env(&env.value, llm);
    }
    let human_gates = match &raw.human_gates.0 {
        Some(h) => v.human_gates(h, mcp.as_ref()),
        None => Some(HumanGates::default()),
    };
    let spending = match &raw.spending.0 {
        Some(s) => v.spending(s, mcp.as_ref(), llm.as_ref()),
        None => Some(Spending::default()),
    };
    let a2a = match &raw.a2a.0 {
        Some(a) => {
            if !identity_declared {
                v.sink.error(
                    "a2a_requires_identity",
                    a.key_pos(),
                    "a2a needs the agent's identity: envelopes are signed with its DID key",
                    Some("add `identity: {did: did:key:…}` (see `constle keygen`)".to_string()),
                );
            }
            v.a2a(a).map(Some)
        }
        None => Some(None),
    };
    let audit = match &raw.audit.0 {
        Some(a) => v.audit(a, identity_declared),
        None => Some(crate::model::Audit::default()),
    };

    if !v.sink.errors.is_empty() {
        return None;
    }
    Some(Manifest {
        name: name?,
        identity: identity?,
        sandbox: sandbox?,
        mcp: mcp?,
        llm: llm?,
        human_gates: human_gates?,
        spending: spending?,
        a2a: a2a?,
        audit: audit?,
        base_dir: v.base_dir,
        policy_digest: input_digest,
    })
}

impl V<'_, '_> {
    /// A required field: reports `missing_field` at `parent` when absent.
    fn required<'f, T>(
        &mut self,
        field: &'f Field<T>,
        path: &str,
        parent: Pos,
        help: &str,
    ) -> Option<&'f Located<T>> {
        if field.0.is_none() {
            self.sink.error(
                "missing_field",
                parent,
                format!("missing required field `{path}`"),
                Some(help.to_string()),
            );
        }
        field.0.as_ref()
    }

    /// Runs a value check, reporting its failure at the value.
    fn check<T>(
        &mut self,
        value: &Located<String>,
        code: &'static str,
        f: impl FnOnce(&str) -> Result<T, InvalidValue>,
    ) -> Option<T> {
        match f(&value.value) {
            Ok(t) => Some(t),
            Err(e) => {
                self.sink.error(code, value.pos, e.message, e.help);
                None
            }
        }
    }

    fn did(&mut self, value: &Located<String>, what: &str) -> Option<DidKey> {
        self.check(value, "invalid_did_key", |s| {
            DidKey::parse(s).map_err(|e| InvalidValue {
                message: format!("{what}: {e}"),
                help: Some(
                    "write an Ed25519 did:key, as printed by `constle keygen` or `constle webhook-keygen`"
                        .to_string(),
                ),
            })
        })
    }

    /// An optional text field checked by `f`: `Some(None)` when absent,
    /// `None` when invalid (the error is reported at the value).
    fn optional<T>(
        &mut self,
        value: &Field<String>,
        code: &'static str,
        f: impl FnOnce(&str) -> Result<T, InvalidValue>,
    ) -> Option<Option<T>> {
        match &value.0 {
            None => Some(None),
            Some(v) => self.check(v, code, f).map(Some),
        }
    }

    fn amount(&mut self, value: &Field<String>) -> Option<Option<Decimal>> {
        self.optional(value, "invalid_amount", parse_amount)
    }

    /// An `mcp.servers[].url` or `a2a.peers[].url` (`field`).
    fn url(&mut self, value: &Located<String>, field: &str) -> Option<HttpUrl> {
        match HttpUrl::parse(&value.value) {
            Ok(url) => {
                self.secret_url_warning(value, &url, field);
                Some(url)
            }
            Err((code, e)) => {
                self.sink.error(code, value.pos, e.message, e.help);
                None
            }
        }
    }

    /// Warns when `url`, written at `value` for `field`, carries a
    /// secret-looking query parameter.
    fn secret_url_warning(&mut self, value: &Located<String>, url: &HttpUrl, field: &str) {
        if url.carries_secret() {
            self.sink.warning(
                "url_carries_secret",
                value.pos,
                format!(
                    "{field} {} carries a secret-looking query parameter, in clear text in the Agentfile",
                    show_url(url.as_str())
                ),
                Some("restrict who can read the Agentfile; Constle shows the value as *** wherever it prints the URL".to_string()),
            );
        }
    }

    /// One of a fixed set of words.
    fn choice<'c>(
        &mut self,
        value: &Located<String>,
        what: &str,
        choices: &[&'c str],
    ) -> Option<&'c str> {
        if let Some(found) = choices.iter().find(|c| **c == value.value) {
            return Some(found);
        }
        self.sink.error(
            "unknown_variant",
            value.pos,
            format!("unknown {what} {}", show(&value.value)),
            Some(suggest(&value.value, "values", choices)),
        );
        None
    }

    fn path(&mut self, value: &Located<String>) -> Option<PathBuf> {
        let s = value.value.as_str();
        if s.is_empty() || s.contains('\0') {
            self.sink.error(
                "invalid_path",
                value.pos,
                if s.is_empty() {
                    "empty path".to_string()
                } else {
                    format!("path {} contains a NUL byte", show(s))
                },
                Some(
                    "write a directory path, relative to the Agentfile's directory or absolute"
                        .to_string(),
                ),
            );
            return None;
        }
        Some(resolve(&self.base_dir, s))
    }

    /// A directory a sandbox mounts (`field`: `sandbox.workdir`,
    /// `sandbox.rootfs`, `sandbox.home`, `mcp.servers[].workdir`): a valid path that does
    /// not hold this Agentfile, which the sandbox could otherwise read, and
    /// through a work directory rewrite for the next run.
    fn sandbox_dir(&mut self, value: &Located<String>, field: &str) -> Option<PathBuf> {
        let dir = self.path(value)?;
        if !holds(&dir, &self.agentfile) {
            return Some(dir);
        }
        let leaf = field.rsplit('.').next().unwrap_or(field);
        let (code, could, example) = match leaf {
            "workdir" => (
                "workdir_holds_agentfile",
                "see and rewrite",
                DEFAULT_WORKDIR,
            ),
            "home" => ("home_holds_agentfile", "see and rewrite", "agent-home"),
            _ => ("rootfs_holds_agentfile", "see", "rootfs"),
        };
        self.sink.error(
            code,
            value.pos,
            format!(
                "{field} {} holds this Agentfile, so what runs there could {could} the run's policy",
                dir.display(),
            ),
            Some(format!(
                "give it a directory of its own beside the Agentfile, e.g. {leaf}: ./{example}"
            )),
        );
        None
    }

    fn identity(&mut self, raw: &RawManifest) -> Option<Option<Identity>> {
        let Some(identity) = &raw.identity.0 else {
            return Some(None);
        };
        let did = self.required(
            &identity.value.did,
            "identity.did",
            identity.key_pos(),
            "write the agent's did:key, as printed by `constle keygen`",
        )?;
        self.did(did, "identity.did")
            .map(|did| Some(Identity { did }))
    }

    fn sandbox(&mut self, raw: &Located<RawSandbox>) -> Option<Sandbox> {
        let s: &RawSandbox = &raw.value;
        let command = self
            .required(
                &s.command,
                "sandbox.command",
                raw.key_pos(),
                "write the program and its arguments as a list, e.g. command: [\"python\", \"agent.py\"]",
            )
            .and_then(|c| self.command(c, "sandbox.command"));
        let workdir = match &s.workdir.0 {
            Some(w) => self.sandbox_dir(w, "sandbox.workdir"),
            None => Some(self.base_dir.join(DEFAULT_WORKDIR)),
        };
        let rootfs = match &s.rootfs.0 {
            Some(r) => self.sandbox_dir(r, "sandbox.rootfs").map(Some),
            None => Some(None),
        };
        let env = self.env(s);
        let network = match &s.network.0 {
            Some(n) => self.network(n),
            None => Some(Network {
                egress: Egress::Restricted,
                allowed_hosts: Vec::new(),
            }),
        };
        let limits = match &s.limits.0 {
            Some(l) => self.limits(&l.value),
            None => Some(Limits::default()),
        };
        let tmpfs = match &s.tmpfs.0 {
            Some(t) => self.tmpfs(&t.value),
            None => Some(Tmpfs::default()),
        };
        let home = match &s.home.0 {
            Some(h) => {
                let rootfs = rootfs.as_ref().and_then(Option::as_deref);
                self.home(h, workdir.as_deref(), rootfs).map(Some)
            }
            None => Some(None),
        };
        Some(Sandbox {
            command: command?,
            workdir: workdir?,
            workdir_declared: s.workdir.0.is_some(),
            env: env?,
            rootfs: rootfs?,
            network: network?,
            limits: limits?,
            tmpfs: tmpfs?,
            home: home?,
        })
    }

    fn tmpfs(&mut self, t: &RawTmpfs) -> Option<Tmpfs> {
        let tmp = self.optional(&t.tmp, "invalid_tmpfs", parse_tmpfs);
        let home = self.optional(&t.home, "invalid_tmpfs", parse_tmpfs);
        let shm = self.optional(&t.shm, "invalid_tmpfs", parse_tmpfs);
        Some(Tmpfs {
            tmp: tmp?,
            home: home?,
            shm: shm?,
        })
    }

    fn limits(&mut self, l: &RawLimits) -> Option<Limits> {
        let memory = self.optional(&l.memory, "invalid_limit", parse_memory);
        let cpus = self.optional(&l.cpus, "invalid_limit", parse_cpus);
        let pids = match &l.pids.0 {
            None => Some(None),
            Some(p) => self.pids(p).map(Some),
        };
        let wall_clock = match &l.wall_clock_seconds.0 {
            None => Some(None),
            Some(w) => self
                .bounded(
                    w,
                    "wall_clock_seconds",
                    (1, MAX_WALL_CLOCK_SECONDS),
                    "invalid_limit",
                    format!(
                        "write how many seconds the run may last, from 1 to {MAX_WALL_CLOCK_SECONDS} (a week), e.g. wall_clock_seconds: 3600"
                    ),
                )
                .map(Some),
        };
        Some(Limits {
            memory_bytes: memory?,
            pids: pids?,
            cpu_millis: cpus?,
            wall_clock_seconds: wall_clock?,
        })
    }

    fn pids(&mut self, pids: &Located<u64>) -> Option<u32> {
        self.bounded(
            pids,
            "pids",
            (MIN_PIDS, MAX_PIDS),
            "invalid_limit",
            format!(
                "write at least {MIN_PIDS}: the count includes every thread and constle's own processes in the sandbox, e.g. pids: 256"
            ),
        )
    }

    /// An integer field `name` from `min` to `max`; outside, an error
    /// `code` with `help`.
    pub(super) fn bounded(
        &mut self,
        value: &Located<u64>,
        name: &str,
        (min, max): (u32, u32),
        code: &'static str,
        help: String,
    ) -> Option<u32> {
        // Placeholder 0 after a spelling error was reported already.
        if self.sink.is_poisoned(value.pos) {
            return None;
        }
        match u32::try_from(value.value) {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.sink.error(
                    code,
                    value.pos,
                    format!("{name} is {}; it must be from {min} to {max}", value.value),
                    Some(help),
                );
                None
            }
        }
    }

    /// A program and its arguments (`field`: `sandbox.command`,
    /// `mcp.servers[].command`).
    fn command(&mut self, command: &Located<Strings>, field: &str) -> Option<Vec<String>> {
        if command.value.is_empty() {
            self.sink.error(
                "invalid_command",
                command.pos,
                format!("{field} is empty"),
                Some(
                    "write the program and its arguments, e.g. command: [\"python\", \"agent.py\"]"
                        .to_string(),
                ),
            );
            return None;
        }
        let mut ok = true;
        for (i, arg) in command.value.iter().enumerate() {
            if i == 0 && arg.value.is_empty() {
                self.sink.error(
                    "invalid_command",
                    arg.pos,
                    format!("the program, {field}[0], is empty"),
                    Some("write the program to run first, e.g. python".to_string()),
                );
                ok = false;
            } else if arg.value.contains('\0') {
                self.sink.error(
                    "invalid_command",
                    arg.pos,
                    format!("argument {} contains a NUL byte", show(&arg.value)),
                    Some("remove the NUL byte; arguments cannot contain one".to_string()),
                );
                ok = false;
            }
        }
        ok.then(|| command.value.iter().map(|a| a.value.clone()).collect())
    }

    fn env(&mut self, s: &RawSandbox) -> Option<BTreeMap<EnvVarName, String>> {
        let mut out = BTreeMap::new();
        let Some(env) = &s.env.0 else {
            return Some(out);
        };
        let mut ok = true;
        for (key, value) in &env.value.0 {
            let name = self.check(key, "invalid_env_name", EnvVarName::new);
            let Some(name) = name else {
                ok = false;
                continue;
            };
            if is_reserved(name.as_str()) {
                self.sink.error(
                    "reserved_env_name",
                    key.pos,
                    format!("{} is reserved by constle and cannot be set in sandbox.env", show(&key.value)),
                    Some(
                        "remove it: constle points HTTPS_PROXY and HTTP_PROXY at its egress proxy, the agent's only \
                         way out, and NO_PROXY at loopback (ALL_PROXY it leaves unset); CONSTLE_* names are constle's"
                            .to_string(),
                    ),
                );
                ok = false;
                continue;
            }
            if value.value.contains('\0') {
                self.sink.error(
                    "invalid_string",
                    value.pos,
                    format!("the value of {} contains a NUL byte", show(&key.value)),
                    Some("remove the NUL byte; environment values cannot contain one".to_string()),
                );
                ok = false;
                continue;
            }
            out.insert(name, value.value.clone());
        }
        ok.then_some(out)
    }

    fn network(&mut self, raw: &Located<RawNetwork>) -> Option<Network> {
        let n = &raw.value;
        let egress = match &n.egress.0 {
            None => Some(Egress::Restricted),
            Some(e) => self
                .choice(e, "egress mode", &["none", "restricted", "open"])
                .map(|c| match c {
                    "none" => Egress::None,
                    "open" => Egress::Open,
                    _ => Egress::Restricted,
                }),
        };
        let hosts = match &n.allowed_hosts.0 {
            Some(list) => self.unique_list(
                list,
                "invalid_hostname",
                Hostname::new,
                "duplicate_host",
                "allowed_hosts",
            ),
            None => Some(Vec::new()),
        };
        let mut ok = hosts.is_some();
        if let (Some(Egress::None), Some(e), Some(list)) = (egress, &n.egress.0, &n.allowed_hosts.0)
            && !list.value.is_empty()
        {
            self.sink.error(
                "egress_none_with_hosts",
                e.pos,
                format!(
                    "egress: none gives the agent no network, but allowed_hosts lists {} host(s)",
                    list.value.len()
                ),
                Some("remove allowed_hosts, or write egress: restricted".to_string()),
            );
            ok = false;
        }
        if let (Some(Egress::Open), Some(e)) = (egress, &n.egress.0) {
            self.sink.warning(
                "egress_open",
                e.pos,
                "egress: open lets the agent reach any public host on port 443; allowed_hosts is not consulted",
                Some("prefer egress: restricted (the default) with the hosts the agent needs".to_string()),
            );
        }
        if !ok {
            return None;
        }
        Some(Network {
            egress: egress?,
            allowed_hosts: hosts?,
        })
    }

    fn mcp(&mut self, raw: &Located<RawMcp>) -> Option<Mcp> {
        let Some(servers) = &raw.value.servers.0 else {
            return Some(Mcp::default());
        };
        let ids = servers.value.iter().filter_map(|s| s.value.id.0.as_ref());
        let mut ok = self.unique_ids(
            ids,
            "MCP server",
            ("duplicate_server_id", "server_id_collision"),
            |id| ServerId::new(id).ok().map(|id| id.env_var()),
        );
        if let Some(extra) = servers.value.get(crate::bounds::MAX_MCP_SERVERS) {
            self.sink.error(
                "too_many_servers",
                extra.pos,
                format!(
                    "{} MCP servers: an Agentfile declares at most {}",
                    servers.value.len(),
                    crate::bounds::MAX_MCP_SERVERS
                ),
                Some("split the agent, or put several tools behind one server".into()),
            );
            ok = false;
        }
        let mut out = Vec::new();
        for server in &servers.value {
            match self.server(server) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(Mcp { servers: out })
    }

    fn server(&mut self, raw: &Located<RawServer>) -> Option<McpServer> {
        let s = &raw.value;
        let at = raw.pos;
        let id = self
            .required(
                &s.id,
                "mcp.servers[].id",
                at,
                "name the server, e.g. id: accounting",
            )
            .and_then(|id| self.check(id, "invalid_server_id", ServerId::new));
        let transport = self.transport(s, at);
        let tools = self
            .required(
                &s.tools,
                "mcp.servers[].tools",
                at,
                "list the exact tool names the agent may call, e.g. tools: [list_invoices]",
            )
            .and_then(|t| self.tools(t));
        let pricing = match &s.pricing.0 {
            None => Some(Pricing::default()),
            Some(p) => self.pricing(p, tools.as_deref()),
        };
        let allow_methods = match &s.allow_methods.0 {
            None => Some(Vec::new()),
            Some(list) => self.allow_methods(list),
        };
        Some(McpServer {
            id: id?,
            transport: transport?,
            tools: tools?,
            pricing: pricing?,
            allow_methods: allow_methods?,
        })
    }

    /// `headers`: each entry checked, each name once in any case.
    pub(super) fn headers(
        &mut self,
        list: &Located<Vec<Located<RawHeader>>>,
    ) -> Option<Vec<SecretHeader>> {
        let mut out = Vec::new();
        let mut ok = true;
        let mut seen: HashMap<String, Pos> = HashMap::new();
        for entry in &list.value {
            let Some(header) = self.header(entry) else {
                ok = false;
                continue;
            };
            let key = header.name.as_str().to_ascii_lowercase();
            if let Some(first) = seen.get(&key) {
                let at = entry.value.name.0.as_ref().map_or(entry.pos, |n| n.pos);
                self.sink.error(
                    "duplicate_header",
                    at,
                    format!(
                        "header {} is declared twice for this server (names are compared without regard to case)",
                        show(header.name.as_str())
                    ),
                    Some(format!(
                        "remove one; the first is at line {}",
                        first.line
                    )),
                );
                ok = false;
                continue;
            }
            seen.insert(key, entry.pos);
            out.push(header);
        }
        ok.then_some(out)
    }

    fn header(&mut self, raw: &Located<RawHeader>) -> Option<SecretHeader> {
        let h = &raw.value;
        let name = self
            .required(
                &h.name,
                "mcp.servers[].headers[].name",
                raw.pos,
                "name the header, e.g. name: Authorization",
            )
            .and_then(|n| match HeaderName::parse(&n.value) {
                Ok(name) => Some(name),
                Err((code, e)) => {
                    self.sink.error(code, n.pos, e.message, e.help);
                    None
                }
            });
        let scheme = self.optional(&h.scheme, "invalid_auth_scheme", AuthScheme::new);
        let var = self
            .required(
                &h.value_secret_ref,
                "mcp.servers[].headers[].value_secret_ref",
                raw.pos,
                "name the host environment variable holding the value, e.g. value_secret_ref: MCP_TOKEN",
            )
            .and_then(|v| Some((v, self.check(v, "invalid_env_name", EnvVarName::new)?)));
        let (at, var) = var?;
        let header = SecretHeader {
            name: name?,
            scheme: scheme?,
            value_secret_ref: var,
        };
        self.header_warnings(at, &header);
        Some(header)
    }

    /// Whether the run could send the header from this environment; the
    /// value is a secret, so what is wrong is said without it.
    fn header_warnings(&mut self, at: &Located<String>, header: &SecretHeader) {
        if let Err(err) = header.value(self.env) {
            let sent = format!("the gate sends it as header {}", show(header.name.as_str()));
            let note = "; a scheme such as Bearer goes in the Agentfile's scheme";
            self.secret_warning(at, &err, &sent, note);
        }
    }

    /// Why a secret written at `at` cannot be sent from this environment,
    /// said without its value: `sent` tells where it goes, `note` ends the
    /// help for a value that is not header text.
    pub(super) fn secret_warning(
        &mut self,
        at: &Located<String>,
        err: &SecretHeaderError,
        sent: &str,
        note: &str,
    ) {
        let var = err.variable();
        let (code, help) = match err {
            SecretHeaderError::Unset(_) | SecretHeaderError::Empty(_) => (
                "header_secret_unset",
                format!("export {var}=… (the credential) before `constle run`"),
            ),
            SecretHeaderError::NotHeaderText(_) => (
                "header_secret_invalid",
                format!("set {var} to the credential alone, without a line break{note}"),
            ),
        };
        self.sink.warning(
            code,
            at.pos,
            format!("{err}, so `constle run` will refuse to start: {sent}"),
            Some(help),
        );
    }

    /// Ids of `what` (an MCP server, an LLM provider): each used once
    /// (else `duplicate`), and no two giving the agent the same variable
    /// through `env_var` (else `collision`), which is `None` for an invalid
    /// id (reported where the id is checked). Whether all are.
    pub(super) fn unique_ids<'r>(
        &mut self,
        ids: impl Iterator<Item = &'r Located<String>>,
        what: &str,
        (duplicate, collision): (&'static str, &'static str),
        env_var: fn(&str) -> Option<String>,
    ) -> bool {
        let mut ok = true;
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        let mut vars: HashMap<String, (&str, Pos)> = HashMap::new();
        for id in ids {
            if let Some(first) = seen.get(id.value.as_str()) {
                self.sink.error(
                    duplicate,
                    id.pos,
                    format!("{what} id {} is used twice", show(&id.value)),
                    Some(format!("rename one; the first is at line {}", first.line)),
                );
                ok = false;
            } else if let Some(var) = env_var(&id.value) {
                if let Some((other, first)) = vars.get(&var) {
                    self.sink.error(
                        collision,
                        id.pos,
                        format!(
                            "{what} ids {} and {} both become {var} for the agent",
                            show(other),
                            show(&id.value)
                        ),
                        Some(format!(
                            "rename one of them (the other is at line {}); `-` and `_` are the same in variable names",
                            first.line
                        )),
                    );
                    ok = false;
                }
                vars.insert(var, (&id.value, id.pos));
            }
            seen.insert(&id.value, id.pos);
        }
        ok
    }

    /// A list of values, each checked by `parse` (its failures reported as
    /// `invalid_code`) and listed at most once (`duplicate_code`).
    fn unique_list<T>(
        &mut self,
        list: &Located<Strings>,
        invalid_code: &'static str,
        parse: fn(&str) -> Result<T, InvalidValue>,
        duplicate_code: &'static str,
        what: &str,
    ) -> Option<Vec<T>> {
        let mut out = Vec::new();
        let mut ok = true;
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        for item in &list.value {
            let Some(value) = self.check(item, invalid_code, parse) else {
                ok = false;
                continue;
            };
            if let Some(first) = seen.get(item.value.as_str()) {
                self.sink.error(
                    duplicate_code,
                    item.pos,
                    format!("{} is listed twice in {what}", show(&item.value)),
                    Some(format!(
                        "remove it; it is already listed at line {}",
                        first.line
                    )),
                );
                ok = false;
                continue;
            }
            seen.insert(&item.value, item.pos);
            out.push(value);
        }
        ok.then_some(out)
    }

    /// A list of unique tool names.
    fn tool_list(
        &mut self,
        list: &Located<Strings>,
        duplicate_code: &'static str,
        what: &str,
    ) -> Option<Vec<ToolName>> {
        self.unique_list(
            list,
            "invalid_tool_name",
            ToolName::new,
            duplicate_code,
            what,
        )
    }

    /// `allow_methods`: unique method names, with a warning for those the
    /// gate allows anyway.
    fn allow_methods(&mut self, list: &Located<Strings>) -> Option<Vec<MethodName>> {
        let methods = self.unique_list(
            list,
            "invalid_method_name",
            MethodName::new,
            "duplicate_method",
            "allow_methods",
        );
        for entry in &list.value {
            let name = entry.value.as_str();
            let (message, help) = if name == "tools/call" || name == "tools/list" {
                (
                    format!(
                        "{} in allow_methods changes nothing: the gate always lets it through under its own rules (declared tools, human gates, filtered lists)",
                        show(name)
                    ),
                    "remove it; list the tools the agent may call in this server's tools",
                )
            } else if MCP_BASE_REQUESTS.contains(&name) || MCP_BASE_NOTIFICATIONS.contains(&name) {
                (
                    format!(
                        "{} in allow_methods changes nothing: the gate always allows it",
                        show(name)
                    ),
                    "remove it",
                )
            } else {
                continue;
            };
            self.sink.warning(
                "method_always_allowed",
                entry.pos,
                message,
                Some(help.to_string()),
            );
        }
        methods
    }

    fn tools(&mut self, list: &Located<Strings>) -> Option<Vec<ToolName>> {
        if list.value.is_empty() {
            self.sink.error(
                "empty_tools",
                list.pos,
                "an MCP server must declare at least one tool",
                Some(
                    "list the exact tool names the agent may call, or remove the server"
                        .to_string(),
                ),
            );
            return None;
        }
        self.tool_list(list, "duplicate_tool", "tools")
    }

    fn pricing(
        &mut self,
        raw: &Located<RawPricing>,
        tools: Option<&[ToolName]>,
    ) -> Option<Pricing> {
        let p = &raw.value;
        let default_usd = self.amount(&p.default_usd);
        let mut priced = BTreeMap::new();
        let mut ok = true;
        let declared: Option<HashSet<&str>> =
            tools.map(|t| t.iter().map(ToolName::as_str).collect());
        if let Some(map) = &p.tools.0 {
            for (tool, price) in &map.value.0 {
                let name = self.check(tool, "invalid_tool_name", ToolName::new);
                let amount = self.check(price, "invalid_amount", parse_amount);
                let (Some(name), Some(amount)) = (name, amount) else {
                    ok = false;
                    continue;
                };
                if let (Some(declared), Some(tools)) = (&declared, tools)
                    && !declared.contains(name.as_str())
                {
                    if self.sink.full() {
                        self.sink.overflow(tool.pos);
                        ok = false;
                        continue;
                    }
                    let names: Vec<&str> = tools.iter().map(ToolName::as_str).collect();
                    self.sink.error(
                        "unknown_priced_tool",
                        tool.pos,
                        format!(
                            "{} is priced but not declared in this server's tools",
                            show(&tool.value)
                        ),
                        Some(match did_you_mean(&tool.value, names.iter().copied()) {
                            Some(best) => format!(
                                "did you mean `{best}`? declared tools: {}",
                                names.join(", ")
                            ),
                            None => {
                                format!("add it to tools, or price one of: {}", names.join(", "))
                            }
                        }),
                    );
                    ok = false;
                    continue;
                }
                priced.insert(name, amount);
            }
        }
        if !ok {
            return None;
        }
        Some(Pricing {
            default_usd: default_usd?,
            tools: priced,
        })
    }

    fn human_gates(
        &mut self,
        raw: &Located<RawHumanGates>,
        mcp: Option<&Mcp>,
    ) -> Option<HumanGates> {
        let h = &raw.value;
        let enabled = h.enabled.0.as_ref().map(|e| e.value).unwrap_or(false);
        let gated = match &h.require_approval_for.0 {
            Some(list) => self.tool_list(list, "duplicate_entry", "require_approval_for"),
            None => Some(Vec::new()),
        };
        let approver = match &h.approver_pubkey.0 {
            Some(a) => self.did(a, "approver_pubkey").map(Some),
            None => Some(None),
        };
        let entries: &[Located<String>] = h
            .require_approval_for
            .0
            .as_ref()
            .map(|l| l.value.as_slice())
            .unwrap_or(&[]);
        let quorum = self.quorum(raw);
        let named =
            h.approver_pubkey.0.is_some() || h.approvers.0.is_some() || h.approver_set.0.is_some();
        if enabled && !entries.is_empty() && !named {
            self.sink.error(
                "missing_approver_pubkey",
                raw.key_pos(),
                "human_gates gates tool calls but has no approver_pubkey (or approvers)",
                Some(
                    "run `constle webhook-keygen approver` and write the did:key it prints as approver_pubkey"
                        .to_string(),
                ),
            );
        }
        self.gate_warnings(h, enabled, entries, mcp);

        let mut notify = Vec::new();
        let mut ok = true;
        if let Some(list) = &h.notify.0 {
            for item in &list.value {
                match self.notify(item) {
                    Some(n) => notify.push(n),
                    None => ok = false,
                }
            }
        }
        let timeout = match &h.approval_timeout_seconds.0 {
            None => Some(DEFAULT_APPROVAL_TIMEOUT_SECONDS),
            Some(t) => self.bounded(
                t,
                "approval_timeout_seconds",
                (1, MAX_APPROVAL_TIMEOUT_SECONDS),
                "out_of_range",
                format!(
                    "write a number of seconds from 1 to {MAX_APPROVAL_TIMEOUT_SECONDS} (one day), e.g. 300"
                ),
            ),
        };
        let on_timeout = match &h.on_timeout.0 {
            None => Some(OnTimeout::Abort),
            Some(o) => {
                let choice = self.choice(o, "on_timeout value", &["abort", "proceed"]);
                if choice == Some("proceed") {
                    self.sink.warning(
                        "on_timeout_proceed",
                        o.pos,
                        "on_timeout: proceed forwards a gated call without approval when nobody answers in time: the gate becomes a delay",
                        Some("keep the default, on_timeout: abort, unless a delay is really all you want".to_string()),
                    );
                }
                choice.map(|c| {
                    if c == "proceed" {
                        OnTimeout::Proceed
                    } else {
                        OnTimeout::Abort
                    }
                })
            }
        };
        if !ok {
            return None;
        }
        Some(HumanGates {
            enabled,
            require_approval_for: gated?,
            approver_pubkey: approver?,
            quorum: quorum?,
            notify,
            approval_timeout_seconds: timeout?,
            on_timeout: on_timeout?,
        })
    }

    fn gate_warnings(
        &mut self,
        h: &RawHumanGates,
        enabled: bool,
        entries: &[Located<String>],
        mcp: Option<&Mcp>,
    ) {
        if enabled
            && entries.is_empty()
            && let Some(e) = &h.enabled.0
        {
            self.sink.warning(
                "gates_nothing",
                e.pos,
                "human_gates is enabled but require_approval_for is empty, so no call is gated",
                Some(
                    "list the exact tool names that need approval in require_approval_for"
                        .to_string(),
                ),
            );
        }
        // Declared tools, exactly and ignoring ASCII case (first server wins).
        let mut declared: HashSet<&str> = HashSet::new();
        let mut folded: HashMap<String, (&str, &str)> = HashMap::new();
        for server in mcp.map(|m| m.servers.as_slice()).unwrap_or_default() {
            for tool in &server.tools {
                declared.insert(tool.as_str());
                folded
                    .entry(tool.as_str().to_ascii_lowercase())
                    .or_insert((tool.as_str(), server.id.as_str()));
            }
        }
        // `enabled` given as something other than a bool was reported already;
        // its placeholder `false` must not also produce warnings.
        let enabled_broken = h
            .enabled
            .0
            .as_ref()
            .is_some_and(|e| self.sink.is_poisoned(e.pos));
        for entry in entries {
            let name = entry.value.as_str();
            if !enabled && !enabled_broken {
                self.sink.warning(
                    "gates_disabled",
                    entry.pos,
                    format!(
                        "human_gates.enabled is not true, so {} is not gated",
                        show(name)
                    ),
                    Some("set `enabled: true` under human_gates to gate it".to_string()),
                );
            }
            // Only when the servers validated: otherwise "no tool" is not proven.
            if mcp.is_none() || declared.contains(name) {
                continue;
            }
            let near = folded.get(&name.to_ascii_lowercase());
            let (message, help) = match near {
                Some((tool, server)) => (
                    format!(
                        "{} in require_approval_for matches no declared tool, so it gates nothing; server {} declares {}",
                        show(name),
                        show(server),
                        show(tool)
                    ),
                    format!("names match exactly and case-sensitively; write {}", show(tool)),
                ),
                None if declared.is_empty() => (
                    format!(
                        "{} in require_approval_for gates nothing: no MCP server is declared",
                        show(name)
                    ),
                    "declare the server and its tools under mcp.servers; gates only see MCP tool calls"
                        .to_string(),
                ),
                None => (
                    format!(
                        "{} in require_approval_for matches no declared tool, so it gates nothing",
                        show(name)
                    ),
                    "write a tool name exactly as a server declares it in mcp.servers[].tools".to_string(),
                ),
            };
            self.sink
                .warning("gate_matches_no_tool", entry.pos, message, Some(help));
        }
    }

    fn notify(&mut self, raw: &Located<crate::raw::RawNotify>) -> Option<Notify> {
        let n = &raw.value;
        let channel = self
            .required(
                &n.channel,
                "human_gates.notify[].channel",
                raw.pos,
                "write channel: webhook",
            )
            .and_then(|c| self.choice(c, "notify channel", &["webhook"]))
            .map(|_| NotifyChannel::Webhook);
        let var = self
            .required(
                &n.url_secret_ref,
                "human_gates.notify[].url_secret_ref",
                raw.pos,
                "name the host environment variable holding the webhook URL, e.g. url_secret_ref: HUMAN_GATE_WEBHOOK_URL",
            )
            .and_then(|v| {
                let name = self.check(v, "invalid_env_name", EnvVarName::new)?;
                self.webhook_warnings(v, &name);
                Some(name)
            });
        Some(Notify {
            channel: channel?,
            url_secret_ref: var?,
        })
    }

    fn webhook_warnings(&mut self, at: &Located<String>, name: &EnvVarName) {
        match (self.env)(name.as_str()) {
            None => self.sink.warning(
                "webhook_url_unset",
                at.pos,
                format!("{name} is not set, so gated calls will only be decided at the terminal"),
                Some(format!(
                    "export {name}=https://… (your decision endpoint) before `constle run`"
                )),
            ),
            Some(value) if value.is_empty() => self.sink.warning(
                "webhook_url_unset",
                at.pos,
                format!("{name} is empty, so gated calls will only be decided at the terminal"),
                Some(format!(
                    "set {name} to your decision endpoint's https URL before `constle run`"
                )),
            ),
            // The value is a secret: describe the problem, never echo it.
            Some(value) => {
                if HttpUrl::new(&value).is_err() {
                    self.sink.warning(
                        "webhook_url_invalid",
                        at.pos,
                        format!(
                            "the value of {name} is not an https URL (or http to loopback), so gated calls will only be decided at the terminal"
                        ),
                        Some(format!("set {name} to your decision endpoint's URL, e.g. https://approvals.example.com/gates")),
                    );
                }
            }
        }
    }

    /// `spending`; its caps count priced MCP calls (`mcp`) and model calls
    /// (`llm`'s providers).
    fn spending(
        &mut self,
        raw: &Located<RawSpending>,
        mcp: Option<&Mcp>,
        llm: Option<&Llm>,
    ) -> Option<Spending> {
        let s = &raw.value;
        let run = self.amount(&s.max_per_run_usd);
        let day = self.amount(&s.max_per_day_usd);
        let month = self.amount(&s.max_per_month_usd);
        let ledger = self.redis_url(&s.ledger, "spending.ledger");
        let has_caps = s.max_per_run_usd.0.is_some()
            || s.max_per_day_usd.0.is_some()
            || s.max_per_month_usd.0.is_some();
        let unmetered =
            mcp.is_some_and(|m| !m.is_priced()) && llm.is_some_and(|l| l.providers.is_empty());
        if has_caps && unmetered {
            self.sink.warning(
                "spend_caps_unmetered",
                raw.key_pos(),
                "no MCP server declares pricing and no llm provider is declared, so these caps count nothing; traffic through allowed_hosts (a model API reached directly included) is never metered",
                Some("add pricing to the MCP servers whose calls cost money, and reach models through llm.providers".to_string()),
            );
        }
        Some(Spending {
            max_per_run_usd: run?,
            max_per_day_usd: day?,
            max_per_month_usd: month?,
            ledger: ledger?,
        })
    }

    fn a2a(&mut self, raw: &Located<RawA2a>) -> Option<A2a> {
        let a = &raw.value;
        let listen = match &a.listen.0 {
            None => Some(None),
            Some(l) => self
                .check(l, "invalid_socket_addr", |s| {
                    let help =
                        Some("write an IP address and port, e.g. 127.0.0.1:7400".to_string());
                    match s.parse::<SocketAddr>() {
                        Ok(addr) if addr.port() != 0 => Ok(addr),
                        Ok(_) => Err(InvalidValue {
                            message: "a2a.listen has port 0".to_string(),
                            help,
                        }),
                        Err(_) => Err(InvalidValue {
                            message: format!(
                                "a2a.listen {} is not an IP address and port",
                                show(s)
                            ),
                            help,
                        }),
                    }
                })
                .map(Some),
        };
        let mut peers = Vec::new();
        let mut ok = true;
        if let Some(list) = &a.peers.0 {
            let mut seen: HashMap<String, Pos> = HashMap::new();
            for peer in &list.value {
                let did = self
                    .required(
                        &peer.value.did,
                        "a2a.peers[].did",
                        peer.pos,
                        "write the peer's did:key",
                    )
                    .and_then(|d| {
                        let did = self.did(d, "a2a peer did")?;
                        if let Some(first) = seen.get(did.to_string().as_str()) {
                            self.sink.error(
                                "duplicate_peer",
                                d.pos,
                                format!("peer {} is listed twice", show(&d.value)),
                                Some(format!(
                                    "remove it; it is already listed at line {}",
                                    first.line
                                )),
                            );
                            return None;
                        }
                        seen.insert(did.to_string(), d.pos);
                        Some(did)
                    });
                let url = match &peer.value.url.0 {
                    None => Some(None),
                    Some(u) => self.url(u, "a2a.peers[].url").map(Some),
                };
                match (did, url) {
                    (Some(did), Some(url)) => peers.push(A2aPeer { did, url }),
                    _ => ok = false,
                }
            }
        }
        if !ok {
            return None;
        }
        let replay = self.redis_url(&a.replay, "a2a.replay");
        Some(A2a {
            listen: listen?,
            peers,
            replay: replay?,
        })
    }

    /// An optional Redis URL in `field`; `Some(None)` when absent, `None`
    /// when invalid (the error is reported).
    fn redis_url(&mut self, value: &Field<String>, field: &str) -> Option<Option<RedisUrl>> {
        let Some(located) = &value.0 else {
            return Some(None);
        };
        let url = self.check(located, "invalid_redis_url", |s| RedisUrl::new(field, s))?;
        if url.carries_secret() {
            self.sink.warning(
                "redis_password_in_agentfile",
                located.pos,
                format!(
                    "{field} {} carries a password (user information or `pass=`), in clear text in the Agentfile",
                    show_url(url.as_str())
                ),
                Some("restrict who can read the Agentfile, or let Redis trust the host (a Unix socket, an ACL by address)".to_string()),
            );
        }
        Some(Some(url))
    }
}

/// `base_dir` joined with `p`, without `.` components (`./work` is
/// `base_dir/work`). `..` is kept: resolving it lexically could name a
/// different directory than the file system would through a symlink.
fn resolve(base_dir: &Path, p: &str) -> PathBuf {
    base_dir
        .join(p)
        .components()
        .filter(|c| *c != std::path::Component::CurDir)
        .collect()
}
