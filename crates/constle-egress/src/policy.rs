//! What the proxy lets through: [`EgressPolicy`], built from the Agentfile.

use constle_manifest::{Egress, Hostname, Network};

/// The egress policy of one run.
///
/// Build it with [`EgressPolicy::from_network`]; `egress: none` has no
/// policy because it has no proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Restricted (only `allowed_hosts`) or open (any public host).
    pub mode: Mode,
    /// The names the agent may reach on port 443 in [`Mode::Restricted`].
    /// Ignored in [`Mode::Open`]. Empty in restricted mode: nothing is
    /// allowed. Duplicates are harmless (written once).
    pub allowed_hosts: Vec<Hostname>,
}

/// `sandbox.network.egress`, minus `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// CONNECT to port 443 of a name in `allowed_hosts`, whose addresses are
    /// all public.
    Restricted,
    /// CONNECT to port 443 of any name whose addresses are all public. Raw
    /// IP destinations and internal addresses are still refused.
    Open,
}

impl Mode {
    /// The Agentfile spelling: `restricted` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Restricted => "restricted",
            Mode::Open => "open",
        }
    }
}

impl EgressPolicy {
    /// The policy for `sandbox.network`, or `None` for `egress: none`: then
    /// the caller starts no proxy and the agent has no network.
    pub fn from_network(network: &Network) -> Option<EgressPolicy> {
        let mode = match network.egress {
            Egress::None => return None,
            Egress::Restricted => Mode::Restricted,
            Egress::Open => Mode::Open,
        };
        Some(EgressPolicy {
            mode,
            allowed_hosts: network.allowed_hosts.clone(),
        })
    }

    /// A restricted policy allowing exactly `hosts`.
    pub fn restricted(hosts: impl IntoIterator<Item = Hostname>) -> EgressPolicy {
        EgressPolicy {
            mode: Mode::Restricted,
            allowed_hosts: hosts.into_iter().collect(),
        }
    }

    /// An open policy.
    pub fn open() -> EgressPolicy {
        EgressPolicy {
            mode: Mode::Open,
            allowed_hosts: Vec::new(),
        }
    }
}
