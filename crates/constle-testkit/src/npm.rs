//! The real MCP servers and tools from the npm registry that
//! `scripts/setup.sh` installs (`scripts/mcp-tools/`, pinned by its
//! lockfile): where they are, whether they are there, and a Streamable
//! HTTP server started from one on loopback.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::child::dying_with_test;
use crate::{find_tool, require_nothing_missing};

/// Where `setup.sh` installs them: `node_modules/` under it.
pub const MCP_TOOLS_DIR: &str = "/usr/local/lib/constle-tools/mcp";

/// How long a server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The installed package `@modelcontextprotocol/<name>`.
pub fn mcp_package(name: &str) -> PathBuf {
    Path::new(MCP_TOOLS_DIR)
        .join("node_modules/@modelcontextprotocol")
        .join(name)
}

/// Whether `node` and the MCP tools are installed; otherwise the same as
/// [`crate::require_tools`]: a printed skip, or a panic under
/// `CONSTLE_E2E=require`.
pub fn require_mcp_tools(test: &str) -> bool {
    let mut missing = Vec::new();
    if find_tool("node").is_none() {
        missing.push("`node`".to_owned());
    }
    if !Path::new(MCP_TOOLS_DIR).join("node_modules").is_dir() {
        missing.push(format!(
            "the MCP servers scripts/setup.sh installs in {MCP_TOOLS_DIR}"
        ));
    }
    require_nothing_missing(test, &missing)
}

/// A Node MCP server serving Streamable HTTP on a loopback port, killed
/// on drop (and with the test, under `setpriv`).
pub struct NodeHttpServer {
    child: Child,
    port: u16,
}

impl NodeHttpServer {
    /// Runs `node <args…>` with `PORT` set to a free port (add `port_arg`
    /// to also pass it as the last argument) and waits until that port
    /// takes connections on 127.0.0.1.
    pub fn start(args: &[&str], port_arg: bool) -> io::Result<NodeHttpServer> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let node = find_tool("node").ok_or_else(|| io::Error::other("no `node` found"))?;
        let mut command = dying_with_test(node);
        command
            .args(args)
            .args(port_arg.then(|| port.to_string()))
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut server = NodeHttpServer {
            child: command.spawn()?,
            port,
        };
        server.wait_listening()?;
        Ok(server)
    }

    fn wait_listening(&mut self) -> io::Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!("the server exited: {status}")));
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "the server did not listen on port {} within {START_TIMEOUT:?}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Its endpoint: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for NodeHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
