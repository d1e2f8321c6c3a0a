//! One switch for every gate of a run: once thrown, no gate sends anything
//! more to its server.
//!
//! A run that ends (a gated call timed out under `on_timeout: abort`, a
//! signal, the agent gone) cannot rely on dropping its gates to stop them:
//! the agent's next request may already be on its way, and dropping comes
//! only after the sandbox is torn down. So each gate checks the switch
//! itself, right before it would send, and the switch is thrown before the
//! refusal that ends the run is answered: a request the agent sends after
//! that answer finds every gate closed.

use std::sync::{Arc, OnceLock};

/// Shared by the gates of one run ([`crate::Gate::with_shutoff`]); clones
/// share the switch. Thrown once, for good.
#[derive(Clone, Debug, Default)]
pub struct Shutoff(Arc<OnceLock<String>>);

impl Shutoff {
    /// A switch not yet thrown.
    pub fn new() -> Shutoff {
        Shutoff::default()
    }

    /// Closes every gate sharing this switch; `why` completes the message
    /// the agent gets for each request refused from now on ("the Constle
    /// gate forwards nothing more: {why}"). The first reason stays.
    pub fn close(&self, why: impl Into<String>) {
        let _ = self.0.set(why.into());
    }

    /// Why the gates are closed, once they are.
    pub fn closed(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_once_for_every_clone_with_the_first_reason() {
        let switch = Shutoff::new();
        let other = switch.clone();
        assert_eq!(other.closed(), None);
        switch.close("first");
        other.close("second");
        assert_eq!(other.closed(), Some("first"));
        assert_eq!(switch.closed(), Some("first"));
    }
}
