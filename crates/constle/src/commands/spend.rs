//! `constle spend show [AGENTFILE]`: what the agent has spent today, this
//! month and in its last run, against its caps, what each MCP server and
//! each model was charged, and the model calls' own ledger when it holds
//! anything, read from its ledger.

use anyhow::Context as _;
use constle_run::usd;
use constle_spend::{Caps, Ledger, LedgerConfig, LedgerKey, Scope, Source, SourceTotals, Stored};
use rust_decimal::Decimal;
use serde::Serialize;

use crate::Outcome;
use crate::cli::{Format, SpendShowArgs};
use crate::commands::validate::print_diagnostics;
use crate::home::constle_home;
use crate::terminal::{Stream, escape, out};

/// One ledger's totals and the caps they are held to.
struct Section {
    /// `all` (every charge) or `llm` (model calls alone, `llm.spending`).
    scope: &'static str,
    /// Where the caps are set: `` or `llm.spending.`.
    caps_at: &'static str,
    caps: Caps,
    stored: Stored,
}

/// What `spend show` prints, either way.
struct Report {
    agent: String,
    keyed_by: String,
    ledger: String,
    /// Today's UTC date and month (`YYYY-MM`).
    day: String,
    month: String,
    sections: Vec<Section>,
}

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
    let (stored, llm_stored) = runtime
        .block_on(read(&config, key, now))
        .with_context(|| format!("cannot read the spend ledger of {}", manifest.name))?;
    let mut sections = vec![Section {
        scope: "all",
        caps_at: "",
        caps: constle_run::caps(&manifest),
        stored,
    }];
    // Model calls' own totals: whenever `llm.spending` caps them, or the
    // ledger holds any (caps since removed from the Agentfile).
    let llm_caps = constle_run::llm_caps(&manifest);
    if llm_caps != Caps::default() || holds_anything(&llm_stored) {
        sections.push(Section {
            scope: "llm",
            caps_at: "llm.spending.",
            caps: llm_caps,
            stored: llm_stored,
        });
    }
    let utc = now.to_zoned_datetime(jiff::tz::TimeZone::UTC);
    let report = Report {
        agent: manifest.name.to_string(),
        keyed_by: match manifest.did() {
            Some(did) => did.to_string(),
            None => format!("the name {} (no identity.did)", manifest.name),
        },
        ledger: match &manifest.spending.ledger {
            Some(url) => format!("Redis {}", url.redacted()),
            None => format!("{}", home.join("ledger").display()),
        },
        day: utc.date().to_string(),
        month: utc.strftime("%Y-%m").to_string(),
        sections,
    };
    match args.format {
        Format::Human => print_human(&report),
        Format::Json => print_json(&report)?,
    }
    Ok(Outcome::Success)
}

/// The agent's stored totals, and those of its model calls' own ledger.
async fn read(
    config: &LedgerConfig,
    key: LedgerKey,
    now: jiff::Timestamp,
) -> Result<(Stored, Stored), constle_spend::LedgerError> {
    let llm_key = key.scoped(Scope::Llm);
    let stored = Ledger::open(config, key).await?.stored(now).await?;
    let llm = Ledger::open(config, llm_key).await?.stored(now).await?;
    Ok((stored, llm))
}

fn holds_anything(stored: &Stored) -> bool {
    stored.last_run.is_some() || !stored.day.is_zero() || !stored.month.is_zero()
}

fn print_human(report: &Report) {
    out(&format!("spend of agent {}", escape(&report.agent)));
    out(&format!("  keyed by  {}", escape(&report.keyed_by)));
    out(&format!("  ledger    {}", escape(&report.ledger)));
    for section in &report.sections {
        let indent = if section.scope == "all" {
            "  "
        } else {
            out("  model calls alone (llm.spending):");
            "    "
        };
        print_totals(report, section, indent);
        print_sources(&section.stored, indent);
    }
}

fn print_totals(report: &Report, section: &Section, indent: &str) {
    let (caps, at, stored) = (&section.caps, section.caps_at, &section.stored);
    out(&line(
        indent,
        &format!("today {}", report.day),
        stored.day,
        caps.per_day,
        &format!("{at}max_per_day_usd"),
    ));
    out(&line(
        indent,
        &format!("month {}", report.month),
        stored.month,
        caps.per_month,
        &format!("{at}max_per_month_usd"),
    ));
    match &stored.last_run {
        Some(run) => out(&line(
            indent,
            &format!(
                "last run with charges {} (started {})",
                escape(&run.id),
                run.started_at
            ),
            run.total,
            caps.per_run,
            &format!("{at}max_per_run_usd"),
        )),
        None => out(&format!("{indent}last run with charges: none")),
    }
}

/// Each source's day and month, then what no source accounts for.
fn print_sources(stored: &Stored, indent: &str) {
    let rest = Some(&stored.unattributed).filter(|rest| !is_zero(rest));
    if stored.by_source.is_empty() && rest.is_none() {
        return;
    }
    out(&format!("{indent}by source, today and this month:"));
    for (source, spent) in &stored.by_source {
        out(&source_line(indent, &describe(source), spent));
    }
    if let Some(rest) = rest {
        let what = "unattributed (charged before totals were kept by source)";
        out(&source_line(indent, what, rest));
    }
}

fn describe(source: &Source) -> String {
    match source {
        Source::Mcp { server } => format!("mcp server {}", escape(server)),
        Source::Llm { provider, model } => {
            format!("llm provider {} model {}", escape(provider), escape(model))
        }
    }
}

fn source_line(indent: &str, what: &str, spent: &SourceTotals) -> String {
    format!(
        "{indent}  {what}: {} USD today, {} USD this month",
        usd(spent.day),
        usd(spent.month)
    )
}

fn is_zero(totals: &SourceTotals) -> bool {
    totals.day.is_zero() && totals.month.is_zero()
}

fn line(indent: &str, what: &str, spent: Decimal, cap: Option<Decimal>, field: &str) -> String {
    match cap {
        Some(cap) => format!(
            "{indent}{what}: {} USD of {} ({field})",
            usd(spent),
            usd(cap)
        ),
        None => format!("{indent}{what}: {} USD (no {field})", usd(spent)),
    }
}

/// One line of `--format json` output.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum JsonLine<'a> {
    /// Whose totals, and where they are kept.
    Agent {
        agent: &'a str,
        keyed_by: &'a str,
        ledger: &'a str,
    },
    /// A total against its cap: the day's, the month's or the last run's.
    Total {
        scope: &'static str,
        period: &'static str,
        /// The date, the month (`YYYY-MM`) or the run's id.
        of: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        started_at: Option<String>,
        usd: String,
        cap: String,
        cap_usd: Option<String>,
    },
    /// What one source (or no source) was charged today and this month.
    Source {
        scope: &'static str,
        #[serde(flatten)]
        source: JsonSource<'a>,
        day_usd: String,
        month_usd: String,
    },
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum JsonSource<'a> {
    Mcp { server: &'a str },
    Llm { provider: &'a str, model: &'a str },
    Unattributed {},
}

fn print_json(report: &Report) -> anyhow::Result<()> {
    let mut lines = vec![JsonLine::Agent {
        agent: &report.agent,
        keyed_by: &report.keyed_by,
        ledger: &report.ledger,
    }];
    for section in &report.sections {
        lines.extend(json_totals(report, section));
        lines.extend(json_sources(section));
    }
    for line in lines {
        out(&serde_json::to_string(&line)?);
    }
    Ok(())
}

fn json_totals<'a>(report: &Report, section: &'a Section) -> Vec<JsonLine<'a>> {
    let (caps, stored) = (&section.caps, &section.stored);
    let total =
        |period, of: String, started_at, spent, cap: Option<Decimal>, field| JsonLine::Total {
            scope: section.scope,
            period,
            of,
            started_at,
            usd: usd(spent),
            cap: format!("{}{field}", section.caps_at),
            cap_usd: cap.map(usd),
        };
    let mut lines = vec![
        total(
            "day",
            report.day.clone(),
            None,
            stored.day,
            caps.per_day,
            "max_per_day_usd",
        ),
        total(
            "month",
            report.month.clone(),
            None,
            stored.month,
            caps.per_month,
            "max_per_month_usd",
        ),
    ];
    if let Some(run) = &stored.last_run {
        lines.push(total(
            "run",
            run.id.clone(),
            Some(run.started_at.to_string()),
            run.total,
            caps.per_run,
            "max_per_run_usd",
        ));
    }
    lines
}

fn json_sources(section: &Section) -> Vec<JsonLine<'_>> {
    let line = |source, spent: &SourceTotals| JsonLine::Source {
        scope: section.scope,
        source,
        day_usd: usd(spent.day),
        month_usd: usd(spent.month),
    };
    let stored = &section.stored;
    let mut lines: Vec<JsonLine<'_>> = stored
        .by_source
        .iter()
        .map(|(source, spent)| {
            let source = match source {
                Source::Mcp { server } => JsonSource::Mcp { server },
                Source::Llm { provider, model } => JsonSource::Llm { provider, model },
            };
            line(source, spent)
        })
        .collect();
    if !is_zero(&stored.unattributed) {
        lines.push(line(JsonSource::Unattributed {}, &stored.unattributed));
    }
    lines
}
