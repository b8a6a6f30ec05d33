"""A local OpenAI-compatible chat-completions server for the LLM triage tests.

A real HTTP server on a thread (``http.server``), speaking the wire format LiteLLM, vLLM
and Ollama serve: ``POST /v1/chat/completions``. What it answers is set per model name
(``fake.on("m", answer={...})``), so tests sharing one server each use their own model,
and every request is recorded (``fake.requests("m")``) with its headers and JSON body.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Behaviour:
    #: The message content: a JSON answer (serialized) or raw text.
    content: Any = None
    status: int = 200
    delay: float = 0.0
    #: A whole response body instead of a chat completion (to send something broken).
    raw_body: bytes | None = None
    #: The ``usage`` the completion reports (None: no usage at all).
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def system(self) -> str:
        return str(self.body["messages"][0]["content"])

    @property
    def prompt(self) -> str:
        return str(self.body["messages"][1]["content"])

    @property
    def prompt_doc(self) -> dict[str, Any]:
        """The prompt's JSON document (after its one-line preamble)."""
        doc: dict[str, Any] = json.loads(self.prompt.split("\n", 1)[1])
        return doc


class FakeAI:
    def __init__(self, port: int = 0) -> None:
        self._behaviours: dict[str, Behaviour] = {}
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        #: Requests being answered now, and the most ever at once, per model.
        self._open: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with fake._lock:
                    fake._requests.append(request)
                    behaviour = fake._behaviours.get(str(body.get("model")))
                if self.path != "/v1/chat/completions" or behaviour is None:
                    self._send(404, b'{"error": {"message": "model not found"}}')
                    return
                model = str(body.get("model"))
                with fake._lock:
                    fake._open[model] = fake._open.get(model, 0) + 1
                    fake._peak[model] = max(fake._peak.get(model, 0), fake._open[model])
                try:
                    self._answer(behaviour, body)
                finally:
                    with fake._lock:
                        fake._open[model] -= 1

            def _answer(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
                if behaviour.delay:
                    time.sleep(behaviour.delay)
                if behaviour.raw_body is not None:
                    self._send(behaviour.status, behaviour.raw_body)
                    return
                if behaviour.status != 200:
                    self._send(behaviour.status, b'{"error": {"message": "upstream failed"}}')
                    return
                content = behaviour.content
                text = content if isinstance(content, str) else json.dumps(content)
                self._send(
                    200,
                    json.dumps(
                        {
                            "id": "chatcmpl-fake",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text},
                                }
                            ],
                            **({} if behaviour.usage is None else {"usage": dict(behaviour.usage)}),
                        }
                    ).encode(),
                )

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (a timeout test): nothing to answer

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def on(
        self,
        model: str,
        content: Any = None,
        *,
        status: int = 200,
        delay: float = 0.0,
        raw_body: bytes | None = None,
        usage: dict[str, int] | None = None,
    ) -> str:
        """Answer requests for ``model`` so; returns ``model``. ``usage`` defaults to one
        prompt and one completion token."""
        if usage is None:
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        with self._lock:
            self._behaviours[model] = Behaviour(content, status, delay, raw_body, usage)
        return model

    def peak(self, model: str) -> int:
        """The most requests for ``model`` that were ever being answered at once."""
        with self._lock:
            return self._peak.get(model, 0)

    def requests(self, model: str) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if r.body.get("model") == model]
