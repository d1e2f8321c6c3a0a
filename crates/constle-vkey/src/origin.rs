//! The origin line: which log a checkpoint is of.
//!
//! A Constle log's origin is `<deployment>/constle/<agent>`, for example
//! `ci.example.com/constle/invoice-processor`:
//!
//! - `<deployment>` names the Constle installation: lowercase DNS labels
//!   (`a-z`, `0-9`, `-`, at most 63 bytes each, no leading or trailing `-`),
//!   separated by dots, at most 253 bytes. A name under a domain the operator
//!   controls keeps origins globally unique, which witnesses rely on: they
//!   keep one state per origin.
//! - `constle` marks the kind of log, so one deployment name can also carry
//!   other logs.
//! - `<agent>` is the agent's name from the Agentfile ([`Name`]): ASCII
//!   letters, digits, `-`, `_` and `.`.
//!
//! So an origin is a schema-less URL with neither spaces nor `+`, as
//! c2sp.org/tlog-checkpoint recommends, and a valid signed-note key name.
//! It is parsed back unambiguously: neither part contains `/`.

use std::fmt;

use constle_identity::Name;

use crate::error::OriginError;

/// The path segment between deployment and agent.
const KIND: &str = "constle";

/// A deployment's name: lowercase DNS labels joined by dots.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Deployment(String);

impl Deployment {
    /// Checks `name` against the rules in the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`OriginError::InvalidDeployment`] saying what is wrong.
    pub fn new(name: &str) -> Result<Deployment, OriginError> {
        let bad = |reason| OriginError::InvalidDeployment {
            deployment: name.to_owned(),
            reason,
        };
        if name.is_empty() || name.len() > 253 {
            return Err(bad("must be 1 to 253 bytes long"));
        }
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(bad("each dot-separated label must be 1 to 63 bytes long"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(bad("labels hold only lowercase a-z, digits and '-'"));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(bad("a label neither starts nor ends with '-'"));
            }
        }
        Ok(Deployment(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The origin of one agent's log: `<deployment>/constle/<agent>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    text: String,
    deployment: Deployment,
    agent: Name,
}

impl Origin {
    /// The origin of `agent`'s log in `deployment`.
    pub fn new(deployment: &Deployment, agent: &Name) -> Origin {
        Origin {
            text: format!("{deployment}/{KIND}/{agent}"),
            deployment: deployment.clone(),
            agent: agent.clone(),
        }
    }

    /// Reads an origin line.
    ///
    /// # Errors
    ///
    /// [`OriginError`] if it is not `<deployment>/constle/<agent>` with a
    /// valid deployment and agent name.
    pub fn parse(text: &str) -> Result<Origin, OriginError> {
        let not_ours = || OriginError::NotConstle {
            origin: text.to_owned(),
        };
        let (deployment, rest) = text.split_once('/').ok_or_else(not_ours)?;
        let agent = rest
            .strip_prefix(KIND)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(not_ours)?;
        let deployment = Deployment::new(deployment)?;
        let agent = Name::new(agent).map_err(|source| OriginError::InvalidAgent {
            origin: text.to_owned(),
            source,
        })?;
        Ok(Origin::new(&deployment, &agent))
    }

    /// The origin line's text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The deployment.
    pub fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// The agent.
    pub fn agent(&self) -> &Name {
        &self.agent
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let origin = Origin::parse("ci.example.com/constle/invoice-processor").unwrap();
        assert_eq!(origin.deployment().as_str(), "ci.example.com");
        assert_eq!(origin.agent().as_str(), "invoice-processor");
        assert_eq!(
            Origin::new(origin.deployment(), origin.agent()).as_str(),
            "ci.example.com/constle/invoice-processor"
        );
    }

    #[test]
    fn refuses_other_origins() {
        for bad in [
            "",
            "ci.example.com",
            "ci.example.com/constle",
            "ci.example.com/constle/",
            "ci.example.com/other/agent",
            "Ci.example.com/constle/agent",
            "ci..example.com/constle/agent",
            "-ci.example.com/constle/agent",
            "ci.example.com/constle/a/b",
            "ci.example.com/constle/a+b",
            "ci.example.com/constle/a b",
            "ci.example.com/constle/..",
            "ci example.com/constle/agent",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad:?}");
        }
    }
}
