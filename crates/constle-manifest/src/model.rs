//! The checked Agentfile: [`Manifest`] and its parts.
//!
//! Values of these types only come out of validation, so code that holds a
//! `Manifest` never checks a field again: names, DIDs, hosts, URLs, tool
//! names and amounts are already the types that enforce their rules, and
//! defaults are filled in.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use constle_identity::{DidKey, Name};
use constle_vkey::WitnessKey;
use rust_decimal::Decimal;

use crate::values::{
    AuthScheme, EnvVarName, HeaderName, Hostname, HttpUrl, MethodName, RedisUrl, ServerId, ToolName,
};

mod llm;

pub use llm::{
    DEFAULT_MAX_OUTPUT_TOKENS, Llm, LlmApi, LlmModel, LlmProvider, LlmSpending, MAX_MODEL_NAME_LEN,
    MAX_OUTPUT_TOKENS, ModelPrices,
};

/// A validated Agentfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The agent's name; safe as a file-name component.
    pub name: Name,
    /// The agent's identity, when declared. With it, audit entries are signed.
    pub identity: Option<Identity>,
    /// What runs in the sandbox and what it may reach.
    pub sandbox: Sandbox,
    /// The MCP servers the agent may call through the gate.
    pub mcp: Mcp,
    /// The model providers the agent may call through the LLM gate.
    pub llm: Llm,
    /// Which tool calls wait for a person.
    pub human_gates: HumanGates,
    /// Spend caps.
    pub spending: Spending,
    /// Agent-to-agent messaging, when declared.
    pub a2a: Option<A2a>,
    /// Checkpoints of the agent's log and the witnesses that cosign them.
    pub audit: Audit,
    /// The directory holding the Agentfile (made absolute); relative paths in
    /// the Agentfile are resolved against it.
    pub base_dir: PathBuf,
    /// The digest of the Agentfile's text as parsed: the policy in force,
    /// which a v2 approval signs.
    pub policy_digest: PolicyDigest,
}

/// `sha256:<hex>` of an Agentfile's exact bytes: any change to it, a
/// comment included, is another policy. Anyone can recompute it
/// (`sha256sum agent.yaml`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyDigest([u8; 32]);

impl PolicyDigest {
    /// The digest of `text`.
    pub fn of(text: &[u8]) -> PolicyDigest {
        use sha2::Digest as _;
        PolicyDigest(sha2::Sha256::digest(text).into())
    }
}

impl std::fmt::Display for PolicyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl std::fmt::Debug for PolicyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PolicyDigest({self})")
    }
}

/// `identity`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The agent's Ed25519 `did:key`.
    pub did: DidKey,
}

/// `sandbox`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The agent's argv: never empty, `command[0]` never empty, no NUL bytes.
    pub command: Vec<String>,
    /// The writable work directory, resolved against
    /// [`Manifest::base_dir`] (default: the Agentfile's directory).
    pub workdir: PathBuf,
    /// Whether the Agentfile names the work directory; `false`: it is the
    /// default, `./work` beside the Agentfile, which `constle run` makes
    /// when it does not exist yet.
    pub workdir_declared: bool,
    /// Extra environment for the agent. Never holds the proxy variables
    /// (`HTTP(S)_PROXY`, `NO_PROXY`, `ALL_PROXY`, any case) nor `CONSTLE_*`.
    pub env: BTreeMap<EnvVarName, String>,
    /// A directory to use as the sandbox's `/`, resolved against
    /// [`Manifest::base_dir`].
    pub rootfs: Option<PathBuf>,
    /// Egress policy.
    pub network: Network,
    /// Resource limits for the agent's whole process tree; none by default.
    pub limits: Limits,
    /// Sizes of the sandbox's file systems in memory.
    pub tmpfs: Tmpfs,
    /// `home`: a host directory mounted as the agent's home, kept across
    /// runs, resolved against [`Manifest::base_dir`]. Never holds the
    /// Agentfile; never holds, equals or lies inside `workdir` or `rootfs`.
    pub home: Option<PathBuf>,
}

/// `sandbox.tmpfs`: the most `/tmp`, the agent's home and `/dev/shm` may
/// hold, in bytes; `None` where the Agentfile is silent, and then the
/// sandbox's default (`docs/sandbox.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tmpfs {
    /// `tmp`: `/tmp`.
    pub tmp: Option<u64>,
    /// `home`: the agent's home.
    pub home: Option<u64>,
    /// `shm`: `/dev/shm`.
    pub shm: Option<u64>,
}

/// `sandbox.limits`: memory, processes and CPU for everything the sandbox
/// runs, enforced through cgroups (`docs/sandbox.md`), and the run's
/// wall-clock time, which needs none. Each is `None` when not declared, and
/// then not limited. The cgroup limits are named and spelled like
/// `docker run --memory --pids-limit --cpus`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    /// `memory`, in bytes: at least [`MIN_MEMORY_BYTES`](crate::MIN_MEMORY_BYTES).
    pub memory_bytes: Option<u64>,
    /// `pids`: processes and threads at once, constle's own in the sandbox
    /// included; [`MIN_PIDS`] to [`MAX_PIDS`].
    pub pids: Option<u32>,
    /// `cpus`, in thousandths of a CPU (`1.5` is 1500):
    /// [`MIN_CPU_MILLIS`](crate::MIN_CPU_MILLIS) to [`MAX_CPU_MILLIS`](crate::MAX_CPU_MILLIS).
    pub cpu_millis: Option<u32>,
    /// `wall_clock_seconds`: how long the run may last, 1 to
    /// [`MAX_WALL_CLOCK_SECONDS`]. Not a cgroup limit.
    pub wall_clock_seconds: Option<u32>,
}

impl Limits {
    /// Whether a limit is declared that cgroups enforce (memory, pids,
    /// CPU): the wall-clock limit alone needs none.
    pub fn needs_cgroup(&self) -> bool {
        self.memory_bytes.is_some() || self.pids.is_some() || self.cpu_millis.is_some()
    }
}

/// Largest `sandbox.limits.wall_clock_seconds`: a week.
pub const MAX_WALL_CLOCK_SECONDS: u32 = 604_800;

/// Smallest `sandbox.limits.pids`: room for constle's own processes and
/// threads in the sandbox (bubblewrap, the init and its relays) besides the
/// agent.
pub const MIN_PIDS: u32 = 8;

/// Largest `sandbox.limits.pids`: the kernel's `PID_MAX_LIMIT`, the most
/// `pids.max` takes.
pub const MAX_PIDS: u32 = 4_194_304;

/// `sandbox.network`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    /// The egress mode; default [`Egress::Restricted`].
    pub egress: Egress,
    /// Host names the proxy lets the agent reach on port 443; unique. Always
    /// empty under [`Egress::None`].
    pub allowed_hosts: Vec<Hostname>,
}

impl Network {
    /// Whether `host` is in `allowed_hosts` (exact, lower-case match).
    pub fn allows(&self, host: &str) -> bool {
        self.allowed_hosts.iter().any(|h| h == host)
    }
}

/// `sandbox.network.egress`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Egress {
    /// No proxy at all: the agent has no network.
    None,
    /// Only `allowed_hosts`, on port 443 (the default).
    #[default]
    Restricted,
    /// Any public host on port 443; internal destinations still refused.
    Open,
}

/// `mcp`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mcp {
    /// Declared servers: ids unique, and unique as `CONSTLE_MCP_<ID>_URL`.
    pub servers: Vec<McpServer>,
}

impl Mcp {
    /// The server with this id.
    pub fn server(&self, id: &str) -> Option<&McpServer> {
        self.servers.iter().find(|s| s.id == id)
    }

    /// Whether any server prices any call.
    pub fn is_priced(&self) -> bool {
        self.servers.iter().any(|s| s.pricing.is_priced())
    }

    /// The servers constle starts itself (`command`), with how.
    pub fn stdio_servers(&self) -> impl Iterator<Item = (&McpServer, &StdioServer)> {
        self.servers
            .iter()
            .filter_map(|server| match &server.transport {
                McpTransport::Stdio(stdio) => Some((server, stdio)),
                McpTransport::Url { .. } => None,
            })
    }
}

/// One entry of `mcp.servers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServer {
    /// The server's id.
    pub id: ServerId,
    /// How the gate reaches the server (host side only; the agent never
    /// sees it): `url` or `command`, exactly one.
    pub transport: McpTransport,
    /// The tools the agent may call, unique, never empty.
    pub tools: Vec<ToolName>,
    /// What calls cost; every priced tool is in `tools`.
    pub pricing: Pricing,
    /// JSON-RPC methods allowed beyond the base sets ([`MCP_BASE_REQUESTS`],
    /// [`MCP_BASE_NOTIFICATIONS`], [`MCP_BASE_SERVER_REQUESTS`]), in both
    /// directions; unique. A name starting `notifications/` is a
    /// notification, any other a request.
    pub allow_methods: Vec<MethodName>,
}

/// One entry of `mcp.servers[].headers`: a header, typically a credential,
/// that the gate adds to every request to the server. The Agentfile names
/// the host variable holding its value, never the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretHeader {
    /// The header's name, as written.
    pub name: HeaderName,
    /// Written before the value, with one space between (`Bearer`).
    pub scheme: Option<AuthScheme>,
    /// The host variable holding the value (or, with a scheme, what
    /// follows it).
    pub value_secret_ref: EnvVarName,
}

/// How the gate reaches an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// `url`: a Streamable HTTP server, reached over the network.
    Url {
        /// Where the gate sends its requests.
        url: HttpUrl,
        /// Headers the gate adds to every request it sends the server;
        /// names unique without regard to case. Their values are read from
        /// the host when a run starts ([`SecretHeader::value`]), never kept
        /// here.
        headers: Vec<SecretHeader>,
    },
    /// `command`: a stdio server Constle runs for the run, in a sandbox of
    /// its own.
    Stdio(StdioServer),
}

/// An MCP server run by Constle (`command`), spoken to over its stdin and
/// stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioServer {
    /// The server's argv, run inside its sandbox: never empty, `command[0]`
    /// never empty, no NUL bytes.
    pub command: Vec<String>,
    /// Its writable work directory, resolved against
    /// [`Manifest::base_dir`]; `None`: an empty directory made for each run
    /// and removed after it. Never holds the Agentfile, nor holds or lies
    /// in the agent's work directory.
    pub workdir: Option<PathBuf>,
    /// Its environment: each variable's value is the named host
    /// variable's, read when the run starts (never written in the
    /// Agentfile, never given to the agent). Never a proxy variable nor
    /// `CONSTLE_*` (like `sandbox.env`).
    pub env_secret_refs: BTreeMap<EnvVarName, EnvVarName>,
    /// The hosts it may reach on port 443, through a proxy of its own
    /// (`network.allowed_hosts`, the rules of `sandbox.network`'s); empty:
    /// no proxy, no network at all.
    pub allowed_hosts: Vec<Hostname>,
}

/// Requests the MCP gate always lets an agent send: the lifecycle, `ping`
/// and the tools, whose own rules (declared names, gates) always apply.
pub const MCP_BASE_REQUESTS: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];

/// Notifications the MCP gate always lets an agent send.
pub const MCP_BASE_NOTIFICATIONS: [&str; 4] = [
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// Requests the MCP gate always lets a server send to the agent.
pub const MCP_BASE_SERVER_REQUESTS: [&str; 1] = ["ping"];

impl McpServer {
    /// The server's URL, when the gate reaches it over the network.
    pub fn url(&self) -> Option<&HttpUrl> {
        match &self.transport {
            McpTransport::Url { url, .. } => Some(url),
            McpTransport::Stdio(_) => None,
        }
    }

    /// The headers the gate adds to its requests: a URL server's declared
    /// ones (a stdio server has none: it gets `env_secret_refs`).
    pub fn headers(&self) -> &[SecretHeader] {
        match &self.transport {
            McpTransport::Url { headers, .. } => headers,
            McpTransport::Stdio(_) => &[],
        }
    }

    /// The variable through which the agent reaches this server.
    pub fn env_var(&self) -> String {
        self.id.env_var()
    }

    /// Whether `tool` is declared, byte for byte.
    pub fn declares(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }

    /// The price of one call to `tool`: its own price, else the server's
    /// default, else `None` (unpriced).
    pub fn price_of(&self, tool: &str) -> Option<Decimal> {
        self.pricing
            .tools
            .get(tool)
            .copied()
            .or(self.pricing.default_usd)
    }
}

/// `mcp.servers[].pricing`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pricing {
    /// Price of a call to any tool without its own price.
    pub default_usd: Option<Decimal>,
    /// Per-tool prices.
    pub tools: BTreeMap<ToolName, Decimal>,
}

impl Pricing {
    /// Whether any call is priced.
    pub fn is_priced(&self) -> bool {
        self.default_usd.is_some() || !self.tools.is_empty()
    }
}

/// `human_gates`.
///
/// Invariant: at most one of `approver_pubkey` and `quorum` is set, and
/// when [`HumanGates::is_active`] is true, one is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HumanGates {
    /// The master switch; default false.
    pub enabled: bool,
    /// Exact tool names whose calls wait for a decision (when `enabled`); unique.
    pub require_approval_for: Vec<ToolName>,
    /// The one key that signs webhook decisions (protocol v1).
    pub approver_pubkey: Option<DidKey>,
    /// Several approvers and a threshold (protocol v2).
    pub quorum: Option<Quorum>,
    /// Where gated requests are also sent.
    pub notify: Vec<Notify>,
    /// How long a gate waits; 1 to 86400, default 300.
    pub approval_timeout_seconds: u32,
    /// What a gate without a decision does; default [`OnTimeout::Abort`].
    pub on_timeout: OnTimeout,
}

impl Default for HumanGates {
    fn default() -> Self {
        HumanGates {
            enabled: false,
            require_approval_for: Vec::new(),
            approver_pubkey: None,
            quorum: None,
            notify: Vec::new(),
            approval_timeout_seconds: DEFAULT_APPROVAL_TIMEOUT_SECONDS,
            on_timeout: OnTimeout::Abort,
        }
    }
}

/// Several approvers (protocol v2): `human_gates.approvers` with
/// `threshold`, or `human_gates.approver_set`; and `terminal_approves`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quorum {
    /// Who may decide, and how many must agree.
    pub source: QuorumSource,
    /// Whether an approval at the terminal counts as one vote (a denial
    /// there always denies).
    pub terminal_approves: bool,
}

/// Where the approvers of a [`Quorum`] come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuorumSource {
    /// Listed in the Agentfile.
    ///
    /// Invariant: `approvers` is not empty, their keys and labels are
    /// distinct, and `1 <= threshold <= approvers.len()`.
    Listed {
        /// Who may decide, in Agentfile order.
        approvers: Vec<NamedApprover>,
        /// How many distinct approvers must approve a call.
        threshold: usize,
    },
    /// A signed, versioned approver set (`docs/spec/approver-set.md`),
    /// which rotates and revokes keys without editing the Agentfile.
    Set(ApproverSetRef),
}

/// `human_gates.approver_set`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApproverSetRef {
    /// The set directory (`1.approvers.json`, `2.approvers.json`, …),
    /// resolved against the Agentfile's directory.
    pub dir: PathBuf,
    /// `sha256:<64 hex>`: the digest of version 1's signed part.
    pub pin: String,
}

/// One of `human_gates.approvers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedApprover {
    /// The key that signs this approver's decisions.
    pub did: DidKey,
    /// Who holds it: 1 to 64 printable characters, for people to read.
    pub label: String,
}

/// Most entries in `human_gates.approvers`.
pub const MAX_APPROVERS: usize = 64;

/// Default of `human_gates.approval_timeout_seconds`.
pub const DEFAULT_APPROVAL_TIMEOUT_SECONDS: u32 = 300;

/// Largest `human_gates.approval_timeout_seconds` (one day).
pub const MAX_APPROVAL_TIMEOUT_SECONDS: u32 = 86_400;

/// How a tool name relates to the gates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateMatch {
    /// Byte-exact match of a gated name, and gates are enabled: wait for a decision.
    Gated,
    /// Equal to a gated name only ignoring ASCII case: refuse the call.
    CaseVariant,
    /// Not gated.
    NotGated,
}

impl HumanGates {
    /// Whether any call is gated: `enabled` and at least one name listed.
    pub fn is_active(&self) -> bool {
        self.enabled && !self.require_approval_for.is_empty()
    }

    /// How a `tools/call` name relates to the gates. A name differing from a
    /// gated one only in case is [`GateMatch::CaseVariant`], so the gate can
    /// refuse it rather than forward it ungated.
    pub fn check(&self, tool: &str) -> GateMatch {
        if !self.enabled {
            return GateMatch::NotGated;
        }
        if self.require_approval_for.iter().any(|g| g == tool) {
            GateMatch::Gated
        } else if self
            .require_approval_for
            .iter()
            .any(|g| g.as_str().eq_ignore_ascii_case(tool))
        {
            GateMatch::CaseVariant
        } else {
            GateMatch::NotGated
        }
    }

    /// The gate's wait as a [`Duration`].
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.approval_timeout_seconds))
    }
}

/// One entry of `human_gates.notify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notify {
    /// The channel; only webhooks exist.
    pub channel: NotifyChannel,
    /// The host variable holding the endpoint's URL (never passed to the agent).
    pub url_secret_ref: EnvVarName,
}

/// `human_gates.notify[].channel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotifyChannel {
    /// POST the request, poll for a signed decision.
    Webhook,
}

/// `human_gates.on_timeout`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnTimeout {
    /// Refuse the call and stop the run (the default).
    #[default]
    Abort,
    /// Forward the call without approval: the gate becomes a delay.
    Proceed,
}

/// `spending`. Amounts are USD, exact, zero or more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spending {
    /// Cap for one run.
    pub max_per_run_usd: Option<Decimal>,
    /// Cap per UTC day, across runs, keyed by the agent DID.
    pub max_per_day_usd: Option<Decimal>,
    /// Cap per UTC month, across runs, keyed like the daily cap.
    pub max_per_month_usd: Option<Decimal>,
    /// Where day and month totals are kept: `None` for the embedded store
    /// under `$CONSTLE_HOME/ledger/`, or a Redis shared by several machines.
    pub ledger: Option<RedisUrl>,
}

impl Spending {
    /// Whether any cap is declared.
    pub fn has_caps(&self) -> bool {
        self.max_per_run_usd.is_some()
            || self.max_per_day_usd.is_some()
            || self.max_per_month_usd.is_some()
    }
}

/// `a2a`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct A2a {
    /// Where the listener binds.
    pub listen: Option<SocketAddr>,
    /// Known peers; DIDs unique.
    pub peers: Vec<A2aPeer>,
    /// Where seen message ids are kept: `None` for the embedded store under
    /// `$CONSTLE_HOME/a2a/replay/`, or a Redis several listeners share.
    pub replay: Option<RedisUrl>,
}

impl A2a {
    /// The peer with this DID.
    pub fn peer(&self, did: &DidKey) -> Option<&A2aPeer> {
        self.peers.iter().find(|p| &p.did == did)
    }
}

/// One entry of `a2a.peers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct A2aPeer {
    /// The peer's `did:key`.
    pub did: DidKey,
    /// Where the peer listens.
    pub url: Option<HttpUrl>,
}

/// A gated tool together with the server that declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatedTool<'a> {
    /// The declaring server.
    pub server: &'a McpServer,
    /// The tool.
    pub tool: &'a ToolName,
}

impl Manifest {
    /// Every (server, tool) pair whose calls wait for a decision: the tool is
    /// declared by the server, listed in `require_approval_for`, and gates are
    /// enabled. Entries matching no declared tool gate nothing and are not
    /// listed (validation warns about them).
    pub fn gated_tools(&self) -> Vec<GatedTool<'_>> {
        if !self.human_gates.enabled {
            return Vec::new();
        }
        let gated: std::collections::HashSet<&str> = self
            .human_gates
            .require_approval_for
            .iter()
            .map(ToolName::as_str)
            .collect();
        let mut out = Vec::new();
        for server in &self.mcp.servers {
            for tool in &server.tools {
                if gated.contains(tool.as_str()) {
                    out.push(GatedTool { server, tool });
                }
            }
        }
        out
    }

    /// The agent's DID, when declared.
    pub fn did(&self) -> Option<&DidKey> {
        self.identity.as_ref().map(|i| &i.did)
    }
}

/// `audit.deployment` when the Agentfile names none: under `.invalid`
/// (RFC 6761), so it can never be mistaken for a real installation's name.
/// Witnesses keep one state per origin, so an Agentfile that names
/// witnesses must name its deployment.
pub const DEFAULT_DEPLOYMENT: &str = "constle.invalid";
/// `audit.checkpoint_every_entries` by default.
pub const DEFAULT_CHECKPOINT_ENTRIES: u64 = 256;
/// `audit.checkpoint_every_seconds` by default.
pub const DEFAULT_CHECKPOINT_SECONDS: u64 = 60;
/// Most witnesses an Agentfile may name.
pub const MAX_WITNESSES: usize = 16;

/// `audit`: when the run writes checkpoints of the agent's log (it does so
/// only when the log is signed, `identity.did`), and which witnesses it
/// asks to cosign them (docs/spec/log-checkpoints.md §6).
///
/// Invariant: `witness_quorum` is 0 when there are no witnesses, else from
/// 1 to their number; witnesses have distinct names, and name none without
/// an identity and a `deployment` of the Agentfile's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audit {
    /// The origin's first part: lowercase DNS labels.
    pub deployment: String,
    /// A checkpoint after this many new entries (1 to 1 000 000).
    pub checkpoint_every_entries: u64,
    /// A checkpoint after this many seconds with new entries (1 to 86 400).
    pub checkpoint_every_seconds: u64,
    /// The witnesses asked to cosign each checkpoint.
    pub witnesses: Vec<WitnessRef>,
    /// How many distinct witnesses' cosignatures make a checkpoint witnessed.
    pub witness_quorum: usize,
    /// When true, a checkpoint without its quorum stops the run.
    pub witness_quorum_required: bool,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            deployment: DEFAULT_DEPLOYMENT.to_owned(),
            checkpoint_every_entries: DEFAULT_CHECKPOINT_ENTRIES,
            checkpoint_every_seconds: DEFAULT_CHECKPOINT_SECONDS,
            witnesses: Vec::new(),
            witness_quorum: 0,
            witness_quorum_required: false,
        }
    }
}

/// One `audit.witnesses[]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessRef {
    /// Where its `add-checkpoint` is: `<url>/add-checkpoint`.
    pub url: HttpUrl,
    /// Its verifier key, written `<name>+<key ID>+<base64>` and read
    /// strictly ([`WitnessKey::from_vkey`]): what validates is what the
    /// run uses.
    pub key: WitnessKey,
}

impl WitnessRef {
    /// The witness's name, its key's.
    pub fn name(&self) -> &str {
        self.key.name()
    }
}
