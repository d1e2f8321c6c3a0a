//! One supervised run of an agent: the Agentfile's policy turned into a
//! sandbox whose only way out is the egress proxy, with every decision in
//! the audit log, started together and torn down together.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod a2a;
mod bridge;
mod checkpoints;
mod error;
mod human;
mod limits;
mod mcp;
mod output;
mod plan;
mod quorum;
mod refusals;
mod run;
mod spend;
mod stdio;
mod stop;
mod workdir;

pub use a2a::{listener as a2a_listener, listener_event as a2a_event};
pub use error::RunError;
pub use plan::{Item, plan};
pub use run::{RunEnd, RunOptions, RunReport, run};
pub use spend::{caps, ledger_config, ledger_key, spend_plan, usd};
pub use workdir::{WorkdirChecked, make_default_workdir};
