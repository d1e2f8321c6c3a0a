//! What the simulated provider answers: the scripted turn (a tool call that
//! runs a shell command, then a final message quoting what the command
//! printed) and the usage it reports.

use serde_json::{Value, json};

/// The script every conversation follows.
#[derive(Clone, Debug)]
pub struct Script {
    /// The shell command the first answer asks the client to run.
    pub command: String,
    /// The final message is this followed by the tool output it received.
    pub final_prefix: String,
    /// The usage every answer reports.
    pub usage: Usage,
    /// The models `GET /v1/models` lists.
    pub models: Vec<String>,
}

impl Script {
    /// A script asking the client to run `command`, with the default final
    /// prefix (`the command printed: `), usage (1000 in, 50 out) and
    /// model list (`sim-model`).
    pub fn run(command: impl Into<String>) -> Script {
        Script {
            command: command.into(),
            final_prefix: "the command printed: ".to_owned(),
            usage: Usage {
                input_tokens: 1000,
                output_tokens: 50,
                cached_input_tokens: 0,
            },
            models: vec!["sim-model".to_owned()],
        }
    }
}

/// Token counts reported for each answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens not read from the cache.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the cache.
    pub cached_input_tokens: u64,
}

/// What one answer is.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Call the tool `name` with these arguments.
    ToolCall {
        /// The tool's name, as the request declared it.
        name: String,
        /// Its arguments, in that tool's own shape.
        arguments: Value,
    },
    /// A final text message.
    Text(String),
}

/// The next answer: the final text once the conversation holds a tool
/// result (`tool_output`), else a call to the first tool in `tool_names`
/// that can run a shell command, else the final text at once.
pub fn next_reply<'a>(
    script: &Script,
    tool_output: Option<String>,
    tool_names: impl IntoIterator<Item = (&'a str, Option<&'a Value>)>,
) -> Reply {
    if let Some(output) = tool_output {
        return Reply::Text(format!("{}{output}", script.final_prefix));
    }
    tool_names
        .into_iter()
        .find_map(|(name, schema)| shell_arguments(name, schema, &script.command))
        .unwrap_or_else(|| Reply::Text(format!("{}(no tool to run)", script.final_prefix)))
}

/// The arguments that make tool `name` run `command`, in each client's own
/// shape: Claude Code's `Bash {command}`, Codex's `exec_command {cmd}` (and
/// the older `shell {command: [argv]}`), or any function whose parameters
/// take a `command` string (an SDK script's tool).
fn shell_arguments(name: &str, schema: Option<&Value>, command: &str) -> Option<Reply> {
    let arguments = match name {
        "Bash" => json!({ "command": command }),
        "exec_command" => json!({ "cmd": command }),
        "shell" => json!({ "command": ["bash", "-lc", command] }),
        _ if takes_command_string(schema) => json!({ "command": command }),
        _ => return None,
    };
    Some(Reply::ToolCall {
        name: name.to_owned(),
        arguments,
    })
}

fn takes_command_string(schema: Option<&Value>) -> bool {
    schema
        .and_then(|s| s.pointer("/properties/command/type"))
        .is_some_and(|t| t == "string")
}

/// A tool result's content as text: a string as it is, an array of content
/// blocks as their `text` fields joined, anything else as JSON.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| b.get("text").map_or_else(|| b.to_string(), content_text))
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_each_clients_shell_tool_in_its_own_shape() {
        let script = Script::run("echo hi");
        let call = |name: &str| next_reply(&script, None, [(name, None)]);
        assert_eq!(
            call("Bash"),
            Reply::ToolCall {
                name: "Bash".into(),
                arguments: json!({"command": "echo hi"})
            }
        );
        assert_eq!(
            call("exec_command"),
            Reply::ToolCall {
                name: "exec_command".into(),
                arguments: json!({"cmd": "echo hi"})
            }
        );
        assert_eq!(
            call("shell"),
            Reply::ToolCall {
                name: "shell".into(),
                arguments: json!({"command": ["bash", "-lc", "echo hi"]})
            }
        );
    }

    #[test]
    fn a_generic_tool_needs_a_command_string() {
        let script = Script::run("ls");
        let good = json!({"properties": {"command": {"type": "string"}}});
        let bad = json!({"properties": {"command": {"type": "array"}}});
        assert!(matches!(
            next_reply(&script, None, [("other", Some(&bad)), ("run", Some(&good))]),
            Reply::ToolCall { name, .. } if name == "run"
        ));
        assert!(matches!(
            next_reply(&script, None, [("other", Some(&bad))]),
            Reply::Text(_)
        ));
    }

    #[test]
    fn a_tool_result_ends_the_conversation_quoting_it() {
        let script = Script::run("ls");
        assert_eq!(
            next_reply(&script, Some("out".into()), [("Bash", None)]),
            Reply::Text("the command printed: out".into())
        );
        assert_eq!(
            content_text(&json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])),
            "ab"
        );
    }
}
