"""A tiny agent on the official OpenAI Python SDK: the Responses API tool
loop (streamed), then the same through Chat Completions (streamed, usage
asked for). It reads OPENAI_BASE_URL and OPENAI_API_KEY like any SDK user,
runs each `run_shell` call with bash, and prints each final message."""

import json
import subprocess
import sys

import openai

MODEL = sys.argv[1]
TOOL = {
    "type": "function",
    "name": "run_shell",
    "description": "Runs a shell command and returns what it printed.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def run(arguments):
    command = json.loads(arguments)["command"]
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    return done.stdout + done.stderr


def responses_loop(client):
    items = [{"role": "user", "content": "Run the command you are told to."}]
    while True:
        with client.responses.stream(model=MODEL, input=items, tools=[TOOL]) as stream:
            response = stream.get_final_response()
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            print("responses:", response.output_text, "usage:", response.usage.output_tokens)
            return
        for call in calls:
            items.append(call.model_dump(exclude_none=True))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": run(call.arguments)})


def chat_loop(client):
    tool = {"type": "function", "function": {k: TOOL[k] for k in ("name", "description", "parameters")}}
    messages = [{"role": "user", "content": "Run the command you are told to."}]
    while True:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, tools=[tool], stream=True,
            stream_options={"include_usage": True})
        text, calls, usage = "", {}, None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += call.id or ""
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
        if not calls:
            print("chat:", text, "usage:", usage.completion_tokens)
            return
        messages.append({"role": "assistant", "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        for c in calls.values():
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": run(c["arguments"])})


client = openai.OpenAI(max_retries=0)
responses_loop(client)
chat_loop(client)
