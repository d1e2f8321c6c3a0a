//! A decision endpoint for Constle's human gates: the server side of
//! `docs/spec/human-gates-webhook.md` (version 1) and
//! `docs/spec/human-gates-webhook-v2.md` (version 2: one of several
//! approvers, each running their own endpoint), with a web page where a
//! person approves or denies gated calls.
//!
//! - [`request`]: the gate's `POST <url>`, either version, checked strictly
//!   (shapes, sizes, and that the digest, salted in version 2, is the
//!   digest of the call shown); and the gate's unsigned "votes so far".
//! - [`protocol`]: what the key signs and the decision body served, per
//!   version.
//! - [`store`]: requests, decisions and who made them, approver passwords
//!   and login sessions, durably in SQLite. A decision is final: the
//!   database itself refuses to change one. Its files are created `0600`
//!   and refused when another user could read or write them.
//! - [`auth`]: Argon2id passwords, random 256-bit session ids (kept only as
//!   hashes) and CSRF tokens.
//! - [`throttle`]: failed sign-ins make further ones wait, per user name
//!   and per address, with a capped, doubling, forgotten delay.
//! - [`web`]: the routes. The key signs only in `POST /decide`, for a
//!   logged-in person whose form carries the session's CSRF token, over
//!   exactly the members the gate sent.
//!
//! `constle approver serve` (in the `constle` crate) puts these together;
//! `docs/approver.md` is the manual.

#![forbid(unsafe_code)]

pub mod auth;
mod error;
mod html;
mod private;
pub mod protocol;
pub mod request;
pub mod store;
pub mod throttle;
pub mod web;

pub use auth::AuthError;
pub use html::escape;
pub use store::{Store, StoreError};
pub use web::{Approver, CONTENT_SECURITY_POLICY, DECISION_HOLD, SESSION_COOKIE, router, serve};
