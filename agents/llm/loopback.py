"""A real HTTP server on 127.0.0.1 that speaks OpenAI's ``/v1/chat/completions``, scripted.

For tests and the scale benchmark: the openai client talks to it exactly as to a model server.
What it answers is scripted: replies queued with ``push`` come first, in order; after them, the
``responder`` function (given each request) decides. A reply may be an answer with usage
figures, an HTTP error (429, 500, ...), an answer after a delay (slower than a client's time
limit), or a body that is not JSON at all. Misbehaving servers too: ``hang`` never answers
(until the server closes), ``beyond_max_tokens`` answers with more completion tokens than the
request's ``max_tokens`` (and the text to match), ``always`` fails every request alike.

With ``api_key`` set, a request must carry it as its bearer token, else 401; the server keeps only
whether each request was authorised, never the token itself.

``GET /v1/models`` lists ``models`` (none by default: a server that names none, so any model is
taken), or is not there (404) with ``lists_models=False``; it is answered by the server itself,
not scripted, and not kept in ``requests``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .client import CHARS_PER_TOKEN, REQUEST_HEADER


@dataclass(frozen=True)
class Reply:
    """One scripted answer (``status`` 200) or failure (any other status)."""

    content: str = ""
    status: int = 200
    delay_s: float = 0.0  # wait before answering
    prompt_tokens: int | None = None  # None: estimated from the request's text
    completion_tokens: int | None = None  # None: estimated from ``content``
    usage: bool = True  # send the usage fields
    raw: bytes | None = None  # sent as the body instead of JSON
    headers: Mapping[str, str] = field(default_factory=dict)
    hang: bool = False  # never answer: hold the connection until the server closes
    beyond_max_tokens: float = 0.0  # > 1: answer this many times the request's max_tokens


@dataclass(frozen=True)
class Received:
    """A request as the server saw it."""

    request: str  # the X-Kernelswarm-Request header: planner, coder, repair, tester, analyst
    model: str
    messages: tuple[Mapping[str, str], ...]
    authorised: bool
    body: Mapping[str, Any]

    @property
    def prompt(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages)


Responder = Callable[[Received], Reply]


def _no_script(received: Received) -> Reply:
    return Reply(status=500, content=f"no reply scripted for a {received.request} request")


def always(reply: Reply) -> Responder:
    """A responder giving ``reply`` to every request (a hanging server, one that refuses
    everything with HTTP 400, one that answers garbage, ...)."""
    return lambda received: reply


class LoopbackServer:
    """``with LoopbackServer(responder) as server:`` ... ``base_url=server.url``."""

    def __init__(self, responder: Responder = _no_script, *, api_key: str | None = None,
                 models: tuple[str, ...] = (), lists_models: bool = True) -> None:
        self.responder = responder
        self.models, self.lists_models = models, lists_models
        self.requests: list[Received] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._api_key = api_key
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="loopback-llm",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests, before the responder is asked again."""
        with self._lock:
            self._queue.extend(replies)

    def received(self, request: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if request is None or r.request == request]

    def close(self) -> None:
        self._closing.set()  # hanging replies give up
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            queued = self._queue.popleft() if self._queue else None
        return queued or self.responder(received)

    def _authorised(self, headers: Mapping[str, str]) -> bool:
        return self._api_key is None or \
            headers.get("authorization", "") == f"Bearer {self._api_key}"

    def _model_list(self, headers: Mapping[str, str]) -> tuple[int, bytes]:
        if not self._authorised(headers):
            return 401, _error_body(401, "invalid API key")
        if not self.lists_models:
            return 404, _error_body(404, "no such endpoint /v1/models")
        return 200, json.dumps({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "loopback"}
            for name in self.models]}).encode()

    def _answer(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[Reply, bytes]:
        messages = tuple(m for m in body.get("messages", []) if isinstance(m, dict))
        authorised = self._authorised(headers)
        received = Received(headers.get(REQUEST_HEADER.lower(), ""), str(body.get("model", "")),
                            messages, authorised, body)
        if not authorised:
            return Reply(status=401), _error_body(401, "invalid API key")
        reply = self._next_reply(received)
        if reply.raw is not None:
            return reply, reply.raw
        if reply.status != 200:
            return reply, _error_body(reply.status, reply.content or "scripted failure")
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = len(received.prompt) // CHARS_PER_TOKEN
        completion = reply.completion_tokens
        content = reply.content
        if reply.beyond_max_tokens > 1:
            limit = int(body.get("max_tokens") or 4096)
            completion = int(limit * reply.beyond_max_tokens)
            padding = "\n// " + "x" * 76
            content += padding * max(0, (completion * CHARS_PER_TOKEN - len(content)) // 80)
        if completion is None:
            completion = len(content) // CHARS_PER_TOKEN
        document: dict[str, Any] = {
            "id": f"chatcmpl-loopback-{next(self._ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": received.model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}
        if reply.usage:
            document["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        return reply, json.dumps(document).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
                if not self.path.rstrip("/").endswith("/models"):
                    self._send(404, _error_body(404, f"no such endpoint {self.path}"), {})
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(*server._model_list(headers), {})

            def do_POST(self) -> None:  # noqa: N802 - the http.server protocol
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, _error_body(404, f"no such endpoint {self.path}"), {})
                    return
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, _error_body(400, "the body is not JSON"), {})
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                if not body.get("messages"):  # as OpenAI's own server: refused, not scripted
                    status = 400 if server._authorised(headers) else 401
                    self._send(status, _error_body(status, "messages must not be empty"), {})
                    return
                reply, payload = server._answer(headers, body)
                if reply.hang:
                    server._closing.wait()
                    return  # the connection drops without an answer
                if reply.delay_s > 0:
                    server._closing.wait(reply.delay_s)
                self._send(reply.status, payload, reply.headers)

            def _send(self, status: int, payload: bytes, headers: Mapping[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (its time limit): nothing to deliver

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # quiet: tests and the benchmark print what matters

        return Handler


def _error_body(status: int, message: str) -> bytes:
    kinds = {401: "invalid_request_error", 429: "rate_limit_exceeded"}
    return json.dumps({"error": {"message": message, "type": kinds.get(status, "server_error"),
                                 "code": status}}).encode()
