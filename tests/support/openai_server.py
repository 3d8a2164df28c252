"""A small OpenAI-compatible chat-completions server on loopback, for tests that drive
the real ``openai`` client through Pydantic AI (the model provider is the outside world
here: everything else is real).

``handler(body) -> dict`` decides each answer from the request body:
``{"content": str}``, ``{"tool_calls": [{"id", "name", "arguments"}]}`` (arguments a
dict, or a string sent as is, e.g. malformed JSON), or ``{"status": int, "headers":
{...}, "error": str}`` for an error response. Usage is ``{"prompt_tokens": 11,
"completion_tokens": 7}`` per answer. A request with ``"stream": true`` gets the answer
as server-sent chunks (text word by word, then each tool call in one chunk, usage
last). ``{"hold": threading.Event,
"hold_after": N}`` stalls the answer until the event is set (at most two minutes): a
stream after its first N words (default 1), any other answer before it is sent.
``requests`` keeps every request body with its arrival time (``time.monotonic()``).
With ``keep_alive=True`` the server speaks HTTP/1.1 and keeps each connection open for
the client's next request (a stream still closes its own), and ``connections`` counts
the connections clients opened.
"""

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from lab.drills.loopback import LoopbackHTTPServer

PROMPT_TOKENS = 11
#: Longest stall of a held answer, in seconds (a bound against a test that forgets to
#: release it).
HOLD_LIMIT = 120
COMPLETION_TOKENS = 7


class ModelServer:
    """``with ModelServer(handler) as server:`` serves on ``server.base_url`` (``/v1``)."""

    def __init__(self, handler: Callable[[dict], dict], *, keep_alive: bool = False):
        self.handler = handler
        self.keep_alive = keep_alive
        self._connections = 0
        self.requests: list[dict[str, Any]] = []
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._httpd = LoopbackHTTPServer(("127.0.0.1", 0), self._make_handler())
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def connections(self) -> int:
        """How many connections clients have opened so far."""
        with self._lock:
            return self._connections

    def _make_handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                # One handler per connection, whatever number of requests it carries.
                super().setup()
                with server._lock:
                    server._connections += 1

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                    server.times.append(time.monotonic())
                answer = server.handler(body)
                if "status" in answer:
                    self._send_json(
                        answer["status"],
                        {"error": {"message": answer.get("error", "error"), "type": "error"}},
                        answer.get("headers", {}),
                    )
                    return
                message = _message(answer, index)
                if body.get("stream"):
                    self._stream(body, message, answer)
                    return
                if answer.get("hold") is not None:
                    answer["hold"].wait(HOLD_LIMIT)
                self._send_json(
                    200,
                    {
                        "id": f"chatcmpl-{index}",
                        "object": "chat.completion",
                        "created": 1,
                        "model": body.get("model", "test-model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls"
                                if message.get("tool_calls")
                                else "stop",
                            }
                        ],
                        "usage": _usage(),
                    },
                )

            def _send_json(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict, message: dict, answer: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                # No length is known ahead: the end of the connection ends the stream.
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                base = {
                    "id": "chatcmpl-stream",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": body.get("model", "test-model"),
                }
                content = message.get("content") or ""
                words = content.split(" ") if content else []
                for i, word in enumerate(words):
                    piece = word if i == len(words) - 1 else word + " "
                    chunk = {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": piece},
                                "finish_reason": None,
                            }
                        ],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    if answer.get("hold") is not None and i + 1 == answer.get("hold_after", 1):
                        self.wfile.flush()
                        answer["hold"].wait(HOLD_LIMIT)
                for i, call in enumerate(message.get("tool_calls") or []):
                    # Each call in one chunk (id, name, arguments), as providers may.
                    delta = {"tool_calls": [{"index": i, **call}]}
                    if not words and i == 0:
                        delta["role"] = "assistant"
                    chunk = {
                        **base,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                end = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
                self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())
                usage = {**base, "choices": [], "usage": _usage()}
                self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler


def _usage() -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


def _message(answer: dict, index: int) -> dict:
    calls = [
        {
            "id": call.get("id") or f"call_{index}_{i}",
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": call["arguments"]
                if isinstance(call["arguments"], str)
                else json.dumps(call["arguments"]),
            },
        }
        for i, call in enumerate(answer.get("tool_calls") or [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
    if calls:
        message["tool_calls"] = calls
    return message


def conversation(body: dict) -> tuple[str, list[tuple[str, Any]]]:
    """``(last user prompt, [(tool name, result)])`` of an OpenAI request body, with the
    tool results after that prompt (results parsed as JSON when they are)."""
    prompt, results, names = "", [], {}
    for m in body.get("messages", []):
        if m["role"] == "user":
            content = m["content"]
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content)
            prompt, results = content, []
        elif m["role"] == "assistant":
            for call in m.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
        elif m["role"] == "tool":
            try:
                value = json.loads(m["content"])
            except ValueError:
                value = m["content"]
            results.append((names.get(m["tool_call_id"], "?"), value))
    return prompt, results
