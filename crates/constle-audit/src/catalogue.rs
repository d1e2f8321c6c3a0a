//! Every event Constle writes, by name, with its fields.
//!
//! Each entry is one event name, the struct that holds its fields and each
//! field's Rust type. A struct becomes an [`Event`] without fail: a field
//! cannot be missing (the struct would not build), and the names are checked
//! once, by this module's tests, instead of at every write.
//!
//! How a field's value is written:
//! - text, booleans and lists as they are;
//! - an integer as a JSON number when JSON carries it exactly (within
//!   ±(2^53 − 1)), otherwise as the string of its decimal digits, so that it
//!   is neither rounded nor lost; the same for every number inside a
//!   [`Value`] (a non-integer too);
//! - `Option<T>`: `null` when `None`;
//! - [`OrOmitted<T>`]: the field is left out when there is nothing in it;
//! - a group of fields ([`GateSubject`], [`SignedDecision`], [`SignedVote`]):
//!   each of its members as a field of the event's own.
//!
//! An event written in several shapes (the human gates', which depend on
//! who decided and on the protocol version) has one entry per shape, each
//! under the same name.

use serde_json::{Map, Value};

use crate::entry::{Event, MAX_SAFE_INTEGER};

/// How a field's Rust value is written in a line.
pub trait Field: Sized {
    /// The field's names in a line, when they are not its own (a group's
    /// members); `None` for a field that is one key.
    #[cfg(test)]
    const KEYS: Option<&'static [&'static str]> = None;

    /// The JSON value, or `None` when the field is left out.
    fn written(self) -> Option<Value>;

    /// Puts the field in `fields` under `key` (a group puts its members
    /// under their own names instead).
    fn put(self, key: &str, fields: &mut Map<String, Value>) {
        if let Some(value) = self.written() {
            fields.insert(key.to_owned(), value);
        }
    }
}

/// A field written only when it holds something (when `None`, the line has
/// no such key, rather than a `null`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OrOmitted<T>(pub Option<T>);

impl<T> From<Option<T>> for OrOmitted<T> {
    fn from(value: Option<T>) -> OrOmitted<T> {
        OrOmitted(value)
    }
}

impl<T: Field> Field for OrOmitted<T> {
    fn written(self) -> Option<Value> {
        self.0.and_then(Field::written)
    }
}

impl<T: Field> Field for Option<T> {
    fn written(self) -> Option<Value> {
        Some(self.and_then(Field::written).unwrap_or(Value::Null))
    }
}

impl Field for String {
    fn written(self) -> Option<Value> {
        Some(Value::String(self))
    }
}

impl Field for bool {
    fn written(self) -> Option<Value> {
        Some(Value::Bool(self))
    }
}

impl<T: Field> Field for Vec<T> {
    fn written(self) -> Option<Value> {
        Some(Value::Array(
            self.into_iter()
                .map(|item| item.written().unwrap_or(Value::Null))
                .collect(),
        ))
    }
}

impl Field for Value {
    fn written(self) -> Option<Value> {
        Some(exact(self))
    }
}

macro_rules! integer_fields {
    ($($int:ty),*) => {$(
        impl Field for $int {
            fn written(self) -> Option<Value> {
                Some(integer(i64::try_from(self).ok(), || self.to_string()))
            }
        }
    )*};
}

integer_fields!(i32, i64, u16, u32, u64, usize, u128);

/// A JSON number when `value` is one JSON carries exactly, else `digits`.
fn integer(value: Option<i64>, digits: impl FnOnce() -> String) -> Value {
    match value {
        Some(n) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n) => Value::from(n),
        _ => Value::String(digits()),
    }
}

/// `value` with every number JSON cannot carry exactly written as a string.
fn exact(value: Value) -> Value {
    match value {
        Value::Number(n) => integer(n.as_i64(), || n.to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(exact).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, exact(v))).collect()),
        other => other,
    }
}

/// Declares the catalogue: for each event a struct of its fields and its
/// conversion into an [`Event`] (and, for the tests, `EVENTS`). An event
/// written with another's fields (`name => Struct(Other)`) wraps them.
macro_rules! catalogue {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident => $Struct:ident $( ( $Same:ident ) )? $( {
            $( $(#[doc = $fdoc:literal])* $field:ident : $ty:ty ),* $(,)?
        } )?
    )*) => {
        $(
            catalogue!(@struct $(#[doc = $doc])* $Struct $( ($Same) )? $( { $( $(#[doc = $fdoc])* $field : $ty ),* } )?);

            impl From<$Struct> for Event {
                fn from(event: $Struct) -> Event {
                    let fields = catalogue!(@fields event $( ($Same) )? $( { $($field),* } )?);
                    Event::from_catalogue(stringify!($name), fields)
                }
            }
        )*

        /// Every event in the catalogue: its name and its fields' names
        /// (a group's, its members').
        #[cfg(test)]
        pub(crate) const EVENTS: &[(&str, &[&[&str]])] = &[$( (stringify!($name), $Struct::FIELDS), )*];
    };
    (@struct $(#[doc = $doc:literal])* $Struct:ident ($Same:ident)) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $Struct(pub $Same);

        #[cfg(test)]
        impl $Struct {
            const FIELDS: &[&[&str]] = $Same::FIELDS;
        }
    };
    (@struct $(#[doc = $doc:literal])* $Struct:ident { $( $(#[doc = $fdoc:literal])* $field:ident : $ty:ty ),* }) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $Struct {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        #[cfg(test)]
        impl $Struct {
            const FIELDS: &[&[&str]] = &[$(
                match <$ty as Field>::KEYS {
                    Some(keys) => keys,
                    None => &[stringify!($field)],
                }
            ),*];
        }
    };
    (@fields $event:ident ($Same:ident)) => {
        Event::from($event.0).into_fields()
    };
    (@fields $event:ident { $($field:ident),* }) => {{
        let mut fields = Map::new();
        $( Field::put($event.$field, stringify!($field), &mut fields); )*
        fields
    }};
}

/// Declares a group of fields: a struct whose members are written as
/// fields of the event that holds it.
macro_rules! group {
    (
        $(#[doc = $doc:literal])*
        $Group:ident { $( $(#[doc = $fdoc:literal])* $field:ident : $ty:ty ),* $(,)? }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $Group {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        impl Field for $Group {
            #[cfg(test)]
            const KEYS: Option<&'static [&'static str]> = Some(&[$(stringify!($field)),*]);

            fn written(self) -> Option<Value> {
                let mut fields = Map::new();
                self.put("", &mut fields);
                Some(Value::Object(fields))
            }

            fn put(self, _: &str, fields: &mut Map<String, Value>) {
                $( Field::put(self.$field, stringify!($field), fields); )*
            }
        }
    };
}

group! {
    /// What every entry of one gated call has: the call and its request.
    GateSubject {
        /// The request's id.
        request_id: String,
        /// The MCP server's id.
        server: String,
        /// The tool called.
        tool: String,
        /// The request's (salted, in version 2) subject digest.
        subject_digest: String,
    }
}

group! {
    /// A version 1 webhook decision whose every check passed, as signed
    /// (its request id and subject digest are the [`GateSubject`]'s: a
    /// decision naming others fails its checks).
    SignedDecision {
        /// The key that signed.
        approver: String,
        /// `approved` or `denied`.
        decision: String,
        /// The signature as received.
        signature: String,
    }
}

/// A version 2 vote whose every check passed: the members
/// `constle_approval`'s `VerifiedVote::audit_fields` gives (every signed
/// member, `version`, `approver` and `signature`), from which `constle
/// audit verify` verifies it again. They are that crate's to name, next to
/// the code that reads them back; any of the [`GateSubject`]'s among them
/// are equal to it (a vote naming others fails its checks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignedVote(pub Map<String, Value>);

impl Field for SignedVote {
    #[cfg(test)]
    const KEYS: Option<&'static [&'static str]> = Some(&[]);

    fn written(self) -> Option<Value> {
        Value::Object(self.0).written()
    }

    fn put(self, _: &str, fields: &mut Map<String, Value>) {
        fields.extend(self.0.into_iter().map(|(k, v)| (k, exact(v))));
    }
}

catalogue! {
    /// Before the proxy or the sandbox starts: what runs, where, and under
    /// which policy.
    run_started => RunStarted {
        /// The agent's command line.
        command: Vec<String>,
        /// The work directory, as the Agentfile resolves it.
        workdir: String,
        /// `none`, `restricted` or `open`.
        egress: String,
        /// The hosts the proxy lets through.
        allowed_hosts: Vec<String>,
        /// The version of Constle that ran.
        constle_version: String,
        /// `sha256:` of the Agentfile's exact text.
        policy_digest: String,
    }

    /// Always; last, but for the entries of the run's last checkpoint.
    run_finished => RunFinished {
        /// The `seq` of the run's own `run_started`.
        run_started_seq: u64,
        /// The exit status constle gives.
        exit_status: i32,
        /// How long the run took.
        duration_ms: u128,
        /// Where the time went, when the run ended without an error.
        phases_us: OrOmitted<Value>,
        /// The error that ended the run.
        error: OrOmitted<String>,
    }

    /// Constle got SIGINT, SIGTERM or SIGHUP.
    run_interrupted => RunInterrupted {
        /// The signal's name.
        signal: String,
    }

    /// The agent's proxy died during the run, or a stdio MCP server's did.
    egress_failed => EgressFailed {
        /// What happened to the proxy.
        reason: String,
        /// The stdio MCP server whose proxy it was.
        server: OrOmitted<String>,
    }

    /// The proxy let a request through.
    network_allowed => NetworkAllowed {
        /// The host asked for.
        host: String,
        /// The port asked for.
        port: u16,
        /// Squid's result, e.g. `TCP_TUNNEL/200`.
        squid: String,
        /// The address connected to.
        address: Option<String>,
        /// Why the request was refused.
        reason: Option<String>,
        /// When the request arrived.
        requested_at: String,
        /// The stdio MCP server whose proxy it was.
        server: OrOmitted<String>,
    }

    /// The proxy refused a request (the fields of `network_allowed`).
    network_blocked => NetworkBlocked(NetworkAllowed)

    /// The sandbox's resolver gave a name its placeholders (once a name).
    dns_resolved => DnsResolved {
        /// The name, as the egress policy spells it.
        name: String,
        /// Its IPv4 placeholder.
        ipv4: String,
        /// Its IPv6 placeholder.
        ipv6: String,
        /// The stdio MCP server whose resolver it was.
        server: OrOmitted<String>,
    }

    /// The sandbox's resolver refused a query.
    dns_refused => DnsRefused {
        /// The name asked for, escaped and bounded.
        name: Option<String>,
        /// The query type (`A`, `TXT`, `TYPE65280`).
        qtype: Option<String>,
        /// Why (`dns_not_allowed`, …).
        reason: String,
        /// The stdio MCP server whose resolver it was.
        server: OrOmitted<String>,
    }

    /// A connection to a placeholder's port other than 443, refused.
    capture_refused => CaptureRefused {
        /// The placeholder connected to.
        address: String,
        /// The port.
        port: u16,
        /// The name the placeholder stands for, if it was given out.
        name: Option<String>,
        /// The stdio MCP server whose sandbox it was.
        server: OrOmitted<String>,
    }

    /// An MCP gate refused a request itself.
    mcp_refused => McpRefused {
        /// The server's id.
        server: String,
        /// The request's HTTP method.
        http_method: String,
        /// The JSON-RPC method.
        method: Option<String>,
        /// The tool called.
        tool: Option<String>,
        /// Why it was refused.
        reason: String,
        /// The JSON-RPC id as the agent sent it.
        rpc_id: Option<Value>,
        /// The host-side error, never shown to the agent.
        detail: OrOmitted<String>,
    }

    /// An MCP gate showed the agent a tool list it had not shown in this run.
    mcp_tools_offered => McpToolsOffered {
        /// The server's id.
        server: String,
        /// The tools' names, in the order the agent got them.
        tools: Vec<String>,
        /// The digest of the list the agent got.
        digest: String,
    }

    /// A gated call is held (protocol version 1, one approver).
    gate_triggered => GateTriggered {
        /// The call.
        subject: GateSubject,
        /// When the gate stops waiting.
        expires_at: String,
        /// `{"terminal": bool, "webhook": bool}`.
        channels: Value,
    }

    /// A gated call is held (protocol version 2, several approvers).
    gate_triggered => GateTriggeredV2 {
        /// The call.
        subject: GateSubject,
        /// When the gate stops waiting, as the request says.
        expires_at: String,
        /// `{"terminal": bool, "webhooks": count}`.
        channels: Value,
        /// `2`.
        version: u64,
        /// How many approvals forward the call.
        threshold: usize,
        /// `[{did, label}]`, the approvers asked.
        approvers: Value,
        /// `sha256:` of the Agentfile in force.
        policy_digest: String,
        /// The approver set's version, when they come from one.
        approver_set_version: Option<u64>,
    }

    /// A gated call was approved at the terminal.
    gate_approved => GateApprovedTerminal {
        /// The call.
        subject: GateSubject,
        /// `2` under protocol version 2.
        version: OrOmitted<u64>,
        /// `terminal`.
        decided_by: String,
    }

    /// A gated call was approved by a signed webhook decision (version 1).
    gate_approved => GateApprovedWebhook {
        /// The call.
        subject: GateSubject,
        /// `webhook`.
        decided_by: String,
        /// The decision, as signed.
        signed: SignedDecision,
    }

    /// A gated call was approved by `threshold` approvers (version 2).
    gate_approved => GateApprovedQuorum {
        /// The call.
        subject: GateSubject,
        /// `2` under protocol version 2.
        version: OrOmitted<u64>,
        /// `quorum`.
        decided_by: String,
        /// The keys whose approvals counted, in arrival order.
        approvers: Vec<String>,
        /// Whether the terminal's approval counted.
        terminal: bool,
        /// How many approvals forward the call, under version 2.
        threshold: OrOmitted<usize>,
    }

    /// A gated call was denied at the terminal.
    gate_denied => GateDeniedTerminal {
        /// The call.
        subject: GateSubject,
        /// `2` under protocol version 2.
        version: OrOmitted<u64>,
        /// `terminal`.
        decided_by: String,
        /// `denied`.
        reason: String,
    }

    /// A gated call was denied by a signed webhook decision (version 1).
    gate_denied => GateDeniedWebhook {
        /// The call.
        subject: GateSubject,
        /// `webhook`.
        decided_by: String,
        /// The decision, as signed.
        signed: SignedDecision,
        /// `denied`.
        reason: String,
    }

    /// A gated call was denied because the webhook's decision failed a
    /// check (version 1).
    gate_denied => GateDeniedUnverified {
        /// The call.
        subject: GateSubject,
        /// `webhook`.
        channel: String,
        /// The check that failed, e.g. `gate_signature_invalid`.
        reason: String,
    }

    /// A gated call was denied by one approver's verified vote (version 2).
    gate_denied => GateDeniedVote {
        /// The call.
        subject: GateSubject,
        /// `2` under protocol version 2.
        version: OrOmitted<u64>,
        /// `webhook`.
        decided_by: String,
        /// The key that denied.
        approver: String,
        /// `denied`.
        reason: String,
    }

    /// No decision arrived before the deadline (version 1).
    gate_timeout => GateTimeout {
        /// The call.
        subject: GateSubject,
        /// `abort` or `proceed`.
        on_timeout: String,
        /// The approval timeout.
        timeout_seconds: u64,
        /// What the webhook last did, when there is one.
        webhook: OrOmitted<String>,
    }

    /// Fewer than `threshold` approvals arrived before the deadline
    /// (version 2).
    gate_timeout => GateTimeoutV2 {
        /// The call.
        subject: GateSubject,
        /// `2`.
        version: u64,
        /// `abort` or `proceed`.
        on_timeout: String,
        /// The approval timeout.
        timeout_seconds: u64,
        /// How many approvals counted.
        approvals: usize,
        /// What each webhook that did not decide last did.
        webhooks: Vec<String>,
        /// How many approvals would have forwarded the call.
        threshold: usize,
    }

    /// A vote whose every check passed (version 2).
    gate_vote => GateVoteCounted {
        /// The call.
        subject: GateSubject,
        /// The vote, as signed.
        signed: SignedVote,
        /// `webhook`.
        decided_by: String,
        /// `true`.
        verified: bool,
    }

    /// A vote that failed a check; it counts for nothing (version 2).
    gate_vote => GateVoteRejected {
        /// The call.
        subject: GateSubject,
        /// `webhook`.
        channel: String,
        /// `false`.
        verified: bool,
        /// The key it named, not believed; `null` when no valid key.
        approver: Option<String>,
        /// The check that failed.
        reason: String,
    }

    /// The terminal's vote (version 2).
    gate_vote => GateVoteTerminal {
        /// The call.
        subject: GateSubject,
        /// `terminal`.
        decided_by: String,
        /// `approved` or `denied`.
        decision: String,
        /// `false` for an approval the Agentfile does not let count.
        counted: OrOmitted<bool>,
    }

    /// A version of the approver set comes into force in the run.
    approver_set_in_force => ApproverSetInForce {
        /// The set's version.
        version: u64,
        /// The set's digest.
        digest: String,
        /// How many approvals forward a call.
        threshold: usize,
        /// The approvers' keys.
        approvers: Vec<String>,
    }

    /// A priced MCP call was charged.
    spend_charged => SpendCharged {
        /// The server's id.
        server: String,
        /// Each priced call: `tool` and `amount_usd`.
        calls: Value,
        /// The calls' price.
        amount_usd: String,
        /// The run's total.
        run_usd: String,
        /// The day's total, when the ledger gave it.
        day_usd: Option<String>,
        /// The month's total, when the ledger gave it.
        month_usd: Option<String>,
    }

    /// A priced MCP call was refused.
    spend_refused => SpendRefused {
        /// The server's id.
        server: String,
        /// Each priced call: `tool` and `amount_usd`.
        calls: Value,
        /// The calls' price.
        amount_usd: String,
        /// The run's total.
        run_usd: String,
        /// The day's total, when the ledger gave it.
        day_usd: Option<String>,
        /// The month's total, when the ledger gave it.
        month_usd: Option<String>,
        /// `cap`, or why the ledger could not charge.
        reason: String,
        /// The cap that would be passed.
        cap: OrOmitted<String>,
        /// That cap's limit.
        cap_usd: OrOmitted<String>,
        /// The ledger's error.
        error: OrOmitted<String>,
    }

    /// The model gate reserved a call's worst case and forwards it.
    llm_reserved => LlmReserved {
        /// The provider's id.
        provider: String,
        /// The model asked for.
        model: String,
        /// `messages`, `count_tokens`, `responses` or `chat_completions`.
        api: String,
        /// `http` or `websocket`.
        transport: String,
        /// The most input tokens the request can hold.
        input_tokens_bound: u64,
        /// The output maximum forwarded (the request's, or the provider's
        /// `max_output_tokens` where it asked for none or more).
        max_output_tokens: u64,
        /// The worst case, reserved.
        reserved_usd: String,
        /// The run's total with the reservation.
        run_usd: String,
        /// The day's total, when the ledger gave it.
        day_usd: Option<String>,
        /// The month's total, when the ledger gave it.
        month_usd: Option<String>,
    }

    /// A model call the gate forwarded has ended, and its reservation is
    /// settled to what it cost.
    llm_call => LlmCall {
        /// The provider's id.
        provider: String,
        /// The model asked for.
        model: String,
        /// `messages`, `count_tokens`, `responses` or `chat_completions`.
        api: String,
        /// `http` or `websocket`.
        transport: String,
        /// Whether the answer was streamed.
        streamed: bool,
        /// The provider's HTTP status (101 for a WebSocket); `null` when
        /// no response came.
        status: Option<u16>,
        /// The provider's request id, when it sent one.
        request_id: Option<String>,
        /// Whether the provider reported usage; without it the call is
        /// charged its reservation.
        usage_reported: bool,
        /// Input tokens charged at the input price.
        input_tokens: u64,
        /// Input tokens read from the provider's cache.
        cached_input_tokens: u64,
        /// Input tokens written to the provider's cache.
        cache_write_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// What was reserved.
        reserved_usd: String,
        /// What the call cost: the settlement.
        cost_usd: String,
        /// From forwarding to the answer's end.
        duration_ms: u64,
        /// The run's total, settled.
        run_usd: String,
        /// The day's total, when the ledger gave it.
        day_usd: Option<String>,
        /// The month's total, when the ledger gave it.
        month_usd: Option<String>,
        /// The ledger's error, when the settlement could not be written:
        /// the call then stays charged its reservation.
        error: OrOmitted<String>,
    }

    /// The model gate refused a request; nothing reached the provider.
    llm_refused => LlmRefused {
        /// The provider's id.
        provider: String,
        /// The request's HTTP method; omitted for a cap's refusal.
        http_method: OrOmitted<String>,
        /// The path the agent asked for, without its query; omitted for a
        /// cap's refusal.
        path: OrOmitted<String>,
        /// `messages`, `count_tokens`, `responses` or `chat_completions`,
        /// when the path was one the gate serves.
        api: Option<String>,
        /// `http` or `websocket`.
        transport: String,
        /// The model asked for, when the body named one.
        model: Option<String>,
        /// The stable reason code.
        reason: String,
        /// The worst case, when the refusal is a cap's.
        reserved_usd: OrOmitted<String>,
        /// The cap that would be passed.
        cap: OrOmitted<String>,
        /// That cap's limit.
        cap_usd: OrOmitted<String>,
        /// The host-side error (the ledger's), never shown to the agent.
        error: OrOmitted<String>,
    }

    /// The A2A listener accepted an envelope.
    a2a_accepted => A2aAccepted {
        /// The HTTP status answered.
        status: u16,
        /// The message id.
        msg_id: Option<String>,
        /// The sender.
        from: Option<String>,
        /// When the sender says it issued the envelope.
        issued_at: Option<String>,
        /// The TCP peer.
        remote: OrOmitted<String>,
    }

    /// The A2A listener refused an envelope.
    a2a_refused => A2aRefused {
        /// The HTTP status answered.
        status: u16,
        /// The message id.
        msg_id: Option<String>,
        /// The sender.
        from: Option<String>,
        /// When the sender says it issued the envelope.
        issued_at: Option<String>,
        /// The refusal's reason code.
        reason: String,
        /// What the replay store said, when it could not be used.
        detail: OrOmitted<String>,
        /// The TCP peer.
        remote: OrOmitted<String>,
    }

    /// An envelope was sent for the agent (or by `constle a2a send`).
    a2a_sent => A2aSent {
        /// The recipient.
        to: String,
        /// The message id.
        msg_id: String,
        /// Whether the recipient accepted it.
        delivered: bool,
        /// The HTTP status the recipient answered.
        status: Option<u16>,
        /// Why it was not delivered.
        reason: Option<String>,
    }

    /// The agent's processes, or a stdio MCP server's, reached a
    /// `sandbox.limits` limit.
    limit_reached => LimitReached {
        /// `memory` or `pids`.
        limit: String,
        /// Processes the kernel killed, or forks refused.
        count: u64,
        /// The limit, e.g. `512 MiB`.
        detail: String,
        /// The stdio MCP server whose limit it was.
        server: OrOmitted<String>,
    }

    /// Before the sandbox starts, when the work directory needed something.
    workdir_prepared => WorkdirPrepared {
        /// The owner's read-only entries given to the keeper id.
        kept_read_only: usize,
        /// Entries a killed run had left with it, given back.
        recovered: usize,
        /// The stdio MCP server whose work directory it is.
        server: OrOmitted<String>,
        /// `true` when it is the agent's kept home (`sandbox.home`).
        home: OrOmitted<bool>,
    }

    /// After the sandbox is gone, executable configuration left in the work
    /// directory was set aside.
    workdir_quarantined => WorkdirQuarantined {
        /// How many entries were set aside.
        count: usize,
        /// The first 20 of them.
        items: Value,
        /// The directory they went to.
        quarantine: Option<String>,
        /// The stdio MCP server whose work directory it is.
        server: OrOmitted<String>,
        /// `true` when it is the agent's kept home (`sandbox.home`).
        home: OrOmitted<bool>,
    }

    /// After the sandbox is gone, something in the work directory was
    /// changed back.
    workdir_restored => WorkdirRestored {
        /// How many entries lost write access for group or others.
        write_removed: usize,
        /// The first 20 of them.
        paths: Vec<String>,
        /// The work directory's mode and owner as the agent left them.
        root_was: Option<String>,
        /// The owner's read-only entries given back.
        read_only_returned: usize,
        /// The stdio MCP server whose work directory it is.
        server: OrOmitted<String>,
        /// `true` when it is the agent's kept home (`sandbox.home`).
        home: OrOmitted<bool>,
    }

    /// After the sandbox is gone, set-user-ID or set-group-ID bits were
    /// cleared in the work directory.
    setid_cleared => SetidCleared {
        /// How many files had them.
        count: usize,
        /// The first 20 of them.
        paths: Vec<String>,
        /// The stdio MCP server whose work directory it is.
        server: OrOmitted<String>,
        /// `true` when it is the agent's kept home (`sandbox.home`).
        home: OrOmitted<bool>,
    }

    /// A stdio MCP server's process started.
    mcp_server_started => McpServerStarted {
        /// The server's id.
        server: String,
        /// Its host pid.
        pid: Option<u32>,
        /// The file its standard error goes to.
        stderr: String,
    }

    /// A stdio MCP server's process could not be started.
    mcp_server_not_started => McpServerNotStarted {
        /// The server's id.
        server: String,
        /// The launcher's error.
        error: String,
    }

    /// A stdio MCP server's process is gone.
    mcp_server_exited => McpServerExited {
        /// The server's id.
        server: String,
        /// Why it ended.
        reason: String,
        /// Its exit code.
        exit_code: Option<i32>,
        /// The signal that ended it.
        signal: Option<i32>,
    }

    /// A signed log's checkpoint was made.
    checkpoint => Checkpoint {
        /// The log's size.
        size: u64,
        /// The tree's root.
        root: String,
        /// What made the checkpoint.
        trigger: String,
        /// The signed checkpoint note.
        note: String,
    }

    /// A witness cosigned a checkpoint.
    checkpoint_cosigned => CheckpointCosigned {
        /// The checkpoint's size.
        size: u64,
        /// The checkpoint's root.
        root: String,
        /// The witness's name.
        witness: String,
        /// The witness's cosignature line.
        cosignature: String,
        /// How long the witness took.
        round_trip_ms: u128,
    }

    /// A witness did not cosign a checkpoint.
    checkpoint_witness_failed => CheckpointWitnessFailed {
        /// The checkpoint's size.
        size: u64,
        /// The witness's name.
        witness: String,
        /// The witness's URL, as shown.
        url: String,
        /// Why it did not cosign.
        reason: String,
        /// The HTTP status it answered.
        status: OrOmitted<u16>,
    }

    /// A checkpoint was short of its required quorum.
    checkpoint_quorum_missed => CheckpointQuorumMissed {
        /// The checkpoint's size.
        size: u64,
        /// How many witnesses cosigned.
        cosigned: usize,
        /// How many were required.
        quorum: usize,
    }

    /// A log file's end that was never acknowledged was cut off.
    audit_tail_discarded => AuditTailDiscarded {
        /// The day file's name.
        file: Option<String>,
        /// How many bytes were cut.
        bytes: usize,
        /// Their SHA-256.
        sha256: String,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::entry::ENVELOPE_KEYS;

    fn snake_case(word: &str) -> bool {
        word.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
            && word
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    }

    #[test]
    fn names_and_fields_are_valid_and_unique() {
        for (name, fields) in EVENTS {
            assert!(Event::new(name).is_ok(), "{name}");
            let mut seen = BTreeSet::new();
            for field in fields.iter().copied().flatten() {
                assert!(snake_case(field), "{name}.{field}");
                assert!(!ENVELOPE_KEYS.contains(field), "{name}.{field}");
                assert!(seen.insert(*field), "{name}.{field} twice");
            }
        }
    }

    #[test]
    fn a_name_in_several_shapes_is_the_gates_own() {
        let mut names = BTreeSet::new();
        for (name, _) in EVENTS {
            let first = names.insert(*name);
            assert!(first || name.starts_with("gate_"), "{name} twice");
        }
    }

    /// The event names in the first column of docs/run.md's table of events.
    fn documented() -> BTreeSet<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/run.md");
        let text = std::fs::read_to_string(path).unwrap();
        let table = text.split("\n| event | when | fields |\n").nth(1).unwrap();
        table
            .lines()
            .skip(1)
            .take_while(|line| line.starts_with('|'))
            .flat_map(|line| {
                let first = line.split('|').nth(1).unwrap();
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_catalogue_is_the_table_in_docs_run_md() {
        // audit_tail_discarded is the log's own, told of in audit-log.md.
        let own = "audit_tail_discarded";
        let audit_log = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/audit-log.md");
        assert!(std::fs::read_to_string(audit_log).unwrap().contains(own));
        let declared: BTreeSet<String> = EVENTS
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| *name != own)
            .map(str::to_owned)
            .collect();
        assert_eq!(declared, documented());
    }

    fn network() -> NetworkAllowed {
        NetworkAllowed {
            host: "example.com".into(),
            port: 443,
            squid: "TCP_DENIED/403".into(),
            address: None,
            reason: Some("not_allowed".into()),
            requested_at: "2026-08-08T10:00:00.000000Z".into(),
            server: None.into(),
        }
    }

    #[test]
    fn none_is_null_or_left_out_as_declared() {
        let typed = Event::from(NetworkBlocked(network()));
        let built = Event::new("network_blocked")
            .and_then(|e| e.with("host", "example.com"))
            .and_then(|e| e.with("port", 443))
            .and_then(|e| e.with("squid", "TCP_DENIED/403"))
            .and_then(|e| e.with("address", Value::Null))
            .and_then(|e| e.with("reason", "not_allowed"))
            .and_then(|e| e.with("requested_at", "2026-08-08T10:00:00.000000Z"))
            .unwrap();
        assert_eq!(typed, built);
        let of_server = NetworkAllowed {
            server: Some("files".to_owned()).into(),
            ..network()
        };
        let fields = Event::from(of_server).into_fields();
        assert_eq!(fields["server"], "files");
        assert_eq!(fields["address"], Value::Null);
    }

    #[test]
    fn integers_json_cannot_carry_exactly_are_written_as_their_digits() {
        let exact = MAX_SAFE_INTEGER.unsigned_abs();
        let checkpoint = |size| CheckpointQuorumMissed {
            size,
            cosigned: 1,
            quorum: 2,
        };
        let fields = Event::from(checkpoint(exact)).into_fields();
        assert_eq!(fields["size"], Value::from(exact));
        let fields = Event::from(checkpoint(exact + 1)).into_fields();
        assert_eq!(fields["size"], "9007199254740992");
        let fields = Event::from(checkpoint(u64::MAX)).into_fields();
        assert_eq!(fields["size"], "18446744073709551615");
        assert_eq!(i64::MIN.written(), Some("-9223372036854775808".into()));
        assert_eq!(u128::MAX.written(), Some(u128::MAX.to_string().into()));
        // Inside a JSON value too, and a number that is no integer.
        let nested = serde_json::json!({"a": [u64::MAX, 7], "b": 1.5});
        assert_eq!(
            nested.written(),
            Some(serde_json::json!({"a": ["18446744073709551615", 7], "b": "1.5"}))
        );
        // What is written passes the run-time checks the catalogue skips.
        let fields = Event::from(checkpoint(u64::MAX)).into_fields();
        let rebuilt = fields.into_iter().try_fold(
            Event::new("checkpoint_quorum_missed").unwrap(),
            |e, (k, v)| e.with(&k, v),
        );
        assert!(rebuilt.is_ok());
    }
}
