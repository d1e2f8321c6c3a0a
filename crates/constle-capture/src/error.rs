//! What stops the service: [`CaptureError`].

use std::io;

/// Why [`serve`](crate::serve) stopped. It never stops otherwise: an
/// agent's connection that fails is that connection's end, not the
/// service's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The recorder could not record an event. What the event was about
    /// got no answer, and nothing more is answered: a run whose decisions
    /// cannot reach its log must end.
    #[error(
        "cannot record a network event of the sandbox, so its resolver and capture stopped: {0}"
    )]
    Record(String),
    /// One of the sandbox's sockets could not be served, so names could no
    /// longer be answered or connections recorded.
    #[error("cannot serve the sandbox's {what}: {source}")]
    Socket {
        /// Which socket: `DNS over UDP`, `SYN watch`, ….
        what: &'static str,
        /// What the system said.
        #[source]
        source: io::Error,
    },
}

impl CaptureError {
    pub(crate) fn socket(what: &'static str) -> impl FnOnce(io::Error) -> CaptureError {
        move |source| CaptureError::Socket { what, source }
    }
}
