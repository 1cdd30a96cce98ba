"""azlib's rewards with TRL's reward-function signature, f(prompts, completions, **columns) -> floats, and the checks
that let such a function join azlib's training (Trainer.add_reward). Thin adapters; the rewards live beside."""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Callable, Sequence

from azlib.rewards.components import hard_reward, perplexity_reward

RewardFunction = Callable[..., list[float]]


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """TRL passes plain strings, or for conversational data a list with the assistant message."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def correctness_reward(prompts: Sequence, completions: Sequence, answer: Sequence[str], **columns) -> list[float]:
    """HRE per completion; `answer` is the dataset column of gold numbers (the kit's row schema)."""
    return [hard_reward(completion_text(c), gold) for c, gold in zip(completions, answer)]


def perplexity_reward_under(backend) -> RewardFunction:
    """PRE per completion, scored by `backend` (the student): mean token log-prob given the prompt."""

    def perplexity_reward_fn(prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        scores = backend.score(list(prompts), [completion_text(c) for c in completions])
        return [perplexity_reward(s) for s in scores]

    return perplexity_reward_fn


def reward_name(function: RewardFunction) -> str:
    """The name a reward function's values are logged under (TRL's too): its __name__."""
    return getattr(function, "__name__", type(function).__name__)


def check_reward_function(function: RewardFunction, keywords: Sequence[str]) -> None:
    """Fail early, with the fix, when `function` cannot be called as TRL calls it: keywords `prompts` and
    `completions`, and one keyword per other column (`keywords`), which `**kwargs` takes when unnamed."""
    if not callable(function):
        raise TypeError(f"a reward function must be callable, got {function!r}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C callable: its first call will say
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [k for k in ("prompts", "completions", *keywords) if k not in params and not takes_any]
    if missing:
        raise TypeError(f"reward function {reward_name(function)!r} cannot take the keyword(s) {', '.join(missing)}; "
                        f"write it with TRL's signature: def {reward_name(function)}(prompts, completions, **kwargs)")


def call_reward(function: RewardFunction, prompts: Sequence, completions: Sequence[str], **columns) -> list[float]:
    """`function(prompts=..., completions=..., **columns)` as TRL's GRPOTrainer calls it (each column a list,
    one entry per completion), checked: a list of one finite number per completion, in order. TRL reads None
    as "no reward from this function"; azlib needs a number for every completion, so None is an error."""
    name, n = reward_name(function), len(completions)
    values = function(prompts=prompts, completions=completions, **columns)
    if not isinstance(values, (list, tuple)) and not hasattr(values, "tolist"):
        raise TypeError(f"reward function {name!r} returned {type(values).__name__}; it must return a list of "
                        f"{n} floats, one per completion")
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    if not isinstance(values, list) or len(values) != n:
        got = len(values) if isinstance(values, list) else "a scalar"
        raise ValueError(f"reward function {name!r} returned {got} rewards for {n} completions; it must return "
                         "exactly one per completion, in the order given")
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Real):
            raise TypeError(f"reward function {name!r} returned {v!r} ({type(v).__name__}) for completion {i}; "
                            "every reward must be a number (float)")
        if not math.isfinite(v):
            raise ValueError(f"reward function {name!r} returned {v} for completion {i}; rewards must be finite")
    return [float(v) for v in values]
