//! Receipts built from real logs (written by `constle-audit`'s Appender,
//! signed with real keys, checkpointed and cosigned as
//! docs/spec/log-checkpoints.md §6 has a run do it), verified, edited and
//! held against logs changed after them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use constle_audit::{Appender, Event, SignedLineError};
use constle_identity::{Name, SigningIdentity};
use constle_tlog::{
    Deployment, LogKey, LogTree, Origin, SignedCheckpoint, WitnessSigner, cosign, sign_checkpoint,
};
use serde_json::{Value, json};

use super::*;

const AGENT: &str = "invoice-bot";
const POLICY: &str = "sha256:5a1f0000000000000000000000000000000000000000000000000000000000aa";

fn agent_key() -> SigningIdentity {
    SigningIdentity::from_bytes(&[1; 32])
}

fn witness(n: u8) -> WitnessSigner {
    WitnessSigner::new(
        &format!("witness.example.org/w{n}"),
        SigningIdentity::from_bytes(&[10 + n; 32]),
    )
    .unwrap()
}

fn log_key() -> LogKey {
    let origin = Origin::new(
        &Deployment::new("ci.example.com").unwrap(),
        &Name::new(AGENT).unwrap(),
    );
    LogKey::new(origin, agent_key().did())
}

/// The Agentfile's pins: the log key, witnesses 1 and 2, a quorum of `quorum`.
fn pins(quorum: usize) -> Pins {
    Pins::new(
        log_key(),
        vec![witness(1).public().clone(), witness(2).public().clone()],
        quorum,
    )
    .unwrap()
}

fn event(name: &str, fields: Value) -> Event {
    let Value::Object(fields) = fields else {
        panic!("fields are an object")
    };
    fields
        .into_iter()
        .fold(Event::new(name).unwrap(), |e, (k, v)| {
            e.with(&k, v).unwrap()
        })
}

/// An agent's log in a temporary directory, written as runs write it.
struct Log {
    dir: tempfile::TempDir,
    appender: Appender,
}

impl Log {
    fn new() -> Log {
        Log::signed_by(Some(agent_key()))
    }

    fn signed_by(key: Option<SigningIdentity>) -> Log {
        let dir = tempfile::tempdir().unwrap();
        let appender = Appender::new(dir.path(), Name::new(AGENT).unwrap(), key).unwrap();
        Log { dir, appender }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn append(&self, event: Event) -> u64 {
        self.appender.append(vec![event]).unwrap()[0].seq
    }

    fn start(&self) -> u64 {
        self.append(event(
            "run_started",
            json!({"command": ["python3", "agent.py"], "egress": "restricted", "policy_digest": POLICY}),
        ))
    }

    fn offer(&self, tools: &[&str]) -> u64 {
        let digest = format!("sha256:{}", "ab".repeat(32));
        self.append(event(
            "mcp_tools_offered",
            json!({"server": "accounting", "tools": tools, "digest": digest}),
        ))
    }

    fn finish(&self, started: u64) -> u64 {
        self.append(event(
            "run_finished",
            json!({"run_started_seq": started, "exit_status": 0, "duration_ms": 12}),
        ))
    }

    /// A checkpoint round: the checkpoint of every entry so far, signed
    /// and recorded, then one `checkpoint_cosigned` per witness in `by`.
    fn checkpoint(&self, by: &[WitnessSigner]) -> u64 {
        let tree = LogTree::from_log_dir(self.path(), &Name::new(AGENT).unwrap())
            .unwrap()
            .tree;
        let head = tree.head();
        let signed = sign_checkpoint(&agent_key(), &log_key(), head).unwrap();
        let note = String::from_utf8(signed.as_bytes().to_vec()).unwrap();
        let root = head.root.to_string();
        let fields = json!({"size": head.size, "root": root, "trigger": "run_end", "note": note});
        let seq = self.append(event("checkpoint", fields));
        let verified = signed.verify(&log_key()).unwrap();
        for signer in by {
            let cosignature = cosign(&verified, signer, 1_786_184_102).unwrap();
            let line = cosignature.line().trim_end_matches('\n');
            let fields = json!({"size": head.size, "root": root, "witness": signer.public().name(), "cosignature": line, "round_trip_ms": 3});
            self.append(event("checkpoint_cosigned", fields));
        }
        seq
    }

    /// A whole run with two tool lists, checkpointed and cosigned by both
    /// witnesses: its `run_started`'s seq.
    fn run(&self) -> u64 {
        let started = self.start();
        self.append(event(
            "network_allowed",
            json!({"host": "api.example.com", "port": 443}),
        ));
        self.offer(&["list_invoices", "get_invoice"]);
        self.offer(&["pay_invoice"]);
        let finished = self.finish(started);
        assert!(finished > started);
        self.checkpoint(&[witness(1), witness(2)]);
        started
    }

    fn day_file(&self) -> std::path::PathBuf {
        std::fs::read_dir(self.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .unwrap()
    }
}

#[test]
fn a_receipt_of_a_cosigned_run_verifies_with_and_without_pins() {
    let log = Log::new();
    log.run();
    let second = log.run();
    let built = build(log.path(), &pins(2), Run::Latest).unwrap();
    assert_eq!(built.started().seq, second, "the latest run");
    let bytes = built.receipt().to_bytes();
    let receipt = Receipt::parse(&bytes).unwrap();
    assert_eq!(receipt.to_bytes(), bytes, "one spelling");
    for pinned in [Some(pins(2)), None] {
        let verified = receipt.verify(pinned.as_ref()).unwrap();
        assert_eq!(verified.pinned(), pinned.is_some());
        assert_eq!(verified.agent().as_str(), AGENT);
        assert_eq!(verified.did(), agent_key().did());
        assert_eq!(verified.origin(), log_key().origin());
        assert_eq!(verified.policy_digest(), POLICY);
        assert_eq!(verified.finished().seq, second + 4);
        assert_eq!(verified.exit_status(), Some(0));
        assert_eq!(verified.head().size, second + 5);
        let names: Vec<&str> = verified
            .cosignatures()
            .iter()
            .map(|c| c.witness())
            .collect();
        assert_eq!(names, ["witness.example.org/w1", "witness.example.org/w2"]);
        assert_eq!(verified.quorum(), 2);
        let tools: Vec<(u64, Vec<String>)> = verified
            .tools()
            .iter()
            .map(|t| (t.seq, t.tools.clone()))
            .collect();
        assert_eq!(
            tools,
            [
                (
                    second + 2,
                    vec!["list_invoices".to_owned(), "get_invoice".to_owned()]
                ),
                (second + 3, vec!["pay_invoice".to_owned()])
            ]
        );
    }
    let matched = built.check_log(log.path()).unwrap();
    assert_eq!(
        matched,
        LogMatch {
            run_entries: 5,
            log_entries: second + 8
        }
    );
    // The earlier run has its own.
    let first = build(log.path(), &pins(2), Run::StartedAt(0)).unwrap();
    assert_eq!((first.started().seq, first.finished().seq), (0, 4));
}

/// Tool names a server chose, holding what a terminal must not be shown:
/// the receipt carries the lines as the log spells them, so its entries
/// still verify and its bytes hold none of those characters as they are.
#[test]
fn a_receipt_spells_its_entries_as_the_log_does() {
    let log = Log::new();
    let started = log.start();
    let tools = [
        "pay\u{202e}eciovni",
        "a\u{1b}[2Jb",
        "c\u{85}\u{2028}d\u{e0041}",
    ];
    log.offer(&tools);
    log.finish(started);
    log.checkpoint(&[witness(1), witness(2)]);
    let built = build(log.path(), &pins(2), Run::Latest).unwrap();
    let bytes = built.receipt().to_bytes();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(!text.chars().any(constle_escape::is_unsafe), "{text:?}");
    assert!(text.contains(r"pay\u202eeciovni"), "{text}");
    let receipt = Receipt::parse(&bytes).unwrap();
    let verified = receipt.verify(Some(&pins(2))).unwrap();
    assert_eq!(verified.tools()[0].tools, tools);
    built.check_log(log.path()).unwrap();
}

#[test]
fn every_byte_of_a_receipt_is_bound() {
    let log = Log::new();
    log.run();
    let bytes = build(log.path(), &pins(2), Run::Latest)
        .unwrap()
        .receipt()
        .to_bytes();
    let verifies = |edited: &[u8]| Receipt::parse(edited).is_ok_and(|r| r.verify(None).is_ok());
    assert!(verifies(&bytes));
    for index in 0..bytes.len() {
        let byte = char::from(bytes[index]);
        for flip in [0x01, 0x20, 0x80] {
            let mut edited = bytes.clone();
            edited[index] ^= flip;
            assert!(
                !verifies(&edited),
                "byte {index} ({byte:?}) ^ {flip:#04x} still verifies"
            );
        }
        let mut cut = bytes.clone();
        cut.remove(index);
        assert!(
            !verifies(&cut),
            "without byte {index} ({byte:?}) it still verifies"
        );
        let mut spaced = bytes.clone();
        spaced.insert(index, b' ');
        assert!(
            !verifies(&spaced),
            "a space before byte {index} ({byte:?}) still verifies"
        );
    }
}

/// `receipt` with `edit` made to its JSON, re-encoded canonically: a
/// receipt whose every byte is well formed.
fn edited(receipt: &Receipt, edit: impl FnOnce(&mut Value)) -> Receipt {
    let mut value: Value = serde_json::from_slice(&receipt.to_bytes()).unwrap();
    edit(&mut value);
    Receipt::parse(&constle_json::canonical_value(&value)).unwrap()
}

#[test]
fn well_formed_edits_of_meaning_are_caught() {
    // Two runs, one checkpoint after both: each one's receipt has it.
    let log = Log::new();
    let first = log.start();
    log.offer(&["get_invoice"]);
    log.finish(first);
    log.run();
    let receipt = build(log.path(), &pins(2), Run::Latest)
        .unwrap()
        .receipt()
        .clone();
    let other = build(log.path(), &pins(2), Run::StartedAt(first))
        .unwrap()
        .receipt()
        .clone();
    assert_eq!(receipt.checkpoint, other.checkpoint);
    let fails = |receipt: Receipt, why: &str| {
        let err = receipt.verify(None).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    };
    fails(
        edited(&receipt, |v| {
            v["policy_digest"] = json!(format!("sha256:{}", "0".repeat(64)))
        }),
        "policy_digest",
    );
    fails(
        edited(&receipt, |v| v["agent"] = json!("other-bot")),
        "origin",
    );
    // Another run's start, with its own valid proof, against this end; its
    // policy digest is the same.
    let start = serde_json::from_slice::<Value>(&other.to_bytes()).unwrap()["run_started"].clone();
    fails(
        edited(&receipt, |v| v["run_started"] = start),
        "ends the run started at",
    );
    // The witnesses in another order than their cosignatures.
    fails(
        edited(&receipt, |v| {
            v["witnesses"].as_array_mut().unwrap().reverse()
        }),
        "cosignature of witness",
    );
    // The tool lists out of order.
    fails(
        edited(&receipt, |v| {
            v["tools_offered"].as_array_mut().unwrap().reverse()
        }),
        "seq order",
    );
    // A signature line more than the witnesses listed.
    let extra = edited(&receipt, |v| {
        let note = v["checkpoint"].as_str().unwrap();
        let line = note.lines().last().unwrap().replace("w2", "w3");
        v["checkpoint"] = json!(format!("{note}{line}\n"));
    });
    fails(extra, "signature lines");
    // A witness dropped with its cosignature: fine alone, short of the
    // Agentfile's quorum.
    let fewer = edited(&receipt, |v| {
        v["witnesses"].as_array_mut().unwrap().pop();
        let note = v["checkpoint"].as_str().unwrap();
        let kept: String = note
            .lines()
            .take(note.lines().count() - 1)
            .map(|l| format!("{l}\n"))
            .collect();
        v["checkpoint"] = json!(kept);
    });
    assert_eq!(fewer.verify(None).unwrap().quorum(), 1);
    assert_eq!(
        fewer.verify(Some(&pins(2))).unwrap_err(),
        VerifyError::QuorumMissed {
            cosigned: 1,
            quorum: 2
        }
    );
    // A tool list dropped: offline it is not missed, against the log it is.
    let dropped = edited(&receipt, |v| {
        drop(v["tools_offered"].as_array_mut().unwrap().pop())
    });
    let verified = dropped.verify(None).unwrap();
    assert!(matches!(
        verified.check_log(log.path()),
        Err(LogError::ToolsLeftOut { .. })
    ));
}

#[test]
fn the_agentfile_pins_the_key_the_origin_and_the_witnesses() {
    let log = Log::new();
    log.run();
    let receipt = build(log.path(), &pins(2), Run::Latest)
        .unwrap()
        .receipt()
        .clone();
    let stranger = SigningIdentity::from_bytes(&[9; 32]);
    let other_key = Pins::new(
        LogKey::new(log_key().origin().clone(), stranger.did()),
        pins(2).witnesses().to_vec(),
        2,
    )
    .unwrap();
    assert!(matches!(
        receipt.verify(Some(&other_key)),
        Err(VerifyError::NotPinned { what: "did", .. })
    ));
    let elsewhere = Origin::new(
        &Deployment::new("prod.example.com").unwrap(),
        &Name::new(AGENT).unwrap(),
    );
    let other_origin = Pins::new(
        LogKey::new(elsewhere, agent_key().did()),
        pins(2).witnesses().to_vec(),
        2,
    )
    .unwrap();
    assert!(matches!(
        receipt.verify(Some(&other_origin)),
        Err(VerifyError::NotPinned { what: "origin", .. })
    ));
    let only_one = Pins::new(log_key(), vec![witness(1).public().clone()], 1).unwrap();
    assert!(matches!(
        receipt.verify(Some(&only_one)),
        Err(VerifyError::UnknownWitness { .. })
    ));
    // A receipt re-made with a key of one's own verifies only unpinned.
    let forged = edited(&receipt, |v| v["did"] = json!(stranger.did().as_str()));
    assert!(matches!(
        forged.verify(None),
        Err(VerifyError::Checkpoint(_))
    ));
}

#[test]
fn a_log_changed_after_the_receipt_is_caught() {
    let log = Log::new();
    log.run();
    let built = build(log.path(), &pins(2), Run::Latest).unwrap();
    let file = log.day_file();
    let original = std::fs::read(&file).unwrap();

    // Rewritten with the agent's own key: every line re-signed, the
    // chain intact, the tool list another.
    let rewritten = Log::new();
    let started = rewritten.start();
    rewritten.append(event(
        "network_allowed",
        json!({"host": "api.example.com", "port": 443}),
    ));
    rewritten.offer(&["list_invoices", "delete_everything"]);
    rewritten.offer(&["pay_invoice"]);
    rewritten.finish(started);
    rewritten.checkpoint(&[]);
    rewritten.append(event("checkpoint_cosigned", json!({"size": 1})));
    rewritten.append(event("checkpoint_cosigned", json!({"size": 1})));
    std::fs::copy(rewritten.day_file(), &file).unwrap();
    assert!(matches!(
        built.check_log(log.path()),
        Err(LogError::Rewritten { size: 5, .. })
    ));

    // Cut short.
    let lines: Vec<&[u8]> = original.split_inclusive(|&b| b == b'\n').collect();
    std::fs::write(&file, lines[..3].concat()).unwrap();
    assert!(matches!(
        built.check_log(log.path()),
        Err(LogError::Shorter {
            entries: 3,
            size: 5
        })
    ));

    std::fs::write(&file, &original).unwrap();
    built.check_log(log.path()).unwrap();
}

#[test]
fn a_run_without_a_witnessed_checkpoint_has_no_receipt() {
    // Unsigned: no checkpoint at all.
    let unsigned = Log::signed_by(None);
    let started = unsigned.start();
    unsigned.finish(started);
    assert!(matches!(
        build(unsigned.path(), &pins(2), Run::Latest),
        Err(BuildError::NoCheckpoint { .. })
    ));

    let log = Log::new();
    let started = log.start();
    let finished = log.finish(started);
    assert!(matches!(
        build(log.path(), &pins(1), Run::Latest),
        Err(BuildError::NoCheckpoint {
            started: 0,
            finished: 1
        })
    ));
    // One cosignature, and the quorum is two; one by a witness not pinned.
    log.checkpoint(&[witness(1), witness(3)]);
    let err = build(log.path(), &pins(2), Run::Latest).unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::NotWitnessed {
                best: 1,
                needed: 2,
                ..
            }
        ),
        "{err}"
    );
    // A quorum of one is met, and only the pinned witness is in it.
    let built = build(log.path(), &pins(1), Run::Latest).unwrap();
    assert_eq!(built.cosignatures().len(), 1);
    assert_eq!(built.receipt().witnesses, [witness(1).public().vkey()]);
    assert_eq!(built.finished().seq, finished);
    // No witness pinned: no receipt.
    let none = Pins::new(log_key(), Vec::new(), 0).unwrap();
    assert!(matches!(
        build(log.path(), &none, Run::Latest),
        Err(BuildError::NoWitnesses)
    ));
}

#[test]
fn a_later_checkpoint_covers_a_run_whose_own_round_failed() {
    let log = Log::new();
    let started = log.start();
    log.finish(started);
    log.checkpoint(&[]);
    let next = log.start();
    let covering = log.checkpoint(&[witness(1), witness(2)]);
    let built = build(log.path(), &pins(2), Run::StartedAt(started)).unwrap();
    assert_eq!(built.head().size, covering);
    // The run going on is passed over for the one before it.
    let latest = build(log.path(), &pins(2), Run::Latest).unwrap();
    assert_eq!(latest.started().seq, started);
    assert!(matches!(
        build(log.path(), &pins(2), Run::StartedAt(next)),
        Err(BuildError::Unfinished { started: s }) if s == next
    ));
    assert!(matches!(
        build(log.path(), &pins(2), Run::StartedAt(1)),
        Err(BuildError::NoSuchRun { seq: 1 })
    ));
}

#[test]
fn overlapping_runs_have_no_receipt() {
    let log = Log::new();
    let first = log.start();
    let second = log.start();
    log.finish(first);
    log.finish(second);
    log.checkpoint(&[witness(1), witness(2)]);
    for run in [first, second] {
        let err = build(log.path(), &pins(2), Run::StartedAt(run)).unwrap_err();
        assert!(matches!(err, BuildError::Overlap { .. }), "{err}");
    }
}

#[test]
fn a_checkpoint_the_log_no_longer_matches_is_an_error() {
    let log = Log::new();
    log.run();
    // The first line edited in place: the tree is another now.
    let file = log.day_file();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replacen("agent.py", "agent.pz", 1);
    std::fs::write(&file, text).unwrap();
    let err = build(log.path(), &pins(2), Run::Latest).unwrap_err();
    assert!(
        matches!(err, BuildError::Rewritten { size: 5, .. }),
        "{err}"
    );
}

#[test]
fn the_file_is_written_whole_and_read_back() {
    let log = Log::new();
    log.run();
    let built = build(log.path(), &pins(2), Run::Latest).unwrap();
    let path = log.path().join("run.receipt.json");
    write_receipt(&path, built.receipt()).unwrap();
    write_receipt(&path, built.receipt()).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(&read_receipt(&path).unwrap(), built.receipt());
    let names: Vec<String> = std::fs::read_dir(log.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    assert!(matches!(read_receipt(log.path()), Err(FileError::Read(_))));
    assert!(matches!(
        read_receipt(&log.day_file()),
        Err(FileError::Format { .. })
    ));
}

#[test]
fn the_parser_refuses_what_constle_does_not_write() {
    let log = Log::new();
    log.run();
    let receipt = build(log.path(), &pins(2), Run::Latest)
        .unwrap()
        .receipt()
        .to_bytes();
    let value: Value = serde_json::from_slice(&receipt).unwrap();
    let pretty = serde_json::to_vec_pretty(&value).unwrap();
    assert_eq!(Receipt::parse(&pretty), Err(FormatError::NotCanonical));
    let mut newline = receipt.clone();
    newline.push(b'\n');
    assert!(Receipt::parse(&newline).is_err());
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut value = value.clone();
        edit(&mut value);
        Receipt::parse(&constle_json::canonical_value(&value))
    };
    assert!(matches!(
        with(&|v| v["type"] = json!("other")),
        Err(FormatError::NotAReceipt { .. })
    ));
    assert_eq!(
        with(&|v| v["version"] = json!(2)),
        Err(FormatError::Version { found: Some(2) })
    );
    assert!(matches!(
        with(&|v| v["extra"] = json!(1)),
        Err(FormatError::Unknown { .. })
    ));
    assert!(matches!(
        with(&|v| drop(v.as_object_mut().unwrap().remove("did"))),
        Err(FormatError::Missing { member: "did" })
    ));
    assert!(matches!(
        with(&|v| v["run_started"]["proof"] = json!(["AAAA"])),
        Err(FormatError::Member { .. })
    ));
    assert!(matches!(
        with(&|v| v["run_started"]["extra"] = json!(1)),
        Err(FormatError::Unknown { .. })
    ));
    let big = vec![b' '; MAX_RECEIPT_BYTES + 1];
    assert!(matches!(
        Receipt::parse(&big),
        Err(FormatError::TooLarge { .. })
    ));
}

#[test]
fn a_checkpoint_note_with_other_signatures_is_refused() {
    let log = Log::new();
    let started = log.start();
    log.finish(started);
    let tree = LogTree::from_log_dir(log.path(), &Name::new(AGENT).unwrap())
        .unwrap()
        .tree;
    let signed = sign_checkpoint(&agent_key(), &log_key(), tree.head()).unwrap();
    let verified = signed.verify(&log_key()).unwrap();
    let mut note = signed.as_bytes().to_vec();
    note.extend_from_slice(cosign(&verified, &witness(1), 5).unwrap().line().as_bytes());
    assert!(SignedCheckpoint::parse(&note).is_ok());
    let note = String::from_utf8(note).unwrap();
    log.append(event(
        "checkpoint",
        json!({"size": tree.len(), "note": note}),
    ));
    let err = build(log.path(), &pins(1), Run::Latest).unwrap_err();
    assert!(matches!(err, BuildError::Checkpoint { .. }), "{err}");
}

#[test]
fn every_entry_must_be_signed_by_the_did() {
    // Lines signed by another key, checkpointed with the agent's.
    let stranger = Log::signed_by(Some(SigningIdentity::from_bytes(&[9; 32])));
    stranger.run();
    let err = build(stranger.path(), &pins(2), Run::Latest).unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::Unverifiable(VerifyError::Entry {
                source: SignedLineError::WrongSigner { .. },
                ..
            })
        ),
        "{err}"
    );
    // A line edited before the checkpoint: in the tree, its signature bad.
    let log = Log::new();
    let started = log.start();
    log.finish(started);
    let file = log.day_file();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replacen("agent.py", "agent.pz", 1);
    std::fs::write(&file, text).unwrap();
    log.checkpoint(&[witness(1), witness(2)]);
    let err = build(log.path(), &pins(2), Run::Latest).unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::Unverifiable(VerifyError::Entry {
                source: SignedLineError::InvalidSignature { .. },
                ..
            })
        ),
        "{err}"
    );
}
