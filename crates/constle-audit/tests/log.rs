//! The audit log end to end: written by the real writer, then attacked the
//! ways the issue lists, each of which verification must catch.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use base64::Engine as _;
use constle_audit::{
    Appender, AuditError, AuditLog, Event, FindingCode, ReadError, TrustAnchors, Verdict,
    VerifiedLog, head_path, verify_file,
};
use constle_identity::{Name, SigningIdentity};
use jiff::Timestamp;
use proptest::prelude::*;

const DAY: i64 = 86_400;
/// 2026-08-08T10:00:00Z.
const START: i64 = 1_786_183_200;

fn agent() -> Name {
    Name::new("my-agent").unwrap()
}

fn key(seed: u8) -> SigningIdentity {
    SigningIdentity::from_bytes(&[seed; 32])
}

/// A clock the test moves by hand, one second per reading.
#[derive(Clone)]
struct Clock(Arc<AtomicI64>);

impl Clock {
    fn new() -> Clock {
        Clock(Arc::new(AtomicI64::new(START)))
    }
    fn next_day(&self) {
        self.0.fetch_add(DAY, Ordering::SeqCst);
    }
    fn appender(&self, dir: &Path, signer: Option<SigningIdentity>) -> Appender {
        self.appender_stepping(dir, signer, 1)
    }
    /// An appender whose every reading moves the clock by `step` seconds.
    fn appender_stepping(
        &self,
        dir: &Path,
        signer: Option<SigningIdentity>,
        step: i64,
    ) -> Appender {
        let clock = self.0.clone();
        Appender::new(dir, agent(), signer)
            .unwrap()
            .with_clock(move || {
                Timestamp::from_second(clock.fetch_add(step, Ordering::SeqCst)).unwrap()
            })
    }
}

fn events(n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            Event::new("tool_called")
                .unwrap()
                .with("tool", format!("tool-{i}"))
                .unwrap()
        })
        .collect()
}

fn pinned(seed: u8) -> TrustAnchors {
    TrustAnchors {
        agent: Some(agent()),
        agent_did: Some(key(seed).did().clone()),
        approver: None,
        approvers: None,
        terminal_approves: false,
        pinned: true,
    }
}

/// Writes `n` signed entries on one day and returns the day file.
fn signed_log(dir: &Path, n: usize) -> PathBuf {
    let written = Clock::new()
        .appender(dir, Some(key(1)))
        .append(events(n))
        .unwrap();
    written[0].path.clone()
}

fn verified(path: &Path, anchors: &TrustAnchors) -> VerifiedLog {
    match verify_file(path, anchors).unwrap() {
        Verdict::Verified(log) => *log,
        Verdict::Tampered { findings, .. } => {
            panic!("expected a verified log, found {findings:#?}")
        }
    }
}

fn codes(path: &Path, anchors: &TrustAnchors) -> Vec<(Option<usize>, FindingCode)> {
    match verify_file(path, anchors).unwrap() {
        Verdict::Verified(log) => panic!("tampering not detected: {log:?}"),
        Verdict::Tampered { findings, .. } => findings.iter().map(|f| (f.line, f.code)).collect(),
    }
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

#[test]
fn a_written_log_verifies_pinned_and_unpinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 5);
    assert_eq!(path.file_name().unwrap(), "my-agent-2026-08-08.jsonl");
    let log = verified(&path, &pinned(1));
    assert_eq!(
        (log.entries, log.signer.as_ref(), log.pinned),
        (5, Some(key(1).did()), true)
    );
    assert!(!verified(&path, &TrustAnchors::default()).pinned);
}

#[test]
fn files_and_directories_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let path = signed_log(&logs, 1);
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&logs), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&head_path(&logs, &agent())), 0o600);
    assert_eq!(mode(&logs.join("my-agent.lock")), 0o600);
}

#[test]
fn the_head_is_private_even_after_a_crash_left_a_readable_temp_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let head = head_path(dir.path(), &agent());
    let temp = head.with_extension("head.tmp");
    fs::write(&temp, "left by a crash").unwrap();
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o644)).unwrap();
    signed_log(dir.path(), 1);
    assert_eq!(
        fs::metadata(&head).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A link planted at the temp name is not written through.
    let outside = dir.path().join("outside");
    std::os::unix::fs::symlink(&outside, &temp).unwrap();
    signed_log(dir.path(), 1);
    assert!(!outside.exists());
}

#[test]
fn edited_value_breaks_the_signature() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 3);
    let mut all = lines(&path);
    all[1] = all[1].replace("tool-1", "tool-X");
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(2), FindingCode::InvalidSignature)));
}

#[test]
fn reserialised_json_with_the_same_values_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 2);
    let mut all = lines(&path);
    let value: serde_json::Value = serde_json::from_str(&all[0]).unwrap();
    all[0] = serde_json::to_string_pretty(&value)
        .unwrap()
        .replace('\n', " ");
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(1), FindingCode::NotCanonical)));
}

#[test]
fn deleted_lines_are_caught_first_middle_and_last() {
    for victim in [0, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let path = signed_log(dir.path(), 5);
        let mut all = lines(&path);
        all.remove(victim);
        write_lines(&path, &all);
        let found = codes(&path, &pinned(1));
        let expected = match victim {
            4 => FindingCode::TailRemoved,
            _ => FindingCode::ChainBroken,
        };
        assert!(
            found.iter().any(|(_, c)| *c == expected),
            "deleting line {victim}: {found:?}"
        );
    }
}

#[test]
fn reordered_and_duplicated_lines_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 4);
    let mut all = lines(&path);
    all.swap(1, 2);
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(2), FindingCode::ChainBroken)));

    let path = signed_log(tempfile::tempdir().unwrap().keep().as_path(), 4);
    let mut all = lines(&path);
    all.insert(2, all[1].clone());
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(3), FindingCode::DuplicateEntry)));
}

#[test]
fn lines_spliced_from_another_agents_log_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 3);
    let other_dir = tempfile::tempdir().unwrap();
    let other = Appender::new(other_dir.path(), Name::new("other").unwrap(), Some(key(2))).unwrap();
    let foreign = other.append(events(3)).unwrap()[1].path.clone();
    let mut all = lines(&path);
    all[1] = lines(&foreign)[1].clone();
    write_lines(&path, &all);
    let found = codes(&path, &pinned(1));
    assert!(
        found.contains(&(Some(2), FindingCode::WrongAgent)),
        "{found:?}"
    );
    assert!(
        found.contains(&(Some(2), FindingCode::WrongSigner)),
        "{found:?}"
    );
}

#[test]
fn a_wrong_signer_is_caught_when_the_did_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 2);
    let found = codes(&path, &pinned(9));
    assert!(
        found.contains(&(Some(1), FindingCode::WrongSigner)),
        "{found:?}"
    );
}

#[test]
fn duplicate_keys_inside_an_entry_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 2);
    let mut all = lines(&path);
    all[1] = all[1].replacen("{", r#"{"agent":"my-agent","#, 1);
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(2), FindingCode::DuplicateKey)));
}

/// Three days of log, written as a long-running agent would.
fn three_days(dir: &Path) -> Vec<PathBuf> {
    let clock = Clock::new();
    let appender = clock.appender(dir, Some(key(1)));
    let mut days = Vec::new();
    for _ in 0..3 {
        days.push(appender.append(events(3)).unwrap()[0].path.clone());
        clock.next_day();
    }
    days
}

#[test]
fn days_chain_into_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let days = three_days(dir.path());
    for day in &days {
        assert_eq!(verified(day, &pinned(1)).entries, 3);
    }
    let first = lines(&days[1])[0].clone();
    assert!(first.contains(r#""seq":3"#), "{first}");
}

#[test]
fn a_removed_day_or_a_cut_day_end_is_caught_by_the_next_day() {
    let dir = tempfile::tempdir().unwrap();
    let days = three_days(dir.path());
    let mut first = lines(&days[0]);
    first.pop();
    write_lines(&days[0], &first);
    assert!(codes(&days[0], &pinned(1)).contains(&(None, FindingCode::TailRemoved)));
    assert!(codes(&days[1], &pinned(1)).contains(&(Some(1), FindingCode::ChainBroken)));

    let dir = tempfile::tempdir().unwrap();
    let days = three_days(dir.path());
    fs::remove_file(&days[1]).unwrap();
    assert!(codes(&days[2], &pinned(1)).contains(&(Some(1), FindingCode::ChainBroken)));
}

#[test]
fn a_file_renamed_to_another_day_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let days = three_days(dir.path());
    let renamed = dir.path().join("my-agent-2026-08-20.jsonl");
    fs::rename(&days[2], &renamed).unwrap();
    let found = codes(&renamed, &pinned(1));
    assert!(
        found.contains(&(Some(1), FindingCode::WrongDay)),
        "{found:?}"
    );
}

#[test]
fn lines_spliced_from_another_day_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let days = three_days(dir.path());
    let mut today = lines(&days[2]);
    today.insert(1, lines(&days[0])[1].clone());
    write_lines(&days[2], &today);
    let found = codes(&days[2], &pinned(1));
    assert!(
        found.contains(&(Some(2), FindingCode::WrongDay)),
        "{found:?}"
    );
    assert!(
        found.contains(&(Some(2), FindingCode::ChainBroken)),
        "{found:?}"
    );
}

#[test]
fn deleting_the_very_first_entry_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 3);
    let mut all = lines(&path);
    all.remove(0);
    write_lines(&path, &all);
    assert!(codes(&path, &pinned(1)).contains(&(Some(1), FindingCode::ChainBroken)));
}

#[test]
fn the_head_anchor_cannot_be_removed_or_edited() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 2);
    let head = head_path(dir.path(), &agent());
    let original = fs::read_to_string(&head).unwrap();
    fs::write(&head, original.replace(r#""seq":1"#, r#""seq":0"#)).unwrap();
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::AnchorInvalid)));
    fs::remove_file(&head).unwrap();
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::AnchorMissing)));
}

#[test]
fn cutting_the_tail_and_rolling_the_head_back_needs_an_old_head() {
    // The documented limit: someone who kept an earlier head can roll both
    // back together. Without one, a cut tail is caught.
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let appender = clock.appender(dir.path(), Some(key(1)));
    let path = appender.append(events(2)).unwrap()[0].path.clone();
    let head = head_path(dir.path(), &agent());
    let (old_head, old_log) = (fs::read(&head).unwrap(), fs::read(&path).unwrap());
    appender.append(events(2)).unwrap();
    fs::write(&path, &old_log).unwrap();
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::TailRemoved)));
    fs::write(&head, old_head).unwrap();
    verified(&path, &pinned(1));
}

#[test]
fn a_torn_last_line_is_reported_and_the_prefix_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let appender = clock.appender(dir.path(), Some(key(1)));
    let path = appender.append(events(3)).unwrap()[0].path.clone();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"agent":"my-agent","ev"#);
    fs::write(&path, &bytes).unwrap();
    let log = verified(&path, &pinned(1));
    assert_eq!(log.entries, 3);
    assert!(
        log.notes.iter().any(|n| n.contains("torn_tail")),
        "{:?}",
        log.notes
    );

    // The next append cuts the torn bytes off and says so in the log.
    appender.append(events(1)).unwrap();
    let all = lines(&path);
    assert!(
        all[3].contains("audit_tail_discarded") && all[3].contains(r#""bytes":23"#),
        "{}",
        all[3]
    );
    assert_eq!(verified(&path, &pinned(1)).entries, 5);
}

#[test]
fn a_torn_write_inside_an_acknowledged_entry_is_a_removed_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = signed_log(dir.path(), 3);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::TailRemoved)));
}

#[test]
fn the_writer_refuses_to_continue_a_log_shorter_than_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let appender = clock.appender(dir.path(), Some(key(1)));
    let path = appender.append(events(3)).unwrap()[0].path.clone();
    let mut all = lines(&path);
    all.pop();
    write_lines(&path, &all);
    let before = fs::read(&path).unwrap();
    assert!(matches!(
        appender.append(events(1)),
        Err(AuditError::TailMissing { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), before, "nothing may be written");
}

#[test]
fn the_writer_refuses_a_log_without_its_head_and_another_signer() {
    let dir = tempfile::tempdir().unwrap();
    signed_log(dir.path(), 1);
    let other = Appender::new(dir.path(), agent(), Some(key(2))).unwrap();
    assert!(matches!(
        other.append(events(1)),
        Err(AuditError::AnchorMismatch { .. })
    ));
    fs::remove_file(head_path(dir.path(), &agent())).unwrap();
    let same = Appender::new(dir.path(), agent(), Some(key(1))).unwrap();
    assert!(matches!(
        same.append(events(1)),
        Err(AuditError::AnchorMissing { .. })
    ));
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

#[test]
fn the_writer_refuses_a_fifo_where_its_files_are_instead_of_hanging() {
    let next_day = |dir: &Path| dir.join("my-agent-2026-08-09.jsonl");
    let head = |dir: &Path| head_path(dir, &agent());
    for (what, victim) in [
        ("next day's file", next_day as fn(&Path) -> PathBuf),
        ("head", head),
    ] {
        let dir = tempfile::tempdir().unwrap();
        signed_log(dir.path(), 1);
        let _ = fs::remove_file(victim(dir.path()));
        mkfifo(&victim(dir.path()));
        let clock = Clock::new();
        clock.next_day();
        let appender = clock.appender(dir.path(), Some(key(1)));
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(appender.append(events(1)).map(drop)));
        let result = result
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the writer hung on a FIFO as its {what}"));
        assert!(result.is_err(), "{what}: {result:?}");
    }
}

#[test]
fn unsigned_logs_chain_and_refuse_a_pinned_did() {
    let dir = tempfile::tempdir().unwrap();
    let path = Clock::new()
        .appender(dir.path(), None)
        .append(events(3))
        .unwrap()[0]
        .path
        .clone();
    let unpinned = TrustAnchors {
        agent: Some(agent()),
        pinned: true,
        ..TrustAnchors::default()
    };
    assert_eq!(verified(&path, &unpinned).signer, None);
    assert!(codes(&path, &pinned(1)).contains(&(Some(1), FindingCode::UnsignedEntry)));
    let mut all = lines(&path);
    all.swap(0, 1);
    write_lines(&path, &all);
    assert!(
        codes(&path, &unpinned)
            .iter()
            .any(|(_, c)| *c == FindingCode::ChainBroken)
    );
}

#[test]
fn concurrent_writers_of_one_agent_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let appender = clock.appender(dir.path(), Some(key(1)));
            scope.spawn(move || {
                for _ in 0..10 {
                    appender.append(events(5)).unwrap();
                }
            });
        }
    });
    let path = dir.path().join("my-agent-2026-08-08.jsonl");
    assert_eq!(verified(&path, &pinned(1)).entries, 200);
}

#[test]
fn the_writer_thread_group_commits_and_answers_everyone() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::start(Clock::new().appender(dir.path(), Some(key(1))));
    let pending: Vec<_> = events(500).into_iter().map(|e| log.submit(e)).collect();
    let mut seqs: Vec<u64> = pending.into_iter().map(|p| p.wait().unwrap().seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..500).collect::<Vec<_>>());
    let written = log.record(Event::new("run_finished").unwrap()).unwrap();
    assert_eq!(written.seq, 500);
    log.close();
    assert_eq!(verified(&written.path, &pinned(1)).entries, 501);
}

fn gate_decision(approver: &SigningIdentity, request_id: &str, decision: &str) -> Event {
    let digest = "sha256:4b3f00000000000000000000000000000000000000000000000000000000e91a";
    let signature = approver.sign(format!("{request_id}.{decision}.{digest}").as_bytes());
    let event = if decision == "approved" {
        "gate_approved"
    } else {
        "gate_denied"
    };
    Event::new(event)
        .and_then(|e| e.with("decided_by", "webhook"))
        .and_then(|e| e.with("approver", approver.did().to_string()))
        .and_then(|e| e.with("request_id", request_id))
        .and_then(|e| e.with("decision", decision))
        .and_then(|e| e.with("subject_digest", digest))
        .and_then(|e| {
            e.with(
                "signature",
                base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()),
            )
        })
        .unwrap()
}

#[test]
fn recorded_webhook_decisions_are_reverified_against_the_pinned_approver() {
    let dir = tempfile::tempdir().unwrap();
    let approver = key(5);
    let appender = Clock::new().appender(dir.path(), Some(key(1)));
    let path = appender
        .append(vec![gate_decision(&approver, "req-1", "approved")])
        .unwrap()[0]
        .path
        .clone();
    let mut anchors = pinned(1);
    anchors.approver = Some(approver.did().clone());
    verified(&path, &anchors);
    verified(&path, &TrustAnchors::default());
    anchors.approver = Some(key(6).did().clone());
    assert!(codes(&path, &anchors).contains(&(Some(1), FindingCode::ApprovalSignatureInvalid)));

    // An approval the approver never signed, recorded by a lying host.
    let forged = gate_decision(&key(7), "req-2", "approved");
    appender.append(vec![forged]).unwrap();
    anchors.approver = Some(approver.did().clone());
    assert!(codes(&path, &anchors).contains(&(Some(2), FindingCode::ApprovalSignatureInvalid)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any single-byte change anywhere in a signed log is caught.
    #[test]
    fn any_single_byte_edit_is_caught(position in any::<prop::sample::Index>(), replacement in any::<u8>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = signed_log(dir.path(), 4);
        let mut bytes = fs::read(&path).unwrap();
        let at = position.index(bytes.len());
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        fs::write(&path, &bytes).unwrap();
        let verdict = verify_file(&path, &pinned(1)).unwrap();
        prop_assert!(matches!(verdict, Verdict::Tampered { .. }), "edit at {} to {:#04x} not caught", at, replacement);
    }
}

/// Set in the child process of `a_writer_killed_mid_append_leaves_a_verifiable_prefix`.
const WRITER_DIR: &str = "CONSTLE_TEST_KILLED_WRITER_DIR";

#[test]
fn a_writer_killed_mid_append_leaves_a_verifiable_prefix() {
    if let Some(dir) = std::env::var_os(WRITER_DIR) {
        // The child: append as fast as possible until killed.
        let log = AuditLog::start(Appender::new(Path::new(&dir), agent(), Some(key(1))).unwrap());
        loop {
            let pending: Vec<_> = events(64).into_iter().map(|e| log.submit(e)).collect();
            pending.into_iter().for_each(|p| drop(p.wait().unwrap()));
        }
    }
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_writer_killed_mid_append_leaves_a_verifiable_prefix",
                "--nocapture",
            ])
            .env(WRITER_DIR, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150 + 37 * round));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let Some(path) = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        else {
            continue; // killed before the first write
        };
        let before = verified(&path, &TrustAnchors::default()).entries;
        // The next writer cuts off whatever was never acknowledged and goes on.
        let appender = Appender::new(dir.path(), agent(), Some(key(1))).unwrap();
        appender.append(events(1)).unwrap();
        let after = verified(&path, &pinned(1)).entries;
        assert!(
            after >= 1 && after <= before + 2,
            "round {round}: {before} entries before, {after} after"
        );
    }
}

/// The day files in `dir`, oldest first.
fn day_files(dir: &Path) -> Vec<PathBuf> {
    let mut days: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    days.sort();
    days
}

#[test]
fn verify_never_cries_tampering_on_a_log_being_written() {
    // Unsigned, so that each verify is cheap in a debug build: the head and
    // the file are read the same way for a signed log.
    let anchors = TrustAnchors {
        agent: Some(agent()),
        pinned: true,
        ..TrustAnchors::default()
    };
    // A writer staying within one day, and one crossing midnight every 24
    // entries (a new day file, a head moving to it).
    for (pace, step) in [("within a day", 1), ("across midnights", 3600)] {
        let dir = tempfile::tempdir().unwrap();
        let appender = Clock::new().appender_stepping(dir.path(), None, step);
        appender.append(events(1)).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writing = Arc::clone(&stop);
        // An append every millisecond or two, so verifying stays cheap
        // while there is an append during almost every round.
        let writer = std::thread::spawn(move || {
            while !writing.load(Ordering::SeqCst) {
                appender.append(events(1)).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        for round in 0..200 {
            // The latest day (checked against the head) and the one before
            // (checked against the latest's first entry).
            for path in day_files(dir.path()).iter().rev().take(2) {
                if let Verdict::Tampered { findings, .. } = verify_file(path, &anchors).unwrap() {
                    stop.store(true, Ordering::SeqCst);
                    panic!(
                        "{pace}, round {round}: {} reported {findings:#?}",
                        path.display()
                    );
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        // A real cut is still caught.
        let latest = day_files(dir.path()).pop().unwrap();
        let mut all = lines(&latest);
        all.pop();
        write_lines(&latest, &all);
        assert!(
            codes(&latest, &anchors).contains(&(None, FindingCode::TailRemoved)),
            "{pace}"
        );
    }
}

/// A log stopped the way a writer leaves it in the middle of its first
/// batch of a day: the day's file written, the head still naming the day
/// before. Returns the new day's file and the head the batch would store.
fn mid_batch_into_a_new_day(dir: &Path) -> (PathBuf, Vec<u8>) {
    let clock = Clock::new();
    let appender = clock.appender(dir, Some(key(1)));
    appender.append(events(2)).unwrap();
    let head = head_path(dir, &agent());
    let behind = fs::read(&head).unwrap();
    clock.next_day();
    let path = appender.append(events(1)).unwrap()[0].path.clone();
    let stored = fs::read(&head).unwrap();
    fs::write(&head, behind).unwrap();
    (path, stored)
}

/// Takes the writers' lock, as a writer does for a batch.
fn hold_writers_lock(dir: &Path) -> fs::File {
    let lock = fs::File::options()
        .write(true)
        .open(dir.join("my-agent.lock"))
        .unwrap();
    lock.lock().unwrap();
    lock
}

#[test]
fn verify_waits_out_a_writer_between_a_new_day_file_and_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let (path, stored) = mid_batch_into_a_new_day(dir.path());
    let lock = hold_writers_lock(dir.path());
    let head = head_path(dir.path(), &agent());
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        // Stored the way the writer stores it: a whole file renamed over.
        let temp = head.with_extension("head.tmp");
        fs::write(&temp, stored).unwrap();
        fs::rename(&temp, &head).unwrap();
        drop(lock);
    });
    verified(&path, &pinned(1));
    writer.join().unwrap();
}

#[test]
fn a_head_left_behind_a_new_day_with_no_writer_is_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = mid_batch_into_a_new_day(dir.path());
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::AnchorInvalid)));
    // Nor does a missing lock file pass for a writer at work.
    fs::remove_file(dir.path().join("my-agent.lock")).unwrap();
    assert!(codes(&path, &pinned(1)).contains(&(None, FindingCode::AnchorInvalid)));
}

#[test]
fn a_writer_holding_the_lock_throughout_leaves_the_check_unmade() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = mid_batch_into_a_new_day(dir.path());
    let _lock = hold_writers_lock(dir.path());
    // The day before has a later day beside it: it is checked at once.
    let earlier = day_files(dir.path()).remove(0);
    verified(&earlier, &pinned(1));
    let started = std::time::Instant::now();
    match verify_file(&path, &pinned(1)) {
        Err(ReadError::Busy { waited, .. }) => assert!(started.elapsed() >= waited),
        other => panic!("expected the check to be given up, got {other:?}"),
    }
}
