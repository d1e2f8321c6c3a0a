//! Checkpoints (c2sp.org/tlog-checkpoint): a signed note whose text is the
//! origin, the tree size and the root hash, each on its own line, with no
//! extension lines, signed by the agent's key under the origin's name.
//!
//! ```text
//! ci.example.com/constle/invoice-processor
//! 4212
//! 7B5Ks5nJ0b0mP6C1h0cQvQyCW9GUDf4FDBqy3fhOxkQ=
//!
//! — ci.example.com/constle/invoice-processor AbCdEf…
//! ```
//!
//! [`SignedCheckpoint::parse`] reads bytes strictly (one spelling of each
//! checkpoint: what parses re-encodes to the same bytes). Only
//! [`SignedCheckpoint::verify`] makes a [`VerifiedCheckpoint`], the type the
//! rest of the crate (cosigning, the witness's check) asks for. Neither
//! judges what the checkpoint claims about its tree: a size 0 with another
//! root than the empty tree's parses and verifies (it is what the log's key
//! signed), and is refused where trees are compared, by the witness
//! (c2sp.org/tlog-witness: 422, after the signature's 403) and by the
//! verifier of cosignatures. The note
//! framing and the checkpoint text are read by `signed_note` and
//! `tlog_tiles`; the signature is checked here, strictly, with the agent's
//! [`DidKey`](constle_identity::DidKey).

use constle_identity::SigningIdentity;
use constle_vkey::{LogKey, Origin};
use signed_note::{Note, NoteError, Verifier as _, VerifierList};

use crate::error::CheckpointError;
use crate::hash::Hash;
use crate::tree::TreeHead;

/// The largest signed checkpoint read: the text is under 400 bytes and each
/// signature line about 100, so this leaves room for a hundred cosignatures.
pub const MAX_CHECKPOINT_BYTES: usize = 16 * 1024;

/// A checkpoint as received: well formed, signature not yet checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCheckpoint {
    bytes: Vec<u8>,
    /// The length of the note text, including its final newline.
    text_len: usize,
    origin: String,
    head: TreeHead,
}

impl SignedCheckpoint {
    /// Reads a signed checkpoint: note text (origin, size, root), a blank
    /// line, one or more signature lines.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] for anything but exactly that.
    pub fn parse(bytes: &[u8]) -> Result<SignedCheckpoint, CheckpointError> {
        if bytes.len() > MAX_CHECKPOINT_BYTES {
            return Err(CheckpointError::TooLarge {
                len: bytes.len(),
                max: MAX_CHECKPOINT_BYTES,
            });
        }
        let note = Note::from_bytes(bytes).map_err(|_| CheckpointError::MalformedNote)?;
        // The note must re-encode to exactly these bytes: one spelling.
        if note.to_bytes() != bytes {
            return Err(CheckpointError::MalformedNote);
        }
        let text = note.text();
        let checkpoint = tlog_tiles::Checkpoint::from_bytes(text)
            .map_err(|_| CheckpointError::MalformedCheckpoint)?;
        if !checkpoint.extension().is_empty() {
            return Err(CheckpointError::ExtensionLines);
        }
        if checkpoint.to_bytes() != text {
            return Err(CheckpointError::MalformedCheckpoint);
        }
        let head = TreeHead {
            size: checkpoint.size(),
            root: Hash(checkpoint.hash().0),
        };
        Ok(SignedCheckpoint {
            bytes: bytes.to_vec(),
            text_len: text.len(),
            origin: checkpoint.origin().to_owned(),
            head,
        })
    }

    /// Checks the signature by the log's key and that the checkpoint is of
    /// that key's log. Signatures by other keys (cosignatures, a rotated
    /// key) are ignored, as c2sp.org/signed-note requires; every line by
    /// the log's key must verify, not only the first (a note with one that
    /// does not is malformed, and tlog-witness answers it 403).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::OriginMismatch`], [`CheckpointError::NotSigned`]
    /// or [`CheckpointError::InvalidSignature`].
    pub fn verify(&self, key: &LogKey) -> Result<VerifiedCheckpoint, CheckpointError> {
        if self.origin != key.origin().as_str() {
            return Err(CheckpointError::OriginMismatch {
                expected: key.origin().to_string(),
                found: self.origin.clone(),
            });
        }
        let label = || format!("{}+{:08x}", key.origin(), key.key_id());
        let note = Note::from_bytes(&self.bytes).map_err(|_| CheckpointError::MalformedNote)?;
        let known = VerifierList::new(vec![Box::new(key.clone())]);
        match note.verify(&known) {
            // `verify` checks the first line by a known key and skips the
            // lines after it that name the same key: those are checked here.
            Ok(_)
                if self
                    .lines_by(key)
                    .all(|sig| key.verify(self.text(), sig.signature())) =>
            {
                Ok(VerifiedCheckpoint {
                    origin: key.origin().clone(),
                    key_id: key.key_id(),
                    note: self.clone(),
                })
            }
            Ok(_) => Err(CheckpointError::InvalidSignature { key: label() }),
            Err(NoteError::UnverifiedNote) => Err(CheckpointError::NotSigned { key: label() }),
            Err(NoteError::InvalidSignature { .. }) => {
                Err(CheckpointError::InvalidSignature { key: label() })
            }
            Err(_) => Err(CheckpointError::MalformedNote),
        }
    }

    /// The signature lines that name `key` (its name and key ID).
    fn lines_by(&self, key: &LogKey) -> impl Iterator<Item = signed_note::Signature> {
        let (name, id) = (key.origin().as_str(), key.key_id());
        self.signature_lines()
            .filter_map(|line| signed_note::Signature::from_bytes(line).ok())
            .filter(move |sig| sig.name() == name && sig.id() == id)
    }

    /// The origin line, as claimed (not yet verified).
    pub fn claimed_origin(&self) -> &str {
        &self.origin
    }

    /// The size and root, as claimed (not yet verified).
    pub fn claimed_head(&self) -> TreeHead {
        self.head
    }

    /// The whole note: text, blank line, signature lines.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The note text: origin, size and root lines, each ending in a newline.
    pub fn text(&self) -> &[u8] {
        &self.bytes[..self.text_len]
    }

    /// The signature lines, each without its newline.
    pub fn signature_lines(&self) -> impl Iterator<Item = &[u8]> {
        // After the text and the blank line; every line ends in a newline.
        let sigs = &self.bytes[self.text_len + 1..];
        sigs.split(|&b| b == b'\n')
            .take(sigs.iter().filter(|&&b| b == b'\n').count())
    }
}

/// A checkpoint whose signature by its log's key verified.
///
/// Made only by [`SignedCheckpoint::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedCheckpoint {
    origin: Origin,
    /// The key ID of the log key that signed it.
    key_id: u32,
    note: SignedCheckpoint,
}

impl VerifiedCheckpoint {
    /// The log's origin.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The size and root the log's key signed.
    pub fn head(&self) -> TreeHead {
        self.note.head
    }

    /// The signed note as received, all signature lines included.
    pub fn signed(&self) -> &SignedCheckpoint {
        &self.note
    }

    /// The note text, what the log's key and cosigners sign.
    pub fn text(&self) -> &[u8] {
        self.note.text()
    }

    /// The checkpoint as a witness keeps it for monitors
    /// (c2sp.org/tlog-witness): its text, the log key's signature that
    /// verified, and the witness's `cosignatures` lines (each ending in a
    /// newline), as one signed note. Lines by other keys are left out: a
    /// witness vouches for nothing it did not check.
    ///
    /// # Errors
    ///
    /// [`CheckpointError`] if the note does not read back (a cosignature
    /// line that is not one, or more than [`MAX_CHECKPOINT_BYTES`]).
    pub fn with_cosignatures(
        &self,
        cosignatures: &[&str],
    ) -> Result<SignedCheckpoint, CheckpointError> {
        let own = self
            .note
            .signature_lines()
            .find(|line| {
                signed_note::Signature::from_bytes(line)
                    .is_ok_and(|sig| sig.name() == self.origin.as_str() && sig.id() == self.key_id)
            })
            .ok_or(CheckpointError::MalformedNote)?;
        let mut note = self.text().to_vec();
        note.push(b'\n');
        note.extend_from_slice(own);
        note.push(b'\n');
        for line in cosignatures {
            note.extend_from_slice(line.as_bytes());
        }
        SignedCheckpoint::parse(&note)
    }
}

/// Writes and signs the checkpoint of `head` for the log `key` names, with
/// the agent's key `identity`.
///
/// # Errors
///
/// [`CheckpointError::WrongSigner`] if `identity` is not `key`'s, or
/// [`CheckpointError::EmptyTreeRoot`] for a size-0 head with another root.
pub fn sign_checkpoint(
    identity: &SigningIdentity,
    key: &LogKey,
    head: TreeHead,
) -> Result<SignedCheckpoint, CheckpointError> {
    if identity.did() != key.did() {
        return Err(CheckpointError::WrongSigner {
            key: format!("{}+{:08x}", key.origin(), key.key_id()),
        });
    }
    if head.size == 0 && head.root != Hash::EMPTY {
        return Err(CheckpointError::EmptyTreeRoot);
    }
    let text = checkpoint_text(key.origin(), head);
    let signature = identity.sign(&text);
    let line = signed_note::Signature::new(
        key.origin().to_string(),
        key.key_id(),
        signature.to_bytes().to_vec(),
    )
    .map_err(|_| CheckpointError::MalformedNote)?;
    let note = Note::new(&text, &[line]).map_err(|_| CheckpointError::MalformedNote)?;
    SignedCheckpoint::parse(&note.to_bytes())
}

/// The note text of a checkpoint: `<origin>\n<size>\n<base64 root>\n`.
pub fn checkpoint_text(origin: &Origin, head: TreeHead) -> Vec<u8> {
    format!("{origin}\n{}\n{}\n", head.size, head.root).into_bytes()
}
