//! Checked value types of an Agentfile, each created only by a parser that
//! enforces its rules: [`Hostname`], [`HttpUrl`], [`ServerId`], [`ProviderId`], [`ToolName`],
//! [`MethodName`], [`EnvVarName`], [`HeaderName`], [`AuthScheme`], USD
//! amounts ([`parse_amount`]), and the Docker-style sizes and CPU counts of
//! `sandbox.limits`.

use std::borrow::Borrow;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use rust_decimal::Decimal;

// The rule lives with the other URL rules other crates share; re-exported
// so that the Agentfile's readers keep `constle_manifest::is_loopback_host`.
pub use constle_redact::is_loopback_host;
use rust_decimal::prelude::ToPrimitive;

use crate::bounds::{MAX_CPU_MILLIS, MIN_CPU_MILLIS, MIN_MEMORY_BYTES, MIN_TMPFS_BYTES};
use crate::diagnostic::{show, show_url};

/// Why a string is not a valid value of one of this module's types: what is
/// wrong and, when there is one, what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidValue {
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    pub help: Option<String>,
}

fn invalid(message: impl Into<String>, help: impl Into<Option<String>>) -> InvalidValue {
    InvalidValue {
        message: message.into(),
        help: help.into(),
    }
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The value as written in the Agentfile.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl FromStr for $name {
            type Err = InvalidValue;
            fn from_str(s: &str) -> Result<Self, InvalidValue> {
                $name::new(s)
            }
        }
    };
}

string_newtype! {
    /// A host name the agent may reach through the egress proxy: lower-case
    /// ASCII, at least two dot-separated DNS labels, no IP address in any
    /// spelling, no port, scheme, path, wildcard or trailing dot.
    Hostname
}

string_newtype! {
    /// The id of an MCP server: 1 to 32 of `a-z`, `0-9`, `_` and `-`.
    ServerId
}

string_newtype! {
    /// The id of an LLM provider (`llm.providers[].id`): the rules of a
    /// [`ServerId`].
    ProviderId
}

string_newtype! {
    /// An exact MCP tool name: non-empty, at most 256 bytes, no control
    /// characters, no leading or trailing whitespace. Compared byte for byte.
    ToolName
}

string_newtype! {
    /// A JSON-RPC method name (`resources/read`, `sampling/createMessage`):
    /// 1 to 128 bytes of visible ASCII (`!` to `~`, no spaces). Compared
    /// byte for byte.
    MethodName
}

string_newtype! {
    /// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
    EnvVarName
}

string_newtype! {
    /// The name of a header the MCP gate adds to a server's requests
    /// (`mcp.servers[].headers[].name`): an HTTP token (RFC 9110 §5.6.2) of
    /// at most [`MAX_HEADER_NAME_LEN`] bytes, kept as written, and not
    /// [reserved](is_reserved_header). HTTP compares names without regard to
    /// case; so does the check for duplicates.
    HeaderName
}

string_newtype! {
    /// An HTTP authentication scheme written before a header's secret
    /// (`Bearer`, `Basic`, `Token`): an HTTP token of at most
    /// [`MAX_AUTH_SCHEME_LEN`] bytes, as RFC 9110 §11.1 has it.
    AuthScheme
}

/// Longest tool name accepted, in bytes.
pub const MAX_TOOL_NAME_LEN: usize = 256;

/// Longest header name accepted, in bytes.
pub const MAX_HEADER_NAME_LEN: usize = 128;

/// Longest authentication scheme accepted, in bytes.
pub const MAX_AUTH_SCHEME_LEN: usize = 64;

/// Headers `mcp.servers[].headers` may not declare, in any case. They frame
/// the message or the connection, which is the gate's HTTP client's to do
/// (`Host`, `Content-Length`, `Transfer-Encoding`, `Connection`, …), or the
/// gate forwards or sets them itself on every request (`Accept`,
/// `Last-Event-ID`), so a declared value would be a second one.
pub const RESERVED_HEADERS: [&str; 11] = [
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
    "expect",
    "accept",
    "last-event-id",
];

/// Every header name starting with one of these is reserved too: `Content-`
/// (the gate sends the body it inspected, as it is), `Accept-` (what the
/// gate can read back), `Proxy-` (the gate uses no proxy) and `Mcp-` (MCP's
/// own: `Mcp-Session-Id`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
/// and any the protocol adds).
pub const RESERVED_HEADER_PREFIXES: [&str; 4] = ["content-", "accept-", "proxy-", "mcp-"];

/// Whether `name` is one of [`RESERVED_HEADERS`] or starts with one of
/// [`RESERVED_HEADER_PREFIXES`], in any case.
pub fn is_reserved_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&name.as_str())
        || RESERVED_HEADER_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Whether `s` is an HTTP token: one or more of the visible ASCII characters
/// other than the delimiters `"(),/:;<=>?@[\]{}`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Longest JSON-RPC method name accepted, in bytes.
pub const MAX_METHOD_NAME_LEN: usize = 128;

/// Longest environment variable name accepted, in bytes.
pub const MAX_ENV_NAME_LEN: usize = 255;

impl Hostname {
    /// Checks a host name for `sandbox.network.allowed_hosts`.
    pub fn new(s: &str) -> Result<Hostname, InvalidValue> {
        check_allowed_host(s).map(|()| Hostname(s.to_string()))
    }
}

fn check_allowed_host(s: &str) -> Result<(), InvalidValue> {
    // A URL written here may carry credentials.
    let shown = show_url(s);
    if s.is_empty() {
        return Err(invalid(
            "empty host name",
            "write a host name such as api.example.com".to_string(),
        ));
    }
    if s.trim() != s || s.chars().any(char::is_whitespace) {
        let trimmed = s.trim();
        let help = if !trimmed.is_empty() && !trimmed.chars().any(char::is_whitespace) {
            format!("write {}", show(trimmed))
        } else {
            "write one host name per list entry".to_string()
        };
        return Err(invalid(
            format!("host name {shown} contains whitespace"),
            help,
        ));
    }
    if let Some((_, rest)) = s.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        // The host alone: never the user information (credentials).
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let host = strip_port(host);
        return Err(invalid(
            format!("{shown} is a URL; allowed_hosts takes bare host names"),
            format!("write {}", show(host)),
        ));
    }
    let bracketed = s.starts_with('[') && s.contains(']');
    let bare = s.trim_start_matches('[').split(']').next().unwrap_or(s);
    if bracketed || Ipv6Addr::from_str(bare).is_ok() || Ipv4Addr::from_str(strip_port(s)).is_ok() {
        return Err(ip_literal(&shown));
    }
    if s.contains('/') {
        let host = s.split('/').next().unwrap_or(s);
        return Err(invalid(
            format!("host name {shown} contains a path"),
            format!("write only the host: {}", show(host)),
        ));
    }
    if s.contains(':') {
        let host = strip_port(s);
        return Err(invalid(
            format!("host name {shown} contains a port"),
            format!(
                "write only the host, {}; the proxy allows port 443 only",
                show(host)
            ),
        ));
    }
    if s.contains('*') {
        let example = s.trim_start_matches('*').trim_start_matches('.');
        return Err(invalid(
            format!("wildcard {shown} is not supported"),
            format!(
                "list each host name in full, e.g. api.{}",
                if example.is_empty() {
                    "example.com"
                } else {
                    example
                }
            ),
        ));
    }
    if !s.is_ascii() {
        return Err(invalid(
            format!("host name {shown} is not ASCII"),
            "write an internationalised name in its ASCII (xn--) form".to_string(),
        ));
    }
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        let lower = s.to_ascii_lowercase();
        return Err(invalid(
            format!("host name {shown} has upper-case letters"),
            format!("write it in lower case: {}", show(&lower)),
        ));
    }
    if let Some(stripped) = s.strip_suffix('.')
        && !stripped.is_empty()
        && !stripped.ends_with('.')
    {
        return Err(invalid(
            format!("host name {shown} ends with a dot"),
            format!("write {}", show(stripped)),
        ));
    }
    check_labels(s, &shown)?;
    if looks_numeric(s) {
        return Err(ip_literal(&shown));
    }
    if !s.contains('.') {
        let help = if s == "localhost" {
            "the proxy never connects to loopback; remove this entry".to_string()
        } else {
            format!(
                "write the fully qualified name, e.g. {}",
                show(&format!("{s}.example.com"))
            )
        };
        return Err(invalid(
            format!(
                "host name {shown} has a single label; a public host name has at least one dot"
            ),
            help,
        ));
    }
    Ok(())
}

fn ip_literal(shown: &str) -> InvalidValue {
    invalid(
        format!("{shown} is an IP address; allowed_hosts takes host names only"),
        "write the host name the agent connects to; the proxy refuses raw IP destinations"
            .to_string(),
    )
}

/// `host:port` → `host` (IPv6 brackets left alone).
fn strip_port(s: &str) -> &str {
    if s.starts_with('[') {
        return s;
    }
    match s.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => s,
    }
}

/// DNS label rules: 1 to 63 of `a-z0-9-`, not starting or ending with `-`;
/// at most 253 bytes in all. Upper case is checked by the caller.
fn check_labels(s: &str, shown: &str) -> Result<(), InvalidValue> {
    if s.len() > 253 {
        return Err(invalid(
            format!("host name {shown} is longer than 253 bytes"),
            "write a shorter host name".to_string(),
        ));
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Err(invalid(
                format!("host name {shown} has an empty label (a leading dot or `..`)"),
                "write dot-separated labels, e.g. api.example.com".to_string(),
            ));
        }
        if label.len() > 63 {
            return Err(invalid(
                format!("host name {shown} has a label longer than 63 bytes"),
                "each dot-separated part of a host name is at most 63 characters".to_string(),
            ));
        }
        if let Some(bad) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(invalid(
                format!("host name {shown} contains {bad:?}"),
                "use only letters, digits, `-` and `.` in a host name".to_string(),
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid(
                format!("host name {shown} has a label that starts or ends with `-`"),
                "a DNS label starts and ends with a letter or digit".to_string(),
            ));
        }
    }
    Ok(())
}

/// Whether a host would be read as an IPv4 address by a URL parser: its last
/// label is a number (decimal, octal with a leading 0, or `0x` hex).
fn looks_numeric(s: &str) -> bool {
    let last = s.rsplit('.').next().unwrap_or(s);
    let lower = last.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())
}

impl ServerId {
    /// Checks an MCP server id.
    pub fn new(s: &str) -> Result<ServerId, InvalidValue> {
        check_id(s, "MCP server", "accounting").map(ServerId)
    }

    /// The variable through which the agent reaches this server:
    /// `CONSTLE_MCP_<ID>_URL`, the id upper-cased with `-` written as `_`.
    pub fn env_var(&self) -> String {
        format!("CONSTLE_MCP_{}_URL", env_id(&self.0))
    }
}

impl ProviderId {
    /// Checks an LLM provider id.
    pub fn new(s: &str) -> Result<ProviderId, InvalidValue> {
        check_id(s, "LLM provider", "anthropic").map(ProviderId)
    }

    /// The variable through which the agent reaches this provider:
    /// `CONSTLE_LLM_<ID>_URL`, the id upper-cased with `-` written as `_`.
    pub fn env_var(&self) -> String {
        format!("CONSTLE_LLM_{}_URL", env_id(&self.0))
    }
}

/// An id of `what` (an MCP server, an LLM provider): 1 to 32 of `a-z`,
/// `0-9`, `_` and `-`.
fn check_id(s: &str, what: &str, example: &str) -> Result<String, InvalidValue> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if s.is_empty() || s.len() > 32 || !s.chars().all(ok) {
        let lower = s.to_ascii_lowercase();
        let help = if !lower.is_empty() && lower.len() <= 32 && lower.chars().all(ok) {
            format!("write it in lower case: {}", show(&lower))
        } else {
            format!("use 1 to 32 of a-z, 0-9, `_` and `-`, e.g. {example}")
        };
        return Err(invalid(format!("invalid {what} id {}", show(s)), help));
    }
    Ok(s.to_string())
}

/// An id as it appears in a variable name: upper case, `-` as `_`.
fn env_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

impl ToolName {
    /// Checks an MCP tool name.
    pub fn new(s: &str) -> Result<ToolName, InvalidValue> {
        if s.is_empty() {
            return Err(invalid(
                "empty tool name",
                "write the exact MCP tool name, e.g. pay_invoice".to_string(),
            ));
        }
        if s.len() > MAX_TOOL_NAME_LEN {
            return Err(invalid(
                format!(
                    "tool name {} is longer than {MAX_TOOL_NAME_LEN} bytes",
                    show(s)
                ),
                "write the exact MCP tool name".to_string(),
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(invalid(
                format!("tool name {} contains a control character", show(s)),
                "write the exact MCP tool name without control characters".to_string(),
            ));
        }
        if s.trim() != s {
            return Err(invalid(
                format!("tool name {} has leading or trailing whitespace", show(s)),
                format!("write {}; names are matched exactly", show(s.trim())),
            ));
        }
        Ok(ToolName(s.to_string()))
    }
}

impl MethodName {
    /// Checks a JSON-RPC method name for `mcp.servers[].allow_methods`.
    pub fn new(s: &str) -> Result<MethodName, InvalidValue> {
        let help = "write the exact JSON-RPC method name, e.g. resources/read".to_string();
        if s.is_empty() {
            return Err(invalid("empty method name", help));
        }
        if s.len() > MAX_METHOD_NAME_LEN {
            return Err(invalid(
                format!(
                    "method name {} is longer than {MAX_METHOD_NAME_LEN} bytes",
                    show(s)
                ),
                help,
            ));
        }
        // MCP's method names are plain ASCII words and slashes; anything
        // else could only be a look-alike of a real name.
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                format!(
                    "method name {} has a character other than visible ASCII (spaces included)",
                    show(s)
                ),
                help,
            ));
        }
        Ok(MethodName(s.to_string()))
    }
}

impl EnvVarName {
    /// Checks an environment variable name.
    pub fn new(s: &str) -> Result<EnvVarName, InvalidValue> {
        let mut chars = s.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok
            || s.len() > MAX_ENV_NAME_LEN
            || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(invalid(
                format!("invalid environment variable name {}", show(s)),
                "use letters, digits and `_`, not starting with a digit, e.g. API_TOKEN"
                    .to_string(),
            ));
        }
        Ok(EnvVarName(s.to_string()))
    }
}

impl HeaderName {
    /// Checks a header name.
    pub fn new(s: &str) -> Result<HeaderName, InvalidValue> {
        HeaderName::parse(s).map_err(|(_, e)| e)
    }

    /// Like [`HeaderName::new`], with the diagnostic code:
    /// `reserved_header_name` for a [reserved](is_reserved_header) name,
    /// else `invalid_header_name`.
    pub(crate) fn parse(s: &str) -> Result<HeaderName, (&'static str, InvalidValue)> {
        if !is_token(s) || s.len() > MAX_HEADER_NAME_LEN {
            return Err((
                "invalid_header_name",
                invalid(
                    format!("invalid header name {}", show(s)),
                    format!(
                        "use 1 to {MAX_HEADER_NAME_LEN} letters, digits and `-` (an HTTP token), e.g. Authorization or X-Api-Key"
                    ),
                ),
            ));
        }
        if is_reserved_header(s) {
            return Err((
                "reserved_header_name",
                invalid(
                    format!(
                        "{} is a header the gate sets or forwards itself, so it cannot be declared",
                        show(s)
                    ),
                    "declare only the credential headers the server wants, e.g. Authorization or X-Api-Key"
                        .to_string(),
                ),
            ));
        }
        Ok(HeaderName(s.to_string()))
    }
}

impl AuthScheme {
    /// Checks an authentication scheme.
    pub fn new(s: &str) -> Result<AuthScheme, InvalidValue> {
        if !is_token(s) || s.len() > MAX_AUTH_SCHEME_LEN {
            return Err(invalid(
                format!("invalid authentication scheme {}", show(s)),
                format!(
                    "write the scheme alone, 1 to {MAX_AUTH_SCHEME_LEN} letters or digits, e.g. scheme: Bearer; the gate puts one space after it"
                ),
            ));
        }
        Ok(AuthScheme(s.to_string()))
    }
}

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP: loopback hosts only.
    Http,
    /// HTTPS.
    Https,
}

/// The host of an [`HttpUrl`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UrlHost {
    /// A lower-case DNS name.
    Domain(String),
    /// A dotted-quad IPv4 address.
    Ipv4(Ipv4Addr),
    /// A bracketed IPv6 address.
    Ipv6(Ipv6Addr),
}

impl fmt::Display for UrlHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlHost::Domain(d) => f.write_str(d),
            UrlHost::Ipv4(a) => write!(f, "{a}"),
            UrlHost::Ipv6(a) => write!(f, "[{a}]"),
        }
    }
}

/// An absolute `http` or `https` URL, checked strictly: lower-case scheme,
/// no user info, a host that is a DNS name, a dotted-quad IPv4 address or a
/// bracketed IPv6 address, an optional port, and a path and query of printable
/// ASCII (percent-encode the rest). No fragment. Plain `http` is accepted for
/// loopback hosts only (`localhost`, `127.0.0.0/8`, `[::1]`).
///
/// Its query may carry a secret (`?api_key=…`): [`Display`](fmt::Display)
/// and `Debug` show it [`redacted`](HttpUrl::redacted); only
/// [`as_str`](HttpUrl::as_str) gives the URL as written.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl {
    text: String,
    scheme: Scheme,
    host: UrlHost,
    port: Option<u16>,
    path_start: usize,
}

impl HttpUrl {
    /// Parses and checks a URL.
    pub fn new(s: &str) -> Result<HttpUrl, InvalidValue> {
        HttpUrl::parse(s).map_err(|(_, e)| e)
    }

    /// Like [`HttpUrl::new`], with the diagnostic code: `insecure_url` for
    /// plain http to a host that is not loopback, else `invalid_url`.
    pub(crate) fn parse(s: &str) -> Result<HttpUrl, (&'static str, InvalidValue)> {
        HttpUrl::parse_inner(s)
            .map_err(|e| ("invalid_url", e))
            .and_then(|url| {
                if url.scheme == Scheme::Http && !url.is_loopback() {
                    let https = format!("https://{}", &s["http://".len()..]);
                    Err((
                        "insecure_url",
                        invalid(
                            format!(
                                "URL {} uses plain http to a host that is not loopback",
                                show_url(s)
                            ),
                            format!("use https: {}", show_url(&https)),
                        ),
                    ))
                } else {
                    Ok(url)
                }
            })
    }

    pub(crate) fn parse_inner(s: &str) -> Result<HttpUrl, InvalidValue> {
        let shown = show_url(s);
        let example = "https://mcp.example.com/mcp";
        let Some((scheme_text, rest)) = s.split_once("://") else {
            return Err(invalid(
                format!("{shown} is not an absolute URL"),
                format!("write a full URL starting with https://, e.g. {example}"),
            ));
        };
        let scheme = match scheme_text {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            other if other.eq_ignore_ascii_case("https") || other.eq_ignore_ascii_case("http") => {
                return Err(invalid(
                    format!("URL scheme in {shown} is not lower case"),
                    format!("write {}://…", other.to_ascii_lowercase()),
                ));
            }
            _ => {
                return Err(invalid(
                    format!("URL {shown} is not http or https"),
                    format!("write an https URL, e.g. {example}"),
                ));
            }
        };
        if let Some(bad) = s
            .chars()
            .find(|c| !c.is_ascii() || c.is_ascii_control() || *c == ' ')
        {
            return Err(invalid(
                format!("URL {shown} contains {bad:?}"),
                "percent-encode spaces, control and non-ASCII characters".to_string(),
            ));
        }
        let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let tail = &rest[authority_end..];
        if authority.contains('@') {
            return Err(invalid(
                format!("URL {shown} contains user information (`user@`)"),
                "remove the credentials from the URL".to_string(),
            ));
        }
        let (host_text, port_text) = if let Some(inner) = authority.strip_prefix('[') {
            let Some((addr, after)) = inner.split_once(']') else {
                return Err(invalid(
                    format!("URL {shown} has an unclosed `[`"),
                    "write an IPv6 host as [::1]".to_string(),
                ));
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => {
                        return Err(invalid(
                            format!("URL {shown} has text after the IPv6 address"),
                            "write [address]:port".to_string(),
                        ));
                    }
                },
            };
            let Ok(addr) = Ipv6Addr::from_str(addr) else {
                return Err(invalid(
                    format!("URL {shown} has an invalid IPv6 address"),
                    "write an IPv6 host as [::1]".to_string(),
                ));
            };
            (UrlHost::Ipv6(addr), port)
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            (url_host(host, &shown)?, port)
        };
        let port = match port_text {
            None => None,
            Some(p) => Some(parse_port(p).ok_or_else(|| {
                invalid(
                    format!("URL {shown} has an invalid port"),
                    "write a port from 1 to 65535, or leave it out".to_string(),
                )
            })?),
        };
        if !tail.is_empty() && !tail.starts_with('/') && !tail.starts_with('?') {
            return Err(invalid(
                format!("URL {shown} has an invalid path"),
                "paths start with `/` and use `/`, not `\\`; fragments (`#`) are not allowed"
                    .to_string(),
            ));
        }
        if let Some(bad) = tail.chars().find(|c| "#\\\"<>^`{|}".contains(*c)) {
            return Err(invalid(
                format!("URL {shown} contains {bad:?} in its path"),
                "percent-encode it; fragments (`#`) are not allowed".to_string(),
            ));
        }
        let bytes = tail.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'%'
                && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return Err(invalid(
                    format!("URL {shown} has a `%` not followed by two hex digits"),
                    "write `%25` for a literal percent sign".to_string(),
                ));
            }
        }
        Ok(HttpUrl {
            text: s.to_string(),
            scheme,
            host: host_text,
            port,
            path_start: scheme_text.len() + 3 + authority_end,
        })
    }

    /// The URL as written (it may carry a secret: never print it).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL with secret-looking query parameters masked, for messages.
    pub fn redacted(&self) -> String {
        constle_redact::url(&self.text)
    }

    /// Whether the URL carries something [`redacted`](HttpUrl::redacted)
    /// masks: a secret, then, in clear text in the Agentfile.
    pub fn carries_secret(&self) -> bool {
        constle_redact::has_secret(&self.text)
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host.
    pub fn host(&self) -> &UrlHost {
        &self.host
    }

    /// The explicit port, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The explicit port, or 80 / 443 by scheme.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or(match self.scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        })
    }

    /// The path and query, e.g. `/mcp?x=1`; empty when the URL has none.
    pub fn path_and_query(&self) -> &str {
        self.text.get(self.path_start..).unwrap_or("")
    }

    /// Whether the host is loopback: see [`is_loopback_host`].
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host.to_string())
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HttpUrl").field(&self.redacted()).finish()
    }
}

impl FromStr for HttpUrl {
    type Err = InvalidValue;
    fn from_str(s: &str) -> Result<Self, InvalidValue> {
        HttpUrl::new(s)
    }
}

fn url_host(host: &str, shown: &str) -> Result<UrlHost, InvalidValue> {
    if host.is_empty() {
        return Err(invalid(
            format!("URL {shown} has no host"),
            "write a URL such as https://mcp.example.com/mcp".to_string(),
        ));
    }
    if let Ok(addr) = Ipv4Addr::from_str(host) {
        return Ok(UrlHost::Ipv4(addr));
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(invalid(
            format!("URL {shown} has upper-case letters in its host"),
            format!(
                "write the host in lower case: {}",
                show(&host.to_ascii_lowercase())
            ),
        ));
    }
    let host_shown = show(host);
    check_labels(host, &host_shown).map_err(|e| InvalidValue {
        message: format!("URL {shown}: {}", e.message),
        help: e.help,
    })?;
    if looks_numeric(host) {
        return Err(invalid(
            format!("URL {shown} has a host that reads as an unusual IP address spelling"),
            "write an IPv4 address as four decimal numbers without leading zeros, or use a host name"
                .to_string(),
        ));
    }
    Ok(UrlHost::Domain(host.to_string()))
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || (p.len() > 1 && p.starts_with('0'))
    {
        return None;
    }
    p.parse::<u16>().ok().filter(|p| *p != 0)
}

/// Most digits before the decimal point of an amount.
pub const MAX_AMOUNT_INTEGER_DIGITS: usize = 18;

/// Most digits after the decimal point of an amount.
pub const MAX_AMOUNT_SCALE: usize = 10;

/// How one kind of decimal value is spelled and named in messages.
struct DecimalRules {
    /// What the value is called: "amount".
    noun: &'static str,
    /// What to write, as an example.
    example: &'static str,
    /// What to write instead of a negative value.
    negative: &'static str,
    /// What to leave out, after `example`, when the text is no decimal.
    without: &'static str,
    max_integer_digits: usize,
    max_scale: usize,
}

const AMOUNT: DecimalRules = DecimalRules {
    noun: "amount",
    example: "write a plain decimal amount such as 5.00",
    negative: "amounts are zero or more; write a positive value such as 5.00",
    without: "without sign, currency symbol or thousands separators",
    max_integer_digits: MAX_AMOUNT_INTEGER_DIGITS,
    max_scale: MAX_AMOUNT_SCALE,
};

/// `sandbox.limits.cpus`: thousandths of a CPU are the finest step kept.
const CPUS: DecimalRules = DecimalRules {
    noun: "cpus",
    example: "write a number of CPUs such as 1.5",
    negative: "write a positive number of CPUs such as 1.5",
    without: "without sign, unit or percent sign",
    max_integer_digits: 4,
    max_scale: 3,
};

/// Reads a USD amount exactly from its source text: digits with an optional
/// decimal point and fraction, no sign, exponent, separators or currency
/// symbol; at most [`MAX_AMOUNT_INTEGER_DIGITS`] digits before the point and
/// [`MAX_AMOUNT_SCALE`] after. The scale written is kept (`5.00` has scale 2).
pub fn parse_amount(text: &str) -> Result<Decimal, InvalidValue> {
    parse_decimal(text, &AMOUNT)
}

/// Reads a plain decimal exactly from its text, never through a float, by
/// `rules`.
fn parse_decimal(text: &str, rules: &DecimalRules) -> Result<Decimal, InvalidValue> {
    let DecimalRules {
        noun,
        example,
        negative,
        without,
        max_integer_digits,
        max_scale,
    } = *rules;
    let shown = show(text);
    if text.is_empty() {
        return Err(invalid(format!("empty {noun}"), example.to_string()));
    }
    if text.starts_with('-') {
        return Err(invalid(
            format!("{noun} {shown} is negative"),
            negative.to_string(),
        ));
    }
    let lower = text.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        ".inf" | "inf" | "infinity" | ".nan" | "nan"
    ) {
        return Err(invalid(
            format!("{noun} {shown} is not a number"),
            example.to_string(),
        ));
    }
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || frac.is_some_and(|f| !digits(f)) {
        let help = if lower.contains('e') && text.bytes().any(|b| b.is_ascii_digit()) {
            "exponent form is not accepted; write the digits out, e.g. 1000 instead of 1e3"
                .to_string()
        } else if whole.is_empty() && frac.is_some_and(digits) {
            format!("write 0{text}")
        } else if frac == Some("") && digits(whole) {
            format!("write {whole}")
        } else {
            format!("{example}, {without}")
        };
        return Err(invalid(
            format!("{noun} {shown} is not a plain decimal number"),
            help,
        ));
    }
    if whole.len() > 1 && whole.starts_with('0') {
        let trimmed = whole.trim_start_matches('0');
        let fixed = format!(
            "{}{}",
            if trimmed.is_empty() { "0" } else { trimmed },
            frac.map(|f| format!(".{f}")).unwrap_or_default()
        );
        return Err(invalid(
            format!("{noun} {shown} has a leading zero"),
            format!("write {fixed}"),
        ));
    }
    if whole.len() > max_integer_digits || frac.is_some_and(|f| f.len() > max_scale) {
        return Err(invalid(
            format!("{noun} {shown} is too large or too precise"),
            format!(
                "use at most {max_integer_digits} digits before the decimal point and {max_scale} after it"
            ),
        ));
    }
    Decimal::from_str_exact(text)
        .map_err(|e| invalid(format!("{noun} {shown}: {e}"), example.to_string()))
}

/// Reads `sandbox.limits.cpus` as `docker run --cpus` takes it (`1.5`,
/// `0.25`, `2`), exactly, into thousandths of a CPU: from
/// [`MIN_CPU_MILLIS`] to [`MAX_CPU_MILLIS`].
pub(crate) fn parse_cpus(text: &str) -> Result<u32, InvalidValue> {
    let cpus = parse_decimal(text, &CPUS)?;
    // At most three decimals, so this is a whole number.
    let millis = (cpus * Decimal::ONE_THOUSAND).to_u32();
    match millis {
        Some(m) if (MIN_CPU_MILLIS..=MAX_CPU_MILLIS).contains(&m) => Ok(m),
        _ => Err(invalid(
            format!("cpus {} is outside 0.01 to 1024", show(text)),
            "write a number of CPUs from 0.01 (a hundredth of one CPU) to 1024, e.g. 1.5"
                .to_string(),
        )),
    }
}

/// The units `sandbox.limits.memory` takes, as `docker run --memory` does:
/// 1024-based, one letter, any case.
const MEMORY_UNITS: [(char, u64); 4] = [('g', 1 << 30), ('m', 1 << 20), ('k', 1 << 10), ('b', 1)];

/// A size field: what it is called in messages, its least value, and what
/// to say when it is below.
struct SizeField {
    noun: &'static str,
    min: u64,
    below: &'static str,
    help: &'static str,
}

const MEMORY: SizeField = SizeField {
    noun: "memory",
    min: MIN_MEMORY_BYTES,
    below: "is below Docker's minimum of 6m",
    help: "write at least 6m; an agent usually needs hundreds of megabytes, e.g. 512m",
};

const TMPFS: SizeField = SizeField {
    noun: "size",
    min: MIN_TMPFS_BYTES,
    below: "is below 1m",
    help: "write at least 1m, e.g. 256m or 2g",
};

/// Reads `sandbox.limits.memory` as `docker run --memory` takes it: a
/// positive whole number with an optional unit `b`, `k`, `m` or `g`
/// (1024-based, any case; no unit means bytes), at least
/// [`MIN_MEMORY_BYTES`].
pub(crate) fn parse_memory(text: &str) -> Result<u64, InvalidValue> {
    parse_size(&MEMORY, text)
}

/// Reads a `sandbox.tmpfs` size, written as `sandbox.limits.memory` is, at
/// least [`MIN_TMPFS_BYTES`].
pub(crate) fn parse_tmpfs(text: &str) -> Result<u64, InvalidValue> {
    parse_size(&TMPFS, text)
}

fn parse_size(field: &SizeField, text: &str) -> Result<u64, InvalidValue> {
    let noun = field.noun;
    let shown = show(text);
    let lower = text.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (number, suffix) = lower.split_at(split);
    let unit = match suffix.chars().next() {
        None => Some(1),
        Some(c) if suffix.len() == 1 => MEMORY_UNITS.iter().find(|u| u.0 == c).map(|u| u.1),
        Some(_) => None,
    };
    let Some(unit) = unit.filter(|_| !number.is_empty()) else {
        return Err(size_spelling(noun, &shown, number, suffix));
    };
    if let Some((whole, frac)) = number.split_once('.') {
        let help = exact_bytes(whole, frac, unit).map_or_else(
            || "write a whole number with a smaller unit, e.g. 1536m for 1.5g".to_string(),
            |bytes| format!("write {}", docker_size(bytes)),
        );
        return Err(invalid(
            format!("{noun} {shown} is not a whole number"),
            help,
        ));
    }
    if number.len() > 1 && number.starts_with('0') {
        let trimmed = number.trim_start_matches('0');
        return Err(invalid(
            format!("{noun} {shown} has a leading zero"),
            format!(
                "write {}{suffix}",
                if trimmed.is_empty() { "0" } else { trimmed }
            ),
        ));
    }
    let bytes = number.parse::<u64>().ok().and_then(|n| n.checked_mul(unit));
    match bytes {
        Some(b) if b >= field.min => Ok(b),
        Some(_) => Err(invalid(
            format!("{noun} {shown} {}", field.below),
            field.help.to_string(),
        )),
        None => Err(invalid(
            format!("{noun} {shown} is too large"),
            "write a size that fits in 64 bits, e.g. 64g".to_string(),
        )),
    }
}

/// Why `number` + `suffix` is not a size, and what to write.
fn size_spelling(noun: &str, shown: &str, number: &str, suffix: &str) -> InvalidValue {
    let units = "Docker's units are b, k, m and g, each 1024-based";
    let any = || format!("write a whole number with an optional unit, e.g. 512m or 2g; {units}");
    let help = match suffix {
        _ if number.is_empty() => any(),
        "kb" | "kib" | "mb" | "mib" | "gb" | "gib" => {
            format!("write {number}{}; {units}", &suffix[..1])
        }
        "t" | "tb" | "tib" => match number.parse::<u64>().ok().and_then(|n| n.checked_mul(1024)) {
            Some(gigabytes) => format!("write {gigabytes}g; {units}"),
            None => any(),
        },
        _ => any(),
    };
    invalid(format!("{noun} {shown} is not a size"), help)
}

/// `whole.frac` × `unit` when that is a whole number of bytes.
fn exact_bytes(whole: &str, frac: &str, unit: u64) -> Option<u64> {
    if frac.len() > 18 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
    let whole = if whole.is_empty() {
        0
    } else {
        whole.parse::<u128>().ok()?
    };
    let frac = if frac.is_empty() {
        0
    } else {
        frac.parse::<u128>().ok()?
    };
    let scaled = whole
        .checked_mul(scale)?
        .checked_add(frac)?
        .checked_mul(u128::from(unit))?;
    scaled
        .is_multiple_of(scale)
        .then(|| u64::try_from(scaled / scale).ok())
        .flatten()
        .filter(|b| *b > 0)
}

/// `bytes` in the largest unit that divides it: 1536m, 2g, 100000.
fn docker_size(bytes: u64) -> String {
    MEMORY_UNITS
        .iter()
        .find(|(_, size)| *size > 1 && bytes.is_multiple_of(*size))
        .map_or_else(
            || bytes.to_string(),
            |(unit, size)| format!("{}{unit}", bytes / size),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames() {
        for ok in [
            "api.groq.com",
            "a.b",
            "xn--bcher-kva.example",
            "a-1.example.com",
        ] {
            assert!(Hostname::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "API.groq.com",
            "api.groq.com.",
            "*.groq.com",
            "https://api.groq.com",
            "api.groq.com:443",
            "api.groq.com/v1",
            "api groq.com",
            " api.groq.com",
            "1.1.1.1",
            "127.1",
            "2130706433",
            "0x7f000001",
            "0x7f.0.0.1",
            "010.0.0.1",
            "foo.0x1f",
            "::1",
            "[::1]",
            "2606:4700:4700::1111",
            "[2606:4700::1111]:443",
            "localhost",
            "intranet",
            "a..b",
            ".a.b",
            "-a.b",
            "a-.b",
            "a_b.com",
            "bücher.de",
            "a.b\u{0}",
        ] {
            assert!(Hostname::new(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            Hostname::new("API.Groq.com").unwrap_err().help.unwrap(),
            "write it in lower case: `api.groq.com`"
        );
        assert!(
            Hostname::new("1.1.1.1")
                .unwrap_err()
                .message
                .contains("IP address")
        );
    }

    #[test]
    fn urls() {
        let u = HttpUrl::new("https://mcp.accounting.internal/mcp?x=1").unwrap();
        assert_eq!(u.scheme(), Scheme::Https);
        assert_eq!(u.host(), &UrlHost::Domain("mcp.accounting.internal".into()));
        assert_eq!(u.port_or_default(), 443);
        assert_eq!(u.path_and_query(), "/mcp?x=1");
        for ok in [
            "http://127.0.0.1:8080/mcp",
            "http://localhost:3000",
            "http://[::1]:9000/x",
            "https://[2001:db8::1]/",
            "https://203.0.113.7:8443/mcp",
            "https://mcp",
        ] {
            assert!(HttpUrl::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "mcp.example.com",
            "ftp://x.example.com",
            "HTTPS://x.example.com",
            "http://mcp.example.com/",
            "http://10.0.0.1/",
            "https://user:pw@x.example.com/",
            "https://x.example.com:0/",
            "https://x.example.com:99999/",
            "https://x.example.com:/",
            "https:///path",
            "https://X.example.com/",
            "https://x.example.com/a b",
            "https://x.example.com/#frag",
            "https://x.example.com\\evil.com",
            "https://0x7f.1/",
            "https://x.example.com/%zz",
            "https://[::1",
        ] {
            assert!(HttpUrl::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LocalHost",
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "localhost.",
            "10.0.0.1",
            "0x7f.1",
            "[::2]",
            "[localhost]",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert!(HttpUrl::new("http://127.1.2.3:1/").unwrap().is_loopback());
        assert!(!HttpUrl::new("https://[::2]/").unwrap().is_loopback());
    }

    #[test]
    fn server_ids_and_env_vars() {
        assert_eq!(
            ServerId::new("accounting").unwrap().env_var(),
            "CONSTLE_MCP_ACCOUNTING_URL"
        );
        assert_eq!(
            ServerId::new("my-srv_2").unwrap().env_var(),
            "CONSTLE_MCP_MY_SRV_2_URL"
        );
        for bad in ["", "Acc", "a.b", "a b", &"x".repeat(33)] {
            assert!(ServerId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_names() {
        for ok in ["A", "_x", "API_TOKEN2"] {
            assert!(EnvVarName::new(ok).is_ok());
        }
        for bad in ["", "1A", "A-B", "A B", "É"] {
            assert!(EnvVarName::new(bad).is_err());
        }
    }

    #[test]
    fn tool_names() {
        assert!(ToolName::new("pay_invoice").is_ok());
        assert!(ToolName::new("ns/tool.v2").is_ok());
        for bad in ["", " x", "x ", "a\u{7}b", "a\nb"] {
            assert!(ToolName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn method_names() {
        for ok in [
            "resources/read",
            "sampling/createMessage",
            "x",
            &"m".repeat(128),
        ] {
            assert!(MethodName::new(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            " resources/read",
            "resources/read ",
            "a b",
            "a\tb",
            "a\u{7f}b",
            "résumé",
            "tools/\u{200b}call",
            &"m".repeat(129),
        ] {
            assert!(MethodName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn amounts_are_exact() {
        let a = parse_amount("0.1").unwrap();
        let b = parse_amount("0.2").unwrap();
        assert_eq!(a + b, parse_amount("0.3").unwrap());
        assert_eq!(a.to_string(), "0.1");
        let big = parse_amount("12345678901234567.89").unwrap();
        assert_eq!(big.to_string(), "12345678901234567.89");
        assert_eq!(
            big,
            Decimal::from_i128_with_scale(1_234_567_890_123_456_789, 2)
        );
        assert_eq!(parse_amount("5.00").unwrap().scale(), 2);
        assert_eq!(parse_amount("0").unwrap(), Decimal::ZERO);
        for bad in [
            "",
            "-1",
            "-0.5",
            "1e3",
            "1E3",
            ".inf",
            "-.inf",
            ".nan",
            "abc",
            "$5",
            "1,000",
            "05",
            ".5",
            "5.",
            "+5",
            "1_000",
            " 5",
            "0x10",
            "1234567890123456789",
            "0.12345678901",
        ] {
            assert!(parse_amount(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            parse_amount("1e3")
                .unwrap_err()
                .help
                .unwrap()
                .contains("exponent")
        );
        assert!(parse_amount("-1").unwrap_err().message.contains("negative"));
    }
}

/// A Redis URL, for state several machines share: `spending.ledger` (spend
/// totals) and `a2a.replay` (seen message ids). `redis://`, `rediss://`
/// (TLS), or `redis+unix://` / `unix://` for a local socket. Checked here
/// only for shape; the Redis client reads the rest.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedisUrl(String);

/// The schemes a [`RedisUrl`] may have.
pub const REDIS_SCHEMES: [&str; 4] = ["redis", "rediss", "redis+unix", "unix"];

impl RedisUrl {
    /// Parses and checks the URL written in the Agentfile field `field`.
    pub fn new(field: &str, s: &str) -> Result<RedisUrl, InvalidValue> {
        let help = || "write a Redis URL, e.g. redis://state.internal:6379/0".to_string();
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(invalid(
                format!("{field} {} is not a URL", show_url(s)),
                help(),
            ));
        };
        if !REDIS_SCHEMES.contains(&scheme) {
            return Err(invalid(
                format!(
                    "{field} {} is not a Redis URL (schemes: {})",
                    show_url(s),
                    REDIS_SCHEMES.join(", ")
                ),
                help(),
            ));
        }
        if rest.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                format!(
                    "{field} {} has no address, or has spaces or control characters",
                    show_url(s)
                ),
                help(),
            ));
        }
        Ok(RedisUrl(s.to_owned()))
    }

    /// The URL as written (it may hold a password: never print it).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the URL carries a password or another secret (in its user
    /// information, or `pass=` in the query of a `redis+unix://` URL),
    /// which then sits in the Agentfile in clear text.
    pub fn carries_secret(&self) -> bool {
        constle_redact::has_secret(&self.0)
    }

    /// The URL with its secrets masked, for messages: the rule every URL
    /// Constle shows follows ([`constle_redact::url`]).
    pub fn redacted(&self) -> String {
        constle_redact::url(&self.0)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&self.redacted()).finish()
    }
}
