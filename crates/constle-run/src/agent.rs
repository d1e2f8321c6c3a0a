//! The agent's sandbox: its environment, and its process, spawned so that
//! it cannot outlive the run.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use constle_manifest::Manifest;
use constle_sandbox::{SandboxEnd, SandboxSpec};

use crate::error::{RunError, io};
use crate::output::{AgentOutput, OutputHold};
use crate::proxy::PROXY_LISTEN;

/// How long the agent's output may keep coming once the sandbox is gone.
pub(crate) const OUTPUT_GRACE: Duration = Duration::from_secs(5);

/// The agent's whole environment (the sandbox adds `PATH` and `HOME` where
/// it is silent): what the Agentfile declares, the proxy variables
/// pointing at the proxy's door, and the MCP gates' URLs (which the proxy
/// variables must not capture).
pub(crate) fn agent_env(
    manifest: &Manifest,
    proxied: bool,
    mcp: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let declared = manifest
        .sandbox
        .env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()));
    let mut env = match proxied {
        true => constle_egress::client_env(PROXY_LISTEN.into(), declared),
        false => declared.collect(),
    };
    env.extend(mcp.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// The running sandbox: bwrap, the pipes its output comes through, and
/// its lifeline.
pub(crate) struct AgentProcess {
    pub child: tokio::process::Child,
    /// What it was started from: where its status is.
    pub spec: SandboxSpec,
    pub output: AgentOutput,
    /// The sandbox ends when this closes, at the latest when constle exits.
    pub lifeline: std::io::PipeWriter,
}

/// Spawns the sandbox with its stdout and stderr on pipes constle prints
/// from, in a process group of its own (the terminal's Ctrl-C goes to
/// constle, which ends the run, not to the sandbox), and with a lifeline:
/// the sandbox ends when the returned pipe end closes, at the latest when
/// constle exits, however it does.
pub(crate) fn start_sandbox(
    spec: &SandboxSpec,
    hold: &OutputHold,
) -> Result<AgentProcess, RunError> {
    let mut command =
        constle_sandbox::sandbox_command(spec).map_err(|e| RunError::Sandbox(e.to_string()))?;
    let (output, stdout, stderr) =
        AgentOutput::start(hold).map_err(io("cannot make the agent's output pipes"))?;
    let (lifeline, held) = std::io::pipe().map_err(io("cannot make the sandbox's lifeline"))?;
    command
        .stdin(lifeline)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let mut command = tokio::process::Command::from(command);
    let child = command
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RunError::Sandbox(format!("cannot start bwrap: {e}")))?;
    // The command holds this process's copies of the pipes' ends: without
    // dropping it, the pipes would never reach their end.
    drop(command);
    Ok(AgentProcess {
        child,
        spec: spec.clone(),
        output,
        lifeline: held,
    })
}

/// The agent's exit code, or 128 + the signal that ended it, once the
/// sandbox's process (`spec`'s) exited with `status`; or, when the sandbox
/// was never set up and so no agent ran, why, from what its `output`'s
/// stderr said (only the launcher and bwrap wrote there).
pub(crate) async fn ended(
    spec: &SandboxSpec,
    output: &mut AgentOutput,
    status: ExitStatus,
) -> Result<i32, RunError> {
    match constle_sandbox::sandbox_end(spec, status) {
        SandboxEnd::Ran(code) => Ok(code),
        SandboxEnd::NotSetUp => {
            let said = output.stderr_head(OUTPUT_GRACE).await;
            Err(RunError::SandboxSetup(constle_sandbox::setup_failure(
                &said, status,
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn manifest(env: &str) -> Manifest {
        let src = format!("name: a\nsandbox:\n  command: [x]\n  env:\n{env}");
        constle_manifest::parse_str(&src, Path::new("/srv/a/agent.yaml"), &|_| None)
            .unwrap()
            .manifest
    }

    fn pairs(env: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn the_agents_environment() {
        let mcp = BTreeMap::from([(
            "CONSTLE_MCP_A_URL".to_string(),
            "http://127.0.0.1:4100/mcp".to_string(),
        )]);
        let declared = manifest("    FOO: bar\n");
        let proxy = "http://127.0.0.1:3128";
        let local = "127.0.0.1,localhost";
        assert_eq!(
            pairs(&agent_env(&declared, true, &mcp)),
            [
                ("CONSTLE_MCP_A_URL", "http://127.0.0.1:4100/mcp"),
                ("FOO", "bar"),
                ("HTTPS_PROXY", proxy),
                ("HTTP_PROXY", proxy),
                ("NODE_USE_ENV_PROXY", "1"),
                ("NO_PROXY", local),
                ("http_proxy", proxy),
                ("https_proxy", proxy),
                ("no_proxy", local),
            ]
        );
        // Without a proxy, nothing points at one.
        assert_eq!(
            pairs(&agent_env(&declared, false, &BTreeMap::new())),
            [("FOO", "bar")]
        );
        // The Agentfile may turn Node's use of the proxy off.
        let node_off = manifest("    NODE_USE_ENV_PROXY: \"0\"\n");
        let env = agent_env(&node_off, true, &BTreeMap::new());
        assert_eq!(env["NODE_USE_ENV_PROXY"], "0");
    }
}
