//! The test vectors of `docs/spec/log-checkpoints.md`, read from the
//! document itself and recomputed, so the document and the code cannot
//! drift apart.

#![allow(clippy::unwrap_used, reason = "tests")]

use constle_identity::{Name, SigningIdentity};
use constle_testkit::SpecVectors;

use crate::*;

const SPEC: &str = include_str!("../../../docs/spec/log-checkpoints.md");

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The value of `name: value` in the spec's vector block.
fn vector(name: &str) -> Result<&'static str, String> {
    SpecVectors::read("docs/spec/log-checkpoints.md", SPEC)?.value(name)
}

fn secret(name: &str) -> Result<SigningIdentity, Box<dyn std::error::Error>> {
    let bytes: [u8; 32] = hex::decode(vector(name)?)?
        .try_into()
        .map_err(|_| "a secret key is not 32 bytes")?;
    Ok(SigningIdentity::from_bytes(&bytes))
}

fn hashes(list: &str) -> Vec<Hash> {
    list.split(' ')
        .filter(|h| !h.is_empty())
        .map(|h| Hash::from_base64(h).unwrap())
        .collect()
}

fn joined(hashes: &[Hash]) -> String {
    hashes
        .iter()
        .map(Hash::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

struct Computed {
    origin: Origin,
    log_key: LogKey,
    tree: LogTree,
    leaves: Vec<&'static str>,
}

fn computed() -> Result<Computed, Box<dyn std::error::Error>> {
    let origin = Origin::new(
        &Deployment::new(vector("deployment")?)?,
        &Name::new(vector("agent")?)?,
    );
    let log_key = LogKey::new(origin.clone(), secret("agent_secret_key")?.did());
    let leaves = vec![vector("leaf_0")?, vector("leaf_1")?, vector("leaf_2")?];
    let mut tree = LogTree::new();
    for leaf in &leaves {
        tree.push(leaf.as_bytes());
    }
    Ok(Computed {
        origin,
        log_key,
        tree,
        leaves,
    })
}

#[test]
fn origin_and_log_key() -> TestResult {
    let c = computed()?;
    assert_eq!(c.origin.as_str(), vector("origin")?);
    assert_eq!(c.log_key.vkey(), vector("log_vkey")?);
    assert_eq!(LogKey::from_vkey(vector("log_vkey")?)?, c.log_key);
    Ok(())
}

#[test]
fn leaves_roots_and_proofs() -> TestResult {
    let c = computed()?;
    for (i, leaf) in c.leaves.iter().enumerate() {
        assert_eq!(
            Hash::leaf(leaf.as_bytes()).to_string(),
            vector(&format!("leaf_hash_{i}"))?
        );
        assert_eq!(
            c.tree.root_at(i as u64 + 1)?.to_string(),
            vector(&format!("root_{}", i + 1))?
        );
    }
    let inclusion = c.tree.inclusion_proof(1, 3)?;
    assert_eq!(
        joined(inclusion.hashes()),
        vector("inclusion_proof_1_in_3")?
    );
    let received = InclusionProof::new(1, 3, hashes(vector("inclusion_proof_1_in_3")?))?;
    verify_inclusion(c.leaves[1].as_bytes(), &c.tree.head(), &received)?;
    let consistency = c.tree.consistency_proof(2, 3)?;
    assert_eq!(
        joined(consistency.hashes()),
        vector("consistency_proof_2_to_3")?
    );
    Ok(())
}

#[test]
fn checkpoint_and_cosignature() -> TestResult {
    let c = computed()?;
    let agent = secret("agent_secret_key")?;
    let signed = sign_checkpoint(&agent, &c.log_key, c.tree.head())?;
    let text = format!(
        "{}\n{}\n{}\n",
        vector("origin")?,
        vector("size")?,
        vector("root_3")?
    );
    assert_eq!(signed.text(), text.as_bytes());
    let line = std::str::from_utf8(signed.signature_lines().next().ok_or("no line")?)?;
    assert_eq!(line, vector("checkpoint_signature")?);
    let note = format!("{text}\n{}\n", vector("checkpoint_signature")?);
    let verified = SignedCheckpoint::parse(note.as_bytes())?.verify(&c.log_key)?;

    let witness = WitnessSigner::new(vector("witness_name")?, secret("witness_secret_key")?)?;
    assert_eq!(witness.public().vkey(), vector("witness_vkey")?);
    let time: u64 = vector("cosignature_time")?.parse()?;
    let cosignature = cosign(&verified, &witness, time)?;
    assert_eq!(cosignature.line().trim_end(), vector("cosignature")?);
    let key = WitnessKey::from_vkey(vector("witness_vkey")?)?;
    assert_eq!(
        verify_cosignature(&verified, &key, vector("cosignature")?)?.timestamp(),
        time
    );
    Ok(())
}
