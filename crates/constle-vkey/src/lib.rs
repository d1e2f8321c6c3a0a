//! Names and keys as C2SP signed notes write them, read strictly, in one
//! place for every reader:
//!
//! - [`Origin`] (`<deployment>/constle/<agent>`) and [`Deployment`]: which
//!   log a checkpoint is of, and the name of that log's key.
//! - [`LogKey`] and [`WitnessKey`]: verifier keys (*vkeys*),
//!   `<name>+<key ID>+<base64(type || key)>`, parsed with
//!   [`LogKey::from_vkey`] and [`WitnessKey::from_vkey`].
//!
//! The Agentfile's validation (`constle-manifest`: `audit.deployment`,
//! `audit.witnesses[].key`) and the transparency log (`constle-tlog`:
//! checkpoints, cosignatures, the witness) both read them here, so what
//! `constle validate` accepts is exactly what `constle run` and
//! `constle witness serve` use. This crate sits below both: it depends on
//! `constle-identity` alone (with `signed_note` for key IDs), never on
//! the log.
//!
//! ```
//! use constle_identity::SigningIdentity;
//! use constle_vkey::{KeyError, WitnessKey};
//!
//! let key = WitnessKey::new("witness.example.org/w1", SigningIdentity::from_bytes(&[2; 32]).did())?;
//! assert_eq!(WitnessKey::from_vkey(&key.vkey())?, key);
//! // A key ID that is not the one name and key give is refused.
//! let wrong = key.vkey().replacen(&format!("+{:08x}+", key.key_id()), "+00000000+", 1);
//! assert!(matches!(WitnessKey::from_vkey(&wrong), Err(KeyError::KeyIdMismatch { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod error;
mod keys;
mod origin;

pub use error::{KeyError, OriginError};
pub use keys::{LogKey, WitnessKey};
pub use origin::{Deployment, Origin};
