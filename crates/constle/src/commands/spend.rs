//! `constle spend show [AGENTFILE]`: what the agent has spent today, this
//! month and in its last run, against its caps, read from its ledger.

use anyhow::Context as _;
use constle_run::usd;
use constle_spend::Ledger;
use rust_decimal::Decimal;

use crate::Outcome;
use crate::cli::SpendShowArgs;
use crate::commands::validate::print_diagnostics;
use crate::home::constle_home;
use crate::terminal::{Stream, escape, out};

pub fn show(args: &SpendShowArgs) -> anyhow::Result<Outcome> {
    let manifest = match constle_manifest::load_file(&args.file, &super::host_env) {
        Ok(validated) => validated.manifest,
        Err(rejected) => {
            print_diagnostics(rejected.errors.iter(), Stream::Err);
            return Ok(Outcome::PolicyFailure);
        }
    };
    let home = constle_home()?;
    let config = constle_run::ledger_config(&manifest, &home);
    let key = constle_run::ledger_key(&manifest);
    let now = jiff::Timestamp::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stored = runtime
        .block_on(async { Ledger::open(&config, key).await?.stored(now).await })
        .with_context(|| format!("cannot read the spend ledger of {}", manifest.name))?;
    let caps = constle_run::caps(&manifest);
    let keyed = match manifest.did() {
        Some(did) => did.to_string(),
        None => format!("the name {} (no identity.did)", manifest.name),
    };
    let ledger = match &manifest.spending.ledger {
        Some(url) => format!("Redis {}", url.redacted()),
        None => format!("{}", home.join("ledger").display()),
    };
    out(&format!(
        "spend of agent {}",
        escape(manifest.name.as_str())
    ));
    out(&format!("  keyed by  {}", escape(&keyed)));
    out(&format!("  ledger    {}", escape(&ledger)));
    let utc = now.to_zoned_datetime(jiff::tz::TimeZone::UTC);
    out(&line(
        &format!("today {}", utc.date()),
        stored.day,
        caps.per_day,
        "max_per_day_usd",
    ));
    out(&line(
        &format!("month {}", utc.strftime("%Y-%m")),
        stored.month,
        caps.per_month,
        "max_per_month_usd",
    ));
    match &stored.last_run {
        Some(run) => out(&line(
            &format!(
                "last run with charges {} (started {})",
                run.id, run.started_at
            ),
            run.total,
            caps.per_run,
            "max_per_run_usd",
        )),
        None => out("  last run with charges: none"),
    }
    Ok(Outcome::Success)
}

fn line(what: &str, spent: Decimal, cap: Option<Decimal>, field: &str) -> String {
    match cap {
        Some(cap) => format!("  {what}: {} USD of {} ({field})", usd(spent), usd(cap)),
        None => format!("  {what}: {} USD (no {field})", usd(spent)),
    }
}
