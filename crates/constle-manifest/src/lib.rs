//! The Agentfile (`agent.yaml`): its schema, parsing with line and column
//! diagnostics, and validation into a checked [`Manifest`].
//!
//! The Agentfile is the policy Constle enforces on an agent it assumes is
//! compromised, so this crate is strict: anything it does not understand is
//! an error, never silently ignored. The schema is documented in
//! `docs/agentfile.md`.
//!
//! # Use
//!
//! ```
//! use std::path::Path;
//!
//! let yaml = "name: invoice-processor\nsandbox:\n  command: [python, agent.py]\n";
//! let no_env = |_: &str| None;
//! match constle_manifest::parse_str(yaml, Path::new("agent.yaml"), &no_env) {
//!     Ok(validated) => {
//!         assert_eq!(validated.manifest.name.as_str(), "invoice-processor");
//!         for warning in &validated.warnings {
//!             let _ = warning.to_string(); // the CLI prints these
//!         }
//!     }
//!     Err(rejected) => panic!("{rejected}"),
//! }
//! ```
//!
//! [`load_file`] reads the file first; `env` answers host environment
//! look-ups (used to warn when a webhook's URL variable or a header's
//! secret is unset or unusable).
//!
//! # How a file is read
//!
//! 1. **Bounds.** At most [`MAX_INPUT_BYTES`] of UTF-8.
//! 2. **Pre-pass over parser events** (the parser is `granit-parser`, through
//!    `serde_saphyr::granit_parser`). Refused, each with its position: more
//!    than one document, anchors, aliases, merge keys (`<<`), explicit tags,
//!    `%` directives, complex keys, duplicate keys, nesting deeper than
//!    [`MAX_DEPTH`], more than [`MAX_NODES`] nodes. Aliases are never expanded,
//!    so a "billion laughs" file costs what its bytes cost.
//! 3. **Raw types.** serde types with `deny_unknown_fields`, filled by a
//!    deserializer over the pre-pass tree that reports a mistake and carries
//!    on: unknown fields (with a did-you-mean), type mismatches, nulls.
//!    Scalars are read by the schema, not by YAML's implicit typing: a string
//!    field given `no`, `0443`, `1:30`, `0x1F` or `1e3` gets exactly that
//!    text; a bool is `true` or `false` and nothing else; an integer is plain
//!    decimal digits; an amount is read as a decimal from its text, never
//!    through a float.
//! 4. **Validation** into [`Manifest`], whose fields are checked types
//!    ([`Name`](constle_identity::Name), [`DidKey`](constle_identity::DidKey),
//!    [`Hostname`], [`HttpUrl`], [`ToolName`], [`MethodName`], `Decimal`, enums), with
//!    warnings for what is valid but probably not what the author meant.
//!
//! Every step keeps going after an error where it can, so one run reports as
//! many mistakes as possible, each with file, line, column, a stable code and
//! what to write instead ([`Diagnostic`]).

#![forbid(unsafe_code)]

mod bounds;
mod de;
mod diagnostic;
mod model;
mod raw;
mod secret;
mod validate;
mod values;
mod yaml;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use bounds::{
    MAX_CPU_MILLIS, MAX_MCP_SERVERS, MIN_CPU_MILLIS, MIN_MEMORY_BYTES, MIN_TMPFS_BYTES,
};
pub use diagnostic::{CODES, Diagnostic, Location, Severity};
pub use model::{
    A2a, A2aPeer, ApproverSetRef, Audit, DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_CHECKPOINT_ENTRIES, DEFAULT_CHECKPOINT_SECONDS, DEFAULT_DEPLOYMENT,
    DEFAULT_MAX_OUTPUT_TOKENS, Egress, GateMatch, GatedTool, HumanGates, Identity, Limits, Llm,
    LlmApi, LlmModel, LlmProvider, LlmSpending, MAX_APPROVAL_TIMEOUT_SECONDS, MAX_APPROVERS,
    MAX_MODEL_NAME_LEN, MAX_OUTPUT_TOKENS, MAX_PIDS, MAX_WALL_CLOCK_SECONDS, MAX_WITNESSES,
    MCP_BASE_NOTIFICATIONS, MCP_BASE_REQUESTS, MCP_BASE_SERVER_REQUESTS, MIN_PIDS, Manifest, Mcp,
    McpServer, McpTransport, ModelPrices, NamedApprover, Network, Notify, NotifyChannel, OnTimeout,
    PolicyDigest, Pricing, Quorum, QuorumSource, Sandbox, SecretHeader, Spending, StdioServer,
    Tmpfs, WitnessRef,
};
pub use secret::SecretHeaderError;
pub use validate::RESERVED_ENV;
pub use values::{
    AuthScheme, EnvVarName, HeaderName, Hostname, HttpUrl, InvalidValue, MAX_AMOUNT_INTEGER_DIGITS,
    MAX_AMOUNT_SCALE, MAX_AUTH_SCHEME_LEN, MAX_ENV_NAME_LEN, MAX_HEADER_NAME_LEN,
    MAX_METHOD_NAME_LEN, MAX_TOOL_NAME_LEN, MethodName, ProviderId, REDIS_SCHEMES,
    RESERVED_HEADER_PREFIXES, RESERVED_HEADERS, RedisUrl, Scheme, ServerId, ToolName, UrlHost,
    is_loopback_host, is_reserved_header, parse_amount,
};
pub use yaml::{MAX_DEPTH, MAX_NODES};

use diagnostic::{Pos, Sink};

/// Largest Agentfile accepted, in bytes (1 MiB).
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// An accepted Agentfile and the warnings about it.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The checked Agentfile.
    pub manifest: Manifest,
    /// Findings that do not refuse the file; print them.
    pub warnings: Vec<Diagnostic>,
}

/// A refused Agentfile: every error found (never empty) and the warnings.
/// Both lists are sorted by position.
#[derive(Clone, Debug, thiserror::Error)]
pub struct Rejected {
    /// Why the file is refused; never empty.
    pub errors: Vec<Diagnostic>,
    /// Warnings found on the way.
    pub warnings: Vec<Diagnostic>,
}

impl fmt::Display for Rejected {
    /// Every error, then every warning, one diagnostic per paragraph.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.errors.iter().chain(&self.warnings).enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl Rejected {
    fn one(diagnostic: Diagnostic) -> Rejected {
        Rejected {
            errors: vec![diagnostic],
            warnings: Vec::new(),
        }
    }
}

/// Reads and validates the Agentfile at `path`.
///
/// `env` looks up host environment variables; it is only used for warnings
/// (a webhook's `url_secret_ref` or a header's `value_secret_ref` variable
/// unset or unusable). Pass
/// `&|name| std::env::var(name).ok()` for the real environment.
pub fn load_file(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Validated, Rejected> {
    let io_error = |e: std::io::Error| {
        Rejected::one(Diagnostic {
            severity: Severity::Error,
            code: "io_error",
            message: format!("cannot read the Agentfile {}: {e}", path.display()),
            help: Some("check the path and its permissions".to_string()),
            location: None,
        })
    };
    let file = std::fs::File::open(path).map_err(io_error)?;
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_INPUT_BYTES)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    file.take(limit).read_to_end(&mut bytes).map_err(io_error)?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(too_large(path));
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            // The prefix is valid UTF-8 by construction.
            let prefix = String::from_utf8_lossy(valid);
            let line = prefix.matches('\n').count() + 1;
            let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            return Err(Rejected::one(Diagnostic {
                severity: Severity::Error,
                code: "invalid_utf8",
                message: "the Agentfile is not valid UTF-8".to_string(),
                help: Some("save the file as UTF-8".to_string()),
                location: Some(Location {
                    path: path.to_path_buf(),
                    line,
                    column,
                }),
            }));
        }
    };
    parse_str(&text, path, env)
}

fn too_large(path: &Path) -> Rejected {
    Rejected::one(Diagnostic {
        severity: Severity::Error,
        code: "input_too_large",
        message: format!("the Agentfile is larger than {MAX_INPUT_BYTES} bytes"),
        help: Some("an Agentfile is a short policy; remove what does not belong in it".to_string()),
        location: Some(Location {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
        }),
    })
}

/// Validates Agentfile text. `path` names the file in diagnostics, and its
/// directory (its real path, where it exists) is the base for relative
/// paths ([`Manifest::base_dir`]); the file itself is not read.
pub fn parse_str(
    source: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Validated, Rejected> {
    if source.len() > MAX_INPUT_BYTES {
        return Err(too_large(path));
    }
    let mut sink = Sink::new(path);
    let mut manifest = None;
    if let Some(root) = yaml::parse(source, &mut sink) {
        let (raw, last) = {
            let ctx = de::Ctx::new(&mut sink);
            let raw: Result<raw::RawManifest, de::DeError> = de::from_node(&root, &ctx);
            (raw, ctx.last_pos())
        };
        match raw {
            Ok(raw) => {
                let input = validate::Input {
                    root: root.pos,
                    base_dir: base_dir_of(path),
                    agentfile: path.to_path_buf(),
                    policy_digest: PolicyDigest::of(source.as_bytes()),
                    env,
                };
                manifest = validate::validate(raw, input, &mut sink);
            }
            Err(e) => sink.error(
                "invalid_value",
                last,
                format!("cannot read this value: {e}"),
                Some("see docs/agentfile.md for the expected form".to_string()),
            ),
        }
    }
    let (errors, warnings) = sink.finish();
    match manifest {
        Some(manifest) if errors.is_empty() => Ok(Validated { manifest, warnings }),
        _ if errors.is_empty() => Err(Rejected::one(Diagnostic {
            // Unreachable by construction: validation yields a manifest
            // whenever nothing was reported. Fail closed all the same.
            severity: Severity::Error,
            code: "internal_error",
            message: "the Agentfile was not accepted, but no error was recorded".to_string(),
            help: Some("please report this as a bug".to_string()),
            location: Some(Location {
                path: path.to_path_buf(),
                line: Pos::START.line,
                column: Pos::START.column,
            }),
        })),
        _ => Err(Rejected { errors, warnings }),
    }
}

/// The Agentfile's directory: its real path where it exists (so that a
/// relative `workdir` is a real path too, as the sandbox requires), else
/// made absolute as written.
fn base_dir_of(path: &Path) -> PathBuf {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    parent
        .canonicalize()
        .or_else(|_| std::path::absolute(parent))
        .unwrap_or_else(|_| parent.to_path_buf())
}
