//! `constle doctor [-f FILE]`: whether this machine has every layer the
//! sandbox needs (for the run an Agentfile describes, or any run), and
//! what fixes a missing one. Exit status 0 when every required layer is
//! there, 1 when one is missing, 2 for a usage error or an invalid
//! Agentfile.
//!
//! `--format json` prints one object (docs/containers.md, "Preflight"):
//! `{"ok": bool, "checks": [{"id", "required", "status", "finding",
//! "fixes": {"docker", "podman", "kubernetes"}}]}`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use constle_manifest::Egress;
use constle_preflight::{Check, Limits, Needs, Report, Status};
use serde::Serialize;

use crate::Outcome;
use crate::cli::{DoctorArgs, Format};
use crate::commands::validate::print_diagnostics;
use crate::terminal::{self, Paint, Stream, escape, paint};

/// The `--format json` object.
#[derive(Serialize)]
struct Json<'a> {
    ok: bool,
    checks: &'a [Check],
}

pub fn run(args: &DoctorArgs) -> anyhow::Result<Outcome> {
    let exe = std::env::current_exe().context("cannot find the constle binary to probe with")?;
    let needs = match &args.file {
        Some(file) => needs_of(file, exe)?,
        None => Needs::any_run(exe, Some(std::env::current_dir()?)),
    };
    let report = constle_preflight::check(&needs);
    match args.format {
        Format::Json => terminal::out(&serde_json::to_string(&Json {
            ok: report.ok(),
            checks: &report.checks,
        })?),
        Format::Human => print_human(&report),
    }
    Ok(match report.ok() {
        true => Outcome::Success,
        false => Outcome::PolicyFailure,
    })
}

/// What the run `file` describes needs.
fn needs_of(file: &Path, constle_exe: PathBuf) -> anyhow::Result<Needs> {
    let manifest = match constle_manifest::load_file(file, &super::host_env) {
        Ok(valid) => valid.manifest,
        Err(rejected) => {
            print_diagnostics(
                rejected.errors.iter().chain(&rejected.warnings),
                Stream::Err,
            );
            anyhow::bail!(
                "the Agentfile {} is invalid; nothing was checked",
                file.display()
            );
        }
    };
    let sandbox = manifest.sandbox;
    Ok(Needs {
        constle_exe,
        workdir: Some(sandbox.workdir),
        limits: Limits {
            memory_bytes: sandbox.limits.memory_bytes,
            pids: sandbox.limits.pids,
            cpu_millis: sandbox.limits.cpu_millis,
        },
        as_root: constle_hostids::privileged(),
        egress_proxy: sandbox.network.egress != Egress::None,
    })
}

/// One aligned line per check, then the fixes of each missing one, then
/// the verdict.
fn print_human(report: &Report) {
    for check in &report.checks {
        let (word, color) = match (check.status, check.required) {
            (Status::Ok, _) => ("ok", Paint::Green),
            (Status::Missing, true) => ("MISSING", Paint::Red),
            (Status::Missing, false) => ("MISSING", Paint::Yellow),
            (Status::Unknown, _) => ("unknown", Paint::Yellow),
        };
        let needed = if check.required {
            "required"
        } else {
            "optional"
        };
        terminal::out(&format!(
            "{} {:<17} {needed:<8}  {}",
            paint(color, &format!("{word:<7}")),
            check.id.name(),
            escape(&check.finding)
        ));
    }
    for check in report.checks.iter().filter(|c| c.status == Status::Missing) {
        print_fixes(check);
    }
    let blocking: Vec<&str> = report.blocking().map(|c| c.id.name()).collect();
    terminal::out("");
    terminal::out(&match blocking.as_slice() {
        [] => paint(Paint::Green, "✓ every layer the sandbox needs is here"),
        missing => paint(
            Paint::Red,
            &format!("✗ missing, so a run stops: {}", missing.join(", ")),
        ),
    });
}

fn print_fixes(check: &Check) {
    if check.fixes.each().next().is_none() {
        return;
    }
    terminal::out("");
    terminal::out(&format!("to fix {}:", check.id.name()));
    for (engine, fix) in check.fixes.each() {
        terminal::out(&format!("  {engine:<11} {}", escape(fix)));
    }
}
