//! One supervised run of an agent: the Agentfile's policy turned into a
//! sandbox whose only way out is the egress proxy, with every decision in
//! the audit log, started together and torn down together.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod a2a;
mod agent;
mod asking;
mod bridge;
mod channel;
mod checkpoints;
mod descriptors;
mod doors;
mod error;
mod events;
mod hidden;
mod human;
mod limits;
mod llm;
mod llm_spend;
mod mcp;
mod names;
mod options;
mod output;
mod plan;
mod proxy;
mod quorum;
mod refusals;
mod run;
mod signals;
mod spend;
mod stdio;
mod stop;
mod timings;
mod workdir;

pub use a2a::{listener as a2a_listener, listener_event as a2a_event};
pub use constle_spend::usd;
pub use error::RunError;
pub use llm::PLACEHOLDER_KEY;
pub use options::{RunEnd, RunOptions, RunReport};
pub use plan::{Item, plan};
pub use run::run;
pub use spend::{caps, ledger_config, ledger_key, llm_caps, spend_plan};
pub use workdir::{WorkdirChecked, make_default_workdir, make_home};
