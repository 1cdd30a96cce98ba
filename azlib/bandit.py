"""Prompt bandits: a tabular softmax policy answers each prompt with a short sequence of tokens. A hand-checkable model
of GRPO, REINFORCE and PPO (every expectation is exact); not a language model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from azlib import grpo


@dataclass(frozen=True)
class Bandit:
    """Reward 1 when every token of the answer is the prompt's correct one, else 0 (a verifier). Shapes throughout:
    R runs (seeds) trained at once, P prompts, K answer tokens, answers of length L, and S = sum_{l<L} K^l states,
    one row of K logits per (prompt, answer prefix)."""

    correct: torch.Tensor  # [P, L] correct token per prompt and position
    num_tokens: int  # K

    @classmethod
    def from_answers(cls, correct: list[int] | list[list[int]], num_tokens: int) -> Bandit:
        table = torch.tensor(correct, dtype=torch.long)
        return cls(table[:, None] if table.ndim == 1 else table, num_tokens)

    @property
    def num_prompts(self) -> int:
        return self.correct.shape[0]

    @property
    def length(self) -> int:
        return self.correct.shape[1]

    @property
    def num_states(self) -> int:
        return sum(self.num_tokens**l for l in range(self.length))

    def state_index(self, prefix: torch.Tensor) -> torch.Tensor:
        """Row of the logits table for an answer prefix [..., l]: offset of length l + base-K code."""
        l = prefix.shape[-1]
        offset = sum(self.num_tokens**j for j in range(l))
        code = torch.zeros(prefix.shape[:-1], dtype=torch.long)
        for j in range(l):
            code = code * self.num_tokens + prefix[..., j]
        return offset + code

    def reward(self, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        return (answers == self.correct[prompts]).all(-1).float()

    def all_answers(self) -> torch.Tensor:
        """Every possible answer, [K^L, L], for exact expectations."""
        grids = torch.meshgrid(*[torch.arange(self.num_tokens)] * self.length, indexing="ij")
        return torch.stack([g.reshape(-1) for g in grids], -1)


def reward_label(bandit: Bandit) -> str:
    """The plots' name for the expected reward, read from the reward the bandit has: "every token right" only while
    its reward is 1 for the answers with every token right and 0 for all others (a partial credit is not)."""
    answers = bandit.all_answers()
    prompts = torch.arange(bandit.num_prompts)[:, None].expand(-1, len(answers))
    every = answers.expand(bandit.num_prompts, -1, -1)
    rewards = bandit.reward(prompts, every).float()
    all_right = (every == bandit.correct[:, None]).all(-1).float()
    return "expected reward (every token right)" if torch.equal(rewards, all_right) else \
        "expected reward (the Bandit's reward)"


def init_logits(bandit: Bandit, num_runs: int) -> torch.Tensor:
    """Uniform policies, [R, P, S, K] (also the fixed reference policy)."""
    return torch.zeros(num_runs, bandit.num_prompts, bandit.num_states, bandit.num_tokens)


def token_logprobs(logits: torch.Tensor, bandit: Bandit, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """log pi(a_l | prompt, a_<l) for answers [R, B, L] to prompts [R, B]; differentiable, [R, B, L]."""
    table = torch.log_softmax(logits, -1)
    runs = torch.arange(logits.shape[0])[:, None]
    return torch.stack(
        [table[runs, prompts, bandit.state_index(answers[..., :l]), answers[..., l]] for l in range(bandit.length)], -1
    )


def sample(logits: torch.Tensor, bandit: Bandit, prompts: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Draw answers [R, B, L] token by token (inverse-CDF sampling, reproducible from `generator`)."""
    runs = torch.arange(logits.shape[0])[:, None]
    answers = torch.zeros(*prompts.shape, 0, dtype=torch.long)
    for _ in range(bandit.length):
        probs = torch.softmax(logits[runs, prompts, bandit.state_index(answers)], -1)
        u = torch.rand(*prompts.shape, 1, generator=generator)
        token = (probs.cumsum(-1) < u).sum(-1).clamp(max=bandit.num_tokens - 1)
        answers = torch.cat([answers, token[..., None]], -1)
    return answers


@torch.no_grad()
def diagnostics(logits: torch.Tensor, reference: torch.Tensor, bandit: Bandit) -> dict[str, torch.Tensor]:
    """Exact per-run values, averaged over prompts: expected reward, KL(pi || ref) and entropy of
    whole answers, and P(correct token at position l | correct prefix) for each l."""
    runs, prompts = logits.shape[0], bandit.num_prompts
    answers = bandit.all_answers()
    prompt_ids = torch.arange(prompts)[:, None].expand(prompts, len(answers))
    batch_prompts = prompt_ids.reshape(1, -1).expand(runs, -1)
    batch_answers = answers.repeat(prompts, 1).expand(runs, -1, -1)
    logp = token_logprobs(logits, bandit, batch_prompts, batch_answers).sum(-1)
    ref_logp = token_logprobs(reference, bandit, batch_prompts, batch_answers).sum(-1)
    p = logp.exp()
    out = {
        "reward": (p * bandit.reward(batch_prompts, batch_answers)).sum(-1) / prompts,
        "kl": (p * (logp - ref_logp)).sum(-1) / prompts,
        "entropy": -(p * logp).sum(-1) / prompts,
    }
    correct = bandit.correct.expand(runs, -1, -1)
    correct_logp = token_logprobs(logits, bandit, torch.arange(prompts).expand(runs, -1), correct)
    for l in range(bandit.length):
        out[f"p_correct_token{l + 1}"] = correct_logp[..., l].exp().mean(-1)
    return out


# --- advantages and loss: azlib.grpo's own, the code that trains the student ------------------------


def group_advantages(rewards: torch.Tensor, scale: Literal["group", "none"] = "group") -> torch.Tensor:
    """GRPO (DeepSeekMath): A_i = (r_i - mean(r)) / (std(r) + 1e-4) over the G answers of one prompt
    (scale "none": Dr. GRPO, no division). rewards [..., G]; each row is a group for azlib.grpo."""
    flat = rewards.reshape(-1, rewards.shape[-1])
    groups = torch.arange(flat.shape[0]).repeat_interleave(flat.shape[1])
    return grpo.group_advantages(flat.flatten(), groups, scale).view(rewards.shape)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_epsilon: float,
    beta: float,
) -> torch.Tensor:
    """azlib.grpo's token loss (clipped ratio, k3 KL to the reference with TRL's ratio correction),
    averaged over each run's tokens and summed over runs (runs are independent). logp etc.: [R, B, L];
    advantages [R, B], the same for every token of an answer (sequence-level reward)."""
    runs, batch, length = logp.shape
    settings = grpo.GRPOSettings(beta=beta, epsilon_low=clip_epsilon, epsilon_high=clip_epsilon)
    per_token = grpo.token_losses(logp.reshape(-1, length), old_logp.reshape(-1, length),
                                  ref_logp.reshape(-1, length), advantages.reshape(-1), settings).loss
    return per_token.view(runs, batch, length).mean(dim=(1, 2)).sum()


# --- algorithms and the training loop ------------------------------------------------------------


@dataclass(frozen=True)
class Algorithm:
    """How a batch of G answers to one prompt becomes an update.

    advantage: "reward" (REINFORCE, A = r), "baseline" (A = r - running mean reward of the prompt),
    "group" (GRPO's group-normalised A), "group_mean" (Dr. GRPO: r - group mean, no std division).
    epochs > 1 reuses the batch with the clipped ratio (PPO)."""

    name: str
    advantage: Literal["reward", "baseline", "group", "group_mean"]
    epochs: int = 1
    clip_epsilon: float = 0.2
    beta: float = 0.0


def standard_algorithms(beta: float, clip_epsilon: float, ppo_epochs: int) -> list[Algorithm]:
    """The algorithms compared in notebook 01, all fed the same G answers per update."""
    return [
        Algorithm("REINFORCE", "reward"),
        Algorithm("REINFORCE + baseline", "baseline"),
        Algorithm("PPO (clipped)", "baseline", epochs=ppo_epochs, clip_epsilon=clip_epsilon),
        Algorithm("GRPO", "group", clip_epsilon=clip_epsilon, beta=beta),
        Algorithm("GRPO without std (Dr. GRPO)", "group_mean", clip_epsilon=clip_epsilon, beta=beta),
    ]


@dataclass
class History:
    """Diagnostics after every update: metric -> array [updates + 1, runs]; samples drawn so far."""

    samples: np.ndarray
    metrics: dict[str, np.ndarray] = field(default_factory=dict)

    def final(self, metric: str) -> float:
        return float(self.metrics[metric][-1].mean())

    def samples_to_reach(self, metric: str, level: float) -> float:
        """Answers sampled until the seed-mean of `metric` first reaches `level` (inf if never)."""
        hit = np.flatnonzero(self.metrics[metric].mean(1) >= level)
        return float(self.samples[hit[0]]) if len(hit) else float("inf")


def train(
    bandit: Bandit,
    algorithm: Algorithm,
    *,
    group_size: int,
    num_updates: int,
    learning_rate: float,
    num_runs: int,
    seed: int,
    baseline_rate: float = 0.1,
) -> History:
    """Each update: every run picks a random prompt, samples G answers, takes `epochs` SGD steps."""
    generator = torch.Generator().manual_seed(seed)
    logits = init_logits(bandit, num_runs).requires_grad_()
    reference = logits.detach().clone()
    baseline = torch.zeros(num_runs, bandit.num_prompts)
    runs = torch.arange(num_runs)

    def record(values: dict[str, torch.Tensor]) -> None:
        for k, v in values.items():
            history.metrics.setdefault(k, []).append(v.numpy().copy())

    history = History(samples=np.arange(num_updates + 1) * group_size)
    record(diagnostics(logits, reference, bandit))
    for _ in range(num_updates):
        prompt = torch.randint(bandit.num_prompts, (num_runs,), generator=generator)
        prompts = prompt[:, None].expand(num_runs, group_size)
        with torch.no_grad():
            answers = sample(logits, bandit, prompts, generator)
            rewards = bandit.reward(prompts, answers)
            old_logp = token_logprobs(logits, bandit, prompts, answers)
            ref_logp = token_logprobs(reference, bandit, prompts, answers)
        if algorithm.advantage in ("group", "group_mean"):
            advantages = group_advantages(rewards, "group" if algorithm.advantage == "group" else "none")
        elif algorithm.advantage == "baseline":
            advantages = rewards - baseline[runs, prompt][:, None]
        else:
            advantages = rewards
        for _ in range(algorithm.epochs):
            logp = token_logprobs(logits, bandit, prompts, answers)
            loss = policy_loss(logp, old_logp, ref_logp, advantages, algorithm.clip_epsilon, algorithm.beta)
            (grad,) = torch.autograd.grad(loss, logits)
            with torch.no_grad():
                logits -= learning_rate * grad
        baseline[runs, prompt] += baseline_rate * (rewards.mean(-1) - baseline[runs, prompt])
        record(diagnostics(logits, reference, bandit))

    history.metrics = {k: np.stack(v) for k, v in history.metrics.items()}
    return history
