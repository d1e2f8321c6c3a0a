//! `constle`: run AI agents you cannot trust.
//!
//! This binary only parses arguments, calls the library crates and renders
//! their results. Exit status, for every command:
//!
//! - 0: success (warnings allowed);
//! - 1: a policy finding: an invalid Agentfile, a tampered log;
//! - 2: a usage error or an operational failure (unreadable file, missing key).

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
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::PolicyFailure) => ExitCode::from(1),
        Err(err) => {
            terminal::error(&format!("{err:#}"));
            ExitCode::from(2)
        }
    }
}
