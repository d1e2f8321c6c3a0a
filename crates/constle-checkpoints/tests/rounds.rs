//! Rounds against real witnesses (constle-witness, on loopback): what is
//! cosigned, what is recorded, and what a missing witness does.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use constle_checkpoints::{Round, Trigger, Witness, latest_checkpoint_path};
use constle_identity::SigningIdentity;
use constle_tlog::{SignedCheckpoint, WitnessSigner, verify_cosignature};

mod support;

use support::{agent, append, checkpointer, config, log_key, witness};

/// A witness no one listens for.
fn down() -> Witness {
    let signer =
        WitnessSigner::new("down.example.org", SigningIdentity::from_bytes(&[9; 32])).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    Witness {
        endpoint: format!("http://127.0.0.1:{port}/add-checkpoint"),
        shown_url: format!("http://127.0.0.1:{port}"),
        key: signer.public().clone(),
    }
}

fn names(round: &Round) -> Vec<String> {
    round.events.iter().map(|e| e.name().to_owned()).collect()
}

#[tokio::test]
async fn two_witnesses_cosign_and_the_latest_checkpoint_carries_both() {
    let home = tempfile::tempdir().unwrap();
    let logs = home.path().join("logs");
    append(&logs, 3);
    let w1 = witness(1, &home.path().join("w1")).await;
    let w2 = witness(2, &home.path().join("w2")).await;
    let keys = [w1.key.clone(), w2.key.clone()];
    let mut c = checkpointer(&logs, config(vec![w1, w2], 2, true));
    let round = c.round(Trigger::RunEnd).await.unwrap();
    assert_eq!((round.size, round.cosigned), (3, 2));
    assert_eq!(
        names(&round),
        ["checkpoint", "checkpoint_cosigned", "checkpoint_cosigned"]
    );
    assert!(round.stop.is_none() && round.warnings.is_empty());

    let note = std::fs::read(latest_checkpoint_path(&logs, &agent())).unwrap();
    let (signed, cosignatures) = split_note(&note);
    let checkpoint = SignedCheckpoint::parse(signed)
        .unwrap()
        .verify(&log_key())
        .unwrap();
    assert_eq!(checkpoint.head().size, 3);
    for (key, line) in keys.iter().zip(cosignatures) {
        verify_cosignature(&checkpoint, key, line).unwrap();
    }

    // The round's own entries are in the next one, from the size cosigned.
    append(&logs, round.events.len());
    let next = c.round(Trigger::Interval).await.unwrap();
    assert_eq!((next.size, next.cosigned), (6, 2));
}

/// The note's bytes up to its agent signature, and the cosignature lines.
fn split_note(note: &[u8]) -> (&[u8], Vec<&str>) {
    let text = std::str::from_utf8(note).unwrap();
    let body_end = text.find("\n\n").unwrap() + 2;
    let first_sig_end = body_end + text[body_end..].find('\n').unwrap() + 1;
    let rest = text[first_sig_end..].lines().collect();
    (&note[..first_sig_end], rest)
}

#[tokio::test]
async fn a_new_run_learns_the_size_a_witness_cosigned_from_its_409() {
    let home = tempfile::tempdir().unwrap();
    let logs = home.path().join("logs");
    append(&logs, 2);
    let w1 = witness(1, &home.path().join("w1")).await;
    let first = checkpointer(&logs, config(vec![w1.clone()], 1, false))
        .round(Trigger::RunEnd)
        .await;
    assert_eq!(first.unwrap().cosigned, 1);
    append(&logs, 4);
    // A fresh checkpointer (the next run) starts from size 0 and is told 2.
    let round = checkpointer(&logs, config(vec![w1], 1, false))
        .round(Trigger::RunEnd)
        .await
        .unwrap();
    assert_eq!((round.size, round.cosigned), (6, 1), "{:?}", round.warnings);
}

#[tokio::test]
async fn a_witness_down_is_a_warning_and_an_entry_unless_the_quorum_is_required() {
    let home = tempfile::tempdir().unwrap();
    let logs = home.path().join("logs");
    append(&logs, 1);
    let w1 = witness(1, &home.path().join("w1")).await;
    let mut c = checkpointer(&logs, config(vec![w1.clone(), down()], 1, false));
    let round = c.round(Trigger::Entries).await.unwrap();
    assert_eq!(
        names(&round),
        [
            "checkpoint",
            "checkpoint_cosigned",
            "checkpoint_witness_failed"
        ]
    );
    assert!(round.stop.is_none());
    assert!(
        round.warnings[0].contains("down.example.org")
            && round.warnings[0].contains("cannot connect"),
        "{}",
        round.warnings[0]
    );

    let mut strict = checkpointer(&logs, config(vec![w1, down()], 2, true));
    let round = strict.round(Trigger::RunStart).await.unwrap();
    assert_eq!(names(&round).last().unwrap(), "checkpoint_quorum_missed");
    assert!(round.stop.unwrap().contains("cosigned by 1 of 2 witnesses"));
}

#[tokio::test]
async fn a_forked_history_is_never_cosigned() {
    let home = tempfile::tempdir().unwrap();
    let logs = home.path().join("logs");
    append(&logs, 3);
    let w1 = witness(1, &home.path().join("w1")).await;
    let mut c = checkpointer(&logs, config(vec![w1.clone()], 1, true));
    assert_eq!(c.round(Trigger::RunEnd).await.unwrap().cosigned, 1);
    // The key holder starts the log over: same key, another history.
    std::fs::remove_dir_all(&logs).unwrap();
    append(&logs, 5);
    let round = checkpointer(&logs, config(vec![w1], 1, true))
        .round(Trigger::RunEnd)
        .await
        .unwrap();
    assert_eq!(round.cosigned, 0);
    assert!(round.warnings[0].contains("422"), "{}", round.warnings[0]);
    assert!(round.stop.is_some());
}
