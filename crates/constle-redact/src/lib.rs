//! What a URL may show: the same URL with its secrets replaced by `***`.
//!
//! A URL from the Agentfile or the environment can carry a secret in two
//! places: its user information (`redis://:PASSWORD@host`,
//! `https://TOKEN@host`) and its query or fragment
//! (`redis+unix:///run/redis.sock?pass=…`, `https://host/mcp?api_key=…`).
//! [`url`] masks both, and every message, summary, log line, JSON line and
//! audit entry that shows such a URL shows `url(text)`, never the text.
//! [`has_secret`] says whether there was anything to mask, for the
//! warnings that say an Agentfile holds a secret in clear text.
//!
//! [`is_loopback_host`] is the other rule every crate that reads a URL
//! shares: plain `http` may go to loopback hosts only.
//!
//! The rules are conservative: masking too much costs a less useful
//! message, masking too little leaks.
//!
//! - **User information** is everything after `://` (or from the start,
//!   without one) up to the last `@` before the query and fragment, so a
//!   password with an unencoded `/` or `@` is masked whole. `user:password`
//!   keeps `user:`; anything else (`TOKEN@`) becomes `***`.
//! - **Parameters** of the query and the fragment (`name=value`, separated
//!   by `&` or `;`) whose name, percent-decoded and in any case, contains
//!   one of [`SECRET_WORDS`] keep their name and have their value masked:
//!   `pass=***`, `api_key=***`, `X-Amz-Signature=***`.
//!
//! ```
//! assert_eq!(
//!     constle_redact::url("redis+unix:///run/redis.sock?db=1&pass=hunter2"),
//!     "redis+unix:///run/redis.sock?db=1&pass=***"
//! );
//! assert_eq!(
//!     constle_redact::url("redis://ledger:hunter2@state.internal:6379/0"),
//!     "redis://ledger:***@state.internal:6379/0"
//! );
//! assert!(!constle_redact::has_secret("https://mcp.example.com/mcp?page=2"));
//! ```

#![forbid(unsafe_code)]

mod loopback;

pub use loopback::is_loopback_host;

/// What a secret is replaced by.
pub const MASK: &str = "***";

/// A query or fragment parameter whose name contains one of these (in any
/// case, after percent-decoding) holds a secret: `pass` also catches
/// `password` and `passwd`, `key` catches `api_key` and `apikey`, `sig`
/// catches `signature` and Azure's `sig`, `auth` catches `auth_token`.
pub const SECRET_WORDS: [&str; 8] = [
    "pass",
    "pwd",
    "token",
    "key",
    "secret",
    "auth",
    "sig",
    "credential",
];

/// What separates the parts after the path: query, fragment, parameters.
const DELIMITERS: [char; 4] = ['?', '#', '&', ';'];

/// `text` with its user information and the values of its secret-looking
/// parameters replaced by [`MASK`]; anything else as written. Works on any
/// text, URL or not, so a malformed URL in an error message is masked too.
pub fn url(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    let (authority_and_path, tail) = rest.split_at(rest.find(['?', '#']).unwrap_or(rest.len()));
    let shown = match authority_and_path.rfind('@') {
        Some(at) => format!(
            "{}{}",
            user_info(&authority_and_path[..at]),
            &authority_and_path[at..]
        ),
        None => authority_and_path.to_owned(),
    };
    format!("{scheme}{shown}{}", parameters(tail))
}

/// Whether [`url`] masks anything in `text`.
pub fn has_secret(text: &str) -> bool {
    url(text) != text
}

fn user_info(info: &str) -> String {
    match info.split_once(':') {
        Some((user, _)) if !user.contains('/') => format!("{user}:{MASK}"),
        _ => MASK.to_owned(),
    }
}

fn parameters(tail: &str) -> String {
    tail.split_inclusive(DELIMITERS)
        .map(|piece| {
            let (parameter, delimiter) = match piece.char_indices().last() {
                Some((at, c)) if DELIMITERS.contains(&c) => piece.split_at(at),
                _ => (piece, ""),
            };
            match parameter.split_once('=') {
                Some((name, _)) if is_secret_name(name) => format!("{name}={MASK}{delimiter}"),
                _ => piece.to_owned(),
            }
        })
        .collect()
}

fn is_secret_name(name: &str) -> bool {
    let name = percent_decoded(name).to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// `application/x-www-form-urlencoded` decoding, as clients read parameter
/// names: `%70ass` and `pa%73s` are `pass`; `+` is a space.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_wherever_a_url_carries_them() {
        for (written, shown) in [
            // User information.
            (
                "redis://user:S3CRET@ledger.example:6379/0",
                "redis://user:***@ledger.example:6379/0",
            ),
            ("rediss://:S3CRET@h#insecure", "rediss://:***@h#insecure"),
            (
                "https://S3CRET@mcp.example.com/mcp",
                "https://***@mcp.example.com/mcp",
            ),
            ("redis://:S3/CR@ET@h/0", "redis://:***@h/0"),
            ("redis://S3/CRET@h/0", "redis://***@h/0"),
            ("user:S3CRET@h", "user:***@h"),
            // Query and fragment parameters, in any case, percent-encoded.
            (
                "redis+unix:///run/redis.sock?db=1&pass=S3CRET",
                "redis+unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/r.sock?PASS=S3CRET&db=2",
                "unix:///run/r.sock?PASS=***&db=2",
            ),
            ("unix:///s?pa%73s=S3CRET", "unix:///s?pa%73s=***"),
            (
                "unix:///s?password=S3CRET;db=1",
                "unix:///s?password=***;db=1",
            ),
            (
                "https://h/mcp?api_key=S3CRET&page=2",
                "https://h/mcp?api_key=***&page=2",
            ),
            (
                "https://h/mcp?access+token=S3CRET",
                "https://h/mcp?access+token=***",
            ),
            (
                "https://h/p?X-Amz-Signature=S3CRET",
                "https://h/p?X-Amz-Signature=***",
            ),
            (
                "https://h/p?client_secret=S3CRET",
                "https://h/p?client_secret=***",
            ),
            (
                "https://h/p#access_token=S3CRET",
                "https://h/p#access_token=***",
            ),
            ("https://h/p?pass=S3CRET=more", "https://h/p?pass=***"),
            // Both at once.
            (
                "redis://u:S3CRET@h/0?pass=S3CRET",
                "redis://u:***@h/0?pass=***",
            ),
        ] {
            assert_eq!(url(written), shown, "{written}");
            assert!(has_secret(written), "{written}");
            assert!(!url(written).contains("S3CRET"), "{written}");
        }
    }

    #[test]
    fn urls_without_secrets_are_shown_as_written() {
        for written in [
            "redis://ledger.example:6379/0",
            "redis+unix:///run/redis.sock?db=1",
            "rediss://h#insecure",
            "https://mcp.example.com/mcp?page=2&limit=%41",
            "https://h/mcp?",
            "not a URL at all",
            "",
            "unix:///s?user=ann",
        ] {
            assert_eq!(url(written), written);
            assert!(!has_secret(written), "{written}");
        }
    }
}
