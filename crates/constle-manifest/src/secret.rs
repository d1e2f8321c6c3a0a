//! A [`SecretHeader`]'s value and an [`LlmProvider`]'s key, read from the
//! host variable each names: the one rule for what `constle validate` warns
//! about and what `constle run` refuses to start with.
//!
//! The value is a secret. [`SecretHeaderError`] names the variable and what
//! is wrong with its value, never the value, nor any part or length of it.

use crate::model::{LlmProvider, SecretHeader};
use crate::values::EnvVarName;

/// Why a [`SecretHeader`] has no value to send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretHeaderError {
    /// The variable is not set.
    #[error("{0} is not set")]
    Unset(EnvVarName),
    /// The variable is set to the empty string.
    #[error("{0} is empty")]
    Empty(EnvVarName),
    /// The value cannot be sent in a header as it is.
    #[error(
        "the value of {0} cannot be sent in a header: it may hold only visible ASCII, with spaces or tabs between (no CR, LF or other control character, no leading or trailing whitespace)"
    )]
    NotHeaderText(EnvVarName),
}

impl SecretHeaderError {
    /// The variable the header's value comes from.
    pub fn variable(&self) -> &EnvVarName {
        match self {
            SecretHeaderError::Unset(var)
            | SecretHeaderError::Empty(var)
            | SecretHeaderError::NotHeaderText(var) => var,
        }
    }
}

impl SecretHeader {
    /// The header's value: the variable's value, after the scheme and one
    /// space when there is a scheme. `env` looks host variables up (`None`:
    /// unset).
    ///
    /// A value that could not be sent as it is is refused, not mended:
    /// stripping a trailing newline, say, would send a different secret
    /// than the one set. Refused: control characters (CR and LF would end
    /// the header and start another), anything outside ASCII, and
    /// whitespace at either end, which HTTP does not keep.
    pub fn value(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<String, SecretHeaderError> {
        let secret = read(&self.value_secret_ref, env)?;
        Ok(match &self.scheme {
            Some(scheme) => format!("{scheme} {secret}"),
            None => secret,
        })
    }
}

impl LlmProvider {
    /// The provider's key, which the gate sends in a header: the value of
    /// `key_secret_ref`, under the rules of [`SecretHeader::value`].
    pub fn key(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<String, SecretHeaderError> {
        read(&self.key_secret_ref, env)
    }
}

/// The value of `var`, when it can be sent in a header as it is.
fn read(
    var: &EnvVarName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, SecretHeaderError> {
    let secret = env(var.as_str()).ok_or_else(|| SecretHeaderError::Unset(var.clone()))?;
    if secret.is_empty() {
        return Err(SecretHeaderError::Empty(var.clone()));
    }
    if !is_header_text(&secret) {
        return Err(SecretHeaderError::NotHeaderText(var.clone()));
    }
    Ok(secret)
}

/// Visible ASCII, with spaces and tabs only between visible characters:
/// RFC 9110's field value without its obsolete non-ASCII text.
fn is_header_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    let visible = |b: &u8| b.is_ascii_graphic();
    bytes.first().is_some_and(visible)
        && bytes.last().is_some_and(visible)
        && bytes
            .iter()
            .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::{AuthScheme, HeaderName};

    fn header(scheme: Option<&str>) -> SecretHeader {
        SecretHeader {
            name: HeaderName::new("Authorization").unwrap(),
            scheme: scheme.map(|s| AuthScheme::new(s).unwrap()),
            value_secret_ref: EnvVarName::new("MCP_TOKEN").unwrap(),
        }
    }

    fn value_of(scheme: Option<&str>, set: Option<&str>) -> Result<String, SecretHeaderError> {
        let set = set.map(str::to_owned);
        header(scheme).value(&|name| (name == "MCP_TOKEN").then(|| set.clone()).flatten())
    }

    #[test]
    fn the_value_is_the_variables_after_the_scheme() {
        assert_eq!(
            value_of(Some("Bearer"), Some("t0k/en+=")).unwrap(),
            "Bearer t0k/en+="
        );
        assert_eq!(value_of(None, Some("k e\ty")).unwrap(), "k e\ty");
    }

    #[test]
    fn an_unusable_value_is_refused_naming_the_variable_only() {
        let var = || EnvVarName::new("MCP_TOKEN").unwrap();
        assert_eq!(value_of(None, None), Err(SecretHeaderError::Unset(var())));
        assert_eq!(
            value_of(None, Some("")),
            Err(SecretHeaderError::Empty(var()))
        );
        for bad in [
            "S3CRET\n",
            "S3CRET\r\nX-Injected: 1",
            "\nS3CRET",
            " S3CRET",
            "S3CRET\t",
            "S3\0CRET",
            "S3\u{7f}CRET",
            "S3CRÉT",
        ] {
            let err = value_of(Some("Bearer"), Some(bad)).unwrap_err();
            assert_eq!(err, SecretHeaderError::NotHeaderText(var()), "{bad:?}");
            assert!(!err.to_string().contains("S3"), "{err}");
            assert!(err.to_string().contains("MCP_TOKEN"), "{err}");
        }
    }
}
