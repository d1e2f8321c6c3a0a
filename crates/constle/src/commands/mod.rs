//! One module per subcommand.

mod a2a;
mod approver;
mod approvers;
mod audit;
mod doctor;
mod keygen;
mod kube;
mod receipt;
mod run;
mod spend;
mod validate;
mod verify_json;
mod witness;

use std::future::Future;
use std::net::SocketAddr;

use anyhow::Context as _;

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
        Command::Doctor(args) => doctor::run(&args),
        Command::Kube(args) => kube::run(&args),
        Command::Keygen(args) => keygen::run(constle_identity::KeyKind::Agent, &args),
        Command::WebhookKeygen(args) => keygen::run(constle_identity::KeyKind::Approver, &args),
        Command::WitnessKeygen(args) => keygen::run(constle_identity::KeyKind::Witness, &args),
        Command::Audit(AuditCommand::Verify(args)) => audit::verify(&args),
        Command::Audit(AuditCommand::Show(args)) => audit::show(&args),
        Command::Audit(AuditCommand::LogKey(args)) => audit::log_key(&args),
        Command::Audit(AuditCommand::Receipt(args)) => receipt::write(&args),
        Command::Audit(AuditCommand::VerifyReceipt(args)) => receipt::verify(&args),
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

/// What `constle approver serve` and `constle witness serve` share: a
/// runtime, `listen` bound (an error names it), then `serve` with the
/// listener, its address and a future that resolves on Ctrl-C, until it
/// returns.
fn serve_until_interrupted<F, Fut>(listen: SocketAddr, serve: F) -> anyhow::Result<()>
where
    F: FnOnce(tokio::net::TcpListener, SocketAddr, Interrupted) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        let interrupted = Box::pin(async {
            let _ = tokio::signal::ctrl_c().await;
        });
        serve(listener, addr, interrupted).await
    })
}

/// Resolves when the user presses Ctrl-C.
type Interrupted = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
