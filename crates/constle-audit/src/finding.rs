//! What a verifier finds wrong with a log: each kind of problem with its
//! stable name and what it means.

/// A kind of problem found in a log, with a stable name for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FindingCode {
    /// The file is not named `<agent>-<YYYY-MM-DD>.jsonl`.
    UnrecognizedFileName,
    /// A line is not JSON, or lacks an envelope field.
    Malformed,
    /// A line repeats a key inside one object.
    DuplicateKey,
    /// A line is not byte-for-byte in canonical form.
    NotCanonical,
    /// A signature does not verify against the signer's key.
    InvalidSignature,
    /// A line is signed by another key than the log's signer.
    WrongSigner,
    /// A line lacks a signature in a signed log.
    UnsignedEntry,
    /// A line names another agent.
    WrongAgent,
    /// A line's time is not on the file's day.
    WrongDay,
    /// A line does not link to the one before it.
    ChainBroken,
    /// A line repeats an earlier line.
    DuplicateEntry,
    /// Entries were removed from the end.
    TailRemoved,
    /// No head anchor where one must be.
    AnchorMissing,
    /// The head anchor is malformed, unsigned or signed by another key.
    AnchorInvalid,
    /// A recorded webhook decision was not signed by the approver key.
    ApprovalSignatureInvalid,
    /// A recorded vote is for another policy than its run's.
    VoteMismatch,
    /// A call recorded as approved by a quorum lacks the verified votes.
    QuorumUnproven,
    /// The log names an approver set version the set does not have.
    ApproverSetUnknown,
    /// A witness cosigned a tree head the log's tree no longer has at that
    /// size.
    WitnessedHistoryRewritten,
    /// A witness cosigned a tree larger than the log.
    WitnessedEntriesMissing,
    /// A recorded cosignature by a declared witness does not verify.
    CosignatureInvalid,
}

impl FindingCode {
    /// The stable snake_case name printed in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingCode::UnrecognizedFileName => "unrecognized_file_name",
            FindingCode::Malformed => "malformed_entry",
            FindingCode::DuplicateKey => "duplicate_key",
            FindingCode::NotCanonical => "not_canonical",
            FindingCode::InvalidSignature => "invalid_signature",
            FindingCode::WrongSigner => "wrong_signer",
            FindingCode::UnsignedEntry => "unsigned_entry",
            FindingCode::WrongAgent => "wrong_agent",
            FindingCode::WrongDay => "wrong_day",
            FindingCode::ChainBroken => "chain_broken",
            FindingCode::DuplicateEntry => "duplicate_entry",
            FindingCode::TailRemoved => "tail_removed",
            FindingCode::AnchorMissing => "anchor_missing",
            FindingCode::AnchorInvalid => "anchor_invalid",
            FindingCode::ApprovalSignatureInvalid => "approval_signature_invalid",
            FindingCode::VoteMismatch => "vote_mismatch",
            FindingCode::QuorumUnproven => "quorum_unproven",
            FindingCode::ApproverSetUnknown => "approver_set_unknown",
            FindingCode::WitnessedHistoryRewritten => "witnessed_history_rewritten",
            FindingCode::WitnessedEntriesMissing => "witnessed_entries_missing",
            FindingCode::CosignatureInvalid => "cosignature_invalid",
        }
    }

    /// What the finding means for the log, in a sentence.
    pub fn meaning(self) -> &'static str {
        match self {
            FindingCode::UnrecognizedFileName => {
                "day and agent cannot be checked; give the file its original <agent>-<YYYY-MM-DD>.jsonl name"
            }
            FindingCode::Malformed => "the line is not an entry the writer produces",
            FindingCode::DuplicateKey => {
                "a key appears twice, so readers could disagree on what the entry says"
            }
            FindingCode::NotCanonical => {
                "the line was re-serialised or edited after it was written"
            }
            FindingCode::InvalidSignature => "the entry was edited after signing",
            FindingCode::WrongSigner => "the entry was signed by a key other than the agent's",
            FindingCode::UnsignedEntry => "an unsigned entry was put into a signed log",
            FindingCode::WrongAgent => "the entry belongs to another agent's log",
            FindingCode::WrongDay => {
                "the entry was recorded on another day: the file was renamed or lines were spliced in"
            }
            FindingCode::ChainBroken => "lines were removed, inserted or reordered here",
            FindingCode::DuplicateEntry => "an earlier entry was copied in again",
            FindingCode::TailRemoved => "entries were cut off the end of the log",
            FindingCode::AnchorMissing => {
                "the head anchor was removed, so a cut-off end cannot be ruled out"
            }
            FindingCode::AnchorInvalid => "the head anchor was edited or replaced",
            FindingCode::ApprovalSignatureInvalid => {
                "the approval was not signed by the pinned approver key"
            }
            FindingCode::VoteMismatch => {
                "a recorded vote was signed for another policy than its run's"
            }
            FindingCode::QuorumUnproven => {
                "a call was recorded as approved without the votes that approve it"
            }
            FindingCode::ApproverSetUnknown => {
                "the log names an approver set version that is not in the verified set"
            }
            FindingCode::WitnessedHistoryRewritten => {
                "entries a witness cosigned were changed, removed or inserted, and the log re-signed"
            }
            FindingCode::WitnessedEntriesMissing => {
                "entries a witness cosigned were cut off the log"
            }
            FindingCode::CosignatureInvalid => {
                "a witness's cosignature does not verify: the entry or checkpoint holding it was edited"
            }
        }
    }
}

/// One problem, with the line it was found on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The 1-based line number, when the problem belongs to a line.
    pub line: Option<usize>,
    /// What kind of problem.
    pub code: FindingCode,
    /// The specifics.
    pub detail: String,
}
