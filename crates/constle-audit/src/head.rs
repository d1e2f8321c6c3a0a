//! The head anchor: a small signed file beside the logs that records where
//! the agent's chain ends (file, length, sequence number and hash of the last
//! entry).
//!
//! A hash chain alone cannot show that entries were cut off its end: the
//! shortened chain is still a valid chain. The head is rewritten after every
//! durable append, so a log shorter than its head has lost entries. Each
//! day's first entry links to the previous day's last, so for any day but the
//! latest the next day's file plays the same role.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::{DidKey, Name, SigningIdentity};
use constle_store::ReplaceError;
use constle_store::replace::replace_via;
use ed25519_dalek::Signature;
use serde_json::{Map, Value};

use crate::entry::{FORMAT_VERSION, LINE_SPELLING, LineHash, parse_signature};
use crate::read::{MAX_HEAD_BYTES, ReadError, read_bounded};
use constle_json as strict_json;

/// Where an agent's chain ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The agent whose chain this is.
    pub agent: String,
    /// The signer of the chain, if it is signed.
    pub did: Option<DidKey>,
    /// The name of the day file where the chain began (sequence 0).
    pub start: String,
    /// The name of the day file holding the last entry.
    pub file: String,
    /// The length of that file, in bytes, after the last entry.
    pub len: u64,
    /// The sequence number of the last entry.
    pub seq: u64,
    /// The hash of the last entry's line.
    pub hash: LineHash,
}

/// A head read from disk, with its signature not yet checked.
pub struct SignedHead {
    /// What the head says.
    pub head: Head,
    /// The signature and the bytes it covers, if the head is signed.
    pub signature: Option<(Signature, Vec<u8>)>,
}

impl Head {
    fn object(&self) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("v".into(), FORMAT_VERSION.into());
        object.insert("agent".into(), self.agent.clone().into());
        object.insert("start".into(), self.start.clone().into());
        object.insert("file".into(), self.file.clone().into());
        object.insert("len".into(), self.len.into());
        object.insert("seq".into(), self.seq.into());
        object.insert("hash".into(), self.hash.to_string().into());
        if let Some(did) = &self.did {
            object.insert("did".into(), did.to_string().into());
        }
        object
    }

    /// Replaces the head file in `dir` atomically and durably: a crash leaves
    /// either the old head or the new one, never a mix.
    pub(crate) fn store(
        &self,
        dir: &Path,
        agent: &Name,
        signer: Option<&SigningIdentity>,
    ) -> std::io::Result<()> {
        let mut object = self.object();
        if let Some(signer) = signer {
            let signature = signer.sign(&LINE_SPELLING.object(&object));
            object.insert("sig".into(), BASE64.encode(signature.to_bytes()).into());
        }
        let path = crate::layout::head_path(dir, agent);
        // Writers store heads one at a time, under the lock, so what a crash
        // left at the temporary name is no other writer's file: it is
        // removed first, so that an older file's mode is not kept and a
        // link planted there is not followed.
        let temp = format!("{agent}.head.tmp");
        replace_via(&path, &temp, &LINE_SPELLING.object(&object), 0o600)
            .map_err(ReplaceError::into_io)?;
        Ok(())
    }

    /// Reads a head file; `Ok(None)` if there is none.
    pub fn load(dir: &Path, agent: &Name) -> Result<Option<SignedHead>, HeadError> {
        let path = crate::layout::head_path(dir, agent);
        match read_bounded(&path, MAX_HEAD_BYTES) {
            Ok(bytes) => SignedHead::parse(&bytes).map(Some),
            Err(err) if err.is_not_found() => Ok(None),
            Err(err) => Err(HeadError::Unreadable(err)),
        }
    }
}

impl SignedHead {
    /// Parses the bytes of a head file.
    pub fn parse(bytes: &[u8]) -> Result<SignedHead, HeadError> {
        let bad = |what: &str| HeadError::Malformed(what.to_owned());
        let Ok(Value::Object(mut object)) = strict_json::parse(bytes) else {
            return Err(bad("not a JSON object without duplicate keys"));
        };
        if LINE_SPELLING.object(&object) != bytes {
            return Err(bad("not in canonical form"));
        }
        let signature = match object.remove("sig") {
            Some(sig) => Some((
                parse_signature(&sig).map_err(|e| bad(&e.to_string()))?,
                LINE_SPELLING.object(&object),
            )),
            None => None,
        };
        let text = |key: &str| {
            object
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| bad(key))
        };
        let number = |key: &str| {
            object
                .get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(key))
        };
        let did = match object.get("did") {
            Some(did) => Some(
                did.as_str()
                    .and_then(|d| DidKey::parse(d).ok())
                    .ok_or_else(|| bad("did"))?,
            ),
            None => None,
        };
        let head = Head {
            agent: text("agent")?.to_owned(),
            did,
            start: text("start")?.to_owned(),
            file: text("file")?.to_owned(),
            len: number("len")?,
            seq: number("seq")?,
            hash: LineHash::parse(text("hash")?).ok_or_else(|| bad("hash"))?,
        };
        if number("v")? != FORMAT_VERSION || object.len() != head.object().len() {
            return Err(bad("unexpected version or fields"));
        }
        Ok(SignedHead { head, signature })
    }
}

/// Why a head file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    /// The file exists but could not be read, or is not a regular file of
    /// a head's size.
    #[error("cannot read the head anchor: {0}")]
    Unreadable(#[source] ReadError),
    /// The file is not a head anchor as the writer produces it.
    #[error("the head anchor is malformed ({0})")]
    Malformed(String),
}
