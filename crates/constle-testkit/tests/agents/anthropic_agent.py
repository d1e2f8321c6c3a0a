"""A tiny agent on the official Anthropic Python SDK: the Messages API tool
loop, streamed. It reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY like any
SDK user, runs each `run_shell` call with bash, and prints the final
message."""

import subprocess
import sys

import anthropic

MODEL = sys.argv[1]
TOOL = {
    "name": "run_shell",
    "description": "Runs a shell command and returns what it printed.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}

client = anthropic.Anthropic(max_retries=0)
messages = [{"role": "user", "content": "Run the command you are told to."}]
while True:
    with client.messages.stream(model=MODEL, max_tokens=1024, messages=messages, tools=[TOOL]) as stream:
        message = stream.get_final_message()
    calls = [b for b in message.content if b.type == "tool_use"]
    if not calls:
        print("messages:", "".join(b.text for b in message.content if b.type == "text"),
              "usage:", message.usage.output_tokens)
        break
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
    results = []
    for call in calls:
        done = subprocess.run(["bash", "-c", call.input["command"]], capture_output=True, text=True)
        results.append({"type": "tool_result", "tool_use_id": call.id, "content": done.stdout + done.stderr})
    messages.append({"role": "user", "content": results})
