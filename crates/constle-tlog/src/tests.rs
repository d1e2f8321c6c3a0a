//! Tests across modules: the tree against an independent RFC 6962
//! implementation, proofs, tampering, checkpoints, cosignatures and the
//! witness's check.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use base64::Engine as _;
use constle_identity::{Name, SigningIdentity};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

use crate::*;

/// RFC 6962 §2.1 MTH, written out recursively and independently of
/// `tlog_tiles`.
fn reference_root(leaves: &[Vec<u8>]) -> Hash {
    fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
        match leaves.len() {
            0 => Sha256::digest(b"").into(),
            1 => Sha256::new()
                .chain_update([0u8])
                .chain_update(&leaves[0])
                .finalize()
                .into(),
            n => {
                let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
                Sha256::new()
                    .chain_update([1u8])
                    .chain_update(mth(&leaves[..k]))
                    .chain_update(mth(&leaves[k..]))
                    .finalize()
                    .into()
            }
        }
    }
    Hash(mth(leaves))
}

fn tree_of(leaves: &[Vec<u8>]) -> LogTree {
    let mut tree = LogTree::new();
    for leaf in leaves {
        tree.push(leaf);
    }
    tree
}

fn agent_key() -> SigningIdentity {
    SigningIdentity::from_bytes(&[1; 32])
}

fn log_key() -> LogKey {
    let origin = Origin::new(
        &Deployment::new("ci.example.com").unwrap(),
        &Name::new("bot").unwrap(),
    );
    LogKey::new(origin, agent_key().did())
}

fn checkpoint(head: TreeHead) -> VerifiedCheckpoint {
    sign_checkpoint(&agent_key(), &log_key(), head)
        .unwrap()
        .verify(&log_key())
        .unwrap()
}

fn witness() -> WitnessSigner {
    WitnessSigner::new(
        "witness.example.org/w1",
        SigningIdentity::from_bytes(&[2; 32]),
    )
    .unwrap()
}

/// Distinct leaves, like a chain's lines (each names its own seq).
fn lines(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{{\"seq\":{i},\"event\":\"e\"}}").into_bytes())
        .collect()
}

#[test]
fn empty_tree_and_known_roots() {
    let tree = LogTree::new();
    assert_eq!(tree.root(), Hash::EMPTY);
    assert_eq!(
        Hash::EMPTY.to_string(),
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    );
    // RFC 6962 leaf hash of the empty leaf.
    assert_eq!(
        hex::encode(Hash::leaf(b"").as_bytes()),
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    );
    assert!(matches!(
        tree.root_at(1),
        Err(ProofError::SizeBeyondTree { size: 1, len: 0 })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn roots_match_rfc6962_at_every_size(leaves in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..70)) {
        let tree = tree_of(&leaves);
        prop_assert_eq!(tree.len(), leaves.len() as u64);
        for size in 0..=leaves.len() {
            prop_assert_eq!(tree.root_at(size as u64).unwrap(), reference_root(&leaves[..size]));
        }
    }

    #[test]
    fn inclusion_proofs_verify(n in 1usize..300, picks in prop::collection::vec((any::<u64>(), any::<u64>()), 8)) {
        let leaves = lines(n);
        let tree = tree_of(&leaves);
        for (a, b) in picks {
            let size = 1 + b % n as u64;
            let index = a % size;
            let head = tree.head_at(size).unwrap();
            let proof = tree.inclusion_proof(index, size).unwrap();
            prop_assert!(verify_inclusion(&leaves[index as usize], &head, &proof).is_ok());
            // Another leaf, another index, or another root does not verify.
            let other = (index as usize + 1) % n;
            if other != index as usize {
                prop_assert!(verify_inclusion(&leaves[other], &head, &proof).is_err());
            }
            let wrong = TreeHead { size, root: Hash::leaf(b"x") };
            prop_assert!(verify_inclusion(&leaves[index as usize], &wrong, &proof).is_err());
        }
    }

    #[test]
    fn consistency_proofs_verify_and_appends_extend(n in 1usize..300, appended in 0usize..40, a in any::<u64>()) {
        let mut leaves = lines(n + appended);
        let mut tree = tree_of(&leaves[..n]);
        let m = a % (n as u64 + 1);
        let old = tree.head_at(m).unwrap();
        for leaf in &leaves[n..] {
            tree.push(leaf);
        }
        let new = tree.head();
        let proof = tree.consistency_proof(m, new.size).unwrap();
        prop_assert!(verify_consistency(&old, &new, &proof).is_ok());
        // The incremental tree is the tree of all the lines.
        prop_assert_eq!(new.root, reference_root(&leaves));
        leaves.clear();
    }

    /// Any rewrite of the history before a checkpointed size: an edited,
    /// deleted or reordered leaf, or a truncation, possibly followed by new
    /// entries, cannot be proved consistent with the checkpoint, and a
    /// witness holding it refuses.
    #[test]
    fn rewrites_before_a_checkpoint_are_caught(
        n in 2usize..150,
        m_pick in any::<u64>(),
        kind in 0u8..4,
        i_pick in any::<u64>(),
        j_pick in any::<u64>(),
        extra in 0usize..20,
    ) {
        let leaves = lines(n);
        let tree = tree_of(&leaves);
        let m = 1 + m_pick % n as u64;
        let cosigned = tree.head_at(m).unwrap();
        let i = (i_pick % m) as usize;
        let mut forged = leaves.clone();
        match kind {
            0 => forged[i].push(b' '),
            1 => { forged.remove(i); }
            2 => {
                let j = (j_pick % n as u64) as usize;
                let j = if j == i { (i + 1) % n } else { j };
                forged.swap(i, j);
            }
            _ => forged.truncate(i),
        }
        forged.extend((0..extra).map(|k| format!("{{\"new\":{k}}}").into_bytes()));
        let forged_tree = tree_of(&forged);
        let forged_head = forged_tree.head();
        let submitted = checkpoint(forged_head);
        if forged_head.size < m {
            prop_assert!(forged_tree.consistency_proof(m, forged_head.size).is_err());
            let refusal = check_submission(Some(cosigned), m, &[], &submitted).unwrap_err();
            prop_assert_eq!(refusal.status(), 400);
        } else {
            prop_assert_ne!(forged_tree.root_at(m).unwrap(), cosigned.root);
            let proof = forged_tree.consistency_proof(m, forged_head.size).unwrap();
            prop_assert!(verify_consistency(&cosigned, &forged_head, &proof).is_err());
            let refusal = check_submission(Some(cosigned), m, proof.hashes(), &submitted).unwrap_err();
            prop_assert_eq!(refusal.status(), 422);
        }
    }
}

#[test]
fn proof_bounds_and_sizes() {
    let tree = tree_of(&lines(10));
    assert!(matches!(
        tree.inclusion_proof(10, 10),
        Err(ProofError::IndexOutOfRange { .. })
    ));
    assert!(tree.inclusion_proof(0, 11).is_err());
    assert!(matches!(
        tree.consistency_proof(5, 4),
        Err(ProofError::SizesOutOfOrder { .. })
    ));
    assert!(tree.consistency_proof(0, 10).unwrap().hashes().is_empty());
    assert!(tree.consistency_proof(10, 10).unwrap().hashes().is_empty());
    assert!(matches!(
        ConsistencyProof::new(1, 2, vec![Hash::EMPTY; 64]),
        Err(ProofError::TooLong { len: 64, max: 63 })
    ));
    // A proof for other sizes than the heads.
    let proof = tree.consistency_proof(3, 10).unwrap();
    assert!(matches!(
        verify_consistency(&tree.head_at(4).unwrap(), &tree.head(), &proof),
        Err(ProofError::SizeMismatch { .. })
    ));
    // From the empty tree, only the empty proof; the empty root only.
    let from_empty = ConsistencyProof::new(0, 10, vec![Hash::EMPTY]).unwrap();
    assert!(verify_consistency(&TreeHead::EMPTY, &tree.head(), &from_empty).is_err());
    let bad_empty = TreeHead {
        size: 0,
        root: Hash::leaf(b""),
    };
    let proof = tree.consistency_proof(0, 10).unwrap();
    assert!(matches!(
        verify_consistency(&bad_empty, &tree.head(), &proof),
        Err(ProofError::EmptyTreeRoot { .. })
    ));
}

#[test]
fn checkpoints_round_trip_and_verify() {
    let tree = tree_of(&lines(5));
    let signed = sign_checkpoint(&agent_key(), &log_key(), tree.head()).unwrap();
    let text = std::str::from_utf8(signed.as_bytes()).unwrap();
    assert!(text.starts_with(&format!(
        "ci.example.com/constle/bot\n5\n{}\n\n— ci.example.com/constle/bot ",
        tree.root()
    )));
    let parsed = SignedCheckpoint::parse(signed.as_bytes()).unwrap();
    assert_eq!(parsed, signed);
    let verified = parsed.verify(&log_key()).unwrap();
    assert_eq!(verified.head(), tree.head());
    assert_eq!(verified.origin(), log_key().origin());
    // Signature lines of other keys are ignored.
    let mut with_other = signed.as_bytes().to_vec();
    with_other.extend_from_slice("— other.example/log AAAAAQE=\n".as_bytes());
    SignedCheckpoint::parse(&with_other)
        .unwrap()
        .verify(&log_key())
        .unwrap();
}

#[test]
fn every_edited_byte_of_a_checkpoint_is_refused() {
    let signed = sign_checkpoint(&agent_key(), &log_key(), tree_of(&lines(7)).head()).unwrap();
    let bytes = signed.as_bytes();
    for at in 0..bytes.len() {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut edited = bytes.to_vec();
            edited[at] ^= flip;
            let outcome = SignedCheckpoint::parse(&edited).and_then(|c| c.verify(&log_key()));
            assert!(outcome.is_err(), "byte {at} ^ {flip:#x} was accepted");
        }
    }
}

#[test]
fn checkpoints_are_refused_clearly() {
    let head = tree_of(&lines(3)).head();
    let signed = sign_checkpoint(&agent_key(), &log_key(), head).unwrap();
    // Another key of the same origin: not signed by the log's key.
    let other = LogKey::new(
        log_key().origin().clone(),
        SigningIdentity::from_bytes(&[9; 32]).did(),
    );
    assert!(matches!(
        signed.verify(&other),
        Err(CheckpointError::NotSigned { .. })
    ));
    // Another log.
    let elsewhere = LogKey::new(
        Origin::parse("ci.example.com/constle/other").unwrap(),
        agent_key().did(),
    );
    assert!(matches!(
        signed.verify(&elsewhere),
        Err(CheckpointError::OriginMismatch { .. })
    ));
    // Signing with a key that is not the log key's.
    assert!(matches!(
        sign_checkpoint(&SigningIdentity::from_bytes(&[9; 32]), &log_key(), head),
        Err(CheckpointError::WrongSigner { .. })
    ));
    // A signature by the log's key over other text: invalid, not ignored.
    let other_text = sign_checkpoint(&agent_key(), &log_key(), tree_of(&lines(4)).head()).unwrap();
    let forged_sig = other_text.signature_lines().next().unwrap();
    let mut forged = signed.text().to_vec();
    forged.push(b'\n');
    forged.extend_from_slice(forged_sig);
    forged.push(b'\n');
    assert!(matches!(
        SignedCheckpoint::parse(&forged).unwrap().verify(&log_key()),
        Err(CheckpointError::InvalidSignature { .. })
    ));
    // Extension lines, non-canonical size, no signatures, no final newline.
    let sig = std::str::from_utf8(signed.signature_lines().next().unwrap()).unwrap();
    for (bad, error) in [
        (
            format!(
                "ci.example.com/constle/bot\n3\n{}\next\n\n{sig}\n",
                head.root
            ),
            CheckpointError::ExtensionLines,
        ),
        (
            format!("ci.example.com/constle/bot\n03\n{}\n\n{sig}\n", head.root),
            CheckpointError::MalformedCheckpoint,
        ),
        (
            format!("ci.example.com/constle/bot\n3\n{}\n", head.root),
            CheckpointError::MalformedNote,
        ),
        (
            format!("ci.example.com/constle/bot\n3\n{}\n\n{sig}", head.root),
            CheckpointError::MalformedNote,
        ),
    ] {
        assert_eq!(
            SignedCheckpoint::parse(bad.as_bytes()).unwrap_err(),
            error,
            "{bad:?}"
        );
    }
    assert!(matches!(
        SignedCheckpoint::parse(&vec![b'a'; MAX_CHECKPOINT_BYTES + 1]),
        Err(CheckpointError::TooLarge { .. })
    ));
}

#[test]
fn cosignatures_verify_and_fail_on_any_change() {
    let checkpoint = checkpoint(tree_of(&lines(4)).head());
    let witness = witness();
    let cosignature = cosign(&checkpoint, &witness, 1_767_225_600).unwrap();
    assert!(cosignature.line().starts_with("— witness.example.org/w1 "));
    assert!(cosignature.line().ends_with('\n'));
    let verified = verify_cosignature(&checkpoint, witness.public(), cosignature.line()).unwrap();
    assert_eq!(verified.timestamp(), 1_767_225_600);
    assert_eq!(verified.witness(), "witness.example.org/w1");

    // On another checkpoint, it does not verify.
    let other = self::checkpoint(tree_of(&lines(5)).head());
    assert!(matches!(
        verify_cosignature(&other, witness.public(), cosignature.line()),
        Err(CosignatureError::InvalidSignature { .. })
    ));
    // Another witness's key.
    let stranger = WitnessSigner::new(
        "witness.example.org/w2",
        SigningIdentity::from_bytes(&[3; 32]),
    )
    .unwrap();
    assert!(matches!(
        verify_cosignature(&checkpoint, stranger.public(), cosignature.line()),
        Err(CosignatureError::OtherKey { .. })
    ));
    // The checkpoint's own signature is not a cosignature.
    let log_line =
        std::str::from_utf8(checkpoint.signed().signature_lines().next().unwrap()).unwrap();
    assert!(verify_cosignature(&checkpoint, witness.public(), log_line).is_err());
    // Timestamps out of range.
    assert!(cosign(&checkpoint, &witness, 0).is_err());
    assert!(cosign(&checkpoint, &witness, 1 << 63).is_err());
    assert!(cosign(&checkpoint, &witness, (1 << 63) - 1).is_ok());

    // Attached to the note, it is found; an edited one is an error.
    let mut note = checkpoint.signed().as_bytes().to_vec();
    note.extend_from_slice(cosignature.line().as_bytes());
    let attached = SignedCheckpoint::parse(&note)
        .unwrap()
        .verify(&log_key())
        .unwrap();
    assert_eq!(
        find_cosignature(&attached, witness.public()).unwrap(),
        verified
    );
    assert!(matches!(
        find_cosignature(&checkpoint, witness.public()),
        Err(CosignatureError::Missing { .. })
    ));
    let line = cosignature.line().trim_end();
    let (name, b64) = line.rsplit_once(' ').unwrap();
    let mut raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    for at in 4..raw.len() {
        raw[at] ^= 1;
        let edited = format!(
            "{name} {}",
            base64::engine::general_purpose::STANDARD.encode(&raw)
        );
        assert!(
            verify_cosignature(&checkpoint, witness.public(), &edited).is_err(),
            "byte {at}"
        );
        raw[at] ^= 1;
    }
}

/// A note signature line by the agent's key over `text`.
fn log_line(text: &[u8]) -> String {
    let mut sig = log_key().key_id().to_be_bytes().to_vec();
    sig.extend_from_slice(&agent_key().sign(text).to_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(sig);
    format!("— {} {b64}\n", log_key().origin())
}

#[test]
fn every_line_by_the_log_key_must_verify() {
    let signed = sign_checkpoint(&agent_key(), &log_key(), tree_of(&lines(3)).head()).unwrap();
    let mut note = signed.as_bytes().to_vec();
    note.extend_from_slice(log_line(b"other text\n").as_bytes());
    assert!(matches!(
        SignedCheckpoint::parse(&note).unwrap().verify(&log_key()),
        Err(CheckpointError::InvalidSignature { .. })
    ));
    // The same valid line twice is two valid lines.
    let mut twice = signed.as_bytes().to_vec();
    twice.extend_from_slice(log_line(signed.text()).as_bytes());
    assert!(
        SignedCheckpoint::parse(&twice)
            .unwrap()
            .verify(&log_key())
            .is_ok()
    );
}

#[test]
fn a_size_0_checkpoint_with_another_root_is_the_witness_s_422() {
    // Signed by the log's key, so it parses and verifies; what it claims
    // about the tree is refused where trees are compared.
    let wrong = TreeHead {
        size: 0,
        root: tree_of(&lines(3)).root(),
    };
    assert!(matches!(
        sign_checkpoint(&agent_key(), &log_key(), wrong),
        Err(CheckpointError::EmptyTreeRoot)
    ));
    let text = checkpoint_text(log_key().origin(), wrong);
    let mut note = text.clone();
    note.push(b'\n');
    note.extend_from_slice(log_line(&text).as_bytes());
    let checkpoint = SignedCheckpoint::parse(&note)
        .unwrap()
        .verify(&log_key())
        .unwrap();
    let refusal = check_submission(None, 0, &[], &checkpoint).unwrap_err();
    assert_eq!(refusal, Refusal::EmptyTreeRoot);
    assert_eq!(refusal.status(), 422);
}

#[test]
fn a_witness_keeps_the_checkpoint_with_the_log_s_signature_and_its_own() {
    let checkpoint = checkpoint(tree_of(&lines(5)).head());
    let cosignature = cosign(&checkpoint, &witness(), 1_767_225_600).unwrap();
    // Another witness's line in what was submitted is not kept.
    let other = WitnessSigner::new("w.example/2", SigningIdentity::from_bytes(&[3; 32])).unwrap();
    let theirs = cosign(&checkpoint, &other, 1_767_225_600).unwrap();
    let mut submitted = checkpoint.signed().as_bytes().to_vec();
    submitted.extend_from_slice(theirs.line().as_bytes());
    let submitted = SignedCheckpoint::parse(&submitted)
        .unwrap()
        .verify(&log_key())
        .unwrap();
    let kept = submitted.with_cosignatures(&[cosignature.line()]).unwrap();
    let mut expected = checkpoint.signed().as_bytes().to_vec();
    expected.extend_from_slice(cosignature.line().as_bytes());
    assert_eq!(kept.as_bytes(), expected);
    let kept = kept.verify(&log_key()).unwrap();
    find_cosignature(&kept, witness().public()).unwrap();
    assert!(find_cosignature(&kept, other.public()).is_err());
}

#[test]
fn the_witness_decides_as_the_spec_says() {
    let tree = tree_of(&lines(20));
    let at = |size| checkpoint(tree.head_at(size).unwrap());
    let proof = |old, new| tree.consistency_proof(old, new).unwrap().hashes().to_vec();

    // First submission: from 0, with an empty proof.
    assert_eq!(
        check_submission(None, 0, &[], &at(8)),
        Ok(tree.head_at(8).unwrap())
    );
    assert_eq!(
        check_submission(None, 0, &proof(3, 8), &at(8))
            .unwrap_err()
            .status(),
        422
    );
    assert_eq!(check_submission(None, 0, &[], &at(0)), Ok(TreeHead::EMPTY));
    // The client thinks the witness is at another size: 409 with the latest.
    let last = Some(tree.head_at(8).unwrap());
    assert_eq!(
        check_submission(last, 5, &proof(5, 12), &at(12)),
        Err(Refusal::StaleOldSize { old: 5, latest: 8 })
    );
    assert_eq!(
        check_submission(None, 3, &proof(3, 12), &at(12))
            .unwrap_err()
            .status(),
        409
    );
    // Old size above the checkpoint's.
    assert_eq!(
        check_submission(last, 8, &[], &at(5)).unwrap_err().status(),
        400
    );
    // A good extension, and the same head again.
    assert_eq!(
        check_submission(last, 8, &proof(8, 12), &at(12)),
        Ok(tree.head_at(12).unwrap())
    );
    assert_eq!(
        check_submission(last, 8, &[], &at(8)),
        Ok(tree.head_at(8).unwrap())
    );
    // A wrong proof.
    let mut wrong = proof(8, 12);
    wrong[0] = Hash::leaf(b"x");
    assert_eq!(
        check_submission(last, 8, &wrong, &at(12))
            .unwrap_err()
            .status(),
        422
    );
    assert_eq!(
        check_submission(last, 8, &proof(8, 12)[1..], &at(12))
            .unwrap_err()
            .status(),
        422
    );
    // Another root for the size cosigned: a fork, never cosigned.
    let fork = tree_of(&lines(9)[1..]);
    assert_eq!(
        check_submission(last, 8, &[], &checkpoint(fork.head())),
        Err(Refusal::RootChanged { size: 8 })
    );
}

#[test]
fn add_checkpoint_bodies_round_trip() {
    let tree = tree_of(&lines(12));
    let signed = sign_checkpoint(&agent_key(), &log_key(), tree.head()).unwrap();
    let request = AddCheckpoint {
        old_size: 7,
        proof: tree.consistency_proof(7, 12).unwrap().hashes().to_vec(),
        checkpoint: signed.clone(),
    };
    let body = request.to_bytes();
    assert_eq!(AddCheckpoint::parse(&body).unwrap(), request);
    let mut from_zero = b"old 0\n\n".to_vec();
    from_zero.extend_from_slice(signed.as_bytes());
    assert_eq!(AddCheckpoint::parse(&from_zero).unwrap().old_size, 0);
    for bad in [
        "",
        "old 07\n\n",
        "old -1\n\n",
        "new 1\n\n",
        "old 1\nnot-base64\n\n",
        "old 1",
    ] {
        let mut body = bad.as_bytes().to_vec();
        body.extend_from_slice(signed.as_bytes());
        assert!(AddCheckpoint::parse(&body).is_err(), "{bad:?}");
    }
    let mut too_many = b"old 1\n".to_vec();
    for _ in 0..64 {
        too_many.extend_from_slice(format!("{}\n", Hash::EMPTY).as_bytes());
    }
    too_many.push(b'\n');
    too_many.extend_from_slice(signed.as_bytes());
    assert_eq!(
        AddCheckpoint::parse(&too_many),
        Err(RequestError::TooManyProofLines(64))
    );
}

mod files {
    use std::path::Path;

    use constle_audit::{Appender, Event};

    use super::*;

    fn write_log(dir: &Path, agent: &Name, n: usize) -> Vec<Vec<u8>> {
        let appender = Appender::new(dir, agent.clone(), Some(agent_key())).unwrap();
        let events = (0..n)
            .map(|i| {
                Event::new("tool_called")
                    .unwrap()
                    .with("i", i as u64)
                    .unwrap()
            })
            .collect();
        let written = appender.append(events).unwrap();
        let bytes = std::fs::read(&written[0].path).unwrap();
        std::fs::remove_file(&written[0].path).unwrap();
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn put(dir: &Path, name: &str, lines: &[Vec<u8>], tail: &[u8]) {
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(tail);
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn the_tree_of_the_files_is_the_tree_of_the_lines_across_days() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Name::new("bot").unwrap();
        let lines = write_log(dir.path(), &agent, 10);
        put(dir.path(), "bot-2026-01-01.jsonl", &lines[..4], b"");
        put(dir.path(), "bot-2026-01-03.jsonl", &lines[4..], b"{\"torn");
        // Another agent's file, and a file not named as a day file.
        put(dir.path(), "bot2-2026-01-02.jsonl", &lines[..1], b"");
        put(dir.path(), "bot-notes.jsonl", &lines[..1], b"");
        let read = LogTree::from_log_dir(dir.path(), &agent).unwrap();
        assert_eq!(read.tree.head(), tree_of(&lines).head());
        assert_eq!(read.torn_tail, 6);
        assert_eq!(read.files.len(), 2);
        // A visitor sees every leaf, with its index, and nothing else.
        let mut seen = Vec::new();
        let visited = LogTree::from_log_dir_with(dir.path(), &agent, |index, line| {
            seen.push((index, line.to_vec()));
        })
        .unwrap();
        assert_eq!(visited.tree.head(), read.tree.head());
        let expected: Vec<(u64, Vec<u8>)> = (0..).zip(lines).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn gaps_and_torn_lines_before_the_end_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Name::new("bot").unwrap();
        let lines = write_log(dir.path(), &agent, 6);
        // The oldest day deleted: the tree cannot start at seq 0.
        put(dir.path(), "bot-2026-01-02.jsonl", &lines[3..], b"");
        assert!(matches!(
            LogTree::from_log_dir(dir.path(), &agent),
            Err(LogFilesError::SeqGap {
                expected: 0,
                found: 3,
                ..
            })
        ));
        put(dir.path(), "bot-2026-01-01.jsonl", &lines[..3], b"{\"torn");
        assert!(matches!(
            LogTree::from_log_dir(dir.path(), &agent),
            Err(LogFilesError::TornLine { .. })
        ));
        put(dir.path(), "bot-2026-01-01.jsonl", &lines[..2], b"");
        assert!(matches!(
            LogTree::from_log_dir(dir.path(), &agent),
            Err(LogFilesError::SeqGap {
                expected: 2,
                found: 3,
                ..
            })
        ));
        put(dir.path(), "bot-2026-01-01.jsonl", &lines[..3], b"\n");
        assert!(matches!(
            LogTree::from_log_dir(dir.path(), &agent),
            Err(LogFilesError::EmptyLine { line: 4, .. })
        ));
    }

    /// A day's first line that is no entry says no `seq`: it is the leaf at
    /// its place, so a rewritten log still has a tree to hold against what
    /// witnesses cosigned.
    #[test]
    fn a_first_line_that_is_not_an_entry_is_a_leaf_like_any_other() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Name::new("bot").unwrap();
        let mut lines = write_log(dir.path(), &agent, 6);
        for (at, garbage) in [(0, &b"not an entry"[..]), (3, b"{\"seq\":\"three\"}")] {
            lines[at] = garbage.to_vec();
        }
        put(dir.path(), "bot-2026-01-01.jsonl", &lines[..3], b"");
        put(dir.path(), "bot-2026-01-02.jsonl", &lines[3..], b"");
        let read = LogTree::from_log_dir(dir.path(), &agent).unwrap();
        assert_eq!(read.tree.head(), tree_of(&lines).head());
    }
}

mod coverage {
    use std::num::NonZeroUsize;
    use std::path::PathBuf;

    use constle_audit::FindingCode;

    use super::*;

    fn signer(n: u8) -> WitnessSigner {
        let name = format!("witness.example.org/w{n}");
        WitnessSigner::new(&name, SigningIdentity::from_bytes(&[n + 1; 32])).unwrap()
    }

    /// `by`'s cosignature of `tree`'s head at `size`, recorded at entry `seq`.
    fn cosigned(tree: &LogTree, size: u64, by: &WitnessSigner, seq: u64) -> Cosigned {
        let head = tree.head_at(size).unwrap();
        let line = cosign(&checkpoint(head), by, 1_786_184_102).unwrap();
        Cosigned {
            head,
            witness: by.public().name().to_owned(),
            line: line.line().trim_end().to_owned(),
            source: Source::Entry(seq),
        }
    }

    fn check(
        tree: &LogTree,
        declared: &[&WitnessSigner],
        quorum: usize,
        found: &[Cosigned],
    ) -> CoverageVerdict {
        let keys: Vec<WitnessKey> = declared.iter().map(|s| s.public().clone()).collect();
        let quorum = NonZeroUsize::new(quorum).unwrap();
        check_coverage(tree, log_key().origin(), &keys, quorum, found)
    }

    fn covered(verdict: CoverageVerdict) -> Coverage {
        match verdict {
            CoverageVerdict::Covered(coverage) => coverage,
            CoverageVerdict::Tampered { findings, .. } => panic!("tampered: {findings:#?}"),
        }
    }

    fn findings(verdict: CoverageVerdict) -> Vec<(FindingCode, String)> {
        match verdict {
            CoverageVerdict::Covered(coverage) => panic!("not caught: {coverage}"),
            CoverageVerdict::Tampered { findings, .. } => findings
                .into_iter()
                .inspect(|f| assert_eq!(f.line, None))
                .map(|f| (f.code, f.detail))
                .collect(),
        }
    }

    #[test]
    fn a_quorum_covers_up_to_the_smallest_of_its_largest_trees() {
        let tree = tree_of(&lines(10));
        let (w1, w2, w3) = (signer(1), signer(2), signer(3));
        let found = [
            cosigned(&tree, 6, &w1, 6),
            cosigned(&tree, 6, &w2, 7),
            cosigned(&tree, 8, &w1, 9),
        ];
        let coverage = covered(check(&tree, &[&w1, &w2], 2, &found));
        assert_eq!((coverage.witnessed(), coverage.size()), (6, 10));
        assert_eq!(
            coverage.to_string(),
            "entries 0–5 by 2 of 2 witnesses (quorum 2); 4 entries after that not yet"
        );
        // A larger tree covers the smaller ones: w1 at 8, w2 at 6 is 6.
        let found = [cosigned(&tree, 8, &w1, 8), cosigned(&tree, 6, &w2, 9)];
        let coverage = covered(check(&tree, &[&w1, &w2, &w3], 2, &found));
        assert_eq!(
            coverage.to_string(),
            "entries 0–5 by 2 of 3 witnesses (quorum 2); 4 entries after that not yet"
        );
        let found = [
            cosigned(&tree, 10, &w1, 8),
            cosigned(&tree, 10, &w3, 9),
            cosigned(&tree, 6, &w2, 9),
        ];
        let coverage = covered(check(&tree, &[&w1, &w2, &w3], 2, &found));
        assert_eq!(
            coverage.to_string(),
            "entries 0–9 by 2 of 3 witnesses (quorum 2)"
        );
        assert_eq!(
            coverage.reach(),
            [
                ("witness.example.org/w1".to_owned(), 10),
                ("witness.example.org/w2".to_owned(), 6),
                ("witness.example.org/w3".to_owned(), 10),
            ]
        );
        let one = tree_of(&lines(1));
        let coverage = covered(check(&one, &[&w1], 1, &[cosigned(&one, 1, &w1, 0)]));
        assert_eq!(coverage.to_string(), "entry 0 by 1 of 1 witness (quorum 1)");
    }

    #[test]
    fn below_the_quorum_says_who_cosigned_how_far() {
        let tree = tree_of(&lines(10));
        let (w1, w2, w3) = (signer(1), signer(2), signer(3));
        let coverage = covered(check(&tree, &[&w1, &w2], 2, &[]));
        assert_eq!(coverage.witnessed(), 0);
        assert_eq!(
            coverage.to_string(),
            "no entry yet (2 witnesses declared, quorum 2)"
        );
        let found = [cosigned(&tree, 4, &w1, 4), cosigned(&tree, 1, &w3, 5)];
        let coverage = covered(check(&tree, &[&w1, &w2, &w3], 3, &found));
        assert_eq!(
            coverage.to_string(),
            "no entry yet by a quorum (3 of 3 witnesses): witness.example.org/w1 cosigned entries 0–3, witness.example.org/w3 cosigned entry 0"
        );
        // The same witness twice, from the log and from a file, is one.
        let mut again = cosigned(&tree, 4, &w1, 4);
        again.source = Source::File(PathBuf::from("bot.checkpoint"));
        let found = [cosigned(&tree, 4, &w1, 4), again];
        assert_eq!(covered(check(&tree, &[&w1, &w2], 2, &found)).witnessed(), 0);
    }

    #[test]
    fn cosignatures_by_undeclared_keys_are_notes_and_count_for_nothing() {
        let tree = tree_of(&lines(5));
        let (w1, w2) = (signer(1), signer(2));
        // w2's name with another key: not the witness declared.
        let impostor =
            WitnessSigner::new(w2.public().name(), SigningIdentity::from_bytes(&[9; 32])).unwrap();
        let found = [
            cosigned(&tree, 5, &w1, 5),
            cosigned(&tree, 5, &impostor, 6),
            cosigned(&tree, 5, &signer(7), 7),
        ];
        let coverage = covered(check(&tree, &[&w1, &w2], 2, &found));
        assert_eq!(coverage.witnessed(), 0);
        assert_eq!(coverage.notes().len(), 2);
        assert_eq!(
            coverage.notes()[1],
            format!(
                "the cosignature by witness.example.org/w7+{:08x} in the checkpoint_cosigned entry seq 7 is not by a witness the Agentfile declares: not counted",
                signer(7).public().key_id()
            )
        );
    }

    #[test]
    fn a_cosignature_that_does_not_verify_is_tampering() {
        let tree = tree_of(&lines(6));
        let (w1, w2) = (signer(1), signer(2));
        // Moved to another tree head of the same log.
        let mut moved = cosigned(&tree, 5, &w1, 6);
        moved.head = tree.head_at(4).unwrap();
        // Recorded under another witness's name.
        let mut renamed = cosigned(&tree, 5, &w1, 7);
        renamed.witness = w2.public().name().to_owned();
        let mut garbage = cosigned(&tree, 5, &w2, 8);
        garbage.line = "— witness.example.org/w2 not base64".to_owned();
        let found = [moved, renamed, garbage, cosigned(&tree, 5, &w2, 9)];
        let found = findings(check(&tree, &[&w1, &w2], 2, &found));
        assert!(
            found
                .iter()
                .all(|(code, _)| *code == FindingCode::CosignatureInvalid)
        );
        let details: Vec<&str> = found.iter().map(|(_, d)| d.as_str()).collect();
        let root4 = tree.root_at(4).unwrap();
        assert_eq!(
            details,
            [
                format!(
                    "the cosignature by {}+{:08x} does not verify over this checkpoint (ci.example.com/constle/bot size 4 root {root4}; in the checkpoint_cosigned entry seq 6)",
                    w1.public().name(),
                    w1.public().key_id()
                ),
                "the checkpoint_cosigned entry seq 7 names the witness witness.example.org/w2, but its cosignature is by witness.example.org/w1".to_owned(),
                "the cosignature in the checkpoint_cosigned entry seq 8 is not a note signature line".to_owned(),
            ]
        );
    }

    #[test]
    fn a_rewritten_history_is_caught_between_the_last_agreed_size_and_the_first_not() {
        let original = tree_of(&lines(10));
        let (w1, w2) = (signer(1), signer(2));
        let found = [
            cosigned(&original, 3, &w1, 3),
            cosigned(&original, 3, &w2, 4),
            cosigned(&original, 7, &w1, 7),
            cosigned(&original, 7, &w2, 8),
            cosigned(&original, 8, &w1, 9),
        ];
        let mut edited = lines(10);
        edited[5] = b"{\"seq\":5,\"event\":\"edited\"}".to_vec();
        let tree = tree_of(&edited);
        let found = findings(check(&tree, &[&w1, &w2], 2, &found));
        let (root7, root8) = (original.root_at(7).unwrap(), original.root_at(8).unwrap());
        assert_eq!(
            found,
            [
                (
                    FindingCode::WitnessedHistoryRewritten,
                    format!(
                        "the histories part at an entry in seq 3..6 (the log's root at size 7 is {}, witnesses witness.example.org/w1, witness.example.org/w2 cosigned {root7}; in the checkpoint_cosigned entry seq 7, the checkpoint_cosigned entry seq 8)",
                        tree.root_at(7).unwrap()
                    )
                ),
                (
                    FindingCode::WitnessedHistoryRewritten,
                    format!(
                        "the histories part at an entry in seq 3..7 (the log's root at size 8 is {}, witness witness.example.org/w1 cosigned {root8}; in the checkpoint_cosigned entry seq 9)",
                        tree.root_at(8).unwrap()
                    )
                ),
            ]
        );
        // Cosigned at 5 and 6, the entry between them is named.
        let found = [
            cosigned(&original, 5, &w1, 5),
            cosigned(&original, 6, &w1, 6),
        ];
        let found = findings(check(&tree, &[&w1], 1, &found));
        assert_eq!(found.len(), 1);
        assert!(
            found[0]
                .1
                .starts_with("the histories part at entry seq 5 ("),
            "{found:?}"
        );
    }

    #[test]
    fn another_root_for_a_size_is_caught_even_beside_the_logs_own() {
        // A split view: w1 was shown the log, w2 another history.
        let tree = tree_of(&lines(8));
        let mut forked = lines(8);
        forked[6] = b"{\"seq\":6,\"event\":\"forked\"}".to_vec();
        let fork = tree_of(&forked);
        let (w1, w2) = (signer(1), signer(2));
        let found = [
            cosigned(&tree, 4, &w2, 4),
            cosigned(&tree, 8, &w1, 8),
            cosigned(&fork, 8, &w2, 9),
        ];
        let found = findings(check(&tree, &[&w1, &w2], 1, &found));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, FindingCode::WitnessedHistoryRewritten);
        assert!(
            found[0].1.starts_with(&format!(
                "the histories part at an entry in seq 4..7 (the log's root at size 8 is {}, witness witness.example.org/w2 cosigned {}",
                tree.root(),
                fork.root()
            )),
            "{found:?}"
        );
    }

    #[test]
    fn a_cut_log_is_caught() {
        let original = tree_of(&lines(12));
        let w1 = signer(1);
        let cut = tree_of(&lines(9));
        let mut held = cosigned(&original, 12, &w1, 0);
        held.source = Source::File(PathBuf::from("bot.checkpoint"));
        let found = [cosigned(&original, 10, &w1, 10), held];
        let found = findings(check(&cut, &[&w1], 1, &found));
        let (root10, root12) = (original.root_at(10).unwrap(), original.root_at(12).unwrap());
        assert_eq!(
            found,
            [
                (
                    FindingCode::WitnessedEntriesMissing,
                    format!(
                        "the log has 9 entries, but witness witness.example.org/w1 cosigned size 10 (root {root10}; in the checkpoint_cosigned entry seq 10): entry seq 9 is missing"
                    )
                ),
                (
                    FindingCode::WitnessedEntriesMissing,
                    format!(
                        "the log has 9 entries, but witness witness.example.org/w1 cosigned size 12 (root {root12}; in the checkpoint file bot.checkpoint): entries seq 9..11 are missing"
                    )
                ),
            ]
        );
    }

    #[test]
    fn a_held_checkpoint_gives_its_cosignatures_but_not_the_logs_own_signature() {
        let tree = tree_of(&lines(4));
        let (w1, w2) = (signer(1), signer(2));
        let head = tree.head();
        let mut note = sign_checkpoint(&agent_key(), &log_key(), head)
            .unwrap()
            .as_bytes()
            .to_vec();
        for w in [&w1, &w2] {
            note.extend_from_slice(cosign(&checkpoint(head), w, 7).unwrap().line().as_bytes());
        }
        let held = SignedCheckpoint::parse(&note)
            .unwrap()
            .verify(&log_key())
            .unwrap();
        let source = Source::File(PathBuf::from("bot.checkpoint"));
        let found = Cosigned::from_checkpoint(&held, &source);
        let names: Vec<&str> = found.iter().map(|c| c.witness.as_str()).collect();
        assert_eq!(names, [w1.public().name(), w2.public().name()]);
        assert!(found.iter().all(|c| c.head == head && c.source == source));
        let coverage = covered(check(&tree, &[&w1, &w2], 2, &found));
        assert_eq!(
            coverage.to_string(),
            "entries 0–3 by 2 of 2 witnesses (quorum 2)"
        );
    }
}

mod follow {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use constle_audit::{Appender, Event, Head};
    use jiff::{SignedDuration, Timestamp};

    use super::*;

    fn agent() -> Name {
        Name::new("bot").unwrap()
    }

    /// Appends `n` entries to `dir`, each an hour after the last (so days
    /// turn), through one clock shared by every appender.
    fn append(dir: &std::path::Path, clock: &Arc<AtomicI64>, n: usize) -> Head {
        let clock = Arc::clone(clock);
        let appender = Appender::new(dir, agent(), Some(agent_key()))
            .unwrap()
            .with_clock(move || {
                let hours = clock.fetch_add(1, Ordering::SeqCst);
                Timestamp::UNIX_EPOCH + SignedDuration::from_hours(hours + 490_000)
            });
        let events = (0..n)
            .map(|i| Event::new("tick").unwrap().with("i", i as u64).unwrap())
            .collect();
        appender.append(events).unwrap();
        Head::load(dir, &agent()).unwrap().unwrap().head
    }

    #[test]
    fn it_reads_on_across_days_to_the_same_tree_as_a_full_read() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(AtomicI64::new(0));
        let mut follower = LogFollower::new(dir.path(), agent());
        let mut days = 0;
        for n in [1, 5, 30, 2, 60] {
            let head = append(dir.path(), &clock, n);
            let followed = follower
                .follow(&head.file, head.len, head.seq + 1)
                .unwrap()
                .root();
            let full = LogTree::from_log_dir(dir.path(), &agent()).unwrap();
            assert_eq!(followed, full.tree.root());
            days = full.files.len();
        }
        assert!(days >= 4, "{days} days");
    }

    #[test]
    fn a_log_that_shrank_or_started_again_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(AtomicI64::new(0));
        let mut follower = LogFollower::new(dir.path(), agent());
        let head = append(dir.path(), &clock, 40);
        follower.follow(&head.file, head.len, head.seq + 1).unwrap();
        // Moved aside, and a shorter chain started under the same name.
        std::fs::remove_dir_all(dir.path()).unwrap();
        let head = append(dir.path(), &clock, 3);
        let refused = follower.follow(&head.file, head.len, head.seq + 1);
        assert!(
            matches!(refused, Err(LogFilesError::NotFollowing { .. })),
            "{refused:?}"
        );
    }
}
