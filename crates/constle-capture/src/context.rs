//! [`Context`]: what every task of the service shares: the one resolver
//! (whose pool the capture and the SYN watch read back), the recorder and
//! the proxy's address.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, PoisonError};

use constle_dns::{Resolver, Transport};
use constle_manifest::Hostname;
use tokio::sync::watch;

use crate::error::CaptureError;
use crate::event::{Event, Recorder};
use crate::limits::Limits;

/// Shared by all tasks (in an `Arc`).
pub(crate) struct Context<R> {
    resolver: Mutex<Resolver>,
    recorder: R,
    proxy: watch::Receiver<Option<SocketAddr>>,
    pub(crate) limits: Limits,
}

impl<R: Recorder> Context<R> {
    pub(crate) fn new(
        resolver: Resolver,
        recorder: R,
        proxy: watch::Receiver<Option<SocketAddr>>,
        limits: Limits,
    ) -> Context<R> {
        Context {
            resolver: Mutex::new(resolver),
            recorder,
            proxy,
            limits,
        }
    }

    /// Answers one query (framed as `transport` has it): records its event
    /// first, then gives the reply to send, if any.
    pub(crate) async fn resolve(
        &self,
        query: &[u8],
        transport: Transport,
    ) -> Result<Option<Vec<u8>>, CaptureError> {
        let mut decision = None;
        let reply = self
            .resolver()
            .answer(query, transport)
            .reply_after(|d| decision = Some(d));
        if let Some(event) = decision.and_then(Event::of_decision) {
            self.record(event).await?;
        }
        Ok(reply)
    }

    /// The name whose placeholder `ip` is.
    pub(crate) fn name_for(&self, ip: IpAddr) -> Option<Hostname> {
        self.resolver().name_for(ip).cloned()
    }

    pub(crate) async fn record(&self, event: Event) -> Result<(), CaptureError> {
        self.recorder
            .record(event)
            .await
            .map_err(CaptureError::Record)
    }

    /// The proxy's address, once it has one; `None` when it will never
    /// have one (the proxy did not start, or the run is ending).
    pub(crate) async fn proxy(&self) -> Option<SocketAddr> {
        let mut proxy = self.proxy.clone();
        *proxy.wait_for(Option::is_some).await.ok()?
    }

    fn resolver(&self) -> MutexGuard<'_, Resolver> {
        // The resolver never panics (its contract), so a poisoned lock
        // still guards a whole pool.
        self.resolver.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
