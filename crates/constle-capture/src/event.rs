//! What the service reports ([`Event`]) and to whom ([`Recorder`]).

use std::future::Future;
use std::net::IpAddr;

use constle_dns::{Answered, Decision, Refused};
use constle_manifest::Hostname;

/// Something the audit log must hold, handed to the [`Recorder`] before
/// the agent hears its outcome (a DNS reply); a SYN is recorded after the
/// kernel refused it, which it does itself.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// An allowed name got its placeholders: once per name, on its first
    /// `A` or `AAAA` query (`answered.assigned`). Later queries for it
    /// are answered without an event.
    Named(Answered),
    /// A query the resolver refused (every one: nothing is dropped).
    NameRefused(Refused),
    /// A connection attempt (a SYN) to a placeholder address on a port
    /// other than 443: nothing listens there, so the kernel refused it.
    PortRefused {
        /// The placeholder connected to.
        address: IpAddr,
        /// The name it stands for; `None` when no name has it (yet).
        name: Option<Hostname>,
        /// The port asked for.
        port: u16,
    },
}

impl Event {
    /// The event a resolver's decision makes, if any.
    pub(crate) fn of_decision(decision: Decision) -> Option<Event> {
        match decision {
            Decision::Answered(answered) if answered.assigned => Some(Event::Named(answered)),
            Decision::Refused(refused) => Some(Event::NameRefused(refused)),
            _ => None,
        }
    }
}

/// Where events go (`constle-run`: the signed audit log, paced). The
/// service waits for each record before it goes on with what the event is
/// about, so a slow recorder slows the agent's lookups and loses nothing;
/// an `Err` stops the whole service ([`CaptureError::Record`](crate::CaptureError::Record)).
///
/// Any `Fn(Event) -> impl Future<Output = Result<(), String>>` is one.
pub trait Recorder: Send + Sync + 'static {
    /// Records `event`, or says why it could not.
    fn record(&self, event: Event) -> impl Future<Output = Result<(), String>> + Send;
}

impl<F, Fut> Recorder for F
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    fn record(&self, event: Event) -> impl Future<Output = Result<(), String>> + Send {
        self(event)
    }
}
