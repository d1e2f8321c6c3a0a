//! `constle run FILE`: the agent in its sandbox, with the run summary first.

use anyhow::Context as _;
use constle_run::{Item, RunOptions};

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
    let mut summary = constle_run::plan(&manifest);
    summary.extend(runtime.block_on(constle_run::spend_plan(&manifest, &options.home)));
    print_summary(manifest.name.as_str(), &summary);
    print_diagnostics(validated.warnings.iter(), Stream::Err);
    let report = match runtime.block_on(constle_run::run(&manifest, &options)) {
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
