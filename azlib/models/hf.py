"""The transformers backend: batched generation with left padding and KV cache, and scoring.
The CPU default; it reads raw token log-probs during generation, without a second forward pass."""

from __future__ import annotations

import functools
import threading
from typing import Sequence

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from azlib.models.generation import (
    Backend, Prompt, Sample, Sampling, TokenizerPrompts, cut_at_stop, one_call_at_a_time,
)
from azlib.models.loading import load_model
from azlib.prompts import ANSWER_LINE

MIN_SHARED_PREFIX = 16  # tokens; below this a separate prefix pass costs more than it saves


class _ChosenTokenLogprobs(LogitsProcessor):
    """Sits first in the processor list, so it sees the raw logits of each step; at the next step
    `input_ids` ends with the token chosen from them, whose log-prob it then keeps. O(batch x vocab)."""

    def __init__(self):
        self.previous: torch.Tensor | None = None
        self.chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._keep(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float(), -1)
        return scores

    def _keep(self, tokens: torch.Tensor) -> None:
        if self.previous is not None:
            self.chosen.append(self.previous.gather(-1, tokens[:, None]).squeeze(-1))

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[batch, steps] log-probs once generation has ended with `last_tokens`."""
        self._keep(last_tokens)
        return torch.stack(self.chosen, 1)


class _AnswerLineStop(StoppingCriteria):
    """Ends a row once its new text holds an answer line; checked only on steps that wrote a newline."""

    def __init__(self, tokenizer, newline: torch.Tensor, prompt_width: int):
        self.tokenizer, self.newline, self.prompt_width = tokenizer, newline, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for row in self.newline[input_ids[:, -1].cpu()].nonzero().flatten().tolist():
            text = self.tokenizer.decode(input_ids[row, self.prompt_width :], skip_special_tokens=True)
            done[row] = bool(ANSWER_LINE.search(text))
        return done


class HFBackend(TokenizerPrompts, Backend):
    name = "hf"

    def __init__(self, model: str, *, dtype: str = "float32", device: str = "cpu", batch_size: int = 32):
        self._attach(*load_model(model, dtype=dtype, device=device), device, batch_size)

    @classmethod
    def wrapping(cls, model, tokenizer, *, device: str = "cpu", batch_size: int = 32) -> HFBackend:
        """A backend over a model already in memory (the student being trained: no second copy)."""
        backend = cls.__new__(cls)
        backend._attach(model, tokenizer, device, batch_size)
        return backend

    def _attach(self, model, tokenizer, device: str, batch_size: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.lock = threading.RLock()
        self.batch_size = batch_size
        self.device = device
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = {*(eos if isinstance(eos, list) else [eos]), self.tokenizer.eos_token_id} - {None}

    @functools.cached_property
    def newline_tokens(self) -> torch.Tensor:
        """Which vocabulary entries write a newline (where an answer line can end)."""
        return torch.tensor(["\n" in self.tokenizer.decode([i]) for i in range(len(self.tokenizer))])

    def _batches(self, rows: list[list[int]]):
        """Index batches of rows sorted by length, so a batch pads little."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def _left_pad(self, rows: list[list[int]], shared: int = 0) -> dict[str, torch.Tensor]:
        """Pad rows to one width: [shared prefix][pads][rest of the row]. The mask hides the pads and
        positions follow the mask, so a row's tokens sit where they would without padding."""
        width = max(len(r) for r in rows) - shared
        pad = self.tokenizer.pad_token_id
        ids = [r[:shared] + [pad] * (width - len(r) + shared) + r[shared:] for r in rows]
        mask = [[1] * shared + [0] * (width - len(r) + shared) + [1] * (len(r) - shared) for r in rows]
        return {"input_ids": torch.tensor(ids, device=self.device), "attention_mask": torch.tensor(mask, device=self.device)}

    def _prefix_cache(self, rows: list[list[int]]) -> tuple[int, DynamicCache | None]:
        """KV cache of the prompt prefix all rows share (few-shot examples, a problem and its partial
        answer during search), computed once instead of once per row."""
        shared = 0
        shortest = min(len(r) for r in rows) - 1  # every row keeps one uncached token to start from
        while shared < shortest and all(r[shared] == rows[0][shared] for r in rows):
            shared += 1
        if len(rows) < 2 or shared < MIN_SHARED_PREFIX:
            return 0, None
        prefix = torch.tensor([rows[0][:shared]], device=self.device)
        cache = self.model(prefix, use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(rows))
        return shared, cache

    @torch.no_grad()
    @one_call_at_a_time
    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Sample]]:
        """Samples depend on the seed and on how prompts fall into batches (global torch RNG)."""
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        n = sampling.n
        rows = [ids for ids in (self.encode_prompt(p) for p in prompts) for _ in range(n)]
        samples: list[Sample | None] = [None] * len(rows)
        for batch in self._batches(rows):
            for i, sample in zip(batch, self._generate_batch([rows[i] for i in batch], sampling)):
                samples[i] = sample
        return [samples[p * n : (p + 1) * n] for p in range(len(prompts))]

    def _generate_batch(self, rows: list[list[int]], sampling: Sampling) -> list[Sample]:
        recorder = _ChosenTokenLogprobs()
        processors = [recorder]
        if sampling.temperature > 0:  # our own warpers, after the recorder, so it sees raw logits
            processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1:
                processors.append(TopPLogitsWarper(sampling.top_p))
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens, do_sample=sampling.temperature > 0, top_k=None, top_p=None,
            temperature=None, eos_token_id=sorted(self.eos_ids), pad_token_id=self.tokenizer.pad_token_id,
            stop_strings=list(sampling.stop) or None,
        )
        shared, cache = self._prefix_cache(rows)
        inputs = self._left_pad(rows, shared)
        width = inputs["input_ids"].shape[1]
        stopping = [_AnswerLineStop(self.tokenizer, self.newline_tokens, width)] if sampling.stop_at_answer else []
        out = self.model.generate(**inputs, past_key_values=cache, generation_config=config,
                                  logits_processor=LogitsProcessorList(processors), tokenizer=self.tokenizer,
                                  stopping_criteria=StoppingCriteriaList(stopping))
        new = out[:, width:]
        logprobs = recorder.finish(new[:, -1])
        return [self._sample(new[r].tolist(), logprobs[r].tolist(), len(rows[r]), sampling)
                for r in range(len(rows))]

    def _sample(self, tokens: list[int], logprobs: list[float], prompt_tokens: int, sampling: Sampling) -> Sample:
        def stops(text: str) -> bool:
            return cut_at_stop(text, sampling.stop)[1] or (sampling.stop_at_answer and bool(ANSWER_LINE.search(text)))

        end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), None)
        finish = "length" if end is None else "stop"
        tokens = tokens[:end]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if stops(text):  # keep the tokens up to the one that completed the stop (the pads after it are not EOS)
            lo, hi = 1, len(tokens)
            while lo < hi:
                mid = (lo + hi) // 2
                if stops(self.tokenizer.decode(tokens[:mid], skip_special_tokens=True)):
                    hi = mid
                else:
                    lo = mid + 1
            tokens, finish = tokens[:lo], "stop"
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            text = cut_at_stop(text, sampling.stop)[0]
        return Sample(text, tuple(tokens), tuple(logprobs[: len(tokens)]), finish, prompt_tokens, len(tokens))

    @torch.no_grad()
    @one_call_at_a_time
    def score(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]) -> list[list[float]]:
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        conts = [self.encode_continuation(c) for c in continuations]
        rows = [self.encode_prompt(p) + c for p, c in zip(prompts, conts)]
        scores: list[list[float]] = [[] for _ in rows]
        for batch in self._batches(rows):
            keep = max(len(conts[i]) for i in batch) + 1
            if keep == 1:
                continue
            inputs = self._left_pad([rows[i] for i in batch])
            # positions from the mask: left padding must not shift the real tokens' positions
            positions = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            logits = self.model(**inputs, position_ids=positions, logits_to_keep=keep).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1)  # position t predicts token t + 1
            targets = inputs["input_ids"][:, -(keep - 1) :]
            chosen = logp.gather(-1, targets[..., None]).squeeze(-1)
            for j, i in enumerate(batch):
                scores[i] = chosen[j, chosen.shape[1] - len(conts[i]) :].tolist()
        return scores
