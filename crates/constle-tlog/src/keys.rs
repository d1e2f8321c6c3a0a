//! A witness's signing key: the secret half of a [`WitnessKey`], which
//! [`cosign`](crate::cosign) signs with.

use constle_identity::SigningIdentity;
use constle_identity::ed25519_dalek::Signature;
use constle_vkey::{KeyError, WitnessKey};

/// A witness's signing key and name: what [`cosign`](crate::cosign) needs.
/// Not `Debug`, not `Clone`: it holds the secret.
pub struct WitnessSigner {
    public: WitnessKey,
    identity: SigningIdentity,
}

impl WitnessSigner {
    /// The witness named `name` signing with `identity`.
    ///
    /// # Errors
    ///
    /// [`KeyError::InvalidName`] for a name a note cannot carry.
    pub fn new(name: &str, identity: SigningIdentity) -> Result<WitnessSigner, KeyError> {
        Ok(WitnessSigner {
            public: WitnessKey::new(name, identity.did())?,
            identity,
        })
    }

    /// The public half, to give to those who check the cosignatures.
    pub fn public(&self) -> &WitnessKey {
        &self.public
    }

    pub(crate) fn sign(&self, message: &[u8]) -> Signature {
        self.identity.sign(message)
    }
}
