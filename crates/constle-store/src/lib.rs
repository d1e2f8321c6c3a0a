//! Durable state on disk and in Redis: the three things every store of
//! Constle's that keeps state across runs is built from.
//!
//! - [`replace`]: a small file replaced atomically and durably (temporary
//!   file, `fsync`, rename, `fsync` of the directory), or created new and
//!   never overwritten; used by the audit head, receipts, checkpoints, the
//!   witness state, the approver-set store, key files, the spend ledger and
//!   the A2A replay store.
//! - [`lock`] (feature `lock`): an exclusive `flock` taken on a blocking
//!   thread within a deadline that no write overruns.
//! - [`redis`] (feature `redis`): one bounded, credential-safe Redis
//!   connection.
//!
//! The features keep what a crate that only writes files builds to
//! `tempfile`: the lock pulls tokio, the connection the Redis client and
//! rustls. Each module's error is in [`error`], and each store maps it
//! into its own error type, with its own messages.

#![forbid(unsafe_code)]

pub mod error;
#[cfg(feature = "lock")]
pub mod lock;
#[cfg(feature = "redis")]
pub mod redis;
pub mod replace;

#[cfg(feature = "lock")]
pub use error::LockFailure;
#[cfg(feature = "redis")]
pub use error::RedisFailure;
pub use error::ReplaceError;
