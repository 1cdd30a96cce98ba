"""`azlib serve` under hostile and heavy load: the real embedded model behind real servers on 127.0.0.1.
Refusals (wrong types, limits, bodies, routes, keys) come back in OpenAI's error shape before the model runs;
a large request is generated in turns beside ordinary ones; clients that leave and deadlines stop the work."""

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from azlib.models.serve import BatchingServer, serve_named
from azlib.settings import ServeLimits

CHAT = [{"role": "user", "content": "What is 12 + 7?"}]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"  # greedy, the model counts on: a request that uses all its tokens
SMALL = ServeLimits(max_n=4, max_tokens=64, default_tokens=16, read_timeout=1.0)


@pytest.fixture(scope="module")
def refusing(hf):
    """A server no test ever gets an answer from: every request sent to it must be refused before generation."""
    with BatchingServer(hf, "smol", api_key="sk-serve-test", limits=SMALL) as server:
        server.client = httpx.Client(base_url=server.url, headers={"Authorization": "Bearer sk-serve-test"},
                                     timeout=30)
        yield server
        server.client.close()


def chat(**fields):
    return {"model": "smol", "messages": CHAT, "max_tokens": 4, **fields}


def refused(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def exchange(server: BatchingServer, data: bytes, *, wait: float = 30.0) -> tuple[int, dict, dict]:
    """Send raw bytes, read until the server closes: (status, headers, JSON body)."""
    host, port = server.httpd.server_address[:2]
    with socket.create_connection((host, port), timeout=wait) as s:
        s.sendall(data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, json.loads(body)


def post_head(path: str, length: int | None, key: str = "sk-serve-test") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             f"Authorization: Bearer {key}"] + ([f"Content-Length: {length}"] if length is not None else [])
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def stopped(server: BatchingServer) -> int:
    """Tokens generated once the server has dropped every job (the turn in flight ends first); checks none follow."""
    deadline = time.monotonic() + 60
    while (server.batcher.running or not server.batcher.waiting.empty()) and time.monotonic() < deadline:
        time.sleep(0.1)
    tokens = server.stats["tokens"]
    time.sleep(1.0)
    assert not server.batcher.running and server.stats["tokens"] == tokens, "generation went on"
    return tokens


WRONG_FIELDS = [  # (field, value, status): wrong types and out-of-range values of every field the server reads
    ("n", "2", 400), ("n", 2.5, 400), ("n", True, 400), ("n", 0, 400), ("n", -1, 400), ("n", 100_000, 400),
    ("n", [1], 400),
    ("max_tokens", "8", 400), ("max_tokens", 1.5, 400), ("max_tokens", -1, 400), ("max_tokens", 0, 400),
    ("max_tokens", 1_000_000_000, 400), ("max_tokens", False, 400),
    ("max_completion_tokens", "8", 400), ("max_completion_tokens", 1_000_000_000, 400),
    ("temperature", "hot", 400), ("temperature", -0.1, 400), ("temperature", 2.5, 400), ("temperature", True, 400),
    ("temperature", {}, 400),
    ("top_p", 3, 400), ("top_p", 0, 400), ("top_p", "1", 400), ("top_p", -0.5, 400),
    ("stop", 5, 400), ("stop", ["a", 1], 400), ("stop", ["a"] * 5, 400), ("stop", "", 400), ("stop", "x" * 65, 400),
    ("stop", {"a": 1}, 400),
    ("seed", "1", 400), ("seed", 1.5, 400), ("seed", 2**64, 400), ("seed", True, 400),
    ("stream", "yes", 400), ("stream", 1, 400),
    ("messages", "hi", 400), ("messages", [], 400), ("messages", ["hi"], 400), ("messages", None, 400),
    ("messages", {"role": "user", "content": "hi"}, 400),
    ("messages", [{"role": "wizard", "content": "hi"}], 400), ("messages", [{"content": "hi"}], 400),
    ("messages", [{"role": "user", "content": 5}], 400),
    ("messages", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], 400),
    ("messages", [{"role": "user", "content": ["hi"]}], 400),
    ("model", None, 400), ("model", 5, 400), ("model", "gpt-4o", 404), ("model", "SMOL", 404),
]


@pytest.mark.parametrize("name, value, status", WRONG_FIELDS, ids=[f"{f}={str(v)[:12]}" for f, v, _ in WRONG_FIELDS])
def test_a_wrong_field_is_refused_with_its_name_before_the_model_runs(refusing, name, value, status):
    error = refused(refusing.client.post("/chat/completions", json=chat(**{name: value})), status)
    assert error["param"].split("[")[0] == name
    assert refusing.batches == 0 and refusing.stats["tokens"] == 0


@pytest.mark.parametrize("value", [["a", "b"], 5, "", None, [1, 2, 3]])
def test_a_completion_prompt_must_be_one_string(refusing, value):
    refused(refusing.client.post("/completions", json={"model": "smol", "prompt": value}), 400, "prompt")
    assert refusing.batches == 0


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe\x00", b"",
                                  b'{"model": "smol", "messages": [{"role": "user", "content": "x"}], '
                                  b'"temperature": NaN}'])
def test_a_body_that_is_not_a_request_object_is_refused(refusing, body):
    refused(refusing.client.post("/chat/completions", content=body), 400)
    assert refusing.batches == 0


def test_json_nested_too_deep_is_refused_by_name(refusing):
    """50,000 arrays inside one another: within the body limit, past the json module's recursion limit."""
    error = refused(refusing.client.post("/chat/completions", content=b"[" * 50_000 + b"]" * 50_000), 400)
    assert error["code"] == "invalid_json" and "nested too deep" in error["message"]
    # ordinary nesting parses: the refusal is the field check's
    assert refused(refusing.client.post("/chat/completions", json=chat(n=0, metadata=[[[{}]]])), 400, "n")
    assert refusing.batches == 0


def test_hostile_requests_are_refused_at_once(refusing):
    started = time.monotonic()
    refused(refusing.client.post("/chat/completions", json=chat(n=100_000)), 400, "n")
    refused(refusing.client.post("/chat/completions", json=chat(max_tokens=1_000_000_000)), 400, "max_tokens")
    long = [{"role": "user", "content": "tell me more " * 8_000}]  # 104,000 characters, past the 8,192-token context
    error = refused(refusing.client.post("/chat/completions", json=chat(messages=long)), 400, "messages")
    assert error["code"] == "context_length_exceeded" and "8192" in error["message"]
    near = {"model": "smol", "prompt": "word " * 8_150, "max_tokens": 64}  # fits alone, not with 64 new tokens
    assert refused(refusing.client.post("/completions", json=near), 400, "prompt")["code"] == "context_length_exceeded"
    refused(refusing.client.post("/chat/completions", json=chat(model="gpt-4o")), 404, "model")
    assert time.monotonic() - started < 10
    assert refusing.batches == 0 and refusing.stats["tokens"] == 0


def test_routes_keys_and_bodies_are_refused_in_openai_shape(refusing):
    assert refusing.client.get("/models").json()["data"][0]["id"] == "smol"
    assert refused(refusing.client.get("/nowhere"), 404)["code"] == "unknown_url"
    assert refused(refusing.client.post("/embeddings", json=chat()), 404)["code"] == "unknown_url"
    unkeyed = httpx.post(f"{refusing.url}/chat/completions", json=chat(), timeout=10)
    assert refused(unkeyed, 401)["code"] == "invalid_api_key"
    assert refused(httpx.get(f"{refusing.url}/models", timeout=10), 401)["code"] == "invalid_api_key"
    big = b'{"model": "smol", "prompt": "' + b"x" * SMALL.max_body_bytes + b'"}'
    assert refused(refusing.client.post("/completions", content=big), 413)["code"] == "request_too_large"
    started = time.monotonic()
    status, _, body = exchange(refusing, post_head("/v1/chat/completions", 99_999_999) + b"{}")
    assert status == 413 and body["error"]["code"] == "request_too_large"
    status, _, body = exchange(refusing, post_head("/v1/chat/completions", 1_000) + b"{}")  # then silence
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert time.monotonic() - started < SMALL.read_timeout + 5, "a stalled body holds a handler for read_timeout only"
    assert exchange(refusing, post_head("/v1/chat/completions", None))[0] == 411
    assert exchange(refusing, b"PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")[2]["error"]["message"]
    assert exchange(refusing, b"PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 501
    assert exchange(refusing, b"NOT A REQUEST LINE AT ALL\r\n\r\n")[0] == 400
    assert exchange(refusing, post_head("/v1/chat/completions", None)[:-2] + b"Content-Length: -5\r\n\r\n")[0] == 400
    superscript = "Content-Length: \u00b2\r\n\r\n".encode("latin-1")  # a digit to str.isdigit, not to int()
    assert exchange(refusing, post_head("/v1/chat/completions", None)[:-2] + superscript)[0] == 400
    assert refusing.batches == 0


def test_a_server_started_again_under_its_name_closes_the_one_before(hf):
    """Notebook 03's server cell run twice: the first server stops listening, the second answers; another name is
    another server."""
    first = serve_named("test-server", BatchingServer(hf, "smol", limits=SMALL))
    other = serve_named("test-other", BatchingServer(hf, "smol", limits=SMALL))
    second = serve_named("test-server", BatchingServer(hf, "smol", limits=SMALL))
    try:
        assert first.url != second.url
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{first.url}/chat/completions", json=chat(max_tokens=1), timeout=10)
        for server in (second, other):
            assert httpx.post(f"{server.url}/chat/completions", json=chat(max_tokens=1), timeout=60).status_code == 200
    finally:
        second.close()
        other.close()


def test_a_long_answer_made_in_turns_equals_one_generate_call(hf):
    direct = hf.generate([CHAT, COUNTING], max_new_tokens=24)
    with BatchingServer(hf, "smol", limits=ServeLimits(turn_tokens=5, batch_rows=1)) as server:
        client = httpx.Client(base_url=server.url, timeout=120)
        served = client.post("/chat/completions", json=chat(max_tokens=24, temperature=0)).json()
        assert served["choices"][0]["message"]["content"] == direct[0][0].text
        assert [t["logprob"] for t in served["choices"][0]["logprobs"]["content"]] == pytest.approx(
            direct[0][0].logprobs, abs=1e-4)
        assert server.batches >= 2, "24 tokens in turns of 5"
        text = client.post("/completions", json={"model": "smol", "prompt": COUNTING, "max_tokens": 24,
                                                 "temperature": 0, "stop": " 13,"}).json()["choices"][0]
        assert text["text"] == direct[1][0].text.split(" 13,")[0] and text["finish_reason"] == "stop"
        # batch_rows 1: each of the n rows has turns of its own, and a later turn samples with another seed
        seeded = {"model": "smol", "prompt": "My favourite animal is", "n": 3, "max_tokens": 8, "temperature": 1.0,
                  "seed": 7}
        first = [c["text"] for c in client.post("/completions", json=seeded).json()["choices"]]
        again = [c["text"] for c in client.post("/completions", json=seeded).json()["choices"]]
        assert first == again and len(set(first)) == 3
        client.close()


def test_ordinary_requests_are_answered_beside_the_largest_allowed_one(hf):
    limits = ServeLimits(max_n=4, max_tokens=64, turn_tokens=16)
    with BatchingServer(hf, "smol", limits=limits) as server, ThreadPoolExecutor(40) as pool:
        client = httpx.Client(base_url=server.url, timeout=120, limits=httpx.Limits(max_connections=40))
        for warm_up in ({"model": "smol", "prompt": COUNTING, "n": limits.max_n, "max_tokens": limits.max_tokens,
                         "temperature": 0}, chat(max_tokens=8)):  # the allocator's working set, before measuring
            client.post("/completions" if "prompt" in warm_up else "/chat/completions", json=warm_up, timeout=300)
        resident_before = resident_mb()

        def timed(body, timeout):
            started = time.monotonic()
            response = client.post("/completions" if "prompt" in body else "/chat/completions", json=body,
                                   timeout=timeout)
            return response, time.monotonic() - started

        large = pool.submit(timed, {"model": "smol", "prompt": COUNTING, "n": limits.max_n,
                                    "max_tokens": limits.max_tokens, "temperature": 0}, 300)
        time.sleep(0.5)
        ordinary = [pool.submit(timed, chat(max_tokens=8), 60) for _ in range(32)]
        answered = []
        for future in ordinary:
            try:
                response, seconds = future.result()
                answered.append(seconds if response.status_code == 200 else None)
            except httpx.TimeoutException:
                answered.append(None)
        big, big_seconds = large.result()
        on_time = [s for s in answered if s is not None]
        assert len(on_time) >= 0.95 * len(ordinary), answered
        assert big.status_code == 200 and big.json()["usage"]["completion_tokens"] == limits.max_n * limits.max_tokens
        assert max(on_time) < big_seconds, "ordinary requests did not wait for the whole large one"
        after = client.post("/chat/completions", json=chat(max_tokens=4), timeout=60)
        assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"]
        client.close()
    grown = resident_mb() - resident_before
    assert grown < 300, f"the server's memory comes back near where it started (grew {grown:.0f} MB)"


def resident_mb() -> float:
    """This process's resident memory now (not its peak)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024


def test_a_full_queue_is_told_to_retry_and_a_client_that_leaves_stops_its_work(hf):
    limits = ServeLimits(max_n=4, max_tokens=256, max_concurrent=1, max_queue=1, turn_tokens=8)
    long = json.dumps({"model": "smol", "prompt": COUNTING, "n": 4, "max_tokens": 256, "temperature": 0}).encode()
    with BatchingServer(hf, "smol", limits=limits) as server:
        host, port = server.httpd.server_address[:2]
        leaving = []
        for _ in range(2):  # one generating, one queued
            s = socket.create_connection((host, port))
            s.sendall(post_head("/v1/completions", len(long)) + long)
            leaving.append(s)
            time.sleep(0.3)
        full = httpx.post(f"{server.url}/completions", content=long, timeout=30)
        assert refused(full, 503)["code"] == "overloaded" and full.headers["Retry-After"] == "1"
        while server.stats["tokens"] == 0:
            time.sleep(0.1)
        for s in leaving:
            s.close()
        deadline = time.monotonic() + 30
        while server.stats["client_gone"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.stats["client_gone"] == 2
        tokens = stopped(server)
        assert tokens < 4 * 256, "the first request was dropped before it finished"
        assert server.stats["dropped_running"] + server.stats["dropped_unstarted"] == 2
        after = httpx.post(f"{server.url}/chat/completions", json=chat(max_tokens=4), timeout=60)
        assert after.status_code == 200


def test_a_passed_deadline_answers_504_and_stops_generation(hf):
    limits = ServeLimits(max_concurrent=1, request_timeout=2.0, turn_tokens=8)
    body = {"model": "smol", "prompt": COUNTING, "n": 4, "max_tokens": 512, "temperature": 0}
    with BatchingServer(hf, "smol", limits=limits) as server, ThreadPoolExecutor(2) as pool:
        with hf.lock:  # the model is busy elsewhere (a training step, say) until both deadlines have passed
            first = pool.submit(httpx.post, f"{server.url}/completions", json=body, timeout=60)
            time.sleep(0.3)
            queued = pool.submit(httpx.post, f"{server.url}/completions", json=body, timeout=60)
            for response in (first.result(), queued.result()):
                assert refused(response, 504)["code"] == "timeout"
        assert stopped(server) == 0 and server.stats["dropped_unstarted"] == 2, "an expired request never starts"
        assert refused(httpx.post(f"{server.url}/completions", json=body, timeout=60), 504)["code"] == "timeout"
        assert 0 < stopped(server) < 4 * 512
        assert server.stats["dropped_running"] == 1, "a request past its deadline gets no further turns"


def test_the_command_line_sets_the_limits(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "azlib", "serve", "--port", "0", "--served-model-name", "smol",
                             "--max-n", "2", "--max-body-bytes", "2000"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        url = proc.stdout.readline().split(" at ")[1].split()[0]
        assert "from 1 to 2" in refused(httpx.post(f"{url}/chat/completions", json=chat(n=3), timeout=30), 400,
                                        "n")["message"]
        refused(httpx.post(f"{url}/completions", json={"model": "smol", "prompt": "x" * 2000}, timeout=30), 413)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
