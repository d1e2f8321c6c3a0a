//! Verifying a chain of versions: version 1 against the pin and its own
//! threshold, each later version against its predecessor's threshold and
//! its own. [`VerifiedVersion`] is what comes out, and only out of here.

use std::collections::HashSet;

use constle_identity::DidKey;
use jiff::Timestamp;

use crate::body::{Approver, SetBody};
use crate::digest::{SetDigest, SetPin};
use crate::error::{ApproverSetError, Location, Signers};
use crate::file::VersionFile;

/// What became of one signature entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureOutcome {
    /// It verifies and counts: toward this version's own threshold if the
    /// key is one of its approvers, toward the previous version's if the
    /// key is one of that version's.
    Counted {
        /// Counted toward this version's threshold.
        own: bool,
        /// Counted toward the previous version's threshold.
        previous: bool,
    },
    /// The key already has a signature that counted; it counts once.
    Duplicate,
    /// The key is in neither set: ignored.
    NotInSet,
    /// The key is in a set, but the signature does not verify over this
    /// version's signed bytes (made for another version, or the file was
    /// edited after signing).
    Invalid,
}

/// One signature entry and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureCheck {
    did: DidKey,
    outcome: SignatureOutcome,
}

impl SignatureCheck {
    /// The key the entry names.
    pub fn did(&self) -> &DidKey {
        &self.did
    }

    /// What became of it.
    pub fn outcome(&self) -> SignatureOutcome {
        self.outcome
    }
}

/// A version that verified as part of a chain from the pin. There is no
/// other way to make one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedVersion {
    body: SetBody,
    digest: SetDigest,
    signatures: Vec<SignatureCheck>,
    bytes: Vec<u8>,
}

impl VerifiedVersion {
    /// The version number.
    pub fn version(&self) -> u64 {
        self.body.version()
    }

    /// Its digest (what an audit log records as the version in force).
    pub fn digest(&self) -> SetDigest {
        self.digest
    }

    /// When it expires.
    pub fn expires(&self) -> Timestamp {
        self.body.expires()
    }

    /// Whether it has expired at `now` (`expires` ≤ `now`).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.body.expires() <= now
    }

    /// How many distinct approvers must agree.
    pub fn threshold(&self) -> usize {
        self.body.threshold()
    }

    /// The approvers.
    pub fn approvers(&self) -> &[Approver] {
        self.body.approvers()
    }

    /// Whether `did` is one of its approvers.
    pub fn contains(&self, did: &DidKey) -> bool {
        self.body.contains(did)
    }

    /// The label of approver `did`, if it is one.
    pub fn label_of(&self, did: &DidKey) -> Option<&str> {
        self.body.label_of(did)
    }

    /// The `signed` part.
    pub fn body(&self) -> &SetBody {
        &self.body
    }

    /// Every signature entry of the file and what became of it.
    pub fn signatures(&self) -> &[SignatureCheck] {
        &self.signatures
    }

    /// The file's exact bytes.
    pub fn file_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Verify a chain given as the bytes of versions 1, 2, 3… in order.
/// Expiry is not checked: a chain may pass through expired versions, and
/// an audit verifier judges a recorded vote by the time it was cast; use
/// [`VerifiedVersion::is_expired`] or [`ApproverSets::load`] for that.
///
/// [`ApproverSets::load`]: crate::ApproverSets::load
///
/// # Errors
///
/// The first version that does not parse, holds the wrong number, has
/// another digest than the pin (version 1) or lacks signatures.
pub fn verify_chain<B: AsRef<[u8]>>(
    pin: &SetPin,
    versions: &[B],
) -> Result<Vec<VerifiedVersion>, ApproverSetError> {
    let mut chain: Vec<VerifiedVersion> = Vec::with_capacity(versions.len());
    for (index, bytes) in versions.iter().enumerate() {
        let next = verify_next(pin, chain.last(), bytes.as_ref(), &Location::Given(index))?;
        chain.push(next);
    }
    Ok(chain)
}

/// Verify one version: as version 1 against `pin` if `previous` is
/// `None`, else as the version after `previous`.
pub(crate) fn verify_next(
    pin: &SetPin,
    previous: Option<&VerifiedVersion>,
    bytes: &[u8],
    location: &Location,
) -> Result<VerifiedVersion, ApproverSetError> {
    let file = VersionFile::parse(bytes, location)?;
    let expected = previous.map_or(1, |p| p.version() + 1);
    let body = file.body();
    if body.version() != expected {
        return Err(ApproverSetError::WrongVersion {
            location: location.clone(),
            expected,
            found: body.version(),
        });
    }
    let digest = body.digest();
    if previous.is_none() && digest != pin.digest() {
        return Err(ApproverSetError::PinMismatch {
            location: location.clone(),
            expected: pin.digest(),
            found: digest,
        });
    }
    let signed = body.signed_bytes();
    let mut counted: HashSet<&DidKey> = HashSet::new();
    let mut signatures = Vec::with_capacity(file.signatures().len());
    for entry in file.signatures() {
        let own = body.contains(&entry.did);
        let old = previous.is_some_and(|p| p.contains(&entry.did));
        let outcome = if !own && !old {
            SignatureOutcome::NotInSet
        } else if counted.contains(&entry.did) {
            SignatureOutcome::Duplicate
        } else if entry.did.verify(&signed, &entry.sig).is_ok() {
            counted.insert(&entry.did);
            SignatureOutcome::Counted { own, previous: old }
        } else {
            SignatureOutcome::Invalid
        };
        signatures.push(SignatureCheck {
            did: entry.did.clone(),
            outcome,
        });
    }
    if let Some(previous) = previous {
        enough(
            location,
            body.version(),
            Signers::Previous {
                version: previous.version(),
            },
            previous.body(),
            &counted,
        )?;
    }
    enough(location, body.version(), Signers::Own, body, &counted)?;
    Ok(VerifiedVersion {
        body: body.clone(),
        digest,
        signatures,
        bytes: bytes.to_vec(),
    })
}

/// Whether `counted` holds a threshold of `set`'s keys.
fn enough(
    location: &Location,
    version: u64,
    signers: Signers,
    set: &SetBody,
    counted: &HashSet<&DidKey>,
) -> Result<(), ApproverSetError> {
    let labels: Vec<&str> = set
        .approvers()
        .iter()
        .filter(|a| counted.contains(&a.did))
        .map(|a| a.label.as_str())
        .collect();
    if labels.len() >= set.threshold() {
        return Ok(());
    }
    Err(ApproverSetError::UnderSigned {
        location: location.clone(),
        version,
        signers,
        valid: labels.len(),
        threshold: set.threshold(),
        counted: match labels.is_empty() {
            true => "none".to_owned(),
            false => labels
                .iter()
                .map(|l| constle_escape::escape(l))
                .collect::<Vec<_>>()
                .join(", "),
        },
    })
}
