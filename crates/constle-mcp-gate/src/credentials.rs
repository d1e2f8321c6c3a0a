//! The headers the gate adds to every request it sends its server
//! (`mcp.servers[].headers`): a bearer token, an API key. The agent never
//! holds them, so a compromised agent cannot send them anywhere else.
//!
//! Their values are read from the host variables the Agentfile names once,
//! when the gate is built, and kept only here, as header values marked
//! sensitive (the HTTP stack leaves them out of its `Debug` output and
//! would never index them in an HPACK table). [`Credentials`]' own `Debug`
//! shows names alone, and no error of the gate carries a value.
//!
//! Where they go: to the server's URL, and nowhere else. The gate follows
//! no redirect ([`crate::upstream`]): a `Location` pointing elsewhere is
//! neither followed nor relayed to the agent.
//!
//! Nor do they come back: a server may echo a credential it refuses
//! ("invalid token …"), and the agent must not read it there. Whatever the
//! gate would relay (a JSON body, an SSE event, a relayed header) is
//! searched for each secret, verbatim ([`Credentials::appear_in`]); where
//! one is found, the answer is not relayed. A secret the server transforms
//! (escapes, encodes, cuts) cannot be recognised.

use std::fmt;

use constle_manifest::McpServer;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::GateError;

/// The declared headers with their values, and the other secrets the
/// server holds that its answers must not carry to the agent (a stdio
/// server's environment from `env_secret_refs`).
pub(crate) struct Credentials {
    headers: Vec<Declared>,
    withheld: Vec<Box<[u8]>>,
}

struct Declared {
    name: HeaderName,
    value: HeaderValue,
    /// Where the variable's value starts in `value` (after a scheme).
    secret_from: usize,
}

impl Declared {
    fn secret(&self) -> &[u8] {
        &self.value.as_bytes()[self.secret_from..]
    }
}

impl Credentials {
    /// No headers: a transport that is no URL server's gets none.
    pub(crate) fn none() -> Credentials {
        Credentials {
            headers: Vec::new(),
            withheld: Vec::new(),
        }
    }

    /// Also refuses answers holding any of `secrets` (empty ones are
    /// skipped: they would be in every answer).
    pub(crate) fn withholding(mut self, secrets: impl IntoIterator<Item = String>) -> Credentials {
        let secrets = secrets.into_iter().filter(|s| !s.is_empty());
        self.withheld
            .extend(secrets.map(|s| s.into_bytes().into_boxed_slice()));
        self
    }

    /// `server`'s declared headers, each value read through `env` (host
    /// variable look-ups; `None`: unset) by the Agentfile's rule
    /// ([`constle_manifest::SecretHeader::value`]).
    pub(crate) fn resolve(
        server: &McpServer,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Credentials, GateError> {
        let headers = server.headers().iter().map(|declared| {
            let refused = |why: String| GateError::Header {
                name: declared.name.to_string(),
                why,
            };
            // The Agentfile's rules are stricter than the HTTP library's
            // (a token for the name; visible ASCII for the value), so the
            // conversions below are not expected to fail; if they did, the
            // run would not start.
            let name = HeaderName::from_bytes(declared.name.as_str().as_bytes())
                .map_err(|_| refused("the HTTP client refuses its name".into()))?;
            let text = declared.value(env).map_err(|e| refused(e.to_string()))?;
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                refused(format!(
                    "the HTTP client refuses the value of {}",
                    declared.value_secret_ref
                ))
            })?;
            value.set_sensitive(true);
            let secret_from = declared.scheme.as_ref().map_or(0, |s| s.as_str().len() + 1);
            Ok(Declared {
                name,
                value,
                secret_from,
            })
        });
        Ok(Credentials {
            headers: headers.collect::<Result<_, _>>()?,
            withheld: Vec::new(),
        })
    }

    /// Puts every declared header into `headers`, each exactly once.
    /// Nothing the agent sends is among them (no declared name is one the
    /// gate forwards), and `insert` would replace it if it were.
    pub(crate) fn add_to(&self, headers: &mut HeaderMap) {
        for declared in &self.headers {
            headers.insert(declared.name.clone(), declared.value.clone());
        }
    }

    /// Whether any secret (a header's variable's value, or one withheld)
    /// is in `bytes`.
    pub(crate) fn appear_in(&self, bytes: &[u8]) -> bool {
        let headers = self.headers.iter().map(Declared::secret);
        let withheld = self.withheld.iter().map(|s| &s[..]);
        headers
            .chain(withheld)
            .any(|secret| bytes.windows(secret.len()).any(|window| window == secret))
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field(
                "headers",
                &self.headers.iter().map(|d| &d.name).collect::<Vec<_>>(),
            )
            .field("withheld", &self.withheld.len())
            .finish()
    }
}
