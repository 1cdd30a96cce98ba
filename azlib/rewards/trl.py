"""azlib's rewards with TRL's reward-function signature, f(prompts, completions, **columns) -> floats,
for users who train with TRL's GRPOTrainer. Thin adapters; the rewards themselves live beside."""

from __future__ import annotations

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
