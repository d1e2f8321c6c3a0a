//! What each sandbox must not see: what no sandbox may (the keys and logs,
//! the Agentfile, the names the proxy trusts), and the work directories
//! (and the agent's kept home) of the others. The agent's sandbox and each stdio server's get their lists
//! from here, so the two cannot drift apart.

use std::os::unix::fs::PermissionsExt as _;

use constle_manifest::Manifest;
use constle_sandbox::Private;

use crate::error::{RunError, io};
use crate::options::RunOptions;

/// What no sandbox may show: the keys and logs, the agent's own policy,
/// and the names the proxy trusts.
pub(crate) fn private_paths(options: &RunOptions) -> Vec<Private> {
    let private = |what: &str, path: &std::path::Path| Private {
        what: what.into(),
        path: path.to_path_buf(),
    };
    let mut paths = vec![
        private("CONSTLE_HOME (keys and logs)", &options.home),
        private("the Agentfile", &options.agentfile),
    ];
    paths.extend(
        options
            .hosts_file
            .iter()
            .map(|f| private("the hosts file", f)),
    );
    paths
}

/// What the agent's sandbox may not show: what no sandbox may, and the
/// stdio servers' declared work directories.
pub(crate) fn agent_private(private: &[Private], manifest: &Manifest) -> Vec<Private> {
    private
        .iter()
        .cloned()
        .chain(declared_workdirs(manifest))
        .collect()
}

/// What a server's sandbox may not show: what no sandbox may, the agent's
/// work directory and kept home, and the other servers' declared ones.
pub(crate) fn server_private(private: &[Private], manifest: &Manifest, id: &str) -> Vec<Private> {
    let agent = Private {
        what: "the agent's work directory".into(),
        path: manifest.sandbox.workdir.clone(),
    };
    let home = manifest.sandbox.home.iter().map(|path| Private {
        what: "the agent's home".into(),
        path: path.clone(),
    });
    let mine = workdir_of(id);
    private
        .iter()
        .cloned()
        .chain([agent])
        .chain(home)
        .chain(
            declared_workdirs(manifest)
                .into_iter()
                .filter(|p| p.what != mine),
        )
        .collect()
}

/// The work directories of the stdio servers, which the agent's sandbox
/// must not show (and which must not show the agent's).
fn declared_workdirs(manifest: &Manifest) -> Vec<Private> {
    manifest
        .mcp
        .stdio_servers()
        .filter_map(|(server, stdio)| {
            Some(Private {
                what: workdir_of(server.id.as_str()),
                path: stdio.workdir.clone()?,
            })
        })
        .collect()
}

fn workdir_of(id: &str) -> String {
    format!("the work directory of MCP server {id}")
}

/// A fresh directory only the current user can enter.
pub(crate) fn private_dir(prefix: &str) -> Result<tempfile::TempDir, RunError> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(io("cannot create a private run directory"))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("cannot restrict {}", dir.path().display())))?;
    Ok(dir)
}
