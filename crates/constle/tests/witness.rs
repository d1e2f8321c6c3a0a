//! `constle witness serve` over loopback HTTP, against the real binary:
//! every answer of c2sp.org/tlog-witness `add-checkpoint`, cosignatures
//! checked with `constle_tlog::verify_cosignature`, the monitoring
//! `GET <origin hash>/checkpoint`, the state kept across a SIGKILL, and a
//! damaged state refused rather than reset.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::{Name, SigningIdentity};
use constle_tlog::{
    AddCheckpoint, Deployment, Hash, LogKey, LogTree, Origin, SignedCheckpoint, TreeHead,
    WitnessKey, checkpoint_text, find_cosignature, sign_checkpoint, verify_cosignature,
};
use sha2::{Digest as _, Sha256};

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

    /// A note signature line by the log's key over `text`.
    fn signature_line(&self, text: &[u8]) -> String {
        let mut sig = self.key.key_id().to_be_bytes().to_vec();
        sig.extend_from_slice(&self.agent.sign(text).to_bytes());
        format!("— {} {}\n", self.key.origin(), BASE64.encode(sig))
    }

    /// The checkpoint of `head`, whatever it claims, with the log key's
    /// valid signature: what `sign_checkpoint` refuses to write.
    fn signed_anyway(&self, head: TreeHead) -> Vec<u8> {
        let text = checkpoint_text(self.key.origin(), head);
        let mut note = text.clone();
        note.push(b'\n');
        note.extend_from_slice(self.signature_line(&text).as_bytes());
        note
    }

    /// The monitoring path of this log: `/<hex SHA-256 of the origin>/checkpoint`.
    fn monitoring_path(&self) -> String {
        let hash = Sha256::digest(self.key.origin().as_str().as_bytes());
        format!("/{}/checkpoint", hex::encode(hash))
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

    fn get(&self, path: &str) -> Response {
        http::request(&self.addr, "GET", path, &[], b"").unwrap()
    }

    /// The checkpoint the witness serves monitors for `log`: of `size`,
    /// with the log's signature and the witness's cosignature, both valid.
    #[track_caller]
    fn serves(&self, log: &Log, size: u64) -> String {
        let response = self.get(&log.monitoring_path());
        assert_eq!(response.status, 200, "{}", response.text());
        let served = SignedCheckpoint::parse(&response.body).unwrap();
        let checkpoint = served.verify(&log.key).unwrap();
        assert_eq!(checkpoint.head(), log.tree.head_at(size).unwrap());
        let cosigned = find_cosignature(&checkpoint, &self.key).unwrap();
        assert_eq!(cosigned.witness(), WITNESS_NAME);
        assert_eq!(served.signature_lines().count(), 2, "{}", response.text());
        response.text()
    }

    /// Submits, expects 200, and checks the cosignature of the checkpoint.
    #[track_caller]
    fn cosigns(&self, log: &Log, old: u64, size: u64) {
        self.cosigns_body(log, &log.body(old, size), size);
    }

    /// Submits `body`, expects 200, and checks the cosignature of `log`'s
    /// checkpoint of `size`.
    #[track_caller]
    fn cosigns_body(&self, log: &Log, body: &[u8], size: u64) {
        let response = self.submit(body);
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
    // The format line, then the checkpoint as monitors get it.
    let expected = format!("constle-witness-head/v2\n{}", witness.serves(&log, 4));
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
    // A valid signature by the log's key beside one by the same key that
    // does not verify: the note is malformed (c2sp.org/signed-note), 403.
    let mut doubly = log.body(0, 4);
    let forged = log.signature_line(b"another text\n");
    doubly.extend_from_slice(forged.as_bytes());
    witness.refuses(&doubly, 403);
    assert!(!state_file(&case, &log).exists());
    witness.cosigns(&log, 0, 4);
}

#[test]
fn a_size_0_checkpoint_without_the_empty_root_is_422() {
    let case = Case::new();
    let log = Log::new(1, "bot", 4);
    let witness = Witness::start(&case, &[&log.key]);
    let wrong = TreeHead {
        size: 0,
        root: log.tree.root(),
    };
    let mut body = b"old 0\n\n".to_vec();
    body.extend_from_slice(&log.signed_anyway(wrong));
    witness.refuses(&body, 422);
    // Not a signature the witness checked: 403 comes first.
    let other = Log::new(2, "bot", 0);
    let mut body = b"old 0\n\n".to_vec();
    body.extend_from_slice(&other.signed_anyway(wrong));
    witness.refuses(&body, 403);
    // The empty tree itself is cosigned.
    witness.cosigns(&log, 0, 0);
    assert!(state_file(&case, &log).exists());
}

#[test]
fn monitors_get_the_latest_cosigned_checkpoint_of_each_log() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let other = Log::new(3, "other-bot", 2);
    let witness = Witness::start(&case, &[&log.key, &other.key]);
    // It says where, for each log, as it starts.
    let said = witness.stderr.lock().unwrap().clone();
    let url = format!("http://{}{}", witness.addr, log.monitoring_path());
    assert!(said.contains(&url), "{said}");
    // Never cosigned, or not a log it witnesses: 404.
    assert_eq!(witness.get(&log.monitoring_path()).status, 404);
    let unknown = Log::new(1, "stranger", 0);
    assert_eq!(witness.get(&unknown.monitoring_path()).status, 404);
    assert_eq!(witness.get("/checkpoint").status, 404);
    witness.cosigns(&log, 0, 4);
    witness.serves(&log, 4);
    assert_eq!(witness.get(&other.monitoring_path()).status, 404);
    witness.cosigns(&log, 4, 9);
    let served = witness.serves(&log, 9);
    // A refused submission changes nothing served.
    witness.refuses(&log.body(4, 9), 409);
    assert_eq!(witness.serves(&log, 9), served);
    // Only the signatures the witness checked and made: not others'.
    let mut extra = log.body(9, 9);
    let stranger = Log::new(5, "bot", 0);
    extra.extend_from_slice(stranger.signature_line(b"x\n").as_bytes());
    witness.cosigns_body(&log, &extra, 9);
    assert_eq!(witness.serves(&log, 9), served);
    // What it served survives a SIGKILL.
    witness.kill();
    let witness = Witness::start(&case, &[&log.key, &other.key]);
    assert_eq!(witness.serves(&log, 9), served);
    assert_eq!(witness.get(&other.monitoring_path()).status, 404);
}

#[test]
fn a_head_stored_before_checkpoints_were_kept_still_holds() {
    let case = Case::new();
    let log = Log::new(1, "bot", 9);
    let witness = Witness::start(&case, &[&log.key]);
    witness.cosigns(&log, 0, 5);
    witness.kill();
    // As an earlier witness wrote it: the head alone.
    let file = state_file(&case, &log);
    let head = log.tree.head_at(5).unwrap();
    let v1 = format!(
        "constle-witness-head/v1\n{}\n5\n{}\n",
        log.key.origin(),
        head.root
    );
    fs::write(&file, &v1).unwrap();
    let witness = Witness::start(&case, &[&log.key]);
    stale(&witness.refuses(&log.body(0, 9), 409), 5);
    assert_eq!(witness.get(&log.monitoring_path()).status, 404);
    // The same head again is cosigned, and kept this time.
    witness.cosigns(&log, 5, 5);
    witness.serves(&log, 5);
    witness.cosigns(&log, 5, 9);
    witness.serves(&log, 9);
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
