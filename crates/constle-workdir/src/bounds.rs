//! How far the checks go: the deepest tree walked and the most
//! executable configuration copied, shared by the checks and their errors.

/// The deepest directory the walk goes into.
pub(crate) const MAX_DEPTH: usize = 256;

/// The most executable configuration a work directory may hold before a
/// run: a copy of it is kept in memory to put it back.
pub(crate) const MAX_SAVED_BYTES: usize = 64 << 20;
