//! The command-line interface, as clap sees it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// What `constle --version` prints after the name: the version and the
/// commit the binary was built from (see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CONSTLE_BUILD_COMMIT"),
    ")"
);

/// Run AI agents you cannot trust: a sandbox whose only exits are an egress
/// allowlist and an MCP gate, and a signed audit log of every decision.
#[derive(Debug, Parser)]
#[command(name = "constle", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// When to colour output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

/// When to colour output; `auto` colours a terminal unless `NO_COLOR` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent an Agentfile describes, in its sandbox; exits with the
    /// agent's exit status.
    Run(RunArgs),
    /// Check an Agentfile (agent.yaml): errors, warnings, what will be enforced.
    Validate(ValidateArgs),
    /// Check that this machine has every layer the sandbox needs, and say
    /// what fixes a missing one under docker, podman and Kubernetes.
    Doctor(DoctorArgs),
    /// Print the Kubernetes objects that run an Agentfile as a Job per run
    /// (docs/kubernetes.md).
    Kube(KubeArgs),
    /// Create an agent identity key; prints its did:key for `identity.did`.
    Keygen(KeygenArgs),
    /// Create an approver key for signed webhook decisions; prints its
    /// did:key for `human_gates.approver_pubkey`.
    WebhookKeygen(KeygenArgs),
    /// Create a witness key, for `constle witness serve --key`.
    WitnessKeygen(KeygenArgs),
    /// Check and read audit logs.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// What an agent has spent against its caps.
    #[command(subcommand)]
    Spend(SpendCommand),
    /// Signed agent-to-agent messages.
    #[command(subcommand)]
    A2a(A2aCommand),
    /// A decision endpoint for webhook human gates, with a web page to
    /// approve or deny (docs/approver.md).
    #[command(subcommand)]
    Approver(ApproverCommand),
    /// Approver sets: signed, versioned lists of approver keys and a
    /// threshold, rotated without editing the Agentfile (docs/approver.md).
    #[command(subcommand)]
    Approvers(ApproversCommand),
    /// A witness for other machines' logs: cosigns their checkpoints per
    /// C2SP tlog-witness (docs/witness.md).
    #[command(subcommand)]
    Witness(WitnessCommand),
}

#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Serve `POST /add-checkpoint`, cosigning with a witness key from
    /// `constle witness-keygen`.
    Serve(WitnessServeArgs),
}

#[derive(Debug, Args)]
pub struct WitnessServeArgs {
    /// The witness key's name (`$CONSTLE_HOME/keys/witness/NAME.pem`).
    #[arg(long)]
    pub key: String,
    /// The witness's name, which its cosignatures carry: a schema-less URL
    /// such as `witness.example.org/w1`.
    #[arg(long)]
    pub name: String,
    /// The logs witnessed: one log verifier key (`<origin>+<key ID>+<base64>`)
    /// per line; blank lines and `#` comments skipped.
    #[arg(long, value_name = "FILE")]
    pub logs: PathBuf,
    /// Where to listen: ADDRESS:PORT, or :PORT on 127.0.0.1 (:0 picks a
    /// free port; the server prints the one it bound).
    #[arg(long, default_value = "127.0.0.1:7710", value_parser = listen_address)]
    pub listen: std::net::SocketAddr,
    /// The state directory, one file per log; default
    /// `$CONSTLE_HOME/witness/NAME/` for the key NAME.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ApproversCommand {
    /// Write version 1 of a new approver set, unsigned, as DIR/1.approvers.json.
    Init(ApproversInitArgs),
    /// Write the next version, unsigned, from the newest one in DIR.
    Next(ApproversNextArgs),
    /// Sign a version with an approver key (replacing that key's old
    /// signature).
    Sign(ApproversSignArgs),
    /// Verify the versions in DIR as a chain and print them, with the pin
    /// for the Agentfile.
    Show(ApproversShowArgs),
}

/// When a new version expires.
#[derive(Debug, Args)]
pub struct ExpiryArgs {
    /// The expiry: RFC 3339, UTC, whole seconds, e.g. 2027-06-01T00:00:00Z.
    #[arg(long, conflicts_with = "expires_in_days")]
    pub expires: Option<String>,
    /// The expiry, in days from now.
    #[arg(long, value_name = "N", default_value_t = 365)]
    pub expires_in_days: u32,
}

#[derive(Debug, Args)]
pub struct ApproversInitArgs {
    /// The set directory (created if missing; must hold no version yet).
    pub dir: PathBuf,
    /// How many distinct approvers must agree.
    #[arg(long)]
    pub threshold: usize,
    /// An approver, DID=LABEL (the did:key from `constle webhook-keygen`);
    /// give one --approver per key.
    #[arg(long = "approver", value_name = "DID=LABEL", required = true)]
    pub approvers: Vec<String>,
    #[command(flatten)]
    pub expiry: ExpiryArgs,
}

#[derive(Debug, Args)]
pub struct ApproversNextArgs {
    /// The set directory.
    pub dir: PathBuf,
    /// An approver to add, DID=LABEL.
    #[arg(long = "add", value_name = "DID=LABEL")]
    pub add: Vec<String>,
    /// An approver to remove (revoke), by did:key.
    #[arg(long = "remove", value_name = "DID")]
    pub remove: Vec<String>,
    /// The new threshold (default: the newest version's).
    #[arg(long)]
    pub threshold: Option<usize>,
    #[command(flatten)]
    pub expiry: ExpiryArgs,
}

#[derive(Debug, Args)]
pub struct ApproversSignArgs {
    /// The version file, DIR/N.approvers.json.
    pub file: PathBuf,
    /// The approver key's name (`$CONSTLE_HOME/keys/approver/NAME.pem`).
    #[arg(long)]
    pub key: String,
}

#[derive(Debug, Args)]
pub struct ApproversShowArgs {
    /// The set directory.
    pub dir: PathBuf,
    /// The Agentfile's pin (sha256:…). With it, the set is also checked
    /// against the versions this machine accepted before and new ones are
    /// recorded (`$CONSTLE_HOME/approvers/`), as a run does; without it,
    /// version 1 is taken as it is, and its digest printed as the pin.
    #[arg(long)]
    pub pin: Option<String>,
    /// Output format; `json` prints one JSON object per line.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Subcommand)]
pub enum ApproverCommand {
    /// Serve the gate's webhook and the approval page, signing decisions
    /// with an approver key from `constle webhook-keygen`.
    Serve(ApproverServeArgs),
}

#[derive(Debug, Args)]
pub struct ApproverServeArgs {
    /// The approver key's name (`$CONSTLE_HOME/keys/approver/NAME.pem`).
    #[arg(long)]
    pub key: String,
    /// Where to listen: ADDRESS:PORT, or :PORT on 127.0.0.1 (:0 picks a
    /// free port; the server prints the one it bound). Keep it on loopback
    /// unless a TLS proxy is in front: the login cookie is `Secure`.
    #[arg(long, default_value = "127.0.0.1:7700", value_parser = listen_address)]
    pub listen: std::net::SocketAddr,
    /// The database; default `$CONSTLE_HOME/approver/NAME.sqlite`.
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Read a new password for `--user` from the first line of standard
    /// input (replacing any old one, and ending that user's sessions).
    #[arg(long)]
    pub set_password: bool,
    /// The approver user whose password `--set-password` (or the first-start
    /// prompt) sets.
    #[arg(long, default_value = "admin")]
    pub user: String,
}

/// `--listen`: a socket address, or `:PORT` for that port on loopback (the
/// safe place to listen: the login cookie is `Secure`).
fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    let address = match text.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    address.parse().map_err(|_| {
        "write ADDRESS:PORT (e.g. 127.0.0.1:7700) or :PORT (:0 picks a free port)".to_owned()
    })
}

#[derive(Debug, Subcommand)]
pub enum A2aCommand {
    /// Sign a message with the agent's key and deliver it to a declared peer.
    Send(A2aSendArgs),
    /// Listen for envelopes from the declared peers; print accepted messages
    /// as JSON lines until interrupted.
    Listen(A2aListenArgs),
}

#[derive(Debug, Args)]
pub struct A2aSendArgs {
    /// The sender's Agentfile (its identity and a2a.peers).
    #[arg(long, default_value = "agent.yaml")]
    pub agentfile: PathBuf,
    /// The peer's did:key, declared in a2a.peers with a url.
    #[arg(long)]
    pub to: String,
    /// The message body, JSON.
    pub body: String,
}

#[derive(Debug, Args)]
pub struct A2aListenArgs {
    /// The listener's Agentfile (its identity, a2a.listen, a2a.peers).
    #[arg(long, default_value = "agent.yaml")]
    pub agentfile: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum SpendCommand {
    /// Today's, this month's and the last run's totals against the caps,
    /// and what each MCP server and model was charged.
    Show(SpendShowArgs),
}

#[derive(Debug, Args)]
pub struct SpendShowArgs {
    /// The Agentfile (its identity, caps and ledger).
    #[arg(default_value = "agent.yaml")]
    pub file: PathBuf,
    /// Output format; `json` prints one JSON object per line.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The Agentfile.
    pub file: PathBuf,
    /// Make the proxy resolve host names from this file only (hosts(5)
    /// format); no DNS query leaves the machine. For tests and air-gapped
    /// sites.
    #[arg(long, value_name = "FILE")]
    pub hosts_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct KubeArgs {
    /// The Agentfile.
    pub file: PathBuf,
    /// The objects' name (a DNS-1123 label); default: the agent's name,
    /// when it is one.
    #[arg(long)]
    pub name: Option<String>,
    /// The namespace written into the objects; default: none (kubectl's).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The image holding constle, bwrap and Squid.
    #[arg(long, default_value = constle_kube::DEFAULT_IMAGE)]
    pub image: String,
    /// The Secret holding the Agentfile's host variables, one key per
    /// variable; default: NAME-secrets.
    #[arg(long)]
    pub secret: Option<String>,
    /// A pod range of the cluster, denied to the agent's pod; repeat for
    /// each.
    #[arg(long = "cluster-cidr", value_name = "CIDR")]
    pub cluster_cidrs: Vec<String>,
    /// A service range of the cluster, denied to the agent's pod; repeat
    /// for each.
    #[arg(long = "service-cidr", value_name = "CIDR")]
    pub service_cidrs: Vec<String>,
    /// The Localhost seccomp profile, relative to the kubelet's seccomp
    /// root (/var/lib/kubelet/seccomp/).
    #[arg(long, value_name = "PATH", default_value = constle_kube::DEFAULT_SECCOMP_PROFILE)]
    pub seccomp_profile: String,
    /// The image of the shared Redis.
    #[arg(long, default_value = constle_kube::DEFAULT_REDIS_IMAGE)]
    pub redis_image: String,
    /// How long a finished Job is kept before Kubernetes deletes it.
    #[arg(long, value_name = "SECONDS", default_value_t = constle_kube::DEFAULT_TTL_SECONDS.unsigned_abs())]
    pub ttl_seconds: u32,
    /// The Secret holding the agent's key file (from `constle keygen`) under
    /// the key `agent.pem`, for an Agentfile with `identity.did`; an init
    /// container installs it in the pod's key store.
    #[arg(long, value_name = "NAME")]
    pub key_secret: Option<String>,
    /// The uid and gid constle runs as in the pod: the image's non-root user.
    #[arg(long, default_value_t = constle_kube::DEFAULT_UID.unsigned_abs())]
    pub uid: u64,
    /// Render an agent-sandbox SandboxTemplate instead of the Job and its
    /// NetworkPolicy (the template carries the fence).
    #[arg(long, conflicts_with = "pod")]
    pub sandbox_template: bool,
    /// Render a bare Pod instead of the Job, for `podman kube play`.
    #[arg(long)]
    pub pod: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The Agentfile.
    pub file: PathBuf,
    /// Output format; `json` prints one JSON object per line.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The Agentfile of the run to check for (its work directory, limits
    /// and egress); without it, any run by this user here.
    pub file: Option<PathBuf>,
    /// Output format; `json` prints one JSON object.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// A name for the key: letters, digits, `-`, `_`, `.`.
    pub name: String,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify signatures, the hash chain and the head anchor of log files.
    Verify(VerifyArgs),
    /// Print a log as a timeline (does not verify it).
    Show(ShowArgs),
    /// Print the verifier key of the agent's log, for its witnesses'
    /// `--logs` file.
    LogKey(LogKeyArgs),
    /// Write the receipt of a run: its entries and the witnessed checkpoint
    /// covering them, in one file anyone can check without the log.
    Receipt(ReceiptArgs),
    /// Verify a run receipt offline (and, with --log, against the log).
    VerifyReceipt(VerifyReceiptArgs),
}

#[derive(Debug, Args)]
pub struct ReceiptArgs {
    /// The Agentfile: the agent's name, identity.did, audit.deployment and
    /// witnesses (with their quorum).
    #[arg(long)]
    pub agentfile: PathBuf,
    /// The run whose run_started entry has this seq (`constle audit show`
    /// prints them). Default: the latest run covered by a checkpoint with
    /// the quorum's cosignatures.
    #[arg(long, value_name = "SEQ")]
    pub run: Option<u64>,
    /// Where to write the receipt (replaced atomically). Default:
    /// `<agent>-run-<SEQ>.receipt.json` in the current directory.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The log directory, or one of the agent's day files in it. Default:
    /// `$CONSTLE_HOME/logs`.
    #[arg(value_name = "DIR_OR_DAYFILE")]
    pub log: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct VerifyReceiptArgs {
    /// Pin the agent's DID, the origin, the witnesses and their quorum from
    /// this Agentfile. Without it, the keys are the receipt's own.
    #[arg(long)]
    pub agentfile: Option<PathBuf>,
    /// Also check the receipt against this log (a directory, or one of the
    /// agent's day files in it): the log must hold the cosigned entries.
    #[arg(long, value_name = "DIR_OR_DAYFILE")]
    pub log: Option<PathBuf>,
    /// Output format; `json` prints one JSON object (docs/audit-log.md).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// The receipt.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct LogKeyArgs {
    /// The Agentfile: its `identity.did`, `name` and `audit.deployment`.
    #[arg(long)]
    pub agentfile: PathBuf,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Pin the agent's DID, the approver key and the witnesses from this
    /// Agentfile. Without it, only the log's internal consistency is checked.
    #[arg(long)]
    pub agentfile: Option<PathBuf>,
    /// A cosigned checkpoint kept outside the log (a copy of
    /// `<agent>.checkpoint`, a receipt's): the log must still be the one its
    /// witnesses cosigned. Repeatable; needs the Agentfile's audit.witnesses.
    #[arg(long = "checkpoint", value_name = "FILE", requires = "agentfile")]
    pub checkpoints: Vec<PathBuf>,
    /// Output format; `json` prints one JSON object per line
    /// (docs/audit-log.md).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Day files, `<agent>-<YYYY-MM-DD>.jsonl`.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A day file.
    pub file: PathBuf,
}
