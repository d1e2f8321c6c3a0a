//! The hook through which the audit log learns what the gate decided
//! itself: the requests it refused ([`RefusedRequest`]) and the tool lists
//! it showed the agent ([`OfferedTools`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::offered::OfferedTools;
use crate::refused::RefusedRequest;

/// The future [`Recorder::refused`] returns.
pub type RecordFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The future [`Recorder::offered`] returns.
pub type OfferFuture<'a> = Pin<Box<dyn Future<Output = Result<(), NotRecorded>> + Send + 'a>>;

/// A tool list could not be recorded: the gate does not relay it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotRecorded;

impl fmt::Display for NotRecorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the tool list could not be recorded")
    }
}

impl std::error::Error for NotRecorded {}

/// Records what the gate decides itself: the audit log plugs in here.
///
/// The gate answers a refusal only once [`Recorder::refused`] has
/// resolved, so the record is on disk first (a recorder may also make a
/// flood of refusals wait). Whether or not it could record, the request
/// stays refused; a recorder that cannot record must see to it that the
/// run does not go on unrecorded.
///
/// The gate shows the agent a tool list only once [`Recorder::offered`]
/// has recorded it (each distinct list once per gate); on
/// [`NotRecorded`] the agent gets an error instead
/// (`mcp_tools_unrecorded`).
pub trait Recorder: Send + Sync + 'static {
    /// Records `refused`.
    fn refused<'a>(&'a self, refused: &'a RefusedRequest) -> RecordFuture<'a>;

    /// Records `offered`, before the agent sees it.
    fn offered<'a>(&'a self, offered: &'a OfferedTools) -> OfferFuture<'a>;
}

/// The default [`Recorder`]: records nothing, and lets every tool list
/// through.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unrecorded;

impl Recorder for Unrecorded {
    fn refused<'a>(&'a self, _refused: &'a RefusedRequest) -> RecordFuture<'a> {
        Box::pin(std::future::ready(()))
    }

    fn offered<'a>(&'a self, _offered: &'a OfferedTools) -> OfferFuture<'a> {
        Box::pin(std::future::ready(Ok(())))
    }
}
