//! `constle validate FILE`: check an Agentfile and say what is wrong with it.

use constle_manifest::{Diagnostic, Severity};
use serde::Serialize;

use crate::Outcome;
use crate::cli::{Format, ValidateArgs};
use crate::terminal::{self, Paint, Stream, escape, paint};

/// The last line of `--format json` output.
#[derive(Serialize)]
struct Summary<'a> {
    r#type: &'static str,
    file: &'a std::path::Path,
    valid: bool,
    errors: usize,
    warnings: usize,
}

/// One diagnostic line of `--format json` output.
#[derive(Serialize)]
struct DiagnosticLine<'a> {
    r#type: &'static str,
    #[serde(flatten)]
    diagnostic: &'a Diagnostic,
}

pub fn run(args: &ValidateArgs) -> anyhow::Result<Outcome> {
    let (errors, warnings) = match constle_manifest::load_file(&args.file, &super::host_env) {
        Ok(valid) => (Vec::new(), valid.warnings),
        Err(rejected) if rejected.errors.iter().any(|e| e.code == "io_error") => {
            anyhow::bail!("{}", rejected.errors[0].message)
        }
        Err(rejected) => (rejected.errors, rejected.warnings),
    };
    match args.format {
        Format::Json => print_json(args, &errors, &warnings)?,
        Format::Human => print_human(args, &errors, &warnings),
    }
    Ok(if errors.is_empty() {
        Outcome::Success
    } else {
        Outcome::PolicyFailure
    })
}

fn print_json(
    args: &ValidateArgs,
    errors: &[Diagnostic],
    warnings: &[Diagnostic],
) -> anyhow::Result<()> {
    for diagnostic in errors.iter().chain(warnings) {
        terminal::out(&serde_json::to_string(&DiagnosticLine {
            r#type: "diagnostic",
            diagnostic,
        })?);
    }
    let summary = Summary {
        r#type: "summary",
        file: &args.file,
        valid: errors.is_empty(),
        errors: errors.len(),
        warnings: warnings.len(),
    };
    terminal::out(&serde_json::to_string(&summary)?);
    Ok(())
}

fn print_human(args: &ValidateArgs, errors: &[Diagnostic], warnings: &[Diagnostic]) {
    print_diagnostics(errors.iter().chain(warnings), Stream::Out);
    let file = escape(&args.file.display().to_string());
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let summary = match errors.is_empty() {
        true => paint(
            Paint::Green,
            &format!("✓ {file} is valid ({})", count(warnings.len(), "warning")),
        ),
        false => paint(
            Paint::Red,
            &format!(
                "✗ {file} is invalid: {}, {}",
                count(errors.len(), "error"),
                count(warnings.len(), "warning")
            ),
        ),
    };
    terminal::out(&summary);
}

/// Prints diagnostics, each headed by its coloured first line, escaped: the
/// text may quote the Agentfile.
pub fn print_diagnostics<'a>(diagnostics: impl Iterator<Item = &'a Diagnostic>, stream: Stream) {
    for diagnostic in diagnostics {
        let color = match diagnostic.severity {
            Severity::Error => Paint::Red,
            Severity::Warning => Paint::Yellow,
        };
        let text = diagnostic.to_string();
        let mut lines = text.lines().map(escape);
        if let Some(first) = lines.next() {
            stream.line(&stream.paint(color, &first));
        }
        lines.for_each(|line| stream.line(&line));
    }
}
