"""The transformers backend, the CPU default: prompts in length-sorted batches through azlib's decode loop, and
teacher-forced scoring in micro-batches within a memory budget (azlib.models.shared_prompts, as the loss)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import torch

from azlib.models.decoding import decode
from azlib.models.generation import (
    Backend, GenerateArgs, Prompt, Sample, TokenizerPrompts, cut_at_stop, one_call_at_a_time,
)
from azlib.models.loading import free_memory, load_model
from azlib.models.shared_prompts import SCORING_MEMORY, completion_logprobs
from azlib.prompts import ANSWER_LINE

BATCH_SIZE = 32  # rows per decode or scoring forward, unless a caller says otherwise
MOST_ROWS = 256  # rows per decode batch at most when sized by memory (decode is overhead-bound: rows are speed)


def eos_ids(model, tokenizer) -> set[int]:
    """The ids that end a sample of a transformers model: its generation config's EOS ids and its tokenizer's."""
    eos = model.generation_config.eos_token_id
    return {*(eos if isinstance(eos, list) else [eos]), tokenizer.eos_token_id} - {None}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of one token's keys and values over every layer: the hf decode loop's cache, and vLLM's."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


class HFBackend(TokenizerPrompts, Backend):
    name = "hf"

    def __init__(self, model: str, *, dtype: str = "float32", device: str = "cpu", batch_size: int = BATCH_SIZE,
                 adapter: str | None = None, scoring_memory: int = SCORING_MEMORY):
        """adapter: a peft LoRA folder (e.g. a trained teacher's, notebook 06) merged into the weights.
        batch_size: rows per generation batch; scoring_memory: bytes of fp32 logits per scoring forward."""
        weights, tokenizer = load_model(model, dtype=dtype, device=device)
        if adapter is not None:
            from peft import PeftModel

            weights = PeftModel.from_pretrained(weights, adapter).merge_and_unload()
        self._attach(weights, tokenizer, device, batch_size, scoring_memory)
        self.owns_weights = True

    @classmethod
    def wrapping(cls, model, tokenizer, *, device: str = "cpu", batch_size: int = BATCH_SIZE,
                 scoring_memory: int = SCORING_MEMORY) -> HFBackend:
        """A backend over a model already in memory (the student being trained: no second copy)."""
        backend = cls.__new__(cls)
        backend._attach(model, tokenizer, device, batch_size, scoring_memory)
        backend.owns_weights = False
        return backend

    @one_call_at_a_time
    def use_adapter(self, folder: str | Path | None) -> None:
        """Generate and score with the peft LoRA adapter saved in `folder` on this backend's weights, kept apart
        from them as a student trains it (in its own dtype), or with the weights alone (None): one backend
        answers for a base model and each of its adapters in turn. Only a backend that loaded its weights."""
        from peft import PeftModel

        if not self.owns_weights:
            raise ValueError("this backend wraps a model it does not own (a student's): change the student's adapter")
        if isinstance(self.model, PeftModel):
            self.model = self.model.unload()  # the LoRA layers out, the weights as loaded
        if folder is not None:
            self.model = PeftModel.from_pretrained(self.model, str(folder)).eval()

    def _attach(self, model, tokenizer, device: str, batch_size: int, scoring_memory: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.lock = threading.RLock()
        self.batch_size, self.scoring_memory = batch_size, scoring_memory
        self.device = device
        self.eos_ids = eos_ids(model, tokenizer)

    @one_call_at_a_time
    def close(self) -> None:
        """Drop this backend's reference to the weights: their memory comes back once nothing else holds
        them (a student's backend wraps the student's own model, which the student keeps)."""
        self.model = None
        free_memory()

    @property
    def context_tokens(self) -> int:
        """Prompt and new tokens together can be at most this long (the model's position embeddings)."""
        return self.model.config.max_position_embeddings

    @property
    def prompts_per_call(self) -> int:
        """Prompts an evaluation hands over at once: at least one whole decode batch."""
        return max(Backend.prompts_per_call, self.batch_size)

    def size_batches(self, tokens: int, memory: float) -> int:
        """Decode in batches as wide as `memory` bytes of KV cache allow for rows of `tokens` tokens (prompt and
        answer), between BATCH_SIZE and MOST_ROWS; returns the rows. On a GPU the decode loop's time per step
        hardly grows with its rows (docs/gpu.md, measured), so wider batches answer a set sooner."""
        config = self.model.config.get_text_config()
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        per_token = kv_bytes_per_token(config.num_hidden_layers, getattr(config, "num_key_value_heads", heads),
                                       head_dim, self.model.dtype.itemsize)
        self.batch_size = int(min(MOST_ROWS, max(BATCH_SIZE, memory // (per_token * tokens))))
        return self.batch_size

    def _batches(self, rows: list[list[int]]):
        """Index batches of rows sorted by length, so a batch pads little."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def _stop_check(self, args: GenerateArgs):
        """`is_done(new_tokens)` for the decode loop: a stop string in the newest text, or an answer line
        ended by the newest token (checked only when that token writes a newline)."""
        window = max((len(s) for s in args.stop), default=0)  # every token writes at least one character

        def is_done(tokens: list[int]) -> bool:
            if window and cut_at_stop(self.tokenizer.decode(tokens[-window:], skip_special_tokens=True), args.stop)[1]:
                return True
            return (args.stop_at_answer and self.writes_newline(tokens[-1])
                    and bool(ANSWER_LINE.search(self.tokenizer.decode(tokens, skip_special_tokens=True))))

        return is_done if window or args.stop_at_answer else None

    @torch.no_grad()
    @one_call_at_a_time
    def _generate(self, prompts: list[Prompt], args: GenerateArgs) -> list[list[Sample]]:
        """Samples depend on the seed and on how prompts fall into batches (one generator per call)."""
        generator = torch.Generator(self.model.device)
        generator.manual_seed(args.seed if args.seed is not None else int(torch.randint(2**62, ())))
        n = args.n
        rows = [ids for ids in (self.encode_prompt(p) for p in prompts) for _ in range(n)]
        samples: list[Sample | None] = [None] * len(rows)
        for batch in self._batches(rows):
            decoded = decode(self.model, [rows[i] for i in batch], max_new_tokens=args.max_new_tokens,
                             eos_ids=self.eos_ids, pad_id=self.tokenizer.pad_token_id,
                             temperature=args.temperature, top_p=args.top_p,
                             is_done=self._stop_check(args), generator=generator)
            for i, d in zip(batch, decoded):
                samples[i] = Sample(self.sample_text(d.tokens, args.stop), tuple(d.tokens), tuple(d.logprobs),
                                    "stop" if d.finished else "length", len(rows[i]), len(d.tokens))
        return [samples[p * n : (p + 1) * n] for p in range(len(prompts))]

    @torch.no_grad()
    @one_call_at_a_time
    def score(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]) -> list[list[float]]:
        prompt_ids, conts = self.scoring_ids(prompts, continuations)
        scores: list[list[float]] = [[] for _ in conts]
        scored = [i for i, c in enumerate(conts) if c]  # an empty continuation has nothing to score
        if scored:  # the log-prob computation the training loss uses: a prompt shared by several rows runs once
            logp, _, _ = completion_logprobs(self.model, [prompt_ids[i] for i in scored], [conts[i] for i in scored],
                                             self.tokenizer.pad_token_id, self.device, memory=self.scoring_memory)
            logp = logp.cpu()
            for j, i in enumerate(scored):
                scores[i] = logp[j, : len(conts[i])].tolist()
        return scores
