//! The receipt file: one JSON object in its canonical form, spelled as log
//! lines are ([`LINE_SPELLING`]: RFC 8785 with the characters a terminal
//! must not be shown escaped), read strictly. Nothing here checks a signature or a proof; that is
//! [`Receipt::verify`]'s.
//!
//! ```text
//! {"agent":…,"checkpoint":…,"did":…,"origin":…,"policy_digest":…,
//!  "run_finished":{"entry":{…},"proof":[…]},"run_started":{…},
//!  "tools_offered":[{"entry":{…},"proof":[…]},…],
//!  "type":"constle-run-receipt","version":1,"witnesses":[…]}
//! ```
//!
//! A file is read only if it is exactly the canonical encoding of what it
//! says (one spelling: no other key order, spacing or escaping), has every
//! member and no other, and each value has its one form (hashes in padded
//! standard base64 that re-encodes to the same text).

use constle_audit::LINE_SPELLING;
use constle_tlog::Hash;
use serde_json::{Map, Value};

use crate::error::FormatError;

/// The `type` of a run receipt.
pub const RECEIPT_TYPE: &str = "constle-run-receipt";

/// The `version` this crate writes and reads.
pub const RECEIPT_VERSION: u64 = 1;

/// The largest receipt read. A run's entries are small, but a gate may
/// record up to `constle_mcp_gate::MAX_OFFERED_LISTS` tool lists per server.
pub const MAX_RECEIPT_BYTES: usize = 16 << 20;

/// One log line a receipt carries, as the object it is (the line is its
/// canonical form, written in the receipt exactly as in the log), with its
/// inclusion proof in the checkpoint's tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Included {
    pub(crate) entry: Map<String, Value>,
    pub(crate) proof: Vec<Hash>,
}

impl Included {
    /// The line's bytes, without a newline: the entry's canonical form.
    pub fn line(&self) -> Vec<u8> {
        LINE_SPELLING.object(&self.entry)
    }

    /// The inclusion proof's hashes, leaf side first.
    pub fn proof(&self) -> &[Hash] {
        &self.proof
    }

    fn to_json(&self) -> Value {
        let proof = self.proof.iter().map(|h| Value::String(h.to_string()));
        let mut object = Map::new();
        object.insert("entry".into(), Value::Object(self.entry.clone()));
        object.insert("proof".into(), Value::Array(proof.collect()));
        Value::Object(object)
    }

    fn from_json(member: &'static str, value: Value) -> Result<Included, FormatError> {
        let mut object = members(member, value)?;
        let entry = match object.remove("entry") {
            Some(Value::Object(entry)) => entry,
            _ => {
                return Err(FormatError::Member {
                    member,
                    expected: "an object with an `entry` object",
                });
            }
        };
        let proof = match object.remove("proof") {
            Some(Value::Array(hashes)) => hashes
                .iter()
                .map(|h| h.as_str().and_then(Hash::from_base64))
                .collect::<Option<Vec<Hash>>>()
                .ok_or(FormatError::Member {
                    member,
                    expected: "`proof` an array of base64 SHA-256 hashes",
                })?,
            _ => {
                return Err(FormatError::Member {
                    member,
                    expected: "an object with a `proof` array",
                });
            }
        };
        no_other_member(member, &object)?;
        Ok(Included { entry, proof })
    }
}

/// A run receipt as read: well formed and canonical, nothing verified yet.
/// Only [`Receipt::verify`] says what it shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Receipt {
    pub(crate) agent: String,
    pub(crate) did: String,
    pub(crate) origin: String,
    pub(crate) policy_digest: String,
    pub(crate) run_started: Included,
    pub(crate) run_finished: Included,
    pub(crate) tools_offered: Vec<Included>,
    pub(crate) checkpoint: String,
    pub(crate) witnesses: Vec<String>,
}

impl Receipt {
    /// Reads a receipt strictly (see the module docs).
    ///
    /// # Errors
    ///
    /// [`FormatError`] saying what is not as written by Constle.
    pub fn parse(bytes: &[u8]) -> Result<Receipt, FormatError> {
        let value =
            constle_json::parse_limited(bytes, MAX_RECEIPT_BYTES).map_err(|err| match err {
                constle_json::LimitedError::TooLarge { len, max } => {
                    FormatError::TooLarge { len, max }
                }
                other => FormatError::NotJson(other.to_string()),
            })?;
        if LINE_SPELLING.value(&value) != bytes {
            return Err(FormatError::NotCanonical);
        }
        let mut object = members("the receipt", value)?;
        let mut take = |member| object.remove(member).ok_or(FormatError::Missing { member });
        match take("type")? {
            Value::String(kind) if kind == RECEIPT_TYPE => {}
            other => {
                return Err(FormatError::NotAReceipt {
                    found: other.to_string(),
                });
            }
        }
        match take("version")?.as_u64() {
            Some(RECEIPT_VERSION) => {}
            found => return Err(FormatError::Version { found }),
        }
        let receipt = Receipt {
            agent: text("agent", take("agent")?)?,
            did: text("did", take("did")?)?,
            origin: text("origin", take("origin")?)?,
            policy_digest: text("policy_digest", take("policy_digest")?)?,
            run_started: Included::from_json("run_started", take("run_started")?)?,
            run_finished: Included::from_json("run_finished", take("run_finished")?)?,
            tools_offered: array("tools_offered", take("tools_offered")?)?
                .into_iter()
                .map(|item| Included::from_json("tools_offered", item))
                .collect::<Result<_, _>>()?,
            checkpoint: text("checkpoint", take("checkpoint")?)?,
            witnesses: array("witnesses", take("witnesses")?)?
                .into_iter()
                .map(|w| text("witnesses", w))
                .collect::<Result<_, _>>()?,
        };
        no_other_member("the receipt", &object)?;
        Ok(receipt)
    }

    /// The receipt's bytes: its canonical form, no newline after it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let strings =
            |items: &[String]| Value::Array(items.iter().cloned().map(Value::String).collect());
        let mut object = Map::new();
        object.insert("type".into(), RECEIPT_TYPE.into());
        object.insert("version".into(), RECEIPT_VERSION.into());
        object.insert("agent".into(), self.agent.clone().into());
        object.insert("did".into(), self.did.clone().into());
        object.insert("origin".into(), self.origin.clone().into());
        object.insert("policy_digest".into(), self.policy_digest.clone().into());
        object.insert("run_started".into(), self.run_started.to_json());
        object.insert("run_finished".into(), self.run_finished.to_json());
        let tools = self.tools_offered.iter().map(Included::to_json).collect();
        object.insert("tools_offered".into(), Value::Array(tools));
        object.insert("checkpoint".into(), self.checkpoint.clone().into());
        object.insert("witnesses".into(), strings(&self.witnesses));
        LINE_SPELLING.object(&object)
    }
}

fn members(member: &'static str, value: Value) -> Result<Map<String, Value>, FormatError> {
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(FormatError::Member {
            member,
            expected: "an object",
        }),
    }
}

fn no_other_member(member: &'static str, object: &Map<String, Value>) -> Result<(), FormatError> {
    match object.keys().next() {
        None => Ok(()),
        Some(name) => Err(FormatError::Unknown {
            member,
            name: name.clone(),
        }),
    }
}

fn text(member: &'static str, value: Value) -> Result<String, FormatError> {
    match value {
        Value::String(text) => Ok(text),
        _ => Err(FormatError::Member {
            member,
            expected: "a string",
        }),
    }
}

fn array(member: &'static str, value: Value) -> Result<Vec<Value>, FormatError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => Err(FormatError::Member {
            member,
            expected: "an array",
        }),
    }
}
