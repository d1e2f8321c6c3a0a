//! `constle witness serve` over loopback HTTP, against the real binary:
//! every answer of c2sp.org/tlog-witness `add-checkpoint`, cosignatures
//! checked with `constle_tlog::verify_cosignature`, the state kept across
//! a SIGKILL, and a damaged state refused rather than reset.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use constle_identity::{Name, SigningIdentity};
use constle_tlog::{
    AddCheckpoint, Deployment, Hash, LogKey, LogTree, Origin, SignedCheckpoint, WitnessKey,
    sign_checkpoint, verify_cosignature,
};

mod common;

use common::Case;
use common::http::{self, Response};
use common::witnesses::started;

const WITNESS_NAME: &str = "witness.example.org/w1";

/// The log under test: its agent key, log key and lines.
struct Log {
    agent: SigningIdentity,
    key: LogKey,
    tree: LogTree,
}

impl Log {
    fn new(seed: u8, agent: &str, lines: u64) -> Log {
        let agent_key = SigningIdentity::from_bytes(&[seed; 32]);
        let origin = Origin::new(
            &Deployment::new("ci.example.com").unwrap(),
            &Name::new(agent).unwrap(),
        );
        let key = LogKey::new(origin, agent_key.did());
        let mut tree = LogTree::new();
        for i in 0..lines {
            tree.push(format!("{{\"seq\":{i}}}").as_bytes());
        }
        Log {
            agent: agent_key,
            key,
            tree,
        }
    }

    fn checkpoint(&self, size: u64) -> SignedCheckpoint {
        sign_checkpoint(&self.agent, &self.key, self.tree.head_at(size).unwrap()).unwrap()
    }

    /// The body submitting the checkpoint of `size`, with the proof from `old`.
    fn body(&self, old: u64, size: u64) -> Vec<u8> {
        let proof = match old {
            0 => vec![],
            _ => self
                .tree
                .consistency_proof(old, size)
                .unwrap()
                .hashes()
                .to_vec(),
        };
        AddCheckpoint {
            old_size: old,
            proof,
            checkpoint: self.checkpoint(size),
        }
        .to_bytes()
    }
}

/// A running `constle witness serve`, killed (SIGKILL) when dropped.
struct Witness {
    child: Child,
    addr: String,
    key: WitnessKey,
    stderr: Arc<Mutex<String>>,
}

impl Witness {
    /// Serves for the logs `logs` (making the witness key if there is none).
    fn start(case: &Case, logs: &[&LogKey]) -> Witness {
        if !case.home().join("keys/witness/w.pem").exists() {
            case.keygen(&["witness-keygen", "w"]);
        }
        let file = case.path("logs.txt");
        let text: String = logs.iter().map(|k| format!("{}\n", k.vkey())).collect();
        fs::write(&file, text).unwrap();
        let mut child = case
            .command(&[
                "witness",
                "serve",
                "--key",
                "w",
                "--name",
                WITNESS_NAME,
                "--logs",
                file.to_str().unwrap(),
                "--listen",
                ":0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (key, addr) = started(&mut child, &stderr);
        assert_eq!(key.name(), WITNESS_NAME);
        Witness {
            child,
            addr,
            key,
            stderr,
        }
    }

    fn submit(&self, body: &[u8]) -> Response {
        http::request(&self.addr, "POST", "/add-checkpoint", &[], body).unwrap()
    }

    /// Submits, expects 200, and checks the cosignature of the checkpoint.
    #[track_caller]
    fn cosigns(&self, log: &Log, old: u64, size: u64) {
        let response = self.submit(&log.body(old, size));
        assert_eq!(response.status, 200, "{}", response.text());
        let checkpoint = log.checkpoint(size).verify(&log.key).unwrap();
        let line = response.text();
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        let cosignature = verify_cosignature(&checkpoint, &self.key, &line).unwrap();
        assert_eq!(cosignature.witness(), WITNESS_NAME);
    }

    /// Submits, expects `status` and no cosignature.
    #[track_caller]
    fn refuses(&self, body: &[u8], status: u16) -> Response {
        let response = self.submit(body);
        assert_eq!(response.status, status, "{}", response.text());
        assert!(!response.text().contains('—'), "{}", response.text());
        response
    }

    /// SIGKILL, at once.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The state file of `log` in the default state directory.
fn state_file(case: &Case, log: &Log) -> PathBuf {
    let name = log.key.origin().as_str().replace('/', "%2F");
    case.home().join(format!("witness/w/{name}.head"))
}

#[track_caller]
fn stale(response: &Response, latest: u64) {
    assert_eq!(response.header("content-type"), Some("text/x.tlog.size"));
    assert_eq!(response.text(), format!("{latest}\n"));
}

#[test]
fn a_first_checkpoint_and_a_consistent_extension_are_cosigned_and_stored() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 4);
    let file = state_file(&case, &log);
    let head = log.tree.head_at(4).unwrap();
    let expected = format!(
        "constle-witness-head/v1\n{}\n4\n{}\n",
        log.key.origin(),
        head.root
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), expected);
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let dir = file.parent().unwrap();
    assert_eq!(
        fs::metadata(dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    witness.cosigns(&log, 4, 9);
    assert!(fs::read_to_string(&file).unwrap().contains("\n9\n"));
    // The same head once more is cosigned again; nothing moves back.
    witness.cosigns(&log, 9, 9);
}

#[test]
fn a_stale_old_size_is_409_with_the_size_last_cosigned() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    // Never cosigned: the latest size is 0.
    stale(&witness.refuses(&log.body(3, 9), 409), 0);
    witness.cosigns(&log, 0, 5);
    stale(&witness.refuses(&log.body(0, 9), 409), 5);
    stale(&witness.refuses(&log.body(3, 9), 409), 5);
    // An older checkpoint, from the right old size: old size above its size.
    let older = AddCheckpoint {
        old_size: 5,
        proof: vec![],
        checkpoint: log.checkpoint(4),
    };
    witness.refuses(&older.to_bytes(), 400);
    witness.refuses(&log.body(5, 5).replace_first_line("old 6"), 400);
}

#[test]
fn a_bad_consistency_proof_is_422_and_changes_nothing() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 3);
    let mut request = AddCheckpoint::parse(&log.body(3, 9)).unwrap();
    request.proof[0] = Hash([7; 32]);
    witness.refuses(&request.to_bytes(), 422);
    request.proof.pop();
    witness.refuses(&request.to_bytes(), 422);
    // The stored head is still 3.
    stale(&witness.refuses(&log.body(0, 9), 409), 3);
    witness.cosigns(&log, 3, 9);
}

#[test]
fn a_forked_checkpoint_is_refused_and_never_cosigned() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 6);
    // The same key signs another history: entry 2 rewritten.
    let mut fork = Log::new(1, "bot", 0);
    for i in 0..9 {
        let line = match i {
            2 => "{\"seq\":2,\"rewritten\":true}".to_owned(),
            _ => format!("{{\"seq\":{i}}}"),
        };
        fork.tree.push(line.as_bytes());
    }
    // Same size, other root.
    witness.refuses(&fork.body(6, 6), 422);
    // A larger tree of the fork, with its own (valid for it) proof from 6.
    witness.refuses(&fork.body(6, 9), 422);
    // From 0 as if new: stale.
    stale(&witness.refuses(&fork.body(0, 6), 409), 6);
    // The real history still extends.
    witness.cosigns(&log, 6, 9);
    assert!(
        fs::read_to_string(state_file(&case, &log))
            .unwrap()
            .contains(&log.tree.root().to_string())
    );
}

#[test]
fn an_unknown_origin_is_404_and_a_bad_signature_403() {
    let case = Case::new();
    let log = Log::new(1, "bot", 4);
    let other = Log::new(1, "other-bot", 4);
    let witness = Witness::start(&case, &[&log.key]);
    witness.refuses(&other.body(0, 4), 404);
    // Signed by another key under the known origin.
    let mut impostor = Log::new(2, "bot", 4);
    impostor.key = LogKey::new(log.key.origin().clone(), impostor.agent.did());
    witness.refuses(&impostor.body(0, 4), 403);
    // The real signature on a changed size.
    let body = String::from_utf8(log.body(0, 4)).unwrap();
    let changed = body.replacen("\n4\n", "\n3\n", 1);
    assert_ne!(body, changed);
    witness.refuses(changed.as_bytes(), 403);
    witness.refuses(b"old 0\n\nnot a checkpoint\n", 400);
    witness.refuses(b"", 400);
    assert!(!state_file(&case, &log).exists());
    witness.cosigns(&log, 0, 4);
}

#[test]
fn a_witness_killed_right_after_a_200_keeps_what_it_answered() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 5);
    witness.kill();
    let witness = Witness::start(&case, &[&log.key]);
    assert!(
        witness
            .stderr
            .lock()
            .unwrap()
            .contains("last cosigned size 5"),
        "{}",
        witness.stderr.lock().unwrap()
    );
    stale(&witness.refuses(&log.body(0, 5), 409), 5);
    witness.cosigns(&log, 5, 7);
    witness.kill();
    let witness = Witness::start(&case, &[&log.key]);
    stale(&witness.refuses(&log.body(5, 9), 409), 7);
    witness.cosigns(&log, 7, 9);
}

#[test]
fn a_damaged_state_file_is_refused_not_reset() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 5);
    let file = state_file(&case, &log);
    let damaged = fs::read_to_string(&file)
        .unwrap()
        .replace("\n5\n", "\n05\n");
    fs::write(&file, &damaged).unwrap();
    witness.refuses(&log.body(5, 9), 500);
    witness.refuses(&log.body(0, 9), 500);
    assert!(
        witness
            .stderr
            .lock()
            .unwrap()
            .contains(file.to_str().unwrap())
    );
    // Vanished while the witness knew it: refused too, not read as new.
    fs::remove_file(&file).unwrap();
    witness.refuses(&log.body(0, 9), 500);
    fs::write(&file, &damaged).unwrap();
    witness.kill();
    // After a restart, still refused, and the file left as it was.
    let witness = Witness::start(&case, &[&log.key]);
    assert!(
        witness
            .stderr
            .lock()
            .unwrap()
            .contains("refused (answers 500)"),
        "{}",
        witness.stderr.lock().unwrap()
    );
    witness.refuses(&log.body(0, 9), 500);
    assert_eq!(fs::read_to_string(&file).unwrap(), damaged);
}

trait FirstLine {
    fn replace_first_line(&self, line: &str) -> Vec<u8>;
}

impl FirstLine for Vec<u8> {
    /// The body with its `old` line replaced.
    fn replace_first_line(&self, line: &str) -> Vec<u8> {
        let end = self.iter().position(|&b| b == b'\n').unwrap();
        let mut out = line.as_bytes().to_vec();
        out.extend_from_slice(&self[end..]);
        out
    }
}
