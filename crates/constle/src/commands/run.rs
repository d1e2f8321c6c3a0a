//! `constle run FILE`: the agent in its sandbox, with the run summary first.

use anyhow::Context as _;
use constle_run::{Item, RunOptions, WorkdirChecked};
use constle_workdir::Action;

use crate::Outcome;
use crate::cli::RunArgs;
use crate::commands::validate::print_diagnostics;
use crate::home::constle_home;
use crate::terminal::{Paint, Stream, escape};

/// The exit status when the run itself failed (as `env` and `timeout` do).
const RUN_FAILED: u8 = 125;

pub fn run(args: &RunArgs) -> anyhow::Result<Outcome> {
    let validated = match constle_manifest::load_file(&args.file, &super::host_env) {
        Ok(validated) => validated,
        Err(rejected) => {
            print_diagnostics(
                rejected.errors.iter().chain(&rejected.warnings),
                Stream::Err,
            );
            Stream::Err.line(&Stream::Err.paint(
                Paint::Red,
                "constle run: the Agentfile is invalid; nothing was started",
            ));
            return Ok(Outcome::PolicyFailure);
        }
    };
    let manifest = validated.manifest;
    let options = RunOptions {
        home: constle_home()?,
        agentfile: args.file.clone(),
        hosts_file: args.hosts_file.clone(),
        constle_exe: std::env::current_exe()
            .context("cannot find the constle binary to run inside the sandbox")?,
    };
    // One thread: the proxy and the sandbox die with the thread that started
    // them (PDEATHSIG), so it must be the one that lives for the whole run.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let made = constle_run::make_default_workdir(&manifest)
        .and_then(|workdir| Ok((workdir, constle_run::make_home(&manifest)?)));
    let (made, home_made) = match made {
        Ok(made) => made,
        Err(err) => {
            crate::terminal::error(&format!("constle run: {err}; nothing was started"));
            return Ok(Outcome::Exited(RUN_FAILED));
        }
    };
    let mut summary = constle_run::plan(&manifest);
    if made.is_some() {
        say_made(
            &mut summary,
            "workdir",
            "made now, mode 0700 (the Agentfile names no workdir, and the default did not exist)",
        );
    }
    if home_made.is_some() {
        say_made(
            &mut summary,
            "home",
            "made now, mode 0700 (it did not exist)",
        );
    }
    summary.extend(runtime.block_on(constle_run::spend_plan(&manifest, &options.home)));
    print_summary(manifest.name.as_str(), &summary);
    print_diagnostics(validated.warnings.iter(), Stream::Err);
    let end = runtime.block_on(constle_run::run(&manifest, &options));
    for checked in &end.workdirs {
        print_workdir(checked);
    }
    let report = match end.outcome {
        Ok(report) => report,
        Err(err) => {
            crate::terminal::error(&format!("constle run: {err}"));
            return Ok(Outcome::Exited(RUN_FAILED));
        }
    };
    let summary = format!(
        "constle run: agent exited with status {} after {} ms",
        report.exit_code,
        report.duration.as_millis()
    );
    Stream::Err.line(&Stream::Err.paint(Paint::Dim, &summary));
    Ok(Outcome::Exited(
        u8::try_from(report.exit_code).unwrap_or(RUN_FAILED),
    ))
}

/// Puts `note` before the detail of the summary's `part` line.
fn say_made(summary: &mut [Item], part: &str, note: &str) {
    for item in summary {
        if let Item::Enforced { part: p, detail } = item
            && *p == part
        {
            *detail = format!("{note}; {detail}");
        }
    }
}

fn print_summary(agent: &str, items: &[Item]) {
    let err = Stream::Err;
    err.line(&err.paint(
        Paint::Bold,
        &format!("constle run: agent {}", escape(agent)),
    ));
    for item in items {
        let line = match item {
            Item::Enforced { part, detail } => format!(
                "  {}  {part:<11} {}",
                err.paint(Paint::Green, "enforced    "),
                escape(detail)
            ),
            Item::NotEnforced { part, why } => format!(
                "  {}  {part:<11} {}",
                err.paint(Paint::Red, "NOT ENFORCED"),
                escape(why)
            ),
        };
        err.line(&line);
    }
}

/// What the check after the run did in one work directory, told as the
/// operator needs it: what was set aside and how to take it back, what was
/// changed back.
fn print_workdir(checked: &WorkdirChecked) {
    let err = Stream::Err;
    let report = &checked.report;
    let whose = match &checked.server {
        None if checked.home => format!(
            "the agent's home {}",
            escape(&checked.workdir.to_string_lossy())
        ),
        None => format!(
            "the work directory {}",
            escape(&checked.workdir.to_string_lossy())
        ),
        Some(id) => format!(
            "the work directory of MCP server {} ({})",
            escape(id),
            escape(&checked.workdir.to_string_lossy())
        ),
    };
    if let Some(quarantine) = &report.quarantine {
        let quarantine = escape(&quarantine.to_string_lossy());
        err.line(&err.paint(
            Paint::Yellow,
            &format!("constle run: set aside what the agent left in {whose} that your tools would run, into {quarantine}:"),
        ));
        let width = report
            .set_aside
            .iter()
            .map(|s| s.path.as_os_str().len())
            .max()
            .unwrap_or(0);
        for item in &report.set_aside {
            let done = match &item.action {
                Action::Moved => "new: moved there".to_owned(),
                Action::Restored => {
                    "changed: the agent's version moved there, yours put back".to_owned()
                }
                Action::Rewritten { removed } => format!(
                    "rewritten without {} (the file as the agent left it is there)",
                    escape(&removed.join(", "))
                ),
            };
            let path = escape(&item.path.to_string_lossy());
            let lost = match item.kept {
                true => "",
                false => {
                    " (too large to keep on top of 256 MiB copied to another file system: removed)"
                }
            };
            err.line(&format!("  {path:<width$}  {}: {done}{lost}", item.what));
        }
        err.line(&format!(
            "  nothing runs it there; review it, and move back what you want to keep: mv {quarantine}/PATH {}/PATH",
            escape(&checked.workdir.to_string_lossy())
        ));
    }
    let listed = |paths: &[std::path::PathBuf]| {
        let shown: Vec<String> = paths
            .iter()
            .take(10)
            .map(|p| escape(&p.to_string_lossy()))
            .collect();
        match paths.len() > shown.len() {
            true => format!(
                "{}, and {} more",
                shown.join(", "),
                paths.len() - shown.len()
            ),
            false => shown.join(", "),
        }
    };
    if !report.write_opened.is_empty() {
        err.line(&format!(
            "constle run: {} in {whose} {} writable by group or others after the run, and now {} by {} owner only: {}",
            count(report.write_opened.len(), "entry", "entries"),
            if report.write_opened.len() == 1 { "was" } else { "were" },
            if report.write_opened.len() == 1 { "is" } else { "are" },
            if report.write_opened.len() == 1 { "its" } else { "their" },
            listed(&report.write_opened)
        ));
    }
    if let Some(was) = &report.root_changed {
        err.line(&format!(
            "constle run: {whose} has its mode and owner back (the agent had left {was})"
        ));
    }
    if !report.setid_cleared.is_empty() {
        err.line(&format!(
            "constle run: set-id bits cleared on {} in {whose}: {}",
            count(report.setid_cleared.len(), "file", "files"),
            listed(&report.setid_cleared)
        ));
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
