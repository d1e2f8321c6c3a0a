//! The agent's chain as an RFC 6962 Merkle tree: one leaf per line, in chain
//! order, hashed as `SHA-256(0x00 || line)`; interior nodes as
//! `SHA-256(0x01 || left || right)`.
//!
//! [`LogTree`] keeps every stored hash (about two per leaf, 64 bytes per
//! entry) in the order of `tlog_tiles` (Crosby and Wallach's dense layout),
//! so appending a leaf costs one leaf hash and on average one node hash, and
//! a root or proof at any earlier size reads at most a few dozen hashes.
//! Hashing, proof construction and proof checking are `tlog_tiles`'s (the
//! port of Go's `golang.org/x/mod/sumdb/tlog`); this module adds bounds,
//! sizes carried with each proof, and the empty-tree cases.

use std::fmt;

use tlog_tiles::{HashReader, check_record, check_tree, prove_record, prove_tree, tree_hash};

use crate::error::ProofError;
use crate::hash::Hash;

/// The most hashes an inclusion or consistency proof may hold: a tree of
/// up to 2^63 leaves needs fewer (c2sp.org/tlog-witness allows a client 63
/// consistency proof lines).
pub const MAX_PROOF_HASHES: usize = 63;

/// A tree's size and its root at that size: what a checkpoint states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeHead {
    /// The number of leaves.
    pub size: u64,
    /// The root hash of the tree of those leaves.
    pub root: Hash,
}

impl TreeHead {
    /// The empty tree.
    pub const EMPTY: TreeHead = TreeHead {
        size: 0,
        root: Hash::EMPTY,
    };

    fn check_empty(&self) -> Result<(), ProofError> {
        match self.size == 0 && self.root != Hash::EMPTY {
            true => Err(ProofError::EmptyTreeRoot { root: self.root }),
            false => Ok(()),
        }
    }
}

/// The agent's chain as a Merkle tree, built line by line.
#[derive(Clone, Default)]
pub struct LogTree {
    /// Every stored hash, in `tlog_tiles::stored_hash_index` order.
    stored: Vec<tlog_tiles::Hash>,
    len: u64,
}

impl fmt::Debug for LogTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogTree")
            .field("len", &self.len)
            .field("root", &self.root())
            .finish()
    }
}

/// The stored hashes, as `tlog_tiles` reads them.
struct Stored<'a>(&'a [tlog_tiles::Hash]);

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<tlog_tiles::Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.0.get(i))
                    .copied()
                    .ok_or(tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl LogTree {
    /// An empty tree.
    pub fn new() -> LogTree {
        LogTree::default()
    }

    /// Appends one line (its exact bytes, without the newline) as the next leaf.
    pub fn push(&mut self, line: &[u8]) {
        self.push_leaf_hash(Hash::leaf(line));
    }

    /// Appends a leaf by its leaf hash ([`Hash::leaf`]).
    pub fn push_leaf_hash(&mut self, leaf: Hash) {
        let n = self.len;
        let mut h = leaf.to_tl();
        self.stored.push(h);
        // Each trailing 1 bit of n completes a subtree, whose left half is
        // stored already (as `tlog_tiles::stored_hashes_for_record_hash`).
        for level in 0..(n + 1).trailing_zeros() {
            let left = tlog_tiles::stored_hash_index(level as u8, (n >> level) - 1);
            // In range: the left sibling was stored when leaf n - 2^level + 1 was.
            h = tlog_tiles::node_hash(self.stored[left as usize], h);
            self.stored.push(h);
        }
        self.len += 1;
    }

    /// The number of leaves.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree has no leaves.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Hash {
        // The whole tree's hashes are all stored.
        self.root_at(self.len).unwrap_or(Hash::EMPTY)
    }

    /// The size and root of the whole tree.
    pub fn head(&self) -> TreeHead {
        TreeHead {
            size: self.len,
            root: self.root(),
        }
    }

    /// The root of the tree of the first `size` leaves.
    ///
    /// # Errors
    ///
    /// [`ProofError::SizeBeyondTree`] if `size` is more than [`LogTree::len`].
    pub fn root_at(&self, size: u64) -> Result<Hash, ProofError> {
        self.within(size)?;
        tree_hash(size, &Stored(&self.stored))
            .map(Hash::from_tl)
            .map_err(|_| self.beyond(size))
    }

    /// The size and root of the tree of the first `size` leaves.
    ///
    /// # Errors
    ///
    /// As [`LogTree::root_at`].
    pub fn head_at(&self, size: u64) -> Result<TreeHead, ProofError> {
        Ok(TreeHead {
            size,
            root: self.root_at(size)?,
        })
    }

    /// The proof that leaf `index` is in the tree of the first `size` leaves.
    ///
    /// # Errors
    ///
    /// [`ProofError::SizeBeyondTree`] or [`ProofError::IndexOutOfRange`].
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Result<InclusionProof, ProofError> {
        self.within(size)?;
        if index >= size {
            return Err(ProofError::IndexOutOfRange { index, size });
        }
        let hashes =
            prove_record(size, index, &Stored(&self.stored)).map_err(|_| self.beyond(size))?;
        InclusionProof::new(index, size, hashes.into_iter().map(Hash::from_tl).collect())
    }

    /// The proof that the tree of the first `old` leaves is a prefix of the
    /// tree of the first `new` leaves (RFC 6962 §2.1.2).
    ///
    /// # Errors
    ///
    /// [`ProofError::SizeBeyondTree`] or [`ProofError::SizesOutOfOrder`].
    pub fn consistency_proof(&self, old: u64, new: u64) -> Result<ConsistencyProof, ProofError> {
        self.within(new)?;
        if old > new {
            return Err(ProofError::SizesOutOfOrder { old, new });
        }
        if old == 0 {
            return ConsistencyProof::new(0, new, Vec::new());
        }
        let hashes = prove_tree(new, old, &Stored(&self.stored)).map_err(|_| self.beyond(new))?;
        ConsistencyProof::new(old, new, hashes.into_iter().map(Hash::from_tl).collect())
    }

    fn within(&self, size: u64) -> Result<(), ProofError> {
        match size > self.len {
            true => Err(self.beyond(size)),
            false => Ok(()),
        }
    }

    fn beyond(&self, size: u64) -> ProofError {
        ProofError::SizeBeyondTree {
            size,
            len: self.len,
        }
    }
}

/// The audit path of one leaf in a tree of a given size (RFC 6962 §2.1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    index: u64,
    size: u64,
    hashes: Vec<Hash>,
}

impl InclusionProof {
    /// A proof as received: leaf `index` in the tree of `size` leaves.
    ///
    /// # Errors
    ///
    /// [`ProofError::IndexOutOfRange`], or [`ProofError::TooLong`] for more
    /// than [`MAX_PROOF_HASHES`] hashes.
    pub fn new(index: u64, size: u64, hashes: Vec<Hash>) -> Result<InclusionProof, ProofError> {
        if index >= size {
            return Err(ProofError::IndexOutOfRange { index, size });
        }
        bound(&hashes)?;
        Ok(InclusionProof {
            index,
            size,
            hashes,
        })
    }

    /// The leaf's index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The size of the tree the proof is for.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The proof's hashes, leaf side first.
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes
    }
}

/// The proof that a tree is a prefix of a larger one (RFC 6962 §2.1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistencyProof {
    old: u64,
    new: u64,
    hashes: Vec<Hash>,
}

impl ConsistencyProof {
    /// A proof as received: from the tree of `old` leaves to that of `new`.
    ///
    /// # Errors
    ///
    /// [`ProofError::SizesOutOfOrder`], or [`ProofError::TooLong`] for more
    /// than [`MAX_PROOF_HASHES`] hashes.
    pub fn new(old: u64, new: u64, hashes: Vec<Hash>) -> Result<ConsistencyProof, ProofError> {
        if old > new {
            return Err(ProofError::SizesOutOfOrder { old, new });
        }
        bound(&hashes)?;
        Ok(ConsistencyProof { old, new, hashes })
    }

    /// The earlier size.
    pub fn old(&self) -> u64 {
        self.old
    }

    /// The later size.
    pub fn new_size(&self) -> u64 {
        self.new
    }

    /// The proof's hashes.
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes
    }
}

fn bound(hashes: &[Hash]) -> Result<(), ProofError> {
    match hashes.len() > MAX_PROOF_HASHES {
        true => Err(ProofError::TooLong {
            len: hashes.len(),
            max: MAX_PROOF_HASHES,
        }),
        false => Ok(()),
    }
}

/// Checks that `line` (without its newline) is leaf `proof.index()` of the
/// tree `head`.
///
/// # Errors
///
/// [`ProofError::SizeMismatch`] if the proof is for another size,
/// [`ProofError::Invalid`] if it does not lead to `head.root`.
pub fn verify_inclusion(
    line: &[u8],
    head: &TreeHead,
    proof: &InclusionProof,
) -> Result<(), ProofError> {
    if proof.size != head.size {
        return Err(ProofError::SizeMismatch {
            proof_old: proof.index,
            proof_new: proof.size,
            old: proof.index,
            new: head.size,
        });
    }
    let hashes: Vec<_> = proof.hashes.iter().map(|h| h.to_tl()).collect();
    check_record(
        &hashes,
        head.size,
        head.root.to_tl(),
        proof.index,
        Hash::leaf(line).to_tl(),
    )
    .map_err(|_| ProofError::Invalid)
}

/// Checks that the tree `old` is a prefix of the tree `new`.
///
/// From the empty tree every tree follows, with an empty proof; between
/// equal sizes the roots must be equal and the proof empty.
///
/// # Errors
///
/// [`ProofError::SizeMismatch`] if the proof is for other sizes,
/// [`ProofError::EmptyTreeRoot`] for a size-0 head with another root,
/// [`ProofError::Invalid`] if it does not verify.
pub fn verify_consistency(
    old: &TreeHead,
    new: &TreeHead,
    proof: &ConsistencyProof,
) -> Result<(), ProofError> {
    if proof.old != old.size || proof.new != new.size {
        return Err(ProofError::SizeMismatch {
            proof_old: proof.old,
            proof_new: proof.new,
            old: old.size,
            new: new.size,
        });
    }
    old.check_empty()?;
    new.check_empty()?;
    if old.size == 0 || old.size == new.size {
        let same = old.size == 0 || old.root == new.root;
        return match same && proof.hashes.is_empty() {
            true => Ok(()),
            false => Err(ProofError::Invalid),
        };
    }
    let hashes: Vec<_> = proof.hashes.iter().map(|h| h.to_tl()).collect();
    check_tree(
        &hashes,
        new.size,
        new.root.to_tl(),
        old.size,
        old.root.to_tl(),
    )
    .map_err(|_| ProofError::Invalid)
}
