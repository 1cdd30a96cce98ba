"""Shared fixtures: the local GSM8K copy beside the repo, the embedded model (loaded once), and real
scripted HTTP servers on 127.0.0.1 for fault injection."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from azlib.data.gsm8k import LOCAL_DEFAULT


@pytest.fixture(scope="session")
def gsm8k_dir():
    assert (LOCAL_DEFAULT / "test.jsonl").is_file(), f"tests need the GSM8K copy at {LOCAL_DEFAULT}"
    return LOCAL_DEFAULT


@pytest.fixture(scope="session")
def embedded():
    from azlib.models import DEFAULT_MODEL, load_model

    return load_model(DEFAULT_MODEL)


@pytest.fixture
def dead_port() -> int:
    """A port on 127.0.0.1 nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedServer(ThreadingHTTPServer):
    """An OpenAI-shaped server on 127.0.0.1 that answers from a script: 'ok', 'http500', 'http400',
    'garbage' (not JSON), 'slow' (answers after 2 s: a timeout for a short-timeout client)."""

    def __init__(self, script):
        self.script, self.requests = list(script), []
        super().__init__(("127.0.0.1", 0), ScriptedHandler)


class ScriptedHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        step = self.server.script.pop(0) if self.server.script else "ok"
        if step.startswith("http"):
            return self._send(int(step[4:]), b'{"error": "scripted"}')
        if step == "slow":
            time.sleep(2.0)
        if step == "garbage":
            return self._send(200, b"<html>not json</html>")
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "#### 4"},
                  "logprobs": {"content": [{"token": "####", "logprob": -0.5}, {"token": " 4", "logprob": -0.25}]}}
        self._send(200, json.dumps({"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}).encode())

    def _send(self, code, payload):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server_factory():
    servers = []

    def start(script=()):
        server = ScriptedServer(script)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()
