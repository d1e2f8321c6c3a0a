//! What the audit log keeps of each tool list the gate shows the agent
//! (`mcp_tools_offered`), and which lists a gate has recorded already.
//!
//! A tool list is recorded once per gate (one gate per server and run) and
//! digest, before the agent sees it: a receipt of the run can then say
//! which tools each server offered, and the log holds one entry per
//! distinct list, not one per `tools/list`.

use std::collections::HashSet;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Most distinct tool lists one gate records (and so relays) in a run.
/// Only declared tools reach the agent, but their descriptions and schemas
/// are the server's to vary; a server past this bound gets no new list
/// through, rather than growing the log without end.
pub const MAX_OFFERED_LISTS: usize = 256;

/// One tool list the agent was shown, as the audit log records it
/// (`mcp_tools_offered`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OfferedTools {
    /// The server's id, from the policy.
    pub server: String,
    /// The names of the tools, in the order the agent got them.
    pub tools: Vec<String>,
    /// `sha256:<hex>` of the RFC 8785 (JCS) bytes of the `tools` array
    /// the agent got, after filtering: every member of every tool, not only
    /// its name ([`tools_digest`]).
    pub digest: String,
}

impl OfferedTools {
    /// The record of `tools`, a filtered `result.tools` array: every tool
    /// in it has a string `name` (the filter keeps no other).
    pub(crate) fn new(server: &str, tools: &[Value]) -> OfferedTools {
        OfferedTools {
            server: server.to_owned(),
            tools: tools
                .iter()
                .filter_map(|tool| tool.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect(),
            digest: tools_digest(tools),
        }
    }
}

/// `sha256:<hex>` of the JCS bytes of the array `tools`. JCS reads numbers
/// as IEEE doubles, so two lists differing only in integers beyond 2^53
/// share a digest.
pub fn tools_digest(tools: &[Value]) -> String {
    let array = Value::Array(tools.to_vec());
    let digest = Sha256::digest(constle_json::canonical_value(&array));
    format!("sha256:{}", hex::encode(digest))
}

/// The digests one gate has recorded.
#[derive(Debug, Default)]
pub(crate) struct Recorded(HashSet<String>);

impl Recorded {
    /// Whether `digest` is on record already.
    pub(crate) fn contains(&self, digest: &str) -> bool {
        self.0.contains(digest)
    }

    /// Whether there is room for one more.
    pub(crate) fn is_full(&self) -> bool {
        self.0.len() >= MAX_OFFERED_LISTS
    }

    pub(crate) fn insert(&mut self, digest: String) {
        self.0.insert(digest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_digest_is_of_the_canonical_array_whatever_the_spelling() {
        let tools = [
            json!({"name": "b", "inputSchema": {"z": 1, "a": "é"}}),
            json!({"name": "a"}),
        ];
        let offered = OfferedTools::new("accounting", &tools);
        assert_eq!(offered.tools, ["b", "a"]);
        let canonical = r#"[{"inputSchema":{"a":"é","z":1},"name":"b"},{"name":"a"}]"#;
        let expected = format!("sha256:{:x}", Sha256::digest(canonical.as_bytes()));
        assert_eq!(offered.digest, expected);
        // Another order of tools is another list.
        let swapped = [tools[1].clone(), tools[0].clone()];
        assert_ne!(tools_digest(&swapped), offered.digest);
        assert_eq!(
            tools_digest(&[]),
            format!("sha256:{:x}", Sha256::digest(b"[]"))
        );
    }
}
