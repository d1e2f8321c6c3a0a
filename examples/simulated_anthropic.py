"""A tiny stand-in for the Anthropic Messages API, for the quickstart.

It serves `POST /v1/messages` on a loopback port, as JSON or, when the
request asks for `stream: true`, as Server-Sent Events (`message_start`,
one text block, `message_delta` with the usage, `message_stop`), and
reports usage in both, as the real API does. Every other path gets a 404
in Anthropic's error shape.

It prints its base URL (`http://127.0.0.1:PORT`) as its first line, then
serves until its standard input closes. For each request it appends one
line to the file named by its argument: the path, the model, and the key
it received in `x-api-key`, so the quickstart can show that the key the
provider saw is the real one, which only the Constle gate on the host
holds, and never the placeholder the agent has in the sandbox.

Only the Python standard library is used.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def usage(body: bytes, text: str) -> dict:
    """Token counts in the API's shape: about four bytes a token in, one
    token a word out."""
    return {
        "input_tokens": max(1, len(body) // 4),
        "output_tokens": len(text.split()),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message(model: str, text: str, counts: dict) -> dict:
    return {
        "id": "msg_quickstart_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": counts,
    }


def stream_events(answer: dict) -> list[tuple[str, dict]]:
    """The events of one streamed message: its start (no content yet), the
    text in one delta, then the output count in `message_delta`."""
    start = dict(answer, content=[], stop_reason=None, usage=dict(answer["usage"], output_tokens=1))
    text = answer["content"][0]["text"]
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": answer["usage"]["output_tokens"]}}),
        ("message_stop", {"type": "message_stop"}),
    ]


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    record_path = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = self.path.split("?", 1)[0]
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        model = str(request.get("model", ""))
        self.record(path, model)
        if path != "/v1/messages" or not model:
            self.reply_json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path} here"}})
            return
        text = f"Hello from the simulated provider: model {model} answered this."
        answer = message(model, text, usage(body, text))
        if request.get("stream") is True:
            self.reply_stream(stream_events(answer))
        else:
            self.reply_json(200, answer)

    def do_GET(self) -> None:
        self.record(self.path.split("?", 1)[0], "")
        self.reply_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not served here"}})

    def record(self, path: str, model: str) -> None:
        key = self.headers.get("x-api-key", "(none)")
        line = f"{self.command} {path} model={model or '(none)'} x-api-key={key}\n"
        with open(self.record_path, "a", encoding="utf-8") as record:
            record.write(line)

    def reply_json(self, status: int, answer: dict) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_quickstart_01")
        self.end_headers()
        self.wfile.write(data)

    def reply_stream(self, events: list[tuple[str, dict]]) -> None:
        data = "".join(f"event: {name}\ndata: {json.dumps(event)}\n\n" for name, event in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_quickstart_02")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the record file says what came in."""


def main() -> int:
    Provider.record_path = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
