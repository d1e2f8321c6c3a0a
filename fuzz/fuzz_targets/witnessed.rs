//! Fuzz what `constle audit verify` reads of witnesses' cosignatures: a log
//! line as a `checkpoint_cosigned` entry, signature lines appended to a
//! genuine checkpoint (a held checkpoint file), and a cosignature of any
//! size; whatever they give is checked against a fixed log. None may panic.
#![no_main]

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::LazyLock;

use constle_identity::SigningIdentity;
use constle_tlog::{
    Cosigned, CoverageVerdict, LogKey, LogTree, Origin, Recorded, SignedCheckpoint, Source,
    TreeHead, WitnessKey, check_coverage, sign_checkpoint,
};
use libfuzzer_sys::fuzz_target;

/// A log of 8 entries, its key, a signed checkpoint of it, two witnesses.
struct Fixed {
    tree: LogTree,
    key: LogKey,
    note: Vec<u8>,
    witnesses: Vec<WitnessKey>,
}

static FIXED: LazyLock<Fixed> = LazyLock::new(|| {
    let agent = SigningIdentity::from_bytes(&[1; 32]);
    let origin = Origin::parse("ci.example.com/constle/bot").expect("an origin");
    let key = LogKey::new(origin, agent.did());
    let mut tree = LogTree::new();
    for i in 0..8 {
        tree.push(format!("line {i}").as_bytes());
    }
    let note = sign_checkpoint(&agent, &key, tree.head()).expect("signs");
    let witnesses = (2..4u8)
        .map(|n| {
            let name = format!("w.example/{n}");
            WitnessKey::new(&name, SigningIdentity::from_bytes(&[n; 32]).did()).expect("a key")
        })
        .collect();
    Fixed {
        tree,
        key,
        note: note.as_bytes().to_vec(),
        witnesses,
    }
});

fuzz_target!(|data: &[u8]| {
    let fixed = &*FIXED;
    let mut recorded = Recorded::default();
    recorded.scan(3, data);
    let mut found = recorded.cosigned;
    let mut note = fixed.note.clone();
    note.extend_from_slice(data);
    if let Ok(held) = SignedCheckpoint::parse(&note).and_then(|c| c.verify(&fixed.key)) {
        let source = Source::File(PathBuf::from("fuzz.checkpoint"));
        found.extend(Cosigned::from_checkpoint(&held, &source));
    }
    // The first 8 bytes a size around the log's, the rest a line.
    if let (Some(size), Ok(line)) = (
        data.get(..8),
        std::str::from_utf8(&data[8.min(data.len())..]),
    ) {
        let size = u64::from_be_bytes(size.try_into().expect("8 bytes")) % 16;
        let root = fixed.tree.root_at(size.min(8)).expect("within the tree");
        found.push(Cosigned {
            head: TreeHead { size, root },
            witness: line.split(' ').nth(1).unwrap_or_default().to_owned(),
            line: line.to_owned(),
            source: Source::Entry(9),
        });
    }
    for quorum in [1, 2, 3] {
        let quorum = NonZeroUsize::new(quorum).expect("not 0");
        let origin = fixed.key.origin();
        match check_coverage(&fixed.tree, origin, &fixed.witnesses, quorum, &found) {
            CoverageVerdict::Covered(coverage) => {
                assert!(coverage.witnessed() <= coverage.size());
                let _ = coverage.to_string();
            }
            CoverageVerdict::Tampered { findings, .. } => assert!(!findings.is_empty()),
        }
    }
});
