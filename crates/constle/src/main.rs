//! `constle`: run AI agents you cannot trust.
//!
//! This binary only parses arguments, calls the library crates and renders
//! their results. Exit status, for every command:
//!
//! - 0: success (warnings allowed);
//! - 1: a policy finding: an invalid Agentfile, a tampered log;
//! - 2: a usage error or an operational failure (unreadable file, missing key).
//!
//! `constle run` exits with the agent's exit status instead (128 + n when a
//! signal ended it), or 125 when the run itself failed.

#![forbid(unsafe_code)]

mod cli;
mod commands;
mod home;
mod terminal;

use std::process::ExitCode;

use clap::Parser as _;

/// How a command ended, beyond plain success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Success,
    PolicyFailure,
    /// `constle run`: the agent's own exit status.
    Exited(u8),
}

fn main() -> ExitCode {
    // Launching a sandbox or inside one, `constle` is the launcher or the
    // relay (or, for `constle doctor`, the preflight's probe process), not
    // the command line; clap never sees those arguments, so they
    // reach them exactly as written.
    let mut args = std::env::args_os().skip(1);
    let sandbox_side: Option<fn(Vec<std::ffi::OsString>) -> i32> = match args.next() {
        Some(first) if first == constle_sandbox::INIT_SUBCOMMAND => {
            Some(constle_sandbox::init_main)
        }
        Some(first) if first == constle_sandbox::LAUNCH_SUBCOMMAND => {
            Some(constle_sandbox::launch_main)
        }
        Some(first) if first == constle_preflight::PROBE_SUBCOMMAND => {
            Some(constle_preflight::probe_main)
        }
        _ => None,
    };
    if let Some(main) = sandbox_side {
        let code = main(args.collect());
        return ExitCode::from(u8::try_from(code).unwrap_or(125));
    }
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::PolicyFailure) => ExitCode::from(1),
        Ok(Outcome::Exited(code)) => ExitCode::from(code),
        Err(err) => {
            terminal::error(&format!("{err:#}"));
            ExitCode::from(2)
        }
    }
}
