//! Spend caps in a run: every priced `tools/call` is charged to the ledger
//! (embedded, or Redis with `spending.ledger`) before the MCP gate forwards
//! it, and refused when it would pass a cap or the ledger cannot be read or
//! written. Each charge and refusal is on disk in the audit log before the
//! gate acts on it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use constle_audit::AuditLog;
use constle_audit::catalogue::{SpendCharged, SpendRefused};
use constle_manifest::{Manifest, McpServer};
use constle_mcp_gate::{Meter, MeterFuture, Metered, ToolCall};
use constle_spend::{
    Cap, Caps, Ledger, LedgerConfig, LedgerKey, Refusal, RunMeter, Scope, Source, Totals, usd,
};
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::plan::Item;

/// The ledger this agent's totals live in.
pub fn ledger_config(manifest: &Manifest, home: &Path) -> LedgerConfig {
    match &manifest.spending.ledger {
        Some(url) => LedgerConfig::Redis {
            url: url.as_str().to_owned(),
        },
        None => LedgerConfig::Embedded {
            dir: home.join("ledger"),
        },
    }
}

/// Totals are keyed by the agent's DID, or by its name without one.
pub fn ledger_key(manifest: &Manifest) -> LedgerKey {
    match manifest.did() {
        Some(did) => LedgerKey::for_did(did),
        None => LedgerKey::for_name(&manifest.name),
    }
}

/// The caps the Agentfile declares.
pub fn caps(manifest: &Manifest) -> Caps {
    let spending = &manifest.spending;
    Caps {
        per_run: spending.max_per_run_usd,
        per_day: spending.max_per_day_usd,
        per_month: spending.max_per_month_usd,
    }
}

/// Whether any call of any declared MCP server has a price.
fn mcp_priced(manifest: &Manifest) -> bool {
    manifest.mcp.servers.iter().any(|s| s.pricing.is_priced())
}

/// Whether anything the agent can call costs money: a priced MCP call,
/// or any model (every declared model is priced).
pub(crate) fn is_priced(manifest: &Manifest) -> bool {
    mcp_priced(manifest) || !manifest.llm.providers.is_empty()
}

/// A run's meter, or why its ledger could not be opened (every priced
/// call is then refused).
pub(crate) type SharedMeter = Arc<Result<RunMeter, String>>;

/// The caps `llm.spending` declares on model spend alone.
pub fn llm_caps(manifest: &Manifest) -> Caps {
    let spending = &manifest.llm.spending;
    Caps {
        per_run: spending.max_per_run_usd,
        per_day: spending.max_per_day_usd,
        per_month: spending.max_per_month_usd,
    }
}

/// The run's meter, shared by the MCP and model gates, or `None` when
/// nothing is priced. A ledger that cannot be opened is not an error here:
/// the run starts, and every priced call is refused.
pub(crate) async fn open_run_meter(manifest: &Manifest, home: &Path) -> Option<SharedMeter> {
    if !is_priced(manifest) {
        return None;
    }
    Some(open_meter(manifest, home, ledger_key(manifest), caps(manifest)).await)
}

/// The run's meter of model spend alone, when `llm.spending` declares a
/// cap: its totals live under the agent's key scoped to model calls.
pub(crate) async fn open_llm_meter(manifest: &Manifest, home: &Path) -> Option<SharedMeter> {
    let caps = llm_caps(manifest);
    if caps == Caps::default() {
        return None;
    }
    let key = ledger_key(manifest).scoped(Scope::Llm);
    Some(open_meter(manifest, home, key, caps).await)
}

async fn open_meter(manifest: &Manifest, home: &Path, key: LedgerKey, caps: Caps) -> SharedMeter {
    let meter = Ledger::open(&ledger_config(manifest, home), key)
        .await
        .map(|ledger| ledger.start_run(caps))
        .map_err(|err| err.to_string());
    Arc::new(meter)
}

/// The run summary's spend lines: each declared cap with what has been
/// spent against it so far, and where the totals are kept.
pub async fn spend_plan(manifest: &Manifest, home: &Path) -> Vec<Item> {
    let key = ledger_key(manifest);
    let mut items = cap_lines(manifest, home, caps(manifest), key.clone(), None).await;
    let llm = cap_lines(
        manifest,
        home,
        llm_caps(manifest),
        key.scoped(Scope::Llm),
        Some(Scope::Llm),
    );
    items.extend(llm.await);
    items
}

/// The summary's lines for `caps`, kept under `key` (in `scope`'s own
/// ledger, if any): each with what has been spent against it so far.
async fn cap_lines(
    manifest: &Manifest,
    home: &Path,
    caps: Caps,
    key: LedgerKey,
    scope: Option<Scope>,
) -> Vec<Item> {
    if caps == Caps::default() {
        return Vec::new();
    }
    let keyed = match manifest.did() {
        Some(did) => format!("keyed by {did}"),
        None => format!(
            "keyed by the agent's name {:?} (no identity.did: any agent of that name shares them)",
            manifest.name.as_str()
        ),
    };
    let where_kept = match &manifest.spending.ledger {
        Some(url) => format!("Redis {}", url.redacted()),
        None => "the embedded ledger".to_owned(),
    };
    let stored = match Ledger::open(&ledger_config(manifest, home), key).await {
        Ok(ledger) => ledger.stored(jiff::Timestamp::now()).await,
        Err(err) => Err(err),
    };
    let stored = match stored {
        Ok(stored) => stored,
        Err(err) => {
            return vec![Item::Enforced {
                part: "spend",
                detail: format!(
                    "{where_kept} cannot be read ({err}): every priced call will be refused"
                ),
            }];
        }
    };
    let section = scope.map_or("", Scope::section);
    let mut items = Vec::new();
    for (cap, limit, spent, what) in [
        (Cap::PerRun, caps.per_run, Decimal::ZERO, "this run"),
        (Cap::PerDay, caps.per_day, stored.day, "today (UTC)"),
        (
            Cap::PerMonth,
            caps.per_month,
            stored.month,
            "this month (UTC)",
        ),
    ] {
        if let Some(limit) = limit {
            items.push(Item::Enforced {
                part: "spend",
                detail: format!(
                    "{section}{} {} USD: {} spent {what}, in {where_kept}, {keyed}",
                    cap.field(),
                    usd(limit),
                    usd(spent)
                ),
            });
        }
    }
    items
}

/// Charges priced calls for one run, for the MCP gates of all its servers.
#[derive(Clone)]
pub(crate) struct SpendMeter(Arc<Inner>);

struct Inner {
    servers: BTreeMap<String, McpServer>,
    /// The run's meter, or why the ledger could not be opened.
    meter: SharedMeter,
    log: Arc<AuditLog>,
}

impl SpendMeter {
    /// The MCP gates' meter for a run of `manifest`, charging `meter` (the
    /// run's, from [`open_run_meter`]), or `None` when no MCP call is
    /// priced.
    pub(crate) fn open(
        manifest: &Manifest,
        meter: Option<SharedMeter>,
        log: &Arc<AuditLog>,
    ) -> Option<SpendMeter> {
        let meter = meter.filter(|_| mcp_priced(manifest))?;
        let servers = manifest
            .mcp
            .servers
            .iter()
            .map(|s| (s.id.to_string(), s.clone()))
            .collect();
        Some(SpendMeter(Arc::new(Inner {
            servers,
            meter,
            log: Arc::clone(log),
        })))
    }
}

impl Meter for SpendMeter {
    fn charge<'a>(&'a self, calls: Vec<&'a ToolCall>) -> MeterFuture<'a> {
        Box::pin(self.0.charge(calls))
    }
}

impl Inner {
    fn price(&self, call: &ToolCall) -> Option<Decimal> {
        self.servers.get(&call.server)?.price_of(&call.tool)
    }

    /// What this run has been charged: this process keeps the run's total,
    /// so it is known even when the ledger is not. A run whose ledger never
    /// opened has charged nothing.
    fn run_total(&self) -> Decimal {
        self.meter
            .as_ref()
            .as_ref()
            .map_or(Decimal::ZERO, RunMeter::run_total)
    }

    async fn charge(&self, calls: Vec<&ToolCall>) -> Metered {
        let priced: Vec<(&ToolCall, Decimal)> = calls
            .into_iter()
            .filter_map(|call| self.price(call).map(|price| (call, price)))
            .collect();
        let Some((first, _)) = priced.first() else {
            return Metered::Charged;
        };
        let amount: Decimal = priced.iter().map(|(_, price)| price).sum();
        let subject = Subject {
            server: first.server.clone(),
            calls: priced
                .iter()
                .map(|(call, price)| json!({"tool": call.tool, "amount_usd": usd(*price)}))
                .collect(),
            amount_usd: usd(amount),
        };
        let outcome = match self.meter.as_ref() {
            Ok(meter) => meter
                .reserve(
                    amount,
                    Source::Mcp {
                        server: first.server.clone(),
                    },
                    jiff::Timestamp::now(),
                )
                .await
                .map_err(Refusal::from),
            Err(error) => Err(Refusal::ledger_unavailable(error.clone())),
        };
        let (entry, verdict) = match outcome {
            Ok(totals) => (subject.charged(&totals).into(), Metered::Charged),
            Err(refusal) => {
                let message = refusal.message();
                let entry = match refusal {
                    Refusal::Cap {
                        cap, limit, totals, ..
                    } => SpendRefused {
                        cap: Some(cap.field().to_owned()).into(),
                        cap_usd: Some(usd(limit)).into(),
                        ..subject.refused(totals.run, Some(&totals), "cap")
                    },
                    Refusal::Failed { why, error, stored } => {
                        let run = stored.map_or_else(|| self.run_total(), |totals| totals.run);
                        SpendRefused {
                            error: Some(error).into(),
                            ..subject.refused(run, stored.as_ref(), why.as_str())
                        }
                    }
                };
                (entry.into(), Metered::Refused { message })
            }
        };
        // On disk before the gate acts; a charge that cannot be recorded is
        // not forwarded (it stays charged: the ledger already holds it).
        let recorded = self.log.submit(entry).written().await.is_ok();
        match verdict {
            Metered::Charged if !recorded => Metered::Refused {
                message: "the charge could not be recorded in the audit log; the Constle gate did not forward the call".into(),
            },
            verdict => verdict,
        }
    }
}

/// What a spend event says of the calls it is about: the server, each
/// priced call, and their price.
struct Subject {
    server: String,
    calls: Vec<Value>,
    amount_usd: String,
}

impl Subject {
    /// `spend_charged`, with the totals the ledger gave.
    fn charged(self, totals: &Totals) -> SpendCharged {
        SpendCharged {
            server: self.server,
            calls: Value::Array(self.calls),
            amount_usd: self.amount_usd,
            run_usd: usd(totals.run),
            day_usd: Some(usd(totals.day)),
            month_usd: Some(usd(totals.month)),
        }
    }

    /// `spend_refused` for `reason`, with the run's total and, when the
    /// ledger gave them, the day's and month's; `null` when it did not (it
    /// could not be read, or was not asked): an unknown total is never
    /// written as `0.00`.
    fn refused(self, run: Decimal, stored: Option<&Totals>, reason: &str) -> SpendRefused {
        SpendRefused {
            server: self.server,
            calls: Value::Array(self.calls),
            amount_usd: self.amount_usd,
            run_usd: usd(run),
            day_usd: stored.map(|totals| usd(totals.day)),
            month_usd: stored.map(|totals| usd(totals.month)),
            reason: reason.to_owned(),
            cap: None.into(),
            cap_usd: None.into(),
            error: None.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use constle_audit::Appender;
    use constle_mcp_gate::RequestId;

    use super::*;

    /// Prices: `dear` fits the ledger once but not twice; `huge` never.
    const AGENTFILE: &str = r#"name: meter-test
sandbox:
  command: [x]
mcp:
  servers:
    - id: acct
      url: https://mcp.example.com/mcp
      tools: [cheap, dear, huge]
      pricing:
        tools: {cheap: "0.10", dear: "900000000", huge: "1000000000"}
"#;

    /// What marks a secret: it must appear in no output.
    const MARKER: &str = "M4RK3R";

    fn manifest() -> Manifest {
        parse(AGENTFILE)
    }

    fn parse(src: &str) -> Manifest {
        constle_manifest::parse_str(src, Path::new("/srv/a/agent.yaml"), &|_| None)
            .unwrap()
            .manifest
    }

    fn all_lines(home: &Path) -> String {
        std::fs::read_dir(home.join("logs"))
            .unwrap()
            .map(|file| std::fs::read_to_string(file.unwrap().path()).unwrap())
            .collect()
    }

    fn call(tool: &str) -> ToolCall {
        ToolCall {
            server: "acct".to_owned(),
            tool: tool.to_owned(),
            arguments: None,
            request_id: RequestId::Int(1),
        }
    }

    fn spend_events(home: &Path) -> Vec<Value> {
        let mut events = Vec::new();
        for file in std::fs::read_dir(home.join("logs")).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            events.extend(
                text.lines()
                    .map(|line| serde_json::from_str::<Value>(line).unwrap())
                    .filter(|e| e["event"] == "spend_refused"),
            );
        }
        events
    }

    fn nothing(_: &Path) {}

    fn ledger_is_a_file(home: &Path) {
        std::fs::write(home.join("ledger"), "not a directory").unwrap();
    }

    fn corrupt_state(home: &Path) {
        std::fs::write(home.join("ledger/name-meter-test/state.json"), "{").unwrap();
    }

    /// One run's calls, and the `reason`, `run_usd`, `day_usd` and
    /// `month_usd` its one refusal must record (`None`: `null`).
    struct Case {
        what: &'static str,
        before_open: fn(&Path),
        calls: &'static [&'static str],
        before_last: fn(&Path),
        want: [Option<&'static str>; 4],
    }

    /// A refused call records the totals before it: the run's always (this
    /// process keeps it), the day's and month's when the ledger gave them,
    /// and `null`, never a made-up `0.00`, when it did not.
    #[tokio::test]
    async fn a_refusal_records_the_totals_that_are_known_and_only_those() {
        let unavailable = Some("ledger_unavailable");
        let invalid = Some("charge_invalid");
        let cases = [
            Case {
                what: "a ledger unusable from the start",
                before_open: ledger_is_a_file,
                calls: &["cheap"],
                before_last: nothing,
                want: [unavailable, Some("0.00"), None, None],
            },
            Case {
                what: "a ledger that breaks during the run",
                before_open: nothing,
                calls: &["cheap", "cheap"],
                before_last: corrupt_state,
                want: [unavailable, Some("0.10"), None, None],
            },
            Case {
                what: "an amount the ledger cannot hold",
                before_open: nothing,
                calls: &["cheap", "huge"],
                before_last: nothing,
                want: [invalid, Some("0.10"), None, None],
            },
            Case {
                what: "a total the ledger cannot hold",
                before_open: nothing,
                calls: &["dear", "dear"],
                before_last: nothing,
                want: [
                    invalid,
                    Some("900000000.00"),
                    Some("900000000.00"),
                    Some("900000000.00"),
                ],
            },
        ];
        let manifest = manifest();
        for case in cases {
            let home = tempfile::tempdir().unwrap();
            let home = home.path();
            (case.before_open)(home);
            let appender = Appender::new(&home.join("logs"), manifest.name.clone(), None).unwrap();
            let log = Arc::new(AuditLog::start(appender));
            let meter =
                SpendMeter::open(&manifest, open_run_meter(&manifest, home).await, &log).unwrap();
            let mut last = Metered::Charged;
            for (i, tool) in case.calls.iter().enumerate() {
                if i + 1 == case.calls.len() {
                    (case.before_last)(home);
                }
                last = meter.charge(vec![&call(tool)]).await;
            }
            let what = case.what;
            let Metered::Refused { message } = last else {
                panic!("{what}: charged");
            };
            // The error names the ledger: the log has it, the agent not.
            let home_path = home.to_str().unwrap();
            assert!(!message.contains(home_path), "{what}: {message}");
            let refused = spend_events(home);
            let [event] = refused.as_slice() else {
                panic!("{what}: {refused:?}");
            };
            let got = ["reason", "run_usd", "day_usd", "month_usd"]
                .map(|k| event.get(k).map(Value::as_str));
            assert_eq!(got, case.want.map(Some), "{what}: {event}");
        }
    }

    /// The run summary and the audit log show a ledger URL's password as
    /// `***`, whether Redis answers (the summary's totals) or not (the
    /// summary's and the refusal's error).
    #[tokio::test]
    async fn a_ledger_password_is_never_shown() {
        if !constle_testkit::require_tools("a_ledger_password_is_never_shown", &["redis-server"]) {
            return;
        }
        let redis = constle_testkit::RedisServer::start().unwrap();
        redis.require_password(MARKER).unwrap();
        let answering = format!("{}?pass={MARKER}", redis.url());
        let silent = format!("redis+unix:///nonexistent/redis.sock?db=0&pass={MARKER}");
        for (url, says) in [(answering, "0.00 spent today"), (silent, "cannot be read")] {
            let manifest = parse(&format!(
                "{AGENTFILE}spending:\n  max_per_day_usd: 5\n  ledger: \"{url}\"\n"
            ));
            let home = tempfile::tempdir().unwrap();
            let home = home.path();
            let summary = format!("{:?}", spend_plan(&manifest, home).await);
            assert!(summary.contains(says), "{url}: {summary}");
            assert!(summary.contains("pass=***"), "{url}: {summary}");
            assert!(!summary.contains(MARKER), "{url}: {summary}");
            let appender = Appender::new(&home.join("logs"), manifest.name.clone(), None).unwrap();
            let log = Arc::new(AuditLog::start(appender));
            let meter =
                SpendMeter::open(&manifest, open_run_meter(&manifest, home).await, &log).unwrap();
            meter.charge(vec![&call("cheap")]).await;
            let lines = all_lines(home);
            assert!(lines.contains("\"event\":\"spend_"), "{url}: {lines}");
            assert!(!lines.contains(MARKER), "{url}: {lines}");
        }
    }
}
