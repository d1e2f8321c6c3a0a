//! The Agentfile as written: serde types that mirror the YAML one to one.
//!
//! Every field is a [`Field`] (absent or present, with positions) and every
//! scalar is text, except the typed ones (`enabled`, a bool, and
//! `approval_timeout_seconds` and `pids`, integers) whose spelling the
//! deserializer checks. Meaning is given in [`crate::validate`], which turns these into the
//! checked [`crate::Manifest`].

use serde::Deserialize;

use crate::de::{Field, Located, Pairs};

/// A list of strings, each with its position.
pub(crate) type Strings = Vec<Located<String>>;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawManifest {
    pub name: Field<String>,
    pub identity: Field<RawIdentity>,
    pub sandbox: Field<RawSandbox>,
    pub mcp: Field<RawMcp>,
    pub llm: Field<RawLlm>,
    pub human_gates: Field<RawHumanGates>,
    pub spending: Field<RawSpending>,
    pub a2a: Field<RawA2a>,
    pub audit: Field<RawAudit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawIdentity {
    pub did: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawSandbox {
    pub command: Field<Strings>,
    pub workdir: Field<String>,
    pub env: Field<Pairs<Located<String>>>,
    pub rootfs: Field<String>,
    pub network: Field<RawNetwork>,
    pub limits: Field<RawLimits>,
    pub tmpfs: Field<RawTmpfs>,
    pub home: Field<String>,
}

/// Sizes are text, as `memory` is.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawTmpfs {
    pub tmp: Field<String>,
    pub home: Field<String>,
    pub shm: Field<String>,
}

/// `memory` and `cpus` are text (a YAML number arrives as its digits), so
/// `512m`, `536870912`, `1.5` and `"1.5"` all reach their parsers exactly.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub memory: Field<String>,
    pub pids: Field<u64>,
    pub cpus: Field<String>,
    pub wall_clock_seconds: Field<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawNetwork {
    pub allowed_hosts: Field<Strings>,
    pub egress: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawMcp {
    pub servers: Field<Vec<Located<RawServer>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawServer {
    pub id: Field<String>,
    pub url: Field<String>,
    pub command: Field<Strings>,
    pub workdir: Field<String>,
    pub env_secret_refs: Field<Pairs<Located<String>>>,
    pub network: Field<RawServerNetwork>,
    pub tools: Field<Strings>,
    pub pricing: Field<RawPricing>,
    pub allow_methods: Field<Strings>,
    pub headers: Field<Vec<Located<RawHeader>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawHeader {
    pub name: Field<String>,
    pub scheme: Field<String>,
    pub value_secret_ref: Field<String>,
}

/// A stdio server's `network`: only `allowed_hosts` (its egress is always
/// through the proxy, or none).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawServerNetwork {
    pub allowed_hosts: Field<Strings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawPricing {
    pub default_usd: Field<String>,
    pub tools: Field<Pairs<Located<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawLlm {
    pub providers: Field<Vec<Located<RawProvider>>>,
    pub spending: Field<RawLlmSpending>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawProvider {
    pub id: Field<String>,
    pub api: Field<String>,
    pub url: Field<String>,
    pub key_secret_ref: Field<String>,
    pub max_output_tokens: Field<u64>,
    pub models: Field<Vec<Located<RawModel>>>,
}

/// Prices are text, as amounts are.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawModel {
    pub name: Field<String>,
    pub input_usd_per_mtok: Field<String>,
    pub output_usd_per_mtok: Field<String>,
    pub cached_input_usd_per_mtok: Field<String>,
    pub cache_write_usd_per_mtok: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawLlmSpending {
    pub max_per_run_usd: Field<String>,
    pub max_per_day_usd: Field<String>,
    pub max_per_month_usd: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawHumanGates {
    pub enabled: Field<bool>,
    pub require_approval_for: Field<Strings>,
    pub approver_pubkey: Field<String>,
    pub approvers: Field<Vec<Located<RawApprover>>>,
    pub approver_set: Field<RawApproverSet>,
    pub threshold: Field<u64>,
    pub terminal_approves: Field<bool>,
    pub notify: Field<Vec<Located<RawNotify>>>,
    pub approval_timeout_seconds: Field<u64>,
    pub on_timeout: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawApproverSet {
    pub dir: Field<String>,
    pub pin: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawApprover {
    pub did: Field<String>,
    pub label: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawNotify {
    pub channel: Field<String>,
    pub url_secret_ref: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawSpending {
    pub max_per_run_usd: Field<String>,
    pub max_per_day_usd: Field<String>,
    pub max_per_month_usd: Field<String>,
    pub ledger: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawA2a {
    pub listen: Field<String>,
    pub peers: Field<Vec<Located<RawPeer>>>,
    pub replay: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawPeer {
    pub did: Field<String>,
    pub url: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawAudit {
    pub deployment: Field<String>,
    pub checkpoint_every_entries: Field<u64>,
    pub checkpoint_every_seconds: Field<u64>,
    pub witnesses: Field<Vec<Located<RawWitness>>>,
    pub witness_quorum: Field<u64>,
    pub witness_quorum_required: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawWitness {
    pub url: Field<String>,
    pub key: Field<String>,
}
