#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Barrier};

use constle_identity::{Name, SigningIdentity};
use constle_tlog::{
    AddCheckpoint, Deployment, LogKey, LogTree, Origin, WitnessSigner, sign_checkpoint,
};

use super::*;

struct Setup {
    _dir: tempfile::TempDir,
    agent: SigningIdentity,
    key: LogKey,
    witness: Witness,
}

fn setup() -> Setup {
    let agent = SigningIdentity::from_bytes(&[1; 32]);
    let origin = Origin::new(
        &Deployment::new("ci.example.com").unwrap(),
        &Name::new("bot").unwrap(),
    );
    let key = LogKey::new(origin, agent.did());
    let logs = Logs::parse(&format!("# a comment\n\n{}\n", key.vkey()), "logs".as_ref()).unwrap();
    let signer = WitnessSigner::new(
        "witness.example.org/w1",
        SigningIdentity::from_bytes(&[2; 32]),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    Setup {
        _dir: dir,
        agent,
        key,
        witness: Witness::new(signer, logs, state),
    }
}

fn body(s: &Setup, tree: &LogTree, old: u64, size: u64) -> Vec<u8> {
    let checkpoint = sign_checkpoint(&s.agent, &s.key, tree.head_at(size).unwrap()).unwrap();
    let proof = match old {
        0 => vec![],
        _ => tree.consistency_proof(old, size).unwrap().hashes().to_vec(),
    };
    AddCheckpoint {
        old_size: old,
        proof,
        checkpoint,
    }
    .to_bytes()
}

#[test]
fn concurrent_submissions_from_one_old_size_pass_once() {
    let s = Arc::new(setup());
    let mut tree = LogTree::new();
    for i in 0..10u8 {
        tree.push(&[i]);
    }
    assert_eq!(
        s.witness.add_checkpoint(&body(&s, &tree, 0, 1), 1).status,
        200
    );
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (2..10)
        .map(|size| {
            let (s, barrier, body) = (
                Arc::clone(&s),
                Arc::clone(&barrier),
                body(&s, &tree, 1, size),
            );
            std::thread::spawn(move || {
                barrier.wait();
                (size, s.witness.add_checkpoint(&body, 2))
            })
        })
        .collect();
    let answers: Vec<(u64, Answer)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let passed: Vec<u64> = answers
        .iter()
        .filter(|(_, a)| a.status == 200)
        .map(|(size, _)| *size)
        .collect();
    assert_eq!(passed.len(), 1, "{answers:?}");
    for (_, answer) in answers.iter().filter(|(_, a)| a.status != 200) {
        assert_eq!(answer.status, 409, "{answer:?}");
        assert_eq!(answer.body, format!("{}\n", passed[0]).into_bytes());
    }
    let stored = s.witness.state().load(s.key.origin().as_str()).unwrap();
    assert_eq!(stored.unwrap().head, tree.head_at(passed[0]).unwrap());
}

#[test]
fn a_resubmission_of_the_head_last_cosigned_is_cosigned_again_without_a_write() {
    let s = setup();
    let mut tree = LogTree::new();
    tree.push(b"a");
    tree.push(b"b");
    assert_eq!(
        s.witness.add_checkpoint(&body(&s, &tree, 0, 2), 1).status,
        200
    );
    let file = s.witness.state().file(s.key.origin().as_str());
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    let again = s.witness.add_checkpoint(&body(&s, &tree, 2, 2), 2);
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        before
    );
    let stored = s.witness.state().load(s.key.origin().as_str()).unwrap();
    assert_eq!(stored.unwrap().head, tree.head());
}

#[test]
fn the_logs_file_is_read_strictly() {
    let s = setup();
    let vkey = s.key.vkey();
    for bad in [
        String::new(),
        "# only a comment\n".to_owned(),
        format!("{vkey}\n{vkey}\n"),
        format!("{vkey}x\n"),
        "witness.example.org/w1+00000000+AAAA\n".to_owned(),
    ] {
        assert!(Logs::parse(&bad, "logs".as_ref()).is_err(), "{bad:?}");
    }
    let logs = Logs::parse(&format!("  {vkey}  \n"), "logs".as_ref()).unwrap();
    assert_eq!(logs.origins(), ["ci.example.com/constle/bot"]);
}
