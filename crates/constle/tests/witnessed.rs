//! What witnesses cosigned, held against the log: `constle audit verify
//! --agentfile` with `audit.witnesses`, on logs written here as a run writes
//! them (entries, and checkpoint rounds recorded as
//! docs/spec/log-checkpoints.md §6 says), then rewritten and re-signed with
//! the agent's own key, as its holder could. The same check in process over
//! random rewrites. No network: the witnesses are keys held by the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};

use constle_audit::{Appender, Event, FindingCode};
use constle_identity::{Name, SigningIdentity};
use constle_tlog::{
    Cosigned, CoverageVerdict, Deployment, Hash, LogKey, LogTree, Origin, SignedCheckpoint, Source,
    WitnessKey, WitnessSigner, check_coverage, cosign, sign_checkpoint,
};
use jiff::Timestamp;
use proptest::prelude::*;
use serde_json::Value;

mod common;
use constle_testkit::Agentfile;

use common::log::{read_entries, reseal};
use common::{Case, text};

/// 2026-08-08T10:00:00Z.
const START: i64 = 1_786_183_200;
const DAY: i64 = 86_400;

fn agent() -> Name {
    Name::new("test-agent").unwrap()
}

fn agent_key() -> SigningIdentity {
    SigningIdentity::from_bytes(&[1; 32])
}

fn log_key() -> LogKey {
    let deployment = Deployment::new("ci.example.com").unwrap();
    LogKey::new(Origin::new(&deployment, &agent()), agent_key().did())
}

fn witness(n: u8) -> WitnessSigner {
    let name = format!("witness.example.org/w{n}");
    WitnessSigner::new(&name, SigningIdentity::from_bytes(&[n + 1; 32])).unwrap()
}

/// Writes the agent's log as runs do, on a clock moving `step` seconds an
/// entry from [`START`].
struct Writer {
    dir: PathBuf,
    appender: Appender,
}

impl Writer {
    fn new(dir: &Path, step: i64) -> Writer {
        let clock = AtomicI64::new(START);
        let appender = Appender::new(dir, agent(), Some(agent_key()))
            .unwrap()
            .with_clock(move || {
                Timestamp::from_second(clock.fetch_add(step, Ordering::SeqCst)).unwrap()
            });
        Writer {
            dir: dir.to_owned(),
            appender,
        }
    }

    fn entries(&self, n: usize) {
        let events = (0..n)
            .map(|i| {
                Event::new("tool_called")
                    .unwrap()
                    .with("tool", format!("tool-{i}"))
                    .unwrap()
            })
            .collect();
        self.appender.append(events).unwrap();
    }

    /// A checkpoint round: the log's head signed, cosigned by `by`, and
    /// recorded (a `checkpoint` entry, a `checkpoint_cosigned` one per
    /// witness). The size checkpointed, and the checkpoint with its
    /// cosignatures as `<agent>.checkpoint` holds it.
    fn round(&self, by: &[&WitnessSigner]) -> (u64, String) {
        let head = LogTree::from_log_dir(&self.dir, &agent())
            .unwrap()
            .tree
            .head();
        let signed = sign_checkpoint(&agent_key(), &log_key(), head).unwrap();
        let checkpoint = signed.verify(&log_key()).unwrap();
        let mut held = text(signed.as_bytes());
        let recorded = |name: &str| {
            Event::new(name)
                .unwrap()
                .with("size", head.size)
                .unwrap()
                .with("root", head.root.to_string())
                .unwrap()
        };
        let mut events = vec![
            recorded("checkpoint")
                .with("trigger", "entries")
                .unwrap()
                .with("note", held.clone())
                .unwrap(),
        ];
        for witness in by {
            let cosignature = cosign(&checkpoint, witness, 1_786_184_102).unwrap();
            held.push_str(cosignature.line());
            let event = recorded("checkpoint_cosigned")
                .with("witness", witness.public().name())
                .unwrap()
                .with("cosignature", cosignature.line().trim_end())
                .unwrap()
                .with("round_trip_ms", 3u64)
                .unwrap();
            events.push(event);
        }
        self.appender.append(events).unwrap();
        (head.size, held)
    }
}

/// An Agentfile for the agent declaring `witnesses`, `quorum` of them
/// needed.
fn agentfile(case: &Case, name: &str, witnesses: &[&WitnessSigner], quorum: usize) -> PathBuf {
    let mut body = Agentfile::new("test-agent")
        .did(agent_key().did().as_str())
        .section("audit:\n  deployment: ci.example.com\n")
        .to_yaml();
    if !witnesses.is_empty() {
        body.push_str("  witnesses:\n");
        for w in witnesses {
            let vkey = w.public().vkey();
            body.push_str(&format!(
                "    - url: http://127.0.0.1:9\n      key: {vkey}\n"
            ));
        }
        body.push_str(&format!("  witness_quorum: {quorum}\n"));
    }
    let path = case.path(name);
    fs::write(&path, body).unwrap();
    path
}

/// `constle audit verify --agentfile=<agentfile> <file> --checkpoint
/// <held>…`: its status, stdout and stderr.
fn verify(
    case: &Case,
    agentfile: &Path,
    file: &Path,
    held: &[PathBuf],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "audit".to_owned(),
        "verify".to_owned(),
        format!("--agentfile={}", agentfile.display()),
        file.display().to_string(),
    ];
    for file in held {
        args.extend(["--checkpoint".to_owned(), file.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = case.run(&args);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The lines `audit verify` prints of a day file that verifies.
fn verified_block(file: &Path, entries: u64) -> Vec<String> {
    vec![
        format!("✓ audit log verified: {}", file.display()),
        String::new(),
        format!("  entries:   {entries} (all signatures valid, hash chain intact)"),
        format!("  signed by: {}", agent_key().did()),
    ]
}

fn witnessed_block(dir: &Path, witnessed: &str) -> Vec<String> {
    vec![
        String::new(),
        format!(
            "✓ witness cosignatures checked: test-agent's log in {}",
            dir.display()
        ),
        String::new(),
        format!("  witnessed: {witnessed}"),
    ]
}

fn tampered_block(dir: &Path, code: &str, detail: &str, meaning: &str) -> Vec<String> {
    let mut block = vec![
        String::new(),
        format!(
            "error: TAMPERING DETECTED in test-agent's log in {}",
            dir.display()
        ),
    ];
    block.extend(finding(code, detail, meaning));
    block
}

/// The two lines of one finding about the whole log.
fn finding(code: &str, detail: &str, meaning: &str) -> [String; 2] {
    [
        format!("  log: {code} — {detail}"),
        format!("  — {meaning}"),
    ]
}

fn lines(stdout: &str) -> Vec<String> {
    stdout.lines().map(str::to_owned).collect()
}

/// The only day file in `dir`.
fn day_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

fn root_at(dir: &Path, size: u64) -> Hash {
    LogTree::from_log_dir(dir, &agent())
        .unwrap()
        .tree
        .root_at(size)
        .unwrap()
}

#[test]
fn verify_says_how_far_the_log_is_witnessed() {
    let case = Case::new();
    let (logs, file, [w1, w2, w3, w4]) = one_round(&case);
    let rest = "7 entries after that not yet";

    let two = agentfile(&case, "two.yaml", &[&w1, &w2], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &[]);
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    let mut expected = verified_block(&file, 12);
    expected.extend(witnessed_block(
        &logs,
        &format!("entries 0–4 by 2 of 2 witnesses (quorum 2); {rest}"),
    ));
    // w4 cosigned too, but is not declared.
    expected.push(format!(
        "  note:      the cosignature by witness.example.org/w4+{:08x} in the checkpoint_cosigned entry seq 8 is not by a witness the Agentfile declares: not counted",
        w4.public().key_id()
    ));
    assert_eq!(lines(&stdout), expected);

    let of_three = |quorum| {
        let path = agentfile(&case, "three.yaml", &[&w1, &w2, &w3], quorum);
        let (status, stdout, stderr) = verify(&case, &path, &file, &[]);
        assert_eq!(status, Some(0), "{stdout}{stderr}");
        lines(&stdout)[5..8].join("\n")
    };
    assert!(of_three(2).ends_with(&format!(
        "  witnessed: entries 0–4 by 2 of 3 witnesses (quorum 2); {rest}"
    )));
    assert!(of_three(3).ends_with(
        "  witnessed: no entry yet by a quorum (3 of 3 witnesses): witness.example.org/w1 cosigned entries 0–4, witness.example.org/w2 cosigned entries 0–4"
    ));

    // No witness declared: nothing said of witnesses.
    let none = agentfile(&case, "none.yaml", &[], 0);
    let (status, stdout, _) = verify(&case, &none, &file, &[]);
    assert_eq!(status, Some(0));
    assert_eq!(lines(&stdout), verified_block(&file, 12));
}

#[test]
fn witnesses_declared_but_nothing_cosigned_yet_is_said_so() {
    let case = Case::new();
    let logs = case.home().join("logs");
    Writer::new(&logs, 1).entries(4);
    let file = day_file(&logs);
    let (w1, w2) = (witness(1), witness(2));
    let two = agentfile(&case, "two.yaml", &[&w1, &w2], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &[]);
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    let mut expected = verified_block(&file, 4);
    expected.extend(witnessed_block(
        &logs,
        "no entry yet (2 witnesses declared, quorum 2)",
    ));
    assert_eq!(lines(&stdout), expected);
}

/// Writes 5 entries, a round cosigned at size 5 by w1, w2 and w4 (w3
/// cosigns nothing; entries 5 to 8 record it), then 3 more entries. The
/// directory, the day's file, and the four witnesses.
fn one_round(case: &Case) -> (PathBuf, PathBuf, [WitnessSigner; 4]) {
    let logs = case.home().join("logs");
    let witnesses = [witness(1), witness(2), witness(3), witness(4)];
    let [w1, w2, _, w4] = &witnesses;
    let writer = Writer::new(&logs, 1);
    writer.entries(5);
    writer.round(&[w1, w2, w4]);
    writer.entries(3);
    let file = day_file(&logs);
    (logs, file, witnesses)
}

/// A log with two rounds cosigned by w1 and w2: at size 5 (entries 5 to 7
/// record it) and at size 12 (entries 12 to 14), then 10 more entries. The
/// directory, and the two cosigned checkpoints as files.
fn two_rounds(case: &Case) -> (PathBuf, [PathBuf; 2]) {
    let logs = case.home().join("logs");
    let (w1, w2) = (witness(1), witness(2));
    let writer = Writer::new(&logs, 1);
    writer.entries(5);
    let (first, held_first) = writer.round(&[&w1, &w2]);
    writer.entries(4);
    let (second, held_second) = writer.round(&[&w1, &w2]);
    writer.entries(10);
    assert_eq!((first, second), (5, 12));
    let held = [
        case.path("first.checkpoint"),
        case.path("second.checkpoint"),
    ];
    fs::write(&held[0], held_first).unwrap();
    fs::write(&held[1], held_second).unwrap();
    (logs, held)
}

/// `entries`, resealed by the agent key's holder into `name`: its one day
/// file.
fn resealed(case: &Case, name: &str, entries: &[Value]) -> (PathBuf, PathBuf) {
    let dir = case.path(name);
    let files = reseal(entries, &dir, &agent(), agent_key());
    assert_eq!(files.len(), 1);
    (dir, files[0].clone())
}

const REWRITTEN: &str =
    "entries a witness cosigned were changed, removed or inserted, and the log re-signed";

#[test]
fn an_edited_and_resigned_log_is_caught_between_the_checkpoints_around_the_edit() {
    let case = Case::new();
    let (logs, _) = two_rounds(&case);
    let mut entries = read_entries(&logs, &agent());
    entries[9]["tool"] = Value::from("edited");
    let (dir, file) = resealed(&case, "edited", &entries);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &[]);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    let mut expected = verified_block(&file, 25);
    expected.extend(tampered_block(
        &dir,
        "witnessed_history_rewritten",
        &format!(
            "the histories part at an entry in seq 5..11 (the log's root at size 12 is {}, witnesses witness.example.org/w1, witness.example.org/w2 cosigned {}; in the checkpoint_cosigned entry seq 13, the checkpoint_cosigned entry seq 14)",
            root_at(&dir, 12),
            root_at(&logs, 12)
        ),
        REWRITTEN,
    ));
    assert_eq!(lines(&stdout), expected);
}

#[test]
fn an_edited_cosignature_entry_is_caught() {
    let case = Case::new();
    let (logs, _) = two_rounds(&case);
    let mut entries = read_entries(&logs, &agent());
    // w2's cosignature of size 5 said to be of size 4.
    assert_eq!(entries[7]["event"], "checkpoint_cosigned");
    entries[7]["size"] = Value::from(4);
    entries[7]["root"] = Value::from(root_at(&logs, 4).to_string());
    let (dir, file) = resealed(&case, "edited", &entries);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &[]);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    let mut expected = tampered_block(
        &dir,
        "cosignature_invalid",
        &format!(
            "the cosignature by witness.example.org/w2+{:08x} does not verify over this checkpoint (ci.example.com/constle/test-agent size 4 root {}; in the checkpoint_cosigned entry seq 7)",
            witness(2).public().key_id(),
            root_at(&logs, 4)
        ),
        "a witness's cosignature does not verify: the entry or checkpoint holding it was edited",
    );
    // The edited entry is itself in the tree cosigned at size 12.
    expected.extend(finding(
        "witnessed_history_rewritten",
        &format!(
            "the histories part at an entry in seq 5..11 (the log's root at size 12 is {}, witnesses witness.example.org/w1, witness.example.org/w2 cosigned {}; in the checkpoint_cosigned entry seq 13, the checkpoint_cosigned entry seq 14)",
            root_at(&dir, 12),
            root_at(&logs, 12)
        ),
        REWRITTEN,
    ));
    assert_eq!(lines(&stdout)[4..], expected);
}

#[test]
fn a_held_checkpoint_catches_a_rewrite_whose_cosignatures_were_dropped() {
    let case = Case::new();
    let (logs, held) = two_rounds(&case);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);

    // The log as written agrees with what it records and what is held.
    let file = day_file(&logs);
    let (status, stdout, stderr) = verify(&case, &two, &file, &held);
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    assert!(stdout.ends_with(
        "  witnessed: entries 0–11 by 2 of 2 witnesses (quorum 2); 13 entries after that not yet\n"
    ), "{stdout}");

    // Rewritten without the rounds, entry 9 edited: nothing in the log
    // contradicts it any more.
    let mut entries = read_entries(&logs, &agent());
    entries[9]["tool"] = Value::from("edited");
    entries.retain(|e| !e["event"].as_str().unwrap().starts_with("checkpoint"));
    let (dir, file) = resealed(&case, "dropped", &entries);
    let (status, stdout, _) = verify(&case, &two, &file, &[]);
    assert_eq!(status, Some(0));
    assert!(stdout.ends_with("  witnessed: no entry yet (2 witnesses declared, quorum 2)\n"));

    // What the witnesses cosigned, held elsewhere, does.
    let (status, stdout, stderr) = verify(&case, &two, &file, &held);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    let mut expected = verified_block(&file, 19);
    let (first, second) = (held[0].display(), held[1].display());
    expected.extend(tampered_block(
        &dir,
        "witnessed_history_rewritten",
        &format!(
            "the histories part at an entry in seq 5..11 (the log's root at size 12 is {}, witnesses witness.example.org/w1, witness.example.org/w2 cosigned {}; in the checkpoint file {second})",
            root_at(&dir, 12),
            root_at(&logs, 12)
        ),
        REWRITTEN,
    ));
    assert_eq!(lines(&stdout), expected);
    // With only the later checkpoint held, the range is wider.
    let (status, stdout, _) = verify(&case, &two, &file, &held[1..]);
    assert_eq!(status, Some(1));
    assert!(
        stdout.contains("— the histories part at an entry in seq 0..11 ("),
        "{stdout}"
    );
    assert!(!stdout.contains(&first.to_string()));
}

#[test]
fn a_cut_log_is_caught_by_a_held_checkpoint() {
    let case = Case::new();
    let (logs, held) = two_rounds(&case);
    let mut entries = read_entries(&logs, &agent());
    entries.truncate(9);
    let (dir, file) = resealed(&case, "cut", &entries);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &held);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    assert_eq!(
        lines(&stdout)[4..].to_vec(),
        tampered_block(
            &dir,
            "witnessed_entries_missing",
            &format!(
                "the log has 9 entries, but witnesses witness.example.org/w1, witness.example.org/w2 cosigned size 12 (root {}; in the checkpoint file {}): entries seq 9..11 are missing",
                root_at(&logs, 12),
                held[1].display()
            ),
            "entries a witness cosigned were cut off the log",
        )
    );
}

#[test]
fn checkpoint_files_that_cannot_be_used_are_errors() {
    let case = Case::new();
    let (logs, held) = two_rounds(&case);
    let file = day_file(&logs);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let garbage = case.path("garbage.checkpoint");
    fs::write(&garbage, "not a checkpoint\n").unwrap();
    // Another agent's log key signed this one.
    let other = fs::read_to_string(&held[0])
        .unwrap()
        .replace("test-agent", "other-agent");
    let forged = case.path("forged.checkpoint");
    fs::write(&forged, other).unwrap();
    for bad in [garbage, forged, case.path("absent.checkpoint")] {
        let (status, stdout, stderr) = verify(&case, &two, &file, std::slice::from_ref(&bad));
        assert_eq!(status, Some(2), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("cannot use the checkpoint file {}", bad.display())),
            "{stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }
    let none = agentfile(&case, "none.yaml", &[], 0);
    let (status, _, stderr) = verify(&case, &none, &file, &held);
    assert_eq!(status, Some(2));
    assert!(stderr.contains("--checkpoint needs witnesses"), "{stderr}");
}

#[derive(Clone, Copy, Debug)]
enum Rewrite {
    Edit,
    Delete,
    Insert,
    Truncate,
}

/// Who declares and cosigns, by witness number: 2 of 2; 2 of 3 all
/// cosigning; 2 of 3 with w2 never and w3 only the first round.
const QUORUMS: [(&[u8], &[u8], &[u8]); 3] = [
    (&[1, 2], &[1, 2], &[1, 2]),
    (&[1, 2, 3], &[1, 2, 3], &[1, 2, 3]),
    (&[1, 2, 3], &[1, 3], &[1]),
];

fn check(dir: &Path, declared: &[u8], held: &[(u64, String)]) -> CoverageVerdict {
    let log = LogTree::from_log_dir(dir, &agent()).unwrap();
    assert!(log.recorded.malformed.is_empty());
    let mut found = log.recorded.cosigned;
    for (i, (_, note)) in held.iter().enumerate() {
        let checkpoint = SignedCheckpoint::parse(note.as_bytes())
            .unwrap()
            .verify(&log_key())
            .unwrap();
        let source = Source::File(PathBuf::from(format!("round-{i}.checkpoint")));
        found.extend(Cosigned::from_checkpoint(&checkpoint, &source));
    }
    let keys: Vec<WitnessKey> = declared
        .iter()
        .map(|&n| witness(n).public().clone())
        .collect();
    let quorum = NonZeroUsize::new(2).unwrap();
    check_coverage(&log.tree, log_key().origin(), &keys, quorum, &found)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Whatever is changed before a cosigned size, and re-signed, is caught
    /// at that size, between the cosigned sizes around the change; what is
    /// not changed verifies, witnessed as far as a quorum cosigned.
    #[test]
    fn a_rewrite_before_a_cosigned_size_is_caught_where_the_histories_part(
        before in 1usize..10,
        between in 1usize..10,
        after in 0usize..4,
        // Entries a minute apart (one day), or five a day.
        step in prop_oneof![Just(60), Just(DAY / 5)],
        quorum in 0..QUORUMS.len(),
        rewrite in prop_oneof![
            Just(Rewrite::Edit),
            Just(Rewrite::Delete),
            Just(Rewrite::Insert),
            Just(Rewrite::Truncate),
        ],
        at in any::<prop::sample::Index>(),
    ) {
        let (declared, first_by, second_by) = QUORUMS[quorum];
        let signers = |by: &[u8]| by.iter().map(|&n| witness(n)).collect::<Vec<_>>();
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::new(dir.path(), step);
        writer.entries(before);
        let first = writer.round(&signers(first_by).iter().collect::<Vec<_>>());
        writer.entries(between);
        let second = writer.round(&signers(second_by).iter().collect::<Vec<_>>());
        writer.entries(after);
        let (s1, s2) = (first.0, second.0);
        let held = [first, second];
        let size = before + between + after + first_by.len() + second_by.len() + 2;

        // Untouched: witnessed up to the largest size two witnesses reached,
        // by those whose cosigned trees hold it.
        let witnessed = if second_by.len() >= 2 { s2 } else { s1 };
        let by = declared
            .iter()
            .filter(|n| second_by.contains(n) || (witnessed == s1 && first_by.contains(n)))
            .count();
        let range = match witnessed {
            1 => "entry 0".to_owned(),
            w => format!("entries 0–{}", w - 1),
        };
        let said = format!("{range} by {by} of {} witnesses (quorum 2)", declared.len());
        for held in [&held[..], &[]] {
            match check(dir.path(), declared, held) {
                CoverageVerdict::Covered(c) => {
                    prop_assert_eq!((c.witnessed(), c.size()), (witnessed, size as u64));
                    prop_assert!(c.to_string().starts_with(&said), "{} / {}", c, said);
                }
                CoverageVerdict::Tampered { findings, .. } => prop_assert!(false, "{:?}", findings),
            }
        }

        let p = at.index(s2 as usize);
        let mut entries = read_entries(dir.path(), &agent());
        match rewrite {
            Rewrite::Edit => entries[p]["tool"] = Value::from("edited"),
            Rewrite::Delete => drop(entries.remove(p)),
            Rewrite::Insert => {
                let mut copy = entries[p].clone();
                copy["tool"] = Value::from("inserted");
                entries.insert(p, copy);
            }
            Rewrite::Truncate => entries.truncate(p),
        }
        let resealed = tempfile::tempdir().unwrap();
        reseal(&entries, resealed.path(), &agent(), agent_key());

        let findings = match check(resealed.path(), declared, &held) {
            CoverageVerdict::Covered(c) => {
                prop_assert!(false, "{:?} at {} not caught: {}", rewrite, p, c);
                unreachable!()
            }
            CoverageVerdict::Tampered { findings, .. } => findings,
        };
        // Sizes up to p agree; each larger one is contradicted, the
        // histories parting after the largest size that agrees.
        let contradicted: Vec<u64> = [s1, s2].into_iter().filter(|&s| s > p as u64).collect();
        prop_assert_eq!(findings.len(), contradicted.len(), "{:#?}", findings);
        for (finding, &s) in findings.iter().zip(&contradicted) {
            let agreed = if s1 <= p as u64 && s1 < s { s1 } else { 0 };
            let expected = match rewrite {
                Rewrite::Truncate if p == 1 => (
                    FindingCode::WitnessedEntriesMissing,
                    "the log has 1 entry, but ".to_owned(),
                ),
                Rewrite::Truncate => (
                    FindingCode::WitnessedEntriesMissing,
                    format!("the log has {p} entries, but "),
                ),
                _ if agreed == s - 1 => (
                    FindingCode::WitnessedHistoryRewritten,
                    format!("the histories part at entry seq {agreed} ("),
                ),
                _ => (
                    FindingCode::WitnessedHistoryRewritten,
                    format!("the histories part at an entry in seq {agreed}..{} (", s - 1),
                ),
            };
            prop_assert_eq!(finding.code, expected.0);
            prop_assert!(finding.detail.starts_with(&expected.1), "{} / {}", finding.detail, expected.1);
            prop_assert!(finding.detail.contains(&format!("size {s}")), "{}", finding.detail);
        }
    }
}

#[test]
fn a_log_whose_tree_cannot_be_built_cannot_be_checked_against_its_witnesses() {
    let case = Case::new();
    let logs = case.home().join("logs");
    let (w1, w2) = (witness(1), witness(2));
    // Two entries a day: the first day's file deleted, as retention would.
    let writer = Writer::new(&logs, DAY / 2);
    writer.entries(3);
    writer.round(&[&w1, &w2]);
    let mut days: Vec<PathBuf> = fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    days.sort();
    fs::remove_file(&days[0]).unwrap();
    let two = agentfile(&case, "two.yaml", &[&w1, &w2], 2);
    let (status, stdout, stderr) = verify(&case, &two, days.last().unwrap(), &[]);
    assert_eq!(status, Some(2), "{stdout}{stderr}");
    assert!(stdout.starts_with("✓ audit log verified: "), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "cannot check what the witnesses cosigned of test-agent's log in {}",
            logs.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("the tree needs the whole chain from seq 0"),
        "{stderr}"
    );
}

/// A rewritten log whose first line is not an entry at all: the file is
/// TAMPERING (exit 1, not "could not check"), and the tree, which takes
/// any bytes as a leaf, is still held against what the witnesses cosigned.
#[test]
fn a_log_whose_first_line_is_not_an_entry_is_tampering_and_still_checked_against_its_witnesses() {
    let case = Case::new();
    let (logs, held) = two_rounds(&case);
    let (dir, file) = resealed(&case, "malformed", &read_entries(&logs, &agent()));
    let written = fs::read_to_string(&file).unwrap();
    let (_, rest) = written.split_once('\n').unwrap();
    fs::write(&file, format!("not an entry\n{rest}")).unwrap();
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let (status, stdout, stderr) = verify(&case, &two, &file, &held);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "error: TAMPERING DETECTED in {}\n  line 1: malformed_entry",
            file.display()
        )),
        "{stdout}"
    );
    let witnessed = format!(
        "error: TAMPERING DETECTED in test-agent's log in {}\n  log: witnessed_history_rewritten — the histories part at an entry in seq 0..4 (the log's root at size 5 is {}, witnesses witness.example.org/w1, witness.example.org/w2 cosigned {};",
        dir.display(),
        root_at(&dir, 5),
        root_at(&logs, 5),
    );
    assert!(stdout.contains(&witnessed), "{stdout}");

    // An empty line: no tree can be built, but the file's tampering is
    // still exit 1, with why the witnesses could not be checked.
    let mut lines: Vec<&str> = written.lines().collect();
    lines.insert(2, "");
    fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (status, stdout, stderr) = verify(&case, &two, &file, &held);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("error: TAMPERING DETECTED in "),
        "{stdout}"
    );
    assert!(
        stderr.contains("cannot check what the witnesses cosigned")
            && stderr.contains("line 3 is empty"),
        "{stderr}"
    );
}

/// `audit verify --format json` and the arguments of [`verify`]: each
/// line parsed, each one object alone on its line.
fn verify_json(case: &Case, agentfile: &Path, file: &Path) -> (Option<i32>, Vec<Value>) {
    let pin = format!("--agentfile={}", agentfile.display());
    let out = case.run(&[
        "audit",
        "verify",
        "--format",
        "json",
        &pin,
        file.to_str().unwrap(),
    ]);
    let said = text(&out.stdout);
    assert!(said.ends_with('\n'), "{said}{}", text(&out.stderr));
    let lines = said
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out.status.code(), lines)
}

/// What the witnesses cosigned, as JSON: how far, by whom, what does not
/// count, and a rewrite they contradict, with the exit status of the text.
#[test]
fn verify_says_as_json_how_far_the_log_is_witnessed_and_where_it_was_rewritten() {
    let case = Case::new();
    let (logs, file, [w1, w2, w3, _]) = one_round(&case);
    let three = agentfile(&case, "three.yaml", &[&w1, &w2, &w3], 2);
    let (status, lines) = verify_json(&case, &three, &file);
    assert_eq!(status, Some(0), "{lines:?}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["entries"], 12);
    let witnessed = &lines[1];
    assert_eq!(witnessed["type"], "witnesses");
    assert_eq!(witnessed["ok"], true);
    assert_eq!(witnessed["agent"], "test-agent");
    assert_eq!(witnessed["dir"], logs.to_str().unwrap());
    assert_eq!(witnessed["error"], Value::Null);
    assert_eq!(witnessed["entries"], 12);
    assert_eq!(witnessed["witnessed"], 5);
    assert_eq!(witnessed["quorum"], 2);
    assert_eq!(
        witnessed["cosigned"],
        serde_json::json!([
            {"witness": "witness.example.org/w1", "size": 5},
            {"witness": "witness.example.org/w2", "size": 5},
            {"witness": "witness.example.org/w3", "size": 0},
        ])
    );
    assert_eq!(
        witnessed["coverage"],
        "entries 0–4 by 2 of 3 witnesses (quorum 2); 7 entries after that not yet"
    );
    assert_eq!(witnessed["findings"], serde_json::json!([]));
    let notes = witnessed["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]
            .as_str()
            .unwrap()
            .contains("witness.example.org/w4+"),
        "{notes:?}"
    );
    assert_eq!(
        lines[2],
        serde_json::json!({"type": "summary", "ok": true, "logs": 1, "failed": 0})
    );

    let case = Case::new();
    let (logs, _) = two_rounds(&case);
    let mut entries = read_entries(&logs, &agent());
    entries[9]["tool"] = Value::from("edited");
    let (dir, file) = resealed(&case, "edited", &entries);
    let two = agentfile(&case, "two.yaml", &[&witness(1), &witness(2)], 2);
    let (status, lines) = verify_json(&case, &two, &file);
    assert_eq!(status, Some(1), "{lines:?}");
    assert_eq!(lines[0]["ok"], true, "the file itself verifies");
    let rewritten = &lines[1];
    assert_eq!(rewritten["ok"], false);
    assert_eq!(
        rewritten["error"],
        format!(
            "TAMPERING DETECTED in test-agent's log in {}",
            dir.display()
        )
    );
    for absent in ["entries", "witnessed", "coverage"] {
        assert_eq!(rewritten[absent], Value::Null, "{absent}");
    }
    assert_eq!(rewritten["cosigned"], serde_json::json!([]));
    let finding = &rewritten["findings"][0];
    assert_eq!(finding["line"], Value::Null);
    assert_eq!(finding["code"], "witnessed_history_rewritten");
    assert_eq!(finding["meaning"], REWRITTEN);
    assert!(
        finding["detail"]
            .as_str()
            .unwrap()
            .starts_with("the histories part at an entry in seq 5..11"),
        "{finding}"
    );
    assert_eq!(
        lines[2],
        serde_json::json!({"type": "summary", "ok": false, "logs": 1, "failed": 1})
    );
}
