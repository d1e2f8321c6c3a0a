//! What the MCP gates of a run record: each request a gate refuses itself
//! is an `mcp_refused` entry, on disk before the agent gets the refusal;
//! each distinct tool list a gate shows the agent is an
//! `mcp_tools_offered` entry, on disk before the agent sees it (the gate
//! records each list once, and at most
//! [`constle_mcp_gate::MAX_OFFERED_LISTS`] of them).
//!
//! A flood of refused requests cannot grow the log faster than the gate's
//! [`Pace`] allows ([`constle_mcp_gate::REFUSALS_PER_SECOND`] entries a
//! second after a burst of [`constle_mcp_gate::REFUSALS_BURST`]): beyond
//! that, refusals wait their turn. None is dropped, so each refusal stays on record, and
//! each entry is bounded ([`constle_mcp_gate::MAX_RECORDED_BYTES`] per
//! string the agent chose), so neither the number nor the size of the
//! entries is the agent's to choose.

use std::sync::Arc;

use constle_audit::catalogue::{McpRefused, McpToolsOffered};
use constle_audit::{AuditLog, Event};
use constle_mcp_gate::{
    NotRecorded, OfferFuture, OfferedTools, Pace, RecordFuture, Recorder, RefusedRequest,
    RequestId, Shutoff,
};
use serde_json::Value;

use crate::stop::{GateStop, GateStops};

/// Records the refusals and tool lists of every MCP gate of one run.
#[derive(Clone)]
pub(crate) struct GateLog(Arc<Inner>);

struct Inner {
    log: Arc<AuditLog>,
    pace: Pace,
    shutoff: Shutoff,
    stops: GateStops,
}

impl GateLog {
    /// Records into `log`; a refusal or tool list that cannot be recorded
    /// closes the gates (`shutoff`) and ends the run (`stops`).
    pub(crate) fn new(log: &Arc<AuditLog>, shutoff: &Shutoff, stops: &GateStops) -> GateLog {
        GateLog(Arc::new(Inner {
            log: Arc::clone(log),
            pace: Pace::for_refusals(),
            shutoff: shutoff.clone(),
            stops: stops.clone(),
        }))
    }
}

impl Recorder for GateLog {
    fn refused<'a>(&'a self, refused: &'a RefusedRequest) -> RecordFuture<'a> {
        Box::pin(async {
            tokio::time::sleep_until(self.0.pace.turn()).await;
            // The refusal stands whether or not it was recorded.
            let _ = (self.0)
                .record(&refused.server, "a refusal", refused_event(refused))
                .await;
        })
    }

    fn offered<'a>(&'a self, offered: &'a OfferedTools) -> OfferFuture<'a> {
        // Not paced: a gate records at most MAX_OFFERED_LISTS lists.
        let event = offered_event(offered);
        Box::pin(
            self.0
                .record(&offered.server, "a tool list it offered", event),
        )
    }
}

impl Inner {
    /// Writes `event` for the gate of `server`; if it cannot, what must not
    /// go on is a run whose gate decisions leave no trace.
    async fn record(
        &self,
        server: &str,
        what: &'static str,
        event: Event,
    ) -> Result<(), NotRecorded> {
        let written = (self.log.submit(event).written().await)
            .map(drop)
            .map_err(|err| err.to_string());
        let Err(error) = written else {
            return Ok(());
        };
        // The agent reads this with every refusal from now on: the error,
        // which names the log's path, goes to the operator (`stops`).
        self.shutoff
            .close(format!("{what} could not be recorded in the audit log"));
        let _ = self.stops.send(GateStop::Unrecorded {
            server: server.to_owned(),
            what,
            error,
        });
        Err(NotRecorded)
    }
}

/// `mcp_refused`, with what the gate read of the request, and the
/// host-side cause when there is one.
pub(crate) fn refused_event(refused: &RefusedRequest) -> Event {
    McpRefused {
        server: refused.server.clone(),
        http_method: refused.http_method.clone(),
        method: refused.method.clone(),
        tool: refused.tool.clone(),
        reason: refused.reason.as_str().to_owned(),
        rpc_id: refused.request_id.as_ref().map(rpc_id),
        detail: refused.detail.clone().into(),
    }
    .into()
}

/// `mcp_tools_offered`: the tools' names in the order the agent got them,
/// and the digest of the list it got.
pub(crate) fn offered_event(offered: &OfferedTools) -> Event {
    McpToolsOffered {
        server: offered.server.clone(),
        tools: offered.tools.clone(),
        digest: offered.digest.clone(),
    }
    .into()
}

/// The id as the agent sent it: a string, or an integer; one that JSON
/// cannot carry exactly as a number (beyond ±(2^53 − 1)) in a string of
/// its digits.
fn rpc_id(id: &RequestId) -> Value {
    const EXACT: i128 = (1 << 53) - 1;
    match id {
        RequestId::Int(n) if (-EXACT..=EXACT).contains(n) => id.to_json(),
        RequestId::Int(n) => Value::String(n.to_string()),
        RequestId::String(s) => Value::String(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_record_that_fails_closes_the_gates_naming_no_path() {
        let home = tempfile::tempdir().unwrap();
        let logs = home.path().join("logs");
        let name = constle_identity::Name::new("test-agent").unwrap();
        let appender = constle_audit::Appender::new(&logs, name, None).unwrap();
        // The log directory becomes a file: every write fails, naming it.
        std::fs::remove_dir(&logs).unwrap();
        std::fs::write(&logs, "not a directory").unwrap();
        let log = Arc::new(AuditLog::start(appender));
        let (shutoff, (stops, mut stopped)) =
            (Shutoff::new(), tokio::sync::mpsc::unbounded_channel());
        let gates = GateLog::new(&log, &shutoff, &stops);
        let event = Event::new("mcp_refused").unwrap();
        let recorded = gates.0.record("accounting", "a refusal", event).await;
        assert_eq!(recorded, Err(NotRecorded));
        // What every request is told from now on, and what the operator is.
        let told = shutoff.closed().unwrap();
        assert!(!told.contains(home.path().to_str().unwrap()), "{told}");
        let Some(GateStop::Unrecorded { error, .. }) = stopped.recv().await else {
            panic!("the run is not stopped");
        };
        assert!(error.contains(logs.to_str().unwrap()), "{error}");
    }

    #[test]
    fn ids_keep_their_type_unless_json_would_round_them() {
        for (id, expected) in [
            (RequestId::Int(7), serde_json::json!(7)),
            (
                RequestId::Int(-(1 << 53) + 1),
                serde_json::json!(-(1_i64 << 53) + 1),
            ),
            (
                RequestId::Int(1 << 53),
                serde_json::json!("9007199254740992"),
            ),
            (RequestId::String("7".into()), serde_json::json!("7")),
        ] {
            assert_eq!(rpc_id(&id), expected, "{id:?}");
        }
    }
}
