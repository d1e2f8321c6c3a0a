//! Findings about an Agentfile: [`Diagnostic`], its [`Severity`] and [`Location`],
//! and the one place they are rendered as text.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// How serious a [`Diagnostic`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The Agentfile is refused.
    Error,
    /// The Agentfile is accepted, but something in it probably does not do what
    /// its author expects.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// Where in a file a [`Diagnostic`] points. Lines and columns start at 1;
/// columns count characters, not bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    /// The Agentfile, as the caller named it.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

/// One finding about an Agentfile: an error that refuses it or a warning.
///
/// `code` is stable and snake_case (for example `unknown_field`,
/// `duplicate_key`, `invalid_did_key`); tools may match on it. `message`
/// says what is wrong and `help`, when present, what to write instead.
///
/// [`Display`](fmt::Display) renders it the way the CLI prints it:
///
/// ```text
/// agent.yaml:12:5: error[unknown_field]: unknown field `alowed_hosts` in sandbox.network
///   help: did you mean `allowed_hosts`? valid fields: allowed_hosts, egress
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable snake_case identifier of the kind of finding.
    pub code: &'static str,
    /// What is wrong, in one sentence.
    pub message: String,
    /// What to write instead, when there is something to suggest.
    pub help: Option<String>,
    /// Where the offending key or value is; `None` only when there is no
    /// position to point at (the file could not be read).
    pub location: Option<Location>,
}

impl Diagnostic {
    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            write!(f, "{location}: ")?;
        }
        write!(f, "{}[{}]: {}", self.severity, self.code, self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Every diagnostic code this crate emits, with its severity. Codes are
/// stable: tools may match on them. `docs/agentfile.md` explains each.
pub const CODES: &[(&str, Severity)] = &[
    ("io_error", Severity::Error),
    ("input_too_large", Severity::Error),
    ("invalid_utf8", Severity::Error),
    ("yaml_syntax", Severity::Error),
    ("directive_not_allowed", Severity::Error),
    ("multiple_documents", Severity::Error),
    ("empty_document", Severity::Error),
    ("nesting_too_deep", Severity::Error),
    ("too_many_nodes", Severity::Error),
    ("anchor_not_allowed", Severity::Error),
    ("alias_not_allowed", Severity::Error),
    ("merge_key_not_allowed", Severity::Error),
    ("tag_not_allowed", Severity::Error),
    ("invalid_key", Severity::Error),
    ("duplicate_key", Severity::Error),
    ("unknown_field", Severity::Error),
    ("missing_field", Severity::Error),
    ("invalid_type", Severity::Error),
    ("invalid_bool", Severity::Error),
    ("invalid_integer", Severity::Error),
    ("out_of_range", Severity::Error),
    ("invalid_amount", Severity::Error),
    ("invalid_limit", Severity::Error),
    ("invalid_tmpfs", Severity::Error),
    ("unknown_variant", Severity::Error),
    ("invalid_name", Severity::Error),
    ("invalid_did_key", Severity::Error),
    ("invalid_command", Severity::Error),
    ("invalid_path", Severity::Error),
    ("workdir_holds_agentfile", Severity::Error),
    ("rootfs_holds_agentfile", Severity::Error),
    ("home_holds_agentfile", Severity::Error),
    ("home_overlaps", Severity::Error),
    ("invalid_env_name", Severity::Error),
    ("reserved_env_name", Severity::Error),
    ("invalid_string", Severity::Error),
    ("invalid_hostname", Severity::Error),
    ("duplicate_host", Severity::Error),
    ("egress_none_with_hosts", Severity::Error),
    ("invalid_server_id", Severity::Error),
    ("duplicate_server_id", Severity::Error),
    ("server_id_collision", Severity::Error),
    ("too_many_servers", Severity::Error),
    ("invalid_url", Severity::Error),
    ("url_and_command", Severity::Error),
    ("stdio_field_on_url_server", Severity::Error),
    ("workdir_shared", Severity::Error),
    ("insecure_url", Severity::Error),
    ("empty_tools", Severity::Error),
    ("invalid_tool_name", Severity::Error),
    ("duplicate_tool", Severity::Error),
    ("unknown_priced_tool", Severity::Error),
    ("invalid_method_name", Severity::Error),
    ("duplicate_method", Severity::Error),
    ("invalid_header_name", Severity::Error),
    ("reserved_header_name", Severity::Error),
    ("duplicate_header", Severity::Error),
    ("invalid_auth_scheme", Severity::Error),
    ("duplicate_entry", Severity::Error),
    ("missing_approver_pubkey", Severity::Error),
    ("approvers_conflict", Severity::Error),
    ("quorum_without_approvers", Severity::Error),
    ("duplicate_approver", Severity::Error),
    ("invalid_label", Severity::Error),
    ("invalid_pin", Severity::Error),
    ("invalid_socket_addr", Severity::Error),
    ("duplicate_peer", Severity::Error),
    ("a2a_requires_identity", Severity::Error),
    ("invalid_deployment", Severity::Error),
    ("invalid_witness_key", Severity::Error),
    ("duplicate_witness", Severity::Error),
    ("quorum_without_witnesses", Severity::Error),
    ("witnesses_require_identity", Severity::Error),
    ("witnesses_require_deployment", Severity::Error),
    ("invalid_provider_id", Severity::Error),
    ("duplicate_provider_id", Severity::Error),
    ("provider_id_collision", Severity::Error),
    ("duplicate_provider_api", Severity::Error),
    ("empty_models", Severity::Error),
    ("invalid_model_name", Severity::Error),
    ("duplicate_model", Severity::Error),
    ("invalid_value", Severity::Error),
    ("internal_error", Severity::Error),
    ("too_many_errors", Severity::Error),
    ("gate_matches_no_tool", Severity::Warning),
    ("gates_disabled", Severity::Warning),
    ("gates_nothing", Severity::Warning),
    ("webhook_url_unset", Severity::Warning),
    ("webhook_url_invalid", Severity::Warning),
    ("on_timeout_proceed", Severity::Warning),
    ("egress_open", Severity::Warning),
    ("invalid_redis_url", Severity::Error),
    ("redis_password_in_agentfile", Severity::Warning),
    ("url_carries_secret", Severity::Warning),
    ("spend_caps_unmetered", Severity::Warning),
    ("method_always_allowed", Severity::Warning),
    ("header_secret_unset", Severity::Warning),
    ("header_secret_invalid", Severity::Warning),
    ("env_secret_ref_unset", Severity::Warning),
    ("headers_on_stdio_server", Severity::Error),
    ("llm_host_allowed", Severity::Warning),
];

/// A 1-based position inside the file being parsed; turned into a
/// [`Location`] once the path is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    /// The start of the file.
    pub const START: Pos = Pos { line: 1, column: 1 };
}

/// Collects diagnostics for one file.
///
/// Positions whose value was already reported as malformed are "poisoned":
/// later checks that see the placeholder put in its place stay quiet there,
/// so one mistake produces one error.
pub(crate) struct Sink {
    path: PathBuf,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    poisoned: HashSet<Pos>,
}

/// The most errors reported for one file; past it one `too_many_errors`
/// error is added and the rest are dropped.
pub(crate) const MAX_ERRORS: usize = 100;

impl Sink {
    pub fn new(path: &Path) -> Sink {
        Sink {
            path: path.to_path_buf(),
            errors: Vec::new(),
            warnings: Vec::new(),
            poisoned: HashSet::new(),
        }
    }

    fn location(&self, pos: Pos) -> Location {
        Location {
            path: self.path.clone(),
            line: pos.line,
            column: pos.column,
        }
    }

    /// Whether the error budget is spent.
    pub fn full(&self) -> bool {
        self.errors.len() >= MAX_ERRORS
    }

    /// Records that reporting stopped at `pos` because the error budget is
    /// spent (once).
    pub fn overflow(&mut self, pos: Pos) {
        if self.errors.len() == MAX_ERRORS {
            self.push_error("too_many_errors", pos, String::new(), None);
        }
    }

    /// Marks a position as already reported.
    pub fn poison(&mut self, pos: Pos) {
        self.poisoned.insert(pos);
    }

    /// Whether a position was already reported as malformed.
    pub fn is_poisoned(&self, pos: Pos) -> bool {
        self.poisoned.contains(&pos)
    }

    /// Records an error. Errors at a poisoned position are dropped.
    pub fn error(
        &mut self,
        code: &'static str,
        pos: Pos,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        if self.poisoned.contains(&pos) {
            return;
        }
        self.push_error(code, pos, message.into(), help);
    }

    /// Records an error and poisons its position.
    pub fn error_poison(
        &mut self,
        code: &'static str,
        pos: Pos,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        self.error(code, pos, message, help);
        self.poison(pos);
    }

    fn push_error(&mut self, code: &'static str, pos: Pos, message: String, help: Option<String>) {
        debug_assert!(
            CODES.contains(&(code, Severity::Error)),
            "error code {code} is not listed in CODES"
        );
        if self.errors.len() > MAX_ERRORS {
            return;
        }
        if self.errors.len() == MAX_ERRORS {
            let location = self.location(pos);
            self.errors.push(Diagnostic {
                severity: Severity::Error,
                code: "too_many_errors",
                message: format!("more than {MAX_ERRORS} errors; the rest are not shown"),
                help: Some("fix the errors above and validate again".to_string()),
                location: Some(location),
            });
            return;
        }
        let location = self.location(pos);
        self.errors.push(Diagnostic {
            severity: Severity::Error,
            code,
            message,
            help,
            location: Some(location),
        });
    }

    /// Records a warning.
    pub fn warning(
        &mut self,
        code: &'static str,
        pos: Pos,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        debug_assert!(
            CODES.contains(&(code, Severity::Warning)),
            "warning code {code} is not listed in CODES"
        );
        let location = self.location(pos);
        self.warnings.push(Diagnostic {
            severity: Severity::Warning,
            code,
            message: message.into(),
            help,
            location: Some(location),
        });
    }

    /// Sorts both lists by position, keeping the order of findings at the same
    /// position, and returns them.
    pub fn finish(mut self) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
        let key = |d: &Diagnostic| {
            d.location
                .as_ref()
                .map(|l| (l.line, l.column))
                .unwrap_or((0, 0))
        };
        // `too_many_errors` stays last whatever its position.
        let overflow = self
            .errors
            .iter()
            .position(|d| d.code == "too_many_errors")
            .map(|i| self.errors.remove(i));
        self.errors.sort_by_key(key);
        self.errors.extend(overflow);
        self.warnings.sort_by_key(key);
        (self.errors, self.warnings)
    }
}

/// Renders user-supplied text for a message: in backticks, with control
/// characters, quotes and other invisible characters escaped, and shortened
/// past 80 characters. Agentfile text never reaches a terminal raw.
pub(crate) fn show(text: &str) -> String {
    format!("`{}`", escape(text))
}

/// [`show`] for text that is, or may be, a URL: its user information and
/// secret-looking parameters masked first ([`constle_redact::url`]), so a
/// diagnostic never repeats a secret written in the Agentfile.
pub(crate) fn show_url(text: &str) -> String {
    show(&constle_redact::url(text))
}

/// [`show`] without the backticks.
pub(crate) fn escape(text: &str) -> String {
    const LIMIT: usize = 80;
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == LIMIT {
            out.push('…');
            break;
        }
        if c == '`' {
            out.push_str("\\`");
        } else if c.is_control() || is_invisible(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that render as nothing or move the cursor oddly: format
/// characters (bidi overrides, zero-width joiners) and odd spaces.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180E}' | '\u{2000}'..='\u{200F}' | '\u{2028}'..='\u{202F}' | '\u{205F}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}'
        | '\u{E0000}'..='\u{E007F}')
}

/// The candidate closest to `input`, if it is close enough to be a likely
/// typo: same text ignoring case, or within an edit distance of about a
/// third of its length.
pub(crate) fn did_you_mean<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = input.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let distance = if candidate.eq_ignore_ascii_case(input) {
            0
        } else {
            edit_distance(&lower, &candidate.to_ascii_lowercase())
        };
        let limit = (candidate.chars().count().max(3)) / 3;
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance with adjacent transpositions counted as one edit.
/// Inputs past 64 characters are not compared (returns `usize::MAX`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len() > 64 || b.len() > 64 {
        return usize::MAX;
    }
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = v;
        }
    }
    d[a.len() * width + b.len()]
}

/// "did you mean `x`? valid …: a, b, c" help text.
pub(crate) fn suggest(input: &str, what: &str, candidates: &[&str]) -> String {
    let list = candidates.join(", ");
    match did_you_mean(input, candidates.iter().copied()) {
        Some(best) => format!("did you mean `{best}`? valid {what}: {list}"),
        None => format!("valid {what}: {list}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_are_suggested() {
        let fields = ["allowed_hosts", "egress"];
        assert_eq!(
            did_you_mean("alowed_hosts", fields.iter().copied()),
            Some("allowed_hosts")
        );
        assert_eq!(
            did_you_mean("Allowed_Hosts", fields.iter().copied()),
            Some("allowed_hosts")
        );
        assert_eq!(
            did_you_mean("egrses", fields.iter().copied()),
            Some("egress")
        );
        assert_eq!(did_you_mean("ports", fields.iter().copied()), None);
    }

    #[test]
    fn show_escapes_control_and_invisible_characters() {
        assert_eq!(show("a\u{1b}[2Jb"), "`a\\u{1b}[2Jb`");
        assert_eq!(show("x\u{202e}y"), "`x\\u{202e}y`");
        assert_eq!(show("a`b"), "`a\\`b`");
        assert_eq!(show(&"x".repeat(100)).chars().count(), 83);
    }

    #[test]
    fn display_has_location_code_and_help() {
        let d = Diagnostic {
            severity: Severity::Error,
            code: "unknown_field",
            message: "unknown field `alowed_hosts` in sandbox.network".into(),
            help: Some("did you mean `allowed_hosts`?".into()),
            location: Some(Location {
                path: "agent.yaml".into(),
                line: 12,
                column: 5,
            }),
        };
        assert_eq!(
            d.to_string(),
            "agent.yaml:12:5: error[unknown_field]: unknown field `alowed_hosts` in sandbox.network\n  help: did you mean `allowed_hosts`?"
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["severity"], "error");
        assert_eq!(json["location"]["line"], 12);
    }
}
