//! The specification's test vectors (§9), read from the document itself
//! and recomputed, so the document and the code cannot drift apart.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use constle_identity::SigningIdentity;
use constle_testkit::SpecVectors;

use crate::{
    Approver, Label, SetBody, SetPin, SignatureOutcome, VersionFile, parse_expiry, verify_chain,
};

const SPEC: &str = include_str!("../../../docs/spec/approver-set.md");

const NAMES: [&str; 4] = ["alice", "bob", "carol", "dave"];

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The value of `name: value` in the spec's vector block.
fn vector(name: &str) -> Result<&'static str, String> {
    SpecVectors::read("docs/spec/approver-set.md", SPEC)?.value(name)
}

/// The `json` blocks of the spec's vectors section: the two version files.
fn files() -> Result<Vec<&'static str>, String> {
    Ok(SpecVectors::read("docs/spec/approver-set.md", SPEC)?
        .json_blocks()
        .to_vec())
}

fn key(name: &str) -> Result<SigningIdentity, Box<dyn std::error::Error>> {
    let mut secret = [0u8; 32];
    hex::decode_to_slice(vector(&format!("{name}_secret_key"))?, &mut secret)?;
    Ok(SigningIdentity::from_bytes(&secret))
}

fn approver(name: &str) -> Result<Approver, Box<dyn std::error::Error>> {
    Ok(Approver {
        did: key(name)?.did().clone(),
        label: Label::new(name)?,
    })
}

/// Versions 1 and 2 as §9 describes them, built from the keys.
fn bodies() -> Result<[SetBody; 2], Box<dyn std::error::Error>> {
    let v1 = SetBody::new(
        1,
        parse_expiry("2030-01-01T00:00:00Z")?,
        2,
        vec![approver("alice")?, approver("bob")?, approver("carol")?],
    )?;
    let v2 = v1.next(
        vec![approver("dave")?],
        &[key("alice")?.did().clone()],
        None,
        parse_expiry("2031-01-01T00:00:00Z")?,
    )?;
    Ok([v1, v2])
}

#[test]
fn dids_match_the_secret_keys() -> TestResult {
    for name in NAMES {
        assert_eq!(key(name)?.did().as_str(), vector(&format!("{name}_did"))?);
    }
    Ok(())
}

#[test]
fn canonical_forms_digests_and_signatures_match() -> TestResult {
    let signers: [&[&str]; 2] = [&["alice", "bob"], &["alice", "bob", "dave"]];
    for (body, signers) in bodies()?.iter().zip(signers) {
        let tag = format!("v{}", body.version());
        let canonical = constle_json::canonical_object(&body.to_value());
        assert_eq!(
            std::str::from_utf8(&canonical)?,
            vector(&format!("{tag}_canonical"))?
        );
        let mut signed = b"constle approver-set v1\n".to_vec();
        signed.extend(&canonical);
        assert_eq!(body.signed_bytes(), signed);
        assert_eq!(body.digest().to_string(), vector(&format!("{tag}_digest"))?);
        for name in signers {
            let sig = key(name)?.sign(&signed);
            assert_eq!(
                BASE64.encode(sig.to_bytes()),
                vector(&format!("{tag}_signature_{name}"))?
            );
        }
    }
    assert_eq!(
        SetPin::new(bodies()?[0].digest()).to_string(),
        vector("pin")?
    );
    Ok(())
}

#[test]
fn the_files_in_the_spec_verify_as_a_chain() -> TestResult {
    let files = files()?;
    assert_eq!(files.len(), 2, "the spec shows two version files");
    let pin = SetPin::parse(vector("pin")?)?;
    let chain = verify_chain(&pin, &files)?;
    let [v1, v2] = bodies()?;
    assert_eq!(chain[0].body(), &v1);
    assert_eq!(chain[1].body(), &v2);
    // The files are what `constle approvers` writes.
    for (body, (file, signers)) in [v1, v2].into_iter().zip(
        files
            .iter()
            .zip([&["alice", "bob"][..], &["alice", "bob", "dave"]]),
    ) {
        let mut written = VersionFile::unsigned(body);
        for name in signers {
            written.sign(&key(name)?);
        }
        assert_eq!(std::str::from_utf8(&written.to_bytes())?, *file);
    }
    let outcomes: Vec<_> = chain[1].signatures().iter().map(|s| s.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            SignatureOutcome::Counted {
                own: false,
                previous: true
            },
            SignatureOutcome::Counted {
                own: true,
                previous: true
            },
            SignatureOutcome::Counted {
                own: true,
                previous: false
            },
        ]
    );
    // Without bob, or without dave, version 2 is refused.
    for dropped in ["bob", "dave"] {
        let did = key(dropped)?.did().to_string();
        let kept: Vec<&str> = files[1]
            .lines()
            .filter(|l| !(l.contains("\"sig\"") && l.contains(&did)))
            .collect();
        let edited = kept.join("\n").replace("==\"},\n  ]", "==\"}\n  ]");
        match verify_chain(&pin, &[files[0], edited.as_str()]) {
            Err(crate::ApproverSetError::UnderSigned { valid: 1, .. }) => {}
            other => return Err(format!("without {dropped}: {other:?}").into()),
        }
    }
    Ok(())
}
