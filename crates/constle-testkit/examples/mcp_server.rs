//! A real MCP server for demonstrations and shell tests: the invoice server
//! of [`constle_testkit::mcp`] (rmcp, Streamable HTTP) on `127.0.0.1`.
//!
//! Prints the server's URL (`http://127.0.0.1:PORT/mcp`) on a line of its
//! own, then serves until its standard input closes, so a script can run it
//! as a coprocess. Needs no privileges.
//!
//! ```text
//! mcp_server [--json] [--stateless] [--page-size N]
//! ```
//!
//! - `--json`: answer POSTs with `application/json` instead of SSE. rmcp
//!   does this only without sessions, so it implies `--stateless`.
//! - `--stateless`: no sessions (no `Mcp-Session-Id`).
//! - `--page-size N`: `tools/list` gives N tools a page, with `nextCursor`.

use std::io::{Read as _, Write as _};
use std::process::ExitCode;

use constle_testkit::mcp::{McpServerOptions, TestMcpServer};

fn options(args: &[String]) -> Result<McpServerOptions, String> {
    let mut options = McpServerOptions::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => {
                options.json_response = true;
                options.stateful = false;
            }
            "--stateless" => options.stateful = false,
            "--page-size" => {
                let size = args.next().ok_or("--page-size needs a number")?;
                let size = size
                    .parse()
                    .map_err(|_| format!("--page-size: not a number: {size}"))?;
                options.page_size = Some(size);
            }
            other => {
                return Err(format!(
                    "unknown argument {other}\n\
                     usage: mcp_server [--json] [--stateless] [--page-size N]"
                ));
            }
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match options(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let server = match TestMcpServer::start(options) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("mcp_server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{}", server.url())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    // Held until the caller closes our stdin (or exits).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(server);
    ExitCode::SUCCESS
}
