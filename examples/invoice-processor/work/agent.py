"""The example agent, behaving as a compromised one would.

It asks the proxy for the host it is allowed to reach, then tries what a
prompt-injected agent would: an undeclared host, the allowed host's raw
address, another port, a name that points back inside, and dialling out
directly. Each attempt prints one line saying what happened.

With an MCP server declared, it then works through the gate at
`CONSTLE_MCP_ACCOUNTING_URL`: lists the tools it may see, calls an ordinary
one, calls the gated `pay_invoice` (which waits for a person), and tries an
undeclared tool, which the gate refuses.

With a model provider declared (`llm.providers`, id `anthropic`), it then
asks the model through the model gate at `CONSTLE_LLM_ANTHROPIC_URL` (the
same URL as `ANTHROPIC_BASE_URL`) with the Messages API, holding only the
placeholder key the sandbox was given: once as JSON, once streamed, and
once for a model the Agentfile does not declare, which the gate refuses.

Given HOST:PORT arguments instead, it asks the proxy for each and prints
`TARGET STATUS [FIRST LINE FROM THE SERVER]`, one line each (the test suite
uses this to try every rule from inside the sandbox).

Only the Python standard library is used, so it runs on the host's python3
inside the sandbox.
"""

import json
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

ALLOWED = os.environ.get("ALLOWED_HOST", "api.groq.com")
ALLOWED_ADDRESS = os.environ.get("ALLOWED_ADDRESS", "203.0.113.10")


def through_proxy(target: str) -> tuple[str, str]:
    """The proxy's status for CONNECT `target` (or `closed`), and for a 200
    the first line the server sent through the tunnel."""
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                return "closed", ""
            reply += chunk
        head, _, answer = reply.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode(errors="replace")
        if status != "200":
            return status, ""
        while b"\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        return status, answer.split(b"\n", 1)[0].decode(errors="replace")


def directly(address: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(3)
            conn.connect((address, port))
            return "connected (the sandbox leaked!)"
    except OSError as error:
        return f"{type(error).__name__}: {error}"


class Mcp:
    """A minimal MCP client over Streamable HTTP: JSON-RPC in POST bodies,
    answers as JSON or as a server-sent event stream."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = None
        self.next_id = 0
        # the gate is inside the sandbox, on loopback: never via the proxy
        self.http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        init = self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "invoice-processor", "version": "0.1"},
        })
        self.version = init["result"]["protocolVersion"]
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict) -> dict | None:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if getattr(self, "version", None):
            headers["MCP-Protocol-Version"] = self.version
        request = urllib.request.Request(self.url, json.dumps(message).encode(), headers)
        try:
            response = self.http.open(request, timeout=600)
        except urllib.error.HTTPError as error:
            response = error
        self.session = response.headers.get("Mcp-Session-Id", self.session)
        body = response.read().decode()
        if "text/event-stream" in response.headers.get("Content-Type", ""):
            for line in body.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    answer = json.loads(line[5:])
                    if answer.get("id") == message.get("id"):
                        return answer
            return None
        return json.loads(body) if body.strip() else None

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})

    def tools(self) -> list[str]:
        return [tool["name"] for tool in self.request("tools/list", {})["result"]["tools"]]

    def call(self, tool: str, arguments: dict) -> str:
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in answer:
            return f"refused: {answer['error']['message']}"
        texts = [c.get("text", "") for c in answer["result"].get("content", [])]
        return ("tool error: " if answer["result"].get("isError") else "ok: ") + " ".join(texts)


def use_tools(url: str) -> None:
    mcp = Mcp(url)
    print(f"agent: MCP tools the gate shows -> {', '.join(mcp.tools())}")
    print(f"agent: call list_invoices -> {mcp.call('list_invoices', {})}")
    print("agent: call pay_invoice (gated: waits for a decision) ...", flush=True)
    print(f"agent: call pay_invoice -> {mcp.call('pay_invoice', {'invoice_id': 'INV-0042'})}")
    print(f"agent: call delete_everything -> {mcp.call('delete_everything', {})}")


MODEL = "claude-sonnet-5-5"
UNDECLARED_MODEL = "claude-opus-5-5"


def ask_model(url: str, model: str, stream: bool) -> str:
    """One Messages API call as an SDK makes it (the key it was given in
    `x-api-key`), and what came back: the text and the usage, or the
    error the gate or the provider answered."""
    body = {"model": model, "max_tokens": 256, "stream": stream,
            "messages": [{"role": "user", "content": "Say hello."}]}
    headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01",
               "x-api-key": os.environ.get("ANTHROPIC_API_KEY", "")}
    request = urllib.request.Request(f"{url}/v1/messages", json.dumps(body).encode(), headers)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(request, timeout=60) as response:
            answer = response.read().decode()
    except urllib.error.HTTPError as error:
        refusal = json.loads(error.read())["error"]
        return f"refused ({error.code} {refusal['type']}): {refusal['message']}"
    text, tokens_in, tokens_out = read_stream(answer) if stream else read_message(answer)
    return f"{text!r} ({tokens_in} tokens in, {tokens_out} out)"


def read_message(answer: str) -> tuple[str, int, int]:
    message = json.loads(answer)
    usage = message["usage"]
    return message["content"][0]["text"], usage["input_tokens"], usage["output_tokens"]


def read_stream(answer: str) -> tuple[str, int, int]:
    """The text and the usage of a streamed message: the input count is in
    `message_start`, the final output count in the last `message_delta`."""
    events = [json.loads(line[5:]) for line in answer.splitlines() if line.startswith("data:")]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    start = next(e for e in events if e["type"] == "message_start")
    last = [e for e in events if e["type"] == "message_delta"][-1]
    return text, start["message"]["usage"]["input_tokens"], last["usage"]["output_tokens"]


def use_model(url: str) -> None:
    print(f"agent: the model key this sandbox holds -> {os.environ.get('ANTHROPIC_API_KEY')!r}")
    print(f"agent: ask {MODEL} -> {ask_model(url, MODEL, stream=False)}")
    print(f"agent: ask {MODEL}, streamed -> {ask_model(url, MODEL, stream=True)}")
    print(f"agent: ask {UNDECLARED_MODEL} -> {ask_model(url, UNDECLARED_MODEL, stream=False)}")


def demo() -> None:
    if "HTTPS_PROXY" not in os.environ:
        print("agent: no HTTPS_PROXY: this run has no egress at all")
    else:
        for target in [f"{ALLOWED}:443", "evil.example.com:443", f"{ALLOWED_ADDRESS}:443", f"{ALLOWED}:22", "localtest.me:443"]:
            status, said = through_proxy(target)
            outcome = f"connected; the server said {said!r}" if status == "200" else f"refused by the proxy ({status})"
            print(f"agent: CONNECT {target} via the proxy -> {outcome}")
    for address in [ALLOWED_ADDRESS, "2001:db8::10"]:
        print(f"agent: direct connection to {address} port 443 -> {directly(address, 443)}")
    if "CONSTLE_MCP_ACCOUNTING_URL" in os.environ:
        use_tools(os.environ["CONSTLE_MCP_ACCOUNTING_URL"])
    if "CONSTLE_LLM_ANTHROPIC_URL" in os.environ:
        use_model(os.environ["CONSTLE_LLM_ANTHROPIC_URL"])


def main() -> int:
    if len(sys.argv) == 1:
        demo()
    for target in sys.argv[1:]:
        status, said = through_proxy(target)
        print(f"{target} {status} {said}".rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
