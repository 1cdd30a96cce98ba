"""The one generation interface every backend implements: `generate` and `score` over batches.
Defines the sample record and prompt rendering; the backends (hf, vllm, openai) live beside it."""

from __future__ import annotations

import functools
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence, Union

Message = dict[str, str]


class TokenIds(tuple):
    """A prompt given as token ids: a partial answer continued exactly as it was sampled (no decode and
    re-encode, which need not give the same tokens back). Backends holding a tokenizer take it as is."""


# A raw text prompt, chat messages, or token ids. A final assistant message is continued, not answered:
# that is how tree search asks for the next chunk of a partial answer.
Prompt = Union[str, Sequence[Message], TokenIds]


class BackendError(RuntimeError):
    """A backend could not do what was asked: an unreachable or failing server, a bad reply, an engine that died.
    What callers may catch and carry on from (a teacher is benched); a missing package is azlib.optional_packages.MissingExtra
    and a bug is whatever it raises, neither caught."""


@dataclass(frozen=True)
class Sample:
    """One generated continuation.

    logprobs are the model's raw log-probabilities of the chosen tokens (temperature 1, no top-p),
    the quantity PRE and GRPO need, so `score(prompt, token_ids)` reproduces them."""

    text: str
    token_ids: tuple[int, ...]  # may be empty for remote servers that do not return ids
    logprobs: tuple[float, ...]
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class GenerateArgs:
    """One generate call's arguments, checked: n samples per prompt, how to sample them (temperature 0 is greedy), and
    when each ends (stop strings end a sample and are cut from its text)."""

    n: int = 1
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # End a row at its first answer line ('#### N' and a newline). A saving, not a meaning: the text
    # is cut there anyway by whoever reads the answer (azlib.rewards.complete_answer); backends that
    # cannot stop on a pattern (vLLM, remote servers) generate on to EOS or the limit.
    stop_at_answer: bool = False

    def __post_init__(self):
        if self.n < 1 or self.max_new_tokens < 1:
            raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got n={self.n}, max_new_tokens={self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")


class Resource:
    """Something holding an engine, processes, connections or memory until `close()` (idempotent);
    `with thing:` closes it at the end of the block, however the block ends."""

    def close(self) -> None:
        """Release what this holds; calling it again does nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Backend(Resource, ABC):
    """generate(prompts, n, ...) -> one list of n samples per prompt; score -> log-probs per token."""

    name: str
    tokenizer = None  # the model's HF tokenizer (its ids' EOS and newlines); None for a remote model known by name
    # How many prompts a caller with many (an evaluation) hands one generate call: a few of the backend's own
    # batches at a time, so progress shows; None: all at once, for an engine that schedules its own batches.
    prompts_per_call: int | None = 64

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        n: int = 1,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        stop_at_answer: bool = False,
    ) -> list[list[Sample]]:
        return self._generate(list(prompts), GenerateArgs(n, max_new_tokens, temperature, top_p, tuple(stop or ()),
                                                          seed, stop_at_answer))

    @abstractmethod
    def _generate(self, prompts: list[Prompt], args: GenerateArgs) -> list[list[Sample]]:
        """The backend's batched generation; `args` are already validated."""

    @abstractmethod
    def score(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]) -> list[list[float]]:
        """Teacher-forced log-probs of each continuation's tokens after its prompt."""

    def _known_tokenizer(self):
        if self.tokenizer is None:
            raise BackendError(f"the {self.name} backend has no tokenizer: token ids need a local hf or vllm backend")
        return self.tokenizer

    @functools.cached_property
    def eos_ids(self) -> set[int]:
        """The ids that end a sample: the tokenizer's EOS (the hf backend adds its model's generation config's)."""
        return {self._known_tokenizer().eos_token_id}

    def writes_newline(self, token: int) -> bool:
        """Whether `token` writes a newline (where a line, and so an answer line, can end)."""
        return writes_newline(self._known_tokenizer(), token)

    def with_eos(self, ids: Sequence[int], finished: bool) -> list[int]:
        """Ids as trained: an EOS id after a finished answer not ending in one (so the student learns to stop)."""
        ids = list(ids)
        return ids + [self.tokenizer.eos_token_id] if finished and not (ids and ids[-1] in self.eos_ids) else ids


_NEWLINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {token id: writes a newline}


def writes_newline(tokenizer, token: int) -> bool:
    """Whether `token` writes a newline (where a line, and so an answer line, can end), its text decoded once per
    tokenizer. A model's vocabulary can be wider than its tokenizer's (Qwen2.5 pads 151,665 to 151,936): ids past
    the tokenizer's write nothing."""
    known = _NEWLINES.setdefault(tokenizer, {})
    if token not in known:
        known[token] = token < len(tokenizer) and "\n" in tokenizer.decode([token])
    return known[token]


def one_call_at_a_time(method):
    """For backends holding a model in this process (tokenizers and engines are not thread-safe): calls
    through `self.lock` run one at a time, so threads (teachers, a server, the student) can share one."""

    @functools.wraps(method)
    def serialised(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)

    return serialised


class TokenizerPrompts:
    """Prompt rendering shared by the backends that hold an HF tokenizer (hf, vllm)."""

    def render(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        messages = list(prompt)
        continue_final = bool(messages) and messages[-1]["role"] == "assistant"
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=not continue_final,
                                                      continue_final_message=continue_final)
        except Exception as err:  # jinja2's TemplateError: some templates (Gemma 2) refuse a system turn
            if not (messages and messages[0]["role"] == "system" and "system" in str(err).lower()):
                raise
        return self.render(without_system_turn(messages))

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, TokenIds):
            return list(prompt)
        # A chat template already wrote the special tokens; raw text gets the model's usual ones.
        return self.tokenizer(self.render(prompt), add_special_tokens=isinstance(prompt, str))["input_ids"]

    def sample_text(self, ids: Sequence[int], stop: Sequence[str]) -> str:
        """The text of sampled ids, cut before the earliest stop string: the hf and vllm backends and the server write
        a sample's text with it (vLLM's own text holds back a trailing partial UTF-8 character that a decode of the ids writes as U+FFFD)."""
        return cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), stop)[0]

    def encode_continuation(self, continuation: str | Sequence[int]) -> list[int]:
        if isinstance(continuation, str):
            return self.tokenizer(continuation, add_special_tokens=False)["input_ids"]
        return list(continuation)

    def scoring_ids(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]):
        """(prompts' token ids, continuations' token ids) for `score`."""
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        return [self.encode_prompt(p) for p in prompts], [self.encode_continuation(c) for c in continuations]


def without_system_turn(messages: Sequence[Message]) -> list[Message]:
    """The system message folded into the first user message, for chat templates without a system role."""
    system, user, *rest = messages
    return [{"role": "user", "content": f"{system['content']}\n\n{user['content']}"}, *rest]


def cut_at_stop(text: str, stop: Sequence[str] | None) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cuts = [i for s in stop or () if (i := text.find(s)) >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)
