"""The student being trained: a causal LM with LoRA adapters (peft; Unsloth 4-bit on GPU when installed), its KL
reference, per-token log-probs for the loss, its generator (hf, vLLM or a vLLM server), adapter save and load."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Literal, Sequence

import torch

from azlib.optional_packages import require
from azlib.models.generation import Backend, Resource
from azlib.models.hf import BATCH_SIZE, HFBackend
from azlib.models.loading import ModelLoadError, load_model
from azlib.settings import LoraSettings
from azlib.models.shared_prompts import (SCORING_MEMORY, chosen_logprobs, completion_logits,
                                         completion_logprobs, token_entropy)

REFERENCE_ADAPTER = "reference"


class Student(Resource):
    """model: embedded:..., a hub name or a folder. `backend` generates with the current adapters; `scorer` is an
    hf backend over the weights themselves (the same object as `backend` when generation is "hf")."""

    def __init__(self, model: str, *, lora: LoraSettings = LoraSettings(),
                 reference: Literal["adapters_off", "snapshot"] = "adapters_off", dtype: str = "float32",
                 device: str = "cpu", gradient_checkpointing: bool = False, use_unsloth: bool = False,
                 batch_size: int = BATCH_SIZE, generation: Literal["hf", "vllm", "server"] = "hf",
                 vllm_options: dict | None = None, server: dict | None = None, engine: Backend | None = None,
                 scoring_memory: int = SCORING_MEMORY):
        """generation: the model itself (hf), a vLLM engine in this process (vllm, `vllm_options`), or a vLLM
        server (`server`: base_url, model as the server names it, and azlib.models.vllm_server's options); the
        last two get the adapter after every optimiser step. engine: with generation "vllm", an engine of this
        model that the caller opened and closes (notebook 05 keeps one across its arms), instead of a new one.
        scoring_memory: bytes of fp32 logits per no-gradient forward (azlib.models.shared_prompts)."""
        from peft import LoraConfig, get_peft_model

        if reference not in ("adapters_off", "snapshot"):
            raise ValueError(f"reference must be 'adapters_off' or 'snapshot', got {reference!r}")
        if generation not in ("hf", "vllm", "server"):
            raise ValueError(f"generation must be 'hf', 'vllm' or 'server', got {generation!r}")
        if generation == "server" and not (server and server.get("base_url") and server.get("model")):
            raise ValueError("generation 'server' needs server={'base_url': ..., 'model': <the server's model name>}")
        if engine is not None and generation != "vllm":
            raise ValueError(f"an engine is handed only to generation 'vllm', not {generation!r}")
        self.name, self.reference, self.device, self.scoring_memory = model, reference, device, scoring_memory
        self.lora_config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, bias="none",
                                      target_modules=lora.target_modules if isinstance(lora.target_modules, str)
                                      else list(lora.target_modules), task_type="CAUSAL_LM")
        if use_unsloth:
            self.model, self.tokenizer = _unsloth_student(model, dtype, lora, gradient_checkpointing)
        else:
            base, self.tokenizer = load_model(model, dtype=dtype, device=device)
            if gradient_checkpointing:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                base.enable_input_require_grads()
            self.model = get_peft_model(base, self.lora_config)
        if reference == "snapshot":
            self.model.add_adapter(REFERENCE_ADAPTER, self.lora_config)
            self.refresh_reference()
        self.model.set_adapter("default")
        self.model.eval()
        self.generation = generation
        self.owns_backend = engine is None  # an engine handed in is its giver's to close
        # the trained weights themselves: the log-probs the update computes, whichever way the student generates
        self.scorer = HFBackend.wrapping(self.model, self.tokenizer, device=device, batch_size=batch_size,
                                         scoring_memory=scoring_memory)
        if generation == "hf":
            self.backend = self.scorer
        elif engine is not None:
            self.backend = engine
        elif generation == "vllm":
            from azlib.models.vllm import VLLMBackend

            self.backend = VLLMBackend(model, lora_rank=lora.r, **(vllm_options or {}))
        else:
            from azlib.models.vllm_server import VLLMServerBackend

            self.backend = VLLMServerBackend(tokenizer=self.tokenizer, **server)
        if generation != "hf":
            self.sync_folder = Path(tempfile.mkdtemp(prefix="azlib-student-"))  # every sync writes here
            self._remove_sync_folder = weakref.finalize(self, shutil.rmtree, self.sync_folder, ignore_errors=True)
            self.sync_generation()

    def sync_generation(self) -> None:
        """vllm or server generation: hand the engine the current adapter (after each optimiser step, after a
        load). The hf backend generates with the model itself and needs nothing."""
        if self.generation == "hf":
            return
        # One folder, overwritten: the engine reads it once, when a call first names the new adapter id.
        # save_embedding_layers=False: the embeddings are not trained, and peft's "auto" would ask the hub
        # for the base model's config.json on every sync (a stall offline).
        self.model.save_pretrained(str(self.sync_folder), selected_adapters=["default"], save_embedding_layers=False)
        self.backend.use_adapter(self.sync_folder)

    def close(self) -> None:
        """Stop the generation engine (vllm, unless it was handed in; a server's connection) and remove the sync
        folder; the student's own weights stay (a closed student can still save its adapter). Idempotent."""
        if self.owns_backend:
            self.backend.close()
        if self.generation != "hf":
            self._remove_sync_folder()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.model.named_parameters() if p.requires_grad and REFERENCE_ADAPTER not in n]

    # -- the reference policy ---------------------------------------------------------------------
    @torch.no_grad()
    def refresh_reference(self) -> None:
        """snapshot mode: the reference adapter becomes a copy of the trained one."""
        if self.reference != "snapshot":
            return
        params = dict(self.model.named_parameters())
        for name, p in params.items():
            if ".default." in name:
                params[name.replace(".default.", f".{REFERENCE_ADAPTER}.")].copy_(p)
        self._train_default_adapter_only()

    def _train_default_adapter_only(self) -> None:
        """peft marks whichever adapter it activates trainable; only the trained one ("default") is."""
        for name, p in self.model.named_parameters():
            p.requires_grad_(".default." in name)

    @contextmanager
    def as_reference(self):
        """Within this block the model computes the reference policy."""
        if self.reference == "adapters_off":
            with self.model.disable_adapter():
                yield
            return
        self.model.base_model.set_adapter(REFERENCE_ADAPTER)
        try:
            yield
        finally:
            self.model.base_model.set_adapter("default")
            self._train_default_adapter_only()

    # -- log-probs for the loss ----------------------------------------------------------------------
    def token_logprobs(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *,
                       reference: bool = False, entropy: bool = False, temperature: float = 1.0):
        """(logp [B, T], mask [B, T], entropy [B, T] or None) of each completion's tokens after its prompt,
        under softmax(logits / temperature), 0 on padding. Completions right-padded; each distinct prompt is
        run once and shared by its completions (azlib.models.shared_prompts), gradients included. Under
        torch.no_grad (old and reference log-probs) in micro-batches within `scoring_memory`."""
        with self.as_reference() if reference else nullcontext():
            if not torch.is_grad_enabled():
                return completion_logprobs(self.model, prompts, completions, self.tokenizer.pad_token_id, self.device,
                                           temperature=temperature, entropy=entropy, memory=self.scoring_memory)
            logits, targets, completion_mask = completion_logits(self.model, prompts, completions,
                                                                 self.tokenizer.pad_token_id, self.device)
        logits = logits.float() / temperature
        padding = completion_mask == 0
        logp = chosen_logprobs(logits, targets).masked_fill(padding, 0.0)
        ent = None
        if entropy:  # a diagnostic: no gradient, a few rows at a time
            with torch.no_grad():
                ent = torch.cat([token_entropy(rows) for rows in logits.detach().split(4)]).masked_fill(padding, 0.0)
        return logp, completion_mask.float(), ent

    # -- adapters on disk ---------------------------------------------------------------------------
    def adapters(self) -> list[str]:
        return ["default", REFERENCE_ADAPTER] if self.reference == "snapshot" else ["default"]

    def save_adapter(self, folder: Path) -> None:
        """The trained adapter (and the reference snapshot, in snapshot mode) as peft folders."""
        self.model.save_pretrained(str(folder), selected_adapters=self.adapters())

    def load_adapter(self, folder: Path) -> None:
        """Load what save_adapter wrote; a damaged or foreign folder is a clear error."""
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        for name in self.adapters():
            weights = Path(folder) / ("" if name == "default" else name) / "adapter_model.safetensors"
            try:
                state = load_file(str(weights))
            except Exception as err:
                raise ModelLoadError(f"adapter weights at {weights} do not load ({err}); the checkpoint is damaged") from err
            result = set_peft_model_state_dict(self.model, state, adapter_name=name)
            if getattr(result, "unexpected_keys", None):
                raise ModelLoadError(f"adapter at {weights} does not fit model {self.name}: {result.unexpected_keys[:3]}")
        self._train_default_adapter_only()
        self.sync_generation()


def _unsloth_student(model: str, dtype: str, lora: LoraSettings, gradient_checkpointing: bool):
    """(peft model, tokenizer) through Unsloth's own API: its 4-bit loader and get_peft_model (its
    fused LoRA kernels and offloaded gradient checkpointing). CUDA only; it places the model itself."""
    FastLanguageModel = require("unsloth", "use_unsloth (a CUDA machine)", otherwise=(
        "without it the student loads through transformers + peft (use_unsloth=False)")).FastLanguageModel
    base, tokenizer = FastLanguageModel.from_pretrained(model, dtype=getattr(torch, dtype), load_in_4bit=True)
    targets = (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
               if lora.target_modules == "all-linear" else list(lora.target_modules))
    peft_model = FastLanguageModel.get_peft_model(
        base, r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets, bias="none",
        use_gradient_checkpointing="unsloth" if gradient_checkpointing else False)
    tokenizer.padding_side = "left"
    return peft_model, tokenizer
