"""A stub OpenAI-compatible server on loopback for endpoint tests without an engine
(tests/test_endpoint_replies.py, tests/test_endpoint_interrupt.py): `GET /v1/models` and
`POST /v1/chat/completions`, each reply set by the test."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

import pytest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest_server import free_port

from tasks.tsp_construct import TEMPLATE

MODEL = "stub"
LOGIN_PAGE = "<html><head><title>Sign in</title></head><body>Please sign in to the corporate proxy</body></html>"


def completion(message: object) -> dict:
    return {"id": "c", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}


def model_list(*names: str) -> tuple[int, str, str]:
    """A `GET /v1/models` reply listing `names`."""
    return 200, "application/json", json.dumps({"object": "list", "data": [
        {"id": name, "object": "model", "owned_by": "stub"} for name in names]})


GOOD = json.dumps(completion({"role": "assistant", "content": f"```python\n{TEMPLATE}\n```"}))
# mode: (HTTP status, content type, body) of every chat reply
REPLIES = {
    "good": (200, "application/json", GOOD),
    "nochoices": (200, "application/json", json.dumps({**completion(None), "choices": []})),
    "badjson": (200, "application/json", '{"id": "c", "choices": [{"message": {"content": "def sel'),
    "html": (200, "text/html; charset=utf-8", LOGIN_PAGE),
    "e500": (500, "application/json", json.dumps({"error": {"message": "upstream down"}})),
    # refusals no retry fixes
    "e401": (401, "application/json", json.dumps({"error": {"message": "Incorrect API key provided"}})),
    "e400": (400, "application/json", json.dumps({"error": {"message": "structured outputs are not supported"}})),
    "toolong": (400, "application/json", json.dumps({"error": {"message": "This model's maximum context length is "
                                                                          "2048 tokens; you requested 4096 tokens"}})),
    # not chat completions either
    "list": (200, "application/json", "[]"),
    "nomessage": (200, "application/json", json.dumps({**completion(None), "choices": [{"index": 0}]})),
    "numbercontent": (200, "application/json", json.dumps(completion({"role": "assistant", "content": 7}))),
    # chat completions whose text is useless: the candidate's parse failure, not the endpoint's
    "null": (200, "application/json", json.dumps(completion({"role": "assistant", "content": None}))),
    "empty": (200, "application/json", json.dumps(completion({"role": "assistant", "content": ""}))),
    "nousage": (200, "application/json", json.dumps({k: v for k, v in json.loads(GOOD).items() if k != "usage"})),
}


class StubServer:
    """An OpenAI-compatible server on loopback: `GET /v1/models` lists MODEL (`models`: what it answers);
    `POST /v1/chat/completions` answers the first `good_first` requests well, then `mode`'s reply (REPLIES)
    `bad_times` times (None: forever), then well again. Each chat request waits `delay_s` before its
    reply (a slow server; `close` ends the waits) and its arrival time (time.monotonic) is in `started`.
    `fail` maps a text to a mode: a chat request whose body holds that text is answered at once with that
    mode's reply, every time, outside the count above (one request of a call that fails).
    `content`, when set, makes a good reply's text from the request's JSON body (replies that differ by
    prompt and seed). `hold_after`, when set, holds every chat request after that many until `release`
    is set (or `close`): a run whose step is out, part of it answered."""

    def __init__(self) -> None:
        self.mode, self.good_first, self.bad_times = "good", 0, None
        self.chats = 0  # chat requests answered
        self.delay_s = 0.0
        self.fail: dict[str, str] = {}
        self.started: list[float] = []
        self.bodies: list[dict] = []  # each chat request's JSON body, in arrival order
        self.models = model_list(MODEL)  # the reply to `GET /v1/models`
        self.content: Callable[[dict], str] | None = None
        self.hold_after: int | None = None
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.closing = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                self.reply(*stub.models)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                with stub.lock:
                    stub.started.append(time.monotonic())
                    stub.bodies.append(json.loads(body) if body.startswith("{") else {})
                    held = stub.hold_after is not None and len(stub.bodies) > stub.hold_after
                if held:
                    stub.release.wait()  # (close sets it too)
                marked = [mode for text, mode in stub.fail.items() if text in body]
                if marked:
                    self.reply(*REPLIES[marked[0]])
                    return
                if stub.delay_s:
                    stub.closing.wait(stub.delay_s)
                with stub.lock:
                    stub.chats += 1
                    bad = stub.chats - stub.good_first
                    broken = bad > 0 and (stub.bad_times is None or bad <= stub.bad_times)
                if stub.content is not None and (stub.mode == "good" or not broken):
                    text = stub.content(json.loads(body))
                    self.reply(200, "application/json", json.dumps(completion({"role": "assistant", "content": text})))
                    return
                self.reply(*REPLIES[stub.mode if broken else "good"])

            def reply(self, status: int, content_type: str, body: str) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client left (timed out, interrupted): nobody to answer
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        # shutdown() waits for serve_forever's next poll: every 0.05 s, not the default 0.5 s (each test's teardown)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closing.set()
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# the fixtures of the tests that use the stub: import them into a test module (pytest finds them there)
@pytest.fixture
def stub():
    server = StubServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)  # for each test module that imports it
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # loopback takes any key
