//! The cosignatures an agent's log records: its `checkpoint_cosigned`
//! entries (docs/spec/log-checkpoints.md §6), read while the tree is built
//! from the files ([`LogTree::from_log_dir`](crate::LogTree::from_log_dir)).
//!
//! Only lines that mention the event's name are parsed, so the scan costs a
//! substring search per line. A writer's line is its canonical form, in
//! which the name is spelled exactly so; a line spelling it otherwise is
//! not canonical, which `constle audit verify` reports of the line itself.
//! A line that mentions the name but is no entry, or a `checkpoint_cosigned`
//! entry without the fields the writer gives it, is reported here as a
//! `malformed_entry`: whatever it was, the writer did not make it.

use constle_audit::{Entry, Finding, FindingCode, parse_line};

use crate::coverage::{Cosigned, Source};
use crate::hash::Hash;
use crate::tree::TreeHead;

/// The event that records a witness's cosignature.
pub const COSIGNED_EVENT: &str = "checkpoint_cosigned";

/// What the log's `checkpoint_cosigned` entries hold.
///
/// Only lines that mention the event's name are parsed: a writer's line is
/// its canonical form, which spells the name exactly so (one spelling it
/// otherwise is not canonical, a finding of `constle audit verify` on the
/// line itself). A line that mentions it but is no entry, or such an entry
/// without `size`, `root`, `witness` or `cosignature`, is not what the
/// writer makes: a `malformed_entry` in [`Recorded::malformed`].
#[derive(Debug, Default)]
pub struct Recorded {
    /// Each cosignature recorded, in log order; not yet verified.
    pub cosigned: Vec<Cosigned>,
    /// The entries that mention the event but are not what the writer makes.
    pub malformed: Vec<Finding>,
}

impl Recorded {
    /// Reads leaf `seq` of the tree, the line without its newline, as
    /// [`LogTree::from_log_dir`](crate::LogTree::from_log_dir) does each.
    pub fn scan(&mut self, seq: u64, line: &[u8]) {
        if memchr::memmem::find(line, COSIGNED_EVENT.as_bytes()).is_none() {
            return;
        }
        let malformed = |why: String| Finding {
            line: None,
            code: FindingCode::Malformed,
            detail: format!("entry seq {seq}: {why}"),
        };
        let entry = match parse_line(line) {
            Ok(entry) if entry.event == COSIGNED_EVENT => entry,
            Ok(_) => return,
            Err(err) => {
                let why = format!("mentions {COSIGNED_EVENT} but is not an entry: {err}");
                self.malformed.push(malformed(why));
                return;
            }
        };
        match cosigned(seq, &entry) {
            Ok(cosigned) => self.cosigned.push(cosigned),
            Err(why) => self.malformed.push(malformed(why)),
        }
    }
}

/// The cosignature a `checkpoint_cosigned` entry records.
fn cosigned(seq: u64, entry: &Entry) -> Result<Cosigned, String> {
    let field = |name: &str| {
        entry.fields.get(name).ok_or_else(|| {
            format!("the {COSIGNED_EVENT} entry has no `{name}`; the writer always records it")
        })
    };
    let text = |name: &str| {
        field(name)?
            .as_str()
            .ok_or_else(|| format!("`{name}` of the {COSIGNED_EVENT} entry is not a string"))
    };
    let size = field("size")?
        .as_u64()
        .ok_or_else(|| format!("`size` of the {COSIGNED_EVENT} entry is not a count"))?;
    let root = Hash::from_base64(text("root")?).ok_or_else(|| {
        format!("`root` of the {COSIGNED_EVENT} entry is not the base64 of a 32-byte hash")
    })?;
    Ok(Cosigned {
        head: TreeHead { size, root },
        witness: text("witness")?.to_owned(),
        line: text("cosignature")?.to_owned(),
        source: Source::Entry(seq),
    })
}

#[cfg(test)]
mod tests {
    use constle_audit::{Appender, Event};
    use constle_identity::{Name, SigningIdentity};
    use serde_json::Value;

    use super::*;
    use crate::LogTree;

    fn written(events: Vec<Event>) -> (tempfile::TempDir, Recorded) {
        let dir = tempfile::tempdir().unwrap();
        let agent = Name::new("bot").unwrap();
        let key = SigningIdentity::from_bytes(&[1; 32]);
        Appender::new(dir.path(), agent.clone(), Some(key))
            .unwrap()
            .append(events)
            .unwrap();
        let read = LogTree::from_log_dir(dir.path(), &agent).unwrap();
        (dir, read.recorded)
    }

    fn event(name: &str, fields: &[(&str, Value)]) -> Event {
        fields.iter().fold(Event::new(name).unwrap(), |e, (k, v)| {
            e.with(k, v.clone()).unwrap()
        })
    }

    #[test]
    fn reads_the_cosigned_entries_and_reports_malformed_ones() {
        let root = Hash::leaf(b"x");
        let good = [
            ("size", Value::from(1u64)),
            ("root", Value::from(root.to_string())),
            ("witness", Value::from("w.example/1")),
            ("cosignature", Value::from("— w.example/1 AAAA")),
            ("round_trip_ms", Value::from(3u64)),
        ];
        let (_dir, recorded) = written(vec![
            event("run_started", &[]),
            // Mentions the name, but is another event: not a cosignature.
            event("tool_called", &[("tool", Value::from(COSIGNED_EVENT))]),
            event(COSIGNED_EVENT, &good),
            event(COSIGNED_EVENT, &good[1..]),
            event(
                COSIGNED_EVENT,
                &[
                    ("size", Value::from("1")),
                    ("root", Value::from(root.to_string())),
                ],
            ),
            event(
                COSIGNED_EVENT,
                &[("size", Value::from(1u64)), ("root", "AAAA".into())],
            ),
        ]);
        assert_eq!(
            recorded.cosigned,
            [Cosigned {
                head: TreeHead { size: 1, root },
                witness: "w.example/1".into(),
                line: "— w.example/1 AAAA".into(),
                source: Source::Entry(2),
            }]
        );
        let details: Vec<_> = recorded.malformed.iter().map(|f| &f.detail).collect();
        assert_eq!(
            details,
            [
                "entry seq 3: the checkpoint_cosigned entry has no `size`; the writer always records it",
                "entry seq 4: `size` of the checkpoint_cosigned entry is not a count",
                "entry seq 5: `root` of the checkpoint_cosigned entry is not the base64 of a 32-byte hash",
            ]
        );
        assert!(
            recorded
                .malformed
                .iter()
                .all(|f| f.code == FindingCode::Malformed && f.line.is_none())
        );
    }

    #[test]
    fn a_line_that_mentions_the_event_but_is_no_entry_is_malformed() {
        let mut recorded = Recorded::default();
        recorded.scan(7, br#"{"event":"checkpoint_cosigned","seq":7}"#);
        recorded.scan(8, br#"{"event":"tool_called","seq":8}"#);
        assert!(recorded.cosigned.is_empty());
        assert_eq!(recorded.malformed.len(), 1);
        assert!(
            recorded.malformed[0]
                .detail
                .starts_with("entry seq 7: mentions checkpoint_cosigned but is not an entry"),
            "{:?}",
            recorded.malformed
        );
    }
}
