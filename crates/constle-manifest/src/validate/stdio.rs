//! `mcp.servers[]`'s transport: `url`, or `command` with what only a server
//! Constle runs has (`workdir`, `env_secret_refs`, `network`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::context::{Apart, V, is_reserved};
use crate::de::{Field, Located, Pairs};
use crate::diagnostic::Pos;
use crate::model::{McpTransport, StdioServer};
use crate::raw::{RawServer, RawServerNetwork, Strings};
use crate::values::{EnvVarName, Hostname};

impl V<'_, '_> {
    /// `url` or `command`, exactly one, and the fields that go with it.
    pub(super) fn transport(&mut self, s: &RawServer, at: Pos) -> Option<McpTransport> {
        match (&s.url.0, &s.command.0) {
            (Some(url), None) => {
                self.refuse_stdio_fields(s);
                let url = self.url(url, "mcp.servers[].url");
                let headers = match &s.headers.0 {
                    None => Some(Vec::new()),
                    Some(list) => self.headers(list),
                };
                Some(McpTransport::Url {
                    url: url?,
                    headers: headers?,
                })
            }
            (None, Some(command)) => {
                self.refuse_headers(s);
                self.stdio(s, command).map(McpTransport::Stdio)
            }
            (Some(_), Some(command)) => {
                self.sink.error(
                    "url_and_command",
                    command.key_pos(),
                    "an MCP server has either a url (the gate reaches it) or a command (Constle runs it), not both",
                    Some("remove url to run the server over stdio, or command to reach it over the network".to_string()),
                );
                None
            }
            (None, None) => {
                self.sink.error(
                    "missing_field",
                    at,
                    "missing required field `mcp.servers[].url` or `mcp.servers[].command`",
                    Some(
                        "write where the gate reaches the server, e.g. url: https://mcp.example.com/mcp, \
                         or the program Constle runs, e.g. command: [\"mcp-server-git\"]"
                            .to_string(),
                    ),
                );
                None
            }
        }
    }

    /// What only a server run with `command` may have, on a `url` server.
    fn refuse_stdio_fields(&mut self, s: &RawServer) {
        let positions = [
            ("workdir", s.workdir.0.as_ref().map(Located::key_pos)),
            (
                "env_secret_refs",
                s.env_secret_refs.0.as_ref().map(Located::key_pos),
            ),
            ("network", s.network.0.as_ref().map(Located::key_pos)),
        ];
        for (field, pos) in positions {
            if let Some(pos) = pos {
                self.sink.error(
                    "stdio_field_on_url_server",
                    pos,
                    format!("{field} applies only to a server Constle runs (command), not to a url server"),
                    Some(format!("remove {field}, or replace url with command")),
                );
            }
        }
    }

    /// `headers` on a server run with `command`: they go with HTTP requests.
    fn refuse_headers(&mut self, s: &RawServer) {
        if let Some(headers) = &s.headers.0 {
            self.sink.error(
                "headers_on_stdio_server",
                headers.key_pos(),
                "headers are sent with the gate's HTTP requests to a url server; a server Constle runs gets none",
                Some("pass its secrets as environment variables instead: env_secret_refs: {NAME: HOST_VARIABLE}".to_string()),
            );
        }
    }

    fn stdio(&mut self, s: &RawServer, command: &Located<Strings>) -> Option<StdioServer> {
        let command = self.command(command, "mcp.servers[].command");
        let workdir = match &s.workdir.0 {
            None => Some(None),
            Some(w) => self.server_workdir(w).map(Some),
        };
        let env_secret_refs = self.env_secret_refs(&s.env_secret_refs);
        let allowed_hosts = match &s.network.0 {
            None => Some(Vec::new()),
            Some(n) => self.server_network(n),
        };
        Some(StdioServer {
            command: command?,
            workdir: workdir?,
            env_secret_refs: env_secret_refs?,
            allowed_hosts: allowed_hosts?,
        })
    }

    /// A server's work directory: the rules of `sandbox.workdir`, and apart
    /// from the agent's work directory and home, through which the agent
    /// could otherwise plant what the server runs or read what it keeps.
    fn server_workdir(&mut self, value: &Located<String>) -> Option<PathBuf> {
        let field = "mcp.servers[].workdir";
        let dir = self.sandbox_dir(value, field)?;
        let workdir = self.agent_workdir.clone()?;
        let home = self.agent_home.clone();
        let mut others = vec![Apart {
            what: "the agent's work directory",
            dir: &workdir,
            help: "give the server a directory of its own, outside sandbox.workdir, or leave workdir out for an empty one",
        }];
        others.extend(home.as_deref().map(|dir| Apart {
            what: "the agent's home",
            dir,
            help: "give the server a directory of its own, outside sandbox.home, or leave workdir out for an empty one",
        }));
        let apart = self.apart(
            value,
            (field, &dir),
            &others,
            "workdir_shared",
            "the agent could change what the server runs and reads",
        );
        apart.then_some(dir)
    }

    /// `NAME: HOST_VARIABLE` pairs; a host variable unset here is warned
    /// about (the run refuses to start without it).
    fn env_secret_refs(
        &mut self,
        field: &Field<Pairs<Located<String>>>,
    ) -> Option<BTreeMap<EnvVarName, EnvVarName>> {
        let mut out = BTreeMap::new();
        let Some(pairs) = &field.0 else {
            return Some(out);
        };
        let mut ok = true;
        for (key, host) in &pairs.value.0 {
            let name = self.check(key, "invalid_env_name", EnvVarName::new);
            let var = self.check(host, "invalid_env_name", EnvVarName::new);
            let (Some(name), Some(var)) = (name, var) else {
                ok = false;
                continue;
            };
            if is_reserved(name.as_str()) {
                self.sink.error(
                    "reserved_env_name",
                    key.pos,
                    format!("{name} is set by constle and cannot be set in env_secret_refs"),
                    Some("remove it: constle points the proxy variables at the server's proxy and sets CONSTLE_* itself".to_string()),
                );
                ok = false;
                continue;
            }
            if (self.env)(var.as_str()).is_none() {
                self.sink.warning(
                    "env_secret_ref_unset",
                    host.pos,
                    format!("{var} is not set here, so `constle run` would refuse to start"),
                    Some(format!(
                        "export {var} before `constle run`; its value is never shown"
                    )),
                );
            }
            out.insert(name, var);
        }
        ok.then_some(out)
    }

    /// A server's `network.allowed_hosts`, checked like the agent's.
    fn server_network(&mut self, raw: &Located<RawServerNetwork>) -> Option<Vec<Hostname>> {
        match &raw.value.allowed_hosts.0 {
            None => Some(Vec::new()),
            Some(list) => self.unique_list(
                list,
                "invalid_hostname",
                Hostname::new,
                "duplicate_host",
                "allowed_hosts",
            ),
        }
    }
}
