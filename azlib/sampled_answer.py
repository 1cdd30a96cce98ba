"""A whole answer as the student sampled it: token ids (what training reads), log-probs, text decoded once, reward
scored once. The text search and the forking tree make their answers here; azlib.grpo.Rollout holds one to train."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from azlib.models.generation import Backend
from azlib.rewards import RewardBreakdown, RewardKind, RewardWeights, answer_reward, complete_answer, perplexity_reward


@dataclass(frozen=True)
class Answer:
    """A whole answer as sampled, scored once (scored_answer). `token_ids` are the sampled ids up to its answer
    line (what training reads) and `text` their decoding; `logprobs` the raw log-probs of those ids, as their writer
    sampled them (after a hint fork: the hint teacher's, under its prompt; after a teacher's chunk or fork: the
    student's own, scored under its plain prompt, since the teacher's tokenizer need not be the student's); `eos`:
    an end-of-sequence id follows it in training (finished by its writer, not by a terminal checker's verdict)."""

    problem: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finished: bool
    eos: bool
    reward: float
    correct: bool
    breakdown: RewardBreakdown  # the reward's parts (its total is `reward`)
    # who wrote the tokens after its fork point: "student", "hint", or "<teacher>:<label>" (ForkSettings.writer)
    writer: str = "student"


def scored_answer(backend: Backend, problem: int, gold: str, ids: Sequence[int], logprobs: Sequence[float],
                  ended: bool, *, kind: RewardKind, weights: RewardWeights, pres: Sequence[float] | None = None,
                  code: str = "", writer: str = "student", terminal: bool = False) -> Answer:
    """Sampled ids as a whole answer and its reward: the ids decoded once, cut at the answer line (the ids end at the
    id that writes its last character), scored. `ended`: the writer stopped (EOS or the answer line); `pres`: the
    PRE of each step (a search path's), default one step, the answer's own tokens; `terminal`: the combined reward
    counts HRE at any terminal (a depth or token cap too), the correctness reward only for a finished answer."""
    whole = backend.tokenizer.decode(ids, skip_special_tokens=True)
    text, finished = complete_answer(whole, ended)
    kept = len(ids) if text == whole else ids_writing(backend, ids, len(text))
    ids, logprobs = tuple(ids[:kept]), tuple(logprobs[:kept])
    r = answer_reward(text, gold, finished=finished or (terminal and kind == "combined"), kind=kind, weights=weights,
                      step_pres=[perplexity_reward(logprobs)] if pres is None else pres, path_code=code)
    return Answer(problem, ids, logprobs, text, finished, finished, r.total, finished and r.hre == 1.0, r, writer)


def ids_writing(backend: Backend, ids: Sequence[int], chars: int) -> int:
    """How many of `ids` write the first `chars` characters of their text: the fewest whose decoding begins with those
    characters (all of them when none does), found by bisection, since a longer prefix keeps every character a
    shorter one wrote. Counting characters is not enough: a prefix that ends inside a character's bytes (byte-level
    tokens split "×" in two) decodes to a replacement character in its place."""
    decode = backend.tokenizer.decode
    written = decode(ids, skip_special_tokens=True)[:chars]
    low, high = 0, len(ids)
    while low < high:
        middle = (low + high) // 2
        if decode(ids[:middle], skip_special_tokens=True).startswith(written):
            high = middle
        else:
            low = middle + 1
    return low
