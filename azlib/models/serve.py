"""A small OpenAI-compatible HTTP server over a local backend holding a tokenizer (/v1/chat/completions,
/v1/completions), with limits on what one client may ask; the batching itself is azlib.models.fair_batches."""

from __future__ import annotations

import hmac
import json
import select
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azlib.models.fair_batches import BadPrompt, Expired, FairBatcher, Job
from azlib.models.generation import Backend, Sample
from azlib.models.openai_requests import ApiError, parse_request
from azlib.settings import ServeLimits

CLIENT_CHECK_SECONDS = 0.25  # how often a waiting handler looks whether its client has gone


class BatchingServer:
    """serve(backend) on host:port (port 0 picks a free one); `url` is the base_url for clients.
    `api_key`, when given, must arrive as a Bearer token (it is compared, never logged). Every refusal is
    an HTTP status with OpenAI's error body; `stats` counts what happened (answers, refusals by status,
    clients gone, generate calls, tokens)."""

    def __init__(self, backend: Backend, model_name: str, host: str = "127.0.0.1", port: int = 0, *,
                 api_key: str | None = None, limits: ServeLimits = ServeLimits(), gather_seconds: float = 0.01):
        self.backend, self.model_name, self.api_key, self.limits = backend, model_name, api_key, limits
        self.batcher = FairBatcher(backend, context_tokens=backend.context_tokens,
                                   default_tokens=min(limits.default_tokens, limits.max_tokens),
                                   max_running=limits.max_concurrent, batch_rows=limits.batch_rows,
                                   turn_rows=limits.turn_rows, turn_tokens=limits.turn_tokens,
                                   gather_seconds=gather_seconds)
        self.stats = self.batcher.stats
        self._stats_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(limits.max_concurrent + limits.max_queue)
        self.httpd = _Listener((host, port), self._handler())
        self._serving = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def batches(self) -> int:
        """generate calls made: fewer than requests when batching works."""
        return self.stats["generate_calls"]

    def start(self) -> BatchingServer:
        self.batcher.start()
        self._serving.start()
        return self

    def wait(self) -> None:
        """Block until the server is closed (the command line's foreground mode)."""
        self._serving.join()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.batcher.close()

    def __enter__(self) -> BatchingServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def _handler(self):
        server, limits = self, self.limits

        class Handler(BaseHTTPRequestHandler):
            timeout = limits.read_timeout  # applied to the socket: a client that stalls mid-request gets 408
            body_read = False

            def log_message(self, *args):  # quiet: requests are counted, not logged
                pass

            def _reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                server._count(f"http_{status}")
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                                        **(headers or {})}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    if not self.body_read:
                        self._linger()
                except OSError:  # the client went away first: nobody to tell
                    self.close_connection = True

            def _linger(self) -> None:
                """Refused before its body was read: close our side, then let the client finish sending for a
                moment, so the reply is not lost to a reset (Apache's lingering close)."""
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(0.5)
                until = time.monotonic() + 2.0
                while time.monotonic() < until and self.connection.recv(65536):
                    pass

            def send_error(self, code, message=None, explain=None):
                """http.server's own refusals (a bad request line, an unknown method, huge headers), in OpenAI's
                shape."""
                message = message or self.responses.get(code, ("error",))[0]
                self.request_version = "HTTP/1.0"  # an unparsed line reads as HTTP/0.9: no status line at all
                kind = "invalid_request_error" if code < 500 else "server_error"
                self._reply(code, ApiError(code, message, type=kind, code="http_error").body())

            def do_GET(self):
                if self.path.rstrip("/") != "/v1/models":
                    return self._reply(404, ApiError(404, f"no route {self.path}", code="unknown_url").body())
                if not self._authorized():
                    return self._reply(401, ApiError(401, "missing or wrong API key", code="invalid_api_key").body())
                self._reply(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})

            def _authorized(self) -> bool:
                """No key set, or this one's Bearer token is it (compared in constant time, as vLLM's server does)."""
                given = self.headers.get("Authorization", "")
                return not server.api_key or hmac.compare_digest(given.encode(), f"Bearer {server.api_key}".encode())

            def do_POST(self):
                try:
                    answer = self._complete()
                except ApiError as err:
                    return self._reply(err.status, err.body(), err.headers)
                except Exception as err:  # a bug or a backend failure: still an answer, never a dropped connection
                    return self._reply(500, ApiError(500, f"{type(err).__name__}: {err}", type="server_error").body())
                if answer is not None:
                    response, stream = answer
                    self._stream(response) if stream else self._reply(200, response)

            def _complete(self):
                """(response, stream) for a valid request; None when the client left before its answer."""
                route = self.path.rstrip("/")
                if route not in ("/v1/chat/completions", "/v1/completions"):
                    raise ApiError(404, f"no route {self.path}", code="unknown_url")
                if not self._authorized():
                    raise ApiError(401, "missing or wrong API key", code="invalid_api_key")
                chat = route == "/v1/chat/completions"
                request = parse_request(self._body(), chat=chat, model=server.model_name, max_n=limits.max_n,
                                        max_tokens=limits.max_tokens)
                if not server._slots.acquire(blocking=False):
                    raise ApiError(503, "the server is at capacity; retry shortly", type="server_error",
                                   code="overloaded", headers={"Retry-After": "1"})
                try:
                    job = Job(request.prompt, request.n, request.max_tokens, request.temperature, request.top_p,
                              request.stop, request.seed, deadline=time.monotonic() + limits.request_timeout)
                    server.batcher.submit(job)
                    samples = self._wait(job, request.prompt_param)
                finally:
                    server._slots.release()
                if samples is None:
                    return None
                return _response(samples, chat, server.model_name), request.stream

            def _body(self) -> bytes:
                length = self.headers.get("Content-Length")
                if length is None:
                    raise ApiError(411, "a Content-Length header is required", code="length_required")
                if not (length.strip().isascii() and length.strip().isdigit()):  # "²" is a digit int() refuses
                    raise ApiError(400, f"bad Content-Length {length!r}", code="invalid_header")
                if int(length) > limits.max_body_bytes:
                    raise ApiError(413, f"the body ({int(length)} bytes) is larger than this server's limit of "
                                        f"{limits.max_body_bytes} bytes", code="request_too_large")
                try:
                    body = self.rfile.read(int(length))
                except TimeoutError:
                    raise ApiError(408, f"the body did not arrive within {limits.read_timeout} s",
                                   code="request_timeout") from None
                if len(body) < int(length):
                    raise ApiError(400, "the body ended before its Content-Length", code="incomplete_body")
                self.body_read = True
                return body

            def _wait(self, job: Job, prompt_param: str) -> list[Sample] | None:
                """The job's samples; None when the client went away (the job is cancelled: it stops)."""
                while True:
                    left = job.deadline - time.monotonic()
                    if left <= 0:
                        job.cancel()
                        raise ApiError(504, f"no answer within this server's request timeout of "
                                            f"{limits.request_timeout} s", type="server_error", code="timeout")
                    try:
                        return job.future.result(timeout=min(CLIENT_CHECK_SECONDS, left))
                    except TimeoutError:
                        if _client_gone(self.connection):
                            job.cancel()
                            server._count("client_gone")
                            return None
                    except BadPrompt as err:
                        raise ApiError(400, str(err), param=prompt_param, code=err.code) from None
                    except Expired as err:
                        raise ApiError(504, str(err), type="server_error", code="timeout") from None

            def _stream(self, response: dict[str, Any]) -> None:
                """Server-sent events: each choice's whole text as one delta, then usage, then [DONE]."""
                chat = response["object"] == "chat.completion"
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


_NAMED: dict[str, BatchingServer] = {}  # the servers serve_named started in this process, by name


def serve_named(name: str, server: BatchingServer) -> BatchingServer:
    """Start `server` as this process's server called `name`, after closing the one started under that name before:
    a notebook cell run again has one server running, not one more (and the model behind the old one can be freed)."""
    if (previous := _NAMED.pop(name, None)) is not None:
        previous.close()
    _NAMED[name] = server.start()
    return server


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # connections not yet accepted: socketserver's 5 resets a burst of clients


def _client_gone(connection: socket.socket) -> bool:
    """Whether the client closed its side (readable, yet nothing to read) while waiting for its answer."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


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
