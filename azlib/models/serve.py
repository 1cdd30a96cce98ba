"""A small OpenAI-compatible HTTP server over any local backend (/v1/chat/completions, /v1/completions).
Requests that arrive together are batched into one generate call, as vLLM's server does."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azlib.models.generation import Backend, Sample, Sampling


class _Request:
    def __init__(self, prompt, sampling: Sampling):
        self.prompt, self.sampling, self.future = prompt, sampling, Future()


class BatchingServer:
    """serve(backend) on host:port (port 0 picks a free one); `url` is the base_url for clients.
    `api_key`, when given, must arrive as a Bearer token (it is compared, never logged)."""

    def __init__(self, backend: Backend, model_name: str, host: str = "127.0.0.1", port: int = 0, *,
                 api_key: str | None = None, max_batch: int = 64, gather_seconds: float = 0.01):
        self.backend, self.model_name, self.api_key = backend, model_name, api_key
        self.max_batch, self.gather_seconds = max_batch, gather_seconds
        self.requests: queue.Queue[_Request | None] = queue.Queue()
        self.batches = 0  # generate calls made: fewer than requests when batching works
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self._threads = [threading.Thread(target=self.httpd.serve_forever, daemon=True),
                         threading.Thread(target=self._work, daemon=True)]

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> BatchingServer:
        for thread in self._threads:
            thread.start()
        return self

    def wait(self) -> None:
        """Block until the server is closed (the command line's foreground mode)."""
        self._threads[0].join()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.requests.put(None)

    def __enter__(self) -> BatchingServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _work(self) -> None:
        """Take what is waiting (up to max_batch), group it by sampling settings, one generate per group."""
        while (first := self.requests.get()) is not None:
            batch, deadline = [first], time.monotonic() + self.gather_seconds
            while len(batch) < self.max_batch and (left := deadline - time.monotonic()) > 0:
                try:
                    item = self.requests.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    self.requests.put(None)
                    break
                batch.append(item)
            groups: dict[Sampling, list[_Request]] = {}
            for request in batch:
                groups.setdefault(request.sampling, []).append(request)
            for sampling, group in groups.items():
                self.batches += 1
                try:
                    results = self.backend.generate([r.prompt for r in group], **asdict(sampling))
                except Exception as err:  # the client gets HTTP 500 with the message
                    for r in group:
                        r.future.set_exception(err)
                else:
                    for r, samples in zip(group, results):
                        r.future.set_result(samples)

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: requests are counted, not logged
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    return self._reply(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
                self._reply(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._reply(401, {"error": {"message": "missing or wrong API key"}})
                chat = self.path.rstrip("/") == "/v1/chat/completions"
                if not chat and self.path.rstrip("/") != "/v1/completions":
                    return self._reply(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    prompt = [_plain(m) for m in body["messages"]] if chat else body["prompt"]
                    stop = body.get("stop") or ()
                    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
                    sampling = Sampling(n=int(body.get("n") or 1), max_new_tokens=int(max_tokens),
                                        temperature=float(body.get("temperature", 1.0)),
                                        top_p=float(body.get("top_p", 1.0)),
                                        stop=(stop,) if isinstance(stop, str) else tuple(stop), seed=body.get("seed"))
                except (ValueError, KeyError, TypeError) as err:
                    return self._reply(400, {"error": {"message": f"bad request: {err}"}})
                request = _Request(prompt, sampling)
                server.requests.put(request)
                try:
                    samples = request.future.result()
                except Exception as err:
                    return self._reply(500, {"error": {"message": f"{type(err).__name__}: {err}"}})
                response = _response(samples, chat, server.model_name)
                if body.get("stream"):
                    return self._stream(response, chat)
                self._reply(200, response)

            def _stream(self, response: dict[str, Any], chat: bool) -> None:
                """Server-sent events: each choice's whole text as one delta, then usage, then [DONE]."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                base = {k: response[k] for k in ("id", "created", "model")}
                base["object"] = "chat.completion.chunk" if chat else "text_completion"
                for choice in response["choices"]:
                    if chat:
                        delta = {"index": choice["index"], "logprobs": choice["logprobs"], "finish_reason": None,
                                 "delta": {"role": "assistant", "content": choice["message"]["content"]}}
                    else:
                        delta = {**choice, "finish_reason": None}
                    done = {"index": choice["index"], "finish_reason": choice["finish_reason"],
                            **({"delta": {}} if chat else {"text": ""})}
                    for part in (delta, done):
                        self._event({**base, "choices": [part]})
                self._event({**base, "choices": [], "usage": response["usage"]})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _event(self, payload: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        return Handler


def _plain(message: dict[str, Any]) -> dict[str, str]:
    """A chat message with list-of-parts content flattened to its text parts (chat templates want text)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return {"role": message["role"], "content": content}


def _response(samples: list[Sample], chat: bool, model: str) -> dict[str, Any]:
    choices = []
    for i, s in enumerate(samples):
        if chat:
            choices.append({"index": i, "message": {"role": "assistant", "content": s.text},
                            "logprobs": {"content": [{"token": "", "logprob": lp} for lp in s.logprobs]},
                            "finish_reason": s.finish_reason})
        else:
            choices.append({"index": i, "text": s.text, "logprobs": {"token_logprobs": list(s.logprobs)},
                            "finish_reason": s.finish_reason})
    usage = {"prompt_tokens": samples[0].prompt_tokens if samples else 0,
             "completion_tokens": sum(s.completion_tokens for s in samples)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {"id": f"azlib-{uuid.uuid4().hex[:12]}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": choices, "usage": usage}
