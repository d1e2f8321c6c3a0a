//! One module per subcommand.

mod a2a;
mod approver;
mod approvers;
mod audit;
mod keygen;
mod run;
mod spend;
mod validate;
mod witness;

use crate::Outcome;
use crate::cli::{
    A2aCommand, ApproverCommand, ApproversCommand, AuditCommand, Cli, Command, SpendCommand,
    WitnessCommand,
};

/// Runs the command the user asked for.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    crate::terminal::init(cli.color);
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Keygen(args) => keygen::run(constle_identity::KeyKind::Agent, &args),
        Command::WebhookKeygen(args) => keygen::run(constle_identity::KeyKind::Approver, &args),
        Command::WitnessKeygen(args) => keygen::run(constle_identity::KeyKind::Witness, &args),
        Command::Audit(AuditCommand::Verify(args)) => audit::verify(&args),
        Command::Audit(AuditCommand::Show(args)) => audit::show(&args),
        Command::Spend(SpendCommand::Show(args)) => spend::show(&args),
        Command::A2a(A2aCommand::Send(args)) => a2a::send(&args),
        Command::A2a(A2aCommand::Listen(args)) => a2a::listen(&args),
        Command::Approver(ApproverCommand::Serve(args)) => approver::serve(&args),
        Command::Approvers(ApproversCommand::Init(args)) => approvers::init(&args),
        Command::Approvers(ApproversCommand::Next(args)) => approvers::next(&args),
        Command::Approvers(ApproversCommand::Sign(args)) => approvers::sign(&args),
        Command::Approvers(ApproversCommand::Show(args)) => approvers::show(&args),
        Command::Witness(WitnessCommand::Serve(args)) => witness::serve(&args),
    }
}

/// The host environment, as the Agentfile's warnings need it.
fn host_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
